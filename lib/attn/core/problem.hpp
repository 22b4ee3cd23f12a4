// The input contract of the suite: Shape, Mask, Options and Inputs, and the
// one validate() that every entry point calls before a backend runs.
//
//   O = softmax(Q K^T * scale + mask) V,   scale = 1/sqrt(d_k) by default
//   q: [B, H, n_q, d_k]   k: [B, H_kv, n_kv, d_k]   v: [B, H_kv, n_kv, d_v]
// H = g H_kv: query head h reads K/V head h / g (grouped-query attention;
// H_kv = H is multi-head, H_kv = 1 multi-query attention).
//
// The score of query i and key j in head h, in this order (Options):
//   s = scale q_i . k_j
//   s = c tanh(s / c)                         soft-capping (Options::softcap)
//   s = s + slope_h (j - i - (n_kv - n_q))    ALiBi (Options::alibi_slopes)
//   s = s + bias_ij, or -inf where masked     the Mask, and document masking
//                                              (Options::segments)
// and the softmax's denominator of a row of head h gains exp(sink_h)
// (attention sinks, Options::sinks): weights sum to less than 1, and a
// fully masked row has output 0, weights 0 and logsumexp sink_h.
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "attn/core/error.hpp"
#include "attn/core/mask.hpp"
#include "attn/core/precision.hpp"
#include "attn/core/xt.hpp"

namespace attn {

struct Shape {
  std::size_t batch = 1, heads = 1, n_q = 1, n_kv = 1, d_k = 1, d_v = 1;
  std::size_t kv_heads = 0;  // heads of K and V; 0: as many as Q's
  constexpr std::size_t kv_head_count() const { return kv_heads ? kv_heads : heads; }
  // Query heads per K/V head (g); query head h reads K/V head h / group().
  constexpr std::size_t group() const { return heads / kv_head_count(); }
  constexpr bool operator==(const Shape& o) const {
    return batch == o.batch && heads == o.heads && n_q == o.n_q && n_kv == o.n_kv && d_k == o.d_k && d_v == o.d_v &&
           kv_head_count() == o.kv_head_count();
  }
};
std::string to_string(const Shape& s);  // "B=1 H=2 n_q=300 n_kv=517 d_k=64 d_v=48" (+ " H_kv=1" when grouped)

// Segment (document) ids of packed sequences: [1 or B, n_kv], one id per
// token; a query sees only keys of its own document. Query i is token
// i + n_kv - n_q (the last n_q tokens, as the causal mask aligns them).
using Segments = xt::xtensor<std::int64_t, 2>;

// The ALiBi paper's slopes for `heads` heads (Press et al. 2022, and its
// code for head counts that are not powers of two): 2^(-8 h' / n) for
// h' = 1 .. n, n the largest power of two <= heads, then the odd-numbered
// slopes of 2n heads for the rest.
xt::xtensor<double, 1> alibi_slopes(std::size_t heads);


struct Options {
  std::optional<double> scale;  // default 1/sqrt(d_k)
  Mask mask = mask::None{};
  bool need_weights = false;  // return the [B, H, n_q, n_kv] weights (tests, small shapes)
  bool need_lse = false;      // return the [B, H, n_q] logsumexp of the scaled, masked scores
  bool allow_nonfinite = false;  // accept Inf/NaN in Q, K, V (for stability experiments)
  std::size_t block_q = 0;    // query block B_q of blocked backends; 0 = the backend's default
  std::size_t block_k = 0;    // key block B_k of streaming backends; 0 = the backend's default
  std::size_t threads = 1;    // worker threads of backends that thread themselves (streaming); >= 1
  bool need_dbias = false;    // backward: also return d(bias) of an additive bias mask

  // Variants of the scores and the softmax (see the top of this file); each
  // composes with the others and with every mask.
  std::optional<double> softcap;                     // c > 0: s -> c tanh(s / c), before ALiBi and the mask
  std::optional<xt::xtensor<double, 1>> sinks;       // [H] sink logits (-inf: no sink for that head)
  std::optional<xt::xtensor<double, 1>> alibi_slopes;  // [H] ALiBi slopes (alibi_slopes(H): the paper's)
  std::optional<Segments> segments;                  // document ids: queries see keys of their own document
  // Split-KV decoding of backends that split the keys among workers
  // (streaming): the number of key chunks per query block; 0 lets the
  // backend choose from the shape and the threads (streaming.cpp, `plan`).
  std::size_t kv_splits = 0;

  double resolved_scale(const Shape& s) const;
};

// The variants an Options holds, for labels: "" (none), or e.g.
// "softcap:30 sinks alibi segments kv-splits:4".
std::string variants_name(const Options& opt);

template <class S>
struct Inputs {
  xt::xtensor<S, 4> q, k, v;
  Shape shape() const;
};

// Throws Error naming the offending tensor and dimension for any input the
// contract does not cover: rank/extent mismatches, zero-sized dimensions,
// masks of the wrong shape, non-finite values (unless allowed), bad scale.
template <class S>
void validate(const Inputs<S>& in, const Options& opt);

// What the backward pass takes besides the inputs: the upstream gradient dO
// must be [B, H, n_q, d_v] and finite (unless allowed), the forward's output
// of that shape and its logsumexp [B, H, n_q]; need_dbias needs an additive
// bias mask. Throws Error naming what is wrong.
template <class S>
void validate_backward(const Inputs<S>& in, const xt::xtensor<S, 4>& out, const xt::xtensor<double, 3>& lse,
                       const xt::xtensor<S, 4>& d_out, const Options& opt);

// A tensor converted elementwise to another type (rounded to nearest even).
template <class To, class From, std::size_t N>
xt::xtensor<To, N> convert_tensor(const xt::xtensor<From, N>& t) {
  xt::xtensor<To, N> r(t.shape());
  const From* src = t.data();
  To* dst = r.data();
  for (std::size_t i = 0, n = t.size(); i < n; ++i) dst[i] = convert<To>(src[i]);
  return r;
}

template <class To, class From>
Inputs<To> convert_inputs(const Inputs<From>& in) {
  return {convert_tensor<To>(in.q), convert_tensor<To>(in.k), convert_tensor<To>(in.v)};
}

// The mask and the score variants as a backend reads them, row by row: the
// contiguous range of keys the structural part (mask and documents) allows,
// then apply() finishes a row of scaled scores (soft-cap, ALiBi, bias, the
// elementwise masks). The one definition of a score of this file's header.
class MaskView {
 public:
  MaskView(const Options& opt, const Shape& s);

  struct Range {
    std::size_t begin = 0, end = 0;
    std::size_t size() const { return end > begin ? end - begin : 0; }
  };
  // Keys of row (b, i) that may be visible; all keys outside are masked.
  Range keys(std::size_t b, std::size_t i) const;
  // True when apply() must visit each score in the range (otherwise a row
  // of keys() needs nothing but its scaled scores).
  bool elementwise() const { return elementwise_; }
  // True when the mask's own elementwise part (bias or boolean) is present.
  bool has_offset() const { return bias_ != nullptr || allowed_ != nullptr; }
  // 0 or -inf (boolean mask) or the bias (additive mask).
  double offset(std::size_t i, std::size_t j) const {
    if (bias_) return bias_[i * n_kv_ + j];
    if (allowed_) return allowed_[i * n_kv_ + j] ? 0.0 : -std::numeric_limits<double>::infinity();
    return 0.0;
  }
  // ALiBi's term of (h, i, j): slope_h (j - i - (n_kv - n_q)) rounded once to double; 0 without.
  double alibi(std::size_t h, std::size_t i, std::size_t j) const {
    return slopes_ ? slopes_[h] * double(std::ptrdiff_t(j) - std::ptrdiff_t(i) - diag_) : 0.0;
  }
  // The sink logit of query head h, -inf without sinks.
  double sink(std::size_t h) const { return sinks_ ? sinks_[h] : -std::numeric_limits<double>::infinity(); }
  bool has_sinks() const { return sinks_ != nullptr; }
  const std::optional<double>& softcap() const { return softcap_; }
  // Query i of batch b sees key j (range, documents and the boolean/-inf bias).
  bool visible(std::size_t b, std::size_t i, std::size_t j) const {
    const Range r = keys(b, i);
    return j >= r.begin && j < r.end && same_document(b, i, j) && offset(i, j) != -std::numeric_limits<double>::infinity();
  }

  // s[c], the scaled score scale q_i . k_j of key j = j0 + c of row (b, h, i),
  // for c < cols, becomes the final score (top of this file) in A: keys
  // outside keys(b, i) -inf; soft-cap first, so a masked key stays -inf.
  // `simd`: softcap_row's.
  template <class A>
  void apply(A* s, std::size_t b, std::size_t h, std::size_t i, std::size_t j0, std::size_t cols,
             bool simd = true) const;

 private:
  bool same_document(std::size_t b, std::size_t i, std::size_t j) const {
    if (!doc_) return true;
    const std::int64_t* ids = doc_ + (doc_rows_ > 1 ? b * n_kv_ : 0);
    return ids[std::size_t(std::ptrdiff_t(i) + diag_)] == ids[j];
  }

  const Mask* mask_;
  std::ptrdiff_t diag_;  // n_kv - n_q: the bottom-right alignment offset
  std::size_t n_kv_;
  const double* bias_ = nullptr;
  const std::uint8_t* allowed_ = nullptr;
  const double* slopes_ = nullptr;
  const double* sinks_ = nullptr;
  std::optional<double> softcap_;
  const std::int64_t* doc_ = nullptr;  // segment ids [doc_rows_, n_kv]
  std::size_t doc_rows_ = 0;
  // Per (segment row, token): the first and one past the last token of its
  // document; doc_split_: some document is not one contiguous run, so its
  // range also holds other documents' keys, masked elementwise.
  std::vector<std::uint32_t> doc_first_, doc_end_;
  bool doc_split_ = false;
  bool elementwise_ = false;
};

// c tanh(s / c) of n scores in place, in A: for float and double with
// `simd` the dispatched vector kernel (attn/simd/simd.hpp, xsimd's tanh, whose
// result may differ in the last bit from the scalar tail's, so it depends
// on where a row starts), else tanh_of element by element (the naive
// backend's textbook order).
void softcap_row_f32(float* s, std::size_t n, float c);
void softcap_row_f64(double* s, std::size_t n, double c);
template <class A>
void softcap_row(A* s, std::size_t n, double c, bool simd = true) {
  if constexpr (std::is_same_v<A, float>) {
    if (simd) return softcap_row_f32(s, n, float(c));
    for (std::size_t j = 0; j < n; ++j) s[j] = float(c) * std::tanh(s[j] / float(c));
  } else if constexpr (std::is_same_v<A, double>) {
    if (simd) return softcap_row_f64(s, n, c);
    for (std::size_t j = 0; j < n; ++j) s[j] = c * std::tanh(s[j] / c);
  } else if constexpr (is_narrow_float<A>) {
    // in float, rounded once (fp16 cannot hold a cap above 65504)
    const float cap = float(c);
    for (std::size_t j = 0; j < n; ++j) s[j] = A(cap * std::tanh(static_cast<float>(s[j]) / cap));
  } else {
    const A cap = convert<A>(c);
    for (std::size_t j = 0; j < n; ++j) s[j] = A(cap * tanh_of<A>(A(s[j] / cap)));
  }
}

template <class A>
void MaskView::apply(A* s, std::size_t b, std::size_t h, std::size_t i, std::size_t j0, std::size_t cols,
                     bool simd) const {
  const Range keys = this->keys(b, i);
  const A minus_inf = neg_infinity<A>();
  const std::size_t lo = std::clamp(keys.begin, j0, j0 + cols), hi = std::clamp(keys.end, lo, j0 + cols);
  std::fill(s, s + (lo - j0), minus_inf);
  std::fill(s + (hi - j0), s + cols, minus_inf);
  if (softcap_) softcap_row(s + (lo - j0), hi - lo, *softcap_, simd);
  if (!slopes_ && !has_offset() && !doc_split_) return;
  for (std::size_t j = lo; j < hi; ++j) {
    A& x = s[j - j0];
    if (slopes_) x += convert<A>(alibi(h, i, j));
    if (has_offset()) x += convert<A>(offset(i, j));
    if (doc_split_ && !same_document(b, i, j)) x = minus_inf;
  }
}

}  // namespace attn
