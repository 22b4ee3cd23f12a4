// Claim "torch-flash-exp-accuracy": the reduced-accuracy vectorised exp of
// PyTorch's CPU flash kernel (exp_u20, PyTorch PR #115151) costs no fp32
// accuracy that matters: its error stays within FlashAttention's test rule
// (2x the math path's error, plus one rounding of the output) against
// SDPA's math backend on the same inputs.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attn/core/random.hpp"
#include "attn/verify/metrics.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict torch_flash_exp_accuracy(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "torch-flash-exp-accuracy", .run = torch_flash_exp_accuracy)

Verdict torch_flash_exp_accuracy(const Config& cfg) {
  Verdict v;
  const BackendInfo* flash = peer_backend("torch_flash", v);
  const BackendInfo* math = flash ? peer_backend("torch_math", v) : nullptr;
  if (!math) return v;
  std::vector<std::size_t> ns = {256, 1024, 4096};
  std::size_t seeds = 3;
  if (cfg.smoke()) ns = {256}, seeds = 1;
  const double u = precision_info("fp32").unit_roundoff;
  double worst = 0;  // the largest err(flash) / (2 err(math) + u max|O|): above 1 fails the rule
  std::string worst_at;
  Plot plot{"fp32 error against the truth, no mask, first seed", "n", "max |O - truth|", true, true, {}, {}};
  std::vector<double> plot_flash[3], plot_math[3];
  for (std::size_t n : ns) {
    for (double scale : {1.0, 10.0, 100.0})
      for (bool causal : {false, true})
        for (std::size_t s = 0; s < seeds; ++s) {
          Options opt;
          if (causal) opt.mask = mask::Causal{};
          const Inputs<double> in = random_inputs({1, 2, n, n, 64, 64}, cfg.seed + 1000 * s + n, scale);
          const RunReport rf = flash->run("fp32", Accumulate::fp32, in, opt);
          const RunReport rm = math->run("fp32", Accumulate::fp32, rf.rounded_inputs, opt);
          // Errors against the suite's truth of the same fp32-rounded inputs, each with the truth's own bound
          // added (0 for 50 digits; the fp64 GEMM truth's beyond).
          const GroundTruth truth = ground_truth(rf.rounded_inputs, opt, rf.u_store);
          const double ef = compare(rf.out, truth.result.out, u).max_abs + truth.out_error;
          const double em = compare(rm.out, truth.result.out, u).max_abs + truth.out_error;
          const double largest = xt::amax(xt::abs(truth.result.out))();
          const double ratio = ef / (2 * em + u * largest);
          std::ostringstream tag;
          tag << "n=" << n << " scale=" << scale << (causal ? " causal" : "") << " seed " << s;
          v.figures.push_back({tag.str() + " torch-flash", ef});
          v.figures.push_back({tag.str() + " torch-math", em});
          if (ratio > worst) worst = ratio, worst_at = tag.str();
          if (!causal && s == 0) {
            const int k = scale == 1.0 ? 0 : scale == 10.0 ? 1 : 2;
            plot_flash[k].push_back(ef);
            plot_math[k].push_back(em);
          }
          if (cfg.progress) cfg.progress("torch-flash-exp-accuracy: " + tag.str());
        }
    plot.x.push_back(double(n));
  }
  const char* scales[3] = {"1", "10", "100"};
  for (int k = 0; k < 3; ++k) {
    plot.series.push_back({std::string("torch-flash, logit scale ") + scales[k], plot_flash[k]});
    plot.series.push_back({std::string("torch-math, logit scale ") + scales[k], plot_math[k]});
  }
  v.plots.push_back(plot);
  v.figures.push_back({"largest err(flash) / (2 err(math) + u max|O|)", worst});
  v.outcome = worst <= 1 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "largest err(torch-flash) / (2 err(torch-math) + one fp32 rounding of max|O|) = " << worst << " ("
      << worst_at << "), over n = " << ns.front() << " ... " << ns.back() << ", logit scales 1, 10, 100, causal "
      << "and not, " << seeds << " seed(s); the bar: 1";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
