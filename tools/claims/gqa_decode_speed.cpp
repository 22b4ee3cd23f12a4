// Claim "gqa-decode-speed": grouped-query attention decodes at a speed
// comparable to multi-query attention and much faster than multi-head
// attention (Ainslie et al. 2023), as warm times of one decode step of the
// streaming backend with H_q = 32 query heads over 32, 8 and 1 K/V heads.
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict gqa_decode_speed(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "gqa-decode-speed", .run = gqa_decode_speed)

Verdict gqa_decode_speed(const Config& cfg) {
  Verdict v;
  constexpr std::size_t heads = 32, d = 128, rounds = 5, per_round = 5;
  std::vector<std::size_t> lengths = {8192, 32768};
  if (cfg.smoke()) lengths = {1024};
  const BackendInfo& fused = fused_backend();
  Plot plot{"one decode step, H_q = 32, bf16 K/V, 1 thread (d = 128)", "n_kv", "seconds (median)", true, true, {}, {}};
  std::vector<double> med[3];  // MHA, GQA, MQA
  Outcome outcome = Outcome::holds;
  std::ostringstream why;
  why.precision(3);
  auto worse = [&](Outcome o) {
    if (o == Outcome::does_not_hold || (o == Outcome::inconclusive && outcome == Outcome::holds)) outcome = o;
  };
  for (std::size_t n_kv : lengths) {
    // The same queries (drawn first) over 32, 8 and 1 K/V heads, each bound once.
    auto timer = [&](std::size_t kv_heads) {
      return warm_timer(fused, "bf16", Accumulate::fp32, random_inputs({1, heads, 1, n_kv, d, d, kv_heads}, cfg.seed),
                        Options{}, per_round);
    };
    const auto mha = timer(32), gqa = timer(8), mqa = timer(1);
    std::vector<double> t_gqa, t_mqa, t_mha, t_gqa2;
    alternate_timings(rounds, gqa, mqa, t_gqa, t_mqa);
    alternate_timings(rounds, mha, gqa, t_mha, t_gqa2);
    const RatioInterval near = median_ratio(t_gqa, t_mqa), far = median_ratio(t_mha, t_gqa2);
    worse(at_most(near, 1.5));
    // MHA / GQA above 2: holds when the whole interval is above 2
    worse(far.low > 2 ? Outcome::holds : far.high < 2 ? Outcome::does_not_hold : Outcome::inconclusive);
    const std::string at = "n_kv=" + std::to_string(n_kv);
    v.figures.push_back({at + " time ratio GQA / MQA", near.median});
    v.figures.push_back({at + " time ratio GQA / MQA 95% low", near.low});
    v.figures.push_back({at + " time ratio GQA / MQA 95% high", near.high});
    v.figures.push_back({at + " time ratio MHA / GQA", far.median});
    v.figures.push_back({at + " time ratio MHA / GQA 95% low", far.low});
    v.figures.push_back({at + " time ratio MHA / GQA 95% high", far.high});
    const double m[3] = {median(t_mha), median(t_gqa), median(t_mqa)};
    for (int x = 0; x < 3; ++x) med[x].push_back(m[x]);
    v.figures.push_back({at + " MHA seconds", m[0]});
    v.figures.push_back({at + " GQA seconds", m[1]});
    v.figures.push_back({at + " MQA seconds", m[2]});
    plot.x.push_back(double(n_kv));
    why << "n_kv = " << n_kv << ": GQA / MQA " << near.median << " (95% " << near.low << " to " << near.high
        << "), MHA / GQA " << far.median << " (95% " << far.low << " to " << far.high << "); ";
    if (cfg.progress) cfg.progress("gqa-decode-speed: n_kv=" + std::to_string(n_kv));
  }
  plot.series = {{"MHA (H_kv = 32)", med[0]}, {"GQA (H_kv = 8)", med[1]}, {"MQA (H_kv = 1)", med[2]}};
  v.plots.push_back(plot);
  v.outcome = outcome;
  v.why = why.str().substr(0, why.str().size() - 2) + "; the bars: GQA / MQA below 1.5, MHA / GQA above 2";
  return v;
}

}  // namespace attn::claims
