// Claim "variance": Var(q.k) = d_k sigma^4, and sigma^4 after dividing by sqrt(d_k).
#include <cmath>
#include <random>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict variance_of_scores(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "variance", .run = variance_of_scores)


Verdict variance_of_scores(const Config& cfg) {
  const std::size_t samples = cfg.full() ? 200000 : cfg.smoke() ? 2000 : 20000;
  Verdict v;
  v.outcome = Outcome::holds;
  Plot plot{"var(q.k) / d_k against sigma^4", "d_k", "var(q.k) / (d_k sigma^4)", true, false, {}, {}};
  std::vector<double> ratio[2];
  double worst_sigmas = 0;
  std::string worst;
  for (const bool uniform : {false, true}) {
    // sigma^2 and the fourth moment of one entry: N(0,1): 1, 3; uniform[-1,1]: 1/3, 1/5.
    const double s2 = uniform ? 1.0 / 3 : 1.0, m4 = uniform ? 1.0 / 5 : 3.0;
    for (std::size_t d : {1, 4, 16, 64, 256, 1024}) {
      NormalStream normal(cfg.seed + d + (uniform ? 7777 : 0));
      std::mt19937_64 bits(cfg.seed + d);
      auto entry = [&] { return uniform ? double(bits() >> 11) * 0x1p-52 - 1.0 : normal.next(); };
      double sum = 0, sum2 = 0;
      for (std::size_t i = 0; i < samples; ++i) {
        double x = 0;
        for (std::size_t l = 0; l < d; ++l) x += entry() * entry();
        sum += x;
        sum2 += x * x;
      }
      const double mean = sum / double(samples);
      const double var = (sum2 - double(samples) * mean * mean) / double(samples - 1);
      // X = sum of d iid products Y = q k: E[Y^2] = s2^2, E[Y^4] = m4^2;
      // E[X^4] = d m4^2 + 3 d (d - 1) s2^4, so Var(sample variance) ~ (E[X^4] - (d s2^2)^2) / N.
      const double predicted = double(d) * s2 * s2;
      const double fourth = double(d) * m4 * m4 + 3.0 * double(d) * double(d - 1) * s2 * s2 * s2 * s2;
      const double sd = std::sqrt((fourth - predicted * predicted) / double(samples));
      const double sigmas = std::fabs(var - predicted) / sd;
      const std::string tag = std::string(uniform ? "uniform" : "normal") + " d=" + std::to_string(d);
      v.figures.push_back({tag + " var(q.k)", var});
      v.figures.push_back({tag + " var(q.k/sqrt(d))", var / double(d)});
      v.figures.push_back({tag + " deviation in sd", sigmas});
      if (!uniform) plot.x.push_back(double(d));
      ratio[uniform].push_back(var / predicted);
      if (sigmas > worst_sigmas) {
        worst_sigmas = sigmas;
        worst = tag;
      }
      if (sigmas > 5) v.outcome = Outcome::does_not_hold;
      if (cfg.progress) cfg.progress("variance: " + tag);
    }
  }
  plot.series = {{"N(0, 1)", ratio[0]}, {"uniform[-1, 1]", ratio[1]}};
  v.plots.push_back(plot);
  std::ostringstream why;
  why.precision(3);
  why << "largest deviation from d_k sigma^4: " << worst_sigmas << " standard deviations (" << worst << "), over "
      << samples << " samples per point; scaled variances approach 1 (normal) and 1/9 (uniform)";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
