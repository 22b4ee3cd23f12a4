// attn-lab claims: the claims ledger.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "attn/core/alloc_counter.hpp"
#include "attn/io/npy.hpp"
#include "claims/claim.hpp"
#include "cli/command.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  claims::Config cfg;
  cfg.profile = args.str("--profile", "quick");
  if (cfg.profile != "smoke" && cfg.profile != "quick" && cfg.profile != "full")
    throw Error("--profile '" + cfg.profile + "' is not one of smoke, quick, full");
  cfg.progress = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  heap::Watch watch;
  cfg.heap_reset = [&] { watch = heap::Watch{}; };
  cfg.heap_peak_growth = [&] { return watch.peak_growth(); };
  const auto& all = claims::all_claims();
  if (args.flag("--list")) {  // the ids, one per line (scripts/run --plan)
    for (const auto& c : all) std::printf("%s\n", std::string(c.id).c_str());
    return 0;
  }
  std::set<std::string> only;  // --only ID[,ID...]
  std::stringstream list(args.str("--only"));
  for (std::string id; std::getline(list, id, ',');) {
    for (const auto& r : claims::retired_claims())
      if (r.id == id)
        throw Error("claim '" + id + "' was retired on " + std::string(r.date) + " (" + std::string(r.reason) + ")");
    if (std::none_of(all.begin(), all.end(), [&](const auto& c) { return c.id == id; })) {
      std::string ids;
      for (const auto& c : all) ids += (ids.empty() ? "" : ", ") + std::string(c.id);
      throw Error("no claim '" + id + "' (known: " + ids + ")");
    }
    only.insert(id);
  }
  Json j = {{"kind", "claims"}, {"profile", cfg.profile}, {"claims", Json::array()}};
  std::size_t index = 0;
  for (const auto& c : all) {
    ++index;
    if (!only.empty() && !only.count(std::string(c.id))) continue;
    std::fprintf(stderr, "[%zu/%zu] claim %s\n", index, all.size(), std::string(c.id).c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const claims::Verdict v = c.run(cfg);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    j["claims"].push_back(claims::to_json(c, v, seconds));
    if (!args.flag("--json"))
      std::printf("%-17s %-14s %s\n", std::string(c.id).c_str(), std::string(claims::outcome_name(v.outcome)).c_str(),
                  v.why.c_str());
  }
  // Retired entries (criteria that could not fail): listed with the reason, never run.
  j["retired"] = Json::array();
  for (const auto& r : claims::retired_claims()) {
    j["retired"].push_back({{"id", r.id}, {"statement", r.statement}, {"source", r.source}, {"date", r.date},
                            {"reason", r.reason}});
    if (!args.flag("--json") && only.empty())
      std::printf("%-17s %-14s %s\n", std::string(r.id).c_str(), "retired", std::string(r.reason).c_str());
  }
  if (args.has("--out")) write_file_atomic(args.str("--out"), dump(j) + "\n");
  if (args.flag("--json")) print_json(j);
  return 0;
}

}  // namespace

extern const Command claims_command = {
    "claims",
    "  attn-lab claims [--only ID[,ID...]] [--profile smoke|quick|full] [--json] [--out FILE.json] | --list\n"
    "                             the claims ledger: each published claim run as an experiment\n"
    "                             against its pre-registered criterion; verdict table (or JSON)\n",
    R"(attn-lab claims: the claims ledger. Each claim (tools/claims/, one file each with its source,
quote, experiment and criterion) runs as an experiment; the verdict is holds, does not hold or
inconclusive, with the numbers. Entries retired because their criterion could not fail are
listed after them, with the reason, and not run.
  --only ID[,ID...]         these claims only (ids: see the table, or --list)
  --list                    run nothing: the claims' ids, one per line
  --profile smoke|quick|full  the experiments' sizes (default quick)
  --json                    the ledger as JSON on stdout instead of the table
  --out FILE.json           the ledger as JSON into FILE (atomically; --force replaces it)

examples:
  attn-lab claims --only saturation --profile smoke
  attn-lab claims --profile smoke --json
)",
    {"--only", "--profile", "--out"},
    {"--json", "--force", "--list"},
    run};

}  // namespace attn::cli
