// Every input error of the suite: one line naming what is wrong. Its own
// header so that code without the numeric types (the .npy reader, which the
// clang-built fuzz target compiles) can throw it.
#pragma once

#include <stdexcept>

namespace attn {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A combination a backend does not claim to support (a plugin's
// capabilities, attn/registry/plugin.hpp): every table reports it as "not supported",
// never as passed or failed.
struct Unsupported : Error {
  using Error::Error;
};

}  // namespace attn
