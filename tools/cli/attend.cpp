// attn-lab attend: one backend on .npy files or random tensors.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "attn/core/alloc_counter.hpp"
#include "attn/io/npy.hpp"
#include "attn/core/random.hpp"
#include "attn/verify/verdict_json.hpp"
#include "cli/command.hpp"
#include "cli/parse.hpp"
#include "studies/studies.hpp"

namespace attn::cli {
namespace {

struct LoadedInputs {
  Inputs<double> in;
  std::size_t rank = 4;  // of the files (the outputs get the same)
};

LoadedInputs inputs_of(const Args& args) {
  const bool files = args.has("--q") || args.has("--k") || args.has("--v");
  if (files && args.has("--random")) throw Error("give either --q/--k/--v or --random, not both");
  LoadedInputs r;
  if (files) {
    for (const char* o : {"--q", "--k", "--v"})
      if (!args.has(o)) throw Error(std::string(o) + " is missing (--q, --k and --v go together)");
    NpyTensor q = load_npy(args.str("--q"), "--q"), k = load_npy(args.str("--k"), "--k"),
              v = load_npy(args.str("--v"), "--v");
    if (k.rank != q.rank || v.rank != q.rank) throw Error("--q, --k and --v must have the same number of dimensions");
    r.rank = q.rank;
    r.in = {std::move(q.data), std::move(k.data), std::move(v.data)};
  } else if (args.has("--random")) {
    const std::string dims = args.str("--random");
    const bool grouped = std::count(dims.begin(), dims.end(), ',') == 6;
    const auto d = parse_counts(dims, grouped ? 7 : 6, "--random", grouped ? "B,H,NQ,NKV,DK,DV,HKV" : "B,H,NQ,NKV,DK,DV");
    const Shape s{d[0], d[1], d[2], d[3], d[4], d[5], grouped ? d[6] : 0};
    if (grouped && (s.kv_heads == 0 || s.heads % s.kv_heads != 0))
      throw Error("--random: H = " + std::to_string(s.heads) + " query heads must be a multiple of HKV = " +
                  std::to_string(s.kv_heads) + " key/value heads (grouped-query attention)");
    refuse_oversized_inputs(args, "its inputs Q, K and V in fp64",
                            static_cast<long double>(s.batch) * s.heads * s.n_q * s.d_k +
                                static_cast<long double>(s.batch) * s.kv_head_count() * s.n_kv * (s.d_k + s.d_v));
    r.in = random_inputs(s, args.count("--seed", 0), args.real("--logit-scale", 1.0));
  } else {
    throw Error("no inputs: give --q/--k/--v files or --random B,H,NQ,NKV,DK,DV[,HKV]");
  }
  return r;
}

// The upstream gradient dO of the backward pass: --grad-out FILE (the
// inputs' rank, the output's shape), or with --random inputs N(0, 1) values
// drawn from seed + 1.
xt::xtensor<double, 4> d_out_of(const Args& args, const LoadedInputs& loaded) {
  const Shape s = loaded.in.shape();
  if (args.has("--grad-out")) {
    NpyTensor g = load_npy(args.str("--grad-out"), "--grad-out");
    if (g.rank != loaded.rank)
      throw Error("--grad-out has " + std::to_string(g.rank) + " dimensions, the inputs " + std::to_string(loaded.rank));
    return std::move(g.data);
  }
  if (!args.has("--random"))
    throw Error("the backward pass needs the upstream gradient: --grad-out dO.npy (or --random inputs, which draw one)");
  return random_d_out(s, args.count("--seed", 0) + 1);
}

Json gradient_json(const BackwardReport& br, std::size_t peak, const GradientCheck* c) {
  Json j = {{"seconds", br.seconds},
            {"warm_seconds_median", median(br.warm_seconds)},
            {"warm_calls", br.warm_seconds.size()},
            {"peak_bytes", peak},
            {"workspace_bytes", br.workspace_bytes}};
  if (c) {
    j["truth"] = truth_name(c->truth);
    j["within"] = c->within;
    j["within_tight"] = c->tight_within;
    j["tight_informative"] = c->tight_informative;
    for (const auto& part : c->parts) j[std::string(part.name)] = to_json(part);
  }
  return j;
}

int run(const Args& args) {
  refuse_overwrite(args, {"--out", "--weights", "--lse", "--dq", "--dk", "--dv", "--dbias", "--dsinks"});
  const LoadedInputs loaded = inputs_of(args);
  const Shape shape = loaded.in.shape();
  const bool check = args.flag("--check");
  Options opt;
  if (args.has("--scale")) opt.scale = args.real("--scale", 0);
  opt.mask = parse_mask(args.str("--mask", "none"), shape.batch);
  opt.block_q = args.count("--block-q", 0);
  opt.block_k = args.count("--block-k", 0);
  opt.threads = threads_option(args);
  opt.allow_nonfinite = args.flag("--allow-nonfinite");
  opt.need_weights = args.has("--weights") || check;
  opt.need_lse = args.has("--lse") || check;
  variant_options(args, opt, shape.heads, shape.batch);
  if (opt.sinks && opt.need_weights) opt.need_lse = true;  // the rows' expected sums come from it

  const BackendInfo& backend = args.has("--backend") ? backend_info(args.str("--backend")) : baseline_backend();
  const PrecisionInfo& precision = precision_info(args.str("--precision", "fp32"));
  const Accumulate acc = accumulate_option(args, precision);
  // --check compares the weights and the logsumexp too where the backend returns them (a
  // plugin may return neither); asked for by name (--weights, --lse), they are required.
  if (check) {
    const Options returnable = backend.without_unreturnable_outputs(precision, acc, shape, opt);
    if (!args.has("--weights")) opt.need_weights = returnable.need_weights;
    if (!args.has("--lse")) opt.need_lse = returnable.need_lse;
  }
  std::size_t peak = 0;
  heap::Watch watch;
  const RunReport r = backend.run(precision.name, acc, loaded.in, opt,
                                  {[&] { watch = heap::Watch{}; }, [&] { peak = watch.peak_growth(); }},
                                  args.count("--repeat", 0));
  const double warm_median = median(r.warm_seconds);
  if (args.has("--out")) save_with_rank(args.str("--out"), r.out, loaded.rank);
  if (args.has("--weights") && r.weights) save_with_rank(args.str("--weights"), *r.weights, loaded.rank);
  if (args.has("--lse") && r.lse) save_with_rank(args.str("--lse"), *r.lse, loaded.rank - 1);

  // With sinks a row sums to 1 - exp(sink_h - lse_i) (the sink's weight), from the run's own logsumexp.
  double row_sum = r.weights ? max_row_sum_error(*r.weights) : NAN;
  if (r.weights && opt.sinks && r.lse) {
    row_sum = 0;
    const auto& w = *r.weights;
    for (std::size_t b = 0; b < shape.batch; ++b)
      for (std::size_t h = 0; h < shape.heads; ++h)
        for (std::size_t i = 0; i < shape.n_q; ++i) {
          double sum = 0;
          for (std::size_t j = 0; j < shape.n_kv; ++j) sum += w(b, h, i, j);
          const double lse = (*r.lse)(b, h, i), sink = (*opt.sinks)(h);
          const double expected = std::isfinite(lse) ? 1 - std::exp(sink - lse) : 0.0;
          row_sum = std::max(row_sum, std::fabs(sum - expected));
        }
  }
  Check c;
  if (check) c = verify(r, opt);

  // The backward pass, when asked for (--backward, --grad-out or a gradient output).
  const bool backward = args.flag("--backward") || args.has("--grad-out") || args.has("--dq") || args.has("--dk") ||
                        args.has("--dv") || args.has("--dbias") || args.has("--dsinks");
  std::optional<BackwardReport> br;
  std::optional<GradientCheck> gc;
  std::size_t backward_peak = 0;
  if (backward) {
    Options bopt = opt;
    bopt.need_weights = false;
    bopt.need_dbias = args.has("--dbias");
    br = backend.run_backward(precision.name, acc, loaded.in, d_out_of(args, loaded), bopt,
                              {[&] { watch = heap::Watch{}; }, [&] { backward_peak = watch.peak_growth(); }},
                              args.count("--repeat", 0));
    if (args.has("--dq")) save_with_rank(args.str("--dq"), br->grads.dq, loaded.rank);
    if (args.has("--dk")) save_with_rank(args.str("--dk"), br->grads.dk, loaded.rank);
    if (args.has("--dv")) save_with_rank(args.str("--dv"), br->grads.dv, loaded.rank);
    if (args.has("--dbias") && br->grads.dbias) save_npy_atomic(args.str("--dbias"), *br->grads.dbias);
    if (args.has("--dsinks") && br->grads.dsinks) save_npy_atomic(args.str("--dsinks"), *br->grads.dsinks);
    if (check) gc = verify_backward(*br, bopt);
  }

  if (args.flag("--json")) {
    Json j = {{"backend", backend.name},
              {"precision", precision.name},
              {"accumulate", accumulate_name(acc)},
              {"shape",
               {{"batch", shape.batch}, {"heads", shape.heads}, {"kv_heads", shape.kv_head_count()},
                {"n_q", shape.n_q}, {"n_kv", shape.n_kv}, {"d_k", shape.d_k}, {"d_v", shape.d_v}}},
              {"mask", mask_name(opt.mask)},
              {"variants", variants_name(opt)},
              {"scale", opt.resolved_scale(shape)},
              {"seconds", r.seconds},
              {"warm_seconds_median", warm_median},
              {"warm_calls", r.warm_seconds.size()},
              {"peak_bytes", peak},
              {"workspace_bytes", r.workspace_bytes},
              {"max_row_sum_error", row_sum}};
    if (check) j.update(to_json(c));
    if (br) j["backward"] = gradient_json(*br, backward_peak, gc ? &*gc : nullptr);
    print_json(j);
  } else {
    std::printf("%s %s (accumulate %s), %s, mask %s%s%s\n", backend.name.c_str(), std::string(precision.name).c_str(),
                std::string(accumulate_name(acc)).c_str(), to_string(shape).c_str(), mask_name(opt.mask).c_str(),
                variants_name(opt).empty() ? "" : ", ", variants_name(opt).c_str());
    if (backend.traits.plugin)  // its memory is its own (malloc, not the counted operator new)
      std::printf("  time %.6f s (cold call), memory not measured (a plugin allocates on its own)\n", r.seconds);
    else
      std::printf("  time %.6f s (cold call), peak heap %zu bytes, workspace %zu bytes\n", r.seconds, peak,
                  r.workspace_bytes);
    if (!r.warm_seconds.empty()) std::printf("  warm calls: median %.6f s of %zu\n", warm_median, r.warm_seconds.size());
    if (r.weights)
      std::printf(opt.sinks ? "  max |row sum - (1 - the sink's weight)| %.3g\n" : "  max |row sum - 1| %.3g\n", row_sum);
    if (check) {
      std::printf("  max |O - truth| %.3g (%.3g ulps of %s; truth %s)\n", c.out.max_abs, c.out.max_ulps,
                  std::string(precision.name).c_str(), std::string(truth_name(c.truth)).c_str());
      std::printf("  tight, per row: row %zu decides, error %.3g, tolerance %.3g (probabilistic bound %.3g; the baseline "
                  "rule (2 beta + 2) f with beta %.3g, f %.3g; %s): %s%s\n",
                  c.out_tight.row, c.out_tight.error, c.out_tight.tolerance, c.probable.out, c.beta,
                  c.floor / 2, std::string(c.criterion).c_str(), c.tight_within ? "within" : "EXCEEDED",
                  c.tight_informative ? ""
                                      : (", UNINFORMATIVE: the tolerance reaches the output itself in " +
                                         std::to_string(c.uninformative_rows) + " row(s)")
                                            .c_str());
      if (c.distribution.applies)
        std::printf("  tight, distribution: internal error at least %.3g RMS (in ulps of each row's largest |O|; "
                    "%zu elements), allowed %.3g (2x the baseline's + 2 units of noise): %s\n",
                    c.distribution.internal_rms, c.distribution.elements, c.distribution.allowed_rms,
                    c.distribution.within() ? "within" : "EXCEEDED");
      std::printf("  guaranteed: worst-case bound %.3g (row %zu): %s\n", c.out_worst.tolerance, c.out_worst.row,
                  c.within ? "within" : "EXCEEDED");
    }
    if (br) {
      std::printf("  backward: time %.6f s (cold call), peak heap %zu bytes, workspace %zu bytes\n", br->seconds,
                  backward_peak, br->workspace_bytes);
      if (!br->warm_seconds.empty())
        std::printf("  backward warm calls: median %.6f s of %zu\n", median(br->warm_seconds), br->warm_seconds.size());
      if (gc) {
        std::printf("  gradients against the truth (%s):\n", std::string(truth_name(gc->truth)).c_str());
        for (const auto& part : gc->parts)
          std::printf("    %-6s max error %.3g; tight, per row: row %zu decides, error %.3g, tolerance %.3g (baseline's "
                      "largest row error %.3g); worst-case bound %.3g: %s%s\n",
                      std::string(part.name).c_str(), part.error.max_abs, part.tight.row, part.tight.error,
                      part.tight.tolerance, part.baseline_error, part.tolerance,
                      part.within() && part.within_tight() ? "within"
                          : "EXCEEDED",
                      part.tight_informative
                          ? ""
                          : (", UNINFORMATIVE: the tolerance reaches the gradient itself in " +
                             std::to_string(part.uninformative_rows) + " row(s)")
                                .c_str());
      }
    }
  }
  if (gc && !gc->passed()) {
    std::fprintf(stderr, "attn-lab: a gradient's error against the ground truth exceeds the %s\n",
                 gc->within ? "tight criterion (probabilistic bound and 2x baseline)" : "worst-case derived bound");
    return 1;
  }
  if (check && !c.passed()) {
    std::fprintf(stderr, "attn-lab: error against the ground truth exceeds the %s\n",
                 c.within ? "tight criterion (probabilistic bound and 2x baseline)" : "worst-case derived bound");
    return 1;
  }
  return 0;
}

}  // namespace

extern const Command attend_command = {
    "attend",
    "  attn-lab attend [options]  run one backend on .npy files or random tensors\n",
    R"(attn-lab attend: one backend on .npy files or random tensors.

inputs (one of):
  --q Q.npy --k K.npy --v V.npy  float64, float32 or float16, C order; shapes [n, d],
                                 [heads, n, d] or [batch, heads, n, d], the same rank for all
  --random B,H,NQ,NKV,DK,DV[,HKV]   iid N(0, 1) tensors of that shape (K, V with HKV heads:
                                 grouped-query attention; default H). Refused, with their size,
                                 when Q, K and V in fp64 pass the memory cap (a quarter of
                                 RAM; ATTN_MEMORY_CAP bytes)
    --seed S                     seed of --random (default 0)
    --logit-scale X              multiplies Q, so scaled scores have std X (default 1)
what to compute:
  --backend NAME                 see `attn-lab list` (default: the baseline, naive)
  --precision P                  fp64|fp32|bf16|fp16 storage; inputs are rounded to it (default fp32)
  --accumulate A                 fp64|fp32|storage (default: the precision's, see `attn-lab list`)
  --scale X                      score scale (default 1/sqrt(d_k))
  --mask M                       none | causal | window:W | keypad:LENGTHS.npy (one valid key
                                 count per batch) | bool:ALLOWED.npy ([n_q, n_kv], nonzero =
                                 visible) | bias:BIAS.npy ([n_q, n_kv] added to the scaled
                                 scores; -inf masks). Causal and window align bottom-right:
                                 query i sees key j iff j <= i + n_kv - n_q.
  --block-q N, --block-k N       block sizes of tiled backends (default: theirs)
  --threads N                    threads: backends with their own workers run N over batch x heads
                                 x query blocks; BLAS backends let OpenBLAS use N (default 1)
  --allow-nonfinite              accept Inf/NaN in Q, K, V instead of rejecting them
  --repeat N                     after the first (cold) call, N more calls reusing its warm
                                 workspace; reports their median as warm seconds
outputs:
  --out O.npy                    the output, float64, same rank as the inputs
  --weights W.npy                the attention weights [.., n_q, n_kv], float64
  --lse L.npy                    the logsumexp of each row [.., n_q], float64 (-inf if masked)
  --check                        compare output, logsumexp and weights with the ground truth
                                 (code of its own, independent.hpp: 50 digits while B H n_q n_kv
                                 (d_k + d_v + 100) <= 4e6; beyond, fp64 loops with their bound for
                                 fp32 and narrower storage, double-double for fp64). Two verdicts,
                                 each per query row: tight (within the probabilistic bound,
                                 failure probability 1e-9, and within (2 beta + 2) f_i, f_i the
                                 row's rounding noise, beta the baseline backend's largest row
                                 error in those units; in bf16/fp16 storage also the internal
                                 error's mean square, measured beneath the output's rounding,
                                 within 2x the baseline's + 2 units of noise, in RMS) and
                                 guaranteed (the worst-case bound); exit 1 if either fails; a
                                 tight verdict whose tolerance reaches the output itself is
                                 flagged UNINFORMATIVE
backward pass (gradients of L = <dO, O>):
  --backward                     run it; implied by any option below
  --grad-out dO.npy              the upstream gradient dO, the output's shape (default with
                                 --random: N(0, 1) values from seed + 1)
  --dq DQ.npy, --dk DK.npy, --dv DV.npy   the gradients, float64, the inputs' rank
  --dbias DB.npy                 the gradient of a bias:BIAS.npy mask, [n_q, n_kv] (summed over
                                 batch and heads)
  --dsinks DS.npy                the gradient of the --sinks logits, [H] (summed over batch and rows)
  With --check the gradients are checked too (independent.hpp: 50 digits while 2.5 B H n_q n_kv
  (d_k + d_v + 100) <= 4e6, else double-double or fp64 loops with their bound): tight (probabilistic bound and
  2x the baseline's error + a floor) and guaranteed (the worst-case gradient bound); exit 1 if
  either fails. --repeat and --json cover the backward too (a "backward" object).
  --json                         print a one-line JSON summary instead of text
  --force                        replace existing output files
  max |row sum - 1| is reported when weights exist (--weights or --check); with --sinks, max |row
  sum - (1 - exp(sink_h - lse_i))|.

examples:
  attn-lab attend --random 1,2,300,517,64,48 --mask causal --precision fp16 --check --json
  attn-lab attend --q q.npy --k k.npy --v v.npy --backend streaming --mask keypad:lengths.npy --out o.npy --lse l.npy
  attn-lab attend --random 1,8,4096,4096,64,64 --backend streaming --threads 2 --repeat 3
  attn-lab attend --random 2,2,100,130,32,16 --mask causal --backend streaming --backward --check
  attn-lab attend --random 1,8,256,256,64,64,2 --mask causal --softcap 30 --alibi --backend streaming --check
)",
    with(kAttendValued, kVariantValued),
    with(kAttendFlags, kVariantFlags),
    run};

}  // namespace attn::cli
