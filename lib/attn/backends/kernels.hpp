// The building blocks every backend shares, written once: scores of a tile
// (BLAS GEMM for fp32/fp64 accumulation, loops that round every operation
// otherwise), masking a row of scores, an exact softmax of a row, P V of a
// tile, and widening storage values to the accumulation type.
// Internal to lib/attn/backends.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "attn/registry/backend.hpp"
#include "attn/simd/simd.hpp"

namespace attn::detail {

// The Result a backend fills: out [B, H, n_q, d_v], and weights / lse when
// asked for (lse also when `lse_always`, for backends that need it). The
// weights are checked against the memory cap like any workspace.
template <class S>
Result<S> allocate_result(std::string_view backend, const Shape& sh, const Options& opt, std::size_t workspace_bytes,
                          bool lse_always = false) {
  if (opt.need_weights)
    check_workspace(backend, "the returned n_q x n_kv weights (double)",
                    sh.batch * sh.heads * sh.n_q * sh.n_kv * sizeof(double));
  Result<S> r;
  r.out = xt::xtensor<S, 4>::from_shape({sh.batch, sh.heads, sh.n_q, sh.d_v});
  if (opt.need_weights) r.weights = xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, sh.n_q, sh.n_kv});
  if (opt.need_lse || lse_always) r.lse = xt::xtensor<double, 3>::from_shape({sh.batch, sh.heads, sh.n_q});
  r.workspace_bytes = workspace_bytes;
  return r;
}

// The Gradients a backward pass fills: dq, dk, dv of the inputs' shapes
// (uninitialised), dbias [n_q, n_kv] zeroed when asked for, dsinks [H] zeroed with sinks.
template <class S>
Gradients<S> allocate_gradients(const Shape& sh, const Options& opt, std::size_t workspace_bytes) {
  Gradients<S> g;
  g.dq = xt::xtensor<S, 4>::from_shape({sh.batch, sh.heads, sh.n_q, sh.d_k});
  g.dk = xt::xtensor<S, 4>::from_shape({sh.batch, sh.kv_head_count(), sh.n_kv, sh.d_k});
  g.dv = xt::xtensor<S, 4>::from_shape({sh.batch, sh.kv_head_count(), sh.n_kv, sh.d_v});
  if (opt.need_dbias) g.dbias = xt::xtensor<double, 2>(std::array<std::size_t, 2>{sh.n_q, sh.n_kv}, 0.0);
  if (opt.sinks) g.dsinks = xt::xtensor<double, 1>(std::array<std::size_t, 1>{sh.heads}, 0.0);
  g.workspace_bytes = workspace_bytes;
  return g;
}

// Keys [begin, end) that at least one of queries i0 .. i0 + rows (batch b) may
// see; every key outside is masked for all of them. Empty: begin = end = 0.
inline MaskView::Range block_keys(const MaskView& mask, std::size_t b, std::size_t i0, std::size_t rows,
                                  std::size_t n_kv) {
  MaskView::Range span{n_kv, 0};
  for (std::size_t i = i0; i < i0 + rows; ++i) {
    const auto keys = mask.keys(b, i);
    if (keys.size() == 0) continue;
    span.begin = std::min(span.begin, keys.begin);
    span.end = std::max(span.end, keys.end);
  }
  if (span.begin >= span.end) span = {0, 0};
  return span;
}

// Rows [first, last) of queries i0 .. i0 + rows (batch b), relative to i0:
// the hull of the rows that see any key of j0 .. j0 + cols (under a causal
// mask the diagonal tiles shrink to the rows at or below the diagonal); rows
// outside see none of them. Empty: first = last = 0.
struct RowSpan {
  std::size_t first = 0, last = 0;
  std::size_t size() const { return last - first; }
};
inline RowSpan rows_seeing(const MaskView& mask, std::size_t b, std::size_t i0, std::size_t rows, std::size_t j0,
                           std::size_t cols) {
  RowSpan hull{rows, 0};
  for (std::size_t r = 0; r < rows; ++r) {
    const auto keys = mask.keys(b, i0 + r);
    if (keys.begin < j0 + cols && keys.end > j0 && keys.size() > 0) {
      hull.first = std::min(hull.first, r);
      hull.last = r + 1;
    }
  }
  return hull.first < hull.last ? hull : RowSpan{};
}

// bf16/fp16 -> float: the dispatched vector kernels (attn/simd/simd.hpp).
inline void widen_to_float(const bf16* src, std::size_t n, float* dst) { attn::simd().widen_bf16(src, n, dst); }
inline void widen_to_float(const fp16* src, std::size_t n, float* dst) { attn::simd().widen_fp16(src, n, dst); }

// The n values at `src` as A: `src` itself when S is A, else widened into `buf`.
template <class A, class S>
const A* as_accumulate(const S* src, std::size_t n, A* buf) {
  if constexpr (std::is_same_v<S, A>) {
    return src;
  } else if constexpr (std::is_same_v<A, float> && (std::is_same_v<S, bf16> || std::is_same_v<S, fp16>)) {
    widen_to_float(src, n, buf);
    return buf;
  } else {
    for (std::size_t i = 0; i < n; ++i) buf[i] = convert<A>(src[i]);
    return buf;
  }
}

// Rows of d bf16 values as ceil(d/2) pairs each (32-bit words, the low half
// first, 0 past d): the operand form of the bf16 dot products (simd.hpp's
// gemm_bf16); rows whose width is even are their own pairs, copied whole.
inline void bf16_as_pairs(const bf16* src, std::size_t rows, std::size_t d, std::uint32_t* out) {
  const std::size_t dp = (d + 1) / 2;
  if (d % 2 == 0) {
    std::memcpy(out, src, rows * d * sizeof(bf16));
    return;
  }
  for (std::size_t r = 0; r < rows; ++r) {
    out[r * dp + dp - 1] = 0;
    std::memcpy(out + r * dp, src + r * d, d * sizeof(bf16));
  }
}

// Buffers as_accumulate needs: none when S is A.
template <class A, class S>
constexpr std::size_t widen_count(std::size_t n) {
  return std::is_same_v<S, A> ? 0 : n;
}

// c[r, j] = alpha * (x_r . y_j), x: [rows, d], y: [cols, d], c: [rows, cols];
// each product and sum rounded to A, in order. X and Y may be storage
// values (the naive backend converts on the fly).
template <class A, class S>
void scores_loops(const S* x, const S* y, A* c, std::size_t rows, std::size_t cols, std::size_t d, A alpha) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j) {
      A dot = convert<A>(0.0);
      for (std::size_t l = 0; l < d; ++l) dot += convert<A>(x[r * d + l]) * convert<A>(y[j * d + l]);
      c[r * cols + j] = dot * alpha;
    }
}

// o[r, :] (+)= sum_j p[r, j] v[j, :] with every operation rounded to A, in
// order; p: [rows, k], v: [k, d_v] (storage values allowed), o: [rows, d_v].
template <class A, class S>
void pv_loops(const A* p, const S* v, A* o, std::size_t rows, std::size_t k, std::size_t d_v, bool add) {
  const A zero = convert<A>(0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    A* o_r = o + r * d_v;
    if (!add) std::fill(o_r, o_r + d_v, zero);
    for (std::size_t j = 0; j < k; ++j) {
      const A p_rj = p[r * k + j];
      for (std::size_t c = 0; c < d_v; ++c) o_r[c] += p_rj * convert<A>(v[j * d_v + c]);
    }
  }
}

// As scores_loops, as one GEMM (OpenBLAS through xtensor-blas) when A is
// float or double; row-major, all three contiguous.
template <class A>
void scores_tile(const A* x, const A* y, A* c, std::size_t rows, std::size_t cols, std::size_t d, A alpha);

// o[r, :] (+)= sum_j p[r, j] v[j, :], p: [rows, k], v: [k, d_v], o: [rows, d_v];
// `add` keeps what o holds. GEMM when A is float or double, loops otherwise.
template <class A>
void pv_tile(const A* p, const A* v, A* o, std::size_t rows, std::size_t k, std::size_t d_v, bool add);

// c[m, n] (+)= alpha x^T y, x: [k, m], y: [k, n], c: [m, n] (the backward
// pass's dV = P^T dO and dK = dS^T Q of a slab). GEMM when A is float or
// double; otherwise loops over k in order, rounding every operation to A.
template <class A>
void gemm_tn(const A* x, const A* y, A* c, std::size_t m, std::size_t n, std::size_t k, A alpha, bool add);

// t[c, r] = x[r, c] for x [rows, cols] (a tile, so the backward's products
// with P^T and dS^T run on the same kernels as the forward's).
template <class A>
void transpose(const A* x, std::size_t rows, std::size_t cols, A* t) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
}

// sum_l x_l y_l over n values, each operation rounded to A in order (x, y
// may be storage values): the D_i = dO_i . O_i of the backward pass.
template <class A, class X, class Y>
A dot_loops(const X* x, const Y* y, std::size_t n) {
  A sum = convert<A>(0.0);
  for (std::size_t l = 0; l < n; ++l) sum += convert<A>(x[l]) * convert<A>(y[l]);
  return sum;
}

// sum_l x_l y_l in A as dot_lanes_count partial sums (partial k takes the
// terms l = k mod dot_lanes_count in order, each product and sum rounded to
// A), added at the end as a fixed tree: the same bits on every instruction
// set, and about a tenth of dot_loops' time at d = 128, whose one chain of
// dependent additions the compiler may not reorder. dot_lanes_scalar is the
// definition; dot_lanes takes the variant's vector kernel for float sums of
// float, bf16 or fp16 (simd.hpp: dot_lanes_*, the same order, so the same
// bits; unit_test compares the two in every variant), the definition
// otherwise. The streaming backward's D_i = dO_i . O_i, recomputed for each
// query block a key tile visits instead of kept for all n_q rows.
inline constexpr std::size_t dot_lanes_count = 16;
template <class A, class X, class Y>
A dot_lanes_product(X x, Y y) {
  A p = convert<A>(x) * convert<A>(y);
  if constexpr (std::is_same_v<A, float> || std::is_same_v<A, double>) ATTN_UNFUSED(p);  // rounded before the sum
  return p;
}
template <class A, class X, class Y>
A dot_lanes_scalar(const X* x, const Y* y, std::size_t n) {
  A part[dot_lanes_count];
  for (auto& p : part) p = convert<A>(0.0);
  std::size_t l = 0;
  for (; l + dot_lanes_count <= n; l += dot_lanes_count)
    for (std::size_t k = 0; k < dot_lanes_count; ++k) part[k] += dot_lanes_product<A>(x[l + k], y[l + k]);
  for (std::size_t k = 0; l + k < n; ++k) part[k] += dot_lanes_product<A>(x[l + k], y[l + k]);
  for (std::size_t w = dot_lanes_count / 2; w > 0; w /= 2)
    for (std::size_t k = 0; k < w; ++k) part[k] += part[k + w];
  return part[0];
}
template <class A, class X, class Y>
A dot_lanes(const X* x, const Y* y, std::size_t n) {
  if constexpr (std::is_same_v<A, float> && std::is_same_v<X, Y>) {
    if constexpr (std::is_same_v<X, float>) return attn::simd().dot_lanes_f32(x, y, n);
    if constexpr (std::is_same_v<X, bf16>) return attn::simd().dot_lanes_bf16(x, y, n);
    if constexpr (std::is_same_v<X, fp16>) return attn::simd().dot_lanes_fp16(x, y, n);
  }
  return dot_lanes_scalar<A>(x, y, n);
}

// Finishes the scaled scores s[0, cols) of query i of head h (batch b) for
// keys j0 .. j0 + cols: MaskView::apply (soft-cap, ALiBi, bias; -inf where
// masked); `simd`: the soft-cap's vector kernel (the naive backend keeps scalar tanh).
template <class A>
void mask_row(A* s, const MaskView& mask, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
              std::size_t cols, bool simd = true) {
  mask.apply(s, b, h, i, j0, cols, simd);
}

// The soft-cap's derivative at the scaled scores raw[0, n): f_j = 1 - (s_j / c)^2,
// s_j = c tanh(raw_j / c) as MaskView::apply forms it (the backward's dS' = dS o f).
template <class A>
void softcap_slope(const A* raw, A* f, std::size_t n, double c, bool simd = true) {
  std::copy(raw, raw + n, f);
  softcap_row(f, n, c, simd);
  const A cap = convert<A>(c), one = convert<A>(1.0);
  for (std::size_t j = 0; j < n; ++j) {
    const A t = f[j] / cap;
    f[j] = one - t * t;
  }
}

// mask_row, skipped when row i sees every key of j0 .. j0 + cols (most rows
// of most tiles) and nothing is elementwise.
template <class A>
void mask_row_if_partial(A* s, const MaskView& mask, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
                         std::size_t cols) {
  const auto keys = mask.keys(b, i);
  if (mask.elementwise() || keys.begin > j0 || keys.end < j0 + cols) mask_row(s, mask, b, h, i, j0, cols);
}

// s[j] = exp(s[j] - m) for j < n; returns their sum. For float and double
// with simd = true, the dispatched vector kernel (attn/simd/simd.hpp: xsimd's
// exp, lane-wise partial sums); otherwise std::exp (or the type's exp) in
// order. -inf gives 0 either way.
template <class A>
A exp_shifted_sum(A* s, std::size_t n, A m, bool simd) {
  if constexpr (std::is_same_v<A, float>) {
    if (simd) return attn::simd().exp_shifted_sum_f32(s, n, m);
  } else if constexpr (std::is_same_v<A, double>) {
    if (simd) return attn::simd().exp_shifted_sum_f64(s, n, m);
  }
  A sum = convert<A>(0.0);
  for (std::size_t j = 0; j < n; ++j) {
    s[j] = exp_of<A>(s[j] - m);
    sum += s[j];
  }
  return sum;
}

// max_j s[j] (-inf for n = 0), ignoring NaN as `if (s[j] > m) m = s[j]`
// does (the exp that follows propagates it); lane-wise for float and double.
template <class A>
A row_max(const A* s, std::size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    return attn::simd().row_max_f32(s, n);
  } else if constexpr (std::is_same_v<A, double>) {
    return attn::simd().row_max_f64(s, n);
  } else {
    A m = neg_infinity<A>();
    for (std::size_t j = 0; j < n; ++j)
      if (s[j] > m) m = s[j];
    return m;
  }
}

template <class A>
struct RowSoftmax {
  A m, l;              // row max and sum of exp(s - m), the sink's term included
  bool fully_masked;   // m = -inf: weights 0, output 0, lse -inf
};

// p_j = exp(s_j - m) / l in place, m = max(max_j s_j, sink), l = sum_j
// exp(s_j - m) + exp(sink - m); `simd`: see exp_shifted_sum (the naive
// backend keeps scalar exp on purpose). With a finite sink and every key
// masked: p = 0, l = 1, m = sink (lse = sink).
template <class A>
RowSoftmax<A> softmax_row(A* s, std::size_t n, bool simd = false, A sink = neg_infinity<A>()) {
  const A minus_inf = neg_infinity<A>(), zero = convert<A>(0.0);
  A m = row_max(s, n);
  if (sink > m) m = sink;
  if (!(m > minus_inf)) {
    std::fill(s, s + n, zero);
    return {m, zero, true};
  }
  A l = exp_shifted_sum(s, n, m, simd);
  if (sink > minus_inf) l += exp_of<A>(A(sink - m));
  for (std::size_t j = 0; j < n; ++j) s[j] /= l;
  return {m, l, false};
}

// The logsumexp of a row, returned as double (-inf when fully masked).
template <class A>
double row_lse(const RowSoftmax<A>& r) {
  return r.fully_masked ? -std::numeric_limits<double>::infinity() : convert<double>(A(r.m + log_of<A>(r.l)));
}

}  // namespace attn::detail
