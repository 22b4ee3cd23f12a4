#include "attn/backends/microkernel.hpp"

#include <algorithm>

#include "attn/backends/kernels.hpp"
#include "attn/precision.hpp"
#include "attn/simd.hpp"

namespace attn::detail {

void tile_gemm(const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
               std::size_t m, std::size_t n, std::size_t k, float alpha, bool accumulate) {
  attn::simd().tile_gemm(a, lda, b, ldb, c, ldc, m, n, k, alpha, accumulate);
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
