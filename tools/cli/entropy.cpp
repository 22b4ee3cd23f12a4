// attn-lab entropy: EXAMPLES.md E7.
#include "attn/io/npy.hpp"
#include "cli/command.hpp"
#include "studies/studies.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("entropy needs --out FILE.json");
  const BackendInfo& backend = args.has("--backend") ? backend_info(args.str("--backend")) : baseline_backend();
  const PrecisionInfo& precision = precision_info(args.str("--precision", "fp64"));
  const std::size_t draws = args.count("--draws", 2000);
  if (draws < 2) throw Error("--draws must be at least 2");
  const std::vector<std::size_t> dims = {8, 16, 32, 64, 128, 256, 512, 1024};
  const auto rows = entropy_study(backend, precision, dims, draws, 10, /*seed=*/700);
  write_file_atomic(args.str("--out"), dump(entropy_json(rows, backend.name, precision.name, draws, 10, 700)) + "\n");
  return 0;
}

}  // namespace

extern const Command entropy_command = {
    "entropy",
    "  attn-lab entropy [--backend B] [--precision P] [--draws N] --out FILE.json\n"
    "                             EXAMPLES.md E7: mean softmax entropy with and without the\n"
    "                             1/sqrt(d_k) scale, and var(q.k), over d_k = 8 ... 1024\n",
    R"(attn-lab entropy [--backend B] [--precision P] [--draws N] --out FILE.json: EXAMPLES.md E7.
N independent draws (default 2000) of one query over 10 keys per d_k = 8 ... 1024, iid N(0, 1),
through backend B (default: the baseline, naive) in precision P (default fp64): the mean softmax entropy with
and without the 1/sqrt(d_k) scale, their standard errors, and the variance of q.k. --force
replaces FILE.

examples:
  attn-lab entropy --draws 500 --out entropy.json
)",
    {"--backend", "--precision", "--draws", "--out"},
    {"--force"},
    run};

}  // namespace attn::cli
