// The avx2 variant of the vector kernels (flags: lib/meson.build).
#define ATTN_SIMD_ID avx2
#define ATTN_SIMD_NAME "avx2"
#define ATTN_SIMD_BLOCK_Q 256
#define ATTN_SIMD_BLOCK_K 64
#include "attn/simd/variant.inc"
