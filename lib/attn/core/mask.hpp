// The masks of the suite, apart from the numeric types (problem.hpp), so
// that the CLI's parsing builds without them (the clang-built fuzz target).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "attn/core/xt.hpp"

namespace attn {

namespace mask {
struct None {};
// Query i sees key j iff j <= i + n_kv - n_q (aligned bottom-right).
struct Causal {};
// Causal, and only the last `window` keys: i + off - window < j <= i + off,
// off = n_kv - n_q. window = 1 sees only the aligned key itself.
struct SlidingWindow {
  std::size_t window = 1;
};
// Keys j < valid_length[b] are visible in batch b; a length of 0 masks the row.
struct KeyPadding {
  std::vector<std::size_t> valid_length;
};
// allowed[i, j] != 0 means query i sees key j; broadcast over batch and heads.
struct Boolean {
  xt::xtensor<std::uint8_t, 2> allowed;
};
// bias[i, j] is added to the scaled score (ALiBi-style); -inf masks the key.
// Broadcast over batch and heads.
struct AdditiveBias {
  xt::xtensor<double, 2> bias;
};
}  // namespace mask

using Mask = std::variant<mask::None, mask::Causal, mask::SlidingWindow, mask::KeyPadding,
                          mask::Boolean, mask::AdditiveBias>;
std::string mask_name(const Mask& m);  // "none", "causal", "window:16", "keypad", "bool", "bias"

}  // namespace attn
