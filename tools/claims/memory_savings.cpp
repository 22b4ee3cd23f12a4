// Claim "memory-savings": memory-efficient attention's savings (Rabe & Staats
// 2021; FlashAttention README), as measured extra heap of naive vs streaming.
#include <chrono>
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict memory_savings(const Config& cfg);

// The claim, its source and its criterion (written before the experiment ran).
ATTN_CLAIM(.id = "memory-savings",
           .source = "Rabe & Staats 2021, 'Self-attention does not need O(n^2) memory'; FlashAttention "
                     "README (memory footprint figure)",
           .quote = "Rabe & Staats: memory overhead reduced 59x for inference at n = 16,384 with runtime within a few percent; "
                    "FlashAttention README: 10x memory savings at sequence length 2K and 20x at 4K",
           .statement = "streaming attention needs a small fraction of the naive algorithm's extra memory, at no time cost",
           .experiment = "naive vs streaming, fp32, B = H = 1, d = 64, n = 2048 and 4096 (16384 with --profile full): peak heap "
                         "of one call beyond the output tensor (counting allocator), and the better of two warm calls",
           .criterion = "holds if the extra-memory ratio is at least 10x at 2K, 20x at 4K (59x at 16K) and streaming's time is at "
                        "most 1.05x naive's at every n; does not hold otherwise",
           .run = memory_savings)


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
    const BackendInfo* both[2] = {&baseline_backend(), &fused_backend()};
    for (int k = 0; k < 2; ++k) {
      std::size_t bytes = 0;
      const CallObserver obs{cfg.heap_reset, [&] { bytes = cfg.heap_peak_growth(); }};
      const RunReport r = both[k]->run("fp32", Accumulate::fp32, in, Options{}, obs, 2);
      extra[k] = double(bytes) - double(n * 64 * sizeof(float));  // beyond the output tensor
      seconds[k] = std::min(r.warm_seconds[0], r.warm_seconds[1]);
      v.figures.push_back({both[k]->name + " n=" + std::to_string(n) + " extra bytes", extra[k]});
      v.figures.push_back({both[k]->name + " n=" + std::to_string(n) + " seconds", seconds[k]});
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
  plot.series = {{baseline_backend().name, naive_bytes}, {fused_backend().name, streaming_bytes}};
  v.plots.push_back(plot);
  v.outcome = ok ? Outcome::holds : Outcome::does_not_hold;
  v.why = why.str().substr(0, why.str().size() - 2);
  return v;
}

}  // namespace attn::claims
