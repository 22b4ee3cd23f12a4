#include "attn/backends/streaming.hpp"

#include "attn/backends/kernels.hpp"
#include "attn/registry.hpp"

namespace attn::backends {

namespace {

template <class S, class A>
std::size_t streaming_bytes(const Shape& s, std::size_t block_q, std::size_t block_k) {
  using detail::widen_count;
  const std::size_t b_r = std::min(block_q, s.n_q), b_c = std::min(block_k, s.n_kv);
  return piece_bytes<A>(b_r * b_c) + piece_bytes<A>(b_r * s.d_v) + 2 * piece_bytes<A>(b_r) +
         piece_bytes<A>(widen_count<A, S>(b_r * s.d_k)) + piece_bytes<A>(widen_count<A, S>(b_c * s.d_k)) +
         piece_bytes<A>(widen_count<A, S>(b_c * s.d_v));
}

template <class S, class A>
Result<S> streaming_attention(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  // q: [B, H, n_q, d_k]  k: [B, H, n_kv, d_k]  v: [B, H, n_kv, d_v]  ->  o: [B, H, n_q, d_v]
  using namespace detail;
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  const std::size_t B_r = std::min(Streaming::block_q(opt), n_q), B_c = std::min(Streaming::block_k(opt), n_kv);
  const std::size_t bytes = streaming_bytes<S, A>(sh, B_r, B_c);
  check_workspace(Streaming::name, "a B_q x B_k tile", bytes);
  Arena arena(ws, bytes);
  A* S_ij = arena.take<A>(B_r * B_c);  // scores, then P~ of the current tile
  A* O_i = arena.take<A>(B_r * d_v);   // unnormalised output of the query block
  A* m_i = arena.take<A>(B_r);         // running row max
  A* l_i = arena.take<A>(B_r);         // running sum of exp(S - m_i)
  A* q_buf = arena.take<A>(widen_count<A, S>(B_r * d_k));
  A* k_buf = arena.take<A>(widen_count<A, S>(B_c * d_k));
  A* v_buf = arena.take<A>(widen_count<A, S>(B_c * d_v));

  Result<S> r = allocate_result<S>(Streaming::name, sh, opt, bytes, /*lse_always=*/opt.need_weights);

  const MaskView mask(opt.mask, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));
  const A zero = convert<A>(0.0), minus_inf = neg_infinity<A>();

  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      for (std::size_t i0 = 0; i0 < n_q; i0 += B_r) {
        const std::size_t rows = std::min(B_r, n_q - i0);
        const A* Q_i = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
        // Keys [lo, hi) some query of the block may see; tiles outside are skipped.
        const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
        std::fill(m_i, m_i + rows, minus_inf);
        std::fill(l_i, l_i + rows, zero);
        std::fill(O_i, O_i + rows * d_v, zero);

        for (std::size_t j0 = lo; j0 < hi; j0 += B_c) {
          const std::size_t cols = std::min(B_c, hi - j0);
          const A* K_j = as_accumulate(&in.k(b, h, j0, 0), cols * d_k, k_buf);
          const A* V_j = as_accumulate(&in.v(b, h, j0, 0), cols * d_v, v_buf);
          // S_ij = Q_i K_j^T * scale + mask
          scores_tile<A>(Q_i, K_j, S_ij, rows, cols, d_k, scale);
          for (std::size_t r_ = 0; r_ < rows; ++r_) {
            A* s = S_ij + r_ * cols;
            mask_row(s, mask, b, i0 + r_, j0, cols);
            // m_new = max(m_i, rowmax(S_ij));  P~_ij = exp(S_ij - m_new)
            A m_new = m_i[r_];
            for (std::size_t c = 0; c < cols; ++c)
              if (s[c] > m_new) m_new = s[c];
            if (!(m_new > minus_inf)) {  // every key so far masked: nothing to add (and no NaN)
              std::fill(s, s + cols, zero);
              continue;
            }
            const A row_sum = exp_shifted_sum(s, cols, m_new, /*simd=*/true);
            // l_i = exp(m_i - m_new) l_i + rowsum(P~);  O_i = diag(exp(m_i - m_new)) O_i
            if (m_new > m_i[r_]) {
              const A alpha = m_i[r_] > minus_inf ? exp_of<A>(m_i[r_] - m_new) : zero;
              l_i[r_] *= alpha;
              for (std::size_t c = 0; c < d_v; ++c) O_i[r_ * d_v + c] *= alpha;
              m_i[r_] = m_new;
            }
            l_i[r_] += row_sum;
          }
          // O_i += P~_ij V_j
          pv_tile<A>(S_ij, V_j, O_i, rows, cols, d_v, true);
        }

        // O_i = O_i / l_i;  lse_i = m_i + log l_i
        S* o = &r.out(b, h, i0, 0);
        for (std::size_t r_ = 0; r_ < rows; ++r_) {
          const bool masked = !(l_i[r_] > zero);
          for (std::size_t c = 0; c < d_v; ++c)
            o[r_ * d_v + c] = masked ? convert<S>(0.0) : convert<S>(A(O_i[r_ * d_v + c] / l_i[r_]));
          if (r.lse) (*r.lse)(b, h, i0 + r_) = row_lse(RowSoftmax<A>{m_i[r_], l_i[r_], masked});
        }

        // Weights, on request only: a second pass, P_ij = exp(S_ij - lse_i).
        if (!r.weights) continue;
        for (std::size_t r_ = 0; r_ < rows; ++r_) {
          double* w = &(*r.weights)(b, h, i0 + r_, 0);
          std::fill(w, w + n_kv, 0.0);
          // lse in A, reused as the shift of this row (m_i is no longer needed)
          m_i[r_] = l_i[r_] > zero ? A(m_i[r_] + log_of<A>(l_i[r_])) : minus_inf;
        }
        for (std::size_t j0 = lo; j0 < hi; j0 += B_c) {
          const std::size_t cols = std::min(B_c, hi - j0);
          const A* K_j = as_accumulate(&in.k(b, h, j0, 0), cols * d_k, k_buf);
          scores_tile<A>(Q_i, K_j, S_ij, rows, cols, d_k, scale);
          for (std::size_t r_ = 0; r_ < rows; ++r_) {
            A* s = S_ij + r_ * cols;
            mask_row(s, mask, b, i0 + r_, j0, cols);
            if (!(m_i[r_] > minus_inf)) continue;
            double* w = &(*r.weights)(b, h, i0 + r_, j0);
            for (std::size_t c = 0; c < cols; ++c) w[c] = convert<double>(exp_of<A>(s[c] - m_i[r_]));
          }
        }
      }
    }
  }
  if (!opt.need_lse) r.lse.reset();
  return r;
}

}  // namespace

template <class S, Accumulate P>
Result<S> Streaming::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return streaming_attention<S, accumulate_t<S, P>>(in, opt, ws);
}

template <class S, Accumulate P>
std::size_t Streaming::workspace_bytes(const Shape& s, const Options& opt) {
  return streaming_bytes<S, accumulate_t<S, P>>(s, block_q(opt), block_k(opt));
}

ATTN_INSTANTIATE_BACKEND(Streaming)

}  // namespace attn::backends
