// Claim "overflow": where the unshifted softmax overflows, and whether the
// shift costs accuracy where it does not (Blanchard, Higham, Higham 2021).
#include <cmath>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict unshifted_overflow(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "overflow", .run = unshifted_overflow)


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
