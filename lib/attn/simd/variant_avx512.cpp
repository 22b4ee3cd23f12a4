// The avx512 variant of the vector kernels (flags: lib/meson.build).
// Streaming tiles: 256 x 256, swept for the packed kernels on an AMD EPYC
// with AVX-512 and AVX512_BF16 (docs/performance.md, section 15: 12% and 5%
// faster than the 256 x 64 measured on Zen 4 for the earlier, unpacked 6 x 4
// kernel, fp32 at d = 64 and 128). B_q = 512 measured 3-4% faster for
// unmasked fp32 at d = 128 but broke the GQA invariance's bits (a stacked
// block holds B_q / g positions, and which key tiles a causal block narrows
// depends on its rows: section 39): 256 until the block's positions are made
// independent of the stacking. Backward tiles 96 x 256 (were 64 x 64): swept
// on the same machine once the backward read P and dS in place (docs/performance.md,
// section 16): 4-8% faster at d = 64 and 128; 96 rows are 16 micro-kernel
// strips of 6, with no edge strip.
#define ATTN_SIMD_ID avx512
#define ATTN_SIMD_NAME "avx512"
#define ATTN_SIMD_BLOCK_Q 256
#define ATTN_SIMD_BLOCK_K 256
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256
#include "attn/simd/variant.inc"
