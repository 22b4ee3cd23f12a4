// attn-lab's commands: a table of entries, one file per command (its options,
// help and examples beside its code). main.cpp reads the command name, builds
// Args from the entry's option sets and calls it; `attn-lab --help` lists the
// entries. Adding a command is one file defining its entry plus one line in
// commands.cpp.
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "attn/registry/registry.hpp"
#include "cli/args.hpp"
#include "attn/io/json.hpp"

namespace attn::cli {

struct Command {
  std::string_view name;
  std::string_view summary;  // its lines in `attn-lab --help` (synopsis and a sentence)
  std::string_view help;     // `attn-lab NAME --help`: options, then an "examples:" section
  std::set<std::string> valued, flags;  // --help is added to every command
  int (*run)(const Args&);
};

// The table, in the order `attn-lab --help` lists it.
const std::vector<Command>& commands();

// Commands written in Python (the tooling package python/attention_lab: the
// statistics and plots of SciPy and matplotlib): attn-lab runs
// `.venv/bin/python3 -m MODULE` (the project's environment) with the command's arguments unchanged and the
// package on PYTHONPATH; the module parses them and has its own --help.
struct ScriptCommand {
  std::string_view name;
  std::string_view summary;  // its lines in `attn-lab --help`
  std::string_view module;   // e.g. attention_lab.compare (under ATTN_PYTHON_DIR, the source tree's python/)
};
const std::vector<ScriptCommand>& script_commands();

// --- Helpers the commands share ----------------------------------------------------

// Existing outputs are kept unless --force: a run never replaces a file the
// user had by accident (the write itself is atomic either way).
void refuse_overwrite(const Args& args, std::initializer_list<const char*> outputs);
// --accumulate, or the precision's default accumulation.
Accumulate accumulate_option(const Args& args, const PrecisionInfo& p);
// --threads (default 1), also given to OpenBLAS; validate() rejects 0.
std::size_t threads_option(const Args& args);
// Inputs a command draws (--random) whose `values` fp64 values alone pass the memory cap are refused with their
// size before anything is allocated ("--random DIMS needs N MiB for WHAT, over the memory cap ..."), not left to
// the allocator, whose overcommit lets a shape that cannot fit reach the OOM killer while the values are drawn.
// `values` in long double: a product of the counts may pass 2^64.
void refuse_oversized_inputs(const Args& args, std::string_view what, long double values);
// The variants' options (problem.hpp) a command shares, and their help:
//   --softcap C, --sinks SINKS.npy, --alibi, --alibi-slopes SLOPES.npy,
//   --segments IDS.npy, --kv-splits K
// each read and checked against `heads` and `batch` into `opt` (validate()
// checks the rest against the inputs).
inline const std::set<std::string> kVariantValued = {"--softcap", "--sinks", "--alibi-slopes", "--segments",
                                                      "--kv-splits"};
inline const std::set<std::string> kVariantFlags = {"--alibi"};
void variant_options(const Args& args, Options& opt, std::size_t heads, std::size_t batch);
extern const std::string_view kVariantHelp;
// The union of option sets (a command's own and kVariant*).
std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b);
// Prints `j` as one line on stdout.
void print_json(const Json& j);
// Saves a tensor padded to rank 4 (or 3 for the logsumexp) with the
// leading unit dimensions the inputs did not have removed: `rank` is the
// rank the saved tensor gets.
void save_with_rank(const std::string& path, const xt::xtensor<double, 4>& t, std::size_t rank);
void save_with_rank(const std::string& path, const xt::xtensor<double, 3>& t, std::size_t rank);

}  // namespace attn::cli
