// Claim "bwd-memory": the FlashAttention backward's extra memory is linear
// in n (Dao et al. 2022, appendix B.2), as the measured heap of one cold
// backward call of streaming and of math.
#include <algorithm>
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict backward_memory(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "bwd-memory", .run = backward_memory)


Verdict backward_memory(const Config& cfg) {
  Verdict v;
  if (!heap_measurable(cfg, v)) return v;
  constexpr std::size_t d = 64;
  std::vector<std::size_t> ns = {256, 512, 1024, 2048, 4096};
  if (cfg.smoke()) ns = {256, 512, 1024};
  const std::size_t math_max = ns.back();
  if (cfg.full()) ns.insert(ns.end(), {8192, 16384});  // streaming only: math's slabs would need 2 GiB
  const BackendInfo* both[2] = {&gemm_backend(), &fused_backend()};
  const std::pair<const char*, std::size_t> precisions[2] = {{"fp32", 4}, {"bf16", 2}};
  Plot plot{"extra heap of one backward call beyond its gradients (B = H = 1, d = 64)", "n", "bytes", true, true, {}, {}};
  double slope[2][2] = {};  // [backend][precision]
  for (int k = 0; k < 2; ++k) {
    for (int p = 0; p < 2; ++p) {
      std::vector<double> xs, ys;
      for (std::size_t n : ns) {
        if (k == 0 && n > math_max) continue;
        const Shape s{1, 1, n, n, d, d};
        const Inputs<double> in = random_inputs(s, cfg.seed);
        std::size_t bytes = 0;
        const CallObserver obs{cfg.heap_reset, [&] { bytes = cfg.heap_peak_growth(); }};
        (void)both[k]->run_backward(precisions[p].first, Accumulate::fp32, in, random_d_out(s, cfg.seed + 1), Options{},
                                    obs, 0);
        // Beyond the gradients the call returns: dQ, dK (n x d_k) and dV (n x d_v) in storage.
        const double gradients = double(3 * n * d * precisions[p].second);
        const double extra = std::max(double(bytes) - gradients, 1.0);
        xs.push_back(double(n));
        ys.push_back(extra);
        v.figures.push_back({both[k]->name + " " + precisions[p].first + " n=" + std::to_string(n) + " extra bytes", extra});
        if (cfg.progress) cfg.progress("bwd-memory: " + both[k]->name + " " + precisions[p].first + " n=" + std::to_string(n));
      }
      slope[k][p] = loglog_slope(xs, ys);
      v.figures.push_back({both[k]->name + " " + precisions[p].first + " exponent", slope[k][p]});
      // The figure shows n up to math_max, where both ran (the full profile's larger n are in the figures).
      xs.resize(plot.x.size() ? plot.x.size() : std::size_t(std::find(xs.begin(), xs.end(), double(math_max)) - xs.begin() + 1));
      ys.resize(xs.size());
      plot.x = xs;
      plot.series.push_back({both[k]->name + " " + precisions[p].first, ys});
    }
  }
  v.plots.push_back(plot);
  const bool streaming_linear = slope[1][0] <= 1.1 && slope[1][1] <= 1.1;
  const bool math_quadratic = slope[0][0] >= 1.8 && slope[0][1] >= 1.8;
  v.outcome = !streaming_linear ? Outcome::does_not_hold : math_quadratic ? Outcome::holds : Outcome::inconclusive;
  // The largest n both ran, side by side, in MiB.
  auto at = [&](const std::string& name) {
    for (const Figure& f : v.figures)
      if (f.name == name) return f.value / double(1 << 20);
    return 0.0;
  };
  const std::string tail = " n=" + std::to_string(math_max) + " extra bytes";
  std::ostringstream why;
  why.precision(4);  // enough digits to show which side of 1.1 and 1.8 an exponent lies
  why << "extra heap beyond the gradients grows with exponent " << slope[1][0] << " (fp32) and " << slope[1][1]
      << " (bf16) for " << both[1]->name << " over n = " << ns.front() << " ... " << ns.back() << ", " << slope[0][0]
      << " and " << slope[0][1] << " for " << both[0]->name << " over n = " << ns.front() << " ... " << math_max
      << "; at n = " << math_max << ": " << at(both[1]->name + " fp32" + tail) << " MiB vs "
      << at(both[0]->name + " fp32" + tail) << " MiB (fp32), " << at(both[1]->name + " bf16" + tail) << " vs "
      << at(both[0]->name + " bf16" + tail) << " MiB (bf16)";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
