// The avx512amx variant (flags: lib/meson.build): the avx512bf16 variant's
// kernels and tiles with gemm_bf16 on AMX tiles (TDPBF16PS), the bf16
// forward's and backward's Q K^T and P V where bf16 storage accumulates in
// fp32; taken by default where the CPU has AMX-BF16, the OS grants the tile
// state and the tile product measured at least sqrt(2) times the fp32 FMA
// rate (simd.hpp, bf16_dot_min_ratio). The decode step keeps the avx512bf16
// variant's vdpbf16ps kernels (docs/performance.md, section 41).
#define ATTN_SIMD_ID avx512amx
#define ATTN_SIMD_NAME "avx512amx"
#define ATTN_SIMD_BLOCK_Q 512
#define ATTN_SIMD_BLOCK_K 256  // the avx512 variant's tiles (its comment), fp32's and fp16's here
// bf16 on the tiles, beyond a decode step: swept on the first AMX machine
// (B_q 64-512 x B_k 64-1024, d = 64 and 128, n = 4096, one thread, two
// alternated rounds; docs/performance.md, section 42). 256 x 512 took 0.110-
// 0.112 / 0.153-0.155 s (d = 64 / 128) where 512 x 256 took 0.126-0.128 /
// 0.158-0.163; 192 x 768 was faster at d = 64 (0.105) but 12% slower under a
// causal mask at d = 128, where 256 x 512 lost 5% (0.106 against 0.102).
#define ATTN_SIMD_DOT_BLOCK_Q 256
#define ATTN_SIMD_DOT_BLOCK_K 512
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256  // the avx512 variant's (its comment)
#include "attn/simd/variant.inc"
