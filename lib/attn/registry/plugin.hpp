// Kernels written elsewhere, loaded from shared libraries at run time
// through the C ABI of include/attn/plugin.h: each kernel of a library
// becomes a registry row (registry.hpp) that is listed, run, verified and
// benchmarked like a built-in backend. A combination outside the kernel's
// claimed capabilities throws Unsupported (error.hpp), which every table
// reports as "not supported".
#pragma once

#include <string>
#include <vector>

#include "attn/registry/registry.hpp"

namespace attn {

// dlopen()s the library at `path` and adds a row for each kernel it exports
// (attn_plugin_get(0), (1), ... until NULL); returns their names. Loading the
// same file again adds nothing and returns the same names. Throws Error
// naming the file and what is wrong: no such file, not loadable, no
// attn_plugin_get symbol, no kernel, another ABI version, a bad name or
// missing run function, or a name that is registered already.
std::vector<std::string> load_plugin(const std::string& path);

// The libraries listed in ATTN_PLUGINS (paths separated by ':'), loaded as
// load_plugin does; what the test executables call first. Returns the
// kernels' names; throws Error for the first bad library.
std::vector<std::string> load_plugins_from_env();

// The capability flags of include/attn/plugin.h as words, e.g.
// "fp64 fp32 acc:fp64 causal window ... lse" (attn-lab list).
std::string plugin_capability_names(unsigned long long capabilities);
}  // namespace attn
struct attn_plugin;
namespace attn {
// The same for a kernel, with its per-storage accumulations ("fp32@fp32").
std::string plugin_capability_names(const attn_plugin& kernel);

}  // namespace attn
