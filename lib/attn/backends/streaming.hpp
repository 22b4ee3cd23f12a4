// streaming: online softmax, one pass over K/V per query block (the
// FlashAttention-2 recurrence, Dao 2023, algorithm 1). For each block of B_q
// queries, K/V blocks of B_k keys update a running max m_i, running sum l_i
// and unnormalised accumulator O_i, rescaled by exp(m_old - m_new) when the
// max grows; O_i / l_i once at the end. Returns the logsumexp m_i + log l_i;
// weights, when asked for (tests), are rebuilt from it in a second pass as
// exp(S_ij - lse_i), never stored during the first.
// Each worker (Options::threads of them, over batch x heads x query blocks)
// holds O(B_q * B_k + B_q * d_v + B_k * d) floats: independent of n.
// With fp32 accumulation both tile products run the register-blocked
// micro-kernel (microkernel.hpp) on K and V blocks packed in column panels
// (and widened from bf16/fp16) once per tile; where the avx512bf16 kernel
// variant is in use (AVX512_BF16, by default only where its dot product
// measured at least sqrt(2) times the fp32 FMA rate: simd.hpp) bf16 storage's forward tiles are bf16 dot
// products instead, P~ rounded to bf16 before P V (Result::rounding says so;
// the bounds take it), and so are the backward's S = Q K^T and dP = dO V^T;
// other accumulation types use the shared GEMM/loop tiles. Tunables: B_q (Options::block_q), B_k
// (Options::block_k); the defaults are measured per instruction set at B = 1,
// H = 8, n = 4096 (simd/variant_*.cpp, docs/performance.md). Key blocks no query of the
// block can see (causal, window, padding) are skipped, and rows of a tile
// that the mask leaves whole are not masked at all.
#pragma once

#include "attn/registry/backend.hpp"
#include "attn/simd/simd.hpp"

namespace attn::backends {

struct Streaming {
  static constexpr std::string_view name = "streaming";
  static constexpr std::string_view description =
      "online softmax over B_k-key tiles (FlashAttention-2), O(B_q*B_k) memory";
  // Weights are rebuilt from the logsumexp (see above); the tiles of other
  // accumulation types are OpenBLAS GEMMs.
  static constexpr BackendTraits traits{.weights_from_lse = true, .tiled = true, .own_threads = true,
                                        .uses_blas = true, .memory_independent_of_n = true};

  template <class S, Accumulate P>
  static Result<S> run(const Inputs<S>& in, const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t workspace_bytes(const Shape& s, const Options& opt);

  // The FlashAttention-2 backward (streaming.cpp): P recomputed tile by tile
  // from Q, K and the saved logsumexp; D from dO and the saved output.
  template <class S, Accumulate P>
  static Gradients<S> backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                               const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t backward_workspace_bytes(const Shape& s, const Options& opt);

  // Defaults: the tiles measured for the vector kernels in use (attn/simd/simd.hpp);
  // `own`: the variant's own tiles for the arithmetic in use past a decode step, where it has them
  // (streaming.cpp's own_tiles).
  static std::size_t block_q(const Options& opt, const SimdKernels::Tiling* own = nullptr) {
    return opt.block_q ? opt.block_q : own && own->block_q ? own->block_q : simd().block_q;
  }
  static std::size_t block_k(const Options& opt, const SimdKernels::Tiling* own = nullptr) {
    return opt.block_k ? opt.block_k : own && own->block_k ? own->block_k : simd().block_k;
  }
  // The backward's: Options::block_q / block_k when set, else its own measured tiles.
  static std::size_t backward_block_q(const Options& opt) { return opt.block_q ? opt.block_q : simd().backward_block_q; }
  static std::size_t backward_block_k(const Options& opt) { return opt.block_k ? opt.block_k : simd().backward_block_k; }
};

}  // namespace attn::backends
