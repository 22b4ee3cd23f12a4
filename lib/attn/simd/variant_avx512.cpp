// The avx512 variant of the vector kernels (flags: lib/meson.build). Past a
// decode step the forward takes avx512_tiles.inc's tiles (fp32: 1024 x 1024
// in strips); below, the plain tiles: a decode step's, storage accumulation's.
// Streaming tiles: 512 x 256. 256 x 256 was swept for the packed kernels on
// an AMD EPYC with AVX-512 and AVX512_BF16 (docs/performance.md, section 15:
// 12% and 5% faster than the 256 x 64 measured on Zen 4 for the earlier,
// unpacked 6 x 4 kernel, fp32 at d = 64 and 128); B_q = 512 measured on a
// Zen 4 EPYC, alternated (section 39): fp32 3-4% faster at d = 128 and 0-5%
// at d = 64, causal, bf16 and fp16 at d = 64 the same. It broke the GQA
// invariance's bits until a row's key tiles came from its own mask, not its
// block (section 40). Backward tiles 96 x 256 (were 64 x 64): swept
// on the same machine once the backward read P and dS in place (docs/performance.md,
// section 16): 4-8% faster at d = 64 and 128; 96 rows are 16 micro-kernel
// strips of 6, with no edge strip.
#define ATTN_SIMD_ID avx512
#define ATTN_SIMD_NAME "avx512"
#define ATTN_SIMD_BLOCK_Q 512
#define ATTN_SIMD_BLOCK_K 256
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256
#include "attn/simd/avx512_tiles.inc"  // past a decode step: 1024 x 1024 in strips (fp32)
#include "attn/simd/variant.inc"
