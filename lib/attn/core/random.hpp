// Random problems with a fixed seed: the same seed gives the same tensors on
// every run and machine (std::mt19937_64 with our own Box-Muller transform,
// since std::normal_distribution's algorithm is not fixed by the standard).
#pragma once

#include <cstdint>

#include "attn/core/problem.hpp"

namespace attn {

// Q [B, H, n_q, d_k], K, V [B, H_kv, n_kv, d] with iid N(0, 1) entries; Q is multiplied by logit_scale, so the
// default-scaled scores q.k / sqrt(d_k) have standard deviation logit_scale.
Inputs<double> random_inputs(const Shape& s, std::uint64_t seed, double logit_scale = 1.0);

// An upstream gradient dO for the backward pass: iid N(0, 1) entries of the
// output's shape [B, H, n_q, d_v].
xt::xtensor<double, 4> random_d_out(const Shape& s, std::uint64_t seed);

// A stream of N(0, 1) samples, reproducible from its seed.
class NormalStream {
 public:
  explicit NormalStream(std::uint64_t seed);
  double next();

 private:
  std::uint64_t state_[4];
  double spare_ = 0;
  bool has_spare_ = false;
  std::uint64_t next_bits();
};

}  // namespace attn
