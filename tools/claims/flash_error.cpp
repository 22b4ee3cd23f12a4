// Claim "flash-2x": the streaming (online softmax) backend's error is at most
// twice that of a baseline computing in the same (storage) precision, as
// FlashAttention's tests define it.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict flash_error_at_most_twice(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "flash-2x", .run = flash_error_at_most_twice)


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
          // FlashAttention's baseline computes in the storage precision (its
          // reference without upcasting): every product, sum, exp and division
          // of the naive backend rounded to bf16/fp16.
          const RunReport b = naive.run(precision, Accumulate::storage, in, opt, {}, 0);
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
  why << "largest err(streaming, fp32 accumulation) / err(naive, storage accumulation) = " << worst << " (" << worst_at << ")"
      << (zero ? "; naive's error was 0 somewhere" : "");
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
