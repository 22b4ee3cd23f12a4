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
// bf16 on the tiles, beyond a decode step: blocks of 1024 query rows taken
// in strips (streaming.cpp's strip_rows) against key tiles of 1024: swept on
// the first AMX machine (docs/performance.md, sections 42 and 45; B_q 256-
// 2048, B_k 256-1024, strips of 32-256 rows, d = 64 and 128, n = 4096, one
// thread, two rounds): the best strips kept a strip's scores and P~ with
// the tile's packed K and V near 768 KiB of the 2 MiB L2 (64 rows at d =
// 64, 32 at d = 128): 0.088 and 0.120-0.123 s where 256 x 512 without
// strips took 0.104-0.105 and 0.142-0.146.
#define ATTN_SIMD_DOT_BLOCK_Q 1024
#define ATTN_SIMD_DOT_BLOCK_K 1024
#define ATTN_SIMD_DOT_STRIP_BYTES (768 << 10)
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256  // the avx512 variant's (its comment)
#include "attn/simd/variant.inc"
