// Claim "flash-2x": the streaming (online softmax) backend's error is at most
// twice the naive backend's at the same precision.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict flash_error_at_most_twice(const Config& cfg);

// The claim, its source and its criterion (written before the experiment ran).
ATTN_CLAIM(.id = "flash-2x",
           .source = "FlashAttention README (Dao-AILab/flash-attention), numerics note",
           .quote = "FlashAttention's numerical error is at most twice that of a baseline implementation at the same precision",
           .statement = "the online-softmax (streaming) backend's error is at most 2x the naive backend's, same precision",
           .experiment = "max |O - truth| of streaming and naive in bf16 and fp16 (fp32 accumulation), n = 64, 256, 1024 (and 4096 "
                         "full), d = 64, logit scale 1, 10, 100, no mask and causal; truth: 50 digits or the compensated reference",
           .criterion = "holds if max over configurations of err(streaming) / err(naive) <= 2; inconclusive if naive's error is "
                        "0 somewhere; does not hold otherwise",
           .run = flash_error_at_most_twice)


Verdict flash_error_at_most_twice(const Config& cfg) {
  Verdict v;
  std::vector<std::size_t> ns = {64, 256, 1024};
  if (cfg.full()) ns.push_back(4096);
  if (cfg.smoke()) ns = {64};
  double worst = 0;
  std::string worst_at;
  bool zero = false;
  const BackendInfo &streaming = fused_backend(), &naive = baseline_backend();
  for (std::string_view precision : {"bf16", "fp16"})
    for (std::size_t n : ns)
      for (double scale : {1.0, 10.0, 100.0})
        for (bool causal : {false, true}) {
          Options opt;
          if (causal) opt.mask = mask::Causal{};
          const Inputs<double> in = random_inputs({1, 1, n, n, 64, 64}, cfg.seed + n, scale);
          const RunReport s = streaming.run(precision, Accumulate::fp32, in, opt, {}, 0);
          const RunReport b = naive.run(precision, Accumulate::fp32, in, opt, {}, 0);
          const GroundTruth truth = ground_truth(s.rounded_inputs, opt, s.u_store);
          const double es = verify(s, opt, truth).out.max_abs, eb = verify(b, opt, truth).out.max_abs;
          std::ostringstream tag;
          tag << precision << " n=" << n << " scale=" << scale << (causal ? " causal" : "");
          v.figures.push_back({tag.str() + " streaming", es});
          v.figures.push_back({tag.str() + " naive", eb});
          if (eb == 0) {
            zero = true;
            continue;
          }
          if (es / eb > worst) {
            worst = es / eb;
            worst_at = tag.str();
          }
          if (cfg.progress) cfg.progress("flash-2x: " + tag.str());
        }
  v.figures.push_back({"max ratio", worst});
  v.outcome = zero ? Outcome::inconclusive : worst <= 2 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "largest err(streaming) / err(naive) = " << worst << " (" << worst_at << ")"
      << (zero ? "; naive's error was 0 somewhere" : "");
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
