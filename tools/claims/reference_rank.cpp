// Claim "reference-rank": a bf16 reference, whose own error swamps the gap
// between two fp32 implementations' errors, ranks them no better than a coin
// flip (an exact binomial test of the inversions against 1/2).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict reference_precision_ranking(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "reference-rank", .run = reference_precision_ranking)


namespace {
// The exact two-sided binomial test of k successes in m trials against
// probability 1/2: the total probability of outcomes no more likely than k.
double binomial_half_p_value(int k, int m) {
  auto log_pmf = [m](int i) { return std::lgamma(m + 1.0) - std::lgamma(i + 1.0) - std::lgamma(m - i + 1.0) - m * std::log(2.0); };
  const double at_k = log_pmf(k);
  double p = 0;
  for (int i = 0; i <= m; ++i)
    if (log_pmf(i) <= at_k + 1e-9) p += std::exp(log_pmf(i));
  return std::min(1.0, p);
}
}  // namespace

Verdict reference_precision_ranking(const Config& cfg) {
  Verdict v;
  const std::size_t problems = cfg.smoke() ? 8 : 100;
  const BackendInfo &a = fused_backend(), &b = baseline_backend(), &reference = exact_backend();
  int inversions = 0, untied = 0;
  std::vector<double> swamp;  // the bf16 reference's own error / the gap between the two errors
  for (std::size_t p = 0; p < problems; ++p) {
    const Inputs<double> in = random_inputs({1, 1, 32, 48, 32, 32}, cfg.seed + p);
    Options opt;
    const RunReport ra = a.run("fp32", Accumulate::fp32, in, opt, {}, 0);
    const RunReport rb = b.run("fp32", Accumulate::fp32, in, opt, {}, 0);
    // A bf16 reference: the exact attention of the bf16-rounded inputs, its output rounded to bf16.
    const RunReport low = reference.run("bf16", Accumulate::fp64, in, opt, {}, 0);
    const Result<double> exact = backends::reference_attention(ra.rounded_inputs, opt);
    const double ea = compare(ra.out, exact.out, ra.u_store).max_abs, eb = compare(rb.out, exact.out, rb.u_store).max_abs;
    const double la = compare(ra.out, low.out, ra.u_store).max_abs, lb = compare(rb.out, low.out, rb.u_store).max_abs;
    if (ea == eb || la == lb) continue;  // a tie ranks nothing
    ++untied;
    if ((ea < eb) != (la < lb)) ++inversions;
    swamp.push_back(compare(low.out, exact.out, low.u_store).max_abs / std::fabs(ea - eb));
  }
  std::sort(swamp.begin(), swamp.end());
  const double swamp_median = swamp.empty() ? 0 : swamp[swamp.size() / 2];
  const double p_value = untied ? binomial_half_p_value(inversions, untied) : 1;
  v.figures.push_back({"problems", double(problems)});
  v.figures.push_back({"untied problems", double(untied)});
  v.figures.push_back({"inversions", double(inversions)});
  v.figures.push_back({"binomial p-value against 1/2", p_value});
  v.figures.push_back({"median reference error / error gap", swamp_median});
  const int needed = cfg.smoke() ? 4 : 20;
  v.outcome = untied < needed                        ? Outcome::inconclusive
              : p_value > 0.01 && swamp_median > 1 ? Outcome::holds
                                                   : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << inversions << " of " << untied << " untied problems (of " << problems
      << ") rank streaming vs naive (fp32) differently against a bf16 reference than against 50 digits; "
         "binomial test against a coin flip p = "
      << p_value << "; the reference's own error is " << swamp_median << "x the gap in the median problem";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
