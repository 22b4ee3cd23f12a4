// The 50-digit reference's values before their rounding to double, for the
// checks that need more digits than a double holds (the finite-difference
// proof of the backward formulas, tests/cpp/backward_test.cpp). Apart from
// reference.hpp so that only those checks include Boost.Multiprecision.
#pragma once

#include <boost/multiprecision/mpfr.hpp>

#include "attn/core/problem.hpp"

namespace attn::backends {

// 50 decimal digits (168 bits) in MPFR, correctly rounded in every operation
// and exp/log/tanh, through Boost.Multiprecision's wrapper: the numbers' limbs
// on the stack (no allocation per temporary), no expression templates. It was
// Boost's own cpp_bin_float_50, whose multiply-add and exp took 2.8 and 6.0 times
// as long (424 ns and 17.3 us against 153 ns and 2.9 us, one Xeon core): 80% of
// the property suite's time was the reference's arithmetic.
using exact_t = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<50, boost::multiprecision::allocate_stack>,
                                              boost::multiprecision::et_off>;

// MPFR keeps caches per thread (constants such as log 2, a pool of integers)
// that a thread leaves allocated when it ends: about 1.2 KB per worker of
// every parallel truth, which LeakSanitizer reports. Called by code that
// computes in exact_t, first thing in each thread: the thread frees them
// when it exits.
inline void exact_caches_freed_at_thread_exit() {
  thread_local const struct Free {
    ~Free() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
  } guard;
  (void)guard;
}

// <dQ, X.q> + <dK, X.k> + <dV, X.v> (+ <d(sinks), x_sinks>) for the exact
// gradients of L = <dO, O> at `in` (the directional derivative of L along
// X), in 50 digits.
exact_t reference_gradient_dot(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                               const Inputs<double>& direction, const xt::xtensor<double, 1>* sink_direction = nullptr);

}  // namespace attn::backends
