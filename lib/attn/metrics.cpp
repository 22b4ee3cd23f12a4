#include "attn/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <cblas.h>

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

double max_row_sum_error(const xt::xtensor<double, 4>& w) {
  const std::size_t n_kv = w.shape(3), rows = w.size() / n_kv;
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const double* p = w.data() + r * n_kv;
    double sum = 0;
    bool any = false;
    for (std::size_t j = 0; j < n_kv; ++j) {
      sum += p[j];
      any = any || p[j] != 0;
    }
    if (any) worst = std::max(worst, std::fabs(sum - 1));
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
// estimate, and the problem's sizes.
struct Magnitudes {
  double score_mag = 0, max_v = 0, max_lse = 0;
  double n_kv = 1, d_k = 1, outputs = 1;
};

Magnitudes magnitudes(const Inputs<double>& in, const Options& opt) {
  const Shape sh = in.shape();
  const MaskView mask(opt.mask, sh);
  const double scale = std::fabs(opt.resolved_scale(sh));
  double score_mag = 0, max_v = 0, max_lse = 0;
  // Q K^T and |Q| |K|^T as GEMMs (in blocks of query rows: the bound costs
  // two fp64 GEMMs, not a scalar triple loop). |Q| |K|^T is a sum of
  // non-negative terms, so its computed value is within a factor
  // (1 + d_k u) of the exact one; the factor below keeps it an upper bound.
  const double mag_up = 1 + 2 * double(sh.d_k) * 0x1p-53;
  const std::size_t block = std::min<std::size_t>(256, sh.n_q), d = sh.d_k, n_kv = sh.n_kv;
  std::vector<double> abs_q(block * d), abs_k(n_kv * d), dots(block * n_kv), mags(block * n_kv);
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const double* k = &in.k(b, h, 0, 0);
      for (std::size_t x = 0; x < n_kv * d; ++x) abs_k[x] = std::fabs(k[x]);
      for (std::size_t i0 = 0; i0 < sh.n_q; i0 += block) {
        const std::size_t rows = std::min(block, sh.n_q - i0);
        const double* q = &in.q(b, h, i0, 0);
        for (std::size_t x = 0; x < rows * d; ++x) abs_q[x] = std::fabs(q[x]);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d), 1.0, q, int(d), k, int(d), 0.0,
                    dots.data(), int(n_kv));
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_kv), int(d), 1.0, abs_q.data(), int(d),
                    abs_k.data(), int(d), 0.0, mags.data(), int(n_kv));
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t i = i0 + r;
          const auto keys = mask.keys(b, i);
          double row_max = -std::numeric_limits<double>::infinity();
          for (std::size_t j = keys.begin; j < keys.end; ++j) {
            const double bias = mask.elementwise() ? mask.offset(i, j) : 0.0;
            if (std::isinf(bias)) continue;  // masked
            score_mag = std::max(score_mag, scale * mags[r * n_kv + j] * mag_up + std::fabs(bias));
            row_max = std::max(row_max, scale * dots[r * n_kv + j] + bias);
          }
          if (std::isfinite(row_max))
            max_lse = std::max(max_lse, std::fabs(row_max) + std::log(double(sh.n_kv)));
        }
      }
    }
  for (double x : in.v) max_v = std::max(max_v, std::fabs(x));
  return {score_mag, max_v, max_lse, double(sh.n_kv), double(sh.d_k),
          double(sh.batch * sh.heads * sh.n_q) * double(std::max(sh.d_v, sh.n_kv))};
}

// The derivation of metrics.hpp with g(k) in place of gamma_k(u_acc).
template <class G>
ErrorBound bound_from(const Magnitudes& m, double u_acc, double u_store, G g) {
  const double n = m.n_kv, max_v = m.max_v, max_lse = m.max_lse;
  const double ds = g(m.d_k + 4) * m.score_mag;
  ErrorBound bound;
  bound.score = ds;
  bound.score_magnitude = m.score_mag;
  constexpr double u_double = 0x1p-53;  // weights and lse are returned in double
  bound.weights = std::min(1.0, std::expm1(2 * ds) + g(2 * n + 8) + u_double);
  bound.out = std::min(2 * max_v, max_v * (std::expm1(2 * ds) + g(4 * n + 10) + u_store));
  bound.lse = 3 * ds + g(2 * n + 4) + (u_acc + u_double) * (std::log(n) + max_lse);
  bound.weights_from_lse = std::min(1.0, std::expm1(ds + bound.lse) + 2 * u_acc + u_double);
  bound.row_sum = g(n + 4) + gamma(n, u_double);
  bound.row_sum_from_lse = bound.row_sum + std::expm1(2 * u_acc * (max_lse + std::log(n)));
  return bound;
}

}  // namespace

ErrorBound error_bound(const Inputs<double>& in, const Options& opt, double u_acc, double u_store) {
  return bound_from(magnitudes(in, opt), u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); });
}

ErrorBounds error_bounds(const Inputs<double>& in, const Options& opt, double u_acc, double u_store,
                         double failure_probability) {
  const Magnitudes m = magnitudes(in, opt);
  ErrorBounds b;
  b.worst = bound_from(m, u_acc, u_store, [u_acc](double k) { return gamma(k, u_acc); });
  b.lambda = lambda_for(failure_probability, m.outputs, 4 * m.n_kv + 10 + m.d_k, u_acc);
  b.probable = bound_from(m, u_acc, u_store, [&](double k) { return std::min(gamma(k, u_acc), gamma_tilde(k, u_acc, b.lambda)); });
  b.failure_probability = failure_probability;
  return b;
}

}  // namespace attn
