// Claim "overflow": where the unshifted softmax overflows, whether the
// shift costs accuracy where it does not, and whether the division-free form
// exp(x - lse) loses accuracy (Blanchard, Higham, Higham 2021).
#include <cmath>
#include <sstream>

#include "attn/core/random.hpp"
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

enum class Form { unshifted, shifted, division_free };

// Max absolute error of the softmax weights over rows of `n` scores in
// (-t, t), computed in T: unshifted exp(x_j) / sum, shifted exp(x_j - m) /
// sum, or division-free exp(x_j - lse), lse = m + log(sum exp(x_j - m)) (the
// paper's three algorithms), against the exact softmax (long double) of
// the same rounded scores.
// (Absolute, not relative: weights that underflow to 0 have relative error
// 1 in both forms, which says nothing about the shift.)
template <class T>
double softmax_error(double t, Form form, std::uint64_t seed) {
  NormalStream normal(seed);
  double worst = 0;
  const std::size_t n = 64;
  for (int row = 0; row < 200; ++row) {
    std::vector<T> s(n);
    for (auto& x : s) x = convert<T>(t * std::tanh(normal.next()));
    T m = s[0];
    for (T x : s) m = x > m ? x : m;
    const T shift_by = form == Form::unshifted ? convert<T>(0.0) : m;
    T l = convert<T>(0.0);
    std::vector<T> e(n);
    for (std::size_t j = 0; j < n; ++j) l += (e[j] = exp_of<T>(s[j] - shift_by));
    const T lse = m + convert<T>(std::log(static_cast<double>(l)));  // log rounded to T
    long double exact_l = 0;
    for (T x : s) exact_l += std::exp(static_cast<long double>(static_cast<double>(x)));
    for (std::size_t j = 0; j < n; ++j) {
      const long double exact = std::exp(static_cast<long double>(static_cast<double>(s[j]))) / exact_l;
      const double got = static_cast<double>(form == Form::division_free ? exp_of<T>(s[j] - lse) : T(e[j] / l));
      worst = std::max(worst, double(std::fabs(got - exact)));
    }
  }
  return worst;
}

template <class T>
void study(Verdict& v, bool& ok, bool& loses, std::string& why, std::uint64_t seed) {
  const std::string name(precision_traits<T>::name);
  const double predicted = std::log(precision_traits<T>::max_finite), measured = overflow_threshold<T>();
  const double t = 0.9 * predicted;  // scores the unshifted softmax survives
  const double shifted = softmax_error<T>(t, Form::shifted, seed), unshifted = softmax_error<T>(t, Form::unshifted, seed);
  const double division_free = softmax_error<T>(t, Form::division_free, seed);
  v.figures.push_back({name + " overflow threshold", measured});
  v.figures.push_back({name + " ln(max)", predicted});
  v.figures.push_back({name + " error shifted", shifted});
  v.figures.push_back({name + " error unshifted", unshifted});
  v.figures.push_back({name + " error division-free", division_free});
  ok = ok && std::fabs(measured - predicted) <= 0.005 * predicted && shifted <= 2 * unshifted;
  loses = loses || division_free > 2 * shifted;
  std::ostringstream o;
  o.precision(4);
  o << name << ": overflows at " << measured << " (ln max " << predicted << "), error shifted " << shifted
    << " vs unshifted " << unshifted << ", division-free " << division_free << "; ";
  why += o.str();
}

}  // namespace

Verdict unshifted_overflow(const Config& cfg) {
  Verdict v;
  bool ok = true, loses = false;  // every format's threshold and shift; division-free worse in some format
  std::string why;
  study<fp16>(v, ok, loses, why, cfg.seed);
  study<bf16>(v, ok, loses, why, cfg.seed);
  study<float>(v, ok, loses, why, cfg.seed);
  v.outcome = ok && loses ? Outcome::holds : Outcome::does_not_hold;
  v.why = why.substr(0, why.size() - 2);
  return v;
}

}  // namespace attn::claims
