#include "attn/backends/microkernel.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

#include <xsimd/xsimd.hpp>

#include "attn/precision.hpp"

namespace attn::detail {

namespace {

using batch = xsimd::batch<float>;
constexpr std::size_t W = batch::size;

// One MR x (NV * W) block of C, accumulators in registers (MR * NV of them:
// 24 of the 32 zmm registers at MR = 6, NV = 4).
template <std::size_t MR, std::size_t NV>
inline void micro(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                  std::size_t k, float alpha, bool accumulate) {
  batch acc[MR][NV];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) acc[i][v] = batch(0.0f);
  for (std::size_t p = 0; p < k; ++p) {
    batch bv[NV];
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(b + p * ldb + v * W);
#pragma GCC unroll 8
    for (std::size_t i = 0; i < MR; ++i) {
      const batch ai(a[i * lda + p]);
#pragma GCC unroll 8
      for (std::size_t v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
    }
  }
  const batch scale(alpha);
#pragma GCC unroll 8
  for (std::size_t i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) {
      float* ci = c + i * ldc + v * W;
      batch r = acc[i][v] * scale;
      if (accumulate) r += batch::load_unaligned(ci);
      r.store_unaligned(ci);
    }
}

// Rows i0 .. i0 + m of C for the columns [j0, j0 + NV * W), MR rows at a time.
template <std::size_t NV>
void column_panel(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                  std::size_t m, std::size_t k, float alpha, bool accumulate) {
  constexpr std::size_t MR = NV >= 4 ? 6 : 8;  // keeps MR * NV + NV + 1 within 32 registers
  std::size_t i = 0;
  for (; i + MR <= m; i += MR) micro<MR, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k, alpha, accumulate);
  for (; i < m; ++i) micro<1, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k, alpha, accumulate);
}

}  // namespace

void tile_gemm(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
               std::size_t m, std::size_t n, std::size_t k, float alpha, bool accumulate) {
  std::size_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) column_panel<4>(a, lda, b + j, ldb, c + j, ldc, m, k, alpha, accumulate);
  for (; j + W <= n; j += W) column_panel<1>(a, lda, b + j, ldb, c + j, ldc, m, k, alpha, accumulate);
  // Fewer than W columns left: plain loops, same order of operations.
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t jj = j; jj < n; ++jj) {
      float dot = 0.0f;
      for (std::size_t p = 0; p < k; ++p) dot = std::fma(a[i * lda + p], b[p * ldb + jj], dot);
      c[i * ldc + jj] = accumulate ? c[i * ldc + jj] + dot * alpha : dot * alpha;
    }
}

// Hand-written conversions: GCC 12 turns neither loop into vector code
// (bf16 is a struct, and _Float16 -> float stays scalar vcvtsh2ss), and the
// scalar widening cost bf16/fp16 storage 2-4% against fp32 (docs/performance.md).
void widen_to_float(const bf16* src, std::size_t n, float* dst) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = float(src[i]);
}

void widen_to_float(const fp16* src, std::size_t n, float* dst) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = float(src[i]);
}

template <class S>
void pack_transposed(const S* src, std::size_t rows, std::size_t d, float* out) {
  if constexpr (std::is_same_v<S, bf16> || std::is_same_v<S, fp16>) {
    // Widen a row at a time (contiguous, vectorised), then scatter it.
    constexpr std::size_t chunk = 256;
    float row[chunk];
    for (std::size_t j = 0; j < rows; ++j)
      for (std::size_t l0 = 0; l0 < d; l0 += chunk) {
        const std::size_t len = std::min(chunk, d - l0);
        widen_to_float(src + j * d + l0, len, row);
        for (std::size_t l = 0; l < len; ++l) out[(l0 + l) * rows + j] = row[l];
      }
  } else {
    for (std::size_t j = 0; j < rows; ++j)
      for (std::size_t l = 0; l < d; ++l) out[l * rows + j] = convert<float>(src[j * d + l]);
  }
}

#define ATTN_INSTANTIATE(S) template void pack_transposed(const S*, std::size_t, std::size_t, float*);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
