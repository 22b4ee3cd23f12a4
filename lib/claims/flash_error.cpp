// Claim "flash-2x": the streaming (online softmax) backend's error is at most
// twice the naive backend's at the same precision.
#include <sstream>

#include "attn/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict flash_error_at_most_twice(const Config& cfg) {
  Verdict v;
  std::vector<std::size_t> ns = {64, 256, 1024};
  if (cfg.full()) ns.push_back(4096);
  if (cfg.smoke()) ns = {64};
  double worst = 0;
  std::string worst_at;
  bool zero = false;
  const BackendHandle &streaming = backend_by_name("streaming"), &naive = backend_by_name("naive");
  for (std::string_view precision : {"bf16", "fp16"})
    for (std::size_t n : ns)
      for (double scale : {1.0, 10.0, 100.0})
        for (bool causal : {false, true}) {
          Options opt;
          if (causal) opt.mask = mask::Causal{};
          const Inputs<double> in = random_inputs({1, 1, n, n, 64, 64}, cfg.seed + n, scale);
          const RunReport s = streaming.run(precision, Accumulate::fp32, in, opt, {}, 0);
          const RunReport b = naive.run(precision, Accumulate::fp32, in, opt, {}, 0);
          const auto truth = backends::ground_truth(s.rounded_inputs, opt);
          const double es = compare(s.out, truth.result.out, s.u_store).max_abs;
          const double eb = compare(b.out, truth.result.out, b.u_store).max_abs;
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
