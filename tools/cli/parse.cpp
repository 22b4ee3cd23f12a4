#include "cli/parse.hpp"

#include <cmath>
#include <sstream>

#include "attn/io/npy.hpp"

namespace attn::cli {

std::vector<std::size_t> parse_counts(const std::string& s, std::size_t n, const std::string& what,
                                      const std::string& form) {
  std::vector<std::size_t> dims;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) dims.push_back(Args::parse_count(part, what));
  if (dims.size() != n)
    throw Error(what + " wants " + form + " (" + std::to_string(n) + " numbers), got '" + s + "'");
  return dims;
}

Mask parse_mask(const std::string& m, std::size_t batch) {
  const auto colon = m.find(':');
  const std::string kind = m.substr(0, colon), arg = colon == std::string::npos ? "" : m.substr(colon + 1);
  if (m == "none") return mask::None{};
  if (m == "causal") return mask::Causal{};
  if (kind == "window" && !arg.empty()) return mask::SlidingWindow{Args::parse_count(arg, "--mask window")};
  if (kind == "keypad" && !arg.empty()) {
    auto lengths = load_npy_1d(arg, "--mask keypad");
    mask::KeyPadding kp;
    for (double x : lengths) {
      if (!(x >= 0) || x != std::floor(x) || x > 0x1p53)
        throw Error("--mask keypad " + arg + ": lengths must be non-negative integers");
      kp.valid_length.push_back(static_cast<std::size_t>(x));
    }
    if (kp.valid_length.size() != batch)
      throw Error("--mask keypad " + arg + ": has " + std::to_string(kp.valid_length.size()) +
                  " lengths, expected one per batch (" + std::to_string(batch) + ")");
    return kp;
  }
  if (kind == "bool" && !arg.empty()) {
    auto a = load_npy_2d(arg, "--mask bool");
    mask::Boolean b{xt::xtensor<std::uint8_t, 2>::from_shape(a.shape())};
    for (std::size_t i = 0; i < a.size(); ++i) b.allowed.data()[i] = a.data()[i] != 0;
    return b;
  }
  if (kind == "bias" && !arg.empty()) return mask::AdditiveBias{load_npy_2d(arg, "--mask bias")};
  throw Error("--mask '" + m + "' is not one of none, causal, window:W, keypad:FILE, bool:FILE, bias:FILE");
}

}  // namespace attn::cli
