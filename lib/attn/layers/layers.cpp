#include "attn/layers/layers.hpp"

#include <cmath>
#include <xtensor-blas/xblas.hpp>

#include <filesystem>

#include "attn/io/npy.hpp"
#include "attn/core/random.hpp"

namespace attn {

namespace {
// The core's backend: the named one, or the fused one when none is named.
const BackendInfo& core_backend(const Core& core) {
  return core.backend.empty() ? fused_backend() : backend_info(core.backend);
}
}  // namespace


namespace {

template <class T>
auto as_matrix(T* p, std::size_t rows, std::size_t cols) {
  return xt::adapt(p, rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}

Matrix random_matrix(std::size_t rows, std::size_t cols, NormalStream& z) {
  Matrix m = Matrix::from_shape({rows, cols});
  const double s = 1.0 / std::sqrt(double(cols));  // std 1/sqrt(fan_in): unit-variance outputs
  for (double& x : m) x = s * z.next();
  return m;
}

Linear random_linear(std::size_t out, std::size_t in, bool bias, NormalStream& z) {
  Linear l{random_matrix(out, in, z), std::nullopt};
  if (bias) {
    Vector b = Vector::from_shape({out});
    for (double& x : b) x = 0.1 * z.next();
    l.bias = b;
  }
  return l;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

}  // namespace

Sequence Linear::operator()(const Sequence& x) const {
  require(x.shape(2) == in_features(), "linear layer: input has " + std::to_string(x.shape(2)) +
                                           " features, the weight expects " + std::to_string(in_features()));
  const std::size_t rows = x.shape(0) * x.shape(1), out = out_features();
  Sequence y = Sequence::from_shape({x.shape(0), x.shape(1), out});
  auto y2 = as_matrix(y.data(), rows, out);
  xt::blas::gemm(as_matrix(x.data(), rows, in_features()), weight, y2, false, true);
  if (bias)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < out; ++c) y.data()[r * out + c] += (*bias)(c);
  return y;
}

Matrix sinusoidal_encoding(std::size_t length, std::size_t embed_dim, std::size_t first) {
  Matrix pe = Matrix::from_shape({length, embed_dim});
  for (std::size_t p = 0; p < length; ++p)
    for (std::size_t i = 0; i < embed_dim; ++i) {
      const double freq = std::pow(10000.0, -double(i - i % 2) / double(embed_dim));
      const double angle = double(first + p) * freq;
      pe(p, i) = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return pe;
}

void apply_rope(xt::xtensor<double, 4>& x, const Rope& rope, std::size_t first) {
  const std::size_t d = x.shape(3), half = d / 2;
  require(d % 2 == 0, "RoPE needs an even head dimension, got " + std::to_string(d));
  require(rope.base > 1 && std::isfinite(rope.base), "RoPE base must be a finite number > 1");
  for (std::size_t b = 0; b < x.shape(0); ++b)
    for (std::size_t h = 0; h < x.shape(1); ++h)
      for (std::size_t l = 0; l < x.shape(2); ++l) {
        double* v = &x(b, h, l, 0);
        for (std::size_t i = 0; i < half; ++i) {
          const double angle = double(first + l) * std::pow(rope.base, -2.0 * double(i) / double(d));
          const double c = std::cos(angle), s = std::sin(angle);
          const std::size_t a = rope.style == RopeStyle::interleaved ? 2 * i : i;
          const std::size_t e = rope.style == RopeStyle::interleaved ? 2 * i + 1 : i + half;
          const double x0 = v[a], x1 = v[e];
          v[a] = x0 * c - x1 * s;
          v[e] = x0 * s + x1 * c;
        }
      }
}

MultiheadAttention::MultiheadAttention(std::size_t embed_dim, std::size_t num_heads, std::size_t kdim,
                                       std::size_t vdim, bool bias, std::uint64_t seed, std::size_t kv_heads)
    : heads_(num_heads) {
  require(embed_dim > 0 && num_heads > 0 && kdim > 0 && vdim > 0,
          "multi-head attention: embed_dim, num_heads, kdim and vdim must be positive");
  require(embed_dim % num_heads == 0, "multi-head attention: embed_dim " + std::to_string(embed_dim) +
                                          " is not divisible by num_heads " + std::to_string(num_heads));
  if (kv_heads == 0) kv_heads = num_heads;
  require(num_heads % kv_heads == 0, "multi-head attention: num_heads " + std::to_string(num_heads) +
                                         " is not a multiple of kv_heads " + std::to_string(kv_heads));
  const std::size_t kv_width = kv_heads * (embed_dim / num_heads);
  NormalStream z(seed);
  w_q_ = random_linear(embed_dim, embed_dim, bias, z);
  w_k_ = random_linear(kv_width, kdim, bias, z);
  w_v_ = random_linear(kv_width, vdim, bias, z);
  w_o_ = random_linear(embed_dim, embed_dim, bias, z);
  check();
}

MultiheadAttention::MultiheadAttention(Linear q, Linear k, Linear v, Linear o, std::size_t num_heads)
    : w_q_(std::move(q)), w_k_(std::move(k)), w_v_(std::move(v)), w_o_(std::move(o)), heads_(num_heads) {
  check();
}

void MultiheadAttention::check() const {
  const std::size_t e = w_o_.out_features();
  require(heads_ > 0 && e % heads_ == 0, "multi-head attention: embed_dim " + std::to_string(e) +
                                              " is not divisible by num_heads " + std::to_string(heads_));
  require(w_o_.in_features() == e, "multi-head attention: out_proj must be [embed_dim, embed_dim]");
  require(w_q_.out_features() == e, "multi-head attention: q projection must output embed_dim = " +
                                        std::to_string(e) + " features");
  const std::size_t d = e / heads_, kv = w_k_.out_features();
  require(w_v_.out_features() == kv, "multi-head attention: k and v projections must output as many features (" +
                                         std::to_string(kv) + " vs " + std::to_string(w_v_.out_features()) + ")");
  require(kv > 0 && kv % d == 0 && heads_ % (kv / d) == 0,
          "multi-head attention: k/v projections output " + std::to_string(kv) +
              " features: want kv_heads x head_dim (head_dim " + std::to_string(d) +
              ") with kv_heads dividing num_heads " + std::to_string(heads_));
  require(w_q_.in_features() == e, "multi-head attention: q_proj must take embed_dim features");
  for (const Linear* l : {&w_q_, &w_k_, &w_v_, &w_o_})
    require(!l->bias || l->bias->size() == l->out_features(), "multi-head attention: a bias has the wrong length");
}

void MultiheadAttention::set_variants(Options v) {
  require(std::holds_alternative<mask::None>(v.mask) && !v.need_weights && !v.need_lse && v.threads == 1 &&
              v.kv_splits == 0,
          "multi-head attention: the variants set softcap, sinks, alibi_slopes and segments only (the mask is "
          "forward's, threads and kv_splits the Core's)");
  for (const auto* t : {&v.sinks, &v.alibi_slopes})
    require(!*t || (*t)->size() == heads_, "multi-head attention: sinks and ALiBi slopes need one value per query "
                                           "head (" + std::to_string(heads_) + ")");
  variants_ = std::move(v);
}

Options MultiheadAttention::call_options(const Core& core, const Mask& mask, bool need_weights) const {
  Options opt = variants_;
  opt.mask = mask;
  opt.need_weights = need_weights;
  opt.threads = core.threads;
  opt.kv_splits = core.kv_splits;
  return opt;
}

xt::xtensor<double, 4> MultiheadAttention::split_heads(const Sequence& x, std::size_t heads) {
  const std::size_t B = x.shape(0), L = x.shape(1), d = x.shape(2) / heads;
  xt::xtensor<double, 4> r = xt::xtensor<double, 4>::from_shape({B, heads, L, d});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) r(b, h, l, c) = x(b, l, h * d + c);
  return r;
}

Sequence MultiheadAttention::merge_heads(const xt::xtensor<double, 4>& x) {
  const std::size_t B = x.shape(0), H = x.shape(1), L = x.shape(2), d = x.shape(3);
  Sequence r = Sequence::from_shape({B, L, H * d});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < d; ++c) r(b, l, h * d + c) = x(b, h, l, c);
  return r;
}

AttentionOutput MultiheadAttention::forward(const Sequence& query, const Sequence& key, const Sequence& value,
                                            const Core& core, const Mask& mask, bool need_weights,
                                            bool average_weights, const std::optional<Rope>& rope) const {
  require(query.shape(0) == key.shape(0) && key.shape(0) == value.shape(0),
          "multi-head attention: query, key and value must have the same batch size");
  require(key.shape(1) == value.shape(1), "multi-head attention: key has " + std::to_string(key.shape(1)) +
                                              " positions, value " + std::to_string(value.shape(1)));
  require(query.shape(2) == embed_dim(), "multi-head attention: query has " + std::to_string(query.shape(2)) +
                                             " features, embed_dim is " + std::to_string(embed_dim()));
  require(key.shape(2) == w_k_.in_features(), "multi-head attention: key has " + std::to_string(key.shape(2)) +
                                                  " features, kdim is " + std::to_string(w_k_.in_features()));
  require(value.shape(2) == w_v_.in_features(), "multi-head attention: value has " +
                                                    std::to_string(value.shape(2)) + " features, vdim is " +
                                                    std::to_string(w_v_.in_features()));
  Inputs<double> in{split_heads(w_q_(query), heads_), split_heads(w_k_(key), kv_heads()),
                    split_heads(w_v_(value), kv_heads())};
  if (rope) {
    apply_rope(in.q, *rope);
    apply_rope(in.k, *rope);
  }
  RunReport r = core_backend(core).run(core.precision, core.accumulate, in, call_options(core, mask, need_weights), {}, 0);
  AttentionOutput o{w_o_(merge_heads(r.out)), std::nullopt, std::nullopt};
  if (need_weights) {
    o.weights = std::move(r.weights);
    if (average_weights) o.mean_weights = xt::xtensor<double, 3>(xt::mean(*o.weights, {1}));
  }
  return o;
}

Sequence MultiheadAttention::decode(const Sequence& x, KVCache& cache, const Core& core,
                                    const std::optional<Rope>& rope) const {
  require(x.shape(1) == 1, "decode: one token per step ([B, 1, E]), got " + std::to_string(x.shape(1)));
  require(x.shape(2) == embed_dim() && w_k_.in_features() == embed_dim() && w_v_.in_features() == embed_dim(),
          "decode: self-attention of embed_dim features only");
  require(!variants_.segments, "decode: document segments need fixed ids per position; a growing KV cache has none");
  auto q = split_heads(w_q_(x), heads_), k = split_heads(w_k_(x), kv_heads()), v = split_heads(w_v_(x), kv_heads());
  if (rope) {
    apply_rope(q, *rope, cache.length());
    apply_rope(k, *rope, cache.length());
  }
  cache.append(k, v);
  const RunReport r =
      core_backend(core).run(core.precision, core.accumulate, cache.view_with(q), call_options(core, mask::None{}, false), {}, 0);
  return w_o_(merge_heads(r.out));
}

void KVCache::append(const xt::xtensor<double, 4>& k, const xt::xtensor<double, 4>& v) {
  if (length_ == 0 && k_.empty()) {
    batch = k.shape(0);
    heads = k.shape(1);
    head_dim = k.shape(3);
  }
  require(k.shape(0) == batch && k.shape(1) == heads && k.shape(2) == 1 && k.shape(3) == head_dim &&
              v.shape() == k.shape(),
          "KV cache: a step must append [B, H_kv, 1, d] keys and values of the cache's shape");
  k_.insert(k_.end(), k.begin(), k.end());  // [B][H][1][d] = this token's slice of [length][B][H][d]
  v_.insert(v_.end(), v.begin(), v.end());
  ++length_;
}

Inputs<double> KVCache::view_with(const xt::xtensor<double, 4>& q) const {
  Inputs<double> in{q, xt::xtensor<double, 4>::from_shape({batch, heads, length_, head_dim}),
                    xt::xtensor<double, 4>::from_shape({batch, heads, length_, head_dim})};
  const std::size_t token = batch * heads * head_dim;
  for (std::size_t t = 0; t < length_; ++t)
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t c = 0; c < head_dim; ++c) {
          const std::size_t src = t * token + (b * heads + h) * head_dim + c;
          in.k(b, h, t, c) = k_[src];
          in.v(b, h, t, c) = v_[src];
        }
  return in;
}

LayerNorm::LayerNorm(std::size_t dim, double eps_) : gamma(xt::ones<double>({dim})), beta(xt::zeros<double>({dim})), eps(eps_) {
  require(eps >= 0 && std::isfinite(eps), "LayerNorm: epsilon must be finite and >= 0");
}

Sequence LayerNorm::operator()(const Sequence& x) const {
  const std::size_t n = x.shape(2), rows = x.shape(0) * x.shape(1);
  require(n == gamma.size(), "LayerNorm: input has " + std::to_string(n) + " features, the norm " +
                                 std::to_string(gamma.size()));
  Sequence y = Sequence::from_shape(x.shape());
  for (std::size_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < n; ++i) mean += xr[i];
    mean /= double(n);
    for (std::size_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::size_t i = 0; i < n; ++i) y.data()[r * n + i] = (xr[i] - mean) * inv * gamma(i) + beta(i);
  }
  return y;
}

PreNormBlock::PreNormBlock(std::size_t embed_dim, std::size_t num_heads, std::size_t mlp_dim, Activation act,
                           std::uint64_t seed, std::size_t kv_heads)
    : ln1(embed_dim), ln2(embed_dim), attention(embed_dim, num_heads, embed_dim, embed_dim, true, seed, kv_heads),
      activation(act) {
  NormalStream z(seed ^ 0x9e3779b97f4a7c15ull);
  mlp_in = random_linear(mlp_dim, embed_dim, true, z);
  mlp_out = random_linear(embed_dim, mlp_dim, true, z);
}

Sequence PreNormBlock::operator()(const Sequence& x, const Core& core, const Mask& mask,
                                  const std::optional<Rope>& rope) const {
  const Sequence n1 = ln1(x);
  Sequence h = x + attention.forward(n1, n1, n1, core, mask, false, false, rope).out;
  Sequence a = mlp_in(ln2(h));
  for (double& v : a)
    v = activation == Activation::relu ? std::max(v, 0.0) : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  return h + mlp_out(a);
}

Sequence random_sequence(std::size_t batch, std::size_t length, std::size_t dim, std::uint64_t seed) {
  NormalStream z(seed);
  Sequence s = Sequence::from_shape({batch, length, dim});
  for (double& x : s) x = z.next();
  return s;
}

namespace {
Linear load_linear(const std::string& dir, const std::string& weight, const std::string& bias) {
  Linear l{load_npy_2d(dir + "/" + weight, "--weights " + weight), std::nullopt};
  if (std::filesystem::exists(dir + "/" + bias)) l.bias = load_npy_1d(dir + "/" + bias, "--weights " + bias);
  return l;
}
}  // namespace

MultiheadAttention load_state_dict(const std::string& dir, std::size_t heads) {
  if (!std::filesystem::is_directory(dir)) throw Error("--weights " + dir + ": not a directory");
  Linear o = load_linear(dir, "out_proj.weight.npy", "out_proj.bias.npy");
  const std::size_t e = o.out_features();
  if (std::filesystem::exists(dir + "/in_proj_weight.npy")) {
    const Linear in = load_linear(dir, "in_proj_weight.npy", "in_proj_bias.npy");
    if (in.weight.shape(0) != 3 * e)
      throw Error("--weights in_proj_weight.npy: " + std::to_string(in.weight.shape(0)) + " rows, want 3 x embed_dim = " +
                  std::to_string(3 * e));
    auto part = [&](std::size_t i) {
      Linear l{Matrix(xt::view(in.weight, xt::range(i * e, (i + 1) * e), xt::all())), std::nullopt};
      if (in.bias) l.bias = Vector(xt::view(*in.bias, xt::range(i * e, (i + 1) * e)));
      return l;
    };
    return MultiheadAttention(part(0), part(1), part(2), std::move(o), heads);
  }
  // Separate projections (kdim or vdim != embed_dim); their biases live in in_proj_bias.npy.
  Linear q{load_npy_2d(dir + "/q_proj_weight.npy", "--weights q_proj_weight.npy"), std::nullopt};
  Linear k{load_npy_2d(dir + "/k_proj_weight.npy", "--weights k_proj_weight.npy"), std::nullopt};
  Linear v{load_npy_2d(dir + "/v_proj_weight.npy", "--weights v_proj_weight.npy"), std::nullopt};
  // Grouped-query K/V projections have H_kv x d rows each, fewer than embed_dim.
  if (std::filesystem::exists(dir + "/in_proj_bias.npy")) {
    const Vector b = load_npy_1d(dir + "/in_proj_bias.npy", "--weights in_proj_bias.npy");
    const std::size_t nq = q.out_features(), nk = k.out_features(), nv = v.out_features();
    if (b.size() != nq + nk + nv)
      throw Error("--weights in_proj_bias.npy: length " + std::to_string(b.size()) + ", want the q, k and v "
                  "projections' rows " + std::to_string(nq) + " + " + std::to_string(nk) + " + " + std::to_string(nv));
    q.bias = Vector(xt::view(b, xt::range(0, nq)));
    k.bias = Vector(xt::view(b, xt::range(nq, nq + nk)));
    v.bias = Vector(xt::view(b, xt::range(nq + nk, nq + nk + nv)));
  }
  return MultiheadAttention(std::move(q), std::move(k), std::move(v), std::move(o), heads);
}

}  // namespace attn
