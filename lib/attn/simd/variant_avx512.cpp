// The avx512 variant of the vector kernels (flags: lib/meson.build).
// Streaming tiles: 256 x 64, measured on AMD Zen 4 (AVX-512) for the
// earlier, unpacked 6 x 4 kernel (docs/performance.md, section 3); the
// committed runs since (Intel Xeon, AVX-512) ran this variant with these tiles
// but did not sweep the tile sizes again for the packed kernel.
#define ATTN_SIMD_ID avx512
#define ATTN_SIMD_NAME "avx512"
#define ATTN_SIMD_BLOCK_Q 256
#define ATTN_SIMD_BLOCK_K 64
#define ATTN_SIMD_BACKWARD_BLOCK_Q 64
#define ATTN_SIMD_BACKWARD_BLOCK_K 64
#include "attn/simd/variant.inc"
