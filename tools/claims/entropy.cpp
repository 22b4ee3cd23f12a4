// Claim "entropy": EXAMPLES.md E7, through attn::entropy_study.
#include <cmath>
#include <sstream>

#include "claims/claim.hpp"

namespace attn::claims {

Verdict entropy_collapse(const Config& cfg);

// The claim, its source and its criterion (written before the experiment ran).
ATTN_CLAIM(.id = "entropy",
           .source = "EXAMPLES.md E7 (course notes)",
           .quote = "the entropy of softmax(q.k) falls steadily as d_k grows through 8, 32, 128, 512, while the entropy of "
                    "softmax(q.k / sqrt(d_k)) stays nearly flat",
           .statement = "without the 1/sqrt(d_k) scale the softmax sharpens with d_k; with it, it does not",
           .experiment = "mean entropy of softmax over 10 keys, 2,000 independent draws per d_k (20,000 full), iid N(0, 1), naive "
                         "backend in fp64",
           .criterion = "holds if the unscaled mean entropy falls at every step by more than 5 standard errors of the difference "
                        "and the scaled means span less than 5% of the unscaled fall; does not hold otherwise",
           .run = entropy_collapse)


Verdict entropy_collapse(const Config& cfg) {
  const std::size_t draws = cfg.full() ? 20000 : cfg.smoke() ? 300 : 2000;
  const auto rows = entropy_study(baseline_backend(), precision_info("fp64"), {8, 32, 128, 512}, draws, 10, cfg.seed);
  Verdict v;
  bool falls = true;
  double lo = rows[0].scaled_mean, hi = lo;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    v.figures.push_back({"d=" + std::to_string(rows[i].d) + " entropy", rows[i].raw_mean});
    v.figures.push_back({"d=" + std::to_string(rows[i].d) + " entropy scaled", rows[i].scaled_mean});
    lo = std::min(lo, rows[i].scaled_mean);
    hi = std::max(hi, rows[i].scaled_mean);
    if (i + 1 < rows.size())
      falls = falls && rows[i + 1].raw_mean < rows[i].raw_mean - 5 * std::hypot(rows[i].raw_se, rows[i + 1].raw_se);
  }
  Plot plot{"mean softmax entropy over 10 keys", "d_k", "nats", true, false, {}, {}};
  std::vector<double> raw, scaled;
  for (const auto& r : rows) plot.x.push_back(double(r.d)), raw.push_back(r.raw_mean), scaled.push_back(r.scaled_mean);
  plot.series = {{"softmax(q.k)", raw}, {"softmax(q.k / sqrt(d_k))", scaled}};
  v.plots.push_back(plot);
  const double fall = rows.front().raw_mean - rows.back().raw_mean;
  const double spread = (hi - lo) / fall;
  v.figures.push_back({"scaled spread / unscaled fall", spread});
  v.outcome = falls && spread < 0.05 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "unscaled entropy " << rows.front().raw_mean << " -> " << rows.back().raw_mean << " nats from d_k = 8 to 512"
      << (falls ? " (every step > 5 se)" : " (a step within 5 se)") << "; scaled spread " << hi - lo << " = "
      << 100 * spread << "% of that fall";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
