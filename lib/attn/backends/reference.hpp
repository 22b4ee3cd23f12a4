// reference: the naive algorithm in 50 significant decimal digits (MPFR
// through Boost.Multiprecision: reference_exact.hpp), rounded once at the
// end. The ground truth every other backend is compared with. O(n_q * n_kv)
// memory of 50-digit numbers and about 2.9 us per exp: for small and medium
// shapes.
#pragma once

#include "attn/registry/backend.hpp"

namespace attn::backends {

struct Reference {
  static constexpr std::string_view name = "reference";
  static constexpr std::string_view description =
      "the naive algorithm in 50-digit arithmetic (MPFR): the ground truth";
  static constexpr BackendTraits traits{.exact = true};

  // The accumulation policy is ignored: the reference always computes in 50 digits.
  template <class S, Accumulate P>
  static Result<S> run(const Inputs<S>& in, const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t workspace_bytes(const Shape& s, const Options& opt);

  // The naive backward (naive_kernel.hpp) in 50 digits, rounded once per
  // value; its own exact forward, not the saved state (D = sum_j P_ij dP_ij).
  template <class S, Accumulate P>
  static Gradients<S> backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                               const Options& opt, Workspace& ws);
  template <class S, Accumulate P>
  static std::size_t backward_workspace_bytes(const Shape& s, const Options& opt);
};

// The exact attention of the given (already rounded) inputs, rounded once
// to double: what every comparison in the suite measures against. Always
// returns weights and logsumexp.
Result<double> reference_attention(const Inputs<double>& in, const Options& opt);

// The same algorithm with double-double sums and dots (double_double.hpp):
// accurate to a few units of double rounding at any n, about 20x cheaper
// than 50 digits. Always returns weights and logsumexp.
Result<double> compensated_reference_attention(const Inputs<double>& in, const Options& opt);

// The exact gradients of the given (already rounded) inputs and upstream
// gradient, rounded once to double (d(bias): per head, then summed over
// batch and heads in double): the ground truth of every backward check.
Gradients<double> reference_gradients(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                                      const Options& opt);

// What the 50-digit reference costs, in multiply-add equivalents: B H n_q
// n_kv (d_k + d_v + 100), an exp counted as 100 (measured: about 40 in
// Boost's cpp_bin_float_50, 19 in MPFR; the formula, which the budgets and
// the sweep's cost model use, is kept); 0.07 us each at d = 64 on one Xeon core (attn-lab attend
// --backend reference --random 1,1,256,256,64,64 --precision fp64: 1.1 s).
double reference_cost(const Shape& s);
// The largest reference_cost the suite spends on 50 digits by default (under a second).
inline constexpr double reference_budget = 4e6;

}  // namespace attn::backends
