// Claim "golden-bf16": Golden et al. 2024 ("Is Flash Attention Stable?"):
// at bf16, flash attention deviates about 10x more than baseline attention
// in an isolated forward pass.
#include <algorithm>
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict golden_bf16_deviation(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "golden-bf16", .run = golden_bf16_deviation)


Verdict golden_bf16_deviation(const Config& cfg) {
  Verdict v;
  const BackendInfo &flash = fused_backend(), &baseline = baseline_backend();
  std::vector<std::size_t> ns = cfg.smoke() ? std::vector<std::size_t>{64} : std::vector<std::size_t>{256, 1024};
  std::vector<double> ratios_bf16, ratios_fp32;
  for (std::size_t n : ns)
    for (std::size_t block : {16, 64, 256}) {
      const Inputs<double> in = random_inputs({1, 2, n, n, 64, 64}, cfg.seed + n);
      Options opt;
      opt.mask = mask::Causal{};
      opt.block_q = 64;
      opt.block_k = block;
      // The golden run: the exact attention of the bf16 inputs (their metric: deviation from high precision).
      const RunReport f16 = flash.run("bf16", Accumulate::storage, in, opt, {}, 0);
      const GroundTruth golden = ground_truth(f16.rounded_inputs, opt, f16.u_store);
      for (const Accumulate acc : {Accumulate::storage, Accumulate::fp32}) {
        const RunReport f = acc == Accumulate::storage ? f16 : flash.run("bf16", acc, in, opt, {}, 0);
        const RunReport b = baseline.run("bf16", acc, in, opt, {}, 0);
        const double df = verify(f, opt, golden).out.max_abs, db = verify(b, opt, golden).out.max_abs;
        const std::string tag = "n=" + std::to_string(n) + " B_k=" + std::to_string(block) +
                                (acc == Accumulate::storage ? " bf16 intermediates" : " fp32 intermediates");
        v.figures.push_back({tag + " flash", df});
        v.figures.push_back({tag + " baseline", db});
        (acc == Accumulate::storage ? ratios_bf16 : ratios_fp32).push_back(db > 0 ? df / db : NAN);
      }
      if (cfg.progress) cfg.progress("golden-bf16: n=" + std::to_string(n) + " B_k=" + std::to_string(block));
    }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const double m16 = median(ratios_bf16), m32 = median(ratios_fp32);
  v.figures.push_back({"median ratio bf16 intermediates", m16});
  v.figures.push_back({"median ratio fp32 intermediates", m32});
  v.outcome = !std::isfinite(m16) ? Outcome::inconclusive
              : m16 >= 3 && m16 <= 30 ? Outcome::holds
                                      : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "median deviation ratio flash / baseline: " << m16 << " with bf16 intermediates, " << m32
      << " with fp32 intermediates (bf16 inputs and outputs, causal, n = " << ns.front() << " ... " << ns.back()
      << ", B_k = 16, 64, 256)";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
