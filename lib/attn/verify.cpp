#include "attn/verify.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attn {

std::string_view truth_name(TruthKind k) {
  switch (k) {
    case TruthKind::digits50: return "mp50";
    case TruthKind::fp64_gemm: return "fp64-gemm";
    case TruthKind::double_double: return "double-double";
  }
  return "?";
}

Result<double> fp64_gemm_attention(const Inputs<double>& in, const Options& opt) {
  const Shape sh = in.shape();
  const MaskView mask(opt, sh);
  const double scale = opt.resolved_scale(sh), inf = std::numeric_limits<double>::infinity();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  Result<double> r;
  r.out = xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, n_q, d_v});
  r.lse = xt::xtensor<double, 3>::from_shape({sh.batch, sh.heads, n_q});
  if (opt.need_weights) r.weights = xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, n_q, n_kv});
  const std::size_t block = std::max<std::size_t>(1, std::min<std::size_t>(256, n_q));
  std::vector<double> s(block * n_kv);
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const double* k = &in.k(b, h / sh.group(), 0, 0);
      const double* v = &in.v(b, h / sh.group(), 0, 0);
      const double sink = mask.sink(h);
      for (std::size_t i0 = 0; i0 < n_q; i0 += block) {
        const std::size_t rows = std::min(block, n_q - i0);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d_k), scale, &in.q(b, h, i0, 0),
                    int(d_k), k, int(d_k), 0.0, s.data(), int(n_kv));
        for (std::size_t row = 0; row < rows; ++row) {
          const std::size_t i = i0 + row;
          double* p = s.data() + row * n_kv;
          mask.apply(p, b, h, i, 0, n_kv);  // soft-cap, ALiBi, bias, -inf where masked
          double m = sink;
          for (std::size_t j = 0; j < n_kv; ++j) m = std::max(m, p[j]);
          if (m == -inf) {  // a fully masked row without a sink: output 0, weights 0, lse -inf
            std::fill(p, p + n_kv, 0.0);
            (*r.lse)(b, h, i) = -inf;
            continue;
          }
          double sum = std::exp(sink - m);  // the sink's term (0 without)
          for (std::size_t j = 0; j < n_kv; ++j) sum += p[j] = std::exp(p[j] - m);
          (*r.lse)(b, h, i) = m + std::log(sum);
          for (std::size_t j = 0; j < n_kv; ++j) p[j] /= sum;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d_v), int(n_kv), 1.0, s.data(), int(n_kv),
                    v, int(d_v), 0.0, &r.out(b, h, i0, 0), int(d_v));
        if (r.weights) std::copy(s.begin(), s.begin() + std::ptrdiff_t(rows * n_kv), &(*r.weights)(b, h, i0, 0));
      }
    }
  return r;
}

namespace {
double max_abs(const auto& t) {
  double m = 0;
  for (double x : t)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}
}  // namespace

GroundTruth ground_truth(const Inputs<double>& in, const Options& opt, double u_store, double budget) {
  constexpr double u = 0x1p-53;
  Options all = opt;
  all.need_weights = all.need_lse = true;
  GroundTruth t;
  if (backends::reference_cost(in.shape()) <= budget) {
    t.result = backends::reference_attention(in, all);
    t.kind = TruthKind::digits50;
    // 50 digits, then rounded once to double.
    t.out_error = u * max_abs(t.result.out);
    t.lse_error = u * max_abs(*t.result.lse);
    t.weights_error = u;
  } else if (u_store >= 0x1p-24 || backends::reference_cost(in.shape()) > 20 * budget) {
    all.need_weights = opt.need_weights;  // an n_q x n_kv tensor per head: only when asked
    t.result = fp64_gemm_attention(in, all);
    t.kind = TruthKind::fp64_gemm;
    const ErrorBound b = error_bound(in, all, u, u);
    t.out_error = b.out;
    t.lse_error = b.lse;
    t.weights_error = b.weights;
  } else {
    t.result = backends::compensated_reference_attention(in, all);
    t.kind = TruthKind::double_double;
    // Dots and sums in ~106 bits; exp (relative error <= u), the sum's
    // rounding and the division make each weight within 4u relative, so
    // |dO| <= 4u max|V| plus the final rounding: 5u max|V|; lse = m + log(sum):
    // 2u (|lse| + log n_kv).
    t.out_error = 5 * u * max_abs(in.v);
    t.lse_error = 2 * u * (max_abs(*t.result.lse) + std::log(double(in.shape().n_kv)));
    t.weights_error = 5 * u;
  }
  return t;
}

Check verify(const RunReport& r, const Options& opt, const GroundTruth& t, const RunReport* baseline) {
  Check c;
  c.truth = t.kind;
  const ErrorBounds bounds = error_bounds(r.rounded_inputs, opt, r.u_acc, r.u_store);
  c.bound = bounds.worst;
  c.probable = bounds.probable;
  c.failure_probability = bounds.failure_probability;
  c.out = compare(r.out, t.result.out, r.u_store);
  c.tolerance_out = c.bound.out + t.out_error;
  const double trivial = 2 * max_abs(r.rounded_inputs.v);
  c.informative = c.bound.out < trivial;
  c.within = c.out.max_abs <= c.tolerance_out && c.out.all_finite_where_ref_finite;
  double tight_lse = INFINITY, tight_weights = INFINITY;
  if (r.lse && t.result.lse) {
    c.lse = compare(*r.lse, *t.result.lse, r.u_acc);
    c.tolerance_lse = c.bound.lse + t.lse_error;
    c.within = c.within && c.lse.max_abs <= c.tolerance_lse;
    tight_lse = c.probable.lse + t.lse_error;
  }
  if (r.weights && t.result.weights) {
    const bool rebuilt = r.traits.weights_from_lse;
    c.weights = compare(*r.weights, *t.result.weights, r.u_acc);
    c.tolerance_weights = (rebuilt ? c.bound.weights_from_lse : c.bound.weights) + t.weights_error;
    // With sinks a row sums to 1 - p_sink: against the truth's row sums, and
    // the sink's weight moves with the scores as any weight does (+ weights,
    // + the truth's sum of n_kv weights rounded to double).
    const bool sinks = opt.sinks.has_value();
    c.row_sum_error = max_row_sum_error(*r.weights, sinks ? &*t.result.weights : nullptr);
    c.tolerance_row_sum = (rebuilt ? c.bound.row_sum_from_lse : c.bound.row_sum) +
                          (sinks ? c.bound.weights + gamma(double(r.rounded_inputs.shape().n_kv), 0x1p-53) : 0.0);
    c.within = c.within && c.weights.max_abs <= c.tolerance_weights && c.row_sum_error <= c.tolerance_row_sum;
    tight_weights = (rebuilt ? c.probable.weights_from_lse : c.probable.weights) + t.weights_error;
  }

  // The tight verdict: the probabilistic bound and the baseline rule.
  const double probable_out = c.probable.out + t.out_error;
  const bool probable_informative = c.probable.out < trivial;
  // One rounding of each output in each of the two runs, and of each score:
  // a score of magnitude s carries u_acc s of error in any correct order,
  // which the softmax turns into a relative change of the weights.
  c.floor = 2 * (r.u_acc * (1 + c.bound.score_weighted) + r.u_store) * max_abs(t.result.out);
  const bool is_baseline = r.traits.baseline;
  if (!is_baseline) {
    if (baseline) {
      c.baseline_error = compare(baseline->out, t.result.out, baseline->u_store).max_abs;
    } else {
      Options o = opt;
      o.need_weights = o.need_lse = false;
      const RunReport b = baseline_backend().run(r.precision, r.accumulate, r.rounded_inputs, o);
      c.baseline_error = compare(b.out, t.result.out, b.u_store).max_abs;
    }
  }
  const double rule = is_baseline ? INFINITY : 2 * c.baseline_error + c.floor;
  c.tight_tolerance_out = std::min(probable_out, rule);
  c.criterion = is_baseline ? (probable_informative ? "probabilistic bound (the baseline itself)"
                                                    : "none informative (the baseline, bound trivial)")
                            : (probable_informative ? "probabilistic bound and 2x baseline"
                                                    : "2x baseline (probabilistic bound trivial)");
  c.tight_within = c.out.max_abs <= c.tight_tolerance_out && c.out.all_finite_where_ref_finite &&
                   c.lse.max_abs <= tight_lse && c.weights.max_abs <= tight_weights;
  return c;
}

GradientTruth gradient_truth(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                             double budget) {
  constexpr double u = 0x1p-53;
  GradientTruth t;
  if (2.5 * backends::reference_cost(in.shape()) <= budget) {
    t.grads = backends::reference_gradients(in, d_out, opt);
    t.kind = TruthKind::digits50;
    t.dq_error = u * max_abs(t.grads.dq);
    t.dk_error = u * max_abs(t.grads.dk);
    t.dv_error = u * max_abs(t.grads.dv);
    if (t.grads.dbias) t.dbias_error = u * max_abs(*t.grads.dbias) * double(in.shape().batch * in.shape().heads);
    if (t.grads.dsinks) t.dsinks_error = u * max_abs(*t.grads.dsinks) * double(in.shape().batch);
    return t;
  }
  const BackwardReport r = gemm_backend().run_backward("fp64", Accumulate::fp64, in, d_out, opt);
  t.grads = r.grads;
  t.kind = TruthKind::fp64_gemm;
  const GradientBound b = gradient_bounds(in, d_out, t.grads, opt, u, u, 0x1p-1074, 0x1p-1074).worst;
  t.dq_error = b.dq;
  t.dk_error = b.dk;
  t.dv_error = b.dv;
  t.dbias_error = b.dbias;
  t.dsinks_error = b.dsinks;
  return t;
}

GradientCheck verify_backward(const BackwardReport& r, const Options& opt, const GradientTruth& t,
                              const BackwardReport* baseline) {
  const RunReport& f = r.forward;
  GradientCheck c;
  c.truth = t.kind;
  const GradientBounds bounds =
      gradient_bounds(f.rounded_inputs, r.rounded_d_out, t.grads, opt, f.u_acc, f.u_store, f.eta_acc, f.eta_store);
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
  auto part = [&](std::string_view name, const auto& got, const auto& truth, double worst, double probable,
                  double truth_error, double cancellation, double terms, const auto* base) {
    GradientCheck::Part p;
    p.name = name;
    p.error = compare(got, truth, f.u_store);
    p.tolerance = worst + truth_error;
    p.informative = worst < max_abs(truth);
    const double floor =
        (f.u_acc * (2 + s_both) + 2 * f.u_store) * max_abs(truth) + 2 * f.u_acc * (terms + cancellation) +
        2 * f.eta_store;
    double rule = INFINITY;
    if (base) {
      p.baseline_error = compare(*base, truth, f.u_store).max_abs;
      rule = 2 * p.baseline_error + floor;
    }
    p.tight_tolerance = std::min(probable + truth_error, rule);
    const bool finite = p.error.all_finite_where_ref_finite;
    c.within = c.within && finite && p.error.max_abs <= p.tolerance;
    c.tight_within = c.tight_within && finite && p.error.max_abs <= p.tight_tolerance;
    c.parts.push_back(p);
  };
  const Gradients<double>* b = baseline ? &baseline->grads : nullptr;
  const GradientScales& g = c.bound.scales;
  part("dq", r.grads.dq, t.grads.dq, c.bound.dq, c.probable.dq, t.dq_error, g.dq, g.terms_dq, b ? &b->dq : nullptr);
  part("dk", r.grads.dk, t.grads.dk, c.bound.dk, c.probable.dk, t.dk_error, g.dk, g.terms_dk, b ? &b->dk : nullptr);
  part("dv", r.grads.dv, t.grads.dv, c.bound.dv, c.probable.dv, t.dv_error, 0.0, g.terms_dv, b ? &b->dv : nullptr);
  if (r.grads.dbias && t.grads.dbias)
    part("dbias", *r.grads.dbias, *t.grads.dbias, c.bound.dbias, c.probable.dbias, t.dbias_error, g.dbias,
         g.terms_dbias, b && b->dbias ? &*b->dbias : nullptr);
  else if (opt.need_dbias)
    c.within = c.tight_within = false;  // asked for and not returned
  if (r.grads.dsinks && t.grads.dsinks)
    part("dsinks", *r.grads.dsinks, *t.grads.dsinks, c.bound.dsinks, c.probable.dsinks, t.dsinks_error, g.dsinks,
         g.terms_dsinks, b && b->dsinks ? &*b->dsinks : nullptr);
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
