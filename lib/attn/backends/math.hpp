// math: the naive algorithm with Q K^T and P V as BLAS GEMM (OpenBLAS via
// xtensor-blas), the path most frameworks call "math". Holds the full
// n_q x n_kv scores of one head: O(n_q * n_kv). No tunables. Storage types
// narrower than the accumulation are widened before the GEMM, as frameworks
// do on CPU; with accumulate=storage for bf16/fp16 (no BLAS has it) the
// products run as loops that round every operation.
#pragma once

#include "attn/registry/backend.hpp"

namespace attn::backends {

struct Math {
  static constexpr std::string_view name = "math";
  static constexpr std::string_view description = "full score matrix, Q K^T and P V as BLAS GEMM";
  static constexpr BackendTraits traits{.uses_blas = true};

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
};

}  // namespace attn::backends
