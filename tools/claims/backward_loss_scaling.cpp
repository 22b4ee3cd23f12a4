// Claim "bwd-loss-scaling": loss scaling keeps fp16 gradients from
// underflowing (Micikevicius et al. 2018, section 3.2), on the attention
// backward pass: the streaming backward in fp16 with a small upstream
// gradient, unscaled and scaled by a power of two, against fp64.
#include <cmath>
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict backward_loss_scaling(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "bwd-loss-scaling", .run = backward_loss_scaling)

namespace {

struct Measured {
  double error = 0;     // max over dQ, dK, dV of max |g - truth| / max |truth|
  double zeroed = 0;    // fraction of entries that are 0 where the truth is not
};

// The gradients of `precision` from dO = sigma z scaled by 2^k before the
// call and by 2^-k after, against the fp64 gradients of the unscaled dO on
// the same rounded inputs.
Measured measure(const char* precision, const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, int k) {
  const BackendInfo& fused = fused_backend();
  const xt::xtensor<double, 4> scaled = d_out * std::ldexp(1.0, k);
  BackwardReport got = fused.run_backward(precision, Accumulate::fp32, in, scaled, Options{});
  const BackwardReport truth =
      gemm_backend().run_backward("fp64", Accumulate::fp64, got.forward.rounded_inputs, d_out, Options{});
  Measured m;
  std::size_t zeroed = 0, count = 0;
  auto one = [&](const xt::xtensor<double, 4>& g, const xt::xtensor<double, 4>& t) {
    double err = 0, top = 0;
    for (std::size_t x = 0; x < g.size(); ++x) {
      const double gx = std::ldexp(g.flat(x), -k), tx = t.flat(x);
      err = std::max(err, std::abs(gx - tx));
      top = std::max(top, std::abs(tx));
      zeroed += gx == 0 && tx != 0;
    }
    count += g.size();
    m.error = std::max(m.error, err / top);
  };
  one(got.grads.dq, truth.grads.dq);
  one(got.grads.dk, truth.grads.dk);
  one(got.grads.dv, truth.grads.dv);
  m.zeroed = double(zeroed) / double(count);
  return m;
}

}  // namespace

Verdict backward_loss_scaling(const Config& cfg) {
  Verdict v;
  const Shape s{1, 2, 256, 256, 64, 64};
  const Inputs<double> in = random_inputs(s, cfg.seed);
  const xt::xtensor<double, 4> z = random_d_out(s, cfg.seed + 1);
  const std::vector<double> sigmas = {1, 1e-3, 1e-5, 1e-6, 1e-7};
  Plot plot{"backward error against the upstream gradient's scale (streaming, n = 256, d = 64)", "sigma of dO",
            "max relative error of dQ, dK, dV", true, true, {}, {}};
  std::vector<double> unscaled16, scaled16, unscaled_bf16;
  Measured at_one, at_target_unscaled, at_target_scaled;
  std::ostringstream why;
  why.precision(3);
  for (double sigma : sigmas) {
    // 2^k sigma in [0.5, 1): the power of two a loss-scaling recipe would pick.
    const int k = -int(std::floor(std::log2(sigma))) - 1;
    const xt::xtensor<double, 4> d_out = sigma * z;
    const Measured u = measure("fp16", in, d_out, 0), sc = measure("fp16", in, d_out, k), b = measure("bf16", in, d_out, 0);
    std::ostringstream label;
    label << "sigma=" << sigma;
    const std::string at = label.str();
    v.figures.push_back({at + " fp16 error", u.error});
    v.figures.push_back({at + " fp16 zeroed fraction", u.zeroed});
    v.figures.push_back({at + " fp16 loss-scaled error (2^" + std::to_string(k) + ")", sc.error});
    v.figures.push_back({at + " bf16 error", b.error});
    plot.x.push_back(sigma);
    unscaled16.push_back(u.error);
    scaled16.push_back(sc.error);
    unscaled_bf16.push_back(b.error);
    if (sigma == 1) at_one = u;
    if (sigma == 1e-6) at_target_unscaled = u, at_target_scaled = sc;
    if (cfg.progress) cfg.progress("bwd-loss-scaling: " + at);
  }
  plot.series = {{"fp16", unscaled16}, {"fp16, loss-scaled", scaled16}, {"bf16", unscaled_bf16}};
  v.plots.push_back(plot);
  const double lost = at_target_unscaled.error / at_one.error, restored = at_target_scaled.error / at_one.error;
  v.figures.push_back({"sigma=1e-6 unscaled / sigma=1 error", lost});
  v.figures.push_back({"sigma=1e-6 loss-scaled / sigma=1 error", restored});
  v.outcome = lost >= 10 && restored <= 2 ? Outcome::holds : Outcome::does_not_hold;
  why << "fp16 error " << at_one.error << " at sigma = 1; at sigma = 1e-6: " << at_target_unscaled.error << " unscaled ("
      << lost << "x; " << 100 * at_target_unscaled.zeroed << "% of the gradient entries zero where the truth is not), "
      << at_target_scaled.error << " loss-scaled (" << restored << "x); bf16 " << unscaled_bf16.front() << " -> "
      << unscaled_bf16[3] << " over the same scales";
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
