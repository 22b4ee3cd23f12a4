#include "attn/backends/microkernel.hpp"

#include <algorithm>
#include <type_traits>

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

// The vector kernels of the variant in use (simd/variant.inc) for fp32, bf16
// and fp16 storage; fp64 storage (rounded to fp32 here) element by element.
template <class S>
void pack_keys(const S* src, std::size_t rows, std::size_t d, float* out) {
  const SimdKernels& v = attn::simd();
  if constexpr (std::is_same_v<S, float>) v.pack_keys_f32(src, rows, d, out);
  else if constexpr (std::is_same_v<S, bf16>) v.pack_keys_from_bf16(src, rows, d, out);
  else if constexpr (std::is_same_v<S, fp16>) v.pack_keys_from_fp16(src, rows, d, out);
  else {
    const std::size_t P = v.panel;
    for (std::size_t p0 = 0; p0 < rows; p0 += P) {
      const std::size_t w = std::min(P, rows - p0);
      for (std::size_t jj = 0; jj < w; ++jj)
        for (std::size_t l = 0; l < d; ++l) out[p0 * d + l * w + jj] = convert<float>(src[(p0 + jj) * d + l]);
    }
  }
}

template <class S>
void pack_values(const S* src, std::size_t rows, std::size_t d_v, float* out) {
  const SimdKernels& v = attn::simd();
  if constexpr (std::is_same_v<S, float>) v.pack_values_f32(src, rows, d_v, out);
  else if constexpr (std::is_same_v<S, bf16>) v.pack_values_from_bf16(src, rows, d_v, out);
  else if constexpr (std::is_same_v<S, fp16>) v.pack_values_from_fp16(src, rows, d_v, out);
  else {
    const std::size_t P = v.panel;
    for (std::size_t c0 = 0; c0 < d_v; c0 += P) {
      const std::size_t w = std::min(P, d_v - c0);
      for (std::size_t j = 0; j < rows; ++j)
        for (std::size_t c = 0; c < w; ++c) out[c0 * rows + j * w + c] = convert<float>(src[j * d_v + c0 + c]);
    }
  }
}

#define ATTN_INSTANTIATE(S)                                                  \
  template void pack_keys(const S*, std::size_t, std::size_t, float*); \
  template void pack_values(const S*, std::size_t, std::size_t, float*);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
