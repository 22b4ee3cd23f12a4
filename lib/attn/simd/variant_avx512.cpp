// The avx512 variant of the vector kernels (flags: lib/meson.build).
#define ATTN_SIMD_ID avx512
#define ATTN_SIMD_NAME "avx512"
#define ATTN_SIMD_BLOCK_Q 256
#define ATTN_SIMD_BLOCK_K 64
#include "attn/simd/variant.inc"
