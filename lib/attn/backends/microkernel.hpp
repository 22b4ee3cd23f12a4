// A register-blocked fp32 GEMM for the small tiles of the streaming backend:
//   C[m, n] = alpha * A[m, k] B[k, n]   (+ C when `accumulate`)
// all row-major with leading dimensions. Hand-written (not OpenBLAS) because
// a 64 x 64 x d tile is too small for a BLAS call: OpenBLAS packs both
// operands and checks its thread pool on every call, which cost the
// streaming backend about a third of its time (docs/performance.md, step 2).
// The kernel itself is compiled once per instruction set, with a register
// block sized to each (attn/simd.hpp, simd/variant.inc), and chosen at run
// time. Each C element is one fused multiply-add chain over k in order,
// then scaled once by alpha: deterministic, and at least as accurate as the
// per-operation rounding the error bounds assume.
#pragma once

#include <cstddef>

namespace attn::detail {

void tile_gemm(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
               std::size_t m, std::size_t n, std::size_t k, float alpha, bool accumulate);

// out[l * rows + j] = float(src[j * d + l]): a [rows, d] block of keys as the
// [d, rows] right operand of tile_gemm (widened from storage when narrower).
template <class S>
void pack_transposed(const S* src, std::size_t rows, std::size_t d, float* out);

}  // namespace attn::detail
