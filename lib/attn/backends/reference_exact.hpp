// The 50-digit reference's values before their rounding to double, for the
// checks that need more digits than a double holds (the finite-difference
// proof of the backward formulas, tests/cpp/backward_test.cpp). Apart from
// reference.hpp so that only those checks include Boost.Multiprecision.
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "attn/core/problem.hpp"

namespace attn::backends {

using exact_t = boost::multiprecision::cpp_bin_float_50;

// <dQ, X.q> + <dK, X.k> + <dV, X.v> (+ <d(sinks), x_sinks>) for the exact
// gradients of L = <dO, O> at `in` (the directional derivative of L along
// X), in 50 digits.
exact_t reference_gradient_dot(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                               const Inputs<double>& direction, const xt::xtensor<double, 1>* sink_direction = nullptr);

}  // namespace attn::backends
