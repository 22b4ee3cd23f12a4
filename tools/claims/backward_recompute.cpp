// Claim "bwd-recompute": recomputing P in the backward pass is faster than
// reading it back (Dao et al. 2022, section 3.1), as warm times of the
// streaming backward against the standard backward of the paper's
// algorithm 3, which reads the n x n matrix P the forward pass kept.
#include <chrono>
#include <sstream>

#include "attn/backends/kernels.hpp"
#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict backward_recompute(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "bwd-recompute", .run = backward_recompute)

namespace {

// The standard backward (Dao et al. 2022, algorithm 3) of one head in fp32:
// P and O are the forward's, kept; each step is one pass over an n x n matrix
// or one OpenBLAS GEMM. This is the baseline the claim names (the registered
// backends recompute P instead), so it lives here, built on the library's
// GEMM helpers rather than beside them.
struct StandardBackward {
  std::size_t n, d;
  float scale;
  std::vector<float> q, k, v, o, d_o, p, dp, dq, dk, dv;

  StandardBackward(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out)
      : n(in.shape().n_q), d(in.shape().d_k), scale(float(Options{}.resolved_scale(in.shape()))) {
    auto floats = [](const auto& t) { return std::vector<float>(t.begin(), t.end()); };
    q = floats(in.q), k = floats(in.k), v = floats(in.v), d_o = floats(d_out);
    p.resize(n * n), dp.resize(n * n), o.resize(n * d), dq.resize(n * d), dk.resize(n * d), dv.resize(n * d);
    // The forward pass, keeping P: P = softmax(scale Q K^T), O = P V.
    detail::scores_tile<float>(q.data(), k.data(), p.data(), n, n, d, scale);
    for (std::size_t i = 0; i < n; ++i) detail::softmax_row(p.data() + i * n, n, /*simd=*/true);
    detail::pv_tile<float>(p.data(), v.data(), o.data(), n, n, d, false);
  }

  void operator()() {
    detail::gemm_tn<float>(p.data(), d_o.data(), dv.data(), n, d, n, 1.0f, false);  // dV = P^T dO
    detail::scores_tile<float>(d_o.data(), v.data(), dp.data(), n, n, d, 1.0f);     // dP = dO V^T
    for (std::size_t i = 0; i < n; ++i) {                                           // dS = P o (dP - D)
      float d_i = 0;
      for (std::size_t c = 0; c < d; ++c) d_i += d_o[i * d + c] * o[i * d + c];
      for (std::size_t j = 0; j < n; ++j) dp[i * n + j] = p[i * n + j] * (dp[i * n + j] - d_i);
    }
    detail::pv_tile<float>(dp.data(), k.data(), dq.data(), n, n, d, false);  // dQ = scale dS K
    for (float& x : dq) x *= scale;
    detail::gemm_tn<float>(dp.data(), q.data(), dk.data(), n, d, n, scale, false);  // dK = scale dS^T Q
  }
};

}  // namespace

Verdict backward_recompute(const Config& cfg) {
  Verdict v;
  constexpr std::size_t d = 64, rounds = 5, per_round = 3;
  std::vector<std::size_t> ns = {2048, 4096};
  if (cfg.full()) ns.push_back(8192);
  if (cfg.smoke()) ns = {256};
  const BackendInfo& fused = fused_backend();
  Plot plot{"backward time, fp32, one thread (B = H = 1, d = 64)", "n", "seconds (median)", true, true, {}, {}};
  std::vector<double> fused_median, standard_median;
  Outcome outcome = Outcome::holds;
  std::ostringstream why;
  why.precision(3);
  // The standard backward's GEMMs on one OpenBLAS thread, like the fused
  // backward's one worker (OpenBLAS would otherwise take every core).
  const ScopedBlasThreads one_thread(true, 1);
  for (std::size_t n : ns) {
    const Shape s{1, 1, n, n, d, d};
    const Inputs<double> in = random_inputs(s, cfg.seed);
    const xt::xtensor<double, 4> d_out = random_d_out(s, cfg.seed + 1);
    StandardBackward standard(in, d_out);
    standard();  // first touch of dP and the gradients, outside the timings
    std::vector<double> t_fused, t_standard;
    alternate_timings(
        rounds,
        [&] { return fused.run_backward("fp32", Accumulate::fp32, in, d_out, Options{}, {}, per_round).warm_seconds; },
        [&] {
          std::vector<double> t;
          for (std::size_t r = 0; r < per_round; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            standard();
            t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
          return t;
        },
        t_fused, t_standard);
    const RatioInterval r = median_ratio(t_fused, t_standard);
    const Outcome o = at_most(r, 1.0);
    if (o == Outcome::does_not_hold || (o == Outcome::inconclusive && outcome == Outcome::holds)) outcome = o;
    const std::string at = "n=" + std::to_string(n);
    v.figures.push_back({at + " time ratio " + fused.name + " / standard", r.median});
    v.figures.push_back({at + " time ratio 95% low", r.low});
    v.figures.push_back({at + " time ratio 95% high", r.high});
    const double f = median(t_fused), st = median(t_standard);
    v.figures.push_back({at + " " + fused.name + " seconds", f});
    v.figures.push_back({at + " standard seconds", st});
    plot.x.push_back(double(n));
    fused_median.push_back(f);
    standard_median.push_back(st);
    why << "n = " << n << ": " << fused.name << " / standard " << r.median << " (95% " << r.low << " to " << r.high
        << "; medians " << f * 1e3 << " ms vs " << st * 1e3 << " ms); ";
    if (cfg.progress) cfg.progress("bwd-recompute: n=" + std::to_string(n));
  }
  plot.series = {{fused.name + " (recomputes P)", fused_median}, {"standard (reads the kept P)", standard_median}};
  v.plots.push_back(plot);
  v.outcome = outcome;
  v.why = why.str().substr(0, why.str().size() - 2) + "; fp32, one thread; the standard's GEMMs: " + blas_info();
  return v;
}

}  // namespace attn::claims
