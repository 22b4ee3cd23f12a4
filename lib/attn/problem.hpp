// The input contract of the suite: Shape, Mask, Options and Inputs, and the
// one validate() that every entry point calls before a backend runs.
//
//   O = softmax(Q K^T * scale + mask) V,   scale = 1/sqrt(d_k) by default
//   q: [B, H, n_q, d_k]   k: [B, H, n_kv, d_k]   v: [B, H, n_kv, d_v]
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "attn/error.hpp"
#include "attn/mask.hpp"
#include "attn/precision.hpp"
#include "attn/xt.hpp"

namespace attn {

struct Shape {
  std::size_t batch = 1, heads = 1, n_q = 1, n_kv = 1, d_k = 1, d_v = 1;
  constexpr bool operator==(const Shape&) const = default;
};
std::string to_string(const Shape& s);  // "B=1 H=2 n_q=300 n_kv=517 d_k=64 d_v=48"


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

  double resolved_scale(const Shape& s) const;
};

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

// The mask as a backend reads it, row by row: the contiguous range of keys
// the structural part allows, then an elementwise offset (0, -inf or bias)
// where the mask is elementwise.
class MaskView {
 public:
  MaskView(const Mask& m, const Shape& s);

  struct Range {
    std::size_t begin = 0, end = 0;
    std::size_t size() const { return end > begin ? end - begin : 0; }
  };
  // Keys of row (b, i) that may be visible; all keys outside are masked.
  Range keys(std::size_t b, std::size_t i) const;
  // True when offset() must be added to each score in the range.
  bool elementwise() const { return bias_ != nullptr || allowed_ != nullptr; }
  // 0 or -inf (boolean mask) or the bias (additive mask).
  double offset(std::size_t i, std::size_t j) const {
    if (bias_) return bias_[i * n_kv_ + j];
    return allowed_[i * n_kv_ + j] ? 0.0 : -std::numeric_limits<double>::infinity();
  }

 private:
  const Mask* mask_;
  std::ptrdiff_t diag_;  // n_kv - n_q: the bottom-right alignment offset
  std::size_t n_kv_;
  const double* bias_ = nullptr;
  const std::uint8_t* allowed_ = nullptr;
};

}  // namespace attn
