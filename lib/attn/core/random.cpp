#include "attn/core/random.hpp"

#include <bit>
#include <cmath>
#include <numbers>
#include <random>

namespace attn {

NormalStream::NormalStream(std::uint64_t seed) {
  std::mt19937_64 init(seed);  // fully specified by the standard
  for (auto& s : state_) s = init();
}

std::uint64_t NormalStream::next_bits() {
  // xoshiro256** (Blackman and Vigna, 2018): fast and fully specified.
  const std::uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = std::rotl(state_[3], 45);
  return result;
}

double NormalStream::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller on two uniforms in (0, 1].
  const double u1 = (double(next_bits() >> 11) + 1) * 0x1p-53;
  const double u2 = double(next_bits() >> 11) * 0x1p-53;
  const double r = std::sqrt(-2 * std::log(u1));
  spare_ = r * std::sin(2 * std::numbers::pi * u2);
  has_spare_ = true;
  return r * std::cos(2 * std::numbers::pi * u2);
}

xt::xtensor<double, 4> random_d_out(const Shape& s, std::uint64_t seed) {
  NormalStream normal(seed);
  auto t = xt::xtensor<double, 4>::from_shape({s.batch, s.heads, s.n_q, s.d_v});
  for (double& x : t) x = normal.next();
  return t;
}

Inputs<double> random_inputs(const Shape& s, std::uint64_t seed, double logit_scale) {
  NormalStream normal(seed);
  Inputs<double> in{xt::xtensor<double, 4>::from_shape({s.batch, s.heads, s.n_q, s.d_k}),
                    xt::xtensor<double, 4>::from_shape({s.batch, s.kv_head_count(), s.n_kv, s.d_k}),
                    xt::xtensor<double, 4>::from_shape({s.batch, s.kv_head_count(), s.n_kv, s.d_v})};
  for (double& x : in.q) x = logit_scale * normal.next();
  for (double& x : in.k) x = normal.next();
  for (double& x : in.v) x = normal.next();
  return in;
}

}  // namespace attn
