// Exact softmax over a slab of query rows at a time, with both products as
// GEMM: the algorithm of the math backend (one slab of all n_q rows) and the
// blocked backend (slabs of B_q rows).
//
//   for each slab of rows i0 .. i0 + B_q:
//     S = Q_slab K^T * scale + mask      [B_q, n_kv'] (n_kv' = the keys any row of the slab sees)
//     P = softmax(S) per row (max-shifted, exact)
//     O_slab = P V
// Holds O(B_q * n_kv) scores, plus Q/K/V widened to the accumulation type
// when it differs from storage (O((B_q + n_kv) * d)).
#pragma once

#include <string_view>

#include "attn/backend.hpp"
#include "attn/backends/kernels.hpp"

namespace attn::detail {

template <class S, class A>
std::size_t slab_workspace_bytes(const Shape& s, std::size_t block_q) {
  const std::size_t b_q = std::min(block_q, s.n_q);
  return piece_bytes<A>(b_q * s.n_kv) + piece_bytes<A>(b_q * s.d_v) + piece_bytes<A>(widen_count<A, S>(b_q * s.d_k)) +
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
  A* q_buf = arena.take<A>(widen_count<A, S>(b_q * d_k));
  A* k_buf = arena.take<A>(widen_count<A, S>(n_kv * d_k));
  A* v_buf = arena.take<A>(widen_count<A, S>(n_kv * d_v));

  Result<S> r = allocate_result<S>(backend, sh, opt, bytes);

  const MaskView mask(opt.mask, sh);
  const A scale = convert<A>(opt.resolved_scale(sh));

  for (std::size_t b = 0; b < sh.batch; ++b) {
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const A* k = as_accumulate(&in.k(b, h, 0, 0), n_kv * d_k, k_buf);
      const A* v = as_accumulate(&in.v(b, h, 0, 0), n_kv * d_v, v_buf);
      for (std::size_t i0 = 0; i0 < n_q; i0 += b_q) {
        const std::size_t rows = std::min(b_q, n_q - i0);
        // Keys [lo, hi) that some row of the slab may see; the rest are masked for all of them.
        const auto [lo, hi] = block_keys(mask, b, i0, rows, n_kv);
        const std::size_t cols = hi - lo;

        // S = Q_slab K[lo:hi]^T * scale + mask
        const A* q = as_accumulate(&in.q(b, h, i0, 0), rows * d_k, q_buf);
        if (cols > 0) scores_tile<A>(q, k + lo * d_k, slab, rows, cols, d_k, scale);
        for (std::size_t r_ = 0; r_ < rows; ++r_) {
          // P_i = softmax(S_i)
          A* p_i = slab + r_ * cols;
          mask_row(p_i, mask, b, i0 + r_, lo, cols);
          const RowSoftmax<A> row = softmax_row(p_i, cols, /*simd=*/true);
          if (r.lse) (*r.lse)(b, h, i0 + r_) = row_lse(row);
          if (r.weights) {
            double* w = &(*r.weights)(b, h, i0 + r_, 0);
            std::fill(w, w + n_kv, 0.0);
            for (std::size_t c = 0; c < cols; ++c) w[lo + c] = convert<double>(p_i[c]);
          }
        }
        // O_slab = P V[lo:hi]
        if (cols > 0) pv_tile<A>(slab, v + lo * d_v, o_slab, rows, cols, d_v, false);
        else std::fill(o_slab, o_slab + rows * d_v, convert<A>(0.0));
        S* o = &r.out(b, h, i0, 0);
        for (std::size_t x = 0; x < rows * d_v; ++x) o[x] = convert<S>(o_slab[x]);
      }
    }
  }
  return r;
}

}  // namespace attn::detail
