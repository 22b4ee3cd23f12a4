// Claim "overflow": where the unshifted softmax overflows, and whether the
// shift costs accuracy where it does not (Blanchard, Higham, Higham 2021).
#include <cmath>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict unshifted_overflow(const Config& cfg);

// The claim, its source and its criterion (written before the experiment ran).
ATTN_CLAIM(.id = "overflow",
           .source = "Blanchard, Higham & Higham 2021, IMA J. Numer. Anal. 41(4), 'Accurately computing the "
                     "log-sum-exp and softmax functions'",
           .quote = "the shifted softmax is as accurate as the unshifted one where the latter does not overflow; unshifted, "
                    "exp overflows for scores above ln(65504) ~ 11.09 in fp16 and ~88.7 in fp32/bf16",
           .statement = "the unshifted softmax overflows at ln(max finite); the max shift costs no accuracy below that",
           .experiment = "exp of scores on a grid of 0.001 in fp16, bf16, fp32 arithmetic (every operation rounded); softmax of "
                         "200 rows of 64 scores in (-0.9 ln max, 0.9 ln max), shifted and unshifted, in that arithmetic, against "
                         "the exact softmax (long double) of the same rounded scores; the division-free form is not judged here",
           .criterion = "holds if each measured overflow threshold is within 0.5% of ln(max finite) and the shifted softmax's "
                        "max absolute weight error is at most 2x the unshifted one's in every format; does not hold otherwise "
                        "(first written with the relative error, changed after the first run: weights that underflow have "
                        "relative error 1 in both forms; the 2x threshold was kept)",
           .run = unshifted_overflow)


namespace {

// The smallest score x on a grid of 1e-3 whose exp overflows in T.
template <class T>
double overflow_threshold() {
  for (int i = 0; i < 200000; ++i) {
    const double x = i * 1e-3;
    if (std::isinf(static_cast<double>(exp_of<T>(convert<T>(x))))) return x;
  }
  return NAN;
}

// Max absolute error of the softmax weights over rows of `n` scores in
// (-t, t), computed in T with (shift = true) or without the max shift,
// against the exact softmax (long double) of the same rounded scores.
// (Absolute, not relative: weights that underflow to 0 have relative error
// 1 in both forms, which says nothing about the shift.)
template <class T>
double softmax_error(double t, bool shift, std::uint64_t seed) {
  NormalStream normal(seed);
  double worst = 0;
  const std::size_t n = 64;
  for (int row = 0; row < 200; ++row) {
    std::vector<T> s(n);
    for (auto& x : s) x = convert<T>(t * std::tanh(normal.next()));
    T m = s[0];
    for (T x : s) m = x > m ? x : m;
    const T shift_by = shift ? m : convert<T>(0.0);
    T l = convert<T>(0.0);
    std::vector<T> e(n);
    for (std::size_t j = 0; j < n; ++j) l += (e[j] = exp_of<T>(s[j] - shift_by));
    long double exact_l = 0;
    for (T x : s) exact_l += std::exp(static_cast<long double>(static_cast<double>(x)));
    for (std::size_t j = 0; j < n; ++j) {
      const long double exact = std::exp(static_cast<long double>(static_cast<double>(s[j]))) / exact_l;
      const double got = static_cast<double>(T(e[j] / l));
      worst = std::max(worst, double(std::fabs(got - exact)));
    }
  }
  return worst;
}

template <class T>
void study(Verdict& v, bool& ok, std::string& why, std::uint64_t seed) {
  const std::string name(precision_traits<T>::name);
  const double predicted = std::log(precision_traits<T>::max_finite), measured = overflow_threshold<T>();
  const double t = 0.9 * predicted;  // scores the unshifted softmax survives
  const double shifted = softmax_error<T>(t, true, seed), unshifted = softmax_error<T>(t, false, seed);
  v.figures.push_back({name + " overflow threshold", measured});
  v.figures.push_back({name + " ln(max)", predicted});
  v.figures.push_back({name + " error shifted", shifted});
  v.figures.push_back({name + " error unshifted", unshifted});
  ok = ok && std::fabs(measured - predicted) <= 0.005 * predicted && shifted <= 2 * unshifted;
  std::ostringstream o;
  o.precision(4);
  o << name << ": overflows at " << measured << " (ln max " << predicted << "), error shifted " << shifted
    << " vs unshifted " << unshifted << "; ";
  why += o.str();
}

}  // namespace

Verdict unshifted_overflow(const Config& cfg) {
  Verdict v;
  bool ok = true;
  std::string why;
  study<fp16>(v, ok, why, cfg.seed);
  study<bf16>(v, ok, why, cfg.seed);
  study<float>(v, ok, why, cfg.seed);
  v.outcome = ok ? Outcome::holds : Outcome::does_not_hold;
  v.why = why.substr(0, why.size() - 2);
  return v;
}

}  // namespace attn::claims
