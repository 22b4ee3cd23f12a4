// The avx2 variant of the vector kernels (flags: lib/meson.build).
// Streaming tiles measured on AMD EPYC (Zen 3, AVX2), n = 4096, H = 8, fp32,
// medians of 4 alternating rounds (docs/performance.md, section 8):
// 512 x 96 ran 64.2 / 71.3 GFLOP/s at d = 64 / 128 against 55.3 / 65.0 for
// 256 x 64.
#define ATTN_SIMD_ID avx2
#define ATTN_SIMD_NAME "avx2"
#define ATTN_SIMD_BLOCK_Q 512
#define ATTN_SIMD_BLOCK_K 96
#define ATTN_SIMD_BACKWARD_BLOCK_Q 64
#define ATTN_SIMD_BACKWARD_BLOCK_K 96
#include "attn/simd/variant.inc"
