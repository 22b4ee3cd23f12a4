#include "attn/core/problem.hpp"

#include <algorithm>
#include <cmath>
#include <array>
#include <map>

#include "attn/simd/simd.hpp"
#include <sstream>

namespace attn {

std::string to_string(const Shape& s) {
  std::ostringstream o;
  o << "B=" << s.batch << " H=" << s.heads << " n_q=" << s.n_q << " n_kv=" << s.n_kv
    << " d_k=" << s.d_k << " d_v=" << s.d_v;
  if (s.kv_head_count() != s.heads) o << " H_kv=" << s.kv_head_count();
  return o.str();
}

xt::xtensor<double, 1> alibi_slopes(std::size_t heads) {
  if (heads == 0) throw Error("ALiBi slopes for 0 heads");
  std::size_t n = 1;
  while (n * 2 <= heads) n *= 2;
  xt::xtensor<double, 1> slopes = xt::xtensor<double, 1>::from_shape({heads});
  for (std::size_t h = 0; h < n; ++h) slopes(h) = std::exp2(-8.0 * double(h + 1) / double(n));
  for (std::size_t x = 0; n + x < heads; ++x) slopes(n + x) = std::exp2(-8.0 * double(2 * x + 1) / double(2 * n));
  return slopes;
}

void softcap_row_f32(float* s, std::size_t n, float c) { simd().softcap_f32(s, n, c); }
void softcap_row_f64(double* s, std::size_t n, double c) { simd().softcap_f64(s, n, c); }

std::string mask_name(const Mask& m) {
  struct {
    std::string operator()(const mask::None&) const { return "none"; }
    std::string operator()(const mask::Causal&) const { return "causal"; }
    std::string operator()(const mask::SlidingWindow& w) const {
      return "window:" + std::to_string(w.window);
    }
    std::string operator()(const mask::KeyPadding&) const { return "keypad"; }
    std::string operator()(const mask::Boolean&) const { return "bool"; }
    std::string operator()(const mask::AdditiveBias&) const { return "bias"; }
  } name;
  return std::visit(name, m);
}

std::string variants_name(const Options& opt) {
  std::string r;
  auto add = [&](const std::string& x) { r += (r.empty() ? "" : " ") + x; };
  if (opt.softcap) {
    std::ostringstream c;
    c << *opt.softcap;
    add("softcap:" + c.str());
  }
  if (opt.sinks) add("sinks");
  if (opt.alibi_slopes) add("alibi");
  if (opt.segments) add("segments");
  if (opt.kv_splits) add("kv-splits:" + std::to_string(opt.kv_splits));
  return r;
}

double Options::resolved_scale(const Shape& s) const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(s.d_k));
}

template <class S>
Shape Inputs<S>::shape() const {
  return {q.shape(0), q.shape(1), q.shape(2), k.shape(2), q.shape(3), v.shape(3), k.shape(1)};
}

namespace {

void fail(const std::string& what) { throw Error(what); }

template <class S>
void require_finite(const xt::xtensor<S, 4>& t, const char* name) {
  const S* p = t.data();
  for (std::size_t idx = 0, n = t.size(); idx < n; ++idx) {
    if (!std::isfinite(static_cast<double>(p[idx]))) {
      std::size_t d = t.shape(3), n2 = t.shape(2), h = t.shape(1);
      std::ostringstream o;
      o << name << " holds a non-finite value " << static_cast<double>(p[idx]) << " at [" << idx / (d * n2 * h)
        << ", " << idx / (d * n2) % h << ", " << idx / d % n2 << ", " << idx % d
        << "] (pass allow_nonfinite to accept it)";
      fail(o.str());
    }
  }
}

void require_extent(std::size_t got, std::size_t want, const std::string& what) {
  if (got != want)
    fail(what + " is " + std::to_string(got) + ", expected " + std::to_string(want));
}

// One value per query head, each finite (or -inf where `minus_inf_ok`).
void require_per_head(const xt::xtensor<double, 1>& t, const Shape& s, const std::string& what, bool minus_inf_ok) {
  require_extent(t.shape(0), s.heads, what + " length (one per query head)");
  for (std::size_t h = 0; h < s.heads; ++h)
    if (!std::isfinite(t(h)) && !(minus_inf_ok && t(h) == -std::numeric_limits<double>::infinity()))
      fail(what + " holds " + std::to_string(t(h)) + " for head " + std::to_string(h) + "; entries must be finite" +
           (minus_inf_ok ? " or -inf" : ""));
}

void validate_variants(const Shape& s, const Options& opt) {
  if (opt.softcap && !(std::isfinite(*opt.softcap) && *opt.softcap > 0))
    fail("softcap is " + std::to_string(*opt.softcap) + ", must be finite and > 0");
  if (opt.sinks) require_per_head(*opt.sinks, s, "sinks", true);
  if (opt.alibi_slopes) require_per_head(*opt.alibi_slopes, s, "ALiBi slopes", false);
  if (opt.segments) {
    const Segments& seg = *opt.segments;
    if (seg.shape(0) != 1 && seg.shape(0) != s.batch)
      fail("segments has " + std::to_string(seg.shape(0)) + " rows, expected 1 or the batch " + std::to_string(s.batch));
    require_extent(seg.shape(1), s.n_kv, "segments length (one document id per key token, n_kv)");
    if (s.n_kv >= (std::size_t(1) << 32)) fail("segments: n_kv must be below 2^32");
  }
}

}  // namespace

template <class S>
void validate(const Inputs<S>& in, const Options& opt) {
  const char* names[] = {"batch", "heads", "n", "d"};
  const std::pair<const xt::xtensor<S, 4>*, const char*> tensors[] = {
      {&in.q, "Q"}, {&in.k, "K"}, {&in.v, "V"}};
  for (auto [t, name] : tensors)
    for (std::size_t a = 0; a < 4; ++a)
      if (t->shape(a) == 0)
        fail(std::string(name) + " has a zero-sized dimension " + names[a] + " (axis " +
             std::to_string(a) + " of [batch, heads, n, d])");
  const std::string q_shape = " (Q is [" + std::to_string(in.q.shape(0)) + ", " +
                              std::to_string(in.q.shape(1)) + ", n_q, d_k])";
  require_extent(in.k.shape(0), in.q.shape(0), "K batch" + q_shape);
  require_extent(in.v.shape(0), in.q.shape(0), "V batch" + q_shape);
  if (in.q.shape(1) % in.k.shape(1) != 0)
    fail("Q has " + std::to_string(in.q.shape(1)) + " heads and K has " + std::to_string(in.k.shape(1)) +
         ": the query heads must be a multiple of the key/value heads (grouped-query attention)");
  require_extent(in.v.shape(1), in.k.shape(1), "V heads (V must have as many heads as K)");
  require_extent(in.k.shape(3), in.q.shape(3), "K d_k (last dimension of K must equal Q's d_k)");
  require_extent(in.v.shape(2), in.k.shape(2), "V n_kv (V must have as many rows as K)");
  const Shape s = in.shape();

  if (!opt.allow_nonfinite) {
    require_finite(in.q, "Q");
    require_finite(in.k, "K");
    require_finite(in.v, "V");
  }
  const double scale = opt.resolved_scale(s);
  if (!std::isfinite(scale) || scale < 0)
    fail("scale is " + std::to_string(scale) + ", must be finite and >= 0");
  if (opt.threads < 1 || opt.threads > 1024)
    fail("threads is " + std::to_string(opt.threads) + ", must be between 1 and 1024");
  validate_variants(s, opt);

  struct {
    const Shape& s;
    void operator()(const mask::None&) const {}
    void operator()(const mask::Causal&) const {}
    void operator()(const mask::SlidingWindow& w) const {
      if (w.window == 0) fail("mask window:0 sees no key; the window must be >= 1");
    }
    void operator()(const mask::KeyPadding& kp) const {
      require_extent(kp.valid_length.size(), s.batch, "keypad mask length (one valid length per batch)");
      for (std::size_t b = 0; b < s.batch; ++b)
        if (kp.valid_length[b] > s.n_kv)
          fail("keypad mask: valid length " + std::to_string(kp.valid_length[b]) + " of batch " +
               std::to_string(b) + " exceeds n_kv = " + std::to_string(s.n_kv));
    }
    void operator()(const mask::Boolean& m) const {
      require_extent(m.allowed.shape(0), s.n_q, "bool mask rows (must be n_q)");
      require_extent(m.allowed.shape(1), s.n_kv, "bool mask columns (must be n_kv)");
    }
    void operator()(const mask::AdditiveBias& m) const {
      require_extent(m.bias.shape(0), s.n_q, "bias mask rows (must be n_q)");
      require_extent(m.bias.shape(1), s.n_kv, "bias mask columns (must be n_kv)");
      for (std::size_t i = 0; i < s.n_q; ++i)
        for (std::size_t j = 0; j < s.n_kv; ++j) {
          double x = m.bias(i, j);
          if (std::isnan(x) || x == std::numeric_limits<double>::infinity())
            fail("bias mask holds " + std::to_string(x) + " at [" + std::to_string(i) + ", " +
                 std::to_string(j) + "]; entries must be finite or -inf");
        }
    }
  } check_mask{s};
  std::visit(check_mask, opt.mask);
}

template <class S>
void validate_backward(const Inputs<S>& in, const xt::xtensor<S, 4>& out, const xt::xtensor<double, 3>& lse,
                       const xt::xtensor<S, 4>& d_out, const Options& opt) {
  const Shape s = in.shape();
  const auto shape4 = [](const xt::xtensor<S, 4>& t) {
    return "[" + std::to_string(t.shape(0)) + ", " + std::to_string(t.shape(1)) + ", " + std::to_string(t.shape(2)) +
           ", " + std::to_string(t.shape(3)) + "]";
  };
  const std::string want = "[" + std::to_string(s.batch) + ", " + std::to_string(s.heads) + ", " +
                           std::to_string(s.n_q) + ", " + std::to_string(s.d_v) + "]";
  const std::array<std::size_t, 4> o_shape{s.batch, s.heads, s.n_q, s.d_v};
  const auto same = [&](const xt::xtensor<S, 4>& t) { return std::equal(o_shape.begin(), o_shape.end(), t.shape().begin()); };
  if (!same(d_out)) fail("the upstream gradient dO is " + shape4(d_out) + ", expected the output's shape " + want);
  if (!same(out)) fail("the saved forward output is " + shape4(out) + ", expected " + want);
  if (lse.shape(0) != s.batch || lse.shape(1) != s.heads || lse.shape(2) != s.n_q)
    fail("the saved logsumexp is [" + std::to_string(lse.shape(0)) + ", " + std::to_string(lse.shape(1)) + ", " +
         std::to_string(lse.shape(2)) + "], expected [B, H, n_q]");
  if (!opt.allow_nonfinite) require_finite(d_out, "dO");
  if (opt.need_dbias && !std::holds_alternative<mask::AdditiveBias>(opt.mask))
    fail("d(bias) asked for, but the mask is " + mask_name(opt.mask) + ", not an additive bias");
}

MaskView::MaskView(const Options& opt, const Shape& s)
    : mask_(&opt.mask), diag_(static_cast<std::ptrdiff_t>(s.n_kv) - static_cast<std::ptrdiff_t>(s.n_q)), n_kv_(s.n_kv) {
  if (auto* b = std::get_if<mask::AdditiveBias>(&opt.mask)) bias_ = b->bias.data();
  if (auto* a = std::get_if<mask::Boolean>(&opt.mask)) allowed_ = a->allowed.data();
  if (opt.alibi_slopes) slopes_ = opt.alibi_slopes->data();
  if (opt.sinks) sinks_ = opt.sinks->data();
  softcap_ = opt.softcap;
  if (opt.segments) {
    doc_ = opt.segments->data();
    doc_rows_ = opt.segments->shape(0);
    doc_first_.resize(doc_rows_ * n_kv_);
    doc_end_.resize(doc_rows_ * n_kv_);
    for (std::size_t r = 0; r < doc_rows_; ++r) {
      const std::int64_t* ids = doc_ + r * n_kv_;
      std::map<std::int64_t, std::pair<std::uint32_t, std::uint32_t>> span;  // id -> [first, end)
      for (std::size_t j = 0; j < n_kv_; ++j) {
        auto [it, fresh] = span.try_emplace(ids[j], std::uint32_t(j), std::uint32_t(j + 1));
        if (!fresh) {
          doc_split_ = doc_split_ || it->second.second != j;  // a second run of the same document
          it->second.second = std::uint32_t(j + 1);
        }
      }
      for (std::size_t j = 0; j < n_kv_; ++j) {
        doc_first_[r * n_kv_ + j] = span[ids[j]].first;
        doc_end_[r * n_kv_ + j] = span[ids[j]].second;
      }
    }
  }
  elementwise_ = has_offset() || slopes_ || softcap_ || doc_split_;
}

MaskView::Range MaskView::keys(std::size_t b, std::size_t i) const {
  const auto n = static_cast<std::ptrdiff_t>(n_kv_);
  // Last visible key for causal masks, clamped to [-1, n - 1].
  const std::ptrdiff_t last = std::clamp<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(i) + diag_, -1, n - 1);
  Range r{0, n_kv_};
  if (std::holds_alternative<mask::Causal>(*mask_)) {
    r = {0, static_cast<std::size_t>(last + 1)};
  } else if (auto* w = std::get_if<mask::SlidingWindow>(mask_)) {
    const std::ptrdiff_t first = static_cast<std::ptrdiff_t>(i) + diag_ - static_cast<std::ptrdiff_t>(w->window) + 1;
    const auto begin = static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(first, 0, n));
    r = {begin, std::max(begin, static_cast<std::size_t>(last + 1))};
  } else if (auto* kp = std::get_if<mask::KeyPadding>(mask_)) {
    r = {0, kp->valid_length[b]};
  }
  if (doc_) {
    // The query's own document, intersected (token i + n_kv - n_q; a query
    // before the first key token, n_q > n_kv, belongs to no document).
    const std::ptrdiff_t token = static_cast<std::ptrdiff_t>(i) + diag_;
    if (token < 0) return {0, 0};
    const std::size_t x = (doc_rows_ > 1 ? b * n_kv_ : 0) + static_cast<std::size_t>(token);
    r.begin = std::max<std::size_t>(r.begin, doc_first_[x]);
    r.end = std::min<std::size_t>(r.end, doc_end_[x]);
    if (r.end < r.begin) r.end = r.begin;
  }
  return r;
}

#define ATTN_INSTANTIATE(S)                      \
  template struct Inputs<S>;                     \
  template void validate(const Inputs<S>&, const Options&);                                           \
  template void validate_backward(const Inputs<S>&, const xt::xtensor<S, 4>&, const xt::xtensor<double, 3>&, \
                                  const xt::xtensor<S, 4>&, const Options&);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn
