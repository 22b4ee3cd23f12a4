// One check of a backend's result, used by every verdict of the suite
// (`attn-lab attend --check`, the demo, the accuracy sweep, the benchmarks'
// validation, the agreement tests and properties): the ground truth chosen
// by ground_truth(), the derived bound of metrics.hpp, the comparison.
#pragma once

#include <limits>
#include <string_view>
#include <vector>

#include "attn/backends/reference.hpp"
#include "attn/verify/metrics.hpp"
#include "attn/registry/registry.hpp"

namespace attn {

enum class TruthKind { digits50, fp64, double_double };
// "mp50", "fp64", "double-double": the names in JSON and reports.
std::string_view truth_name(TruthKind k);

struct GroundTruth {
  Result<double> result;  // out, weights and logsumexp
  TruthKind kind = TruthKind::digits50;
  // Bounds on the truth's own error (|truth - exact|), added to a check's
  // tolerance: the output's per query row ([B, H, n_q]), the others global.
  std::vector<double> row_out_error;
  double out_error = 0, lse_error = 0, weights_error = 0;  // out_error: the largest row's
};

// The largest reference_cost of a double-double truth (about 20x cheaper per
// unit than 50 digits: a minute at most here).
inline constexpr double double_double_budget = 400 * backends::reference_budget;

// The truth for checking a backend whose storage has unit roundoff u_store,
// always from independent.hpp (code of its own, no BLAS, no library helper):
//   50 digits while reference_cost <= budget;
//   beyond, for fp64 storage while reference_cost <= double_double_budget,
//     double-double, within 5 u max|V| of the row's head (agreement_test
//     checks it against 50 digits);
//   otherwise plain fp64 (blocked, vectorised loops), its derived fp64
//     bound added to the tolerance (for an fp64 backend that makes the check
//     the worst-case bound of both, weaker than against double-double).
GroundTruth ground_truth(const Inputs<double>& in, const Options& opt, double u_store,
                         double budget = backends::reference_budget);
// What a soft-cap adds to the double-double truth's relative error per weight:
// its tanh is double's (within 4 ulp), so each capped score errs by up to
// 8u c and each weight by 16u c relative (0 without a cap).
double dd_softcap_error(const Options& opt);

// Two verdicts of one result against the truth, each decided per query
// row (b, h, i): a row's error max_c |x_ic - truth_ic| against that row's
// own tolerance, never one tolerance for the tensor (a head whose V is 1e4x
// another's would otherwise lend its tolerance to every row).
//
// Guaranteed (`within`): the worst-case bound of metrics.hpp for the row
// (ErrorBounds::rows_worst) plus the truth's own bound, on output,
// logsumexp, weights and row sums. An error above it is a bug; but it grows
// like n u, far above typical errors, so it misses bugs that make errors
// 10-1000x too large.
//
// Tight (`tight_within`, the verdict the suite decides by): each row's
// output error within BOTH
//   the row's probabilistic bound (failure probability 1e-9 per check under
//   its model) plus the truth's own bound, and
//   the baseline rule: (2 beta + 2) f_i, where f_i is the row's unit of
//   rounding noise, from the row's first-order sensitivity (metrics.hpp
//   RowMagnitude; docs/DESIGN.md "Per-row tolerances"):
//     f_i = u_acc (out_i + noise_i) + u_store out_i + eta_store
//   (the result's rounding in the accumulation type and in storage, and the
//   root-sum-square of one rounding of each term, weight and score of the
//   row), and beta = max_i (the baseline's row error / f_i): the baseline
//   backend's error on the same rounded inputs in the same precision and
//   policy, in units of each row's f. The "+ 2" is the floor: one unit of
//   noise in each of the two runs. A row is judged in its own units: a head
//   whose V is 1e4x another's neither lends the other its tolerance nor
//   takes its errors; a one-hot row is not charged for its scores' roundings
//   (its output does not depend on them).
// The logsumexp, the weights and the row sums are held to their rows'
// probabilistic bounds. Where the probabilistic bound is no better than the
// trivial 2 max|V| (long sums in bf16/fp16 storage accumulation) the
// baseline rule alone decides, and `criterion` says so; the baseline itself
// is judged by the probabilistic bound alone (the rule cannot fail for it).
//
// Informative: a row whose tight tolerance reaches max_c |truth_ic| (a 100%
// error would pass) is uninformative; `tight_informative` is false when any
// row is, and such a verdict is never counted as a pass (reports and tests
// count it apart).
struct RowVerdict {
  double error = 0;      // the deciding row's error (max over the row's elements)
  double tolerance = 0;  // the deciding row's tolerance
  double ratio = 0;      // error / tolerance, the largest over rows (0/0 = 0, x/0 = inf)
  std::size_t row = 0;   // the deciding row, flat [B, H, n_q]
  bool within() const { return ratio <= 1; }
};

// Distribution (storage narrower than fp32: bf16, fp16, the accuracy sweep's
// emulated FP8 through RunReport::store_output; backends other than the
// baseline). There each element's tolerance is at least one rounding of
// the output (the storage term u_store |o| of f_i), so an internal error of
// a fraction of an output ulp passes every per-element verdict however
// systematic it is. Its mean square is still measurable: with e_k = out_k -
// o_k and r_k = fl(o_k) - o_k (the exact output correctly rounded, computed
// from the truth), a kernel whose value before its last rounding is
// o_k + eps_k has E[e_k^2 - r_k^2] = eps_k^2 over the uniformly distributed
// position of o_k between two storage neighbours (the last rounding of
// o_k + eps_k errs uniformly, as that of o_k does). So
//   D = mean_k (e_k^2 - r_k^2) / w_k^2
// estimates the internal error's mean square, w_k the storage's spacing at
// the row's largest |o| (a row's elements in one unit, as f_i is); its
// standard error is the sample standard deviation of the terms over sqrt(N).
// The verdict (FlashAttention's rule in mean squares): the backend's
// internal RMS, at the low end of its 6-sigma interval, within twice the
// baseline's (same inputs, precision, policy; at the high end of its
// interval) plus twice the model's internal noise (f_i without its storage
// term, u_acc (out_i + noise_i), in the same units):
//   sqrt(D_b - 6 se_b) <= 2 sqrt(D_0 + 6 se_0) + 2 sqrt(M)
// (a normal approximation of means over N >= 1000 elements; z = 6 is a
// two-sided 2e-9, the tight verdict's failure probability). Elements whose
// truth is 0 (masked rows) or not finite are left out; below 1,000 elements
// the verdict does not apply.
// The spacing of a format with unit roundoff u (a 2^-p significand) and
// subnormal spacing `min_subnormal` at |x|: 2u 2^e for |x| in [2^e, 2^(e+1)),
// at least min_subnormal (an ulp of x in that format).
double storage_spacing(double x, double u, double min_subnormal);

struct DistributionVerdict {
  bool applies = false;
  std::size_t elements = 0;
  double internal_ms = 0, internal_se = 0;  // D_b and its standard error, in (row ulps)^2
  double baseline_ms = 0, baseline_se = 0;  // D_0 and its standard error
  double model_ms = 0;                      // M
  double internal_rms = 0;  // sqrt(max(0, D_b - 6 se_b)): the backend's internal RMS, at least, in row ulps
  double allowed_rms = 0;   // 2 sqrt(max(0, D_0 + 6 se_0)) + 2 sqrt(M)
  double ratio = 0;         // internal_rms / allowed_rms
  bool within() const { return !applies || ratio <= 1; }
};

struct Check {
  TruthKind truth = TruthKind::digits50;
  ErrorStats out, lse, weights;  // against the truth, whole tensors (lse and weights where the result has them)
  bool has_lse = false, has_weights = false;  // whether lse and weights (and row sums) were judged
  double row_sum_error = std::numeric_limits<double>::quiet_NaN();  // max |sum_j w_ij - 1|, NaN without weights
  // Guaranteed.
  ErrorBound bound;  // the backend's worst-case bound for its (u_acc, u_store), global (the largest row's)
  RowVerdict out_worst, lse_worst, weights_worst, row_sum_worst;
  double tolerance_global = 0;  // one worst-case tolerance valid for every row: bound.out + the truth's largest row error
  bool informative = true;  // the worst-case bound below the trivial 2 max|V|
  bool within = true;       // every row of out (and lse, weights, row sums, when returned) within; finite where the truth is
  // Tight.
  ErrorBound probable;             // the probabilistic bound, global
  double failure_probability = 0;  // of `probable`, per check, under its model
  double baseline_error = std::numeric_limits<double>::quiet_NaN();  // the baseline's max |O - truth|
  double beta = std::numeric_limits<double>::quiet_NaN();  // the baseline's largest row error in units of f_i
  double floor = 0;                // 2 f_i of the deciding row
  std::vector<double> row_unit;    // f_i per row
  RowVerdict out_tight, lse_tight, weights_tight, row_sum_tight;
  std::size_t uninformative_rows = 0;  // rows whose tight tolerance reaches max_c |truth_ic|
  bool tight_informative = true;
  std::string_view criterion;  // which of the two parts can decide (see above)
  DistributionVerdict distribution;  // narrow storage: part of the tight verdict
  bool tight_within = true;
  bool passed() const { return within && tight_within; }  // both criteria
};

// `r` (a RunReport: its rounded inputs, precision, policy, unit roundoffs
// and traits) against `truth`; `baseline`: the baseline backend's run on the
// same inputs, precision and policy (run here when not given).
Check verify(const RunReport& r, const Options& opt, const GroundTruth& truth, const RunReport* baseline = nullptr);
// The same with ground_truth(r.rounded_inputs, opt, r.u_store, budget).
Check verify(const RunReport& r, const Options& opt, double budget = backends::reference_budget);

// --- The backward pass ------------------------------------------------------------

// The gradients' truth for a backward check, from independent.hpp as the
// forward's: 50 digits while 2.5 reference_cost <= budget; beyond,
// double-double while 2.5 reference_cost <= double_double_budget, its error
// within (8 u + 2 dd_softcap_error) T + u max|g| per gradient (T the
// gradient's terms' magnitude, GradientScales::terms_*: each weight within
// 4u relative, dS within 6u with the soft-cap's derivative, sums and dots in
// ~106 bits, one final rounding); beyond that plain fp64 with the worst-case fp64 gradient
// bound as its error. Never a backend's own backward.
struct GradientTruth {
  Gradients<double> grads;
  TruthKind kind = TruthKind::digits50;
  double dq_error = 0, dk_error = 0, dv_error = 0, dbias_error = 0, dsinks_error = 0;  // |truth - exact|
};
GradientTruth gradient_truth(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                             double budget = backends::reference_budget);

// A backward result against the truth, verdicts as verify()'s: `within` the
// worst-case gradient bound (metrics.hpp) plus the truth's error; the tight
// verdict within BOTH the probabilistic bound plus the truth's error and
// the baseline backend's rule (same inputs, dO, precision, policy), for each
// gradient; every gradient finite where the truth is. The rule is judged
// row by row (a query's row of dQ, a key's row of dK and dV; d(bias) and
// d(sinks) as one), each row in its own units f_i = floor_i / 2 (as the
// output's rows, verify()): max((2 beta + 2) f_i, 2 e_base,i + floor_i), beta
// the baseline's largest row error in units of f_i over the rows whose floor
// stays below their gradient; a head or key whose gradient is 1e4 times
// another's no longer lends it its tolerance (criteria_test). A row whose
// tight tolerance reaches its own max|truth| is uninformative, counted. The
// floor of a row is one rounding of each quantity in each of the two runs:
// (2 u_acc + 2 u_store) max|truth_i| + u_acc (2 S + L) with S the
// root-sum-square of the gradient's terms each weighted by its own score's
// rounding magnitude, GradientScales::score_dq/dk/dv (a score's rounding
// moves each term relatively; charging the result times the largest score
// missed terms that cancel: streaming's fp64 dV under a saturated soft-cap
// failed at 1.3x, RapidCheck seed 2, now a regression case; charging the
// terms' sum of magnitudes let 10x errors pass in fp32, backward_test), and
// L the same weighted by |lse_i| once for each run that rebuilds P from its
// saved logsumexp (for dQ, whose row takes one such factor as a whole,
// |lse_i| |dQ_i|); for d(bias) and d(sinks), (s + s_b) max(max|truth|, T),
// s and s_b each run's weight-averaged score magnitude
// (GradientScales::score, score_lse for a run that rebuilds P: each run is
// charged its own logsumexp's rounding, the baseline none; charging the
// baseline too let an error 10x the largest any backend makes pass at 0.96
// of the tolerance, streaming's fp64 dQ of the every-variant problem on
// AVX-512, agreement_test; without it streaming's fp64 dV with fp32
// accumulation, n_q = 1, n_kv = 78, failed against naive's exact softmax,
// RapidCheck seed 6), plus 2 u_acc T,
// T the largest sum of the magnitudes of one gradient element's terms
// (GradientScales::terms_*: one rounding of each term; max|truth| can be far
// smaller where the terms cancel: streaming's fp64 dV with fp32
// accumulation failed against naive's at n_q = 19, logits x 1e-3, without
// it; RapidCheck seed 3), plus 2 u_acc
// times the gradient's GradientScales: one rounding of dP and D, which
// cancel in dP - D (without it, math's fp64 dQ at logits x 10, 1e-17,
// failed against naive's lucky 4e-19 where dQ itself was 1e-5; property
// gradients_agree_with_reference, RapidCheck seed 20261129), plus
// 2 eta_store (one rounding into the storage's subnormals) and twice
// GradientBound::underflow_dq/dk/dv (underflow of the terms and of the
// weights in the accumulation type, as the bounds count it, once per run),
// plus u_b N for dQ, dK and dV where the run's backward rounded P and dS' to
// u_b before their products (Gradients::rounding: each term moves by up to
// u_b of itself, independently; N the root-sum-square of the element's
// terms, GradientScales::Rows::noise, as the forward's rounded weights add
// u_b term_noise; charging u_b T, their sum of magnitudes, made dV's
// tolerance 3x at logits x 0.1, where 10x the error exceeded it by only 6%; the
// baseline keeps them). The terms, S, L, N and the cancellation are the
// row's own (GradientScales::rows_dq, rows_dk, rows_dv). One rounding
// in one run is not enough: math's fp64 dQ of 1.2 ulp failed against
// naive's exact one at n_q = 2, n_kv = 5 (seed 4). The saved
// output's rounding to storage, which D = dO . O inherits, needs no term:
// the baseline (naive) forms D from its own saved output the same way.
struct GradientCheck {
  TruthKind truth = TruthKind::digits50;
  struct Part {
    std::string_view name;  // dq, dk, dv, dbias, dsinks
    ErrorStats error;
    double tolerance = 0;        // the worst-case bound + the truth's error, one for the tensor
    RowVerdict tight;            // the tight verdict, row by row: the deciding row (largest error / tolerance)
    double tight_tolerance = 0;  // tight.tolerance
    double baseline_error = std::numeric_limits<double>::quiet_NaN();  // the baseline's largest row error
    std::size_t uninformative_rows = 0;  // rows whose tight tolerance reaches the row's max|truth|
    bool informative = true;        // the worst-case tolerance below max|truth| (a 100% error)
    bool tight_informative = true;  // no uninformative row: else a pass says nothing of those rows
    // The two verdicts of this gradient (the check's `within` and
    // `tight_within` are every part's): finite where the truth is, and the
    // largest error within the worst-case tolerance / every row within its
    // tight one.
    bool within() const { return error.all_finite_where_ref_finite && error.max_abs <= tolerance; }
    bool within_tight() const { return error.all_finite_where_ref_finite && tight.within(); }
  };
  std::vector<Part> parts;  // dq, dk, dv (and dbias, dsinks when returned)
  GradientBound bound, probable;
  double failure_probability = 0;
  bool within = true, tight_within = true;
  bool tight_informative = true;  // every part's; an uninformative verdict is never counted as a pass
  bool passed() const { return within && tight_within; }  // both criteria
};
GradientCheck verify_backward(const BackwardReport& r, const Options& opt, const GradientTruth& truth,
                              const BackwardReport* baseline = nullptr);
GradientCheck verify_backward(const BackwardReport& r, const Options& opt, double budget = backends::reference_budget);

}  // namespace attn
