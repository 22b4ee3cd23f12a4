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
// fp32 accumulation on the micro-kernel (fp32 storage, fp16 widened), beyond
// a decode step: blocks of 1024 rows in strips against key tiles of 1024,
// swept on the same machine (docs/performance.md, section 49; B_q 1024-2048,
// B_k 512-1024, strips of 32-256 rows, d = 64 and 128, n = 4096, one thread,
// two rounds): strips of 64 rows were best at both d (0.253-0.256 s and
// 0.467-0.468 s, where the tiles of 512 x 256 without strips took 0.277 and
// 0.495); 1280 KiB gives 64 rows at d = 128 and 192 at d = 64 (within 1%
// of 64 there). The other AVX-512 variants keep 512 x 256 (not swept on a
// Zen 4).
#define ATTN_SIMD_MICRO_BLOCK_Q 1024
#define ATTN_SIMD_MICRO_BLOCK_K 1024
#define ATTN_SIMD_MICRO_STRIP_BYTES (1280 << 10)
#define ATTN_SIMD_BACKWARD_BLOCK_Q 96
#define ATTN_SIMD_BACKWARD_BLOCK_K 256  // the avx512 variant's (its comment)
#include "attn/simd/variant.inc"
