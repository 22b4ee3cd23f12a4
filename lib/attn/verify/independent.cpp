#include "attn/verify/independent.hpp"

#include <cmath>
#include <limits>
#include <thread>
#include <variant>
#include <vector>

#include "attn/backends/reference_exact.hpp"
#include "attn/core/double_double.hpp"
#include "attn/core/parallel.hpp"

namespace attn {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::size_t lanes = 8;  // keys per block of the score loop (one accumulator each)

// The problem of one query head of one batch, from Options and the shape alone.
struct Head {
  const Options& opt;
  std::size_t b, h, n_q, n_kv, d_k, d_v, kv;  // kv: the K/V head h reads
  double scale, sink;

  // Whether query i sees key j (the mask, the documents, a -inf bias or a Boolean 0).
  bool visible(std::size_t i, std::size_t j) const {
    const std::ptrdiff_t last = std::ptrdiff_t(i) + std::ptrdiff_t(n_kv) - std::ptrdiff_t(n_q);  // bottom-right
    const std::ptrdiff_t jj = std::ptrdiff_t(j);
    bool ok = true;
    if (std::holds_alternative<mask::Causal>(opt.mask)) ok = jj <= last;
    if (auto* w = std::get_if<mask::SlidingWindow>(&opt.mask)) ok = jj <= last && jj > last - std::ptrdiff_t(w->window);
    if (auto* k = std::get_if<mask::KeyPadding>(&opt.mask)) ok = j < k->valid_length[b];
    if (auto* a = std::get_if<mask::Boolean>(&opt.mask)) ok = a->allowed(i, j) != 0;
    if (auto* bias = std::get_if<mask::AdditiveBias>(&opt.mask)) ok = bias->bias(i, j) != -inf;
    if (ok && opt.segments) {
      const auto& seg = *opt.segments;
      const std::size_t row = seg.shape(0) > 1 ? b : 0;
      ok = last >= 0 && seg(row, std::size_t(last)) == seg(row, j);  // the query is token `last`
    }
    return ok;
  }
  // ALiBi's term, slope_h (j - i - (n_kv - n_q)), the product rounded once to double (the problem's
  // definition, problem.hpp MaskView::alibi: the slopes are doubles), and the bias; each added in T.
  double alibi(std::size_t i, std::size_t j) const {
    return opt.alibi_slopes ? (*opt.alibi_slopes)(h) * (double(j) - double(i) - (double(n_kv) - double(n_q))) : 0.0;
  }
  double bias(std::size_t i, std::size_t j) const {
    auto* b = std::get_if<mask::AdditiveBias>(&opt.mask);
    return b ? b->bias(i, j) : 0.0;
  }
};

Head head_of(const Shape& sh, const Options& opt, std::size_t b, std::size_t h) {
  const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(sh.d_k));
  const double sink = opt.sinks ? (*opt.sinks)(h) : -inf;
  return {opt, b, h, sh.n_q, sh.n_kv, sh.d_k, sh.d_v, h / (sh.heads / sh.kv_head_count()), scale, sink};
}

// One row of one head in T: the visible keys' raw scores (scale q.k, before
// the cap), final scores, weights, the sink's weight and the logsumexp.
template <class T>
struct Row {
  std::vector<std::size_t> keys;  // the visible keys, ascending
  std::vector<T> raw, p;          // per visible key
  T p_sink{0};
  double lse = -inf;
};

// K of one K/V head transposed ([d_k][n_kv] in T), so that the score loop
// reads `lanes` consecutive keys per coordinate.
template <class T>
std::vector<T> transposed_keys(const Inputs<double>& in, std::size_t b, std::size_t kv) {
  const std::size_t n_kv = in.k.shape(2), d_k = in.k.shape(3);
  std::vector<T> kt(d_k * n_kv);
  for (std::size_t j = 0; j < n_kv; ++j)
    for (std::size_t l = 0; l < d_k; ++l) kt[l * n_kv + j] = T(in.k(b, kv, j, l));
  return kt;
}

template <class T>
Row<T> row_of(const Inputs<double>& in, const Head& hd, const std::vector<T>& kt, std::size_t i) {
  using std::exp;
  using std::log;
  using std::tanh;
  Row<T> r;
  for (std::size_t j = 0; j < hd.n_kv; ++j)
    if (hd.visible(i, j)) r.keys.push_back(j);
  const std::size_t n = r.keys.size();
  // Scores over blocks of `lanes` keys (the visible keys need not be consecutive: a gather by index).
  std::vector<T> q(hd.d_k);
  for (std::size_t l = 0; l < hd.d_k; ++l) q[l] = T(in.q(hd.b, hd.h, i, l));
  r.raw.assign(n, T(0));
  // (keys j0 .. j0 + n - 1 without a gap, the common case: read directly, which the compiler vectorises)
  const bool contiguous = n > 0 && r.keys.back() - r.keys.front() + 1 == n;
  for (std::size_t x0 = 0; x0 < n; x0 += lanes) {
    const std::size_t w = std::min(lanes, n - x0);
    T acc[lanes];
    for (std::size_t x = 0; x < lanes; ++x) acc[x] = T(0);
    for (std::size_t l = 0; l < hd.d_k; ++l) {
      const T* kl = kt.data() + l * hd.n_kv;
      if (contiguous && w == lanes) {
        const T* k0 = kl + r.keys[x0];
        for (std::size_t x = 0; x < lanes; ++x) acc[x] += q[l] * k0[x];
      } else {
        for (std::size_t x = 0; x < w; ++x) acc[x] += q[l] * kl[r.keys[x0 + x]];
      }
    }
    for (std::size_t x = 0; x < w; ++x) r.raw[x0 + x] = T(hd.scale) * acc[x];
  }
  std::vector<T> s(n);
  for (std::size_t x = 0; x < n; ++x) {
    T v = r.raw[x];
    if (hd.opt.softcap) v = T(*hd.opt.softcap) * tanh(v / T(*hd.opt.softcap));
    s[x] = v + T(hd.alibi(i, r.keys[x])) + T(hd.bias(i, r.keys[x]));
  }
  const bool has_sink = hd.sink != -inf;
  if (n == 0 && !has_sink) return r;  // nothing visible: output 0, weights 0, lse -inf
  T m = has_sink ? T(hd.sink) : s[0];
  for (std::size_t x = 0; x < n; ++x)
    if (s[x] > m) m = s[x];
  T l = has_sink ? exp(T(hd.sink) - m) : T(0);
  r.p.resize(n);
  for (std::size_t x = 0; x < n; ++x) l += r.p[x] = exp(s[x] - m);
  for (std::size_t x = 0; x < n; ++x) r.p[x] /= l;
  if (has_sink) r.p_sink = exp(T(hd.sink) - m) / l;
  r.lse = static_cast<double>(m + log(l));
  return r;
}

template <class T>
Result<double> attention(const Inputs<double>& in, const Options& opt) {
  const Shape sh = in.shape();
  Result<double> res;
  res.out = xt::zeros<double>({sh.batch, sh.heads, sh.n_q, sh.d_v});
  res.lse = xt::xtensor<double, 3>::from_shape({sh.batch, sh.heads, sh.n_q});
  if (opt.need_weights) res.weights = xt::zeros<double>({sh.batch, sh.heads, sh.n_q, sh.n_kv});
  // Heads in parallel on every core (each writes only its own head's rows); rows in order within a head.
  const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  parallel_for(sh.batch * sh.heads, threads, [&](std::size_t item, std::size_t) {
      if constexpr (std::is_same_v<T, backends::exact_t>) backends::exact_caches_freed_at_thread_exit();
      const std::size_t b = item / sh.heads, h = item % sh.heads;
      std::vector<T> o(sh.d_v);
      const Head hd = head_of(sh, opt, b, h);
      const std::vector<T> kt = transposed_keys<T>(in, b, hd.kv);
      for (std::size_t i = 0; i < sh.n_q; ++i) {
        const Row<T> r = row_of(in, hd, kt, i);
        (*res.lse)(b, h, i) = r.lse;
        std::fill(o.begin(), o.end(), T(0));
        for (std::size_t x = 0; x < r.p.size(); ++x) {
          const double* v = &in.v(b, hd.kv, r.keys[x], 0);
          for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += r.p[x] * T(v[c]);
        }
        for (std::size_t c = 0; c < sh.d_v; ++c) res.out(b, h, i, c) = static_cast<double>(o[c]);
        if (res.weights)
          for (std::size_t x = 0; x < r.p.size(); ++x) (*res.weights)(b, h, i, r.keys[x]) = static_cast<double>(r.p[x]);
      }
  });
  return res;
}

template <class T>
Gradients<double> gradients(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt) {
  using std::tanh;
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v, g = sh.heads / sh.kv_head_count();
  Gradients<double> res;
  res.dq = xt::zeros<double>(in.q.shape());
  res.dk = xt::zeros<double>(in.k.shape());
  res.dv = xt::zeros<double>(in.v.shape());
  const bool dbias = opt.need_dbias && std::holds_alternative<mask::AdditiveBias>(opt.mask);
  std::vector<T> bias_sum(dbias ? n_q * n_kv : 0, T(0)), sink_sum(sh.heads, T(0));
  std::vector<T> dk(n_kv * d_k), dv(n_kv * d_v), dq(d_k), dp, ds;
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t kv = 0; kv < sh.kv_head_count(); ++kv) {
      std::fill(dk.begin(), dk.end(), T(0));
      std::fill(dv.begin(), dv.end(), T(0));
      const std::vector<T> kt = transposed_keys<T>(in, b, kv);
      for (std::size_t h = kv * g; h < (kv + 1) * g; ++h) {
        const Head hd = head_of(sh, opt, b, h);
        for (std::size_t i = 0; i < n_q; ++i) {
          const Row<T> r = row_of(in, hd, kt, i);
          const std::size_t n = r.keys.size();
          const double* go = &d_out(b, h, i, 0);
          // dP_ij = dO_i . v_j;  D_i = sum_j P_ij dP_ij
          dp.assign(n, T(0));
          T d_i(0);
          for (std::size_t x = 0; x < n; ++x) {
            const double* v = &in.v(b, kv, r.keys[x], 0);
            for (std::size_t c = 0; c < d_v; ++c) dp[x] += T(go[c]) * T(v[c]);
            d_i += r.p[x] * dp[x];
          }
          ds.resize(n);
          std::fill(dq.begin(), dq.end(), T(0));
          for (std::size_t x = 0; x < n; ++x) {
            const std::size_t j = r.keys[x];
            const T s = r.p[x] * (dp[x] - d_i);  // dS_ij
            if (dbias) bias_sum[i * n_kv + j] += s;
            T s_cap = s;  // dS'_ij: through the cap's derivative 1 - tanh^2(raw / c)
            if (opt.softcap) {
              const T t = tanh(r.raw[x] / T(*opt.softcap));
              s_cap = s * (T(1) - t * t);
            }
            for (std::size_t l = 0; l < d_k; ++l) {
              dq[l] += s_cap * kt[l * n_kv + j];
              dk[j * d_k + l] += s_cap * T(in.q(b, h, i, l));
            }
            for (std::size_t c = 0; c < d_v; ++c) dv[j * d_v + c] += r.p[x] * T(go[c]);
          }
          for (std::size_t l = 0; l < d_k; ++l) res.dq(b, h, i, l) = static_cast<double>(T(hd.scale) * dq[l]);
          if (opt.sinks) sink_sum[h] += -(r.p_sink * d_i);
        }
      }
      const T scale(opt.scale ? *opt.scale : 1.0 / std::sqrt(double(d_k)));
      for (std::size_t j = 0; j < n_kv; ++j) {
        for (std::size_t l = 0; l < d_k; ++l) res.dk(b, kv, j, l) = static_cast<double>(scale * dk[j * d_k + l]);
        for (std::size_t c = 0; c < d_v; ++c) res.dv(b, kv, j, c) = static_cast<double>(dv[j * d_v + c]);
      }
    }
  if (dbias) {
    res.dbias = xt::xtensor<double, 2>::from_shape({n_q, n_kv});
    for (std::size_t x = 0; x < n_q * n_kv; ++x) res.dbias->data()[x] = static_cast<double>(bias_sum[x]);
  }
  if (opt.sinks) {
    res.dsinks = xt::xtensor<double, 1>::from_shape({sh.heads});
    for (std::size_t h = 0; h < sh.heads; ++h) (*res.dsinks)(h) = static_cast<double>(sink_sum[h]);
  }
  return res;
}

}  // namespace

Result<double> independent_attention(const Inputs<double>& in, const Options& opt, IndependentPrecision p) {
  switch (p) {
    case IndependentPrecision::digits50:
      backends::exact_caches_freed_at_thread_exit();
      return attention<backends::exact_t>(in, opt);
    case IndependentPrecision::double_double: return attention<dd>(in, opt);
    case IndependentPrecision::fp64: return attention<double>(in, opt);
  }
  throw Error("independent_attention: unknown precision");
}

Gradients<double> independent_gradients(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                                        const Options& opt, IndependentPrecision p) {
  switch (p) {
    case IndependentPrecision::digits50:
      backends::exact_caches_freed_at_thread_exit();
      return gradients<backends::exact_t>(in, d_out, opt);
    case IndependentPrecision::double_double: return gradients<dd>(in, d_out, opt);
    case IndependentPrecision::fp64: return gradients<double>(in, d_out, opt);
  }
  throw Error("independent_gradients: unknown precision");
}

}  // namespace attn
