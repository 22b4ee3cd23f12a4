// attn-lab: run any registered attention backend on real or random tensors,
// list the registry, and demonstrate the suite on the worked examples.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "attn/alloc_counter.hpp"
#include "attn/backends/reference.hpp"
#include "attn/examples.hpp"
#include "attn/layers.hpp"
#include "attn/machine.hpp"
#include "attn/metrics.hpp"
#include "attn/npy.hpp"
#include "attn/random.hpp"
#include "attn/studies.hpp"
#include "claims/claim.hpp"
#include "attn/registry.hpp"
#include "cli/args.hpp"
#include "cli/parse.hpp"

namespace attn::cli {
namespace {

constexpr const char* kHelp = R"(attn-lab: scaled dot-product attention, O = softmax(Q K^T * scale + mask) V,
computed by any registered backend, in any precision.

usage:
  attn-lab list              the registered backends, precisions and accumulation policies
  attn-lab attend [options]  run one backend on .npy files or random tensors
  attn-lab demo [--seed S]   the worked examples (EXAMPLES.md) and one random problem
                             through every backend and precision, as a table
  attn-lab peak [--json] [--out FILE]
                             this machine's measured peaks: FMA GFLOP/s (fp32, fp64) for one
                             thread and all, single-thread BLAS GEMM at n = 1024 and 2048, the
                             two GEMMs of one attention head at n = 4096 (d = 64, 128), stream
                             triad bandwidth (takes about half a minute)
  attn-lab accuracy [--profile quick|full] --out FILE.json
                             error of every backend x precision x accumulation against the
                             ground truth (50 digits where affordable, else the compensated
                             double-double reference) over n, d_k, mask and logit scale
  attn-lab claims [--only ID] [--profile smoke|quick|full] [--json] [--out FILE.json]
                             the claims ledger: each published claim run as an experiment
                             against its pre-registered criterion; verdict table (or JSON)
  attn-lab layer [options]   multi-head attention (PyTorch nn.MultiheadAttention semantics,
                             batch first) or the pre-norm transformer block, on any backend;
                             see `attn-lab layer --help`
  attn-lab entropy [--backend B] [--precision P] [--draws N] --out FILE.json
                             EXAMPLES.md E7: mean softmax entropy with and without the
                             1/sqrt(d_k) scale, and var(q.k), over d_k = 8 ... 1024
  attn-lab --help

attend, inputs (one of):
  --q Q.npy --k K.npy --v V.npy  float64, float32 or float16, C order; shapes [n, d],
                                 [heads, n, d] or [batch, heads, n, d], the same rank for all
  --random B,H,NQ,NKV,DK,DV      iid N(0, 1) tensors of that shape
    --seed S                     seed of --random (default 0)
    --logit-scale X              multiplies Q, so scaled scores have std X (default 1)
attend, what to compute:
  --backend NAME                 see `attn-lab list` (default naive)
  --precision P                  fp64|fp32|bf16|fp16 storage; inputs are rounded to it (default fp32)
  --accumulate A                 fp64|fp32|storage (default fp64 for fp64 storage, else fp32)
  --scale X                      score scale (default 1/sqrt(d_k))
  --mask M                       none | causal | window:W | keypad:LENGTHS.npy (one valid key
                                 count per batch) | bool:ALLOWED.npy ([n_q, n_kv], nonzero =
                                 visible) | bias:BIAS.npy ([n_q, n_kv] added to the scaled
                                 scores; -inf masks). Causal and window align bottom-right:
                                 query i sees key j iff j <= i + n_kv - n_q.
  --block-q N, --block-k N       block sizes of blocked/streaming backends (default: theirs)
  --threads N                    threads: streaming runs N workers over batch x heads x query
                                 blocks; math and blocked let OpenBLAS use N (default 1)
  --allow-nonfinite              accept Inf/NaN in Q, K, V instead of rejecting them
  --repeat N                     after the first (cold) call, N more calls reusing its warm
                                 workspace; reports their median as warm seconds
attend, outputs:
  --out O.npy                    the output, float64, same rank as the inputs
  --weights W.npy                the attention weights [.., n_q, n_kv], float64
  --lse L.npy                    the logsumexp of each row [.., n_q], float64 (-inf if masked)
  --check                        compare with the 50-digit reference (about 10 us per score)
                                 and its derived error bound; exit 1 if the bound is exceeded
  --json                         print a one-line JSON summary instead of text
  Files are written atomically (a temporary file renamed into place); an existing file is
  kept unless --force is given (every command that writes files takes --force).
  max |row sum - 1| is reported when weights exist (--weights or --check).

errors: bad input prints one line to stderr and exits 2.

example:
  attn-lab attend --random 1,2,300,517,64,48 --mask causal --precision fp16 --check --json
)";

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else {
      r += c;
    }
  }
  return r + "\"";
}

Shape parse_shape(const std::string& s) {
  const auto d = parse_counts(s, 6, "--random", "B,H,NQ,NKV,DK,DV");
  return {d[0], d[1], d[2], d[3], d[4], d[5]};
}

// Drops the leading unit dimensions the inputs did not have.
template <std::size_t N>
void save_with_rank(const std::string& path, const xt::xtensor<double, N>& t, std::size_t drop) {
  auto shape = t.shape();
  std::vector<std::size_t> kept(shape.begin() + static_cast<std::ptrdiff_t>(drop), shape.end());
  if (drop == 0) return save_npy_atomic(path, t);
  if constexpr (N >= 2) {
    if (drop == 1) {
      std::array<std::size_t, N - 1> s;
      std::copy(kept.begin(), kept.end(), s.begin());
      return save_npy_atomic(path, xt::xtensor<double, N - 1>(xt::adapt(t.data(), t.size(), xt::no_ownership(), s)));
    }
  }
  if constexpr (N >= 3) {
    if (drop == 2) {
      std::array<std::size_t, N - 2> s;
      std::copy(kept.begin(), kept.end(), s.begin());
      return save_npy_atomic(path, xt::xtensor<double, N - 2>(xt::adapt(t.data(), t.size(), xt::no_ownership(), s)));
    }
  }
}

// Existing outputs are kept unless --force: a run never replaces a file the
// user had by accident (the write itself is atomic either way).
void refuse_overwrite(const Args& args, std::initializer_list<const char*> outputs) {
  if (args.flag("--force")) return;
  for (const char* o : outputs)
    if (args.has(o) && std::filesystem::exists(args.str(o)))
      throw Error(std::string(o) + " " + args.str(o) + " exists already; pass --force to replace it");
}

int attend(const std::vector<std::string>& argv) {
  const Args args(argv, kAttendValued, kAttendFlags);
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
  refuse_overwrite(args, {"--out", "--weights", "--lse"});
  // Inputs.
  Inputs<double> in;
  std::size_t rank = 4;
  const bool files = args.has("--q") || args.has("--k") || args.has("--v");
  if (files && args.has("--random")) throw Error("give either --q/--k/--v or --random, not both");
  if (files) {
    for (const char* o : {"--q", "--k", "--v"})
      if (!args.has(o)) throw Error(std::string(o) + " is missing (--q, --k and --v go together)");
    NpyTensor q = load_npy(args.str("--q"), "--q"), k = load_npy(args.str("--k"), "--k"),
              v = load_npy(args.str("--v"), "--v");
    if (k.rank != q.rank || v.rank != q.rank)
      throw Error("--q, --k and --v must have the same number of dimensions");
    rank = q.rank;
    in.q = std::move(q.data);
    in.k = std::move(k.data);
    in.v = std::move(v.data);
  } else if (args.has("--random")) {
    in = random_inputs(parse_shape(args.str("--random")), args.count("--seed", 0), args.real("--logit-scale", 1.0));
  } else {
    throw Error("no inputs: give --q/--k/--v files or --random B,H,NQ,NKV,DK,DV");
  }
  const Shape shape = in.shape();

  Options opt;
  if (args.has("--scale")) opt.scale = args.real("--scale", 0);
  opt.mask = parse_mask(args.str("--mask", "none"), shape.batch);
  opt.block_q = args.count("--block-q", 0);
  opt.block_k = args.count("--block-k", 0);
  opt.threads = args.count("--threads", 1);
  set_blas_threads(static_cast<int>(std::clamp<std::uint64_t>(opt.threads, 1, 1024)));  // validate() rejects the rest
  opt.allow_nonfinite = args.flag("--allow-nonfinite");
  opt.need_weights = args.has("--weights") || args.flag("--check");
  opt.need_lse = args.has("--lse") || args.flag("--check");

  const std::string backend = args.str("--backend", "naive"), precision = args.str("--precision", "fp32");
  const Accumulate acc = args.has("--accumulate") ? parse_accumulate(args.str("--accumulate"))
                         : precision == "fp64"    ? Accumulate::fp64
                                                  : Accumulate::fp32;
  std::size_t peak = 0;
  heap::Watch watch;
  const RunReport r = run_by_name(backend, precision, acc, in, opt,
                                  {[&] { watch = heap::Watch{}; }, [&] { peak = watch.peak_growth(); }},
                                  args.count("--repeat", 0));
  std::vector<double> warm = r.warm_seconds;
  std::sort(warm.begin(), warm.end());
  const double warm_median = warm.empty() ? NAN : warm[warm.size() / 2];

  const std::size_t drop = 4 - rank;
  if (args.has("--out")) save_with_rank(args.str("--out"), r.out, drop);
  if (args.has("--weights") && r.weights) save_with_rank(args.str("--weights"), *r.weights, drop);
  if (args.has("--lse") && r.lse) save_with_rank(args.str("--lse"), *r.lse, drop);

  const double row_sum = r.weights ? max_row_sum_error(*r.weights) : NAN;
  bool within = true;
  ErrorStats out_err, lse_err;
  ErrorBound bound;
  if (args.flag("--check")) {
    const Result<double> ref = backends::reference_attention(r.rounded_inputs, opt);
    out_err = compare(r.out, ref.out, r.u_store);
    if (r.lse) lse_err = compare(*r.lse, *ref.lse, r.u_acc);
    bound = error_bound(r.rounded_inputs, opt, r.u_acc, r.u_store);
    within = out_err.max_abs <= bound.out && (!r.lse || lse_err.max_abs <= bound.lse);
  }

  if (args.flag("--json")) {
    std::ostringstream j;
    j << "{\"backend\":" << json_string(backend) << ",\"precision\":" << json_string(precision)
      << ",\"accumulate\":" << json_string(accumulate_name(acc)) << ",\"shape\":{\"batch\":" << shape.batch
      << ",\"heads\":" << shape.heads << ",\"n_q\":" << shape.n_q << ",\"n_kv\":" << shape.n_kv
      << ",\"d_k\":" << shape.d_k << ",\"d_v\":" << shape.d_v << "},\"mask\":" << json_string(mask_name(opt.mask))
      << ",\"scale\":" << json_number(opt.resolved_scale(shape)) << ",\"seconds\":" << json_number(r.seconds)
      << ",\"warm_seconds_median\":" << json_number(warm_median) << ",\"warm_calls\":" << warm.size()
      << ",\"peak_bytes\":" << peak << ",\"workspace_bytes\":" << r.workspace_bytes
      << ",\"max_row_sum_error\":" << json_number(row_sum);
    if (args.flag("--check"))
      j << ",\"max_abs_error\":" << json_number(out_err.max_abs) << ",\"max_rel_error\":" << json_number(out_err.max_rel)
        << ",\"max_ulps\":" << json_number(out_err.max_ulps) << ",\"error_bound\":" << json_number(bound.out)
        << ",\"lse_max_abs_error\":" << json_number(lse_err.max_abs) << ",\"lse_error_bound\":" << json_number(bound.lse)
        << ",\"within_bound\":" << (within ? "true" : "false");
    j << "}";
    std::cout << j.str() << "\n";
  } else {
    std::printf("%s %s (accumulate %s), %s, mask %s\n", backend.c_str(), precision.c_str(),
                std::string(accumulate_name(acc)).c_str(), to_string(shape).c_str(), mask_name(opt.mask).c_str());
    std::printf("  time %.6f s (cold call), peak heap %zu bytes, workspace %zu bytes\n", r.seconds, peak,
                r.workspace_bytes);
    if (!warm.empty()) std::printf("  warm calls: median %.6f s of %zu\n", warm_median, warm.size());
    if (r.weights) std::printf("  max |row sum - 1| %.3g\n", row_sum);
    if (args.flag("--check"))
      std::printf("  max |O - reference| %.3g (%.3g ulps of %s), bound %.3g: %s\n", out_err.max_abs, out_err.max_ulps,
                  precision.c_str(), bound.out, within ? "within" : "EXCEEDED");
  }
  if (!within) {
    std::fprintf(stderr, "attn-lab: error against the reference exceeds the derived bound\n");
    return 1;
  }
  return 0;
}

constexpr const char* kLayerHelp = R"(attn-lab layer: a layer on top of any backend.
  --random B,L,E,H          random input [B, L, E] and random weights, E divisible by H (seed --seed)
  --x X.npy --heads H       the input [B, L, E] (or [L, E]) from a file
  --kv KV.npy               cross-attention: keys and values from this sequence [B, S, kdim]
                            (default: self-attention, keys and values from the input)
  --weights DIR             PyTorch state_dict tensors as .npy files in DIR: in_proj_weight.npy
                            [3E, E] or q_proj_weight.npy, k_proj_weight.npy, v_proj_weight.npy;
                            out_proj.weight.npy; optional in_proj_bias.npy, out_proj.bias.npy
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
)";

Sequence as_sequence(const NpyTensor& t, const std::string& what) {
  if (t.rank != 2 && t.rank != 3)
    throw Error(what + " must be [L, E] or [B, L, E], got " + std::to_string(t.rank) + " dimensions");
  // load_npy pads at the front to [1, (1,) L, E]
  return Sequence(xt::view(t.data, 0, xt::all(), xt::all(), xt::all()));
}

Linear load_linear(const std::string& dir, const std::string& weight, const std::string& bias) {
  Linear l{load_npy_2d(dir + "/" + weight, "--weights " + weight), std::nullopt};
  if (std::filesystem::exists(dir + "/" + bias)) l.bias = load_npy_1d(dir + "/" + bias, "--weights " + bias);
  return l;
}

MultiheadAttention load_mha(const std::string& dir, std::size_t heads) {
  if (!std::filesystem::is_directory(dir)) throw Error("--weights " + dir + ": not a directory");
  Linear o = load_linear(dir, "out_proj.weight.npy", "out_proj.bias.npy");
  const std::size_t e = o.out_features();
  if (std::filesystem::exists(dir + "/in_proj_weight.npy")) {
    const Linear in = load_linear(dir, "in_proj_weight.npy", "in_proj_bias.npy");
    if (in.weight.shape(0) != 3 * e)
      throw Error("--weights in_proj_weight.npy: " + std::to_string(in.weight.shape(0)) + " rows, want 3 x embed_dim = " +
                  std::to_string(3 * e));
    auto part = [&](std::size_t i) {
      Linear l{Matrix(xt::view(in.weight, xt::range(i * e, (i + 1) * e), xt::all())), std::nullopt};
      if (in.bias) l.bias = Vector(xt::view(*in.bias, xt::range(i * e, (i + 1) * e)));
      return l;
    };
    return MultiheadAttention(part(0), part(1), part(2), std::move(o), heads);
  }
  // Separate projections (kdim or vdim != embed_dim); their biases live in in_proj_bias.npy.
  Linear q{load_npy_2d(dir + "/q_proj_weight.npy", "--weights q_proj_weight.npy"), std::nullopt};
  Linear k{load_npy_2d(dir + "/k_proj_weight.npy", "--weights k_proj_weight.npy"), std::nullopt};
  Linear v{load_npy_2d(dir + "/v_proj_weight.npy", "--weights v_proj_weight.npy"), std::nullopt};
  if (std::filesystem::exists(dir + "/in_proj_bias.npy")) {
    const Vector b = load_npy_1d(dir + "/in_proj_bias.npy", "--weights in_proj_bias.npy");
    if (b.size() != 3 * e) throw Error("--weights in_proj_bias.npy: length " + std::to_string(b.size()) + ", want " + std::to_string(3 * e));
    q.bias = Vector(xt::view(b, xt::range(0, e)));
    k.bias = Vector(xt::view(b, xt::range(e, 2 * e)));
    v.bias = Vector(xt::view(b, xt::range(2 * e, 3 * e)));
  }
  return MultiheadAttention(std::move(q), std::move(k), std::move(v), std::move(o), heads);
}

int layer(const std::vector<std::string>& argv) {
  const Args args(argv,
                  {"--random", "--seed", "--x", "--heads", "--kv", "--weights", "--layer", "--mlp-dim", "--activation",
                   "--rope", "--rope-base", "--backend", "--precision", "--accumulate", "--threads", "--repeat", "--out"},
                  {"--sinusoidal", "--causal", "--decode", "--json", "--force", "--help"});
  if (args.flag("--help")) {
    std::cout << kLayerHelp;
    return 0;
  }
  refuse_overwrite(args, {"--out"});
  const std::uint64_t seed = args.count("--seed", 0);
  Sequence x;
  std::size_t heads = 0;
  if (args.has("--random") == args.has("--x")) throw Error("give exactly one of --random B,L,E,H and --x X.npy");
  if (args.has("--random")) {
    const auto dims = parse_counts(args.str("--random"), 4, "--random", "B,L,E,H");
    if (std::find(dims.begin(), dims.end(), 0u) != dims.end()) throw Error("--random: every dimension must be >= 1");
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
  core.backend = args.str("--backend", "streaming");
  core.precision = args.str("--precision", "fp32");
  core.accumulate = args.has("--accumulate") ? parse_accumulate(args.str("--accumulate"))
                    : core.precision == "fp64"  ? Accumulate::fp64
                                                : Accumulate::fp32;
  core.threads = args.count("--threads", 1);
  set_blas_threads(static_cast<int>(std::clamp<std::uint64_t>(core.threads, 1, 1024)));
  backend_by_name(core.backend);  // an unknown name fails here, before any work
  const Mask mask = args.flag("--causal") ? Mask(mask::Causal{}) : Mask(mask::None{});
  if (kind == "block" && (args.has("--kv") || args.has("--weights") || args.flag("--decode")))
    throw Error("--layer block is self-attention with random weights: --kv, --weights and --decode go with mha");
  if (kind == "mha" && (args.has("--mlp-dim") || args.has("--activation")))
    throw Error("--mlp-dim and --activation go with --layer block");
  if (args.flag("--decode") && args.has("--kv")) throw Error("--decode is self-attention: drop --kv");

  std::optional<MultiheadAttention> mha;
  std::optional<PreNormBlock> block;
  if (kind == "mha") {
    mha = args.has("--weights") ? load_mha(args.str("--weights"), heads)
                                : MultiheadAttention(E, heads, kv.shape(2), kv.shape(2), false, seed + 1);
  } else {
    const std::string act = args.str("--activation", "gelu");
    if (act != "relu" && act != "gelu") throw Error("--activation must be relu or gelu, got '" + act + "'");
    block.emplace(E, heads, args.count("--mlp-dim", 4 * E), act == "relu" ? Activation::relu : Activation::gelu, seed + 1);
  }
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
  std::sort(warm.begin(), warm.end());
  const double warm_median = warm.empty() ? NAN : warm[warm.size() / 2];

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
    std::cout << "{\"layer\":" << json_string(kind) << ",\"backend\":" << json_string(core.backend)
              << ",\"precision\":" << json_string(core.precision) << ",\"accumulate\":"
              << json_string(accumulate_name(core.accumulate)) << ",\"batch\":" << x.shape(0)
              << ",\"length\":" << x.shape(1) << ",\"kv_length\":" << kv.shape(1) << ",\"embed_dim\":" << E
              << ",\"heads\":" << heads << ",\"seconds\":" << json_number(first)
              << ",\"warm_seconds_median\":" << json_number(warm_median)
              << ",\"decode_max_abs_diff\":" << json_number(decode_err) << ",\"kv_cache_bytes\":" << cache_bytes
              << "}\n";
  } else {
    std::printf("%s on %s %s (accumulate %s): B=%zu L=%zu S=%zu E=%zu H=%zu\n", kind.c_str(), core.backend.c_str(),
                core.precision.c_str(), std::string(accumulate_name(core.accumulate)).c_str(), x.shape(0), x.shape(1),
                kv.shape(1), E, heads);
    std::printf("  time %.6f s (first call)", first);
    if (!warm.empty()) std::printf(", warm median %.6f s of %zu", warm_median, warm.size());
    std::printf("\n");
    if (args.flag("--decode"))
      std::printf("  decode through the KV cache vs full causal: max |diff| %.3g (cache %zu bytes)\n", decode_err,
                  cache_bytes);
  }
  return 0;
}

int list(const std::vector<std::string>& argv) {
  const Args args(argv, {}, {"--json", "--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
  if (args.flag("--json")) {
    std::string j = "{\"backends\":[";
    bool first = true;
    for_each_backend([&](auto b) {
      using B = typename decltype(b)::type;
      j += std::string(first ? "" : ",") + "{\"name\":" + json_string(B::name) + "}";
      first = false;
    });
    j += "],\"precisions\":[";
    first = true;
    for_each_storage([&](auto s) {
      using S = typename decltype(s)::type;
      j += std::string(first ? "" : ",") + "{\"name\":" + json_string(precision_traits<S>::name) +
           ",\"unit_roundoff\":" + json_number(precision_traits<S>::unit_roundoff) + ",\"default_accumulate\":" +
           json_string(accumulate_name(default_accumulate<S>)) + "}";
      first = false;
    });
    std::cout << j << "]}\n";
    return 0;
  }
  std::printf("backends:\n");
  for_each_backend([](auto b) {
    using B = typename decltype(b)::type;
    std::printf("  %-10s %s\n", std::string(B::name).c_str(), std::string(B::description).c_str());
  });
  std::printf("precisions:\n");
  for_each_storage([](auto s) {
    using S = typename decltype(s)::type;
    std::printf("  %-10s unit roundoff %.3g, max %.5g\n", std::string(precision_traits<S>::name).c_str(),
                precision_traits<S>::unit_roundoff, precision_traits<S>::max_finite);
  });
  std::printf("accumulation: fp64, fp32, storage\n");
  std::printf("BLAS: %s\n", blas_info().c_str());
  return 0;
}

// Every worked example and one random problem through every backend and
// precision at the default accumulation, against the 50-digit reference.
int demo(const std::vector<std::string>& argv) {
  const Args args(argv, {"--seed"}, {"--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
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
              "max_abs_err", "bound", "problem");
  bool all_within = true;
  for (auto& p : problems) {
    for (auto backend : backend_names()) {
      for (auto precision : storage_names()) {
        const Accumulate acc = precision == "fp64" ? Accumulate::fp64 : Accumulate::fp32;
        std::size_t peak = 0;
        heap::Watch watch;
        const RunReport r = run_by_name(backend, precision, acc, p.in, p.opt,
                                        {[&] { watch = heap::Watch{}; }, [&] { peak = watch.peak_growth(); }});
        const Result<double> ref = backends::reference_attention(r.rounded_inputs, p.opt);
        const double err = compare(r.out, ref.out, r.u_store).max_abs;
        const double bound = error_bound(r.rounded_inputs, p.opt, r.u_acc, r.u_store).out;
        all_within = all_within && err <= bound;
        std::printf("%-10s %-6s %-6s %12.6f %12zu %12.3g %12.3g  %s\n", std::string(backend).c_str(),
                    std::string(precision).c_str(), std::string(accumulate_name(acc)).c_str(), r.seconds, peak, err,
                    bound, p.name.c_str());
      }
    }
  }
  std::printf("%s\n", all_within ? "every error is within its derived bound"
                                 : "SOME ERROR EXCEEDS ITS DERIVED BOUND");
  return all_within ? 0 : 1;
}

int peak(const std::vector<std::string>& argv) {
  const Args args(argv, {"--out"}, {"--json", "--force", "--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
  refuse_overwrite(args, {"--out"});
  const MachinePeak p = measure_peak();
  if (args.has("--out")) write_file_atomic(args.str("--out"), to_json(p) + "\n");
  if (args.flag("--json")) {
    std::cout << to_json(p) << "\n";
    return 0;
  }
  std::printf("cpu              %s (%u cores), FMA probe in %s\n", p.cpu.c_str(), p.cores, p.simd.c_str());
  std::printf("fp32 FMA         %8.1f GFLOP/s per core, %8.1f all cores\n", p.fp32_fma_gflops_core, p.fp32_fma_gflops_all);
  std::printf("fp64 FMA         %8.1f GFLOP/s per core, %8.1f all cores\n", p.fp64_fma_gflops_core, p.fp64_fma_gflops_all);
  std::printf("sgemm, 1 thread  %8.1f GFLOP/s at n = 1024, %8.1f at 2048\n", p.sgemm_gflops_1024, p.sgemm_gflops_2048);
  std::printf("attention GEMMs  %8.1f GFLOP/s at n = 4096, d = 64, %8.1f at d = 128 (Q K^T then P V, fp32, 1 thread)\n",
              p.sgemm_attention_gflops_d64, p.sgemm_attention_gflops_d128);
  std::printf("dgemm, 1 thread  %8.1f GFLOP/s at n = 1024, %8.1f at 2048\n", p.dgemm_gflops_1024, p.dgemm_gflops_2048);
  std::printf("triad            %8.1f GB/s one core, %8.1f all cores\n", p.triad_gbs_core, p.triad_gbs_all);
  std::printf("BLAS             %s\n", p.blas.c_str());
  return 0;
}

int accuracy(const std::vector<std::string>& argv) {
  const Args args(argv, {"--profile", "--out"}, {"--force", "--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("accuracy needs --out FILE.json");
  const auto problems = accuracy_problems(args.str("--profile", "quick"));
  const std::string json =
      accuracy_sweep_json(problems, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  write_file_atomic(args.str("--out"), json);
  return 0;
}

int entropy(const std::vector<std::string>& argv) {
  const Args args(argv, {"--backend", "--precision", "--draws", "--out"}, {"--force", "--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
  refuse_overwrite(args, {"--out"});
  if (!args.has("--out")) throw Error("entropy needs --out FILE.json");
  const std::string backend = args.str("--backend", "naive"), precision = args.str("--precision", "fp64");
  const std::size_t draws = args.count("--draws", 2000);
  if (draws < 2) throw Error("--draws must be at least 2");
  const std::vector<std::size_t> dims = {8, 16, 32, 64, 128, 256, 512, 1024};
  const auto rows = entropy_study(backend_by_name(backend), precision, dims, draws, 10, /*seed=*/700);
  write_file_atomic(args.str("--out"), entropy_json(rows, backend, precision, draws, 10, 700));
  return 0;
}

int claims_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"--only", "--profile", "--out"}, {"--json", "--force", "--help"});
  if (args.flag("--help")) {
    std::cout << kHelp;
    return 0;
  }
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
  const std::string only = args.str("--only");
  bool found = only.empty();
  std::string json = "{\"kind\":\"claims\",\"profile\":\"" + cfg.profile + "\",\"claims\":[\n";
  std::size_t index = 0, ran = 0;
  for (const auto& c : all) {
    ++index;
    if (!only.empty() && c.id != only) continue;
    found = true;
    std::fprintf(stderr, "[%zu/%zu] claim %s\n", index, all.size(), std::string(c.id).c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const claims::Verdict v = c.run(cfg);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json += (ran++ ? ",\n" : "") + claims::to_json(c, v, seconds);
    if (!args.flag("--json"))
      std::printf("%-13s %-14s %s\n", std::string(c.id).c_str(), std::string(claims::outcome_name(v.outcome)).c_str(),
                  v.why.c_str());
  }
  if (!found) {
    std::string ids;
    for (const auto& c : all) ids += (ids.empty() ? "" : ", ") + std::string(c.id);
    throw Error("no claim '" + only + "' (known: " + ids + ")");
  }
  json += "\n]}\n";
  if (args.has("--out")) write_file_atomic(args.str("--out"), json);
  if (args.flag("--json")) std::cout << json;
  return 0;
}

}  // namespace
}  // namespace attn::cli

int main(int argc, char** argv) {
  using namespace attn::cli;
  std::vector<std::string> rest(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kHelp;
      return 0;
    }
    if (command == "list") return list(rest);
    if (command == "attend") return attend(rest);
    if (command == "demo") return demo(rest);
    if (command == "peak") return peak(rest);
    if (command == "accuracy") return accuracy(rest);
    if (command == "entropy") return entropy(rest);
    if (command == "claims") return claims_command(rest);
    if (command == "layer") return layer(rest);
    throw attn::Error(command.empty() ? "no command given (attend, layer, list, demo, peak, accuracy, entropy, claims; see --help)"
                                      : "unknown command '" + command + "' (attend, layer, list, demo, peak, accuracy, entropy, claims; see --help)");
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-lab: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attn-lab: out of memory (the problem is too large for this machine)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn-lab: %s\n", e.what());
    return 2;
  }
}
