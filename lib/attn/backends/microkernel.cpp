#include "attn/backends/microkernel.hpp"

#include <algorithm>

#include "attn/backends/kernels.hpp"
#include "attn/core/precision.hpp"
#include "attn/simd/simd.hpp"

namespace attn::detail {

void tile_gemm_packed(const float* a, std::size_t lda, const float* bp, float* c, std::size_t ldc, std::size_t m,
                      std::size_t n, std::size_t k, float alpha, bool accumulate) {
  attn::simd().tile_gemm_packed(a, lda, bp, c, ldc, m, n, k, alpha, accumulate);
}

void tile_gemm_packed_at(const float* at, std::size_t lda, const float* bp, float* c, std::size_t ldc, std::size_t m,
                         std::size_t n, std::size_t k, float alpha, bool accumulate) {
  attn::simd().tile_gemm_packed_at(at, lda, bp, c, ldc, m, n, k, alpha, accumulate);
}

namespace {

// Values are widened in chunks of this many (a multiple of every panel width:
// simd/variant.inc asserts it).
constexpr std::size_t chunk = 256;

}  // namespace

template <class S>
void pack_keys(const S* src, std::size_t rows, std::size_t d, float* out) {
  const std::size_t P = attn::simd().panel;
  float buf[chunk];
  for (std::size_t p0 = 0; p0 < rows; p0 += P) {
    const std::size_t w = std::min(P, rows - p0);
    float* panel = out + p0 * d;
    for (std::size_t jj = 0; jj < w; ++jj)
      for (std::size_t l0 = 0; l0 < d; l0 += chunk) {
        const std::size_t len = std::min(chunk, d - l0);
        const float* row = as_accumulate<float>(src + (p0 + jj) * d + l0, len, buf);
        for (std::size_t l = 0; l < len; ++l) panel[(l0 + l) * w + jj] = row[l];
      }
  }
}

template <class S>
void pack_values(const S* src, std::size_t rows, std::size_t d_v, float* out) {
  const std::size_t P = attn::simd().panel;
  float buf[chunk];
  for (std::size_t j = 0; j < rows; ++j)
    for (std::size_t l0 = 0; l0 < d_v; l0 += chunk) {
      const std::size_t len = std::min(chunk, d_v - l0);
      const float* row = as_accumulate<float>(src + j * d_v + l0, len, buf);
      for (std::size_t c0 = l0; c0 < l0 + len; c0 += P) {  // chunk % P == 0: panels start inside
        const std::size_t w = std::min(P, d_v - c0);
        std::copy(row + (c0 - l0), row + (c0 - l0) + w, out + c0 * rows + j * w);
      }
    }
}

#define ATTN_INSTANTIATE(S)                                                  \
  template void pack_keys(const S*, std::size_t, std::size_t, float*); \
  template void pack_values(const S*, std::size_t, std::size_t, float*);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
