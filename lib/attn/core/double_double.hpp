// A double-double number (hi + lo, about 106 significand bits for + - * /)
// as the accumulation type of the compensated double reference: the naive
// kernel instantiated with it sums and dots in twice double precision, so
// its error does not grow with n. exp and log are double's (relative error
// about 2^-52), so the result is accurate to a few units of double rounding
// at any n; it is validated against the 50-digit reference where that is
// affordable (tests) and serves beyond it. Hand-written: Boost's
// cpp_double_double arrived after the Boost 1.74 of Debian 12.
// Algorithms: Dekker 1971 / Knuth TwoSum, FMA TwoProd (Ogita, Rump, Oishi 2005).
#pragma once

#include <cmath>

namespace attn {

struct dd {
  double hi = 0, lo = 0;
  dd() = default;
  explicit dd(double x) : hi(x), lo(0) {}
  dd(double h, double l) : hi(h), lo(l) {}
  explicit operator double() const { return hi + lo; }
};

namespace dd_detail {
inline dd fast_two_sum(double a, double b) {  // requires |a| >= |b| or a == 0
  const double s = a + b;
  return {s, b - (s - a)};
}
inline dd two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
}  // namespace dd_detail

// Non-finite results keep lo = 0, so -inf (masked scores) stays clean.
inline dd operator+(dd x, dd y) {
  const dd s = dd_detail::two_sum(x.hi, y.hi);
  if (!std::isfinite(s.hi)) return dd(s.hi);
  return dd_detail::fast_two_sum(s.hi, s.lo + x.lo + y.lo);
}
inline dd operator-(dd x) { return {-x.hi, -x.lo}; }
inline dd operator-(dd x, dd y) { return x + (-y); }
inline dd operator*(dd x, dd y) {
  const double p = x.hi * y.hi;
  if (!std::isfinite(p)) return dd(p);
  const double e = std::fma(x.hi, y.hi, -p) + (x.hi * y.lo + x.lo * y.hi);
  return dd_detail::fast_two_sum(p, e);
}
inline dd operator/(dd x, dd y) {
  const double q1 = x.hi / y.hi;
  if (!std::isfinite(q1)) return dd(q1);
  const dd r = x - dd(q1) * y;
  return dd_detail::fast_two_sum(q1, r.hi / y.hi);
}
inline dd& operator+=(dd& x, dd y) { return x = x + y; }
inline dd& operator*=(dd& x, dd y) { return x = x * y; }
inline dd& operator/=(dd& x, dd y) { return x = x / y; }
inline bool operator>(dd x, dd y) { return x.hi > y.hi || (x.hi == y.hi && x.lo > y.lo); }
inline bool operator<(dd x, dd y) { return y > x; }

// exp(hi + lo) = exp(hi) (1 + lo + ...): double's exp, lo carried to first order.
inline dd exp(dd x) {
  const double e = std::exp(x.hi);
  if (!std::isfinite(e) || e == 0) return dd(e);
  return dd_detail::fast_two_sum(e, e * x.lo);
}
inline dd log(dd x) {
  const double l = std::log(x.hi);
  if (!std::isfinite(l)) return dd(l);
  return dd_detail::two_sum(l, x.lo / x.hi);
}
// tanh(hi + lo) = tanh(hi) + lo (1 - tanh(hi)^2): double's tanh, lo to first order.
inline dd tanh(dd x) {
  const double t = std::tanh(x.hi);
  return dd_detail::fast_two_sum(t, x.lo * (1 - t * t));
}

}  // namespace attn
