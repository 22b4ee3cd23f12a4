// attn-lab accuracy: the accuracy sweep behind the accuracy report.
#include <cstdio>
#include <sstream>

#include "attn/backends/reference.hpp"

#include "attn/io/npy.hpp"
#include "cli/command.hpp"
#include "studies/studies.hpp"

namespace attn::cli {
namespace {

// --problems 0,3,7: those problems of the profile's list (a shard of scripts/run --plan), each with the seeds
// and points it has in the whole sweep.
std::vector<AccuracyProblem> chosen(const std::vector<AccuracyProblem>& all, const std::string& list) {
  if (list.empty()) return all;
  std::vector<AccuracyProblem> some;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0, i = 0;
    try {
      i = std::stoul(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || item[0] == '-')
      throw Error("--problems: '" + item + "' is not a problem index (0 to " + std::to_string(all.size() - 1) + ")");
    if (i >= all.size())
      throw Error("--problems: " + item + " is beyond this profile's " + std::to_string(all.size()) + " problems");
    some.push_back(all[i]);
  }
  return some;
}

int run(const Args& args) {
  const auto all = accuracy_problems(args.str("--profile", "quick"));
  if (args.flag("--list")) {  // the plan's view: each problem with its cost model's figures
    for (const AccuracyProblem& pr : all) {
      const Shape s{1, 1, pr.n, pr.n, pr.d, pr.d};
      print_json(Json{{"index", pr.index}, {"n", pr.n}, {"d", pr.d}, {"causal", pr.causal},
                      {"logit_scale", pr.logit_scale}, {"backward", pr.backward}, {"flops", flops(s, pr.causal)},
                      {"reference_cost", backends::reference_cost(s)},
                      {"reference_budget", backends::reference_budget}});
    }
    return 0;
  }
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("accuracy needs --out FILE.json");
  const auto problems = chosen(all, args.str("--problems"));
  const Json j = accuracy_sweep(problems, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  write_file_atomic(args.str("--out"), dump(j) + "\n");
  return 0;
}

}  // namespace

extern const Command accuracy_command = {
    "accuracy",
    "  attn-lab accuracy [--profile smoke|quick|full] [--problems I,J,...] --out FILE.json | --list\n"
    "                             error of every backend x precision x accumulation against the\n"
    "                             ground truth over n, d_k, mask and logit scale\n",
    R"(attn-lab accuracy [--profile smoke|quick|full] --out FILE.json: every backend (but the exact one)
x precision x accumulation against the ground truth of verify() (independent.hpp: 50 digits where
affordable, else double-double or fp64 with its bound), output, logsumexp and weights, each row by
its own tolerance, over n = 16 ... 1024 (16, 64 smoke; 4096 full), d = 64 (16 ... 256), no mask and
causal, logit scales 1 ... 1000, plus B = 2, H = 4, d_k = 64, d_v = 32 with heads of V scales 1 to
1e3 (n = 64, 128, 256 in smoke, quick, full; logit scales 1 and 100), plus emulated FP8 (e4m3, e5m2); the gradients of every backend
with a backward pass (n <= 256 and n = 1024 at unit logits without a mask; every problem in full;
bf16/fp16 outputs also by the distribution verdict, the internal error beneath the output's rounding;
a true gradient beyond the storage's range is listed as not representable). Uninformative verdicts
(a row's tolerance reaches its output) are flagged. Progress on stderr; --force replaces FILE.
  --problems I,J,...  only these problems of the profile's list (0-based; a shard of scripts/run --plan):
                      each with the seeds and points it has in the whole sweep
  --list              run nothing: one JSON line per problem (index, n, d, mask, logit scale, whether its
                      gradients are checked, FLOP, the 50-digit reference's cost), for scripts/run --plan

examples:
  attn-lab accuracy --profile smoke --out accuracy.json
  attn-lab accuracy --profile smoke --list
)",
    {"--profile", "--out", "--problems"},
    {"--force", "--list"},
    run};

}  // namespace attn::cli
