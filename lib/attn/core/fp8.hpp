// FP8 (OCP e4m3 "FN" and e5m2) emulated by rounding to their grids: round to
// nearest, ties to even, saturating at the largest finite value (as FP8
// attention kernels convert). Hand-written: no Debian 12 library has FP8.
// Not a storage type of the backends: the accuracy sweep and the claims
// quantise inputs and outputs with it around an fp32 computation.
#pragma once

#include <cmath>
#include <string_view>

#include "attn/core/problem.hpp"

namespace attn {

struct Fp8Format {
  std::string_view name;
  int mantissa_bits, min_exponent;
  double max_finite;
  double unit_roundoff() const { return std::ldexp(1.0, -mantissa_bits - 1); }
};
inline constexpr Fp8Format e4m3{"e4m3", 3, -6, 448.0}, e5m2{"e5m2", 2, -14, 57344.0};

inline double round_fp8(double x, const Fp8Format& f) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.min_exponent);
  const double ulp = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double r = std::nearbyint(x / ulp) * ulp;
  return std::fabs(r) > f.max_finite ? std::copysign(f.max_finite, x) : r;
}

// t scaled by a power of two so that max |t| fits the format, rounded to its
// grid and scaled back (exact in fp32: the scale is a power of two).
template <std::size_t N>
xt::xtensor<double, N> quantise_fp8(const xt::xtensor<double, N>& t, const Fp8Format& f) {
  double amax = 0;
  for (double x : t) amax = std::max(amax, std::fabs(x));
  const double scale = amax > 0 ? std::exp2(std::ceil(std::log2(amax / f.max_finite))) : 1.0;
  xt::xtensor<double, N> r = t;
  for (double& x : r) x = round_fp8(x / scale, f) * scale;
  return r;
}

}  // namespace attn
