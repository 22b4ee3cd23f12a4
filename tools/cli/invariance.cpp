// attn-lab invariance: the invariance matrix (lib/attn/verify/invariance.hpp).
#include <algorithm>
#include <filesystem>
#include <thread>
#include <sstream>

#include "attn/io/npy.hpp"
#include "attn/simd/simd.hpp"
#include "attn/verify/invariance.hpp"
#include "cli/command.hpp"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using invariance::Invariance;
using invariance::Verdict;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

bool listed(const std::vector<std::string>& list, std::string_view x) {
  return list.empty() || std::find(list.begin(), list.end(), x) != list.end();
}

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("invariance needs --out FILE.json");
  const std::vector<std::string> backends = split_list(args.str("--backend")), only = split_list(args.str("--only")),
                                  precisions_asked = split_list(args.str("--precision"));
  for (const std::string& b : backends) backend_info(b);  // an unknown name: one error listing the known ones
  for (const std::string& p : precisions_asked) precision_info(p);
  const std::vector<std::string> required = split_list(args.str("--require-bitwise"));
  std::vector<std::string> named = only;
  named.insert(named.end(), required.begin(), required.end());
  for (const std::string& id : named) {
    bool known = false;
    for (const Invariance& inv : invariance::invariances()) known |= inv.id == id;
    if (!known) {
      std::string names;
      for (const Invariance& inv : invariance::invariances()) names += (names.empty() ? "" : ", ") + inv.id;
      throw Error("unknown invariance '" + id + "' (known: " + names + ")");
    }
  }
  const std::uint64_t seed = args.count("--seed", 39);
  const std::string profile = args.str("--profile", "quick");
  if (profile != "smoke" && profile != "quick" && profile != "full")
    throw Error("--profile must be smoke, quick or full, not '" + profile + "'");
  const fs::path out(args.str("--out"));
  const fs::path examples = (out.has_parent_path() ? out.parent_path() : fs::path(".")) / "invariance-counterexamples";
  std::fprintf(stderr, "invariance: seed %llu; kernels %s\n", static_cast<unsigned long long>(seed),
               std::string(attn::simd().id).c_str());

  Json table = Json::array();
  for (const Invariance& inv : invariance::invariances())
    if (listed(only, inv.id))
      table.push_back({{"id", inv.id}, {"name", inv.name}, {"what", inv.what}, {"forward", inv.forward},
                       {"backward", inv.backward}});
  Json cells = Json::array();
  std::size_t beyond = 0, not_bitwise = 0;
  for (const BackendInfo& b : all_backends()) {
    // the 50-digit truth is exact by construction (and minutes a problem); others only when asked for
    if (backends.empty() ? b.traits.exact : !listed(backends, b.name)) continue;
    for (const PrecisionInfo& p : precisions()) {
      if (!listed(precisions_asked, p.name)) continue;
      for (Accumulate acc : accumulate_policies()) {
        // smoke: fp32 and bf16 storage, each in its own default accumulation
        if (profile == "smoke" && ((p.name != "fp32" && p.name != "bf16") || acc != p.default_accumulate)) continue;
        for (bool backward : {false, true}) {
          std::fprintf(stderr, "invariance: %s %s accumulate %s %s\n", b.name.c_str(), std::string(p.name).c_str(),
                       std::string(accumulate_name(acc)).c_str(), backward ? "backward" : "forward");
          for (const Invariance& inv : invariance::invariances()) {
            if (!listed(only, inv.id) || !(backward ? inv.backward : inv.forward)) continue;
            Json cell = {{"backend", b.name},   {"precision", p.name}, {"accumulate", accumulate_name(acc)},
                         {"pass", backward ? "backward" : "forward"}, {"invariance", inv.id}};
            const invariance::Subject subject{&b, &p, acc, backward};
            const auto o = invariance::check_into(
                cell, inv, subject, seed,
                (examples / b.name / (inv.id + "-" + std::string(cell["pass"]) + "-" + std::string(p.name) + "-" +
                                      std::string(accumulate_name(acc)))).string());
            if (o && o->verdict == Verdict::beyond) ++beyond;
            if (listed(required, inv.id) && !required.empty() && cell["verdict"] != "bitwise" &&
                cell["verdict"] != "not applicable")
              ++not_bitwise;
            std::printf("%-10s %-5s %-8s %-8s %-12s %s\n", b.name.c_str(), std::string(p.name).c_str(),
                        std::string(accumulate_name(acc)).c_str(), backward ? "backward" : "forward", inv.id.c_str(),
                        std::string(cell["verdict"]).c_str());
            cells.push_back(cell);
          }
        }
      }
    }
  }
  const Json doc = {{"kind", "invariance"},
                    {"seed", seed},
                    {"profile", profile},
                    {"simd", attn::simd().id},
                    {"blas", blas_info()},
                    {"cores", std::thread::hardware_concurrency()},
                    {"invariances", table},
                    {"cells", cells}};
  write_file_atomic(out.string(), dump(doc) + "\n");
  if (beyond) std::fprintf(stderr, "invariance: %zu comparison(s) BEYOND the bounds; counterexamples in %s\n", beyond,
                           examples.string().c_str());
  if (not_bitwise)
    std::fprintf(stderr, "invariance: %zu comparison(s) of --require-bitwise %s not bitwise\n", not_bitwise,
                 args.str("--require-bitwise").c_str());
  return beyond || not_bitwise ? 1 : 0;
}

}  // namespace

extern const Command invariance_command = {
    "invariance",
    "  attn-lab invariance --out FILE.json [--profile smoke|quick] [--backend B,..] [--only ID,..]\n"
    "                             whether each backend's results change with the run, the thread\n"
    "                             count, the batch, the query block, the key split, GQA: bitwise,\n"
    "                             within the bounds, or BEYOND them, forward and backward\n",
    R"(attn-lab invariance --out FILE.json [--profile smoke|quick|full] [--backend B,..] [--precision P,..]
                    [--only ID,..] [--seed S]
The invariance matrix (lib/attn/verify/invariance.hpp): for every backend (default: all but the 50-digit
truth; any --plugin's kernels too) x storage precision x accumulation x pass (forward, backward), each
invariance computes the same rows two or more ways on fixed problems (seed S, default 39) and compares them
element by element (--profile smoke: fp32 and bf16 storage in their default accumulation only; quick and
full, the default: every storage and accumulation): bitwise (every bit the same), within bounds (they differ, each element by no more than
the two runs' probabilistic bounds), or BEYOND (a defect; the problem is saved as q.npy, k.npy, v.npy with
case.json in invariance-counterexamples/ beside FILE). A pair the backend cannot run is not applicable.
Invariances (--only): run_to_run, threads, batch, query_block, key_split, gqa. Writes FILE atomically
(--force replaces it); exit 1 if any comparison is BEYOND, or (--require-bitwise ID,..) if one of the named
invariances is not bitwise (a backend's documented invariances as a check: scripts/mutate runs streaming's).

examples:
  attn-lab invariance --backend streaming --precision fp32 --only threads,batch --out invariance.json
)",
    {"--out", "--backend", "--precision", "--only", "--seed", "--profile", "--require-bitwise"},
    {"--force"},
    run};

}  // namespace attn::cli
