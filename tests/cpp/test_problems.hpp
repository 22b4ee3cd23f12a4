// Masks the agreement tests build their problems with (agreement_test.cpp
// and backward_test.cpp, one executable).
#pragma once

#include <cstdint>
#include <limits>

#include "attn/core/random.hpp"

namespace attn {

// ALiBi: -slope times the distance to the aligned key, -inf beyond it (causal).
inline xt::xtensor<double, 2> alibi_bias(std::size_t n_q, std::size_t n_kv, double slope) {
  auto bias = xt::xtensor<double, 2>::from_shape({n_q, n_kv});
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_kv; ++j) {
      const double dist = double(i + n_kv - n_q) - double(j);
      bias(i, j) = dist < 0 ? -std::numeric_limits<double>::infinity() : -slope * dist;
    }
  return bias;
}

// About 70% of the pairs visible, row 1 fully masked.
inline xt::xtensor<std::uint8_t, 2> random_allowed(std::size_t n_q, std::size_t n_kv, std::uint64_t seed) {
  NormalStream normal(seed);
  auto allowed = xt::xtensor<std::uint8_t, 2>::from_shape({n_q, n_kv});
  for (auto& a : allowed) a = normal.next() > -0.3;
  for (std::size_t j = 0; j < n_kv; ++j) allowed(1, j) = 0;  // one fully masked row
  return allowed;
}

}  // namespace attn
