// Claim "entropy": EXAMPLES.md E7, through attn::entropy_study.
#include <cmath>
#include <sstream>

#include "claims/claim.hpp"

namespace attn::claims {

Verdict entropy_collapse(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "entropy", .run = entropy_collapse)


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
