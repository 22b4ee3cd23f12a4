// Claim "fp16-pv": accumulating P V in fp16 against fp32, over n.
#include <cmath>
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict fp16_pv_accumulation(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "fp16-pv", .run = fp16_pv_accumulation)



Verdict fp16_pv_accumulation(const Config& cfg) {
  Verdict v;
  const std::size_t rows = 32, d = 64;
  std::vector<double> ns, e16, e32;
  const std::vector<std::size_t> sizes = cfg.smoke() ? std::vector<std::size_t>{64, 256}
                                                     : std::vector<std::size_t>{64, 256, 1024, 4096};
  for (std::size_t n : sizes) {
    // Exact softmax weights of random scores (the reference), rounded to fp16 like V.
    const Inputs<double> in = random_inputs({1, 1, rows, n, d, d}, cfg.seed + n);
    Options opt;
    const Result<double> ref = ground_truth(in, opt, precision_info("fp64").unit_roundoff).result;
    const auto& weights = ref.weights.value();  // (the ground truth always returns them)
    double err16 = 0, err32 = 0;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        fp16 acc16 = 0;
        float acc32 = 0;
        double exact = 0;
        for (std::size_t j = 0; j < n; ++j) {
          const fp16 p = fp16(weights(0, 0, i, j)), x = fp16(in.v(0, 0, j, c));
          acc16 += p * x;  // every product and sum rounded to fp16
          acc32 += float(p) * float(x);
          exact += double(p) * double(x);  // fp16 x fp16 is exact in double; the sum errs by ~1e-16
        }
        err16 = std::max(err16, std::fabs(double(acc16) - exact));
        err32 = std::max(err32, std::fabs(double(acc32) - exact));
      }
    ns.push_back(double(n));
    e16.push_back(err16);
    e32.push_back(err32);
    v.figures.push_back({"n=" + std::to_string(n) + " fp16 accumulation", err16});
    v.figures.push_back({"n=" + std::to_string(n) + " fp32 accumulation", err32});
    if (cfg.progress) cfg.progress("fp16-pv: n=" + std::to_string(n));
  }
  v.plots.push_back({"max |P V error| by accumulation", "n (keys)", "max abs error", true, true, ns,
                     {{"fp16 accumulation", e16}, {"fp32 accumulation", e32}}});
  const double x16 = loglog_slope(ns, e16), x32 = loglog_slope(ns, e32);
  v.figures.push_back({"exponent fp16", x16});
  v.figures.push_back({"exponent fp32", x32});
  bool tenfold = true;
  for (std::size_t i = 0; i < ns.size(); ++i) tenfold = tenfold && e16[i] >= 10 * e32[i];
  v.outcome = tenfold && x16 - x32 >= 0.25 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "max error fp16 accumulation " << e16.front() << " -> " << e16.back() << " (exponent " << x16
      << "), fp32 " << e32.front() << " -> " << e32.back() << " (exponent " << x32 << ") for n = " << sizes.front()
      << " -> " << sizes.back();
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
