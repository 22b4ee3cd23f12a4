#include "attn/verify/verify.hpp"

#include "attn/verify/independent.hpp"


#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attn {

std::string_view truth_name(TruthKind k) {
  switch (k) {
    case TruthKind::digits50: return "mp50";
    case TruthKind::fp64: return "fp64";
    case TruthKind::double_double: return "double-double";
  }
  return "?";
}

namespace {
double max_abs(const auto& t) {
  double m = 0;
  for (double x : t)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}
}  // namespace

namespace {
// max over each row's `width` elements of |got - ref| (a NaN is infinite, equal infinities exact).
std::vector<double> row_errors(const double* got, const double* ref, std::size_t rows, std::size_t width) {
  std::vector<double> e(rows, 0.0);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < width; ++c) {
      const double x = got[i * width + c], t = ref[i * width + c];
      if (x == t) continue;
      const double d = std::fabs(x - t);
      e[i] = std::max(e[i], std::isnan(d) ? INFINITY : d);
    }
  return e;
}

// Folds row i's error and tolerance into the verdict (the largest ratio decides).
void judge(RowVerdict& v, std::size_t i, double error, double tolerance) {
  const double ratio = error == 0 ? 0.0 : (tolerance > 0 ? error / tolerance : INFINITY);
  if (ratio > v.ratio || (i == 0 && ratio == 0)) v = {error, tolerance, ratio, i};
}

double max_of(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, v);
  return m;
}

// Mean and standard error of sum_k (e_k^2 - r_k^2) / w_k^2 (DistributionVerdict):
// e = out - truth, r = fl(truth) - truth (`stored`: the truth rounded to the storage), w the spacing at
// the row's largest |truth|.
struct MeanSquare {
  double mean = 0, se = 0;
  std::size_t n = 0;
};
MeanSquare internal_mean_square(const xt::xtensor<double, 4>& out, const xt::xtensor<double, 4>& truth,
                                const xt::xtensor<double, 4>& stored, const std::vector<RowMagnitude>& rows,
                                std::size_t width, double u, double sub) {
  double sum = 0, sum2 = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].masked || !(rows[i].out > 0)) continue;
    const double w = storage_spacing(rows[i].out, u, sub);
    for (std::size_t c = 0; c < width; ++c) {
      const double o = truth.data()[i * width + c], x = out.data()[i * width + c];
      if (o == 0 || !std::isfinite(o) || !std::isfinite(x)) continue;
      const double e = (x - o) / w, r = (stored.data()[i * width + c] - o) / w, d = e * e - r * r;
      sum += d, sum2 += d * d, ++n;
    }
  }
  if (n == 0) return {};
  const double mean = sum / double(n), var = std::max(0.0, sum2 / double(n) - mean * mean);
  return {mean, std::sqrt(var / double(n)), n};
}
}  // namespace

double storage_spacing(double x, double u, double min_subnormal) {
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  return std::max(std::ldexp(2 * u, e - 1), min_subnormal);
}

double dd_softcap_error(const Options& opt) { return opt.softcap ? 16 * 0x1p-53 * *opt.softcap : 0.0; }

GroundTruth ground_truth(const Inputs<double>& in, const Options& opt, double u_store, double budget) {
  constexpr double u = 0x1p-53;
  Options all = opt;
  all.need_weights = all.need_lse = true;
  GroundTruth t;
  const Shape sh = in.shape();
  const std::size_t rows = sh.batch * sh.heads * sh.n_q;
  t.row_out_error.assign(rows, 0.0);
  const double cost = backends::reference_cost(sh);
  if (cost <= budget) {
    t.result = independent_attention(in, all, IndependentPrecision::digits50);
    t.kind = TruthKind::digits50;
    // 50 digits, then rounded once to double.
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < sh.d_v; ++c)
        t.row_out_error[i] = std::max(t.row_out_error[i], u * std::fabs(t.result.out.data()[i * sh.d_v + c]));
    t.lse_error = u * max_abs(*t.result.lse);
    t.weights_error = u;
  } else if (u_store >= 0x1p-24 || cost > double_double_budget) {
    all.need_weights = opt.need_weights;  // an n_q x n_kv tensor per head: only when asked
    t.result = independent_attention(in, all, IndependentPrecision::fp64);
    t.kind = TruthKind::fp64;
    const ErrorBounds b = error_bounds(in, all, u, u);
    for (std::size_t i = 0; i < rows; ++i) t.row_out_error[i] = b.rows_worst[i].out;
    t.lse_error = b.worst.lse;
    t.weights_error = b.worst.weights;
  } else {
    t.result = independent_attention(in, all, IndependentPrecision::double_double);
    t.kind = TruthKind::double_double;
    // Dots and sums in ~106 bits; exp (relative error <= u), the sum's
    // rounding and the division make each weight within 4u relative, so
    // |dO| <= 4u max|V| plus the final rounding: 5u max|V| (of the row's K/V head).
    // A soft-cap's tanh is double's (within 4 ulp): each capped score within
    // 8u c, each weight 16u c more relative (dd_softcap_error).
    const double cap = dd_softcap_error(opt);
    for (std::size_t b = 0; b < sh.batch; ++b)
      for (std::size_t h = 0; h < sh.heads; ++h) {
        double v = 0;
        for (std::size_t x = 0; x < sh.n_kv * sh.d_v; ++x) v = std::max(v, std::fabs((&in.v(b, h / sh.group(), 0, 0))[x]));
        std::fill_n(t.row_out_error.begin() + std::ptrdiff_t((b * sh.heads + h) * sh.n_q), sh.n_q, (5 * u + cap) * v);
      }
    // lse = m + log(sum): 2u (|lse| + log n_kv), and the capped scores' error.
    t.lse_error = 2 * u * (max_abs(*t.result.lse) + std::log(double(sh.n_kv))) + cap / 2;
    t.weights_error = 5 * u + cap;
  }
  t.out_error = max_of(t.row_out_error);
  return t;
}

Check verify(const RunReport& r, const Options& opt, const GroundTruth& t, const RunReport* baseline) {
  Check c;
  c.truth = t.kind;
  const Shape sh = r.rounded_inputs.shape();
  const ErrorBounds bounds = error_bounds(r.rounded_inputs, opt, r.u_acc, r.u_store, r.kernel);
  c.bound = bounds.worst;
  c.probable = bounds.probable;
  c.failure_probability = bounds.failure_probability;
  c.out = compare(r.out, t.result.out, r.u_store);
  c.informative = c.bound.out < 2 * max_abs(r.rounded_inputs.v);
  const std::size_t rows = bounds.rows.size(), n_kv = sh.n_kv;
  const std::vector<double> err = row_errors(r.out.data(), t.result.out.data(), rows, sh.d_v);

  // The baseline's errors, row by row, and each row's unit f_i.
  const bool is_baseline = r.traits.baseline;
  std::vector<double> base_err;
  RunReport own;  // the baseline's run when none is given (read again by the distribution verdict)
  if (!is_baseline) {
    if (!baseline) {
      Options o = opt;
      o.need_weights = o.need_lse = false;
      own = baseline_backend().run(r.precision, r.accumulate, r.rounded_inputs, o);
      baseline = &own;
    }
    base_err = row_errors(baseline->out.data(), t.result.out.data(), rows, sh.d_v);
    c.baseline_error = max_of(base_err);
  }
  c.row_unit.resize(rows);
  c.beta = is_baseline ? NAN : 0.0;
  for (std::size_t i = 0; i < rows; ++i) {
    const RowMagnitude& m = bounds.rows[i];
    // (+ the weights' rounding before P V, one per term p_j v_j: its own noise)
    c.row_unit[i] = r.u_acc * (m.out + m.noise) + r.kernel.u_weights * m.term_noise + r.u_store * m.out + r.eta_store;
    if (!is_baseline) c.beta = std::max(c.beta, base_err[i] == 0 ? 0.0 : base_err[i] / c.row_unit[i]);
  }

  // Underflow, which the relative model does not cover: each weight may err
  // by eta_weight absolutely (the vector exp flushes below the smallest
  // normal number), each product and partial sum by eta_acc (subnormals of
  // the accumulation type), the result by eta_store (of storage; fp16's start
  // at 6e-5, so a row whose output is 1e-26 is stored as 0).
  const double eta_weight = r.eta_weight, eta_sum = double(n_kv) * eta_weight + double(n_kv + 4) * r.eta_acc;
  bool finite = c.out.all_finite_where_ref_finite;
  for (std::size_t i = 0; i < rows; ++i) {
    const double underflow = r.eta_store + 2 * eta_sum * std::max(1.0, bounds.rows[i].v_max);
    const double probable = bounds.rows_probable[i].out + t.row_out_error[i] + underflow;
    const double rule = is_baseline ? INFINITY : (2 * c.beta + 2) * c.row_unit[i];
    const double tight = std::min(probable, rule);
    judge(c.out_worst, i, err[i], bounds.rows_worst[i].out + t.row_out_error[i] + underflow);
    judge(c.out_tight, i, err[i], tight);
    if (!bounds.rows[i].masked && bounds.rows[i].out > 0 && tight >= bounds.rows[i].out) ++c.uninformative_rows;
  }
  c.tight_informative = c.uninformative_rows == 0;
  c.tolerance_global = c.bound.out + t.out_error + r.eta_store + 2 * eta_sum * std::max(1.0, max_abs(r.rounded_inputs.v));
  if (!is_baseline && rows) c.floor = 2 * c.row_unit[c.out_tight.row];
  c.within = c.out_worst.within() && finite;
  c.tight_within = c.out_tight.within() && finite;

  if (r.lse && t.result.lse) {
    c.has_lse = true;
    c.lse = compare(*r.lse, *t.result.lse, r.u_acc);
    const std::vector<double> e = row_errors(r.lse->data(), t.result.lse->data(), rows, 1);
    for (std::size_t i = 0; i < rows; ++i) {
      judge(c.lse_worst, i, e[i], bounds.rows_worst[i].lse + t.lse_error);
      judge(c.lse_tight, i, e[i], bounds.rows_probable[i].lse + t.lse_error);
    }
    c.within = c.within && c.lse_worst.within();
    c.tight_within = c.tight_within && c.lse_tight.within();
  }
  if (r.weights && t.result.weights) {
    const bool rebuilt = r.traits.weights_from_lse;
    c.has_weights = true;
    c.weights = compare(*r.weights, *t.result.weights, r.u_acc);
    const std::vector<double> e = row_errors(r.weights->data(), t.result.weights->data(), rows, n_kv);
    // With sinks a row sums to 1 - p_sink: against the truth's row sums, and
    // the sink's weight moves with the scores as any weight does (+ weights,
    // + the truth's sum of n_kv weights rounded to double).
    const bool sinks = opt.sinks.has_value();
    c.row_sum_error = max_row_sum_error(*r.weights, sinks ? &*t.result.weights : nullptr);
    for (std::size_t i = 0; i < rows; ++i) {
      const ErrorBound& w = bounds.rows_worst[i];
      const ErrorBound& p = bounds.rows_probable[i];
      judge(c.weights_worst, i, e[i], (rebuilt ? w.weights_from_lse : w.weights) + t.weights_error + eta_weight);
      judge(c.weights_tight, i, e[i], (rebuilt ? p.weights_from_lse : p.weights) + t.weights_error + eta_weight);
      const double* row = r.weights->data() + i * n_kv;
      double sum = 0, want = sinks ? 0.0 : 1.0;
      bool any = false;
      for (std::size_t j = 0; j < n_kv; ++j) {
        sum += row[j];
        any = any || row[j] != 0;
        if (sinks) want += t.result.weights->data()[i * n_kv + j];
      }
      const double sum_err = any ? std::fabs(sum - want) : 0.0;  // fully masked rows: all-zero, checked as weights
      const double extra = sinks ? w.weights + gamma(double(n_kv), 0x1p-53) : 0.0;
      judge(c.row_sum_worst, i, sum_err, (rebuilt ? w.row_sum_from_lse : w.row_sum) + extra + eta_sum);
      judge(c.row_sum_tight, i, sum_err,
            (rebuilt ? p.row_sum_from_lse : p.row_sum) + (sinks ? p.weights + gamma(double(n_kv), 0x1p-53) : 0.0) +
                eta_sum);
    }
    c.within = c.within && c.weights_worst.within() && c.row_sum_worst.within();
    c.tight_within = c.tight_within && c.weights_tight.within() && c.row_sum_tight.within();
  }

  // Distribution (narrow storage, not the baseline): see DistributionVerdict.
  if (!is_baseline && r.u_store > 0x1p-24) {
    const double sub = 2 * r.eta_store, z = 6;
    const xt::xtensor<double, 4> stored =
        r.store_output ? r.store_output(t.result.out) : rounded_to(precision_info(r.precision), t.result.out);
    const MeanSquare b = internal_mean_square(r.out, t.result.out, stored, bounds.rows, sh.d_v, r.u_store, sub);
    const MeanSquare o = internal_mean_square(baseline->out, t.result.out, stored, bounds.rows, sh.d_v, r.u_store, sub);
    DistributionVerdict& d = c.distribution;
    d.elements = b.n;
    d.applies = b.n >= 1000 && std::isfinite(b.mean);
    if (d.applies) {
      double model = 0;
      for (std::size_t i = 0; i < rows; ++i) {
        const RowMagnitude& m = bounds.rows[i];
        if (m.masked || !(m.out > 0)) continue;
        const double f =
            (r.u_acc * (m.out + m.noise) + r.kernel.u_weights * m.term_noise) / storage_spacing(m.out, r.u_store, sub);
        model += f * f * double(sh.d_v);  // (elements of the row: an upper count, zeros included)
      }
      d.internal_ms = b.mean, d.internal_se = b.se, d.baseline_ms = o.mean, d.baseline_se = o.se;
      d.model_ms = model / double(b.n);
      d.internal_rms = std::sqrt(std::max(0.0, b.mean - z * b.se));
      d.allowed_rms = 2 * std::sqrt(std::max(0.0, o.mean + z * o.se)) + 2 * std::sqrt(d.model_ms);
      d.ratio = d.internal_rms == 0 ? 0.0 : (d.allowed_rms > 0 ? d.internal_rms / d.allowed_rms : INFINITY);
      c.tight_within = c.tight_within && d.within();
    }
  }

  const bool probable_informative = c.probable.out < 2 * max_abs(r.rounded_inputs.v);
  c.criterion = is_baseline ? (probable_informative ? "probabilistic bound (the baseline itself)"
                                                    : "none informative (the baseline, bound trivial)")
                            : (probable_informative ? "probabilistic bound and the baseline rule, per row"
                                                    : "the baseline rule, per row (probabilistic bound trivial)");
  return c;
}

GradientTruth gradient_truth(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                             double budget) {
  constexpr double u = 0x1p-53;
  GradientTruth t;
  const double cost = 2.5 * backends::reference_cost(in.shape());
  if (cost <= budget) {
    t.grads = independent_gradients(in, d_out, opt, IndependentPrecision::digits50);
    t.kind = TruthKind::digits50;
    t.dq_error = u * max_abs(t.grads.dq);
    t.dk_error = u * max_abs(t.grads.dk);
    t.dv_error = u * max_abs(t.grads.dv);
    if (t.grads.dbias) t.dbias_error = u * max_abs(*t.grads.dbias);
    if (t.grads.dsinks) t.dsinks_error = u * max_abs(*t.grads.dsinks);
    return t;
  }
  const bool dd = cost <= double_double_budget;
  t.grads = independent_gradients(in, d_out, opt, dd ? IndependentPrecision::double_double : IndependentPrecision::fp64);
  t.kind = dd ? TruthKind::double_double : TruthKind::fp64;
  const GradientBound b = gradient_bounds(in, d_out, t.grads, opt, u, u, 0x1p-1074, 0x1p-1074, 0x1p-1074).worst;
  if (dd) {  // see verify.hpp
    const GradientScales& g = b.scales;
    const double e = 8 * u + 2 * dd_softcap_error(opt);  // per term, relative
    t.dq_error = e * g.terms_dq + u * max_abs(t.grads.dq);
    t.dk_error = e * g.terms_dk + u * max_abs(t.grads.dk);
    t.dv_error = e * g.terms_dv + u * max_abs(t.grads.dv);
    if (t.grads.dbias) t.dbias_error = e * g.terms_dbias + u * max_abs(*t.grads.dbias);
    if (t.grads.dsinks) t.dsinks_error = e * g.terms_dsinks + u * max_abs(*t.grads.dsinks);
  } else {
    t.dq_error = b.dq;
    t.dk_error = b.dk;
    t.dv_error = b.dv;
    t.dbias_error = b.dbias;
    t.dsinks_error = b.dsinks;
  }
  return t;
}

GradientCheck verify_backward(const BackwardReport& r, const Options& opt, const GradientTruth& t,
                              const BackwardReport* baseline) {
  const RunReport& f = r.forward;
  GradientCheck c;
  c.truth = t.kind;
  const GradientBounds bounds =
      gradient_bounds(f.rounded_inputs, r.rounded_d_out, t.grads, opt, f.u_acc, f.u_store, f.eta_acc, f.eta_store, f.eta_weight, f.kernel,
                      r.grads.rounding);
  c.bound = bounds.worst;
  c.probable = bounds.probable;
  c.failure_probability = bounds.failure_probability;
  const bool is_baseline = f.traits.baseline;
  BackwardReport own_baseline;
  if (!is_baseline && !baseline) {
    own_baseline = baseline_backend().run_backward(f.precision, f.accumulate, f.rounded_inputs, r.rounded_d_out, opt);
    baseline = &own_baseline;
  }
  // One rounding of each score in each of the two runs, each run with its
  // own: a backend that rebuilds P from its saved logsumexp rounds that too.
  const auto scores_of = [&](const BackendTraits& t) {
    return t.weights_from_lse ? c.bound.scales.score_lse : c.bound.scales.score;
  };
  const double s_both = scores_of(f.traits) + scores_of(baseline ? baseline->forward.traits : f.traits);
  const double lse_runs = double(f.traits.weights_from_lse) +
                          double((baseline ? baseline->forward.traits : f.traits).weights_from_lse);
  // A gradient's verdicts. The worst-case and probabilistic bounds are global
  // (one per tensor); the tight rule is per gradient row (a row of dQ, a key's
  // row of dK or dV; d(bias) and d(sinks) as one row): the floor is the row's
  // own first-order sensitivity, floor_i = (2 u_acc + 2 u_store) max|truth_i|
  // + u_acc S_i + 2 u_acc (T_i + C_i) (+ u_b T_i where the backward rounded P
  // and dS' to u_b, Gradients::rounding) + underflow (2 eta_store and twice
  // GradientBound::underflow_*: one for each run), with S_i,
  // T_i, C_i the row's GradientScales (`rows`; null: one row, S = s_both
  // max(max|truth|, T)); f_i = floor_i / 2 is one unit of the row's noise;
  // beta = the baseline's largest row error in units of f_i over the rows
  // whose floor stays below their gradient (where f_i models the noise); the
  // row's tolerance is min(probable + the truth's error, max((2 beta + 2) f_i,
  // 2 e_base,i + floor_i)): the baseline's policy in the row's own units, and
  // never below twice the baseline's own error in that row.
  const bool first_order = f.u_acc * c.bound.scales.score_max < 0.5;
  const double u_products = r.grads.rounding.u_weights;
  auto part = [&](std::string_view name, const auto& got, const auto& truth, double worst, double probable,
                  double truth_error, const auto* base, const GradientScales::Rows* rows, double score_weight,
                  double cancellation, double terms, double underflow) {
    GradientCheck::Part p;
    p.name = name;
    p.error = compare(got, truth, f.u_store);
    p.tolerance = worst + truth_error;
    p.informative = worst < max_abs(truth);
    const std::size_t width = rows ? got.shape().back() : got.size(), n = width ? got.size() / width : 0;
    const std::vector<double> err = row_errors(got.data(), truth.data(), n, width);
    std::vector<double> base_err(n, 0.0), floor(n), top(n, 0.0);
    if (base) {
      base_err = row_errors(base->data(), truth.data(), n, width);
      p.baseline_error = max_of(base_err);
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t e = 0; e < width; ++e) {
        const double x = truth.data()[i * width + e];
        if (std::isfinite(x)) top[i] = std::max(top[i], std::fabs(x));
      }
      const double S = rows ? score_weight * rows->score[i] + lse_runs * rows->lse[i] : s_both * std::max(top[i], terms);
      const double T = rows ? rows->terms[i] : terms, C = rows ? rows->cancel[i] : cancellation;
      // (C includes what a kernel's rounding of the weights before P V does to the saved output
      // and so to D_i: GradientMagnitudes, weights_ratio)
      // (a backward that rounds P and dS' to u_b before dV, dQ and dK moves each of their terms by up to
      // u_b of it, independently: u_b times the terms' root-sum-square more, as the forward's rounded
      // weights add u_b term_noise; d(bias) and d(sinks) sum dS' unrounded)
      floor[i] = (2 * f.u_acc + 2 * f.u_store) * top[i] + f.u_acc * S + 2 * f.u_acc * (T + C) +
                 (rows ? u_products * rows->noise[i] : 0.0) + underflow;
    }
    double beta = 0;
    if (base)
      for (std::size_t i = 0; i < n; ++i)
        if (floor[i] < top[i]) beta = std::max(beta, base_err[i] / (floor[i] / 2));
    // Where a weight's relative error from the scores' roundings is not small (u_acc sigma >= 1/2:
    // bf16/fp16 accumulation at logits x 100), the first-order units f_i mean nothing: each row is
    // then allowed twice the baseline's largest row error, as one tolerance for the tensor did.
    const double base_any = first_order ? 0.0 : p.baseline_error;
    for (std::size_t i = 0; i < n; ++i) {
      const double rule =
          base ? std::max((2 * beta + 2) * floor[i] / 2, 2 * std::max(base_err[i], base_any) + floor[i]) : INFINITY;
      const double tight = std::min(probable + truth_error, rule);
      judge(p.tight, i, err[i], tight);
      if (top[i] > 0 && tight >= top[i]) ++p.uninformative_rows;
    }
    p.tight_tolerance = p.tight.tolerance;
    p.tight_informative = p.uninformative_rows == 0;
    c.tight_informative = c.tight_informative && p.tight_informative;
    c.within = c.within && p.within();
    c.tight_within = c.tight_within && p.within_tight();
    c.parts.push_back(p);
  };
  const Gradients<double>* b = baseline ? &baseline->grads : nullptr;
  const GradientScales& g = c.bound.scales;
  // Underflow, which the relative model does not cover: one eta_store for each run's result, and what
  // underflowing weights and terms move the gradient by (GradientBound::underflow_*, once per run).
  const double eta = 2 * f.eta_store;
  part("dq", r.grads.dq, t.grads.dq, c.bound.dq, c.probable.dq, t.dq_error, b ? &b->dq : nullptr, &g.rows_dq, 2, 0, 0,
       eta + 2 * c.bound.underflow_dq);
  part("dk", r.grads.dk, t.grads.dk, c.bound.dk, c.probable.dk, t.dk_error, b ? &b->dk : nullptr, &g.rows_dk, 2, 0, 0,
       eta + 2 * c.bound.underflow_dk);
  part("dv", r.grads.dv, t.grads.dv, c.bound.dv, c.probable.dv, t.dv_error, b ? &b->dv : nullptr, &g.rows_dv, 2, 0, 0,
       eta + 2 * c.bound.underflow_dv);
  if (r.grads.dbias && t.grads.dbias)
    part("dbias", *r.grads.dbias, *t.grads.dbias, c.bound.dbias, c.probable.dbias, t.dbias_error,
         b && b->dbias ? &*b->dbias : nullptr, nullptr, 0, g.dbias, g.terms_dbias, eta);
  else if (opt.need_dbias)
    c.within = c.tight_within = false;  // asked for and not returned
  if (r.grads.dsinks && t.grads.dsinks)
    part("dsinks", *r.grads.dsinks, *t.grads.dsinks, c.bound.dsinks, c.probable.dsinks, t.dsinks_error,
         b && b->dsinks ? &*b->dsinks : nullptr, nullptr, 0, g.dsinks, g.terms_dsinks, eta);
  else if (opt.sinks)
    c.within = c.tight_within = false;  // sinks given and their gradient not returned
  return c;
}

GradientCheck verify_backward(const BackwardReport& r, const Options& opt, double budget) {
  return verify_backward(r, opt, gradient_truth(r.forward.rounded_inputs, r.rounded_d_out, opt, budget));
}

Check verify(const RunReport& r, const Options& opt, double budget) {
  return verify(r, opt, ground_truth(r.rounded_inputs, opt, r.u_store, budget));
}

}  // namespace attn
