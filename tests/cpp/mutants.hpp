// Deliberately broken backends, each with one classic bug, to prove that
// the properties catch real mistakes. Test tree only: never registered.
#pragma once

#include <vector>

#include "attn/registry/registry.hpp"

namespace attn::props {

struct Mutant {
  BackendInfo handle;
  std::string_view bug;  // what is wrong, in a line
};

std::vector<Mutant> mutants();

}  // namespace attn::props
