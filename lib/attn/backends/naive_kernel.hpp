// The textbook algorithm, written once for any accumulation type A: the
// naive backend instantiates it with A = double/float/storage, the
// reference backend with A = a 50-digit multiprecision float.
//
//   S = Q K^T * scale + mask     (the whole n_q x n_kv matrix of one head)
//   P = softmax(S) per row, shifted by the row max m_i; l_i = sum_j exp(S_ij - m_i)
//   O = P V,   lse_i = m_i + log l_i
// Holds O(n_q * n_kv) scores per call, computed in loops that round every
// operation to A. A fully masked row (m_i = -inf) gives O_i = 0, P_i = 0
// and lse_i = -inf.
#pragma once

#include <string_view>
#include <vector>

#include "attn/registry/backend.hpp"
#include "attn/backends/kernels.hpp"

namespace attn::detail {

template <class A>
std::size_t naive_workspace_bytes(const Shape& s) {
  return piece_bytes<A>(s.n_q * s.n_kv) + piece_bytes<A>(s.d_v);
}

// n values of A from the arena, or owned when A is not trivially copyable
// (the reference's multiprecision type).
template <class A>
class Scratch {
 public:
  Scratch(Arena& arena, std::size_t n) {
    if constexpr (std::is_trivially_copyable_v<A>) {
      data_ = arena.take<A>(n);
    } else {
      owned_.resize(n);
      data_ = owned_.data();
    }
  }
  A* data() { return data_; }

 private:
  std::vector<A> owned_;
  A* data_ = nullptr;
};

template <class S, class A>
Result<S> naive_attention(const Inputs<S>& in, const Options& opt, Workspace& ws, std::string_view backend) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t bytes = naive_workspace_bytes<A>(sh);
  check_workspace(backend, "the n_q x n_kv score matrix of one head", bytes);
  Arena arena(ws, std::is_trivially_copyable_v<A> ? bytes : 0);
  Scratch<A> scores(arena, n_q * n_kv), o_row(arena, d_v);

  Result<S> r = allocate_result<S>(backend, sh, opt, bytes);

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));

  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const S* q = &in.q(b, h, 0, 0);
      const S* k = &in.k(b, h / sh.group(), 0, 0);
      const S* v = &in.v(b, h / sh.group(), 0, 0);
      S* o = &r.out(b, h, 0, 0);
      const A sink = convert<A>(mask.sink(h));

      // S_ij = scale * q_i . k_j, then soft-cap, ALiBi, mask (MaskView::apply),
      // computed only for keys the mask leaves visible
      for (std::size_t i = 0; i < n_q; ++i) {
        A* s_i = scores.data() + i * n_kv;
        const auto keys = mask.keys(b, i);
        scores_loops<A, S>(q + i * d_k, k + keys.begin * d_k, s_i + keys.begin, 1, keys.size(), d_k, scale);
        mask_row(s_i, mask, b, h, i, 0, n_kv, /*simd=*/false);
      }

      for (std::size_t i = 0; i < n_q; ++i) {
        // P_i = softmax(S_i) (the sink in its denominator);  O_i = P_i V
        A* p_i = scores.data() + i * n_kv;
        const RowSoftmax<A> row = softmax_row(p_i, n_kv, false, sink);
        pv_loops<A, S>(p_i, v, o_row.data(), 1, n_kv, d_v, false);
        for (std::size_t c = 0; c < d_v; ++c) o[i * d_v + c] = convert<S>(o_row.data()[c]);
        if (r.weights)
          for (std::size_t j = 0; j < n_kv; ++j) (*r.weights)(b, h, i, j) = convert<double>(p_i[j]);
        if (r.lse) (*r.lse)(b, h, i) = row_lse(row);
      }
    }
  }
  return r;
}

// The backward pass by the explicit formulas of backend.hpp, per head,
// every operation rounded to A in order: P recomputed by the exact softmax
// (the saved logsumexp is not used), dP = dO V^T, D_i = dO_i . O_i from the
// saved output in storage (as every other backend forms it, so the
// 2x-baseline rule compares like with like) or, without one, D_i = sum_j
// P_ij dP_ij (the reference: its P is exact, so D is), dS = P o (dP - D)
// (times the soft-cap's derivative 1 - tanh^2 for dQ, dK), then dQ, dK, dV
// as sums over keys and queries in index order, the g query heads of a K/V
// head in order; d(sink_h) = -sum_i exp(sink_h - lse_i) D_i. Holds P and dS
// of one head: O(n_q n_kv).
template <class A>
std::size_t naive_backward_workspace_bytes(const Shape& s) {
  return 2 * piece_bytes<A>(s.n_q * s.n_kv) + piece_bytes<A>(s.n_kv * s.d_k) + piece_bytes<A>(s.n_kv * s.d_v) +
         piece_bytes<A>(s.d_k) + piece_bytes<A>(s.n_kv);
}

// Which gradient a value belongs to, for naive_backward_into's sink.
enum class Grad { dq, dk, dv, dbias, dsinks };

// Computes the gradients and hands each value, unrounded, to
// sink(Grad, b, h, row, col, value) (d(bias): once per head, b and h of the
// head; d(sinks): once per row, b, h, i of the row and col 0): naive_backward
// rounds them to storage, the 50-digit reference's own check
// (reference_exact.hpp) keeps all 50 digits.
template <class S, class A, class Sink>
void naive_backward_into(const Inputs<S>& in, const xt::xtensor<S, 4>* saved_out, const xt::xtensor<S, 4>& d_out,
                         const Options& opt, Workspace& ws, std::string_view backend, Sink&& sink) {
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t bytes = naive_backward_workspace_bytes<A>(sh);
  check_workspace(backend, "the n_q x n_kv weights and their gradient of one head", bytes);
  Arena arena(ws, std::is_trivially_copyable_v<A> ? bytes : 0);
  Scratch<A> probs(arena, n_q * n_kv), grads(arena, n_q * n_kv), dk(arena, n_kv * d_k), dv(arena, n_kv * d_v),
      dq_row(arena, d_k), cap_slope(arena, n_kv);

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh)), zero = convert<A>(0.0), one = convert<A>(1.0);
  const A minus_inf = neg_infinity<A>();
  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t hk = 0; hk < sh.kv_head_count(); ++hk) {
      const S* k = &in.k(b, hk, 0, 0);
      const S* v = &in.v(b, hk, 0, 0);
      std::fill(dk.data(), dk.data() + n_kv * d_k, zero);
      std::fill(dv.data(), dv.data() + n_kv * d_v, zero);
      for (std::size_t h = hk * sh.group(); h < (hk + 1) * sh.group(); ++h) {
        const S* q = &in.q(b, h, 0, 0);
        const S* d_o = &d_out(b, h, 0, 0);
        const A sink_h = convert<A>(mask.sink(h));
        for (std::size_t i = 0; i < n_q; ++i) {
          // P_i = softmax(scale q_i K^T, soft-capped, + ALiBi + mask_i; the sink in the denominator)
          A* p_i = probs.data() + i * n_kv;
          const auto keys = mask.keys(b, i);
          std::fill(p_i, p_i + n_kv, zero);
          scores_loops<A, S>(q + i * d_k, k + keys.begin * d_k, p_i + keys.begin, 1, keys.size(), d_k, scale);
          if (mask.softcap()) softcap_slope(p_i, cap_slope.data(), n_kv, *mask.softcap(), /*simd=*/false);
          mask_row(p_i, mask, b, h, i, 0, n_kv, /*simd=*/false);
          const RowSoftmax<A> row = softmax_row(p_i, n_kv, false, sink_h);
          // dP_i = dO_i V^T;  D_i = dO_i . O_i (or sum_j P_ij dP_ij);  dS_i = P_i o (dP_i - D_i)
          A* ds_i = grads.data() + i * n_kv;
          scores_loops<A, S>(d_o + i * d_v, v, ds_i, 1, n_kv, d_v, one);
          A d_i = zero;
          if (saved_out) d_i = dot_loops<A>(d_o + i * d_v, &(*saved_out)(b, h, i, 0), d_v);
          else
            for (std::size_t j = 0; j < n_kv; ++j) d_i += p_i[j] * ds_i[j];
          for (std::size_t j = 0; j < n_kv; ++j) ds_i[j] = p_i[j] * (ds_i[j] - d_i);
          if (opt.need_dbias)
            for (std::size_t j = 0; j < n_kv; ++j) sink(Grad::dbias, b, h, i, j, ds_i[j]);
          // d(sink_h) += -P_i,sink D_i, P_i,sink = exp(sink_h - m_i) / l_i
          if (mask.has_sinks() && sink_h > minus_inf && !row.fully_masked)
            sink(Grad::dsinks, b, h, i, 0, A(-(exp_of<A>(A(sink_h - row.m)) / row.l) * d_i));
          if (mask.softcap())
            for (std::size_t j = 0; j < n_kv; ++j) ds_i[j] *= cap_slope.data()[j];
          // dQ_i = scale sum_j dS_ij k_j
          pv_loops<A, S>(ds_i, k, dq_row.data(), 1, n_kv, d_k, false);
          for (std::size_t c = 0; c < d_k; ++c) sink(Grad::dq, b, h, i, c, A(scale * dq_row.data()[c]));
          // dV_j += P_ij dO_i;  dK_j += dS_ij q_i (queries in index order)
          for (std::size_t j = 0; j < n_kv; ++j) {
            for (std::size_t c = 0; c < d_v; ++c) dv.data()[j * d_v + c] += p_i[j] * convert<A>(d_o[i * d_v + c]);
            for (std::size_t c = 0; c < d_k; ++c) dk.data()[j * d_k + c] += ds_i[j] * convert<A>(q[i * d_k + c]);
          }
        }
      }
      for (std::size_t j = 0; j < n_kv; ++j) {
        for (std::size_t c = 0; c < d_k; ++c) sink(Grad::dk, b, hk, j, c, A(scale * dk.data()[j * d_k + c]));
        for (std::size_t c = 0; c < d_v; ++c) sink(Grad::dv, b, hk, j, c, dv.data()[j * d_v + c]);
      }
    }
  }
}

// `saved_out`: the forward's output (naive), or null (the reference).
template <class S, class A>
Gradients<S> naive_backward(const Inputs<S>& in, const xt::xtensor<S, 4>* saved_out, const xt::xtensor<S, 4>& d_out,
                            const Options& opt, Workspace& ws, std::string_view backend) {
  Gradients<S> g = allocate_gradients<S>(in.shape(), opt, naive_backward_workspace_bytes<A>(in.shape()));
  // d(sink_h): each head's rows summed in A, then the batch in double (metrics.hpp's bound; summing every
  // row's term in double left the 50-digit reference 7 ulps off the truth's d(sinks))
  const Shape sh = in.shape();
  std::vector<A> sink_sum(g.dsinks ? sh.batch * sh.heads : 0, A(0));
  naive_backward_into<S, A>(in, saved_out, d_out, opt, ws, backend,
                            [&](Grad which, std::size_t b, std::size_t h, std::size_t row, std::size_t col, const A& x) {
                              switch (which) {
                                case Grad::dq: g.dq(b, h, row, col) = convert<S>(x); break;
                                case Grad::dk: g.dk(b, h, row, col) = convert<S>(x); break;
                                case Grad::dv: g.dv(b, h, row, col) = convert<S>(x); break;
                                case Grad::dbias: (*g.dbias)(row, col) += convert<double>(x); break;
                                case Grad::dsinks: sink_sum[b * sh.heads + h] += x; break;
                              }
                            });
  for (std::size_t x = 0; x < sink_sum.size(); ++x) (*g.dsinks)(x % sh.heads) += convert<double>(sink_sum[x]);
  return g;
}

}  // namespace attn::detail
