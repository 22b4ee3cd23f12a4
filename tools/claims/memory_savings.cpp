// Claim "memory-savings": memory-efficient attention's savings (Rabe & Staats
// 2021; FlashAttention README), as measured extra heap and time of the
// standard GEMM attention (math) vs streaming.
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict memory_savings(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "memory-savings", .run = memory_savings)


Verdict memory_savings(const Config& cfg) {
  Verdict v;
  if (!heap_measurable(cfg, v)) return v;
  std::vector<std::size_t> ns = {2048, 4096};
  if (cfg.full()) ns.push_back(16384);
  if (cfg.smoke()) ns = {256, 512};
  bool memory_ok = true;
  Plot plot{"extra heap of one call beyond the output", "n", "bytes", true, true, {}, {}};
  std::vector<double> gemm_bytes, streaming_bytes;
  std::ostringstream why;
  why.precision(3);
  Outcome time_outcome = Outcome::holds;
  const BackendInfo* both[2] = {&gemm_backend(), &fused_backend()};
  for (std::size_t n : ns) {
    const Inputs<double> in = random_inputs({1, 1, n, n, 64, 64}, cfg.seed);
    double extra[2];
    std::vector<double> seconds[2];
    for (int k = 0; k < 2; ++k) {
      std::size_t bytes = 0;
      const CallObserver obs{cfg.heap_reset, [&] { bytes = cfg.heap_peak_growth(); }};
      both[k]->run("fp32", Accumulate::fp32, in, Options{}, obs, 0);
      extra[k] = double(bytes) - double(n * 64 * sizeof(float));  // beyond the output tensor
      v.figures.push_back({both[k]->name + " n=" + std::to_string(n) + " extra bytes", extra[k]});
    }
    // Warm calls, 3 alternating rounds of 3 (each round's cold call not counted).
    auto warm = [&](int k) { return [&, k] { return both[k]->run("fp32", Accumulate::fp32, in, Options{}, {}, 3).warm_seconds; }; };
    alternate_timings(3, warm(0), warm(1), seconds[0], seconds[1]);
    const RatioInterval time_ratio = median_ratio(seconds[1], seconds[0]);  // streaming / math
    plot.x.push_back(double(n));
    gemm_bytes.push_back(extra[0]);
    streaming_bytes.push_back(extra[1]);
    const double saving = extra[0] / extra[1];
    const std::string at = "n=" + std::to_string(n);
    v.figures.push_back({at + " saving", saving});
    v.figures.push_back({at + " time ratio", time_ratio.median});
    v.figures.push_back({at + " time ratio 95% low", time_ratio.low});
    v.figures.push_back({at + " time ratio 95% high", time_ratio.high});
    const double needed = n >= 16384 ? 59 : n >= 4096 ? 20 : 10;
    memory_ok = memory_ok && saving >= needed;
    const Outcome t = at_most(time_ratio, 1.05);
    if (t == Outcome::does_not_hold || (t == Outcome::inconclusive && time_outcome == Outcome::holds)) time_outcome = t;
    why << "n = " << n << ": " << saving << "x less extra memory (needed " << needed << "x), time ratio "
        << time_ratio.median << " (95% " << time_ratio.low << " to " << time_ratio.high << "); ";
    if (cfg.progress) cfg.progress("memory-savings: n=" + std::to_string(n));
  }
  plot.series = {{both[0]->name, gemm_bytes}, {both[1]->name, streaming_bytes}};
  v.plots.push_back(plot);
  v.outcome = !memory_ok ? Outcome::does_not_hold : time_outcome;
  v.why = why.str().substr(0, why.str().size() - 2);
  return v;
}

}  // namespace attn::claims
