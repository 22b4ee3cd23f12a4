// Every input error of the suite: one line naming what is wrong. Its own
// header so that code without the numeric types (the .npy reader, which the
// clang-built fuzz target compiles) can throw it.
#pragma once

#include <stdexcept>

namespace attn {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace attn
