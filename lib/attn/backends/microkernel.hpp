// A register-blocked fp32 GEMM for the small tiles of the streaming backend:
//   C[m, n] = alpha * A[m, k] B[k, n]   (+ C when `accumulate`)
// A and C row-major with leading dimensions, B packed in column panels (each
// k x panel block contiguous: 91-96 GFLOP/s on the AVX2 machine against
// 77-84 for row-major B read in place, docs/performance.md). Hand-written (not OpenBLAS) because
// a 64 x 64 x d tile is too small for a BLAS call: OpenBLAS packs both
// operands and checks its thread pool on every call, which cost the
// streaming backend about a third of its time (docs/performance.md, step 2).
// The kernel itself is compiled once per instruction set, with a register
// block sized to each (attn/simd/simd.hpp, simd/variant.inc), and chosen at run
// time. Each C element is one fused multiply-add chain over k in order,
// then scaled once by alpha: deterministic, and at least as accurate as the
// per-operation rounding the error bounds assume.
#pragma once

#include <cstddef>

namespace attn::detail {

// C[m, n] = alpha A[m, k] B[k, n] (+ C when `accumulate`), B packed by
// pack_keys / pack_values in the column panels of the kernels in use.
void tile_gemm_packed(const float* a, std::size_t lda, const float* bp, float* c, std::size_t ldc, std::size_t m,
                      std::size_t n, std::size_t k, float alpha, bool accumulate);
// The same with A given as its transpose At [k, m] (lda between its rows):
// C = alpha At^T B, as tile_gemm_packed on a transposed copy would compute it.
void tile_gemm_packed_at(const float* at, std::size_t lda, const float* bp, float* c, std::size_t ldc, std::size_t m,
                         std::size_t n, std::size_t k, float alpha, bool accumulate);

// A [rows, d] block of keys as the packed B = K^T [d, rows] of tile_gemm_packed
// (widened from storage when narrower): column panel j0 (simd().panel keys,
// the last one fewer) at out + j0 * d, d rows of its width.
template <class S>
void pack_keys(const S* src, std::size_t rows, std::size_t d, float* out);

// A [rows, d_v] block of values as the packed B = V [rows, d_v]: column panel
// c0 at out + c0 * rows, rows rows of its width.
template <class S>
void pack_values(const S* src, std::size_t rows, std::size_t d_v, float* out);

}  // namespace attn::detail
