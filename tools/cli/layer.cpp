// attn-lab layer: multi-head attention (PyTorch semantics) or the pre-norm
// block on top of any backend.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "attn/layers/layers.hpp"
#include "studies/studies.hpp"
#include "attn/io/npy.hpp"
#include "attn/core/random.hpp"
#include "cli/command.hpp"
#include "cli/parse.hpp"

namespace attn::cli {
namespace {

Sequence as_sequence(const NpyTensor& t, const std::string& what) {
  if (t.rank != 2 && t.rank != 3)
    throw Error(what + " must be [L, E] or [B, L, E], got " + std::to_string(t.rank) + " dimensions");
  // load_npy pads at the front to [1, (1,) L, E]
  return Sequence(xt::view(t.data, 0, xt::all(), xt::all(), xt::all()));
}

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  const std::uint64_t seed = args.count("--seed", 0);
  Sequence x;
  std::size_t heads = 0;
  if (args.has("--random") == args.has("--x")) throw Error("give exactly one of --random B,L,E,H and --x X.npy");
  if (args.has("--random")) {
    const auto dims = parse_counts(args.str("--random"), 4, "--random", "B,L,E,H");
    if (std::find(dims.begin(), dims.end(), 0u) != dims.end()) throw Error("--random: every dimension must be >= 1");
    // x and the query and output projections (E x E each, whatever the K/V heads): a lower bound on what it holds
    refuse_oversized_inputs(args, "its input x and its E x E query and output projections in fp64",
                            static_cast<long double>(dims[0]) * dims[1] * dims[2] + 2.0L * dims[2] * dims[2]);
    x = random_sequence(dims[0], dims[1], dims[2], seed);
    heads = dims[3];
    if (args.has("--heads")) throw Error("--heads goes with --x (--random gives H itself)");
  } else {
    x = as_sequence(load_npy(args.str("--x"), "--x"), "--x");
    if (!args.has("--heads")) throw Error("--x needs --heads H");
    heads = args.count("--heads", 1);
  }
  const std::size_t E = x.shape(2);
  Sequence kv = x;
  if (args.has("--kv")) {
    kv = as_sequence(load_npy(args.str("--kv"), "--kv"), "--kv");
  }
  const std::string kind = args.str("--layer", "mha");
  if (kind != "mha" && kind != "block") throw Error("--layer must be mha or block, got '" + kind + "'");
  std::optional<Rope> rope;
  if (args.has("--rope")) {
    const std::string style = args.str("--rope");
    if (style != "half" && style != "interleaved") throw Error("--rope must be half or interleaved, got '" + style + "'");
    rope = Rope{style == "half" ? RopeStyle::half : RopeStyle::interleaved, args.real("--rope-base", 10000.0)};
  } else if (args.has("--rope-base")) {
    throw Error("--rope-base goes with --rope");
  }
  if (args.flag("--sinusoidal")) {
    const Matrix pe = sinusoidal_encoding(x.shape(1), E);
    for (std::size_t b = 0; b < x.shape(0); ++b) xt::view(x, b, xt::all(), xt::all()) += pe;
    if (!args.has("--kv")) kv = x;
  }
  Core core;
  core.backend = args.has("--backend") ? backend_info(args.str("--backend")).name  // an unknown name fails here
                                       : fused_backend().name;
  const PrecisionInfo& precision = precision_info(args.str("--precision", "fp32"));
  core.precision = precision.name;
  core.accumulate = accumulate_option(args, precision);
  core.threads = threads_option(args);
  const Mask mask = args.flag("--causal") ? Mask(mask::Causal{}) : Mask(mask::None{});
  if (kind == "block" && (args.has("--kv") || args.has("--weights") || args.flag("--decode")))
    throw Error("--layer block is self-attention with random weights: --kv, --weights and --decode go with mha");
  if (kind == "mha" && (args.has("--mlp-dim") || args.has("--activation")))
    throw Error("--mlp-dim and --activation go with --layer block");
  if (args.flag("--decode") && args.has("--kv")) throw Error("--decode is self-attention: drop --kv");

  Options variants;
  variant_options(args, variants, heads, x.shape(0));
  core.kv_splits = std::exchange(variants.kv_splits, 0);  // the core's, not the layer's
  const std::size_t kv_heads = args.count("--kv-heads", heads);
  if (kv_heads == 0 || heads % kv_heads != 0)
    throw Error("--kv-heads " + std::to_string(kv_heads) + " must divide the " + std::to_string(heads) + " query heads");
  if (args.has("--kv-heads") && args.has("--weights"))
    throw Error("--kv-heads goes with random weights (--weights gives K/V heads by its k_proj_weight's rows)");

  std::optional<MultiheadAttention> mha;
  std::optional<PreNormBlock> block;
  if (kind == "mha") {
    mha = args.has("--weights") ? load_state_dict(args.str("--weights"), heads)
                                : MultiheadAttention(E, heads, kv.shape(2), kv.shape(2), false, seed + 1, kv_heads);
    mha->set_variants(variants);
  } else {
    const std::string act = args.str("--activation", "gelu");
    if (act != "relu" && act != "gelu") throw Error("--activation must be relu or gelu, got '" + act + "'");
    block.emplace(E, heads, args.count("--mlp-dim", 4 * E), act == "relu" ? Activation::relu : Activation::gelu,
                  seed + 1, kv_heads);
    block->attention.set_variants(variants);
  }
  const MultiheadAttention& attention = mha ? *mha : block->attention;
  auto call = [&] {
    return mha ? mha->forward(x, kv, kv, core, mask, false, false, rope).out : (*block)(x, core, mask, rope);
  };
  auto t0 = std::chrono::steady_clock::now();
  const Sequence out = call();
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> warm;
  for (std::uint64_t i = 0; i < args.count("--repeat", 0); ++i) {
    t0 = std::chrono::steady_clock::now();
    call();
    warm.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double warm_median = median(warm);

  double decode_err = NAN;
  std::size_t cache_bytes = 0;
  if (args.flag("--decode")) {
    if (!args.flag("--causal")) throw Error("--decode compares with full causal attention: add --causal");
    KVCache cache;
    decode_err = 0;
    for (std::size_t t = 0; t < x.shape(1); ++t) {
      const Sequence step = mha->decode(xt::view(x, xt::all(), xt::range(t, t + 1), xt::all()), cache, core, rope);
      for (std::size_t b = 0; b < x.shape(0); ++b)
        for (std::size_t e = 0; e < E; ++e) decode_err = std::max(decode_err, std::fabs(step(b, 0, e) - out(b, t, e)));
    }
    cache_bytes = cache.bytes();
  }
  if (args.has("--out")) save_npy_atomic<3>(args.str("--out"), out);
  if (args.flag("--json")) {
    print_json({{"layer", kind},
                {"backend", core.backend},
                {"precision", core.precision},
                {"accumulate", accumulate_name(core.accumulate)},
                {"batch", x.shape(0)},
                {"length", x.shape(1)},
                {"kv_length", kv.shape(1)},
                {"embed_dim", E},
                {"heads", heads},
                {"kv_heads", attention.kv_heads()},
                {"variants", variants_name(attention.variants())},
                {"kv_splits", core.kv_splits},
                {"seconds", first},
                {"warm_seconds_median", warm_median},
                {"decode_max_abs_diff", decode_err},
                {"kv_cache_bytes", cache_bytes}});
  } else {
    std::printf("%s on %s %s (accumulate %s): B=%zu L=%zu S=%zu E=%zu H=%zu H_kv=%zu%s%s\n", kind.c_str(),
                core.backend.c_str(), core.precision.c_str(), std::string(accumulate_name(core.accumulate)).c_str(),
                x.shape(0), x.shape(1), kv.shape(1), E, heads, attention.kv_heads(),
                variants_name(attention.variants()).empty() ? "" : ", ", variants_name(attention.variants()).c_str());
    std::printf("  time %.6f s (first call)", first);
    if (!warm.empty()) std::printf(", warm median %.6f s of %zu", warm_median, warm.size());
    std::printf("\n");
    if (args.flag("--decode"))
      std::printf("  decode through the KV cache vs full causal: max |diff| %.3g (cache %zu bytes)\n", decode_err,
                  cache_bytes);
  }
  return 0;
}

}  // namespace

extern const Command layer_command = {
    "layer",
    "  attn-lab layer [options]   multi-head attention (PyTorch nn.MultiheadAttention semantics,\n"
    "                             batch first) or the pre-norm transformer block, on any backend\n",
    R"(attn-lab layer: a layer on top of any backend.
  --random B,L,E,H          random input [B, L, E] and random weights, E divisible by H (seed --seed);
                            refused, with the size, when x and two E x E projections in fp64 pass
                            the memory cap (a quarter of RAM; ATTN_MEMORY_CAP bytes)
  --kv-heads HKV            grouped-query (HKV < H) or multi-query (HKV = 1) attention: K and V
                            projected to HKV heads (random weights; default H)
  --x X.npy --heads H       the input [B, L, E] (or [L, E]) from a file
  --kv KV.npy               cross-attention: keys and values from this sequence [B, S, kdim]
                            (default: self-attention, keys and values from the input)
  --weights DIR             PyTorch state_dict tensors as .npy files in DIR: in_proj_weight.npy
                            [3E, E] or q_proj_weight.npy, k_proj_weight.npy, v_proj_weight.npy;
                            out_proj.weight.npy; optional in_proj_bias.npy, out_proj.bias.npy
                            (grouped-query: k/v_proj_weight with HKV x d rows)
                            (default: random, std 1/sqrt(fan_in), no biases)
  --layer mha|block         multi-head attention (default) or the pre-norm block
                            (LayerNorm, attention, residual, LayerNorm, MLP, residual; random weights)
  --mlp-dim F               the block's hidden width (default 4E); --activation relu|gelu (default gelu)
  --rope half|interleaved   RoPE on Q and K (--rope-base X, default 10000)
  --sinusoidal              add sinusoidal positions to the input first
  --causal                  causal mask
  --decode                  also run token by token through the KV cache (self-attention, mha)
                            and report max |decode - full causal|
  --backend NAME --precision P --accumulate A --threads N   the attention core (default
                            streaming, fp32, fp32 accumulation, 1 thread)
  --repeat N                N more timed calls; reports the median
  --out O.npy               the output [B, L, E], float64 (written atomically)
  --json                    one-line JSON summary
  --force                   replace an existing --out file
Projections, LayerNorm and the MLP run in fp64; masks are the suite's; no dropout.

examples:
  attn-lab layer --random 2,64,64,4 --causal --decode --backend streaming --precision bf16
  attn-lab layer --x x.npy --heads 8 --weights torch_mha/ --backend math --out o.npy
  attn-lab layer --x x.npy --kv memory.npy --heads 4 --weights torch_cross/ --precision fp16 --json
  attn-lab layer --random 1,128,256,8 --layer block --rope half --repeat 5 --json
  attn-lab layer --random 1,96,256,8 --kv-heads 2 --softcap 30 --alibi --causal --decode --precision bf16
)",
    with({"--random", "--seed", "--x", "--heads", "--kv", "--weights", "--layer", "--mlp-dim", "--activation", "--rope",
          "--rope-base", "--backend", "--precision", "--accumulate", "--threads", "--repeat", "--out", "--kv-heads"},
         kVariantValued),
    with({"--sinusoidal", "--causal", "--decode", "--json", "--force"}, kVariantFlags),
    run};

}  // namespace attn::cli
