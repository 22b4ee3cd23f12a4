// attn-lab accuracy: the accuracy sweep behind the accuracy report.
#include <cstdio>

#include "attn/npy.hpp"
#include "cli/command.hpp"
#include "studies/studies.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("accuracy needs --out FILE.json");
  const auto problems = accuracy_problems(args.str("--profile", "quick"));
  const Json j = accuracy_sweep(problems, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  write_file_atomic(args.str("--out"), dump(j) + "\n");
  return 0;
}

}  // namespace

extern const Command accuracy_command = {
    "accuracy",
    "  attn-lab accuracy [--profile smoke|quick|full] --out FILE.json\n"
    "                             error of every backend x precision x accumulation against the\n"
    "                             ground truth over n, d_k, mask and logit scale\n",
    R"(attn-lab accuracy [--profile smoke|quick|full] --out FILE.json: every backend (but the exact one)
x precision x accumulation against the ground truth of verify() (50 digits where affordable)
over n = 16 ... 1024 (16, 64 smoke; 4096 full), d = 64 (16 ... 256), no mask and causal, logit scales 1 ...
1000, plus emulated FP8 (e4m3, e5m2); the gradients of every backend with a backward pass
(n <= 256 and n = 1024 at unit logits without a mask; every problem in full) against
50 digits or fp64 with its bound. Progress on stderr; --force replaces FILE.

examples:
  attn-lab accuracy --profile smoke --out accuracy.json
)",
    {"--profile", "--out"},
    {"--force"},
    run};

}  // namespace attn::cli
