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
// The one-pass decode step of bf16 and fp16 (variant.inc, FusedDecodeSteps):
// 8 keys a step and 4 keys prefetched ahead, measured on a Zen 4 with this
// variant forced (docs/performance.md, section 68); fp32 keeps FusedDecode's
// 2-key step, which read more of the probe from memory.
#define ATTN_SIMD_DECODE_SUB 4
#define ATTN_SIMD_DECODE_AHEAD_KEYS 4
#include "attn/simd/variant.inc"
