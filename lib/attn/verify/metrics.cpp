#include "attn/verify/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <cblas.h>

#include "attn/simd/simd.hpp"

namespace attn {

template <std::size_t N>
ErrorStats compare(const xt::xtensor<double, N>& got, const xt::xtensor<double, N>& ref, double u) {
  if (got.shape() != ref.shape()) throw Error("compare: the result's shape differs from the reference's");
  ErrorStats e;
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0, n = got.size(); i < n; ++i) {
    const double x = got.data()[i], r = ref.data()[i];
    if (x == r) continue;  // includes equal infinities
    double err = std::fabs(x - r);
    if (std::isnan(err)) err = inf;
    if (!std::isfinite(x) && std::isfinite(r)) e.all_finite_where_ref_finite = false;
    if (err > e.max_abs) {
      e.max_abs = err;
      e.worst = i;
    }
    if (r != 0 && std::isfinite(r)) {
      e.max_rel = std::max(e.max_rel, err / std::fabs(r));
      const double ulp = 2 * u * std::exp2(std::floor(std::log2(std::max(std::fabs(r), u))));
      e.max_ulps = std::max(e.max_ulps, err / ulp);
    }
  }
  return e;
}
template ErrorStats compare(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&, double);
template ErrorStats compare(const xt::xtensor<double, 4>&, const xt::xtensor<double, 4>&, double);
template ErrorStats compare(const xt::xtensor<double, 2>&, const xt::xtensor<double, 2>&, double);
template ErrorStats compare(const xt::xtensor<double, 1>&, const xt::xtensor<double, 1>&, double);

double max_row_sum_error(const xt::xtensor<double, 4>& w, const xt::xtensor<double, 4>* expected) {
  const std::size_t n_kv = w.shape(3), rows = w.size() / n_kv;
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const double* p = w.data() + r * n_kv;
    double sum = 0, want = expected ? 0 : 1;
    bool any = false;
    for (std::size_t j = 0; j < n_kv; ++j) {
      sum += p[j];
      any = any || p[j] != 0;
      if (expected) want += expected->data()[r * n_kv + j];
    }
    if (any) worst = std::max(worst, std::fabs(sum - want));
  }
  return worst;
}

double gamma(double k, double u) {
  return k * u < 1 ? k * u / (1 - k * u) : std::numeric_limits<double>::infinity();
}

double gamma_tilde(double k, double u, double lambda) {
  return std::expm1(lambda * std::sqrt(k) * u + k * u * u / (1 - u));
}

double lambda_for(double failure_probability, double inner_products, double length, double u) {
  return std::sqrt(2 * std::log(2 * inner_products * length / failure_probability)) / (1 - u);
}

namespace {

// What the bounds need of the inputs: the largest |scaled score| magnitude
// (scale |q|.|k| + |bias|) over visible pairs, max |V|, the largest |lse|
// estimate, and the problem's sizes; and the same per query row (rows).
struct Magnitudes {
  double score_mag = 0, max_v = 0, max_lse = 0;
  double weighted_score = 0;  // max_i sum_j p_ij (magnitude of score ij): ErrorBound::score_weighted
  // What the output's sums are formed from: max_c sum_j p_ij |v_jc| (the
  // terms) and max_c |o_ic|. Globally both max|V| (the convex hull); per row
  // the row's own, which is what makes a row's bound its own.
  double out_terms = 0, out_max = 0;
  double n_kv = 1, d_k = 1, outputs = 1;  // n_kv: terms of a row's softmax (keys, and the sink)
  // Roundings of a score beyond the d_k + 4 of scale q.k + bias, each at most
  // u_acc |score magnitude|: soft-capping's division, tanh (softcap_tanh_ulps),
  // product and the rounding of c to A (with tanh' <= 1 the raw score's
  // error passes through undamped at worst): 3 + tanh's; ALiBi's conversion to A and addition: 2.
  double extra_roundings = 0;
  std::vector<RowMagnitude> rows = {};
};

// A row's magnitudes as the global struct bound_from() takes.
Magnitudes of_row(const Magnitudes& m, const RowMagnitude& r) {
  Magnitudes x = m;
  x.rows = {};
  x.score_mag = r.score_mag;
  x.max_v = r.v_max;
  x.max_lse = r.lse;
  x.weighted_score = r.weighted;
  x.out_terms = r.terms;
  x.out_max = r.out;
  return x;
}

Magnitudes magnitudes(const Inputs<double>& in, const Options& opt) {
  const Shape sh = in.shape();
  const MaskView mask(opt, sh);
  const double signed_scale = opt.resolved_scale(sh), scale = std::fabs(signed_scale);
  const double inf = std::numeric_limits<double>::infinity();
  double score_mag = 0, max_v = 0, max_lse = 0;
  const double terms = double(sh.n_kv) + (mask.has_sinks() ? 1 : 0);
  // Q K^T and |Q| |K|^T as GEMMs (in blocks of query rows: the bound costs
  // a few fp64 GEMMs, not a scalar triple loop). |Q| |K|^T is a sum of
  // non-negative terms, so its computed value is within a factor
  // (1 + d_k u) of the exact one; the factor below keeps it an upper bound.
  const double mag_up = 1 + 2 * double(sh.d_k) * 0x1p-53;
  const std::size_t block = std::min<std::size_t>(256, sh.n_q), d = sh.d_k, n_kv = sh.n_kv, d_v = sh.d_v;
  std::vector<double> abs_q(block * d), abs_k(n_kv * d), dots(block * n_kv), mags(block * n_kv), rmags(block * n_kv);
  // The row's weights P and, from them, P V (the output), P |V| (its
  // terms' magnitude), and with W2 = P o P and A2 = P o P o (1 + sigma)^2
  // the root-sum-square of one rounding of each term, weight and score
  // (RowMagnitude::noise): W2 (V o V), A2 V, A2 (V o V) and A2's row sums.
  std::vector<double> w(block * n_kv), w2(block * n_kv), a2(block * n_kv), abs_v(n_kv * d_v), sq_v(n_kv * d_v),
      o(block * d_v), pa(block * d_v), w2v2(block * d_v), a2v(block * d_v), a2v2(block * d_v), a2_sum(block);
  std::vector<RowMagnitude> rows(sh.batch * sh.heads * sh.n_q);
  double weighted_score = 0;
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const double* k = &in.k(b, h / sh.group(), 0, 0);
      const double* v = &in.v(b, h / sh.group(), 0, 0);
      const double sink = mask.sink(h);
      if (std::isfinite(sink)) score_mag = std::max(score_mag, std::fabs(sink));
      double head_v = 0;
      for (std::size_t x = 0; x < n_kv * d; ++x) abs_k[x] = std::fabs(k[x]);
      for (std::size_t x = 0; x < n_kv * d_v; ++x) {
        abs_v[x] = std::fabs(v[x]);
        sq_v[x] = v[x] * v[x];
        head_v = std::max(head_v, abs_v[x]);
      }
      for (std::size_t i0 = 0; i0 < sh.n_q; i0 += block) {
        const std::size_t nr = std::min(block, sh.n_q - i0);
        const double* q = &in.q(b, h, i0, 0);
        for (std::size_t x = 0; x < nr * d; ++x) abs_q[x] = std::fabs(q[x]);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(nr), int(n_kv), int(d), signed_scale, q, int(d), k,
                    int(d), 0.0, dots.data(), int(n_kv));
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(nr), int(n_kv), int(d), 1.0, abs_q.data(), int(d),
                    abs_k.data(), int(d), 0.0, mags.data(), int(n_kv));
        for (std::size_t r = 0; r < nr; ++r) {
          const std::size_t i = i0 + r;
          RowMagnitude& row = rows[(b * sh.heads + h) * sh.n_q + i];
          row.v_max = head_v;
          double* score = dots.data() + r * n_kv;
          double* p = w.data() + r * n_kv;
          // one rounding of a score is u times its magnitude; soft-capped, the
          // raw score's damped by the cap's derivative f, plus the capped score's
          double* rounding = rmags.data() + r * n_kv;
          for (std::size_t j = 0; j < n_kv; ++j) {
            rounding[j] = scale * mags[r * n_kv + j];
            if (opt.softcap) {
              const double f = 1 - std::pow(std::tanh(score[j] / *opt.softcap), 2);
              rounding[j] = f * rounding[j] + *opt.softcap * std::sqrt(1 - f);
            }
          }
          mask.apply(score, b, h, i, 0, n_kv);  // the final scores, -inf where masked
          double row_max = sink;
          row.score_mag = std::isfinite(sink) ? std::fabs(sink) : 0.0;
          for (std::size_t j = 0; j < n_kv; ++j) {
            if (score[j] == -inf) continue;  // masked
            const double added = std::fabs(mask.alibi(h, i, j)) + std::fabs(mask.offset(i, j));
            row.score_mag = std::max(row.score_mag, scale * mags[r * n_kv + j] * mag_up + added);
            rounding[j] += added;
            row_max = std::max(row_max, score[j]);
          }
          score_mag = std::max(score_mag, row.score_mag);
          std::fill(p, p + n_kv, 0.0);
          std::fill_n(w2.begin() + std::ptrdiff_t(r * n_kv), n_kv, 0.0);
          std::fill_n(a2.begin() + std::ptrdiff_t(r * n_kv), n_kv, 0.0);
          a2_sum[r] = 0;
          if (!std::isfinite(row_max)) {
            row.masked = true;
            continue;
          }
          row.lse = std::fabs(row_max) + std::log(terms);
          max_lse = std::max(max_lse, row.lse);
          // the weights (the sink in the denominator) and the magnitudes they weigh
          const double sink_p = std::exp(sink - row_max);
          double l = sink_p, weighted = 0;
          for (std::size_t j = 0; j < n_kv; ++j) l += p[j] = score[j] == -inf ? 0.0 : std::exp(score[j] - row_max);
          for (std::size_t j = 0; j < n_kv; ++j) {
            p[j] /= l;
            weighted += p[j] * rounding[j];
            w2[r * n_kv + j] = p[j] * p[j];
            a2[r * n_kv + j] = w2[r * n_kv + j] * (1 + rounding[j]) * (1 + rounding[j]);
            a2_sum[r] += a2[r * n_kv + j];
          }
          // the sink: a weight and a logit whose value is 0 (it moves o by p_sink (0 - o))
          if (std::isfinite(sink)) a2_sum[r] += std::pow(sink_p / l * (1 + std::fabs(sink)), 2);
          row.weighted = weighted;
          weighted_score = std::max(weighted_score, weighted);
        }
        const auto gemm = [&](const std::vector<double>& a, const double* x, std::vector<double>& y) {
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nr), int(d_v), int(n_kv), 1.0, a.data(), int(n_kv),
                      x, int(d_v), 0.0, y.data(), int(d_v));
        };
        gemm(w, v, o);
        gemm(w, abs_v.data(), pa);
        gemm(w2, sq_v.data(), w2v2);
        gemm(a2, v, a2v);
        gemm(a2, sq_v.data(), a2v2);
        for (std::size_t r = 0; r < nr; ++r) {
          RowMagnitude& row = rows[(b * sh.heads + h) * sh.n_q + i0 + r];
          for (std::size_t c = 0; c < d_v; ++c) {
            const std::size_t x = r * d_v + c;
            const double oc = o[x];
            row.out = std::max(row.out, std::fabs(oc));
            row.terms = std::max(row.terms, pa[x] * mag_up);
            // sum_j a2_j (v_jc - o_c)^2 expanded; its cancellation (a one-hot
            // row) is kept non-negative and is far below u_acc's scale
            const double scores = std::max(0.0, a2v2[x] - 2 * oc * a2v[x] + oc * oc * a2_sum[r]);
            row.noise = std::max(row.noise, std::sqrt(w2v2[x] + scores));
            row.term_noise = std::max(row.term_noise, std::sqrt(w2v2[x]));
          }
        }
      }
    }
  for (double x : in.v) max_v = std::max(max_v, std::fabs(x));
  Magnitudes m{score_mag, max_v, max_lse, weighted_score, max_v, max_v, terms, double(sh.d_k),
               double(sh.batch * sh.heads * sh.n_q) * double(std::max(sh.d_v, sh.n_kv))};
  if (opt.softcap) m.extra_roundings += 3 + softcap_tanh_ulps;
  if (opt.alibi_slopes) m.extra_roundings += 2;
  m.rows = std::move(rows);
  return m;
}

// What a kernel's arithmetic adds (KernelRounding, metrics.hpp): the
// weights' rounding before P V, and the scores' absolute error from flushed
// subnormals: a product q_l k_l with an operand below FLT_MIN flushed errs by
// less than FLT_MIN times the other operand, a partial sum below it by less
// than FLT_MIN: |scale| d_k FLT_MIN (max|Q| + max|K| + 1).
struct KernelTerms {
  double u_weights = 0, ds_flush = 0;
  double dp_flush = 0;  // the backward's dP = dO V^T likewise: d_v FLT_MIN (max|dO| + max|V| + 1)
  double u_products = 0;  // the backward's P and dS' rounded to it before dV, dQ and dK (Gradients::rounding)
};
KernelTerms kernel_terms(const Inputs<double>& in, const Options& opt, const KernelRounding& k) {
  KernelTerms t{k.u_weights, 0.0};
  if (k.flushes_subnormals) {
    double max_q = 0, max_k = 0;
    for (double x : in.q) max_q = std::max(max_q, std::fabs(x));
    for (double x : in.k) max_k = std::max(max_k, std::fabs(x));
    const Shape sh = in.shape();
    t.ds_flush = std::fabs(opt.resolved_scale(sh)) * double(sh.d_k) * double(std::numeric_limits<float>::min()) *
                 (max_q + max_k + 1);
  }
  return t;
}

// The derivation of metrics.hpp with g(k) in place of gamma_k(u_acc).
template <class G>
ErrorBound bound_from(const Magnitudes& m, double u_acc, double u_store, G g, const KernelTerms& kt) {
  const double n = m.n_kv, max_v = m.max_v, max_lse = m.max_lse;
  const double ds = (g(m.d_k + 4) + m.extra_roundings * u_acc) * m.score_mag + kt.ds_flush;
  ErrorBound bound;
  bound.score = ds;
  bound.score_magnitude = m.score_mag;
  bound.score_weighted = m.weighted_score;
  constexpr double u_double = 0x1p-53;  // weights and lse are returned in double
  bound.weights = std::min(1.0, std::expm1(2 * ds) + g(2 * n + 8) + u_double);
  bound.out = std::min(2 * max_v, m.out_terms * (std::expm1(2 * ds) + g(4 * n + 10) + kt.u_weights) + u_store * m.out_max);
  bound.lse = 3 * ds + g(2 * n + 4) + (u_acc + u_double) * (std::log(n) + max_lse);
  bound.weights_from_lse = std::min(1.0, std::expm1(ds + bound.lse) + 2 * u_acc + u_double);
  bound.row_sum = g(n + 4) + gamma(n, u_double);
  bound.row_sum_from_lse = bound.row_sum + std::expm1(2 * u_acc * (max_lse + std::log(n)));
  return bound;
}

// The magnitudes the gradient bound needs beyond the forward's: P1's factor
// max_i ||dO_i||_1, max |dO|, max |Q|, max |K|, the largest column sum of
// the weights and the largest sum of a weight over batch and heads; and the
// tight rule's floor (GradientScales, with the problem's own magnitudes).
// Weights, dP and O in fp64 from DGEMMs per block of query rows; the sums
// that are upper bounds are inflated by 1 + 1e-12 to stay so.
struct GradientMagnitudes {
  double a1 = 0, max_do = 0, max_q = 0, max_k = 0, col_sum = 0, head_sum = 0;
  double sink_mass = 0;  // max over heads of sum over batch and rows of the sink's weight exp(sink_h - lse_i)
  double max_ds = 0, max_dp = 0;  // max |dP_ij - D_i| and max |dP_ij| over the keys a row sees (P_ij > 0)
  GradientScales scales;
};

// weights_ratio: u_weights / u_acc of the forward's kernel (KernelRounding), whose weights rounded
// before P V add u_weights term_noise_i to each element of the saved output.
GradientMagnitudes gradient_magnitudes(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                                       const std::vector<RowMagnitude>& forward_rows, double weights_ratio) {
  const Shape sh = in.shape();
  GradientMagnitudes g;
  for (double x : in.q) g.max_q = std::max(g.max_q, std::fabs(x));
  for (double x : in.k) g.max_k = std::max(g.max_k, std::fabs(x));
  for (double x : d_out) g.max_do = std::max(g.max_do, std::fabs(x));
  for (std::size_t row = 0; row < d_out.size() / sh.d_v; ++row) {
    double sum = 0;
    for (std::size_t l = 0; l < sh.d_v; ++l) sum += std::fabs(d_out.data()[row * sh.d_v + l]);
    g.a1 = std::max(g.a1, sum);
  }
  const MaskView mask(opt, sh);
  const double scale = opt.resolved_scale(sh), inf = std::numeric_limits<double>::infinity();
  const std::size_t block = std::min<std::size_t>(256, sh.n_q), n_kv = sh.n_kv, d = sh.d_k, d_v = sh.d_v;
  std::vector<double> sink_mass(sh.heads, 0.0), sink_terms(sh.heads, 0.0), sink_cancel(sh.heads, 0.0), sink_w(block);
  std::vector<double> s(block * n_kv), dp(block * n_kv), c(block * n_kv), o(block * d_v), abs_q(block * d),
      abs_k(n_kv * d), cq(block * d), ck(n_kv * d), cols(n_kv), mags(block * n_kv), a(block * n_kv), ak(n_kv * d),
      abs_do(block * d_v), pv(n_kv * d_v), cap_slope(opt.softcap ? block * n_kv : 0), abs_v(n_kv * d_v),
      dov(block * n_kv);
  std::vector<double> heads(opt.need_dbias ? sh.n_q * n_kv : 0), c_heads(heads.size()), a_heads(heads.size());
  // What one rounding of each score (sigma_ij, and |lse_i| for a run that
  // rebuilds P from its logsumexp) moves each gradient by: the terms
  // weighted by it (GradientScales::score_* and lse_*).
  std::vector<double> sig(block * n_kv), row_lse(block), as(block * n_kv), al(block * n_kv), ps(block * n_kv),
      pl(block * n_kv), sq(block * d), sk(n_kv * d), lk(n_kv * d), sv(n_kv * d_v), lv(n_kv * d_v), ds(block * n_kv),
      sq_k(n_kv * d), sq_q(block * d), sq_do(block * d_v), a2(block * n_kv), s2(block * n_kv), nk(n_kv * d),
      nv(n_kv * d_v);
  // Row by row (GradientScales::Rows): dQ's rows [B, H, n_q], dK's and dV's [B, H_kv, n_kv].
  const std::size_t q_rows = sh.batch * sh.heads * sh.n_q, k_rows = sh.batch * sh.kv_head_count() * n_kv;
  for (auto* r : {&g.scales.rows_dq})
    for (auto* v : {&r->cancel, &r->terms, &r->score, &r->lse, &r->noise}) v->assign(q_rows, 0.0);
  for (auto* r : {&g.scales.rows_dk, &g.scales.rows_dv})
    for (auto* v : {&r->cancel, &r->terms, &r->score, &r->lse, &r->noise}) v->assign(k_rows, 0.0);
  // the largest of x[row * width .. (row + 1) * width) into rows[first + row], after f
  const auto fold_rows = [](std::vector<double>& rows, std::size_t first, const double* x, std::size_t count,
                            std::size_t width, auto f) {
    for (std::size_t e = 0; e < count * width; ++e) rows[first + e / width] = std::max(rows[first + e / width], f(e, x[e]));
  };
  const auto same = [](std::size_t, double x) { return x; };
  const auto root = [](std::size_t, double x) { return std::sqrt(x); };
  // The squares of the root-sum-squares underflow to 0 in double below ~1e-154: a key whose every
  // term is that small (weights of 1e-173 at logits x 1000, fp64) got an RSS of 0, and a floor far
  // below its error. Each RSS is at least its largest term and at most sqrt(count) times it; where the
  // computed RSS falls below the largest term (computed without squares), it takes sqrt(count) x it.
  struct Largest {  // per row: the largest term and how many terms there are
    std::vector<double> term, lse_term, count;
    void reset(std::size_t n) { term.assign(n, 0.0), lse_term.assign(n, 0.0), count.assign(n, 0.0); }
    void add(std::size_t k, double t, double l) {
      term[k] = std::max(term[k], t), lse_term[k] = std::max(lse_term[k], l), count[k] += t > 0 || l > 0;
    }
  };
  const auto repair = [](std::vector<double>& rows, std::size_t first, const std::vector<double>& largest,
                         const std::vector<double>& count) {
    for (std::size_t k = 0; k < largest.size(); ++k)
      if (rows[first + k] < largest[k]) rows[first + k] = largest[k] * std::sqrt(count[k]);
  };
  Largest q_terms, k_terms, v_terms;  // dQ's rows of a block; dK's and dV's keys of a K/V head
  std::vector<double> k_max(n_kv), q_max(block), do_max(block);  // max_c |k_jc|, |q_ic|, |dO_ic|
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t h = 0; h < sh.heads; ++h) {
      // dK and dV of a K/V head sum over its g query heads: column sums too
      if (h % sh.group() == 0) {
        std::fill(cols.begin(), cols.end(), 0.0);
        std::fill(ck.begin(), ck.end(), 0.0);
        std::fill(ak.begin(), ak.end(), 0.0);
        std::fill(pv.begin(), pv.end(), 0.0);
        for (auto* x : {&sk, &lk, &sv, &lv, &nk, &nv}) std::fill(x->begin(), x->end(), 0.0);
        k_terms.reset(n_kv);
        v_terms.reset(n_kv);
      }
      const double* k = &in.k(b, h / sh.group(), 0, 0);
      const double* v = &in.v(b, h / sh.group(), 0, 0);
      const double sink = mask.sink(h);
      for (std::size_t x = 0; x < n_kv * d; ++x) abs_k[x] = std::fabs(k[x]), sq_k[x] = k[x] * k[x];
      std::fill(k_max.begin(), k_max.end(), 0.0);
      for (std::size_t x = 0; x < n_kv * d; ++x) k_max[x / d] = std::max(k_max[x / d], abs_k[x]);
      for (std::size_t x = 0; x < n_kv * d_v; ++x) abs_v[x] = std::fabs(v[x]);
      for (std::size_t i0 = 0; i0 < sh.n_q; i0 += block) {
        const std::size_t rows = std::min(block, sh.n_q - i0), first_q = (b * sh.heads + h) * sh.n_q + i0;
        const double* q = &in.q(b, h, i0, 0);
        const double* g_rows = &d_out(b, h, i0, 0);
        for (std::size_t x = 0; x < rows * d; ++x) abs_q[x] = std::fabs(q[x]);
        for (std::size_t x = 0; x < rows * d_v; ++x) abs_do[x] = std::fabs(g_rows[x]);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d), scale, q, int(d), k, int(d),
                    0.0, s.data(), int(n_kv));
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d_v), 1.0, g_rows, int(d_v), v,
                    int(d_v), 0.0, dp.data(), int(n_kv));
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d), std::fabs(scale),
                    abs_q.data(), int(d), abs_k.data(), int(d), 0.0, mags.data(), int(n_kv));
        if (opt.sinks)  // |dO| |V|^T: the magnitude of dP's terms
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d_v), 1.0, abs_do.data(),
                      int(d_v), abs_v.data(), int(d_v), 0.0, dov.data(), int(n_kv));
        std::fill(c.begin(), c.end(), 0.0);
        std::fill(a.begin(), a.end(), 0.0);
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t i = i0 + r;
          double* p = s.data() + r * n_kv;
          if (opt.softcap)  // the soft-cap's derivative f, which scales dS into dS' for dQ and dK
            for (std::size_t j = 0; j < n_kv; ++j) cap_slope[r * n_kv + j] = 1 - std::pow(std::tanh(p[j] / *opt.softcap), 2);
          mask.apply(p, b, h, i, 0, n_kv);
          double m = sink;
          for (std::size_t j = 0; j < n_kv; ++j) m = std::max(m, p[j]);
          sink_w[r] = 0;
          std::fill_n(sig.begin() + std::ptrdiff_t(r * n_kv), n_kv, 0.0);
          row_lse[r] = 0;
          if (m == -inf) {
            std::fill(p, p + n_kv, 0.0);
            continue;
          }
          double sum = std::exp(sink - m), weighted = 0;
          for (std::size_t j = 0; j < n_kv; ++j) sum += p[j] = std::exp(p[j] - m);
          const double lse = std::fabs(m + std::log(sum));
          row_lse[r] = lse;
          sink_w[r] = std::exp(sink - m) / sum;
          sink_mass[h] += sink_w[r];
          for (std::size_t j = 0; j < n_kv; ++j) {
            p[j] /= sum;
            cols[j] += p[j];
            if (!heads.empty()) heads[i * n_kv + j] += p[j];
            // a score's one rounding, u times its magnitude; soft-capped: the raw
            // score's, damped by the cap's derivative f, and the capped score's
            double score = mags[r * n_kv + j];
            if (opt.softcap) {
              const double f = cap_slope[r * n_kv + j];
              score = f * score + *opt.softcap * std::sqrt(1 - f);  // |c tanh(raw / c)| = c sqrt(1 - f)
            }
            if (p[j] > 0) {
              sig[r * n_kv + j] = score + std::fabs(mask.alibi(h, i, j)) + std::fabs(mask.offset(i, j));
              weighted += p[j] * sig[r * n_kv + j];
            }
          }
          g.scales.score = std::max(g.scales.score, weighted);
          g.scales.score_lse = std::max(g.scales.score_lse, weighted + lse);
          // Through the normalisation every score's rounding moves weight j too:
          // dP_ij = P_ij (delta_j - sum_k P_ik delta_k), so weight j's relative
          // error is within u (sigma_ij + sum_k P_ik sigma_ik). Without the second
          // term a key far below the row's maximum was charged its own score's
          // rounding only, while the maximum's moves it as much (logits x 1000,
          // fp64: math's dK of such a key at 1.29x its tolerance in run 20261202-081546).
          for (std::size_t j = 0; j < n_kv; ++j)
            if (p[j] > 0) sig[r * n_kv + j] += weighted, g.scales.score_max = std::max(g.scales.score_max, sig[r * n_kv + j]);
        }
        // O = P V; then c_ij = P_ij (|dP_ij| + |D_i| + |dO_i|.|O_i|)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d_v), int(n_kv), 1.0, s.data(), int(n_kv),
                    v, int(d_v), 0.0, o.data(), int(d_v));
        for (std::size_t r = 0; r < rows; ++r) {
          const double* p = s.data() + r * n_kv;
          double d_i = 0, e_i = 0;
          for (std::size_t j = 0; j < n_kv; ++j) d_i += p[j] * dp[r * n_kv + j];
          sink_terms[h] += sink_w[r] * std::fabs(d_i);
          if (opt.sinks) {  // D_i's terms, either way it is formed: sum_j P_ij |dP_ij|, and O_i's |dO_i| P|V|
            double terms_d = 0;
            for (std::size_t j = 0; j < n_kv; ++j) terms_d += p[j] * (std::fabs(dp[r * n_kv + j]) + dov[r * n_kv + j]);
            sink_cancel[h] += sink_w[r] * terms_d;
          }
          for (std::size_t l = 0; l < d_v; ++l) e_i += std::fabs(g_rows[r * d_v + l] * o[r * d_v + l]);
          // D_i = dO_i . O_i takes the saved output, which carries the forward's own error,
          // u_acc (max|o_i| + N_i) per element (RowMagnitude), independent from element to
          // element under the probabilistic bound's model: ||dO_i||_2 times that. (At logits
          // x 100 the forward's score roundings made math's fp64 dK of a key seen with small
          // weights err 7.5 units of its floor without it, run 20261202-081546.)
          const RowMagnitude& fwd = forward_rows[first_q + r];
          double do_2 = 0;
          for (std::size_t l = 0; l < d_v; ++l) do_2 += g_rows[r * d_v + l] * g_rows[r * d_v + l];
          // (A kernel that rounds the weights before P V adds u_weights term_noise_i per element, in
          // units of u_acc weights_ratio term_noise_i: the saved output of streaming's bf16 dot
          // products; without it its dK of a key erred 1.14x its floor, RapidCheck seed 20261129.)
          e_i += std::sqrt(do_2) * (fwd.out + fwd.noise + weights_ratio * fwd.term_noise);
          if (opt.sinks) sink_cancel[h] += sink_w[r] * std::sqrt(do_2) * weights_ratio * fwd.term_noise;
          for (std::size_t j = 0; j < n_kv; ++j) {
            c[r * n_kv + j] = p[j] * (std::fabs(dp[r * n_kv + j]) + std::fabs(d_i) + e_i);
            a[r * n_kv + j] = p[j] * std::fabs(dp[r * n_kv + j] - d_i);
            if (p[j] > 0)
              g.max_ds = std::max(g.max_ds, std::fabs(dp[r * n_kv + j] - d_i)),
              g.max_dp = std::max(g.max_dp, std::fabs(dp[r * n_kv + j]));
            ds[r * n_kv + j] = p[j] * (dp[r * n_kv + j] - d_i) * (opt.softcap ? cap_slope[r * n_kv + j] : 1.0);
            if (!c_heads.empty()) c_heads[(i0 + r) * n_kv + j] += c[r * n_kv + j];
            if (!a_heads.empty()) a_heads[(i0 + r) * n_kv + j] += a[r * n_kv + j];
            if (opt.softcap) {  // d(bias) takes dS, dQ and dK take dS' = dS f
              // f = 1 - t^2 errs absolutely: t by tanh's ulps and the division (relative, twice
              // in t^2), t^2's and the subtraction's roundings, even where f itself is tiny (a
              // saturated cap: math's fp64 dK at c = 0.5, logits x 100 failed without it)
              c[r * n_kv + j] = c[r * n_kv + j] * cap_slope[r * n_kv + j] +
                                (2 * (softcap_tanh_ulps + 2) + 1) * a[r * n_kv + j];
              a[r * n_kv + j] *= cap_slope[r * n_kv + j];
            }
          }
        }
        // The terms weighted by each score's rounding magnitude and by |lse_i|:
        // |dS| o sigma |K| (dQ), (|dS| o sigma)^T |Q| (dK), (P o sigma)^T |dO| (dV), and with |lse_i|.
        // Root-sum-square (squares here, GEMMs with K o K, Q o Q, dO o dO, the root at the end): the
        // roundings are independent under the probabilistic bound's model, and their sum of magnitudes
        // charged sqrt(n) times the noise a run shows (an error 10x any backend's then passed in fp32).
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < n_kv; ++j) {
            const std::size_t x = r * n_kv + j;
            as[x] = std::pow(a[x] * sig[x], 2);
            ps[x] = std::pow(s[x] * sig[x], 2);
            pl[x] = std::pow(s[x] * row_lse[r], 2);
          }
        q_terms.reset(rows);
        for (std::size_t r = 0; r < rows; ++r) {
          q_max[r] = do_max[r] = 0;
          for (std::size_t c = 0; c < d; ++c) q_max[r] = std::max(q_max[r], abs_q[r * d + c]);
          for (std::size_t c = 0; c < d_v; ++c) do_max[r] = std::max(do_max[r], abs_do[r * d_v + c]);
          for (std::size_t j = 0; j < n_kv; ++j) {
            const std::size_t x = r * n_kv + j;
            q_terms.add(r, a[x] * sig[x] * k_max[j], 0.0);
            k_terms.add(j, a[x] * sig[x] * q_max[r], a[x] * row_lse[r] * q_max[r]);
            v_terms.add(j, s[x] * sig[x] * do_max[r], s[x] * row_lse[r] * do_max[r]);
          }
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d), int(n_kv), 1.0, as.data(), int(n_kv),
                    sq_k.data(), int(d), 0.0, sq.data(), int(d));
        fold_rows(g.scales.rows_dq.score, first_q, sq.data(), rows, d, root);
        repair(g.scales.rows_dq.score, first_q, q_terms.term, q_terms.count);
        for (std::size_t r = 0; r < rows; ++r) g.scales.score_dq = std::max(g.scales.score_dq, g.scales.rows_dq.score[first_q + r]);
        // |lse_i| moves all of row i's weights by one factor, so dQ_i itself (not its terms): |lse_i| |dQ_i|
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d), int(n_kv), 1.0, ds.data(), int(n_kv), k,
                    int(d), 0.0, sq.data(), int(d));
        for (std::size_t x = 0; x < rows * d; ++x) g.scales.lse_dq = std::max(g.scales.lse_dq, row_lse[x / d] * std::fabs(sq[x]));
        fold_rows(g.scales.rows_dq.lse, first_q, sq.data(), rows, d,
                  [&](std::size_t e, double x) { return row_lse[e / d] * std::fabs(x); });
        for (std::size_t x = 0; x < rows * n_kv; ++x) al[x] = std::pow(a[x] * row_lse[x / n_kv], 2);
        for (std::size_t x = 0; x < rows * d; ++x) sq_q[x] = abs_q[x] * abs_q[x];
        for (std::size_t x = 0; x < rows * d_v; ++x) sq_do[x] = abs_do[x] * abs_do[x];
        for (auto [w, acc] : {std::pair{&as, &sk}, std::pair{&al, &lk}})
          cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d), int(rows), 1.0, w->data(), int(n_kv),
                      sq_q.data(), int(d), 1.0, acc->data(), int(d));
        for (auto [w, acc] : {std::pair{&ps, &sv}, std::pair{&pl, &lv}})
          cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d_v), int(rows), 1.0, w->data(), int(n_kv),
                      sq_do.data(), int(d_v), 1.0, acc->data(), int(d_v));
        // dQ's floor: c |K| per row;  dK's: c^T |Q| summed over the blocks
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d), int(n_kv), 1.0, c.data(), int(n_kv),
                    abs_k.data(), int(d), 0.0, cq.data(), int(d));
        for (std::size_t x = 0; x < rows * d; ++x) g.scales.dq = std::max(g.scales.dq, cq[x]);
        fold_rows(g.scales.rows_dq.cancel, first_q, cq.data(), rows, d, same);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d), int(rows), 1.0, c.data(), int(n_kv),
                    abs_q.data(), int(d), 1.0, ck.data(), int(d));
        // The terms' magnitudes: |dS| |K|, |dS|^T |Q|, P^T |dO|
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d), int(n_kv), 1.0, a.data(), int(n_kv),
                    abs_k.data(), int(d), 0.0, cq.data(), int(d));
        for (std::size_t x = 0; x < rows * d; ++x) g.scales.terms_dq = std::max(g.scales.terms_dq, cq[x]);
        fold_rows(g.scales.rows_dq.terms, first_q, cq.data(), rows, d, same);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d), int(rows), 1.0, a.data(), int(n_kv),
                    abs_q.data(), int(d), 1.0, ak.data(), int(d));
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d_v), int(rows), 1.0, s.data(), int(n_kv),
                    abs_do.data(), int(d_v), 1.0, pv.data(), int(d_v));
        // The terms' root-sum-squares (Rows::noise): dS^2 (K o K), (dS^2)^T (Q o Q), (P^2)^T (dO o dO)
        for (std::size_t x = 0; x < rows * n_kv; ++x) a2[x] = a[x] * a[x], s2[x] = s[x] * s[x];
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d), int(n_kv), 1.0, a2.data(), int(n_kv),
                    sq_k.data(), int(d), 0.0, sq.data(), int(d));
        fold_rows(g.scales.rows_dq.noise, first_q, sq.data(), rows, d, root);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d), int(rows), 1.0, a2.data(), int(n_kv),
                    sq_q.data(), int(d), 1.0, nk.data(), int(d));
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n_kv), int(d_v), int(rows), 1.0, s2.data(), int(n_kv),
                    sq_do.data(), int(d_v), 1.0, nv.data(), int(d_v));
      }
      if (h % sh.group() != sh.group() - 1) continue;  // the K/V head's sums are not complete yet
      for (double x : ak) g.scales.terms_dk = std::max(g.scales.terms_dk, x);
      for (double x : pv) g.scales.terms_dv = std::max(g.scales.terms_dv, x);
      for (double x : cols) g.col_sum = std::max(g.col_sum, x);
      for (double x : ck) g.scales.dk = std::max(g.scales.dk, x);
      const std::size_t first_k = (b * sh.kv_head_count() + h / sh.group()) * n_kv;
      fold_rows(g.scales.rows_dk.cancel, first_k, ck.data(), n_kv, d, same);
      fold_rows(g.scales.rows_dk.terms, first_k, ak.data(), n_kv, d, same);
      fold_rows(g.scales.rows_dk.score, first_k, sk.data(), n_kv, d, root);
      fold_rows(g.scales.rows_dk.lse, first_k, lk.data(), n_kv, d, root);
      fold_rows(g.scales.rows_dv.terms, first_k, pv.data(), n_kv, d_v, same);
      fold_rows(g.scales.rows_dk.noise, first_k, nk.data(), n_kv, d, root);
      fold_rows(g.scales.rows_dv.noise, first_k, nv.data(), n_kv, d_v, root);
      fold_rows(g.scales.rows_dv.score, first_k, sv.data(), n_kv, d_v, root);
      fold_rows(g.scales.rows_dv.lse, first_k, lv.data(), n_kv, d_v, root);
      repair(g.scales.rows_dk.score, first_k, k_terms.term, k_terms.count);
      repair(g.scales.rows_dk.lse, first_k, k_terms.lse_term, k_terms.count);
      repair(g.scales.rows_dv.score, first_k, v_terms.term, v_terms.count);
      repair(g.scales.rows_dv.lse, first_k, v_terms.lse_term, v_terms.count);
      for (std::size_t j = 0; j < n_kv; ++j) {
        g.scales.score_dk = std::max(g.scales.score_dk, g.scales.rows_dk.score[first_k + j]);
        g.scales.lse_dk = std::max(g.scales.lse_dk, g.scales.rows_dk.lse[first_k + j]);
        g.scales.score_dv = std::max(g.scales.score_dv, g.scales.rows_dv.score[first_k + j]);
        g.scales.lse_dv = std::max(g.scales.lse_dv, g.scales.rows_dv.lse[first_k + j]);
      }
    }
  for (double x : sink_mass) g.sink_mass = std::max(g.sink_mass, x);
  for (double x : sink_terms) g.scales.terms_dsinks = std::max(g.scales.terms_dsinks, x);
  for (double x : sink_cancel) g.scales.dsinks = std::max(g.scales.dsinks, x);
  for (double x : heads) g.head_sum = std::max(g.head_sum, x);
  for (double x : c_heads) g.scales.dbias = std::max(g.scales.dbias, x);
  for (double x : a_heads) g.scales.terms_dbias = std::max(g.scales.terms_dbias, x);
  for (double* x : {&g.scales.dq, &g.scales.dk, &g.scales.terms_dq, &g.scales.terms_dk, &g.scales.score_dq,
                    &g.scales.score_dk, &g.scales.lse_dq, &g.scales.lse_dk})
    *x *= std::fabs(scale);
  for (GradientScales::Rows* r : {&g.scales.rows_dq, &g.scales.rows_dk})
    for (std::vector<double>* v : {&r->cancel, &r->terms, &r->score, &r->lse, &r->noise})
      for (double& x : *v) x *= std::fabs(scale);
  for (double* x : {&g.a1, &g.col_sum, &g.head_sum, &g.sink_mass}) *x *= 1 + 1e-12;
  return g;
}

double max_finite_abs(const auto& t) {
  double m = 0;
  for (double x : t)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

template <class G>
GradientBound gradient_bound_from(const Magnitudes& m, const GradientMagnitudes& gm, const Gradients<double>& truth,
                                  const Shape& sh, const Options& opt, double u_acc, double u_store, G g,
                                  const KernelTerms& kt) {
  const double scale = opt.resolved_scale(sh);
  GradientBound b;
  b.forward = bound_from(m, u_acc, u_store, g, kt);
  const ErrorBound& f = b.forward;
  // n_kv: the softmax's terms (the sink's included); n_q: the terms of a dK
  // or dV element, the rows of the K/V head's g query heads
  const double n_kv = m.n_kv, n_q = double(sh.n_q * sh.group()), d_v = double(sh.d_v);
  const double e_p = std::max(std::expm1(2 * f.score) + g(2 * n_kv + 8), std::expm1(f.score + f.lse) + 2 * u_acc);
  const double p1 = gm.a1 * m.max_v;
  const double e_dp = g(d_v) * p1 + kt.dp_flush;
  const double e_d = std::max(gm.a1 * (f.out + g(d_v) * m.max_v), (e_p + g(n_kv)) * p1 + e_dp);
  b.eps_s = (e_p + g(2)) * 2 * p1 + e_dp + e_d;
  if (opt.softcap)
    // dS' = dS f, f = 1 - t^2, t = s_cap / c in [-1, 1]: f's error is within
    // 2 |dt| + 3 u_acc, |dt| <= ds / c + (softcap_tanh_ulps + 5) u_acc, and |dS| <= 2 P1 per unit weight
    b.eps_s += 2 * p1 * (2 * f.score / *opt.softcap + (2 * softcap_tanh_ulps + 13) * u_acc);
  const double C = gm.col_sum;
  // P and dS' rounded to u_b before the products (Gradients::rounding): |fl(p^) - p| <= p (e_p (1 + u_b) + u_b),
  // |fl(dS^) - dS| <= P (eps_S (1 + u_b) + u_b 2 P1)
  const double u_b = kt.u_products;
  const double eps_prod = b.eps_s * (1 + u_b) + u_b * 2 * p1, e_prod = e_p * (1 + u_b) + u_b;
  b.dq = std::fabs(scale) * gm.max_k * (eps_prod + g(n_kv + 1) * 2 * p1) + u_store * max_finite_abs(truth.dq);
  b.dk = std::fabs(scale) * gm.max_q * C * (eps_prod + g(n_q + 1) * 2 * p1) + u_store * max_finite_abs(truth.dk);
  b.dv = gm.max_do * C * (e_prod + g(n_q)) + u_store * max_finite_abs(truth.dv);
  if (truth.dbias)
    b.dbias = gm.head_sum * b.eps_s + gamma(double(sh.batch * sh.heads), 0x1p-53) * max_finite_abs(*truth.dbias);
  // d(sink_h) = -sum over the B n_q rows of p_i D_i, p_i = exp(sink_h - lse_i) the sink's weight:
  // each p_i within e_p relative, each D_i within e_D, |D_i| <= P1, the sum
  // in A over B n_q terms (then in double over the batch)
  if (truth.dsinks)  // (no sink weight at all: no error, even where the other bounds are infinite)
    b.dsinks = (gm.sink_mass > 0 ? gm.sink_mass * ((e_p + g(double(sh.batch * sh.n_q) + 1)) * p1 + e_d) : 0.0) +
               gamma(double(sh.batch), 0x1p-53) * max_finite_abs(*truth.dsinks);
  b.scales = gm.scales;
  return b;
}

}  // namespace

GradientBounds gradient_bounds(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                               const Gradients<double>& truth, const Options& opt, double u_acc, double u_store,
                               double eta_acc, double eta_store, double eta_weight, const KernelRounding& kernel,
                               const KernelRounding& backward, double failure_probability) {
  const Shape sh = in.shape();
  const Magnitudes m = magnitudes(in, opt);
  KernelTerms kt = kernel_terms(in, opt, kernel);
  kt.u_products = backward.u_weights;
  const GradientMagnitudes gm = gradient_magnitudes(in, d_out, opt, m.rows, u_acc > 0 ? kernel.u_weights / u_acc : 0.0);
  if (kernel.flushes_subnormals || backward.flushes_subnormals)
    kt.dp_flush = double(sh.d_v) * double(std::numeric_limits<float>::min()) * (gm.max_do + m.max_v + 1);
  GradientBounds b;
  b.worst = gradient_bound_from(m, gm, truth, sh, opt, u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); }, kt);
  // One bound per gradient element and per dS entry; sums of at most n + d terms.
  const double checks = double(sh.batch * sh.heads) * double(sh.n_q + sh.n_kv) * double(sh.d_k + sh.d_v + sh.n_kv);
  b.lambda = lambda_for(failure_probability, checks, 2 * double(std::max(sh.n_q, sh.n_kv)) + 10 + double(sh.d_k + sh.d_v), u_acc);
  b.probable = gradient_bound_from(m, gm, truth, sh, opt, u_acc, u_store,
                                   [&](double k) { return std::min(gamma(k, u_acc), gamma_tilde(k, u_acc, b.lambda)); }, kt);
  b.failure_probability = failure_probability;
  const double underflow = double(sh.n_q + sh.n_kv + sh.d_k + sh.d_v + 8) * eta_acc + eta_store;
  // A weight that underflows errs by eta_acc, multiplied on its way into each gradient (metrics.hpp).
  const double n_kv = double(sh.n_kv), n_q = double(sh.n_q * sh.group()), scale = std::fabs(opt.resolved_scale(sh));
  const double ds = eta_weight * (gm.max_ds + n_kv * gm.max_dp) + eta_acc;
  for (GradientBound* x : {&b.worst, &b.probable}) {
    x->underflow_dq = underflow + scale * n_kv * gm.max_k * ds;
    x->underflow_dk = underflow + scale * n_q * gm.max_q * ds;
    x->underflow_dv = underflow + n_q * gm.max_do * eta_weight;
    x->dq += x->underflow_dq;
    x->dk += x->underflow_dk;
    x->dv += x->underflow_dv;
    if (truth.dbias) x->dbias += double(sh.batch * sh.heads) * (underflow + ds);
    if (truth.dsinks) x->dsinks += double(sh.batch * sh.n_q) * underflow;
  }
  return b;
}

ErrorBound error_bound(const Inputs<double>& in, const Options& opt, double u_acc, double u_store,
                       const KernelRounding& kernel) {
  return bound_from(magnitudes(in, opt), u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); },
                    kernel_terms(in, opt, kernel));
}

ErrorBounds error_bounds(const Inputs<double>& in, const Options& opt, double u_acc, double u_store,
                         const KernelRounding& kernel, double failure_probability) {
  const Magnitudes m = magnitudes(in, opt);
  const KernelTerms kt = kernel_terms(in, opt, kernel);
  ErrorBounds b;
  b.worst = bound_from(m, u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); }, kt);
  b.lambda = lambda_for(failure_probability, m.outputs, 4 * m.n_kv + 10 + m.d_k, u_acc);
  const auto probable = [&](double k) { return std::min(gamma(k, u_acc), gamma_tilde(k, u_acc, b.lambda)); };
  b.probable = bound_from(m, u_acc, u_store, probable, kt);
  b.failure_probability = failure_probability;
  b.rows_worst.reserve(m.rows.size());
  b.rows_probable.reserve(m.rows.size());
  for (const RowMagnitude& r : m.rows) {
    const Magnitudes row = of_row(m, r);
    b.rows_worst.push_back(bound_from(row, u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); }, kt));
    b.rows_probable.push_back(bound_from(row, u_acc, u_store, probable, kt));
  }
  b.rows = m.rows;
  return b;
}

}  // namespace attn
