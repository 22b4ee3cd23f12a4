// The avx512bf16 variant (flags: lib/meson.build): the avx512 variant's
// kernels and tiles plus the bf16 dot-product kernels (simd.hpp's
// gemm_bf16 and its packing), which the streaming forward and backward take
// for bf16 storage with fp32 accumulation where this variant is in use: by
// default where the CPU has AVX512_BF16 and the dot product measured at
// least sqrt(2) times the fp32 FMA rate (simd.hpp, bf16_dot_min_ratio).
#define ATTN_SIMD_ID avx512bf16
#define ATTN_SIMD_NAME "avx512bf16"
#define ATTN_SIMD_BLOCK_Q 512
#define ATTN_SIMD_BLOCK_K 256  // the avx512 variant's tiles (its comment)
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256  // the avx512 variant's (its comment)
#include "attn/simd/avx512_tiles.inc"  // past a decode step: 1024 x 1024 in strips
#include "attn/simd/variant.inc"
