// Exact softmax over a slab of query rows at a time, with both products as
// GEMM: the algorithm of the math backend (one slab of all n_q rows) and the
// blocked backend (slabs of B_q rows).
//
//   for each slab of rows i0 .. i0 + B_q:
//     S = Q_slab K^T * scale + mask      [B_q, n_kv'] (n_kv' = the keys any row of the slab sees)
//     P = softmax(S) per row (max-shifted, exact)
//     O_slab = P V
// For fp32/fp64 accumulation P stays unnormalised, P~ = exp(S - m), and
// O_slab = (P~ V) / l row by row: one pass over the n_kv-wide slab fewer
// (the divisions move from B_q x n_kv scores to B_q x d_v outputs).
// Narrower accumulation types normalise P first, so that P~ V cannot leave
// their range.
// Holds O(B_q * n_kv) scores, plus Q/K/V widened to the accumulation type
// when it differs from storage (O((B_q + n_kv) * d)).
#pragma once

#include <string_view>

#include "attn/registry/backend.hpp"
#include "attn/backends/kernels.hpp"

namespace attn::detail {

template <class S, class A>
std::size_t slab_workspace_bytes(const Shape& s, std::size_t block_q) {
  const std::size_t b_q = std::min(block_q, s.n_q);
  return piece_bytes<A>(b_q * s.n_kv) + piece_bytes<A>(b_q * s.d_v) + piece_bytes<A>(b_q) +
         piece_bytes<A>(widen_count<A, S>(b_q * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(s.n_kv * s.d_k)) + piece_bytes<A>(widen_count<A, S>(s.n_kv * s.d_v));
}

template <class S, class A>
Result<S> slab_attention(const Inputs<S>& in, const Options& opt, Workspace& ws, std::size_t block_q,
                         std::string_view backend) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t b_q = std::min(block_q, n_q);
  const std::size_t bytes = slab_workspace_bytes<S, A>(sh, block_q);
  check_workspace(backend, "a B_q x n_kv slab of scores", bytes);
  Arena arena(ws, bytes);
  A* slab = arena.take<A>(b_q * n_kv);
  A* o_slab = arena.take<A>(b_q * d_v);
  A* row_l = arena.take<A>(b_q);  // 1, or the row's sum l when P is left unnormalised (0: fully masked)
  A* q_buf = arena.take<A>(widen_count<A, S>(b_q * d_k));
  A* k_buf = arena.take<A>(widen_count<A, S>(n_kv * d_k));
  A* v_buf = arena.take<A>(widen_count<A, S>(n_kv * d_v));

  Result<S> r = allocate_result<S>(backend, sh, opt, bytes);

  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh)), minus_inf = neg_infinity<A>();

  const A* k = nullptr;
  const A* v = nullptr;
  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      // K/V head h / g, widened once for its g query heads
      if (h % sh.group() == 0) {
        k = as_accumulate(&in.k(b, h / sh.group(), 0, 0), n_kv * d_k, k_buf);
        v = as_accumulate(&in.v(b, h / sh.group(), 0, 0), n_kv * d_v, v_buf);
      }
      const A sink = convert<A>(mask.sink(h));
      for (std::size_t i0 = 0; i0 < n_q; i0 += b_q) {
        const std::size_t rows = std::min(b_q, n_q - i0);
        // Keys [lo, hi) that some row of the slab may see; the rest are masked for all of them.
        const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
        const std::size_t cols = hi - lo;

        // S = Q_slab K[lo:hi]^T * scale + mask
        const A* q = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
        if (cols > 0) scores_tile<A>(q, k + lo * d_k, slab, rows, cols, d_k, scale);
        constexpr bool unnormalised = is_native_float<A>;
        for (std::size_t r_ = 0; r_ < rows; ++r_) {
          // P_i = softmax(S_i), or P~_i = exp(S_i - m_i) and l_i
          A* p_i = slab + r_ * cols;
          mask_row_if_partial(p_i, mask, b, h, i0 + r_, lo, cols);
          RowSoftmax<A> row{};
          if constexpr (unnormalised) {
            // as softmax_row, without the division
            row.m = row_max(p_i, cols);
            if (sink > row.m) row.m = sink;
            row.fully_masked = !(row.m > minus_inf);
            if (row.fully_masked) {
              std::fill(p_i, p_i + cols, convert<A>(0.0));
            } else {
              row.l = exp_shifted_sum(p_i, cols, row.m, /*simd=*/true);
              if (sink > minus_inf) row.l += exp_of<A>(A(sink - row.m));
            }
            row_l[r_] = row.fully_masked ? convert<A>(0.0) : row.l;
          } else {
            row = softmax_row(p_i, cols, /*simd=*/true, sink);
            row_l[r_] = row.fully_masked ? convert<A>(0.0) : convert<A>(1.0);
          }
          if (r.lse) (*r.lse)(b, h, i0 + r_) = row_lse(row);
          if (r.weights) {
            double* w = &(*r.weights)(b, h, i0 + r_, 0);
            std::fill(w, w + n_kv, 0.0);
            if (!row.fully_masked)
              for (std::size_t c = 0; c < cols; ++c) w[lo + c] = convert<double>(A(p_i[c] / row_l[r_]));
          }
        }
        // O_slab = P V[lo:hi] (then / l_i)
        if (cols > 0) pv_tile<A>(slab, v + lo * d_v, o_slab, rows, cols, d_v, false);
        else std::fill(o_slab, o_slab + rows * d_v, convert<A>(0.0));
        S* o = &r.out(b, h, i0, 0);
        for (std::size_t r_ = 0; r_ < rows; ++r_) {
          const bool masked = row_l[r_] == convert<A>(0.0);  // 0 only when fully masked; NaN must show
          for (std::size_t c = 0; c < d_v; ++c) {
            const std::size_t x = r_ * d_v + c;
            o[x] = masked ? convert<S>(0.0) : unnormalised ? convert<S>(A(o_slab[x] / row_l[r_])) : convert<S>(o_slab[x]);
          }
        }
      }
    }
  }
  return r;
}

// The backward pass over the same slabs (backend.hpp's formulas), per head:
//   for each slab of rows i0 .. i0 + B_q (keys [lo, hi) any row of it sees):
//     P = softmax(Q_slab K^T * scale + mask), recomputed exactly with one
//         GEMM (the forward does not keep it; the saved logsumexp is not needed)
//     dP = dO_slab V^T (GEMM);  D_i = dO_i . O_i (the saved output);  dS = P o (dP - D)
//     dQ_slab = scale dS' K (GEMM);  dV += P^T dO_slab;  dK += dS'^T Q_slab (GEMMs, transposed)
//     (dS' = dS o the soft-cap's derivative, a third slab, with soft-capping)
// dK and dV accumulate over the slabs and the K/V head's g query heads in
// order, in A, and are scaled and rounded to storage once at the end:
// O(B_q n_kv + n_kv (d_k + d_v)) scratch.
template <class S, class A>
std::size_t slab_backward_workspace_bytes(const Shape& s, const Options& opt, std::size_t block_q) {
  const std::size_t b_q = std::min(block_q, s.n_q);
  return (opt.softcap ? 3 : 2) * piece_bytes<A>(b_q * s.n_kv) + piece_bytes<A>(s.n_kv * s.d_k) + piece_bytes<A>(s.n_kv * s.d_v) +
         piece_bytes<A>(b_q * s.d_k) + piece_bytes<A>(widen_count<A, S>(b_q * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(b_q * s.d_v)) + piece_bytes<A>(widen_count<A, S>(s.n_kv * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(s.n_kv * s.d_v));
}

template <class S, class A>
Gradients<S> slab_backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                           const Options& opt, Workspace& ws, std::size_t block_q, std::string_view backend) {
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t b_q = std::min(block_q, n_q);
  const std::size_t bytes = slab_backward_workspace_bytes<S, A>(sh, opt, block_q);
  check_workspace(backend, "two B_q x n_kv slabs (P, dS) and the dK, dV accumulators", bytes);
  Arena arena(ws, bytes);
  A* probs = arena.take<A>(b_q * n_kv);
  A* grads = arena.take<A>(b_q * n_kv);  // dP, then dS
  A* dk_acc = arena.take<A>(n_kv * d_k);
  A* dv_acc = arena.take<A>(n_kv * d_v);
  A* dq_slab = arena.take<A>(b_q * d_k);
  A* q_buf = arena.take<A>(widen_count<A, S>(b_q * d_k));
  A* do_buf = arena.take<A>(widen_count<A, S>(b_q * d_v));
  A* k_buf = arena.take<A>(widen_count<A, S>(n_kv * d_k));
  A* v_buf = arena.take<A>(widen_count<A, S>(n_kv * d_v));
  A* slopes = arena.take<A>(opt.softcap ? b_q * n_kv : 0);  // the soft-cap's derivative

  Gradients<S> g = allocate_gradients<S>(sh, opt, bytes);
  const MaskView mask(opt, sh);
  const A scale = convert<A>(opt.resolved_scale(sh)), zero = convert<A>(0.0), one = convert<A>(1.0);
  const A minus_inf = neg_infinity<A>();

  const A* k = nullptr;
  const A* v = nullptr;
  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const std::size_t hk = h / sh.group();
      if (h % sh.group() == 0) {  // the first query head of its K/V head
        k = as_accumulate(&in.k(b, hk, 0, 0), n_kv * d_k, k_buf);
        v = as_accumulate(&in.v(b, hk, 0, 0), n_kv * d_v, v_buf);
        std::fill(dk_acc, dk_acc + n_kv * d_k, zero);
        std::fill(dv_acc, dv_acc + n_kv * d_v, zero);
      }
      const A sink = convert<A>(mask.sink(h));
      for (std::size_t i0 = 0; i0 < n_q; i0 += b_q) {
        const std::size_t rows = std::min(b_q, n_q - i0);
        const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
        const std::size_t cols = hi - lo;
        const A* q = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
        const A* d_o = as_accumulate(&d_out(b, h, i0, 0), rows * d_v, do_buf);
        if (cols == 0) {  // no row of the slab sees a key: dQ_slab = 0, nothing for dK, dV
          std::fill(dq_slab, dq_slab + rows * d_k, zero);
        } else {
          // P = softmax(Q_slab K[lo:hi]^T * scale + mask);  dP = dO_slab V[lo:hi]^T
          scores_tile<A>(q, k + lo * d_k, probs, rows, cols, d_k, scale);
          scores_tile<A>(d_o, v + lo * d_v, grads, rows, cols, d_v, one);
          for (std::size_t r_ = 0; r_ < rows; ++r_) {
            const std::size_t i = i0 + r_;
            A* p_i = probs + r_ * cols;
            A* ds_i = grads + r_ * cols;
            if (mask.softcap()) softcap_slope(p_i, slopes + r_ * cols, cols, *mask.softcap());
            mask_row_if_partial(p_i, mask, b, h, i, lo, cols);
            const RowSoftmax<A> row = softmax_row(p_i, cols, /*simd=*/true, sink);
            // D_i = dO_i . O_i;  dS_i = P_i o (dP_i - D_i)
            const A d_i = dot_loops<A>(&d_out(b, h, i, 0), &saved.out(b, h, i, 0), d_v);
            for (std::size_t c = 0; c < cols; ++c) ds_i[c] = p_i[c] * (ds_i[c] - d_i);
            if (g.dbias)
              for (std::size_t c = 0; c < cols; ++c) (*g.dbias)(i, lo + c) += convert<double>(ds_i[c]);
            // d(sink_h) += -P_i,sink D_i
            if (g.dsinks && sink > minus_inf && !row.fully_masked)
              (*g.dsinks)(h) += convert<double>(A(-(exp_of<A>(A(sink - row.m)) / row.l) * d_i));
            if (mask.softcap())
              for (std::size_t c = 0; c < cols; ++c) ds_i[c] *= slopes[r_ * cols + c];
          }
          // dQ_slab = dS K[lo:hi] (scaled below);  dV[lo:hi] += P^T dO_slab;  dK[lo:hi] += dS^T Q_slab
          pv_tile<A>(grads, k + lo * d_k, dq_slab, rows, cols, d_k, false);
          gemm_tn<A>(probs, d_o, dv_acc + lo * d_v, cols, d_v, rows, one, true);
          gemm_tn<A>(grads, q, dk_acc + lo * d_k, cols, d_k, rows, one, true);
        }
        S* dq = &g.dq(b, h, i0, 0);
        for (std::size_t x = 0; x < rows * d_k; ++x) dq[x] = convert<S>(A(scale * dq_slab[x]));
      }
      if (h % sh.group() != sh.group() - 1) continue;  // more query heads read this K/V head
      S* dk = &g.dk(b, hk, 0, 0);
      S* dv = &g.dv(b, hk, 0, 0);
      for (std::size_t x = 0; x < n_kv * d_k; ++x) dk[x] = convert<S>(A(scale * dk_acc[x]));
      for (std::size_t x = 0; x < n_kv * d_v; ++x) dv[x] = convert<S>(dv_acc[x]);
    }
  }
  return g;
}

}  // namespace attn::detail
