// Claim "score-memory": EXAMPLES.md E6, on the naive backend's measured heap.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict score_matrix_memory(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "score-memory", .run = score_matrix_memory)


Verdict score_matrix_memory(const Config& cfg) {
  Verdict v;
  if (!heap_measurable(cfg, v)) return v;
  const std::size_t ns[2] = {1024, 2048};
  double peak[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const Inputs<double> in = random_inputs({1, 1, ns[k], ns[k], 64, 64}, cfg.seed);
    std::size_t bytes = 0;
    // The observer brackets the backend call alone (not the rounding of the inputs).
    const CallObserver obs{cfg.heap_reset, [&] { bytes = cfg.heap_peak_growth(); }};
    (void)baseline_backend().run("fp16", Accumulate::storage, in, Options{}, obs, 0);
    peak[k] = double(bytes);
    v.figures.push_back({"peak bytes n=" + std::to_string(ns[k]), peak[k]});
  }
  const double mib = 1 << 20, ratio = peak[1] / peak[0];
  v.figures.push_back({"ratio", ratio});
  const bool first_ok = peak[0] >= 2 * mib && peak[0] <= 2.5 * mib;
  v.outcome = first_ok && ratio >= 3.8 && ratio <= 4.2 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(4);
  why << "measured " << peak[0] / mib << " MiB at n = 1024 and " << peak[1] / mib << " MiB at n = 2048 (ratio "
      << ratio << "); the fp16 score matrix alone is 2 and 8 MiB";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
