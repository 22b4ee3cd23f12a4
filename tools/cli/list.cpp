// attn-lab list: the registry's two tables.
#include <cstdio>

#include "attn/simd/simd.hpp"
#include "cli/command.hpp"

namespace attn::cli {
namespace {

// A variant's own tiles for one arithmetic (SimdKernels::Tiling): its plain tiles where it has none.
Json tiling_json(const SimdKernels& k, const SimdKernels::Tiling& t) {
  return {{"block_q", t.block_q ? t.block_q : k.block_q}, {"block_k", t.block_k ? t.block_k : k.block_k},
          {"strip_bytes", t.strip_bytes}};
}
std::string tiling_text(const SimdKernels::Tiling& t) {
  if (!t.block_q) return "";
  return " (tiles " + std::to_string(t.block_q) + " x " + std::to_string(t.block_k) +
         (t.strip_bytes ? ", strips within " + std::to_string(t.strip_bytes >> 10) + " KiB" : "") + ")";
}

int run(const Args& args) {
  if (args.flag("--json")) {
    Json j = {{"backends", Json::array()}, {"precisions", Json::array()}, {"accumulations", Json::array()}};
    for (const BackendInfo& b : all_backends())
      j["backends"].push_back({{"name", b.name},
                               {"description", b.description},
                               {"traits", to_json(b.traits)},
                               {"backward", b.has_backward},
                               {"source", b.source}});
    for (const PrecisionInfo& p : precisions())
      j["precisions"].push_back({{"name", p.name},
                                 {"unit_roundoff", p.unit_roundoff},
                                 {"max_finite", p.max_finite},
                                 {"default_accumulate", accumulate_name(p.default_accumulate)},
                                 {"bytes", p.bytes}});
    for (Accumulate a : accumulate_policies()) j["accumulations"].push_back(accumulate_name(a));
    j["blas"] = blas_info();
    const std::optional<double> dot_ratio = simd_bf16_dot_ratio();
    j["simd"] = {{"in_use", simd().id},
                 {"arch", simd().arch},
                 {"summary", simd_summary()},
                 {"bf16_dot_over_fma", dot_ratio ? Json(*dot_ratio) : Json(nullptr)},
                 {"bf16_dot_min_ratio", bf16_dot_min_ratio},
                 {"variants", Json::array()}};
    for (const SimdVariant& v : simd_variants())
      j["simd"]["variants"].push_back({{"id", v.kernels->id},
                                       {"arch", v.kernels->arch},
                                       {"executable", v.executable},
                                       {"requires", v.requires_},
                                       {"micro_kernel", std::to_string(v.kernels->mr) + " x " +
                                                            std::to_string(v.kernels->nv) + " vectors"},
                                       {"block_q", v.kernels->block_q},
                                       {"block_k", v.kernels->block_k},
                                       {"dot_tiles", tiling_json(*v.kernels, v.kernels->dot_tiles)},
                                       {"micro_tiles", tiling_json(*v.kernels, v.kernels->micro_tiles)},
                                       {"decode_block_k", v.kernels->decode_tiles.block_k ? v.kernels->decode_tiles.block_k
                                                                                          : v.kernels->block_k},
                                       {"bf16_dot", v.kernels->gemm_bf16 != nullptr}});
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
                            {t.memory_independent_of_n, "memory-independent-of-n"}, {b.has_backward, "backward"},
                            {t.plugin, "plugin"}})
      if (on) traits += (traits.empty() ? "" : ", ") + std::string(word);
    std::printf("  %-10s %s\n  %-10s [%s]\n", b.name.c_str(), b.description.c_str(), "", traits.c_str());
  }
  std::printf("precisions:\n");
  for (const PrecisionInfo& p : precisions())
    std::printf("  %-10s unit roundoff %.3g, max %.5g, default accumulation %s\n", std::string(p.name).c_str(),
                p.unit_roundoff, p.max_finite, std::string(accumulate_name(p.default_accumulate)).c_str());
  std::printf("accumulation: fp64, fp32, storage\n");
  std::printf("BLAS: %s\n", blas_info().c_str());
  std::printf("vector kernels: %s\n", simd_summary().c_str());
  for (const SimdVariant& v : simd_variants()) {
    const SimdKernels& k = *v.kernels;
    const std::string micro = k.micro_tiles.block_q ? ", fp32 on the micro-kernel" + tiling_text(k.micro_tiles) : "";
    const std::string dot = !k.gemm_bf16 ? "" : ", bf16 dot products" + tiling_text(k.dot_tiles);
    const std::string decode =
        k.decode_tiles.block_k ? ", decode steps " + std::to_string(k.decode_tiles.block_k) + "-key tiles" : "";
    std::printf("  %-10s %-10s %zu-byte vectors, %zu registers, micro-kernel %zu x %zu vectors, tiles %zu x %zu%s%s%s: %s\n",
                std::string(k.id).c_str(), std::string(k.arch).c_str(), k.vector_bytes, k.registers, k.mr, k.nv,
                k.block_q, k.block_k, micro.c_str(), dot.c_str(), decode.c_str(),
                v.executable ? "runs here" : ("not on this CPU (needs " + v.requires_ + ")").c_str());
  }
  return 0;
}

}  // namespace

extern const Command list_command = {
    "list",
    "  attn-lab list [--json]     the registered backends (with their traits), precisions and\n"
    "                             accumulation policies, the BLAS build and the vector kernels\n",
    R"(attn-lab list [--json]: the registry.
  --json    one line of JSON: backends (name, description, traits, backward: whether it has a
            backward pass, source: built-in or the plugin library's path), precisions (name, unit
            roundoff, largest finite value, default accumulation, bytes), accumulations, BLAS,
            simd (the vector kernel variant in use and every compiled one: instruction set,
            whether this CPU runs it, micro-kernel block, streaming tiles, and for bf16 on the
            dot products the variant's own tiles and strip budget where it has them)
The vector kernels are compiled for several instruction sets and chosen at run time: the
widest this CPU executes (avx512amx and avx512bf16 only where their bf16 dot product measured at
least sqrt(2) times the fp32 FMA rate; the summary says when one was passed over), or the one
ATTN_SIMD names (baseline, avx2, avx512, avx512bf16, avx512amx).

examples:
  attn-lab list
  attn-lab list --json
  attn-lab list --plugin build/plugins/libattn_example.so
)",
    {},
    {"--json"},
    run};

}  // namespace attn::cli
