// Claim "saturation": EXAMPLES.md E3, and the mean softmax Jacobian norm vs d_k.
#include <cmath>
#include <sstream>

#include "attn/verify/examples.hpp"
#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict softmax_saturation(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "saturation", .run = softmax_saturation)


namespace {
// Mean Frobenius norm of the softmax Jacobian diag(p) - p p^T over draws of
// one query against 10 keys (iid N(0, 1)), through the naive backend in fp64.
double mean_jacobian_norm(std::size_t d, bool scaled, std::size_t draws, std::uint64_t seed) {
  const Inputs<double> in = random_inputs({draws, 1, 1, 10, d, 1}, seed + d);
  Options opt;
  opt.need_weights = true;
  if (!scaled) opt.scale = 1.0;
  const RunReport r = baseline_backend().run("fp64", Accumulate::fp64, in, opt, {}, 0);
  double sum = 0;
  for (std::size_t i = 0; i < draws; ++i) {
    double f2 = 0;
    for (std::size_t a = 0; a < 10; ++a)
      for (std::size_t b = 0; b < 10; ++b) {
        const double pa = (*r.weights)(i, 0, 0, a), pb = (*r.weights)(i, 0, 0, b);
        const double j = (a == b ? pa : 0.0) - pa * pb;
        f2 += j * j;
      }
    sum += std::sqrt(f2);
  }
  return sum / double(draws);
}
}  // namespace

Verdict softmax_saturation(const Config& cfg) {
  Verdict v;
  // E3's two rows through the naive backend: logits [8, 0] (scale 1) and the d_k = 64 query (scale 1/8).
  double slope[2] = {0, 0};
  int k = 0;
  for (const WorkedExample& e : worked_examples()) {
    if (e.id != "E3") continue;
    Options opt = e.opt;
    opt.need_weights = true;
    const RunReport r = baseline_backend().run("fp64", Accumulate::fp64, e.in, opt, {}, 0);
    const double p = (*r.weights)(0, 0, 0, 0);
    slope[k++] = p * (1 - p);
  }
  v.figures.push_back({"slope at logits [8, 0]", slope[0]});
  v.figures.push_back({"slope at logits [1, 0]", slope[1]});
  const std::size_t draws = cfg.smoke() ? 200 : cfg.full() ? 20000 : 2000;
  const double raw8 = mean_jacobian_norm(8, false, draws, cfg.seed), raw512 = mean_jacobian_norm(512, false, draws, cfg.seed);
  const double sc8 = mean_jacobian_norm(8, true, draws, cfg.seed), sc512 = mean_jacobian_norm(512, true, draws, cfg.seed);
  v.figures.push_back({"mean |J|_F unscaled d=8", raw8});
  v.figures.push_back({"mean |J|_F unscaled d=512", raw512});
  v.figures.push_back({"mean |J|_F scaled d=8", sc8});
  v.figures.push_back({"mean |J|_F scaled d=512", sc512});
  const bool printed = std::fabs(slope[0] - 0.0003) <= 0.00005 && std::fabs(slope[1] - 0.197) <= 0.0005;
  const bool collapse = raw512 < raw8 / 4 && std::fabs(sc512 - sc8) < 0.1 * sc8;
  v.outcome = printed && collapse ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(4);
  why << "slopes " << slope[0] << " and " << slope[1] << " (printed ~0.0003 and ~0.197); mean Jacobian norm "
      << raw8 << " -> " << raw512 << " unscaled, " << sc8 << " -> " << sc512 << " scaled (d_k 8 -> 512)";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
