// Claim "flash-decoding": splitting the KV sequence across workers and
// merging the partial results by their logsumexp speeds up a decode step
// when the heads are too few to occupy the machine (Dao, Haziza, Massa and
// Sizov 2023), as warm times of the streaming backend's automatic split-KV
// against one worker for the one head (--kv-splits 1), on 2 threads.
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict flash_decoding(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "flash-decoding", .run = flash_decoding)

Verdict flash_decoding(const Config& cfg) {
  Verdict v;
  constexpr std::size_t d = 128, rounds = 5, per_round = 5;
  std::vector<std::size_t> lengths = {32768, 131072};
  if (cfg.smoke()) lengths = {4096};
  const BackendInfo& fused = fused_backend();
  Options split, unsplit;
  split.threads = unsplit.threads = 2;
  unsplit.kv_splits = 1;  // split stays 0: the automatic choice
  Plot plot{"one decode step, bf16 K/V, 2 threads (B = H = 1, d = 128)", "n_kv", "seconds (median)", true, true, {}, {}};
  std::vector<double> split_median, unsplit_median;
  Outcome outcome = Outcome::holds;
  std::ostringstream why;
  why.precision(3);
  for (std::size_t n_kv : lengths) {
    const Inputs<double> in = random_inputs({1, 1, 1, n_kv, d, d}, cfg.seed);
    std::vector<double> t_split, t_unsplit;
    alternate_timings(rounds, warm_timer(fused, "bf16", Accumulate::fp32, in, split, per_round),
                      warm_timer(fused, "bf16", Accumulate::fp32, in, unsplit, per_round), t_split, t_unsplit);
    const RatioInterval r = median_ratio(t_split, t_unsplit);
    const Outcome o = at_most(r, 1 / 1.5);
    if (o == Outcome::does_not_hold || (o == Outcome::inconclusive && outcome == Outcome::holds)) outcome = o;
    const std::string at = "n_kv=" + std::to_string(n_kv);
    const double s = median(t_split), u = median(t_unsplit);
    v.figures.push_back({at + " time ratio split / unsplit", r.median});
    v.figures.push_back({at + " time ratio 95% low", r.low});
    v.figures.push_back({at + " time ratio 95% high", r.high});
    v.figures.push_back({at + " split seconds", s});
    v.figures.push_back({at + " unsplit seconds", u});
    plot.x.push_back(double(n_kv));
    split_median.push_back(s);
    unsplit_median.push_back(u);
    why << "n_kv = " << n_kv << ": split / unsplit " << r.median << " (95% " << r.low << " to " << r.high
        << "; medians " << s * 1e3 << " ms vs " << u * 1e3 << " ms, a speed-up of " << u / s << "x); ";
    if (cfg.progress) cfg.progress("flash-decoding: n_kv=" + std::to_string(n_kv));
  }
  plot.series = {{"split-KV (automatic)", split_median}, {"one worker per head", unsplit_median}};
  v.plots.push_back(plot);
  v.outcome = outcome;
  v.why = why.str().substr(0, why.str().size() - 2) + "; the bar: a ratio below 1/1.5";
  return v;
}

}  // namespace attn::claims
