#include "attn/backends/microkernel.hpp"

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

template <class S>
void pack_transposed(const S* src, std::size_t rows, std::size_t d, float* out) {
  for (std::size_t j = 0; j < rows; ++j)
    for (std::size_t l = 0; l < d; ++l) out[l * rows + j] = convert<float>(src[j * d + l]);
}

#define ATTN_INSTANTIATE(S) template void pack_transposed(const S*, std::size_t, std::size_t, float*);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
