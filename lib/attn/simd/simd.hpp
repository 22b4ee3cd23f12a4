// The vector kernels, compiled once per instruction set and chosen at run
// time: one binary runs on every x86-64 (or other) CPU and uses the widest
// instruction set the CPU and OS execute. Each variant is the one source
// simd/variant.inc compiled with its own flags (lib/meson.build):
//   baseline  the build's own flags (x86-64: x86-64-v2 + F16C, i.e. AVX without
//             FMA; -Dnative=true: this CPU)
//   avx2      -mavx2 -mfma -mf16c                 (x86-64 only)
//   avx512    + -mavx512f/bw/dq/vl                 (x86-64 only)
//   avx512bf16 + -mavx512bf16: the avx512 kernels plus bf16 dot products
//             (vdpbf16ps) for bf16 storage's Q K^T and P V (x86-64 only)
//   avx512amx  + -mamx-tile -mamx-bf16: the avx512bf16 kernels with gemm_bf16
//             on AMX tiles (TDPBF16PS; x86-64 Linux only: the OS must grant
//             the process the tile state, which detection requests)
// ATTN_SIMD=<id> forces a variant (tests run the properties on each one the
// CPU executes); an unknown id, or one this CPU cannot execute, is an Error.
// Only these kernels are compiled per target; everything else in the
// library is baseline code that calls them through this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/core/precision.hpp"

namespace attn {

struct SimdKernels {
  std::string_view id;    // baseline, avx2, avx512, avx512bf16, avx512amx: what ATTN_SIMD takes
  std::string_view arch;  // xsimd's name of the instruction set compiled for
  std::size_t vector_bytes = 0;  // one vector register
  std::size_t registers = 0;     // vector registers the target has
  // The micro-kernel's block of C held in registers: mr rows x nv vectors
  // (mr * nv accumulators + nv operands of B + 1 broadcast <= registers).
  std::size_t mr = 0, nv = 0;
  std::size_t panel = 0;  // nv * lanes: the column panel width of packed B
  // The streaming backend's tiles measured for this variant (docs/performance.md).
  std::size_t block_q = 0, block_k = 0;
  // Its forward's tiles past a decode step for one arithmetic, where measured
  // apart (0: block_q, block_k), and their strips (streaming.cpp's
  // strip_rows): a strip's scores (and P~ pairs) with the key tile's packed
  // K and V within strip_bytes (0: no strips).
  struct Tiling {
    std::size_t block_q = 0, block_k = 0, strip_bytes = 0;
  };
  Tiling dot_tiles = {};     // bf16 storage on gemm_bf16 (the dot products)
  Tiling micro_tiles = {};   // fp32 accumulation on the micro-kernel (fp32 storage, or narrow storage widened)
  Tiling decode_tiles = {};  // a decode step on the decode kernels (block_k only; zero: the plain tiles)
  // Its backward pass's tiles: P and dS of B_q x B_k and K, V packed three
  // ways stay in L2 (variant_*.cpp: where each was measured; docs/performance.md).
  std::size_t backward_block_q = 0, backward_block_k = 0;
  // Independent FMA chains of the peak probe: registers - 2 (two constants),
  // more than FMA latency x pipes (4 x 2 on Zen 3/4/5 and Skylake).
  std::size_t peak_chains = 0;

  // C[m, n] = alpha A[m, k] B[k, n] (+ C when accumulate), row-major; each C
  // element one FMA chain over k in order, then scaled once by alpha.
  void (*tile_gemm)(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                    std::size_t m, std::size_t n, std::size_t k, float alpha, bool accumulate) = nullptr;
  // The same with B packed in column panels of `panel` columns: panel p holds
  // columns [p panel, (p + 1) panel) as k contiguous rows (the last panel as
  // wide as the columns left), so the kernel streams B contiguously.
  void (*tile_gemm_packed)(const float* a, std::size_t lda, const float* bp, float* c, std::size_t ldc, std::size_t m,
                           std::size_t n, std::size_t k, float alpha, bool accumulate) = nullptr;
  // The same with A given as its transpose At [k, m] (row-major, lda between
  // its k rows): C = alpha At^T B, the same order of operations per element.
  void (*tile_gemm_packed_at)(const float* at, std::size_t lda, const float* bp, float* c, std::size_t ldc,
                              std::size_t m, std::size_t n, std::size_t k, float alpha, bool accumulate) = nullptr;
  // K [rows, d] as tile_gemm_packed's B = K^T (panel p0 of `panel` keys at
  // out + p0 d, d rows of its width) and V [rows, d_v] as its B (panel c0 at
  // out + c0 rows, rows rows of its width), widened from the storage type.
  void (*pack_keys_f32)(const float* src, std::size_t rows, std::size_t d, float* out) = nullptr;
  void (*pack_keys_from_bf16)(const bf16* src, std::size_t rows, std::size_t d, float* out) = nullptr;
  void (*pack_keys_from_fp16)(const fp16* src, std::size_t rows, std::size_t d, float* out) = nullptr;
  void (*pack_values_f32)(const float* src, std::size_t rows, std::size_t d_v, float* out) = nullptr;
  void (*pack_values_from_bf16)(const bf16* src, std::size_t rows, std::size_t d_v, float* out) = nullptr;
  void (*pack_values_from_fp16)(const fp16* src, std::size_t rows, std::size_t d_v, float* out) = nullptr;
  void (*widen_bf16)(const bf16* src, std::size_t n, float* dst) = nullptr;
  void (*widen_fp16)(const fp16* src, std::size_t n, float* dst) = nullptr;
  // max_j s[j] (-inf for n = 0; NaN ignored as `if (s[j] > m) m = s[j]` does).
  float (*row_max_f32)(const float* s, std::size_t n) = nullptr;
  double (*row_max_f64)(const double* s, std::size_t n) = nullptr;
  // s[j] = exp(s[j] - m) in place; returns their sum (lane-wise partial sums).
  float (*exp_shifted_sum_f32)(float* s, std::size_t n, float m) = nullptr;
  double (*exp_shifted_sum_f64)(double* s, std::size_t n, double m) = nullptr;
  // s[j] = c tanh(s[j] / c) in place (logit soft-capping), xsimd's tanh.
  void (*softcap_f32)(float* s, std::size_t n, float c) = nullptr;
  void (*softcap_f64)(double* s, std::size_t n, double c) = nullptr;
  // A decode step's products with K and V read in place (rows of a few
  // query rows, row-major q [rows, d] and p [rows, cols]; k, v [cols, d]):
  //   scores: s[r, j] = scale (q_r . k_j), s [rows, cols]; prefetches the
  //           rows of K and of v [cols, d_v] a few keys ahead (v may be null)
  //   pv:     o[r, c] += sum_j p[r, j] v[j, c], o [rows, d_v]
  // (simd/variant.inc: their orders of operations)
  void (*decode_scores_f32)(const float* q, std::size_t rows, const float* k, std::size_t cols, std::size_t d,
                            float scale, float* s, const float* v, std::size_t d_v) = nullptr;
  void (*decode_scores_bf16)(const float* q, std::size_t rows, const bf16* k, std::size_t cols, std::size_t d,
                             float scale, float* s, const bf16* v, std::size_t d_v) = nullptr;
  void (*decode_scores_fp16)(const float* q, std::size_t rows, const fp16* k, std::size_t cols, std::size_t d,
                             float scale, float* s, const fp16* v, std::size_t d_v) = nullptr;
  void (*decode_pv_f32)(const float* p, std::size_t rows, const float* v, std::size_t cols, std::size_t d_v,
                        float* o) = nullptr;
  void (*decode_pv_bf16)(const float* p, std::size_t rows, const bf16* v, std::size_t cols, std::size_t d_v,
                         float* o) = nullptr;
  void (*decode_pv_fp16)(const float* p, std::size_t rows, const fp16* v, std::size_t cols, std::size_t d_v,
                         float* o) = nullptr;
  // A decode step in one pass (AVX2 and AVX-512; null elsewhere): rows <= 4
  // rows of one K/V head over keys [0, cols), scores, online softmax and
  // P V a few keys at a time; m[r], l[r] (the running max and sum) and o
  // [rows, d_v] updated in place; prefetch: K and V come from memory (the
  // first group of rows of a tile). simd/variant.inc: its order of operations.
  void (*decode_fused_f32)(const float* q, std::size_t rows, const float* k, const float* v, std::size_t cols,
                           std::size_t d, std::size_t d_v, float scale, float* m, float* l, float* o,
                           bool prefetch) = nullptr;
  void (*decode_fused_bf16)(const float* q, std::size_t rows, const bf16* k, const bf16* v, std::size_t cols,
                            std::size_t d, std::size_t d_v, float scale, float* m, float* l, float* o,
                            bool prefetch) = nullptr;
  void (*decode_fused_fp16)(const float* q, std::size_t rows, const fp16* k, const fp16* v, std::size_t cols,
                            std::size_t d, std::size_t d_v, float scale, float* m, float* l, float* o,
                            bool prefetch) = nullptr;
  // sum_l x[l] y[l] for l < n, in the order of detail::dot_lanes_scalar
  // (backends/kernels.hpp): its bits in every variant.
  float (*dot_lanes_f32)(const float* x, const float* y, std::size_t n) = nullptr;
  float (*dot_lanes_bf16)(const bf16* x, const bf16* y, std::size_t n) = nullptr;
  float (*dot_lanes_fp16)(const fp16* x, const fp16* y, std::size_t n) = nullptr;
  // The peak probe's loop: peak_chains independent FMA chains of one vector,
  // `iters` steps each (2 * lanes * peak_chains * iters FLOPs); returns a
  // value that depends on every chain, so nothing is optimised away.
  double (*fma_chains_f32)(long iters) = nullptr;
  double (*fma_chains_f64)(long iters) = nullptr;

  // bf16 dot products (the avx512bf16 variant, AVX512_BF16's vdpbf16ps, and
  // the avx512amx variant, whose gemm_bf16 runs on AMX tiles; null in every
  // other variant). Operands are pairs of bf16 values, one
  // 32-bit word each (low half first), padded with 0:
  //   pack_keys_bf16:   K [rows, d] as B = K^T in panels of `panel` keys,
  //                     panel j0 at out + j0 ceil(d/2): row p holds the keys'
  //                     pairs (K[j, 2p], K[j, 2p + 1])
  //   pack_values_bf16: V [rows, d_v] as B in panels of `panel` columns, panel
  //                     c0 at out + c0 ceil(rows/2): row q holds the pairs
  //                     (V[2q, c], V[2q + 1, c])
  //   exp_pairs_bf16:   one row's P~: s[j] -> exp(scale s[j] - m) (product
  //                     and difference each rounded), returning their sum,
  //                     each rounded to bf16 (nearest even, subnormals
  //                     flushed) into ceil(n/2) pairs at out; exactly as
  //                     exp_shifted_sum_f32 on the scaled scores (the same
  //                     values, the same sum)
  //   pairs_bf16:       rows of fp32 x [m, n] (ldx apart) rounded to bf16
  //                     (nearest even, subnormals flushed) as ceil(n/2) pairs
  //                     each (0 past n), out's rows ld words apart: an A
  //   pack_values_rounded_bf16: fp32 x [rows, n] (ldx apart) rounded so, as B
  //                     in pack_values_bf16's layout
  //   pack_pairs_t_bf16: M [rows, d] as A = M^T: d rows of ceil(rows/2)
  //                     pairs (M[2q, c], M[2q + 1, c]) (0 past rows)
  //                     (the bf16 backward's dV^T = dO^T P, dK^T = Q^T dS,
  //                     dQ = dS K: streaming.cpp)
  //   gemm_bf16:        C[m, n] = alpha A B (+ C when accumulate), A m rows of
  //                     kp pairs (lda words apart), B packed as above; each C
  //                     element one chain of dot-product steps over the pairs
  //                     in order (exact products, rounded additions, subnormals
  //                     flushed), then scaled once by alpha and added to C;
  //                     with alpha = 1 and accumulate, the chain starts from C
  //                     (C += A B with no separate sum)
  void (*pack_keys_bf16)(const bf16* src, std::size_t rows, std::size_t d, std::uint32_t* out) = nullptr;
  void (*pack_values_bf16)(const bf16* src, std::size_t rows, std::size_t d_v, std::uint32_t* out) = nullptr;
  float (*exp_pairs_bf16)(float* s, std::size_t n, float m, float scale, std::uint32_t* out) = nullptr;
  void (*pairs_bf16)(const float* x, std::size_t m, std::size_t n, std::size_t ldx, std::uint32_t* out,
                     std::size_t ld) = nullptr;
  void (*pack_values_rounded_bf16)(const float* x, std::size_t rows, std::size_t n, std::size_t ldx,
                                   std::uint32_t* out) = nullptr;
  void (*pack_pairs_t_bf16)(const bf16* src, std::size_t rows, std::size_t d, std::uint32_t* out) = nullptr;
  void (*gemm_bf16)(const std::uint32_t* a, std::size_t lda, const std::uint32_t* bp, float* c, std::size_t ldc,
                    std::size_t m, std::size_t n, std::size_t kp, float alpha, bool accumulate) = nullptr;
  // A decode step's kernels (decode_scores_*, decode_pv_*) with these dot
  // products on K and V read in place: q [rows, ceil(d/2)] and p [rows,
  // ceil(cols/2)] as pairs; each s and o element one chain over the pairs in
  // order (the lanes of the scores' chains summed in decode_scores's order)
  void (*decode_scores_pairs)(const std::uint32_t* q, std::size_t rows, const bf16* k, std::size_t cols,
                              std::size_t d, float scale, float* s, const bf16* v, std::size_t d_v) = nullptr;
  void (*decode_pv_pairs)(const std::uint32_t* p, std::size_t rows, const bf16* v, std::size_t cols,
                          std::size_t d_v, float* o) = nullptr;
  // fma_chains_f32's probe with the bf16 dot product (null in variants
  // without one): avx512bf16, vdpbf16ps on peak_chains chains, each step
  // adding the products of two bf16 pairs per fp32 lane; avx512amx,
  // TDPBF16PS on four 16 x 16 tiles. Each iteration does dot_chains_flops
  // FLOPs (4 * lanes * peak_chains, and 4 x 16 x 16 x 32 x 2).
  double (*dot_chains_bf16)(long iters) = nullptr;
  double dot_chains_flops = 0;

  std::size_t lanes_f32() const { return vector_bytes / 4; }
  std::size_t lanes_f64() const { return vector_bytes / 8; }
};

// The largest error of the soft-cap's tanh in every variant (vector and
// scalar tail, float and double), in units of the last place of the result:
// the bound's derivation (metrics.hpp) takes it; unit_test measures it.
inline constexpr double softcap_tanh_ulps = 4;

struct SimdVariant {
  const SimdKernels* kernels;
  bool executable;         // this CPU (and OS) can run it
  std::string requires_;   // the CPU features it needs, e.g. "avx2 fma f16c"
};

// Every variant compiled into this build, widest first.
const std::vector<SimdVariant>& simd_variants();
// The variant in use: ATTN_SIMD's if set (Error if unknown or not executable
// here), else the widest this CPU executes whose bf16 dot products (if it
// has them) pay: a variant with them (avx512amx, avx512bf16) only where its
// dot product measured at least bf16_dot_min_ratio times the fp32 FMA rate
// on this core (a few milliseconds of both probes, alternated, best of five
// each), else the next (down to avx512, which widens bf16 to fp32). Chosen
// once.
const SimdKernels& simd();
// How many times the fp32 FMA rate (FLOP/s) a bf16 dot-product variant must
// reach to be chosen. Measured (attn-lab peak): 1.98x on an AMD EPYC of the
// Zen 5 class (vdpbf16ps at the FMA's instruction rate, twice its FLOPs),
// 0.48x on an Intel Xeon with AVX512_BF16 and AVX512_FP16 (a quarter of the
// FMA's instruction rate), where the dot-product kernels made the bf16
// forward 1.6-1.7x slower than widening to fp32 (docs/performance.md,
// section 26). sqrt(2) lies a factor 1.4 from the first and 2.9 from the
// second; a CPU whose rates were equal would gain no arithmetic from the dot
// products and lose P~'s fp32 digits, so it keeps fp32.
inline constexpr double bf16_dot_min_ratio = 1.4142135623730951;
bool bf16_dots_pay(double dot_flops_per_second, double fma_flops_per_second);
// The bf16 dot product's rate over the fp32 FMA's, as the automatic choice
// measured it (absent when ATTN_SIMD forced a variant or no executable
// variant has bf16 dot products).
std::optional<double> simd_bf16_dot_ratio();
// "avx512bw (avx512bf16 variant, the widest this CPU executes)", "... forced
// by ATTN_SIMD", or why a wider variant was passed over; never a measured
// figure (it names the machine of a run: runs.py's fingerprint).
std::string simd_summary();

}  // namespace attn
