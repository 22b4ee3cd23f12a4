// Claim "memory-savings": memory-efficient attention's savings (Rabe & Staats
// 2021; FlashAttention README), as measured extra heap of naive vs streaming.
#include <chrono>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict memory_savings(const Config& cfg) {
  Verdict v;
  if (!heap_measurable(cfg, v)) return v;
  std::vector<std::size_t> ns = {2048, 4096};
  if (cfg.full()) ns.push_back(16384);
  if (cfg.smoke()) ns = {256, 512};
  bool ok = true;
  Plot plot{"extra heap of one call beyond the output", "n", "bytes", true, true, {}, {}};
  std::vector<double> naive_bytes, streaming_bytes;
  std::ostringstream why;
  why.precision(3);
  for (std::size_t n : ns) {
    const Inputs<double> in = random_inputs({1, 1, n, n, 64, 64}, cfg.seed);
    double extra[2], seconds[2];
    const char* names[2] = {"naive", "streaming"};
    for (int k = 0; k < 2; ++k) {
      std::size_t bytes = 0;
      const CallObserver obs{cfg.heap_reset, [&] { bytes = cfg.heap_peak_growth(); }};
      const RunReport r = backend_by_name(names[k]).run("fp32", Accumulate::fp32, in, Options{}, obs, 2);
      extra[k] = double(bytes) - double(n * 64 * sizeof(float));  // beyond the output tensor
      seconds[k] = std::min(r.warm_seconds[0], r.warm_seconds[1]);
      v.figures.push_back({std::string(names[k]) + " n=" + std::to_string(n) + " extra bytes", extra[k]});
      v.figures.push_back({std::string(names[k]) + " n=" + std::to_string(n) + " seconds", seconds[k]});
    }
    plot.x.push_back(double(n));
    naive_bytes.push_back(extra[0]);
    streaming_bytes.push_back(extra[1]);
    const double saving = extra[0] / extra[1], time_ratio = seconds[1] / seconds[0];
    v.figures.push_back({"n=" + std::to_string(n) + " saving", saving});
    const double needed = n >= 16384 ? 59 : n >= 4096 ? 20 : 10;
    ok = ok && saving >= needed && time_ratio <= 1.05;
    why << "n = " << n << ": " << saving << "x less extra memory (needed " << needed << "x), time ratio "
        << time_ratio << "; ";
    if (cfg.progress) cfg.progress("memory-savings: n=" + std::to_string(n));
  }
  plot.series = {{"naive", naive_bytes}, {"streaming", streaming_bytes}};
  v.plots.push_back(plot);
  v.outcome = ok ? Outcome::holds : Outcome::does_not_hold;
  v.why = why.str().substr(0, why.str().size() - 2);
  return v;
}

}  // namespace attn::claims
