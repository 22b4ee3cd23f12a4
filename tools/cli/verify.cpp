// attn-lab verify: the verdict on a plugin's kernels (verify/plugin_verify.hpp).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>

#include "attn/registry/registry.hpp"
#include "cli/command.hpp"
#include "verify/plugin_verify.hpp"

namespace attn::cli {
namespace {

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot find this executable (/proc/self/exe) to run the verification's workers");
  return std::string(buf, std::size_t(n));
}

int run(const Args& args) {
  if (args.has("--plugin") == args.has("--backend"))
    throw Error("verify needs --plugin PATH (the library to verify) or --backend NAME (a built-in backend)");
  plugin_verify::Settings s;
  const std::string given = args.str("--plugin", "");  // a library's path, or python:MODULE:FUNCTION
  s.backend = args.str("--backend", "");
  if (!s.backend.empty()) attn::backend_info(s.backend);  // an unknown name: the registry's one-line error
  if (!given.empty()) s.plugin = given.rfind("python:", 0) == 0 ? given : std::filesystem::absolute(given).string();
  s.profile = args.str("--profile", "smoke");
  s.out = args.str("--out", "verdict");
  s.self = self_path();
  if (args.has("--worker"))  // a child of the command below, never run by hand
    return plugin_verify::worker(s, args.str("--worker"), args.str("--kernel"), args.count("--from", 0));
  if (!given.empty() && given.rfind("python:", 0) != 0 && !std::filesystem::exists(s.plugin)) throw Error("plugin '" + args.str("--plugin") + "': no such file");
  if (!args.flag("--force") && std::filesystem::exists(std::filesystem::path(s.out) / "verdict.json"))
    throw Error("--out " + s.out + " holds a verdict already; pass --force to replace it");
  return plugin_verify::verify(s);
}

}  // namespace

extern const Command verify_command = {
    "verify",
    "  attn-lab verify --plugin PATH|--backend NAME [--profile smoke|quick|full] [--out DIR]\n"
    "                             the verdict on a plugin's kernels (or a built-in backend): every\n"
    "                             property in every configuration they claim, then a benchmark\n",
    R"(attn-lab verify --plugin PATH|--backend NAME [--profile smoke|quick|full] [--out DIR] [--force]:
the verdict on the kernels of a plugin library (include/attn/plugin.h), or on one built-in
backend of the registry (--backend: the same cells the property tests run). For every configuration a
kernel claims (storage precision x accumulation) every property of the suite runs under
RapidCheck (3 x 10, 30 or 100 generated cases per property: smoke, quick, full; fixed seed,
printed), its cases stripped of the masks and variants the kernel does not claim; a cell counts
the cases that applied to the property and the kernel (pass (N)): agreement with the 50-digit
reference within the derived bound and 2x the naive backend's error, the metamorphic
properties (shift, permutation, GQA = repeated K/V, ALiBi = explicit bias, documents =
separate runs, sinks), determinism and thread-count independence, fully masked rows, large
and near-overflow logits. A failure is shrunk to its smallest case, saved as .npy files with
the one `attn-lab attend` command that replays it. Then, per configuration and pass (smoke:
one configuration, fp32 with fp32 sums when claimed), the invariances of `attn-lab invariance` (run to run, thread count, batch composition, query
block, key split, GQA): bitwise, within bounds (both pass) or BEYOND them (a failure, its
problem saved with the `attn-lab invariance` command that repeats it). Then a short benchmark beside the
built-in backends (same shapes, precision, one thread). The plugin runs only in child
processes: a crash or a hang (no progress for 10 minutes) is that kernel's failure, reported
with the case it ran, and verification goes on. Writes DIR/verdict.md and DIR/verdict.json
(default DIR: verdict); exit 0 when every claimed cell passes, 1 when one fails, 2 when the
plugin cannot be used.

examples:
  attn-lab verify --plugin build/plugins/libattn_example.so --profile smoke --out verdict
  attn-lab verify --backend naive --profile smoke --out verdict-naive
)",
    {"--plugin", "--backend", "--profile", "--out", "--worker", "--kernel", "--from"},
    {"--force"},
    run};

}  // namespace attn::cli
