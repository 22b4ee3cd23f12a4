#include "attn/core/precision.hpp"

namespace attn {

std::uint16_t bf16::from_double(double d) {
  // Round to float with round-to-odd, then to bf16 nearest-even: since float
  // carries 24 >= 8 + 2 significand bits, the two steps round correctly.
  if (std::isnan(d)) return from_float(static_cast<float>(d));
  float f = static_cast<float>(d);
  if (std::isinf(f) || static_cast<double>(f) == d) return from_float(f);
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 1u) == 0) {
    bool away_from_zero = std::fabs(static_cast<double>(f)) < std::fabs(d);
    u = away_from_zero ? u + 1 : u - 1;  // magnitude bits; the sign bit is untouched
  }
  return from_float(std::bit_cast<float>(u));
}

}  // namespace attn
