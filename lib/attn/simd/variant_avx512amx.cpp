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
#define ATTN_SIMD_BLOCK_K 256  // the avx512 variant's tiles (its comment): here a decode step's, fp64's, storage accumulation's
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256  // the avx512 variant's (its comment)
#include "attn/simd/avx512_tiles.inc"  // past a decode step: 1024 x 1024 in strips
#include "attn/simd/variant.inc"
