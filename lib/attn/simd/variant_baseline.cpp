// The baseline variant of the vector kernels: the build's own flags (x86-64:
// x86-64-v2 + F16C, which GCC makes AVX; -Dnative=true: this CPU's). Streaming tiles 256 x 64, the values
// measured first on AVX-512 (docs/performance.md, section 3).
#define ATTN_SIMD_ID baseline
#define ATTN_SIMD_NAME "baseline"
#define ATTN_SIMD_BLOCK_Q 256
#define ATTN_SIMD_BLOCK_K 64
#define ATTN_SIMD_BACKWARD_BLOCK_Q 64
#define ATTN_SIMD_BACKWARD_BLOCK_K 64
#include "attn/simd/variant.inc"
