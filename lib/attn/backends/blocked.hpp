// blocked: query blocks of B_q rows; for each, one B_q x n_kv slab of scores
// (GEMM), masked, an exact max-shifted softmax per row, then times V (GEMM).
// Holds O(B_q * n_kv) scores, never n_q * n_kv. Tunable: B_q (Options::
// block_q, default 128). Keys no row of a block can see (causal, window,
// padding) are left out of its GEMMs. The exact-softmax counterpart of
// FlashAttention's tiling (Dao et al. 2022), without the online rescaling.
#pragma once

#include "attn/registry/backend.hpp"

namespace attn::backends {

struct Blocked {
  static constexpr std::string_view name = "blocked";
  static constexpr std::string_view description = "query blocks of B_q rows, a B_q x n_kv slab each, GEMM";
  static constexpr BackendTraits traits{.tiled = true, .uses_blas = true};
  static constexpr std::size_t default_block_q = 128;

  template <class S, Accumulate P>
  static Result<S> run(const Inputs<S>& in, const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t workspace_bytes(const Shape& s, const Options& opt);

  // The slab backward (slab_kernel.hpp): P recomputed with one GEMM per slab.
  template <class S, Accumulate P>
  static Gradients<S> backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                               const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t backward_workspace_bytes(const Shape& s, const Options& opt);

  static std::size_t block_q(const Options& opt) { return opt.block_q ? opt.block_q : default_block_q; }
};

}  // namespace attn::backends
