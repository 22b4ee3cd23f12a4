#include "attn/verify/properties.hpp"

#include <cmath>
#include <iomanip>
#include <numeric>

#include <xtensor/xview.hpp>

namespace attn::props {

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// One run of backend b on case c in storage `precision`, with what the run
// saw; `ok` is false when the case lies outside the precondition of that
// format (an input overflows the format, or |Q.K| the accumulation type).
struct Run {
  bool ok = false;
  std::string precision;
  Inputs<double> in;  // rounded to the storage, as the backend saw them
  Options opt;
  RunReport r;
  ErrorBound bound;  // the derived bound for this run (metrics.hpp)
};

// The run's logsumexp; a backend that returns none (a plugin without the
// capability) cannot be checked by a property that needs it: not supported.
const xt::xtensor<double, 3>& lse_of(const Run& run) {
  if (!run.r.lse) throw Unsupported("the property needs the logsumexp, which this backend does not return");
  return *run.r.lse;
}

double max_abs_of(const auto& t) {
  double m = 0;
  for (double x : t) m = std::max(m, std::fabs(x));
  return m;
}

// Where a run's worst-case output bound is vacuous (at the trivial 2 max|V|:
// long sums in bf16/fp16 storage accumulation), a property that compares two
// runs within their bounds cannot fail; the derived run of such a comparison
// (the case's own run is the kind agrees_with_reference judges) is then also
// held to verify()'s tight verdict against the ground truth (per row: the
// probabilistic bound and the baseline rule). A verdict that is itself
// uninformative there is counted (vacuous_tally, printed after the table).
void tight_where_vacuous(const Run& run) {
  if (run.bound.out < 2 * max_abs_of(run.in.v)) return;
  const Check check = verify(run.r, run.opt);
  ++vacuous_tally()[0];
  if (!check.tight_informative) ++vacuous_tally()[1];
  RC_ASSERT(check.tight_within);
}

Run run_case(const BackendInfo& b, const Case& c, std::string_view precision, bool weights,
             const Options* override_opt = nullptr, const Inputs<double>* override_in = nullptr) {
  Run run;
  run.precision = precision;
  const PrecisionInfo& p = precision_info(precision);
  const double max_s = p.max_finite, max_a = accumulation_max_finite(p, c.policy);
  // The precondition is checked on freshly generated inputs only: inputs a
  // property derives from a run's (rounded) inputs, by permuting them or
  // replacing entries with small values, satisfy it by construction.
  const Inputs<double> in = override_in ? *override_in : c.inputs(max_s, max_a);
  if (!override_in) {
    for (const auto* t : {&in.q, &in.k, &in.v})
      for (double x : *t)
        if (std::fabs(x) > max_s / 2) return run;  // would round to inf or sit at the format's edge
    double mag = 0;
    const Shape sh = in.shape();
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i)
          for (std::size_t j = 0; j < sh.n_kv; ++j) {
            double dot = 0;
            for (std::size_t l = 0; l < sh.d_k; ++l) dot += std::fabs(in.q(bb, h, i, l) * in.k(bb, h / sh.group(), j, l));
            mag = std::max(mag, dot);
          }
    if (mag > max_a / 8) return run;  // Q.K would overflow the accumulation type
  }
  run.opt = override_opt ? *override_opt : c.options();
  run.opt.need_weights = weights;
  run.opt.need_lse = true;  // unless the backend cannot return it (a plugin's; lse_of() then says so)
  run.opt = b.without_unreturnable_outputs(p, c.policy, in.shape(), run.opt);
  run.opt.need_weights = weights;
  run.r = b.run(precision, c.policy, in, run.opt, {}, 0);
  if (&b == under_test()) ++backend_runs();
  run.in = run.r.rounded_inputs;
  run.bound = error_bound(run.in, run.opt, run.r.u_acc, run.r.u_store, run.r.kernel);
  run.ok = true;
  return run;
}

// f(run) for every storage precision the case fits.
template <class F>
void for_each_precision(const BackendInfo& b, const Case& c, bool weights, F&& f) {
  for (const PrecisionInfo& p : precisions()) {
    const std::string_view precision = p.name;
    if (!only_precision().empty() && only_precision() != precision) continue;
    Run run;
    try {
      run = run_case(b, c, precision, weights);
    } catch (const Unsupported& e) {  // a plugin's: the other precisions still run
      RC_LOG() << b.name << " " << precision << ": " << e.what() << "\n";
      last_refusal() = e.what();
      ++backend_refusals();
      continue;
    }
    if (!run.ok) continue;
    RC_LOG() << b.name << " " << precision << " accumulate " << accumulate_name(c.policy) << "\n";
    f(run);
  }
}

bool row_fully_masked(const Run& run, std::size_t bi, std::size_t i) {
  return lse_of(run).data()[bi * run.in.shape().n_q + i] == -inf;
}

// Whether query i of batch bb may attend to key j under the run's mask (and documents).
bool visible(const MaskView& mask, std::size_t bb, std::size_t i, std::size_t j) { return mask.visible(bb, i, j); }

// The sink's weight exp(sink_h - lse_i) of row i of head h (0 without a sink).
double sink_weight(const Run& run, std::size_t bb, std::size_t h, std::size_t i) {
  if (!run.opt.sinks) return 0.0;
  const double lse = lse_of(run)(bb, h, i);
  return std::isfinite(lse) ? std::exp((*run.opt.sinks)(h) - lse) : 0.0;
}

// The run's weights against weights computed apart from every backend
// (independent.hpp in fp64: its own loops, no BLAS, no MaskView), elementwise,
// within the run's probabilistic bound plus that computation's own bound. A
// backend that rebuilds its weights from its logsumexp (streaming) would pass
// row-sum and masked-zero checks of its own weights with a tile dropped or
// the causal hull shifted; this check would not.
void assert_weights_match_independent(const Run& run) {
  const GroundTruth t = ground_truth(run.in, run.opt, run.r.u_store, /*budget=*/0);
  RC_ASSERT(t.kind == TruthKind::fp64 || t.kind == TruthKind::double_double);  // (fp64 storage: double-double)
  const ErrorBounds bounds = error_bounds(run.in, run.opt, run.r.u_acc, run.r.u_store, run.r.kernel);
  const double tol =
      (run.r.traits.weights_from_lse ? bounds.probable.weights_from_lse : bounds.probable.weights) + t.weights_error;
  const ErrorStats e = compare(*run.r.weights, *t.result.weights, run.r.u_store);
  RC_LOG() << "weights vs independent: " << e.max_abs << " (tolerance " << tol << ")\n";
  RC_ASSERT(e.max_abs <= tol);
}

double sample_variance(const xt::xtensor<double, 3>& x) {
  double sum = 0, sum2 = 0;
  for (double v : x) sum += v;
  const double mean = sum / double(x.size());
  for (double v : x) sum2 += (v - mean) * (v - mean);
  return sum2 / double(x.size() - 1);
}

}  // namespace

namespace {
std::vector<Property>& registered() {
  static std::vector<Property> all;
  return all;
}
}  // namespace

PropertyRegistration::PropertyRegistration(const Property& p) { registered().push_back(p); }
const std::vector<Property>& properties() { return registered(); }

std::map<std::string, std::map<std::string, int>>& case_tally() {
  static std::map<std::string, std::map<std::string, int>> t;
  return t;
}
std::map<std::string, std::map<std::string, int>>& unsupported_tally() {
  static std::map<std::string, std::map<std::string, int>> t;
  return t;
}
std::map<std::string, std::map<std::string, int>>& not_run_tally() {
  static std::map<std::string, std::map<std::string, int>> t;
  return t;
}
std::array<long, 2>& vacuous_tally() {
  static std::array<long, 2> t{};
  return t;
}
int& backend_runs() {
  static int n = 0;
  return n;
}
const BackendInfo*& under_test() {
  static const BackendInfo* b = nullptr;
  return b;
}
int& backend_refusals() {
  static int n = 0;
  return n;
}
std::string& only_precision() {
  static std::string p;
  return p;
}
std::string& last_refusal() {
  static std::string why;
  return why;
}

// Rows of the weights sum to 1 within the derived bound; weights in [0, 1];
// and they are the weights an independent computation finds. With sinks, a
// row sums to 1 - exp(sink_h - lse_i) (the sink's own weight, from the run's
// logsumexp: within the row-sum bound plus what the logsumexp's bound moves
// it by), and a fully masked row to 0 with lse_i = sink_h.
ATTN_PROPERTY(rows_sum_to_one, "rows sum to 1 (1 - the sink's weight)", 2e6, b, c) {
  for_each_precision(b, c, true, [&](const Run& run) {
    const auto& w = *run.r.weights;
    const std::size_t n_kv = w.shape(3), n_q = w.shape(2), heads = w.shape(1), rows = w.size() / n_kv;
    const double tol = b.traits.weights_from_lse ? run.bound.row_sum_from_lse : run.bound.row_sum;
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (std::size_t j = 0; j < n_kv; ++j) {
        const double p = w.data()[r * n_kv + j];
        RC_ASSERT(p >= 0.0);
        RC_ASSERT(p <= 1.0);
        sum += p;
      }
      const double sink = sink_weight(run, r / (heads * n_q), r / n_q % heads, r % n_q);
      if (row_fully_masked(run, r / n_q, r % n_q)) RC_ASSERT(sum == 0.0);
      else RC_ASSERT(std::fabs(sum - (1 - sink)) <= tol + (sink > 0 ? sink * std::expm1(run.bound.lse) : 0.0));
    }
    assert_weights_match_independent(run);
  });
}

// Masked weights are exactly 0; a row's output does not change, bit for
// bit, when the keys and values it cannot see are replaced.
ATTN_PROPERTY(masked_weights_are_zero_and_masked_inputs_irrelevant, "masked weights 0, masked inputs irrelevant", 1e6, b, c) {
  for_each_precision(b, c, true, [&](const Run& run) {
    const Shape sh = run.in.shape();
    const MaskView mask(run.opt, sh);
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i)
          for (std::size_t j = 0; j < sh.n_kv; ++j)
            if (!visible(mask, bb, i, j)) RC_ASSERT((*run.r.weights)(bb, h, i, j) == 0.0);
    assert_weights_match_independent(run);  // and the visible ones are the right ones

    // Row i = the last query of batch 0: replace what it cannot see.
    const std::size_t i = sh.n_q - 1;
    Inputs<double> changed = run.in;
    NormalStream normal(c.seed + 77);
    bool any = false;
    for (std::size_t j = 0; j < sh.n_kv; ++j) {
      if (visible(mask, 0, i, j)) continue;
      any = true;
      for (std::size_t h = 0; h < sh.kv_head_count(); ++h) {
        for (std::size_t l = 0; l < sh.d_k; ++l) changed.k(0, h, j, l) = std::round(8 * normal.next()) / 4;
        for (std::size_t l = 0; l < sh.d_v; ++l) changed.v(0, h, j, l) = std::round(8 * normal.next()) / 4;
      }
    }
    RC_CLASSIFY(any, "row with masked keys replaced");
    if (!any) return;
    const Run again = run_case(b, c, run.precision, false, &run.opt, &changed);
    RC_ASSERT(again.ok);
    for (std::size_t h = 0; h < sh.heads; ++h)
      for (std::size_t col = 0; col < sh.d_v; ++col) RC_ASSERT(again.r.out(0, h, i, col) == run.r.out(0, h, i, col));
  });
}

// verify()'s two verdicts against the ground truth: the worst-case bound
// (output, logsumexp, weights, row sums) and the tight one: the
// probabilistic bound and no worse than 2x the baseline backend's own error
// at the same precision plus a floor of one rounding of each output and
// score in each run (FlashAttention's test rule; verify.hpp).
ATTN_PROPERTY(agrees_with_reference, "agrees with reference (bound, 2x naive)", 1.5e5, b, c) {
  const BackendInfo& naive = baseline_backend();
  for_each_precision(b, c, !b.traits.plugin, [&](const Run& run) {  // (a plugin returns no weights)
    const GroundTruth truth = ground_truth(run.in, run.opt, run.r.u_store);
    const Run base = run_case(naive, c, run.precision, false, &run.opt, &run.in);
    const Check check = verify(run.r, run.opt, truth, &base.r);
    RC_LOG() << "error " << check.out.max_abs << "; tight, row " << check.out_tight.row << ": "
             << check.out_tight.error << " of " << check.out_tight.tolerance << " (" << check.criterion
             << "); worst-case, row " << check.out_worst.row << ": " << check.out_worst.error << " of "
             << check.out_worst.tolerance << "; lse " << check.lse_tight.ratio << ", weights " << check.weights_tight.ratio
             << ", row sums " << check.row_sum_tight.ratio << " of their tight tolerances\n";
    RC_ASSERT(check.within);
    RC_ASSERT(check.tight_within);
  });
}

// Adding a constant c_i to every score of row i (an additive bias) leaves
// the output unchanged within the two runs' bounds, plus what the rounding
// of the shifted bias itself (fl(b + c) != b + c, found exactly by TwoSum)
// does to an exact softmax: max|v| expm1(2 max|db|).
// (Not with sinks: the sink's logit does not move with the row. A case
// with sinks or another mask runs without them, as mask none: returning
// early instead counted 9 of 10 cases as passed with nothing run.)
ATTN_PROPERTY(shift_invariant, "shift invariant", 1e6, b, given) {
  Case c = given;
  if (c.mask != MaskKind::none && c.mask != MaskKind::bias) c.mask = MaskKind::none;
  c.sinks = Case::Sinks::none;
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    auto bias = xt::xtensor<double, 2>(xt::zeros<double>({sh.n_q, sh.n_kv}));
    if (auto* existing = std::get_if<mask::AdditiveBias>(&run.opt.mask)) bias = existing->bias;
    NormalStream normal(c.seed + 4);
    double db = 0;  // the largest rounding error of a shifted bias entry
    for (std::size_t i = 0; i < sh.n_q; ++i) {
      const double shift = std::round(40 * normal.next()) / 4;
      for (std::size_t j = 0; j < sh.n_kv; ++j) {
        const double x = bias(i, j), sum = x + shift;
        if (std::isfinite(sum)) {
          const double bb = sum - x;  // TwoSum (Knuth): the exact error of x + shift
          db = std::max(db, std::fabs((x - (sum - bb)) + (shift - bb)));
        }
        bias(i, j) = sum;
      }
    }
    Options shifted = run.opt;
    shifted.mask = mask::AdditiveBias{bias};
    const Run moved = run_case(b, c, run.precision, false, &shifted, &run.in);
    RC_ASSERT(moved.ok);
    double max_v = 0;
    for (double x : run.in.v) max_v = std::max(max_v, std::fabs(x));
    RC_ASSERT(compare(moved.r.out, run.r.out, run.r.u_store).max_abs <=
              run.bound.out + moved.bound.out + max_v * std::expm1(2 * db));
  });
}

// Each output coordinate lies between the min and max of its value column
// over the keys the row sees, up to the rounding of the weights' sum, of the
// accumulation and of the storage (slack times the largest |v| seen); a
// fully masked row is exactly 0. With a sink (a key of value 0) the hull
// takes in 0, and the sink's weight adds its own rounding.
ATTN_PROPERTY(outputs_in_convex_hull, "outputs in convex hull", 1e6, b, c) {
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    const MaskView mask(run.opt, sh);
    const double slack = (b.traits.weights_from_lse ? run.bound.row_sum_from_lse : run.bound.row_sum) +
                         gamma(double(sh.n_kv) + 3, run.r.u_acc) + run.r.u_store +
                         (run.opt.sinks ? std::expm1(run.bound.lse) : 0.0);
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i) {
          const bool masked = row_fully_masked(run, bb * sh.heads + h, i);
          for (std::size_t col = 0; col < sh.d_v; ++col) {
            const double o = run.r.out(bb, h, i, col);
            if (masked) {
              RC_ASSERT(o == 0.0);
              continue;
            }
            double lo = inf, hi = -inf, mag = 0;
            if (run.opt.sinks && (*run.opt.sinks)(h) > -inf) lo = hi = 0;
            for (std::size_t j = 0; j < sh.n_kv; ++j) {
              if (!visible(mask, bb, i, j)) continue;
              const double v = run.in.v(bb, h / sh.group(), j, col);
              lo = std::min(lo, v);
              hi = std::max(hi, v);
              mag = std::max(mag, std::fabs(v));
            }
            const double tol = mag > 0 ? slack * mag : 0.0;  // (only the sink's 0 seen: exactly 0)
            RC_ASSERT(o >= lo - tol);
            RC_ASSERT(o <= hi + tol);
          }
        }
  });
}

// Without mask, self-attention is equivariant under a permutation of the
// tokens, and permuting key/value pairs together changes no output (within
// the two runs' bounds: the order of the sums changes).
ATTN_PROPERTY(permutation_equivariant, "permutation equivariant", 5e4, b, c0) {
  Case c = c0;
  c.mask = MaskKind::none;
  c.alibi = Case::Alibi::none;  // ALiBi and documents depend on positions
  c.documents = 0;
  c.shape.n_kv = c.shape.n_q;
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    std::vector<std::size_t> perm(sh.n_q);
    std::iota(perm.begin(), perm.end(), 0);
    NormalStream normal(c.seed + 6);
    for (std::size_t i = perm.size(); i > 1; --i)
      std::swap(perm[i - 1], perm[std::size_t(std::fabs(normal.next()) * 1e6) % i]);
    Inputs<double> tokens = run.in, pairs = run.in;
    for (std::size_t bh = 0; bh < sh.batch * sh.heads; ++bh)
      for (std::size_t i = 0; i < sh.n_q; ++i)
        for (std::size_t l = 0; l < sh.d_k; ++l)
          tokens.q.data()[(bh * sh.n_q + i) * sh.d_k + l] = run.in.q.data()[(bh * sh.n_q + perm[i]) * sh.d_k + l];
    for (std::size_t bh = 0; bh < sh.batch * sh.kv_head_count(); ++bh)
      for (std::size_t i = 0; i < sh.n_q; ++i) {
        const std::size_t p = perm[i];
        for (std::size_t l = 0; l < sh.d_k; ++l) {
          tokens.k.data()[(bh * sh.n_kv + i) * sh.d_k + l] = run.in.k.data()[(bh * sh.n_kv + p) * sh.d_k + l];
          pairs.k.data()[(bh * sh.n_kv + i) * sh.d_k + l] = run.in.k.data()[(bh * sh.n_kv + p) * sh.d_k + l];
        }
        for (std::size_t l = 0; l < sh.d_v; ++l) {
          tokens.v.data()[(bh * sh.n_kv + i) * sh.d_v + l] = run.in.v.data()[(bh * sh.n_kv + p) * sh.d_v + l];
          pairs.v.data()[(bh * sh.n_kv + i) * sh.d_v + l] = run.in.v.data()[(bh * sh.n_kv + p) * sh.d_v + l];
        }
      }
    const Run t = run_case(b, c, run.precision, false, &run.opt, &tokens);
    const Run p = run_case(b, c, run.precision, false, &run.opt, &pairs);
    RC_ASSERT(t.ok && p.ok);
    const double tol = 2 * run.bound.out;
    for (const Run* x : {&t, &p}) tight_where_vacuous(*x);
    for (std::size_t bh = 0; bh < sh.batch * sh.heads; ++bh)
      for (std::size_t i = 0; i < sh.n_q; ++i)
        for (std::size_t l = 0; l < sh.d_v; ++l) {
          const double o = run.r.out.data()[(bh * sh.n_q + perm[i]) * sh.d_v + l];
          RC_ASSERT(std::fabs(t.r.out.data()[(bh * sh.n_q + i) * sh.d_v + l] - o) <= tol);
          RC_ASSERT(std::fabs(p.r.out.data()[(bh * sh.n_q + perm[i]) * sh.d_v + l] - o) <= tol);
        }
  });
}

// For iid N(0, 1) q and k, var(q.k) = d_k and var(q.k / sqrt(d_k)) = 1,
// read through the backend's own logsumexp (a row with one key returns its
// score), once with its default scale and once with scale 1. The sample
// variance of N scores has standard deviation sd = sqrt((2 d^2 + 6 d) / N)
// (a sum of d products of normals has fourth moment 3 d^2 + 6 d); allowed:
// 6 sd, plus what the derived score error e can do to a standard deviation
// sqrt(var): (sqrt(var) + e)^2 - var. One storage precision per case (the
// seed picks it), so the 50-digit reference stays affordable; over the
// cases every precision is covered.
ATTN_PROPERTY(score_variance_scales_with_dk, "score variance d_k and 1", 1e6, b, c) {
  const std::size_t d = std::clamp<std::size_t>(c.shape.d_k * c.shape.d_v, 1, 1024);
  const std::size_t samples = std::clamp<std::size_t>(std::size_t(1e5 / double(d)), 200, 20000);
  Case s = c.plain();
  s.shape = {1, samples, 1, 1, d, 1};
  s.mask = MaskKind::none;
  s.magnitude = Magnitude::unit;
  s.logit_scale = 1;
  const std::string_view precision = precisions()[c.seed % precisions().size()].name;
  RC_CLASSIFY(d >= 256, "d_k >= 256");
  RC_TAG(precision);
  for (const double scale : {1.0 / std::sqrt(double(d)), 1.0}) {
    Options opt = s.options();
    opt.scale = scale == 1.0 ? std::optional<double>(1.0) : std::nullopt;  // nullopt: the backend's default
    const Run run = run_case(b, s, precision, false, &opt);
    if (!run.ok) continue;
    RC_LOG() << b.name << " " << precision << " d_k=" << d << " samples=" << samples << " scale=" << scale << "\n";
    const double expected = double(d) * scale * scale;
    const double sd = std::sqrt((2.0 * d * d + 6.0 * d) / double(samples)) * scale * scale;
    const double e = run.bound.score;
    const double rounding = 2 * e * std::sqrt(expected) + e * e;
    RC_ASSERT(std::fabs(sample_variance(lse_of(run)) - expected) <= 6 * sd + rounding);
  }
}

// Finite inputs give finite outputs, weights and logsumexp (-inf exactly
// on fully masked rows, whose outputs are 0), whatever the logits' size.
ATTN_PROPERTY(finite_for_finite_inputs, "finite for finite inputs", 2e6, b, c) {
  for_each_precision(b, c, true, [&](const Run& run) {
    for (double x : run.r.out) RC_ASSERT(std::isfinite(x));
    for (double x : *run.r.weights) RC_ASSERT(std::isfinite(x));
    const Shape sh = run.in.shape();
    for (std::size_t bh = 0; bh < sh.batch * sh.heads; ++bh)
      for (std::size_t i = 0; i < sh.n_q; ++i) {
        const double l = lse_of(run).data()[bh * sh.n_q + i];
        RC_ASSERT(std::isfinite(l) || l == -inf);
        if (l == -inf)
          for (std::size_t col = 0; col < sh.d_v; ++col) RC_ASSERT(run.r.out.data()[(bh * sh.n_q + i) * sh.d_v + col] == 0.0);
      }
  });
}

// A second run gives the same bits, and so does one thread instead of the
// case's (each query block is computed whole by one worker); the case's block
// sizes and the backend's defaults agree within the two runs' bounds. A
// plugin's thread count is held to the bounds (its reduction order is its own
// business, as in batch_invariant; attn-lab verify's invariance cells say
// whether its bits move): PyTorch's backward differs in dQ between 1 and 2
// threads.
ATTN_PROPERTY(block_size_independent_and_deterministic, "block sizes, determinism", 1e6, b, c) {
  for_each_precision(b, c, false, [&](const Run& run) {
    const Run again = run_case(b, c, run.precision, false, &run.opt, &run.in);
    RC_ASSERT(again.r.out == run.r.out);
    RC_ASSERT(lse_of(again) == lse_of(run));
    Options single = run.opt;
    single.threads = 1;
    const Run one = run_case(b, c, run.precision, false, &single, &run.in);
    if (b.traits.plugin)
      RC_ASSERT(compare(one.r.out, run.r.out, run.r.u_store).max_abs <= 2 * run.bound.out);
    else
      RC_ASSERT(one.r.out == run.r.out);
    Options defaults = run.opt;
    defaults.block_q = defaults.block_k = 0;
    const Run other = run_case(b, c, run.precision, false, &defaults, &run.in);
    RC_ASSERT(compare(other.r.out, run.r.out, run.r.u_store).max_abs <= 2 * run.bound.out);
    tight_where_vacuous(other);
  });
}

// out [B, H, n_q, d_v], weights [B, H, n_q, n_kv], lse [B, H, n_q], for
// cross-attention and d_k != d_v alike.
ATTN_PROPERTY(result_shapes, "result shapes", 2e5, b, c) {
  for_each_precision(b, c, true, [&](const Run& run) {
    const Shape s = c.shape;
    RC_ASSERT(run.r.out.shape() == (std::array<std::size_t, 4>{s.batch, s.heads, s.n_q, s.d_v}));
    RC_ASSERT(run.r.weights->shape() == (std::array<std::size_t, 4>{s.batch, s.heads, s.n_q, s.n_kv}));
    RC_ASSERT(lse_of(run).shape() == (std::array<std::size_t, 3>{s.batch, s.heads, s.n_q}));
  });
}

}  // namespace attn::props

// --- The backward pass -------------------------------------------------------------
namespace attn::props {
namespace {

// One backward run of backend b on case c in storage `precision`: the
// forward run's precondition (run_case), then the backward on its rounded
// inputs with dO = N(0, 1) values (seed + 11), unless given. `ok` is false
// when the backend has no backward pass or the gradients could leave the
// storage or accumulation format: |dQ| <= |scale| max|K| 2 P1, |dK| <=
// |scale| max|Q| n_q 2 P1, |dV| <= n_q max|dO| (P1 = max_i ||dO_i||_1 max|V|)
// must stay 4x below the largest storage value and 8x below the accumulation's.
struct BackwardRun {
  bool ok = false;
  std::string precision;
  Inputs<double> in;
  xt::xtensor<double, 4> d_out;
  Options opt;
  BackwardReport r;
};

BackwardRun run_backward_case(const BackendInfo& b, const Case& c, std::string_view precision,
                              const Options* override_opt = nullptr, const Inputs<double>* override_in = nullptr,
                              const xt::xtensor<double, 4>* override_d_out = nullptr) {
  BackwardRun run;
  if (!b.has_backward) {  // not supported, never passed
    last_refusal() = "backend '" + b.name + "' has no backward pass";
    ++backend_refusals();
    return run;
  }
  const Run fwd = run_case(b, c, precision, false, override_opt, override_in);
  if (!fwd.ok) return run;
  run.precision = precision;
  run.opt = fwd.opt;
  run.opt.need_lse = false;
  run.opt.need_dbias = std::holds_alternative<mask::AdditiveBias>(run.opt.mask);
  run.in = fwd.in;
  run.d_out = override_d_out ? *override_d_out : random_d_out(c.shape, c.seed + 11);
  const PrecisionInfo& p = precision_info(precision);
  const Shape sh = run.in.shape();
  double a1 = 0;
  for (std::size_t row = 0; row < run.d_out.size() / sh.d_v; ++row) {
    double sum = 0;
    for (std::size_t l = 0; l < sh.d_v; ++l) sum += std::fabs(run.d_out.data()[row * sh.d_v + l]);
    a1 = std::max(a1, sum);
  }
  const double p1 = a1 * max_abs_of(run.in.v), scale = std::fabs(run.opt.resolved_scale(sh));
  const double rows = double(sh.n_q * sh.group());  // the terms of a dK or dV element
  const double largest = std::max({scale * max_abs_of(run.in.k) * 2 * p1, scale * max_abs_of(run.in.q) * rows * 2 * p1,
                                   rows * max_abs_of(run.d_out)});
  if (largest > p.max_finite / 4 || largest > accumulation_max_finite(p, c.policy) / 8) return run;
  run.r = b.run_backward(precision, c.policy, run.in, run.d_out, run.opt);
  if (&b == under_test()) ++backend_runs();
  run.ok = true;
  return run;
}

bool sees_a_key(const MaskView& mask, std::size_t bb, std::size_t i, std::size_t n_kv) {
  for (std::size_t j = 0; j < n_kv; ++j)
    if (visible(mask, bb, i, j)) return true;
  return false;
}

// f(run) for every storage precision the case fits (none for a backend without a backward pass).
template <class F>
void for_each_backward(const BackendInfo& b, const Case& c, F&& f) {
  if (!b.has_backward) {  // (a plugin's): not supported, never passed
    last_refusal() = "backend '" + b.name + "' has no backward pass";
    ++backend_refusals();
    return;
  }
  for (const PrecisionInfo& p : precisions()) {
    if (!only_precision().empty() && only_precision() != p.name) continue;
    BackwardRun run = run_backward_case(b, c, p.name);
    if (!run.ok) continue;
    RC_LOG() << b.name << " backward " << p.name << " accumulate " << accumulate_name(c.policy) << "\n";
    f(run);
  }
}

// The probabilistic gradient bound of a run (metrics.hpp), with the run's
// own gradients standing in for the exact ones in the storage-rounding term
// (first order: they differ by the bound itself).
GradientBound probable_bound(const BackwardRun& run) {
  const RunReport& f = run.r.forward;
  return gradient_bounds(run.in, run.r.rounded_d_out, run.r.grads, run.opt, f.u_acc, f.u_store, f.eta_acc, f.eta_store, f.eta_weight, f.kernel,
                         run.r.grads.rounding)
      .probable;
}

}  // namespace

// verify_backward()'s two verdicts against the 50-digit gradients: the
// worst-case gradient bound, and the tight one (probabilistic bound and 2x
// the naive backend's error plus a floor), for dQ, dK, dV and d(bias).
ATTN_PROPERTY(gradients_agree_with_reference, "gradients agree with reference", 6e4, b, c) {
  for_each_backward(b, c, [&](const BackwardRun& run) {
    const GradientTruth truth = gradient_truth(run.in, run.r.rounded_d_out, run.opt);
    std::optional<BackwardReport> base;
    if (!b.traits.baseline)
      base = baseline_backend().run_backward(run.precision, c.policy, run.in, run.d_out, run.opt);
    const GradientCheck check = verify_backward(run.r, run.opt, truth, base ? &*base : nullptr);
    for (const auto& part : check.parts)
      RC_LOG() << part.name << " error " << part.error.max_abs << "; tight: row " << part.tight.row << " error "
               << part.tight.error << " of " << part.tight.tolerance << "; worst-case " << part.tolerance << "\n";
    RC_LOG() << "underflow allowances dq " << check.bound.underflow_dq << " dk " << check.bound.underflow_dk << " dv "
             << check.bound.underflow_dv << "\n";
    RC_ASSERT(check.within);
    RC_ASSERT(check.tight_within);
  });
}

// Shifting every key by one vector changes each score row by a constant, so
// sum_j dK_j = 0; sum_j dV_j = sum of dO_i over the rows that see a key;
// each row of d(bias) sums to 0. Exactly so for the exact gradients: the
// computed sums are within n_kv times the probabilistic bound of one gradient
// (plus the double sum's rounding). A K/V head's sums run over its g query
// heads. Soft-capping breaks the first (dS' = dS o f is no longer a
// zero-sum row) and a sink all three (its weight is missing from each row):
// those cases check what still holds.
ATTN_PROPERTY(gradient_sums, "sum dK = 0, sum dV = sum dO, d(bias) rows sum 0", 5e5, b, c) {
  for_each_backward(b, c, [&](const BackwardRun& run) {
    const Shape sh = run.in.shape();
    const GradientBound bound = probable_bound(run);
    const MaskView mask(run.opt, sh);
    const double n = double(sh.n_kv), sum_rounding = gamma(n + double(sh.n_q * sh.group()), 0x1p-53);
    const bool sinks = run.opt.sinks.has_value();
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t hk = 0; hk < sh.kv_head_count(); ++hk) {
        for (std::size_t l = 0; l < sh.d_k && !sinks && !run.opt.softcap; ++l) {
          double sum = 0, mag = 0;
          for (std::size_t j = 0; j < sh.n_kv; ++j) sum += run.r.grads.dk(bb, hk, j, l), mag += std::fabs(run.r.grads.dk(bb, hk, j, l));
          RC_ASSERT(std::fabs(sum) <= n * bound.dk + sum_rounding * mag);
        }
        for (std::size_t l = 0; l < sh.d_v && !sinks; ++l) {
          double sum = 0, expected = 0, mag = 0;
          for (std::size_t j = 0; j < sh.n_kv; ++j) sum += run.r.grads.dv(bb, hk, j, l), mag += std::fabs(run.r.grads.dv(bb, hk, j, l));
          for (std::size_t h = hk * sh.group(); h < (hk + 1) * sh.group(); ++h)
            for (std::size_t i = 0; i < sh.n_q; ++i)
              if (sees_a_key(mask, bb, i, sh.n_kv))
                expected += run.r.rounded_d_out(bb, h, i, l), mag += std::fabs(run.r.rounded_d_out(bb, h, i, l));
          RC_ASSERT(std::fabs(sum - expected) <= n * bound.dv + sum_rounding * mag);
        }
      }
    if (run.r.grads.dbias && !sinks)
      for (std::size_t i = 0; i < sh.n_q; ++i) {
        double sum = 0, mag = 0;
        for (std::size_t j = 0; j < sh.n_kv; ++j) sum += (*run.r.grads.dbias)(i, j), mag += std::fabs((*run.r.grads.dbias)(i, j));
        RC_ASSERT(std::fabs(sum) <= n * bound.dbias + sum_rounding * mag);
      }
  });
}

// The gradients are linear in dO: grad(2 G1 + G2) = 2 grad(G1) + grad(G2)
// within the three runs' probabilistic bounds. G1, G2 are multiples of 1/4
// below 8 in magnitude, so 2 G1 + G2 is exact in every storage format.
ATTN_PROPERTY(gradients_linear_in_d_out, "gradients linear in dO", 2e5, b, c) {
  if (!b.has_backward) {  // not supported, never passed
    last_refusal() = "backend '" + b.name + "' has no backward pass";
    ++backend_refusals();
    return;
  }
  auto quarters = [&](std::uint64_t seed) {
    auto g = random_d_out(c.shape, seed);
    for (double& x : g) x = std::clamp(std::round(4 * x) / 4, -7.75, 7.75);
    return g;
  };
  const auto g1 = quarters(c.seed + 21), g2 = quarters(c.seed + 22);
  auto g3 = g1;
  for (std::size_t x = 0; x < g3.size(); ++x) g3.data()[x] = 2 * g1.data()[x] + g2.data()[x];
  for (const PrecisionInfo& p : precisions()) {
    const BackwardRun r1 = run_backward_case(b, c, p.name, nullptr, nullptr, &g1);
    if (!r1.ok) continue;
    const BackwardRun r2 = run_backward_case(b, c, p.name, &r1.opt, &r1.in, &g2);
    const BackwardRun r3 = run_backward_case(b, c, p.name, &r1.opt, &r1.in, &g3);
    if (!r1.ok || !r2.ok || !r3.ok) continue;
    RC_LOG() << b.name << " linearity " << p.name << "\n";
    const GradientBound b1 = probable_bound(r1), b2 = probable_bound(r2), b3 = probable_bound(r3);
    auto check = [](const auto& t1, const auto& t2, const auto& t3, double tol) {
      for (std::size_t x = 0; x < t1.size(); ++x) RC_ASSERT(std::fabs(t3.data()[x] - 2 * t1.data()[x] - t2.data()[x]) <= tol);
    };
    check(r1.r.grads.dq, r2.r.grads.dq, r3.r.grads.dq, b3.dq + 2 * b1.dq + b2.dq);
    check(r1.r.grads.dk, r2.r.grads.dk, r3.r.grads.dk, b3.dk + 2 * b1.dk + b2.dk);
    check(r1.r.grads.dv, r2.r.grads.dv, r3.r.grads.dv, b3.dv + 2 * b1.dv + b2.dv);
  }
}

// Exact zeros where the mask says so: dK_j = dV_j = 0 for a key no query of
// its batch sees, dQ_i = 0 for a fully masked row; under a causal or window
// mask, dQ_i does not change (bit for bit) when the keys and values after
// row i's last visible key change; and everything is finite.
ATTN_PROPERTY(masked_gradients, "masked gradients 0, dQ_i blind to the future", 3e5, b, c) {
  for_each_backward(b, c, [&](const BackwardRun& run) {
    const Shape sh = run.in.shape();
    const MaskView mask(run.opt, sh);
    for (const auto* t : {&run.r.grads.dq, &run.r.grads.dk, &run.r.grads.dv})
      for (double x : *t) RC_ASSERT(std::isfinite(x));
    for (std::size_t bb = 0; bb < sh.batch; ++bb) {
      for (std::size_t j = 0; j < sh.n_kv; ++j) {
        bool seen = false;
        for (std::size_t i = 0; i < sh.n_q && !seen; ++i) seen = visible(mask, bb, i, j);
        if (seen) continue;
        for (std::size_t h = 0; h < sh.kv_head_count(); ++h) {
          for (std::size_t l = 0; l < sh.d_k; ++l) RC_ASSERT(run.r.grads.dk(bb, h, j, l) == 0.0);
          for (std::size_t l = 0; l < sh.d_v; ++l) RC_ASSERT(run.r.grads.dv(bb, h, j, l) == 0.0);
        }
      }
      for (std::size_t i = 0; i < sh.n_q; ++i) {
        if (!sees_a_key(mask, bb, i, sh.n_kv))
          for (std::size_t h = 0; h < sh.heads; ++h)
            for (std::size_t l = 0; l < sh.d_k; ++l) RC_ASSERT(run.r.grads.dq(bb, h, i, l) == 0.0);
      }
    }
    if (c.mask != MaskKind::causal && c.mask != MaskKind::window) return;
    // Row i = n_q / 2 of batch 0: change every key and value after its last
    // visible key (to multiples of 1/4 within the inputs' own range, so the
    // run's precondition holds as before and every format holds them exactly).
    const std::size_t i = sh.n_q / 2, last = mask.keys(0, i).end;
    if (last >= sh.n_kv) return;
    Inputs<double> changed = run.in;
    NormalStream normal(c.seed + 31);
    const double max_k = std::floor(4 * max_abs_of(run.in.k)) / 4, max_v = std::floor(4 * max_abs_of(run.in.v)) / 4;
    for (std::size_t h = 0; h < sh.kv_head_count(); ++h)
      for (std::size_t j = last; j < sh.n_kv; ++j) {
        for (std::size_t l = 0; l < sh.d_k; ++l) changed.k(0, h, j, l) = std::clamp(std::round(8 * normal.next()) / 4, -max_k, max_k);
        for (std::size_t l = 0; l < sh.d_v; ++l) changed.v(0, h, j, l) = std::clamp(std::round(8 * normal.next()) / 4, -max_v, max_v);
      }
    RC_CLASSIFY(true, "future keys changed");
    const BackwardRun again = run_backward_case(b, c, run.precision, &run.opt, &changed, &run.d_out);
    RC_ASSERT(again.ok);
    for (std::size_t h = 0; h < sh.heads; ++h)
      for (std::size_t l = 0; l < sh.d_k; ++l) RC_ASSERT(again.r.grads.dq(0, h, i, l) == run.r.grads.dq(0, h, i, l));
  });
}

// A second backward gives the same bits, and so does one thread instead of
// the case's; the backend's default blocks and the case's agree within the
// two runs' probabilistic bounds.
ATTN_PROPERTY(backward_deterministic_and_block_independent, "backward: determinism, threads, blocks", 3e5, b, c) {
  for_each_backward(b, c, [&](const BackwardRun& run) {
    const BackwardRun again = run_backward_case(b, c, run.precision, &run.opt, &run.in, &run.d_out);
    RC_ASSERT(again.r.grads.dq == run.r.grads.dq);
    RC_ASSERT(again.r.grads.dk == run.r.grads.dk);
    RC_ASSERT(again.r.grads.dv == run.r.grads.dv);
    Options threads = run.opt;
    threads.threads = run.opt.threads == 1 ? 2 : 1;
    const BackwardRun other_threads = run_backward_case(b, c, run.precision, &threads, &run.in, &run.d_out);
    const GradientBound bound = probable_bound(run);
    if (b.traits.plugin) {  // its thread count held to the bounds (block_size_independent_and_deterministic says why)
      RC_ASSERT(compare(other_threads.r.grads.dq, run.r.grads.dq, 0x1p-53).max_abs <= 2 * bound.dq);
      RC_ASSERT(compare(other_threads.r.grads.dk, run.r.grads.dk, 0x1p-53).max_abs <= 2 * bound.dk);
      RC_ASSERT(compare(other_threads.r.grads.dv, run.r.grads.dv, 0x1p-53).max_abs <= 2 * bound.dv);
    } else {
      RC_ASSERT(other_threads.r.grads.dq == run.r.grads.dq);
      RC_ASSERT(other_threads.r.grads.dk == run.r.grads.dk);
      RC_ASSERT(other_threads.r.grads.dv == run.r.grads.dv);
    }
    Options defaults = run.opt;
    defaults.block_q = defaults.block_k = 0;
    const BackwardRun other = run_backward_case(b, c, run.precision, &defaults, &run.in, &run.d_out);
    RC_ASSERT(compare(other.r.grads.dq, run.r.grads.dq, 0x1p-53).max_abs <= 2 * bound.dq);
    RC_ASSERT(compare(other.r.grads.dk, run.r.grads.dk, 0x1p-53).max_abs <= 2 * bound.dk);
    RC_ASSERT(compare(other.r.grads.dv, run.r.grads.dv, 0x1p-53).max_abs <= 2 * bound.dv);
  });
}

}  // namespace attn::props

// --- The variants (problem.hpp) --------------------------------------------------------
namespace attn::props {
namespace {

// Q, K, V of batch bb, query head h (and its K/V head), tokens [t0, t1) of
// the queries and keys: a single-head problem.
Inputs<double> slice(const Inputs<double>& in, std::size_t bb, std::size_t h, std::size_t q0, std::size_t q1,
                     std::size_t k0, std::size_t k1) {
  const Shape sh = in.shape();
  const std::size_t hk = h / sh.group();
  Inputs<double> s{xt::xtensor<double, 4>::from_shape({1, 1, q1 - q0, sh.d_k}),
                   xt::xtensor<double, 4>::from_shape({1, 1, k1 - k0, sh.d_k}),
                   xt::xtensor<double, 4>::from_shape({1, 1, k1 - k0, sh.d_v})};
  for (std::size_t i = q0; i < q1; ++i)
    for (std::size_t l = 0; l < sh.d_k; ++l) s.q(0, 0, i - q0, l) = in.q(bb, h, i, l);
  for (std::size_t j = k0; j < k1; ++j) {
    for (std::size_t l = 0; l < sh.d_k; ++l) s.k(0, 0, j - k0, l) = in.k(bb, hk, j, l);
    for (std::size_t l = 0; l < sh.d_v; ++l) s.v(0, 0, j - k0, l) = in.v(bb, hk, j, l);
  }
  return s;
}

// One entry of a per-head option (sinks, slopes) as a one-head option.
std::optional<xt::xtensor<double, 1>> head_of(const std::optional<xt::xtensor<double, 1>>& t, std::size_t h) {
  if (!t) return std::nullopt;
  return xt::xtensor<double, 1>({(*t)(h)});
}

}  // namespace

// Grouped-query attention is multi-head attention on K and V with each head
// repeated g times (query head h reading copy h of K/V head h / g): the
// same values in the same order of operations, so bit for bit, output and
// logsumexp, in every backend (none materialises the copies), at the case's
// own block sizes and key splits (given or automatic): a backend that
// stacks a K/V head's g query heads in one block (streaming: B_q / g
// positions, against B_q for the repeated heads) must choose each row's key
// tiles and split-KV chunks from the row's own mask and its sequence, never
// from the block around it (before, this held only at block_q = 1 with the
// splits given: docs/performance.md, section 40).
ATTN_PROPERTY(grouped_equals_repeated, "GQA = MHA on repeated K/V (bitwise)", 5e5, b, c0) {
  Case c = c0;
  if (c.shape.group() == 1) {  // make it grouped: g = 2 .. 3
    c.shape.kv_heads = c.shape.heads;
    c.shape.heads *= 2 + c.seed % 2;
  }
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    Inputs<double> repeated{run.in.q, xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, sh.n_kv, sh.d_k}),
                            xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, sh.n_kv, sh.d_v})};
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t j = 0; j < sh.n_kv; ++j) {
          for (std::size_t l = 0; l < sh.d_k; ++l) repeated.k(bb, h, j, l) = run.in.k(bb, h / sh.group(), j, l);
          for (std::size_t l = 0; l < sh.d_v; ++l) repeated.v(bb, h, j, l) = run.in.v(bb, h / sh.group(), j, l);
        }
    const Run multi = run_case(b, c, run.precision, false, &run.opt, &repeated);
    RC_ASSERT(multi.ok);
    tight_where_vacuous(multi);
    const Run& grouped = run;
    for (std::size_t x = 0; x < grouped.r.out.size(); ++x)
      if (multi.r.out.data()[x] != grouped.r.out.data()[x]) {
        RC_LOG() << "first difference at flat index " << x << ": grouped " << grouped.r.out.data()[x] << ", repeated "
                 << multi.r.out.data()[x] << " (difference " << grouped.r.out.data()[x] - multi.r.out.data()[x] << ")\n";
        break;
      }
    RC_ASSERT(multi.r.out == grouped.r.out);
    RC_ASSERT(lse_of(multi) == lse_of(grouped));
  });
}

// Soft-capped scores lie in [-c, c]: with no ALiBi, bias or sink, each row's
// logsumexp lies in [-c, c] + log(keys seen), within its bound. And a cap of
// 1e30 is no cap: plain attention within the two runs' bounds.
ATTN_PROPERTY(softcap_bounds_the_scores, "soft-cap: |s| <= c, c = 1e30 is plain", 5e5, b, c0) {
  Case c = c0;
  if (!c.softcap) c.softcap = 0.5;
  c.alibi = Case::Alibi::none;
  c.sinks = Case::Sinks::none;
  if (c.mask == MaskKind::bias) c.mask = MaskKind::boolean;
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    const MaskView mask(run.opt, sh);
    const double cap = *run.opt.softcap;
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i) {
          std::size_t seen = 0;
          for (std::size_t j = 0; j < sh.n_kv; ++j) seen += visible(mask, bb, i, j);
          const double lse = lse_of(run)(bb, h, i);
          if (seen == 0) {
            RC_ASSERT(lse == -inf);
            continue;
          }
          RC_ASSERT(lse <= cap + std::log(double(seen)) + run.bound.lse);
          RC_ASSERT(lse >= -cap + std::log(double(seen)) - run.bound.lse);
        }
    Options huge = run.opt, none = run.opt;
    huge.softcap = 1e30;
    none.softcap.reset();
    const Run a = run_case(b, c, run.precision, false, &huge, &run.in), p = run_case(b, c, run.precision, false, &none, &run.in);
    RC_ASSERT(a.ok && p.ok);
    RC_ASSERT(compare(a.r.out, p.r.out, run.r.u_store).max_abs <= a.bound.out + p.bound.out);
    for (const Run* x : {&a, &p}) tight_where_vacuous(*x);
  });
}

// A sink of -inf is no sink: plain attention, bit for bit (output and logsumexp).
ATTN_PROPERTY(sink_minus_inf_is_plain, "sink -inf = no sink (bitwise)", 5e5, b, c) {
  for_each_precision(b, c, false, [&](const Run& run) {
    Options none = run.opt, minus_inf = run.opt;
    none.sinks.reset();
    minus_inf.sinks = xt::xtensor<double, 1>(std::array<std::size_t, 1>{run.in.shape().heads}, -inf);
    const Run p = run_case(b, c, run.precision, false, &none, &run.in);
    const Run s = run_case(b, c, run.precision, false, &minus_inf, &run.in);
    RC_ASSERT(p.ok && s.ok);
    RC_ASSERT(s.r.out == p.r.out);
    RC_ASSERT(lse_of(s) == lse_of(p));
  });
}

// ALiBi computed on the fly equals ALiBi given as an explicit additive bias
// tensor slope_h (j - i - (n_kv - n_q)) per head (with the masks and
// documents folded in as -inf): bit for bit where both visit the same keys
// (the textbook backends, which visit every key; every backend without a
// structural mask) with the same arithmetic, else within the two runs'
// bounds. The one-head run stacks no heads, so a row that was part of a
// one-position block of stacked heads (a decode step) may now be in a tile:
// a kernel whose tiles round the weights and whose decode steps do not
// (KernelRounding: streaming's bf16 dot products) is held to the bounds.
ATTN_PROPERTY(alibi_equals_explicit_bias, "ALiBi on the fly = explicit bias", 3e5, b, c0) {
  Case c = c0;
  if (c.alibi == Case::Alibi::none) c.alibi = Case::Alibi::geometric;
  if (c.mask == MaskKind::bias || c.mask == MaskKind::boolean) c.mask = MaskKind::causal;
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    const MaskView mask(run.opt, sh);
    const bool same_keys = (b.traits.baseline || b.traits.exact || (c.mask == MaskKind::none && c.documents == 0)) &&
                           run.r.kernel == KernelRounding{};
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t h = 0; h < sh.heads; ++h) {
        Options explicit_bias = run.opt;
        explicit_bias.alibi_slopes.reset();
        explicit_bias.segments.reset();
        explicit_bias.sinks = head_of(run.opt.sinks, h);
        auto bias = xt::xtensor<double, 2>::from_shape({sh.n_q, sh.n_kv});
        for (std::size_t i = 0; i < sh.n_q; ++i)
          for (std::size_t j = 0; j < sh.n_kv; ++j) bias(i, j) = visible(mask, bb, i, j) ? mask.alibi(h, i, j) : -inf;
        explicit_bias.mask = mask::AdditiveBias{bias};
        const Inputs<double> one = slice(run.in, bb, h, 0, sh.n_q, 0, sh.n_kv);
        Case one_head = c;
        one_head.shape = one.shape();
        const Run e = run_case(b, one_head, run.precision, false, &explicit_bias, &one);
        RC_ASSERT(e.ok);
        if (!same_keys) tight_where_vacuous(e);
        for (std::size_t i = 0; i < sh.n_q; ++i)
          for (std::size_t l = 0; l < sh.d_v; ++l) {
            const double x = e.r.out(0, 0, i, l), y = run.r.out(bb, h, i, l);
            if (same_keys) RC_ASSERT(x == y);
            else RC_ASSERT(std::fabs(x - y) <= e.bound.out + run.bound.out);
          }
      }
  });
}

// Packed documents: self-attention over documents packed in one sequence
// equals attending within each document separately (its tokens sliced out,
// the same mask, ALiBi positions relative as before): bit for bit in the
// textbook backends (each row visits its keys in order), else within the
// two runs' bounds.
ATTN_PROPERTY(documents_equal_separate_runs, "documents = separate runs", 3e5, b, c0) {
  Case c = c0;
  c.shape.n_kv = c.shape.n_q;
  if (c.mask != MaskKind::causal && c.mask != MaskKind::window) c.mask = MaskKind::none;
  if (c.documents == 0) c.documents = 2 + c.seed % 4;
  c.documents_split = false;
  for_each_precision(b, c, false, [&](const Run& run) {
    const Shape sh = run.in.shape();
    const Segments& seg = *run.opt.segments;
    const bool bitwise = b.traits.baseline || b.traits.exact;
    for (std::size_t bb = 0; bb < sh.batch; ++bb)
      for (std::size_t t0 = 0; t0 < sh.n_kv;) {
        std::size_t t1 = t0 + 1;
        while (t1 < sh.n_kv && seg(bb, t1) == seg(bb, t0)) ++t1;
        for (std::size_t h = 0; h < sh.heads; ++h) {
          Options own = run.opt;
          own.segments.reset();
          own.sinks = head_of(run.opt.sinks, h);
          own.alibi_slopes = head_of(run.opt.alibi_slopes, h);
          const Inputs<double> doc = slice(run.in, bb, h, t0, t1, t0, t1);
          Case one = c;
          one.shape = doc.shape();
          const Run d = run_case(b, one, run.precision, false, &own, &doc);
          RC_ASSERT(d.ok);
          if (!bitwise) tight_where_vacuous(d);
          for (std::size_t i = t0; i < t1; ++i)
            for (std::size_t l = 0; l < sh.d_v; ++l) {
              const double x = d.r.out(0, 0, i - t0, l), y = run.r.out(bb, h, i, l);
              if (bitwise) RC_ASSERT(x == y);
              else RC_ASSERT(std::fabs(x - y) <= d.bound.out + run.bound.out);
            }
        }
        t0 = t1;
      }
  });
}

// Batch invariance: each sequence of the batch computed alone (its own
// Q, K, V, its key-padding length and document ids; the broadcast masks,
// sinks and slopes as they are) gives the same bits as inside the batch,
// output and logsumexp, and in the backward dQ of its rows and dK, dV of
// its keys: no backend's reduction order may depend on what else is in the
// batch (FlashAttention issue 1897, FlashInfer's batch-invariance tests;
// attn-lab invariance's `batch`). Cases of one sequence get a second one.
namespace {
Inputs<double> batch_entry(const Inputs<double>& in, std::size_t bb) {
  return {xt::xtensor<double, 4>(xt::view(in.q, xt::range(bb, bb + 1))),
          xt::xtensor<double, 4>(xt::view(in.k, xt::range(bb, bb + 1))),
          xt::xtensor<double, 4>(xt::view(in.v, xt::range(bb, bb + 1)))};
}
Options entry_options(const Options& opt, std::size_t bb) {
  Options own = opt;
  if (const auto* pad = std::get_if<mask::KeyPadding>(&opt.mask)) own.mask = mask::KeyPadding{{pad->valid_length[bb]}};
  if (own.segments && own.segments->shape(0) > 1) own.segments = Segments(xt::view(*opt.segments, xt::range(bb, bb + 1), xt::all()));
  return own;
}
// Every element of a[0] equal to b[bb] (NaN equal to NaN): bitwise, or within `tol` when it is given; the
// first difference logged.
template <class T>
void same_bits(std::string_view what, const T& a, const T& b, std::size_t bb, std::optional<double> tol = {}) {
  const std::size_t n = a.size();
  for (std::size_t x = 0; x < n; ++x) {
    const double p = a.data()[x], q = b.data()[bb * n + x];
    if (p == q || (std::isnan(p) && std::isnan(q)) || (tol && std::fabs(p - q) <= *tol)) continue;
    RC_LOG() << std::setprecision(17) << what << " of batch entry " << bb << ", flat element " << x << ": alone " << p
             << ", in the batch " << q
             << (tol ? " (beyond the two runs' bounds " + std::to_string(*tol) + ")" : std::string()) << "\n";
    RC_FAIL("a sequence's " + std::string(what) + " depends on the batch around it");
  }
}
// Entry bb's first `keys` keys (its own length when it is key-padded): K, V, or a gradient of them.
xt::xtensor<double, 4> first_keys(const xt::xtensor<double, 4>& t, std::size_t bb, std::size_t keys) {
  return xt::view(t, xt::range(bb, bb + 1), xt::all(), xt::range(0, keys), xt::all());
}
// A key-padded entry alone at its own length as well (its valid keys only, no mask), as attn-lab invariance's
// batches of other lengths: the padding must not change a sequence's tiles or its split. Not where the keys'
// positions enter the scores other than through the mask (ALiBi, documents): there the two problems differ.
struct Unpadded {
  std::size_t keys;   // its valid length
  Inputs<double> in;  // its Q, and K, V of its valid keys
  Case c;             // that shape, no mask
  Options opt;        // its own options, no mask
};
std::optional<Unpadded> unpadded(const Case& c, const Options& opt, std::size_t bb, const Inputs<double>& one,
                                 const Options& own) {
  const auto* pad = std::get_if<mask::KeyPadding>(&opt.mask);
  if (!pad || c.alibi != Case::Alibi::none || c.documents > 0) return std::nullopt;
  const std::size_t n = pad->valid_length[bb];
  if (n == 0 || n >= c.shape.n_kv) return std::nullopt;
  Unpadded u{n, {one.q, first_keys(one.k, 0, n), first_keys(one.v, 0, n)}, c, own};
  u.c.shape = u.in.shape();
  u.c.mask = MaskKind::none;
  u.opt.mask = mask::None{};
  return u;
}
}  // namespace

// The built-in backends promise it bit for bit (each sequence's reduction order is its own); a plugin, whose
// order is its own business, is held to the two runs' bounds here (a row must not depend on other sequences
// beyond rounding) and its bits are characterised by attn-lab invariance: PyTorch's SDPA in fp32 differs in
// the last bit between a batch of one and of two (a counterexample of B = 2, n_q = 5, n_kv = 17, d_k = 1).
ATTN_PROPERTY(batch_invariant, "a sequence alone = in the batch (bitwise; a plugin: bounds)", 1.5e5, b, c0) {
  const bool bitwise = !b.traits.plugin;
  Case c = c0;
  if (c.shape.batch == 1) {
    c.shape.batch = 2;
    if (c.mask == MaskKind::keypad) c.valid_length.push_back(std::max<std::size_t>(1, c.shape.n_kv / 2));
  }
  for_each_precision(b, c, false, [&](const Run& run) {
    for (std::size_t bb = 0; bb < run.in.shape().batch; ++bb) {
      const Inputs<double> one = batch_entry(run.in, bb);
      Case alone = c;
      alone.shape = one.shape();
      const Options own = entry_options(run.opt, bb);
      const Run a = run_case(b, alone, run.precision, false, &own, &one);
      RC_ASSERT(a.ok);
      same_bits("output", a.r.out, run.r.out, bb, bitwise ? std::nullopt : std::optional(a.bound.out + run.bound.out));
      same_bits("logsumexp", lse_of(a), lse_of(run), bb,
                bitwise ? std::nullopt : std::optional(a.bound.lse + run.bound.lse));
      if (const auto mine = unpadded(c, run.opt, bb, one, own)) {
        const Run u = run_case(b, mine->c, run.precision, false, &mine->opt, &mine->in);
        RC_ASSERT(u.ok);
        same_bits("output (alone at its own length)", u.r.out, run.r.out, bb,
                  bitwise ? std::nullopt : std::optional(u.bound.out + run.bound.out));
        same_bits("logsumexp (alone at its own length)", lse_of(u), lse_of(run), bb,
                  bitwise ? std::nullopt : std::optional(u.bound.lse + run.bound.lse));
      }
    }
  });
  if (!b.has_backward) return;
  for (const PrecisionInfo& p : precisions()) {
    if (!only_precision().empty() && only_precision() != p.name) continue;
    const BackwardRun all = run_backward_case(b, c, p.name);
    if (!all.ok) continue;
    for (std::size_t bb = 0; bb < all.in.shape().batch; ++bb) {
      const Inputs<double> one = batch_entry(all.in, bb);
      const xt::xtensor<double, 4> d_one = xt::view(all.d_out, xt::range(bb, bb + 1));
      Case alone = c;
      alone.shape = one.shape();
      const Options own = entry_options(all.opt, bb);
      const BackwardRun a = run_backward_case(b, alone, p.name, &own, &one, &d_one);
      RC_ASSERT(a.ok);
      const GradientBound ga = probable_bound(a), gb = probable_bound(all);
      auto tol = [&](double x, double y) { return bitwise ? std::nullopt : std::optional(x + y); };
      same_bits("dQ", a.r.grads.dq, all.r.grads.dq, bb, tol(ga.dq, gb.dq));
      same_bits("dK", a.r.grads.dk, all.r.grads.dk, bb, tol(ga.dk, gb.dk));
      same_bits("dV", a.r.grads.dv, all.r.grads.dv, bb, tol(ga.dv, gb.dv));
      if (const auto mine = unpadded(c, all.opt, bb, one, own)) {
        const BackwardRun u = run_backward_case(b, mine->c, p.name, &mine->opt, &mine->in, &d_one);
        RC_ASSERT(u.ok);
        const GradientBound gu = probable_bound(u);
        same_bits("dQ (alone at its own length)", u.r.grads.dq, all.r.grads.dq, bb, tol(gu.dq, gb.dq));
        same_bits("dK (alone at its own length)", u.r.grads.dk, first_keys(all.r.grads.dk, bb, mine->keys), 0, tol(gu.dk, gb.dk));
        same_bits("dV (alone at its own length)", u.r.grads.dv, first_keys(all.r.grads.dv, bb, mine->keys), 0, tol(gu.dv, gb.dv));
      }
    }
  }
}

// Split-KV (flash-decoding): the keys in 1, 2, 3 or 7 chunks per query
// block, merged by the logsumexp rule, give the unsplit result within the
// two runs' bounds (the merge is a weighted mean of the chunks' outputs:
// their own bounds, for fewer keys, plus the merge's few roundings, stay
// within the bound of the whole row; metrics.hpp), the same logsumexp
// within its bound, and the same bits at any thread count.
ATTN_PROPERTY(split_kv_merge, "split-KV = unsplit (bound), any threads (bitwise; a plugin: bounds)", 5e5, b, c0) {
  Case c = c0;
  c.shape.n_q = std::min<std::size_t>(c.shape.n_q, 1 + c.seed % 4);  // decode-like: few queries
  for_each_precision(b, c, false, [&](const Run& run) {
    Options one = run.opt;
    one.kv_splits = 1;
    const Run whole = run_case(b, c, run.precision, false, &one, &run.in);
    RC_ASSERT(whole.ok);
    tight_where_vacuous(whole);
    for (std::size_t splits : {2, 3, 7}) {
      Options split = run.opt;
      split.kv_splits = splits;
      split.threads = 1;
      const Run s1 = run_case(b, c, run.precision, false, &split, &run.in);
      split.threads = 3;
      const Run s3 = run_case(b, c, run.precision, false, &split, &run.in);
      RC_ASSERT(s1.ok && s3.ok);
      if (b.traits.plugin) {  // its thread count held to the bounds (block_size_independent_and_deterministic)
        RC_ASSERT(compare(s1.r.out, s3.r.out, run.r.u_store).max_abs <= 2 * whole.bound.out);
        RC_ASSERT(compare(lse_of(s1), lse_of(s3), run.r.u_acc).max_abs <= 2 * whole.bound.lse);
      } else {
        RC_ASSERT(s1.r.out == s3.r.out);
        RC_ASSERT(lse_of(s1) == lse_of(s3));
      }
      const double e = compare(s1.r.out, whole.r.out, run.r.u_store).max_abs;
      RC_LOG() << splits << " splits: max |split - whole| " << e << " (tolerance " << 2 * whole.bound.out << ")\n";
      RC_ASSERT(e <= 2 * whole.bound.out);
      tight_where_vacuous(s1);
      RC_ASSERT(compare(lse_of(s1), lse_of(whole), run.r.u_acc).max_abs <= 2 * whole.bound.lse);
    }
  });
}

}  // namespace attn::props
