// naive: the textbook algorithm in loops. Holds the whole n_q x n_kv score
// matrix of one head in the accumulation type: O(n_q * n_kv) memory. No
// tunables. Vaswani et al. 2017, "Attention is all you need", eq. 1.
#pragma once

#include "attn/registry/backend.hpp"

namespace attn::backends {

struct Naive {
  static constexpr std::string_view name = "naive";
  static constexpr std::string_view description =
      "full score matrix in loops, max-shifted softmax per row";
  static constexpr BackendTraits traits{.baseline = true};

  template <class S, Accumulate P>
  static Result<S> run(const Inputs<S>& in, const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t workspace_bytes(const Shape& s, const Options& opt);

  // The explicit formulas (naive_kernel.hpp), D from the saved output.
  template <class S, Accumulate P>
  static Gradients<S> backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                               const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t backward_workspace_bytes(const Shape& s, const Options& opt);
};

}  // namespace attn::backends
