// attn-lab list: the registry's two tables.
#include <cstdio>

#include "cli/command.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  if (args.flag("--json")) {
    Json j = {{"backends", Json::array()}, {"precisions", Json::array()}, {"accumulations", Json::array()}};
    for (const BackendInfo& b : all_backends())
      j["backends"].push_back({{"name", b.name}, {"description", b.description}, {"traits", to_json(b.traits)}});
    for (const PrecisionInfo& p : precisions())
      j["precisions"].push_back({{"name", p.name},
                                 {"unit_roundoff", p.unit_roundoff},
                                 {"max_finite", p.max_finite},
                                 {"default_accumulate", accumulate_name(p.default_accumulate)},
                                 {"bytes", p.bytes}});
    for (Accumulate a : accumulate_policies()) j["accumulations"].push_back(accumulate_name(a));
    j["blas"] = blas_info();
    print_json(j);
    return 0;
  }
  std::printf("backends:\n");
  for (const BackendInfo& b : all_backends()) {
    std::string traits;
    const BackendTraits& t = b.traits;
    for (auto [on, word] : {std::pair{t.exact, "exact"}, {t.baseline, "baseline"},
                            {t.weights_from_lse, "weights-from-lse"}, {t.tiled, "tiled"},
                            {t.own_threads, "own-threads"}, {t.uses_blas, "blas"},
                            {t.memory_independent_of_n, "memory-independent-of-n"}})
      if (on) traits += (traits.empty() ? "" : ", ") + std::string(word);
    std::printf("  %-10s %s\n  %-10s [%s]\n", b.name.c_str(), b.description.c_str(), "", traits.c_str());
  }
  std::printf("precisions:\n");
  for (const PrecisionInfo& p : precisions())
    std::printf("  %-10s unit roundoff %.3g, max %.5g, default accumulation %s\n", std::string(p.name).c_str(),
                p.unit_roundoff, p.max_finite, std::string(accumulate_name(p.default_accumulate)).c_str());
  std::printf("accumulation: fp64, fp32, storage\n");
  std::printf("BLAS: %s\n", blas_info().c_str());
  return 0;
}

}  // namespace

extern const Command list_command = {
    "list",
    "  attn-lab list [--json]     the registered backends (with their traits), precisions and\n"
    "                             accumulation policies, and the BLAS build\n",
    R"(attn-lab list [--json]: the registry.
  --json    one line of JSON: backends (name, description, traits), precisions (name, unit
            roundoff, largest finite value, default accumulation, bytes), accumulations, BLAS

examples:
  attn-lab list
  attn-lab list --json
)",
    {},
    {"--json"},
    run};

}  // namespace attn::cli
