// attn-lab demo: the worked examples and one random problem through every
// backend and precision, each checked by verify().
#include <cstdio>

#include "attn/core/alloc_counter.hpp"
#include "attn/verify/examples.hpp"
#include "attn/core/random.hpp"
#include "attn/verify/verify.hpp"
#include "cli/command.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  const std::uint64_t seed = args.count("--seed", 0);
  struct Problem {
    std::string name;
    Inputs<double> in;
    Options opt;
  };
  std::vector<Problem> problems;
  for (auto& e : worked_examples()) problems.push_back({e.id + " " + e.title, e.in, e.opt});
  Options causal;
  causal.mask = mask::Causal{};
  const Shape rs{1, 2, 64, 80, 32, 24};
  problems.push_back({"random " + to_string(rs) + " causal, seed " + std::to_string(seed),
                      random_inputs(rs, seed, 1.0), causal});

  std::printf("%-10s %-6s %-6s %12s %12s %12s %12s  %s\n", "backend", "prec", "accum", "seconds", "peak_bytes",
              "row_error", "row_tol", "problem");
  bool all_within = true;
  for (auto& p : problems)
    for (const BackendInfo& backend : all_backends())
      for (const PrecisionInfo& precision : precisions()) {
        const Accumulate acc = precision.default_accumulate;
        std::size_t peak = 0;
        heap::Watch watch;
        RunReport r;
        try {
          r = backend.run(precision.name, acc, p.in, p.opt,
                          {[&] { watch = heap::Watch{}; }, [&] { peak = watch.peak_growth(); }});
        } catch (const Unsupported&) {
          std::printf("%-10s %-6s %-6s %12s %12s %12s %12s  %s\n", backend.name.c_str(),
                      std::string(precision.name).c_str(), std::string(accumulate_name(acc)).c_str(), "-", "-",
                      "-", "-", (p.name + "  not supported").c_str());
          continue;
        }
        const Check c = verify(r, p.opt);
        all_within = all_within && c.passed();
        std::printf("%-10s %-6s %-6s %12.6f %12zu %12.3g %12.3g  %s%s\n", backend.name.c_str(),
                    std::string(precision.name).c_str(), std::string(accumulate_name(acc)).c_str(), r.seconds, peak,
                    c.out_tight.error, c.out_tight.tolerance, p.name.c_str(),
                    c.passed() ? (c.tight_informative ? "" : "  (uninformative)") : "  EXCEEDED");
      }
  std::printf("row_error, row_tol: the output row nearest its tight tolerance (each row is judged by its own)\n");
  std::printf("%s\n", all_within ? "every error is within its tight tolerance and its worst-case bound"
                                 : "SOME ERROR EXCEEDS ITS TOLERANCE");
  return all_within ? 0 : 1;
}

}  // namespace

extern const Command demo_command = {
    "demo",
    "  attn-lab demo [--seed S]   the worked examples (EXAMPLES.md) and one random problem\n"
    "                             through every backend and precision, as a table\n",
    R"(attn-lab demo [--seed S]: every worked example of docs/EXAMPLES.md and one random causal
cross-attention problem (seed S, default 0) through every backend in every precision at its
default accumulation: seconds, measured peak heap, max |O - truth| and the tight tolerance
(probabilistic bound and 2x the baseline, see attend --help); exit 1 if any error exceeds it
or the worst-case bound. A plugin's row for a combination it does not claim (--plugin, see
attn-lab list) says "not supported".

examples:
  attn-lab demo
  attn-lab demo --seed 3
)",
    {"--seed"},
    {},
    run};

}  // namespace attn::cli
