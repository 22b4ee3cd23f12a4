// attn-bench: Google Benchmark over backend x precision x n x d x mask x
// threads, registered from the registry's tables through a table of series
// (one row each: its family name, which backends by trait, which precisions
// and points per profile; adding a family is adding a row there). Each
// benchmark's fields (family, role, pass, backend, storage, accumulation,
// causal, threads, shape, variant: fields_of) are written beside it as "attn"
// in --benchmark_out's JSON and in --list-plan's lines, with the families in
// the context ("attn_families"): tools read those, never the names. Names are
// stable all the same (history and comparisons join on them; never rename one):
//   attn/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>
//   attn/<backend>/<precision>/causal:<0|1>/threads:<t>/n_q:<n_q>/n_kv:<n_kv>/d:<d>
//   attn_cold/<backend>/<precision>/causal:0/threads:1/n:<n>/d:<d>   (allocation and first touch included)
//   attn_h8/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>  (B = 1, H = 8: the performance targets)
//   attn_bwd/...    the backward pass alone (the forward's output and logsumexp prepared outside the timing)
//   attn_bwd_mem/... the backward's memory series (B = H = 1)
//   attn_fwdbwd/... the forward and then the backward, as one training step times them
//   attn_var/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>/h:<H>/h_kv:<H_kv>/variant:<v>
//       the variants (problem.hpp) against plain attention at the same shape:
//       v = plain, gqa (H_kv < H), softcap (c = 50), sinks, alibi, documents (8)
//   attn_decode/<backend>/<precision>/threads:<t>/n_kv:<n_kv>/d:<d>/h:<H>/h_kv:<H_kv>
//       one decode step: n_q = 1 over a KV cache of n_kv keys (kv_bytes/s: K and V read once); at the
//       profile's longest n_kv each sample preceded by `attn-lab peak`'s read probe ("partner_samples": its
//       time for K and V's bytes; the decode targets' fraction of the read bandwidth)
//   attn_noisy/<backend>/<precision>/causal:0/threads:1/n:<n>/d:<d>/h:8/h_kv:8/variant:noisy
//       attn_h8's one-thread forward with a noisy neighbour: a thread that sweeps a 256 MiB buffer (reads and
//       writes every cache line, over and over) runs on the other core while the calls are timed
//   attn_versus/<backend>/<precision>/causal:0/threads:1/n:<n>/d:<d>/h:8/h_kv:8/variant:versus
//       an outside kernel's (plugin's) attn_h8 one-thread forward, each sample preceded by one call of the
//       fused backend on the same shape: the two alternate, and their ratio is the race's
//   attn_paired/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>/h:8/h_kv:8/variant:paired
//   attn_bwd_paired/... the same for the backward pass
//       the fused backend's ratio targets: each sample preceded by one call of the other side (2 threads
//       after 1, causal after no mask, bf16 and fp16 after fp32), its times "partner_samples"; fp32, one
//       thread, no mask after `attn-lab peak`'s fp32 FMA probe (the fraction-of-peak targets)
// attn_h8, attn_noisy, attn_versus, attn_paired, attn_bwd, attn_bwd_paired and attn_fwdbwd run B = 1, H = 8; every other family runs B = H = 1. threads:<t> is the worker count of a
// backend with its own threads and OpenBLAS's thread count for the BLAS backends.
// Counters: FLOP/s (4 B H n_q n_kv d, halved for causal; backward 2.5x that,
// forward + backward 3.5x, backend.hpp's backward_flops), bytes of Q/K/V/O
// per second, the model's workspace bytes, the measured peak heap of one
// cold call, and the error against the ground truth of verify() (50 digits
// where affordable, else independent.hpp's double-double or fp64:
// error_ref_digits 50 or 16, the truth's own bound in the tolerance).
// Each benchmark verifies its output before timing and skips with an error
// on a mismatch; a size whose workspace and tensors exceed the memory cap is
// skipped with the bytes it would need.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attn/core/alloc_counter.hpp"
#include "attn/io/npy.hpp"
#include "attn/registry/plugin.hpp"
#include "attn/core/random.hpp"
#include "attn/simd/simd.hpp"
#include "attn/verify/verify.hpp"
#include "attn/io/json.hpp"
#include "studies/machine.hpp"
#include "studies/studies.hpp"

namespace attn::bench {
namespace {

struct Profile {
  std::vector<std::size_t> n, d, cross_n_kv;
  // Extra fp32, non-causal, 1-thread points for the scaling report:
  // n at d_other, and d at n_other.
  std::vector<std::size_t> scaling_n = {}, scaling_d = {};
  std::vector<bool> causal = {false, true};
  bool all_precisions_everywhere = true;    // else fp32 everywhere, others at n_other only
  std::size_t n_other = 1024, d_other = 64;  // where the non-fp32 precisions run in a reduced profile
  std::size_t thread_n = 4096;              // where threads:2 runs in a reduced profile
  // Backends with memory independent of n, fp32, d_other: the n series of their peak-heap counter.
  std::vector<std::size_t> memory_n = {};
  // attn_h8: B = 1, H = 8 at this n (0: none), d in d.
  std::size_t h8_n = 0;
  // The backward families: B = 1, H = 8 at these n (d in d), and the memory
  // series of the backward (B = H = 1, fp32, d_other) for the fused backend
  // (bwd_memory_n) and the GEMM one (bwd_gemm_memory_n: its P is n^2).
  std::vector<std::size_t> bwd_n = {}, bwd_memory_n = {}, bwd_gemm_memory_n = {};
  // The variants: B = 1 at var_n, d = var_d (H = 8; GQA at H = 32, H_kv = 8),
  // and decode steps over these KV cache lengths (H = 32, H_kv = 8, d = 128).
  std::size_t var_n = 0, var_d = 128;
  std::vector<std::size_t> decode_n_kv = {};
  // The backward of the GEMM backends (attn_bwd beyond the fused one) and the forward + backward family: the
  // backward table's rows, no target's (off in the quick profile, which keeps the targets' points).
  bool bwd_gemm = true, fwdbwd = true;
  // The backward in the narrow precisions (attn_bwd bf16, fp16: the backward_narrow_over_fp32 target's points), and the plugins' causal attn_h8
  // points (on in quick: the peers' causal row of the targets, forward_over_fastest_peer).
  bool bwd_narrow = true, plugin_h8_causal = true;
  // The exact (50-digit) backend in every precision, else in fp64 only (smoke: its other precisions were 24 s of
  // the smoke profile's 38 s of benchmarks, timed three times in the test suite).
  bool exact_all_precisions = true;
};

Profile profile(const std::string& name) {
  if (name == "full") {
    Profile p;
    p.n = {128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    p.d = {32, 64, 128, 256};
    p.cross_n_kv = {1024, 4096, 16384, 65536};
    p.h8_n = 4096;
    p.bwd_n = {1024, 4096};
    p.bwd_memory_n = {256, 1024, 4096, 16384};
    p.bwd_gemm_memory_n = {256, 1024, 4096};
    p.var_n = 4096;
    p.decode_n_kv = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
    return p;
  }
  if (name == "quick") {
    Profile p;
    p.n = {1024, 4096};
    p.d = {64, 128};
    p.cross_n_kv = {4096, 65536};
    p.scaling_n = {256, 512, 2048};
    p.scaling_d = {32, 256};
    p.all_precisions_everywhere = false;
    p.memory_n = {8192, 16384};
    p.h8_n = 4096;
    p.bwd_memory_n = {256, 1024, 4096, 16384};
    p.bwd_gemm_memory_n = {256, 1024, 4096};
    // The quick profile is the default run's (scripts/run, about 12 minutes on 2 cores): the points the
    // reports' questions need (the targets' shapes, the scaling and memory fits, each variant against plain
    // attention, decode steps up to n_kv = 131072: issue 38's decode target's length, and past the L3 of the
    // machines seen (260 MiB on one Xeon: at 32768 keys the fp32 cache, 268 MB, was read at 131% of the read
    // probe's bandwidth, run 20261204-021216); the rest is in full.
    p.var_n = 2048;
    p.decode_n_kv = {1024, 8192, 32768, 131072};
    p.bwd_gemm = p.fwdbwd = false;
    p.bwd_n = {4096};
    return p;
  }
  if (name == "smoke") {
    Profile p;
    p.n = {128};
    p.d = {32};
    p.cross_n_kv = {256};
    p.n_other = 128;
    p.d_other = 32;
    p.thread_n = 128;
    p.h8_n = 128;
    p.bwd_n = {128};
    p.bwd_memory_n = {128, 256};
    p.bwd_gemm_memory_n = {128, 256};
    p.var_n = 128;
    p.var_d = 32;
    p.decode_n_kv = {256};
    p.exact_all_precisions = false;
    return p;
  }
  std::fprintf(stderr, "attn-bench: unknown profile '%s' (smoke, quick, full)\n", name.c_str());
  std::exit(2);
}

// One benchmark point: the shape, mask, thread count and name form.
struct Point {
  Shape shape;
  bool causal = false;
  int threads = 1;
  bool cross = false;  // named by n_q and n_kv
  // attn_var's variant (plain, gqa, softcap, sinks, alibi, documents),
  // "decode" (attn_decode), "one-head" (attn_bwd_paired's B = H = 1 point), or
  // "paired", "versus", "noisy" (their families); empty: the other families
  std::string variant = {};
  // Verified at n = min(n, verify_n) (0: at its own shape): the naive baseline at n = 4096, H = 32 takes minutes;
  // a decode step at n_kv = min(n_kv, verify_n): at 32768 keys its verification drew, rounded and copied 270 MB
  // of K and V several times over (7.6 s, fresh memory; the same kernel path as at 8192, in more splits).
  std::size_t verify_n = 0;
  // The call timed once before each sample (with --adaptive), so that the two alternate: a host whose speed
  // drifts over minutes moves both alike, and their ratio (sample by sample) is the comparison's. attn_versus:
  // the fused backend on this point; attn_paired, attn_bwd_paired: this backend at another precision, mask or
  // thread count (the ratio targets' other side).
  struct Partner {
    bool fused = false;     // the fused backend (fused_backend()) instead of this one
    // No call: the fp32 FMA probe of `attn-lab peak` (fp32_fma_gflops_core, one thread, about 10 ms), recorded
    // as the time it would take for this point's FLOPs at the rate it measured, so that the pairs' ratio (the
    // partner's time over the point's) is the point's fraction of the peak measured beside each sample.
    bool peak = false;
    // No call: the read probe of `attn-lab peak` (read_gbs_core or read_gbs_all: read_gbs_probe on the point's
    // threads, about 70 ms), recorded as the time K and V's bytes would take at the rate it measured, so that
    // the pairs' ratio is a decode step's fraction of the read bandwidth measured beside each sample.
    bool read = false;
    std::string precision = {};  // another storage ("": the same)
    int causal = -1;        // another mask (-1: the same)
    int threads = 0;        // another thread count (0: the same)
  };
  std::optional<Partner> partner = std::nullopt;
};

// The partner's point: this one with the partner's mask and thread count, no partner of its own.
Point partner_point(const Point& pt) {
  Point q = pt;
  if (pt.partner->causal >= 0) q.causal = pt.partner->causal == 1;
  if (pt.partner->threads) q.threads = pt.partner->threads;
  q.partner.reset();
  q.variant.clear();
  return q;
}

bool is_fp32(const PrecisionInfo& p) { return p.name == "fp32"; }
// The reduced profiles run other precisions at one size only.
bool everywhere(const Profile& prof, const PrecisionInfo& p) { return prof.all_precisions_everywhere || is_fp32(p); }
Shape square(std::size_t n, std::size_t d, std::size_t heads = 1) { return {1, heads, n, n, d, d}; }

// The ratio targets' points of one precision (targets.json: two_threads, causal_speedup, narrow_over_fp32,
// bf16_dot_over_fp32, backward_narrow_over_fp32, forward_fraction_of_peak, backward_fraction_of_peak), each
// with the other side as its partner: fp32 on 2 threads after 1 thread, fp32 causal after no mask, bf16 and
// fp16 after fp32 (1 thread, no mask), fp32 (1 thread, no mask) after the FMA probe. B = 1, H = 8 at n.
std::vector<Point> paired_points(std::size_t n, const std::vector<std::size_t>& ds, const PrecisionInfo& p) {
  std::vector<Point> pts;
  for (std::size_t d : ds) {
    if (is_fp32(p)) {
      pts.push_back({square(n, d, 8), false, 1, false, "paired", 1024, Point::Partner{.peak = true}});
      pts.push_back({square(n, d, 8), false, 2, false, "paired", 1024, Point::Partner{.threads = 1}});
      pts.push_back({square(n, d, 8), true, 1, false, "paired", 1024, Point::Partner{.causal = 0}});
    } else if (p.name == "bf16" || p.name == "fp16") {
      pts.push_back({square(n, d, 8), false, 1, false, "paired", 1024, Point::Partner{.precision = "fp32"}});
    }
  }
  return pts;
}

// What a benchmark times: the forward call, the backward call, or both.
enum class Pass { forward, backward, forward_backward };

// The FLOPs of one call of a pass (backend.hpp's flops and backward_flops).
double pass_flops(const Shape& s, bool causal, Pass pass) {
  return pass == Pass::forward    ? flops(s, causal)
         : pass == Pass::backward ? backward_flops(s, causal)
                                  : flops(s, causal) + backward_flops(s, causal);
}

// The bytes of K and V (a decode step reads each once: its floor of memory traffic).
double kv_bytes(const Shape& s, const PrecisionInfo& p) {
  return double(s.batch * s.kv_head_count() * s.n_kv * (s.d_k + s.d_v) * p.bytes);
}

// A series of benchmarks: one row of the table below.
struct Series {
  std::string_view family;  // the first part of every name
  std::string_view role;    // this row's part of the family (the benchmark's "role" field)
  std::string_view what;    // for the reader of this table
  bool cold = false;        // allocation and first touch inside the timing, on purpose
  std::function<bool(const BackendTraits&)> backends;
  std::function<std::vector<Point>(const Profile&, const PrecisionInfo&, const BackendTraits&)> points;
  Pass pass = Pass::forward;
};

const std::vector<Series>& series() {
  static const std::vector<Series> table = {
      {"attn", "grid", "the grid: n x d x mask, fp32 everywhere, other precisions at (n_other, d_other) in reduced profiles",
       false, [](const BackendTraits&) { return true; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         for (std::size_t n : prof.n)
           for (std::size_t d : prof.d) {
             if (!everywhere(prof, p) && (n != prof.n_other || d != prof.d_other)) continue;
             for (bool causal : prof.causal)
               if (!causal || prof.all_precisions_everywhere || d == prof.d_other) pts.push_back({square(n, d), causal});
           }
         return pts;
       }},
      {"attn", "threads",
       "two threads, at thread_n and d_other (fp32 in reduced profiles); backends with their own threads also at "
       "every n x d of the grid without a mask (fp32), so a plugin's two-thread speed is beside theirs",
       false, [](const BackendTraits& t) { return t.uses_blas || t.own_threads; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         for (std::size_t n : prof.n)
           for (std::size_t d : prof.d)
             for (bool causal : prof.causal) {
               const bool reduced_point = is_fp32(p) && ((n == prof.thread_n && d == prof.d_other) ||
                                                         (t.own_threads && !causal));
               if (prof.all_precisions_everywhere || reduced_point) pts.push_back({square(n, d), causal, 2});
             }
         return pts;
       }},
      {"attn", "memory", "the memory series: n beyond the grid for backends whose memory is independent of n", false,
       [](const BackendTraits& t) { return t.memory_independent_of_n; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         if (is_fp32(p))
           // (verified at the grid's largest n, whose own benchmark shares that check: the series is about memory)
           for (std::size_t n : prof.memory_n) pts.push_back({square(n, prof.d_other), false, 1, false, "", prof.n.back()});
         return pts;
       }},
      {"attn", "scaling", "the scaling report's extra n (at d_other) and d (at n_other), fp32", false,
       [](const BackendTraits&) { return true; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         if (!is_fp32(p)) return pts;
         for (std::size_t n : prof.scaling_n) pts.push_back({square(n, prof.d_other)});
         for (std::size_t d : prof.scaling_d) pts.push_back({square(prof.n_other, d)});
         return pts;
       }},
      {"attn", "cross", "cross-attention: 64 queries over n_kv keys", false, [](const BackendTraits&) { return true; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         if (everywhere(prof, p))
           for (std::size_t n_kv : prof.cross_n_kv)
             pts.push_back({{1, 1, 64, n_kv, prof.d_other, prof.d_other}, false, 1, true});
         return pts;
       }},
      {"attn_cold", "cold", "one cold call: the workspace allocated and first touched inside the timing (not plugins: their "
       "memory is their own)", true,
       [](const BackendTraits& t) { return !t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         const std::size_t n = std::min<std::size_t>(prof.n.back(), 4096);
         return everywhere(prof, p) ? std::vector<Point>{{square(n, prof.d_other)}} : std::vector<Point>{};
       }},
      {"attn_h8", "targets",
       "the performance targets, B = 1, H = 8: every backend but the baseline and the exact one in fp32; the fused "
       "ones (own threads) also causal, on two threads, and in the narrow precisions",
       false, [](const BackendTraits& t) { return !t.baseline && !t.exact; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         if (!prof.h8_n) return pts;
         const bool narrow = p.unit_roundoff > 0x1p-24;
         for (std::size_t d : prof.d) {
           const Shape s8 = square(prof.h8_n, d, 8);
           // fp32 verified at n = 1024 (H = 8, the same tiles and code paths): the truth of its own
           // (independent.hpp, no BLAS) and the naive baseline took 25-50 s per point at n = 4096
           if (is_fp32(p)) pts.push_back({s8, false, 1, false, "", 1024});
           if (is_fp32(p) && t.own_threads)
             for (auto [causal, threads] : {std::pair{true, 1}, {false, 2}, {true, 2}})
               if (!causal || !t.plugin || prof.plugin_h8_causal) pts.push_back({s8, causal, threads, false, "", 1024});
           // (verified at n = 512: the baseline's narrow arithmetic, emulated, takes minutes at n = 4096, H = 8)
           if (narrow && t.own_threads) pts.push_back({s8, false, 1, false, "", 512});
         }
         return pts;
       }},
      {"attn_bwd", "backward",
       "the backward pass, B = 1, H = 8 at bwd_n: every backend with one but the baseline and the exact one in fp32 "
       "(the fused ones only where the profile has no bwd_gemm); "
       "the fused ones also causal, on two threads and in the narrow precisions at h8_n",
       false, [](const BackendTraits& t) { return !t.baseline && !t.exact; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         const bool narrow = p.unit_roundoff > 0x1p-24;
         for (std::size_t n : prof.bwd_n)
           for (std::size_t d : prof.d) {
             const Shape s8 = square(n, d, 8);
             if (is_fp32(p) && (t.own_threads || prof.bwd_gemm)) pts.push_back({s8});
             if (n != prof.h8_n || !t.own_threads) continue;
             if (is_fp32(p))
               for (auto [causal, threads] : {std::pair{true, 1}, {false, 2}, {true, 2}}) pts.push_back({s8, causal, threads});
             if (narrow && prof.bwd_narrow) pts.push_back({s8});
           }
         return pts;
       },
       Pass::backward},
      {"attn_bwd_mem", "backward-memory", "the backward's memory series: B = H = 1, fp32, d_other, the fused and the GEMM backends", false,
       [](const BackendTraits& t) { return !t.baseline && !t.exact; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         const bool fused = t.own_threads && t.memory_independent_of_n, gemm = t.uses_blas && !t.tiled;
         if (is_fp32(p))
           for (std::size_t n : fused ? prof.bwd_memory_n : gemm ? prof.bwd_gemm_memory_n : std::vector<std::size_t>{})
             pts.push_back({square(n, prof.d_other)});
         return pts;
       },
       Pass::backward},
      {"attn_var", "variants",
       "the variants at var_n, var_d, causal, B = 1: softcap, sinks, alibi, documents and plain at H = 8, gqa (H_kv = 8) "
       "and mha at H = 32; fp32, the fused backend (own threads) also bf16; every other backend but the baseline and "
       "the exact one at n = 1024, d = 64 (not plugins: the variants are this suite's kernels' study)",
       false, [](const BackendTraits& t) { return !t.baseline && !t.exact && !t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         if (!prof.var_n || !(is_fp32(p) || (t.own_threads && p.name == "bf16"))) return pts;
         auto add = [&](std::size_t n, std::size_t d) {
           for (const char* v : {"plain", "softcap", "sinks", "alibi", "documents"})
             pts.push_back({square(n, d, 8), true, 1, false, v, 512});
           Shape gqa = square(n, d, 32), mha = gqa;
           gqa.kv_heads = 8;
           pts.push_back({gqa, true, 1, false, "gqa", 512});
           pts.push_back({mha, true, 1, false, "mha", 512});
         };
         if (t.own_threads) add(prof.var_n, prof.var_d);
         if (is_fp32(p)) add(std::min<std::size_t>(prof.var_n, 1024), std::min<std::size_t>(prof.var_d, 64));
         return pts;
       }},
      {"attn_decode", "decode",
       "decode steps: n_q = 1 over decode_n_kv keys, H = 32, H_kv = 8, d = 128; the fused backend in fp32, bf16 and "
       "fp16 on 1 and 2 threads, every other backend but the baseline, the exact one and plugins in fp32 on 1",
       false, [](const BackendTraits& t) { return !t.baseline && !t.exact && !t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         if (p.name == "fp64" || (!is_fp32(p) && !t.own_threads)) return pts;
         const std::size_t d = prof.decode_n_kv.size() > 1 ? 128 : 32;
         for (std::size_t n_kv : prof.decode_n_kv)
           for (int threads : {1, 2})
             if (threads == 1 || t.own_threads) {
               pts.push_back({{1, 32, 1, n_kv, d, d, 8}, false, threads, true, "decode", 8192});
               // the longest KV cache (the decode targets'): the read probe before each sample
               if (n_kv == prof.decode_n_kv.back()) pts.back().partner = Point::Partner{.read = true};
             }
         return pts;
       }},
      {"attn_noisy", "noisy-neighbour",
       "attn_h8's forward points of one thread without a mask (fp32, d in d) with a noisy neighbour on the other "
       "core (NoisyNeighbour): the fused backend, and the GEMM backend for comparison (issue 38: streaming lost up "
       "to 27% on a shared host where the GEMMs did not)",
       false, [](const BackendTraits& t) {
         return !t.plugin && ((t.own_threads && t.memory_independent_of_n) || (t.uses_blas && !t.tiled && !t.own_threads));
       },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         if (prof.h8_n && is_fp32(p))
           for (std::size_t d : prof.d) pts.push_back({square(prof.h8_n, d, 8), false, 1, false, "noisy", 1024});
         return pts;
       }},
      {"attn_versus", "versus",
       "attn_h8's forward points of one thread without a mask (fp32 and bf16, d in d) of each outside kernel "
       "(plugin), each sample preceded by one call of the fused backend (fused_backend()) on the same shape and "
       "storage: a host whose speed drifts over minutes moves both alike, and the rate over the fastest outside "
       "kernel is their ratio (the attn_h8 points of the two are timed minutes apart: run 20261207-070709 read "
       "streaming bf16 at 0.92x / 0.94x OpenVINO's SDPA that way, 1.19x at d = 128 in the run before, the "
       "fp32 pairs alternated beside them 1.04x / 1.02x)",
       false, [](const BackendTraits& t) { return t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits& t) {
         std::vector<Point> pts;
         // the peer targets' storages: fp32, and bf16 where attn_h8 times the kernel in it (its own threads)
         if (prof.h8_n && (is_fp32(p) || (p.name == "bf16" && t.own_threads)))
           for (std::size_t d : prof.d)
             pts.push_back({square(prof.h8_n, d, 8), false, 1, false, "versus", 1024, Point::Partner{.fused = true}});
         return pts;
       }},
      {"attn_paired", "paired",
       "the fused backend's ratio targets at attn_h8's points (B = 1, H = 8, h8_n, d in d), each sample preceded by "
       "one call of the other side (paired_points): the two alternate, so a host whose speed drifts over minutes "
       "moves both alike (the attn_h8 points of the two are timed minutes apart)",
       false, [](const BackendTraits& t) { return t.own_threads && t.memory_independent_of_n && !t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         return prof.h8_n ? paired_points(prof.h8_n, prof.d, p) : std::vector<Point>{};
       }},
      {"attn_bwd_paired", "paired",
       "attn_paired for the backward pass, at the backward targets' n (the largest bwd_n); bf16 and fp16 where "
       "the profile has the narrow backward (bwd_narrow); and one head (B = H = 1, fp32, d = 64, variant "
       "one-head) on 2 threads after 1: the parallelism inside a head",
       false, [](const BackendTraits& t) { return t.own_threads && t.memory_independent_of_n && !t.plugin; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         if (prof.bwd_n.empty() || (!is_fp32(p) && !prof.bwd_narrow)) return std::vector<Point>{};
         const std::size_t n = *std::max_element(prof.bwd_n.begin(), prof.bwd_n.end());
         std::vector<Point> pts = paired_points(n, prof.d, p);
         if (is_fp32(p)) pts.push_back({square(n, 64), false, 2, false, "one-head", 1024, Point::Partner{.threads = 1}});
         return pts;
       },
       Pass::backward},
      {"attn_fwdbwd", "training-step", "forward then backward (one training step's attention), fp32, B = 1, H = 8 at h8_n (profiles with "
       "fwdbwd)", false,
       [](const BackendTraits& t) { return !t.baseline && !t.exact; },
       [](const Profile& prof, const PrecisionInfo& p, const BackendTraits&) {
         std::vector<Point> pts;
         if (prof.h8_n && prof.fwdbwd && is_fp32(p))
           for (std::size_t d : prof.d) pts.push_back({square(prof.h8_n, d, 8)});
         return pts;
       },
       Pass::forward_backward},
  };
  return table;
}

std::size_t tensor_bytes(const Shape& s, const PrecisionInfo& p) {
  return (s.batch * s.heads * (s.n_q * s.d_k + s.n_q * s.d_v) + s.batch * s.kv_head_count() * s.n_kv * (s.d_k + s.d_v)) *
         p.bytes;
}

std::string cap_message(std::size_t need, std::size_t cap) {
  return "needs " + std::to_string(need >> 20) + " MiB (workspace + tensors), over the memory cap of " +
         std::to_string(cap >> 20) + " MiB (--memory-cap or ATTN_MEMORY_CAP)";
}

std::size_t memory_cap = 0;

// What a benchmark needs before its timed loop, prepared once: Google
// Benchmark calls the function several times (to pick the iteration count),
// and the verification costs more than the timing.
struct Prepared {
  std::string skip;  // non-empty: why this benchmark cannot run
  std::unique_ptr<PreparedCall> call;
  std::size_t model = 0, peak = 0;
  double err = 0, bound = 0, worst_bound = 0;
  bool exact_ref = false;
  Accumulate acc = Accumulate::fp32;  // the policy it ran (a plugin's own where it lacks the default)
  double seconds = 0;                 // the preparation's wall time (inputs, cold call, verification)
};

// One slot: the runs of a benchmark are consecutive, so only the current one is kept.
std::string slot_key;
std::unique_ptr<Prepared> slot;

// The point's options; a variant's at the given shape (verification may run a smaller one).
Options options_of(const Point& pt, const Shape& s) {
  Options opt;
  if (pt.causal) opt.mask = mask::Causal{};
  opt.threads = static_cast<std::size_t>(pt.threads);
  if (pt.variant == "softcap") opt.softcap = 50.0;  // Gemma 2's attention logit cap
  if (pt.variant == "alibi") opt.alibi_slopes = alibi_slopes(s.heads);
  if (pt.variant == "sinks") {
    NormalStream normal(7);
    opt.sinks = xt::xtensor<double, 1>::from_shape({s.heads});
    for (double& x : *opt.sinks) x = normal.next();
  }
  if (pt.variant == "documents") {  // 8 documents of equal length
    Segments seg = Segments::from_shape({1, s.n_kv});
    for (std::size_t j = 0; j < s.n_kv; ++j) seg(0, j) = std::int64_t(j * 8 / s.n_kv);
    opt.segments = std::move(seg);
  }
  return opt;
}
Options options_of(const Point& pt) { return options_of(pt, pt.shape); }

// The shape a point is verified at: its own, or n = min(n, verify_n) (a decode step: n_kv = min(n_kv, verify_n),
// n_q = 1).
Shape verified_shape(const Point& pt) {
  Shape s = pt.shape;
  if (pt.verify_n && pt.variant == "decode") s.n_kv = std::min(s.n_kv, pt.verify_n);
  else if (pt.verify_n) s.n_q = s.n_kv = std::min(s.n_q, pt.verify_n);
  return s;
}

// Verifications share their truth: every backend of a precision is verified on the same rounded inputs (seed 42
// at the point's shape, rounded to the storage), so the ground truth (the 50-digit reference at small n, which
// costs far more than the benchmark; fp64 GEMMs at large n) and the baseline's run for the tight verdict (naive:
// seconds at n = 4096, H = 8) are computed once per inputs, options, precision and policy. The key carries a
// digest of the rounded inputs themselves: a reuse is of identical data, never assumed. Kept while the kept
// outputs stay under shared_check_cap bytes; past it, each verification computes its own.
struct SharedCheck {
  std::optional<GroundTruth> truth;
  std::map<Accumulate, xt::xtensor<double, 4>> baseline_out;  // the baseline backend's output, by policy
};
std::map<std::string, SharedCheck> shared_checks;
std::size_t shared_check_bytes = 0;
constexpr std::size_t shared_check_cap = std::size_t(2) << 30;

std::uint64_t digest(const Inputs<double>& in) {  // FNV-1a over the bytes of Q, K, V
  std::uint64_t h = 1469598103934665603ull;
  for (const auto* t : {&in.q, &in.k, &in.v})
    for (double x : *t) {
      std::uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      for (int i = 0; i < 8; ++i) h = (h ^ ((bits >> (8 * i)) & 0xff)) * 1099511628211ull;
    }
  return h;
}

std::size_t bytes_of(const GroundTruth& t) {
  return 8 * (t.result.out.size() + (t.result.weights ? t.result.weights->size() : 0) +
              (t.result.lse ? t.result.lse->size() : 0));
}

Check verify_shared(const RunReport& r, const Options& opt, const Point& pt) {
  const Shape s = r.rounded_inputs.shape();
  const std::string key = std::to_string(s.batch) + "," + std::to_string(s.heads) + "," + std::to_string(s.n_q) +
                          "," + std::to_string(s.n_kv) + "," + std::to_string(s.d_k) + "," + std::to_string(s.d_v) +
                          "," + std::to_string(s.kv_head_count()) + (pt.causal ? " causal " : " ") + pt.variant + " " +
                          std::string(r.precision) + " " + std::to_string(digest(r.rounded_inputs));
  auto found = shared_checks.find(key);
  if (found == shared_checks.end()) {
    if (shared_check_bytes > shared_check_cap) return verify(r, opt);
    found = shared_checks.emplace(key, SharedCheck{}).first;
  }
  SharedCheck& shared = found->second;
  if (!shared.truth) {
    shared.truth = ground_truth(r.rounded_inputs, opt, r.u_store);
    shared_check_bytes += bytes_of(*shared.truth);
  }
  if (r.traits.baseline) return verify(r, opt, *shared.truth);
  auto it = shared.baseline_out.find(r.accumulate);
  if (it == shared.baseline_out.end()) {
    Options o = opt;
    o.need_weights = o.need_lse = false;
    it = shared.baseline_out.emplace(r.accumulate, baseline_backend().run(r.precision, r.accumulate, r.rounded_inputs, o).out)
             .first;
    shared_check_bytes += 8 * it->second.size();
  }
  RunReport baseline;  // what verify() reads of the baseline's run: its output and its storage's roundoff
  baseline.out = it->second;
  baseline.u_store = r.u_store;
  return verify(r, opt, *shared.truth, &baseline);
}

// The accumulation a benchmark runs, set in prep.acc: the precision's default, or a plugin's own where it runs
// this storage with another only (torch: bf16 in bf16; its label says so); false, with prep.skip saying why,
// where it runs it with none. Forward and backward alike.
bool choose_accumulate(Prepared& prep, const BackendInfo& b, const PrecisionInfo& p, const Shape& s, const Options& opt) {
  Accumulate acc = p.default_accumulate;
  for (Accumulate other : accumulate_policies())
    if (!b.unsupported_reason(p, acc, s, opt).empty() && b.unsupported_reason(p, other, s, opt).empty()) acc = other;
  if (const std::string why = b.unsupported_reason(p, acc, s, opt); !why.empty()) {
    prep.skip = "not supported: " + why;
    return false;
  }
  prep.acc = acc;
  return true;
}

// The heap the timed calls run on: freed memory stays in it for the next
// iteration (no first-touch in timings); set in main, the cold family returns
// it explicitly with malloc_trim.
constexpr int timed_mmap_threshold = 1 << 30;

// While a benchmark is prepared, large buffers (its inputs, the prepared
// call's workspace) are mapped as a caller's are (glibc's default: each its
// own mmap, as for PyTorch's and NumPy's tensors and `attn-lab attend`'s),
// not carved one after the other from the heap: with the timed heap's
// threshold, K and V sat 512 MiB + 64 bytes apart on the brk heap, and the
// fp32 decode step over 131072 keys ran 1.0-1.6x slower than with the same
// tensors mapped (`attend` under MALLOC_MMAP_THRESHOLD_=1073741824 against
// without, nine pairs: docs/performance.md, section 36).
struct CallerHeap {
  CallerHeap() { mallopt(M_MMAP_THRESHOLD, 128 * 1024); }
  ~CallerHeap() { mallopt(M_MMAP_THRESHOLD, timed_mmap_threshold); }
  CallerHeap(const CallerHeap&) = delete;
  CallerHeap& operator=(const CallerHeap&) = delete;
};

// The forward benchmark's preparation: one cold call watched and verified at the benchmark's own shape.
void prepare_forward(Prepared& prep, const BackendInfo& b, const PrecisionInfo& p, const Point& pt) {
  const CallerHeap caller_heap;
  const Options opt = options_of(pt);
  if (!choose_accumulate(prep, b, p, pt.shape, opt)) return;
  const Accumulate acc = prep.acc;
  prep.model = b.workspace_bytes(p, acc, pt.shape, opt);
  const std::size_t need = prep.model + 2 * tensor_bytes(pt.shape, p);
  if (need > memory_cap) return void(prep.skip = cap_message(need, memory_cap));
  // Inputs: random (never zeros), fixed seed, rounded to storage, touched here. The last shape's are kept:
  // consecutive benchmarks of one shape (threads, causal) share them (seconds to draw at a decode step's n_kv).
  static Shape last_shape{};
  static Inputs<double> last_inputs;
  if (!(last_shape == pt.shape)) {
    last_inputs = random_inputs(pt.shape, /*seed=*/42);
    last_shape = pt.shape;
  }
  const Inputs<double>& in = last_inputs;
  // One cold call with the heap watched: its high-water mark is the peak;
  // its output verified against the ground truth (at verified_shape: a
  // second call there when it is smaller).
  heap::Watch watch;
  const RunReport r = b.run(p.name, acc, in, opt, {[&] { watch = heap::Watch{}; }, [&] { prep.peak = watch.peak_growth(); }});
  const Shape small = verified_shape(pt);
  const Options small_opt = options_of(pt, small);
  const Check c = small == pt.shape ? verify_shared(r, opt, pt)
                                    : verify_shared(b.run(p.name, acc, random_inputs(small, 42), small_opt), small_opt, pt);
  prep.exact_ref = c.truth == TruthKind::digits50;
  // The row nearest its tight tolerance (each row is judged by its own).
  prep.err = c.out_tight.error;
  prep.bound = c.out_tight.tolerance;
  prep.worst_bound = c.out_worst.tolerance;
  if (!c.passed())
    prep.skip = "output row " + std::to_string(c.out_tight.row) + ": error " + std::to_string(c.out_tight.error) +
                " exceeds its tight tolerance " + std::to_string(c.out_tight.tolerance) + " or row " +
                std::to_string(c.out_worst.row) + "'s worst-case bound " + std::to_string(c.out_worst.tolerance) +
                " (truth " + std::string(truth_name(c.truth)) + ")";
  else
    prep.call = b.prepare(p, acc, r.rounded_inputs, opt);
}

// The backward benchmarks' preparation. The gradients are verified
// (verify_backward: the tight verdict, against 50 digits where affordable)
// on the same configuration at n = min(n, 1024) and H = 1, since the truth
// and the naive baseline's backward at n = 4096, H = 8 would cost minutes;
// the timed call's gradients are checked finite. The peak heap is of one
// backward call on a fresh workspace.
void prepare_backward(Prepared& prep, const BackendInfo& b, const PrecisionInfo& p, const Point& pt) {
  const CallerHeap caller_heap;
  const Options opt = options_of(pt);
  if (!choose_accumulate(prep, b, p, pt.shape, opt)) return;
  const Accumulate acc = prep.acc;
  prep.model = b.backward_workspace_bytes(p, acc, pt.shape, opt);
  const std::size_t need = prep.model + b.workspace_bytes(p, acc, pt.shape, opt) + 4 * tensor_bytes(pt.shape, p);
  if (need > memory_cap) return void(prep.skip = cap_message(need, memory_cap));
  Shape small = pt.shape;
  small.heads = 1;
  small.n_q = small.n_kv = std::min<std::size_t>(pt.shape.n_q, 1024);
  const BackwardReport check = b.run_backward(p.name, acc, random_inputs(small, 42), random_d_out(small, 43), opt);
  const GradientCheck c = verify_backward(check, opt);
  prep.exact_ref = c.truth == TruthKind::digits50;
  for (const auto& part : c.parts)  // the part nearest its tolerance
    if (part.tight.ratio >= prep.err / std::max(prep.bound, 1e-300)) {  // the deciding row's
      prep.err = part.tight.error;
      prep.bound = part.tight.tolerance;
      prep.worst_bound = part.tolerance;
    }
  if (!c.passed()) {
    for (const auto& part : c.parts)
      if (!part.within() || !part.within_tight())
        prep.skip += std::string(part.name) + " row " + std::to_string(part.tight.row) + " error " +
                     std::to_string(part.tight.error) + " exceeds its tight tolerance " +
                     std::to_string(part.tight.tolerance) + ", or max error " + std::to_string(part.error.max_abs) +
                     " the bound " + std::to_string(part.tolerance) + "; ";
    if (prep.skip.empty()) prep.skip = "a gradient is not finite where the truth is";
    return;
  }
  prep.call = b.prepare(p, acc, rounded_to(p, random_inputs(pt.shape, 42)), opt);
  prep.call->prepare_backward(random_d_out(pt.shape, 43));
  prep.call->release_backward_workspace();
  heap::Watch watch;
  prep.call->call_backward();
  prep.peak = watch.peak_growth();
}

const Prepared& prepare(const std::string& key, const BackendInfo& b, const PrecisionInfo& p, const Point& pt, Pass pass) {
  if (slot_key == key) return *slot;
  slot.reset();  // the previous benchmark's tensors go first
  auto prep = std::make_unique<Prepared>();
  prep->acc = p.default_accumulate;
  set_blas_threads(pt.threads);
  const auto t0 = std::chrono::steady_clock::now();
  if (pass == Pass::forward) prepare_forward(*prep, b, p, pt);
  else prepare_backward(*prep, b, p, pt);
  prep->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  slot_key = key;
  slot = std::move(prep);
  return *slot;
}

// Adaptive sampling (--adaptive WIDTH): a benchmark takes samples until the 95% interval of their median
// (order statistics, median_interval) is at most WIDTH times the median wide, with at least min_samples (six:
// the fewest that give a 95% interval) and at most max_samples, or until max_seconds of sampling have passed
// (the six are always taken). A sample is one call, or a batch of calls of at least min_sample_seconds for calls shorter than that
// (its time per call). So repetitions are spent where the noise is: a stable 0.5 s call stops at six, a noisy
// 1 ms one takes more. Without --adaptive, Google Benchmark's own loop and --benchmark_repetitions run as usual.
struct Sampling {
  double width = 0;  // 0: not adaptive
  std::size_t min_samples = 6, max_samples = 40;
  double max_seconds = 4, min_sample_seconds = 0.005;
  bool adaptive() const { return width > 0; }
} sampling;

// The samples of every benchmark that ran adaptively, by name, one list per run of it (repetition).
std::map<std::string, std::vector<std::vector<double>>> recorded_samples;
// attn_noisy's quiet calls (the neighbour stopped), one before each noisy sample, by name, per run of it.
std::map<std::string, std::vector<std::vector<double>>> recorded_quiet;
// The partner's calls (Point::partner: attn_versus, attn_paired, attn_bwd_paired), one before each sample, likewise.
std::map<std::string, std::vector<std::vector<double>>> recorded_partner;
// Each registered benchmark's schema fields (fields_of), by name (the first series that names a point owns it).
std::map<std::string, Json> benchmark_fields;

// before_sample runs before each sample, outside its timing (attn_noisy's quiet call, the partner's call of a
// point that has one: one per sample, whatever the sample's batch of calls).
template <class TimedCall, class BeforeSample>
std::optional<std::pair<double, double>> sample_adaptively(TimedCall&& timed_call, BeforeSample&& before_sample,
                                                           double warm, bool cold, std::vector<double>& samples,
                                                           bool& out_of_time) {
  const std::size_t batch =
      cold ? 1 : std::max<std::size_t>(1, std::size_t(std::ceil(sampling.min_sample_seconds / std::max(warm, 1e-9))));
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::pair<double, double>> interval;
  while (true) {
    before_sample();
    double t = 0;
    for (std::size_t i = 0; i < batch; ++i) t += timed_call();
    samples.push_back(t / double(batch));
    if (samples.size() < sampling.min_samples) continue;
    interval = median_interval(samples);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out_of_time = elapsed >= sampling.max_seconds;
    if (samples.size() >= sampling.max_samples || out_of_time ||
        (interval && interval->second - interval->first <= sampling.width * median(samples)))
      return interval;
  }
}

// Adds each adaptive benchmark's samples to the --benchmark_out JSON (a "samples" list per iteration row, in
// the order its repetitions ran), rewritten atomically: the reports' intervals and attn-lab compare's tests
// are over them (python/attention_lab/runs.py samples_of).
// --benchmark_out's JSON completed: each benchmark's schema fields ("attn") and, with --adaptive, its samples.
// Google Benchmark writes a non-finite counter as a bare NaN or inf (an aggregate's coefficient of variation
// over zero errors, say), which JSON lacks and nlohmann refuses: each such value is read as a marker string
// and written back as it was, so the file round-trips unchanged but for what is added.
const std::regex non_finite(R"((:\s*)(-?(?:NaN|nan|inf|Infinity))(\s*[,\n}]))");
constexpr const char* non_finite_mark = "__attn_bench_non_finite__";

void annotate_output(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("--benchmark_out: cannot read '" + path + "' back to add each benchmark's fields");
  std::stringstream raw;
  raw << f.rdbuf();
  const std::string text =
      std::regex_replace(raw.str(), non_finite, std::string("$1\"") + non_finite_mark + "$2\"$3");
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("benchmarks"))
    throw Error("--benchmark_out: '" + path + "' is not Google Benchmark JSON (was --benchmark_out_format json?)");
  std::map<std::string, std::size_t> taken;
  for (Json& b : doc["benchmarks"]) {
    const std::string name = b.value("run_name", b.value("name", ""));
    if (auto fields = benchmark_fields.find(name); fields != benchmark_fields.end()) b["attn"] = fields->second;
    if (b.value("run_type", "iteration") != "iteration") continue;
    auto it = recorded_samples.find(name);
    if (it == recorded_samples.end()) continue;
    std::size_t& i = taken[name];
    if (auto q = recorded_quiet.find(name); q != recorded_quiet.end() && i < q->second.size())
      b["quiet_samples"] = q->second[i];
    if (auto f = recorded_partner.find(name); f != recorded_partner.end() && i < f->second.size())
      b["partner_samples"] = f->second[i];
    if (i < it->second.size()) b["samples"] = it->second[i++];
  }
  const std::regex marked("\"" + std::string(non_finite_mark) + "(-?[A-Za-z]+)\"");
  write_file_atomic(path, std::regex_replace(doc.dump(2, ' ', false, Json::error_handler_t::replace), marked, "$1") + "\n");
}

bool finite(const xt::xtensor<double, 4>& t) {
  for (double x : t)
    if (!std::isfinite(x)) return false;
  return true;
}

// attn_noisy's neighbour: a thread that reads and writes one byte of every 64-byte line of a 256 MiB buffer
// (beyond any L3 of these machines), over and over, until destroyed: what a memory-bound process beside the
// benchmark does to the shared L3 and the memory bus. On 2 cores the benchmark's one thread and this one
// each have a core. The buffer is allocated and first touched once per process (about a second), not per
// benchmark. Hand-written: a loop of a few lines that no library offers.
class NoisyNeighbour {
 public:
  NoisyNeighbour() : thread_([this] { sweep(); }) {}
  ~NoisyNeighbour() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  NoisyNeighbour(const NoisyNeighbour&) = delete;
  NoisyNeighbour& operator=(const NoisyNeighbour&) = delete;

 private:
  static std::vector<unsigned char>& buffer() {
    static std::vector<unsigned char> b(std::size_t(256) << 20, 1);
    return b;
  }
  void sweep() {
    std::vector<unsigned char>& b = buffer();
    constexpr std::size_t chunk = std::size_t(1) << 20;  // stop is read once per MiB
    while (!stop_.load(std::memory_order_relaxed))
      for (std::size_t c = 0; c < b.size() && !stop_.load(std::memory_order_relaxed); c += chunk)
        for (std::size_t i = c; i < c + chunk; i += 64) b[i] = static_cast<unsigned char>(b[i] + 1);
  }
  std::atomic<bool> stop_{false};  // before thread_: set before the thread starts
  std::thread thread_;
};

// The fused backend (its own threads, memory independent of n: streaming), which attn_versus alternates with
// each outside kernel.
const BackendInfo& fused_backend() {
  for (const BackendInfo& b : all_backends())
    if (b.traits.own_threads && b.traits.memory_independent_of_n && !b.traits.plugin) return b;
  throw Error("attn_versus: no fused backend (own threads, memory independent of n) is registered");
}

void call_pass(PreparedCall& call, Pass pass) {
  switch (pass) {
    case Pass::forward: return call.call();
    case Pass::backward: return call.call_backward();
    case Pass::forward_backward: return call.call_forward_backward();
  }
}

void run_benchmark(benchmark::State& state, const std::string& key, const BackendInfo& b, const PrecisionInfo& p,
                   const Point& pt, bool cold, Pass pass) {
  const Prepared& prep = prepare(key, b, p, pt, pass);
  if (!prep.skip.empty()) return state.SkipWithError(prep.skip.c_str());
  set_blas_threads(pt.threads);

  // Rates come from the wall time of the calls themselves (OpenBLAS threads
  // would make CPU time misleading); measured here rather than with
  // UseRealTime(), which would append "/real_time" to the stable names.
  PreparedCall& call = *prep.call;
  auto one_call = [&] { call_pass(call, pass); };
  // A cold call's workspace is released (and its pages given back, so the call touches fresh memory) before
  // its clock starts.
  auto release = [&] {
    call.release_workspace();
    malloc_trim(0);
  };
  std::vector<double> per_call;  // each call's time: the median and spread counters
  per_call.reserve(1024);
  auto time_one = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    one_call();
    benchmark::ClobberMemory();
    per_call.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return per_call.back();
  };
  // With adaptive sampling, a call timed before each sample that alternates with the samples, so that a
  // host whose speed drifts over minutes moves both alike (the report takes their ratio):
  // attn_noisy: the neighbour beside the warm call and every timed one; before each sample one quiet call
  // (the neighbour stopped).
  const bool noisy = pt.variant == "noisy";
  std::optional<NoisyNeighbour> neighbour;
  if (noisy) neighbour.emplace();
  // A point with a partner (attn_versus, attn_paired, attn_bwd_paired): the partner prepared (and verified)
  // and warmed; before each sample one call of it (without --adaptive there are no samples to alternate with:
  // this point alone, as in attn_h8).
  const bool paired = pt.partner && sampling.adaptive();
  const bool peak_partner = paired && (pt.partner->peak || pt.partner->read);
  std::unique_ptr<Prepared> partner;
  Point partner_pt;
  if (paired && !peak_partner) {
    partner_pt = partner_point(pt);
    const PrecisionInfo& pp = pt.partner->precision.empty() ? p : precision_info(pt.partner->precision);
    partner = std::make_unique<Prepared>();
    partner->acc = pp.default_accumulate;
    const BackendInfo& pb = pt.partner->fused ? fused_backend() : b;
    if (pass == Pass::forward) prepare_forward(*partner, pb, pp, partner_pt);
    else prepare_backward(*partner, pb, pp, partner_pt);
    if (!partner->skip.empty()) return state.SkipWithError(("the partner: " + partner->skip).c_str());
  }
  auto partner_call = [&] {
    set_blas_threads(partner_pt.threads);
    call_pass(*partner->call, pass);
    set_blas_threads(pt.threads);
  };
  if (paired && !peak_partner) partner_call();  // warm
  std::vector<double> before;  // those calls' times, one per sample
  auto time_before = [&](auto&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    benchmark::ClobberMemory();
    before.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto before_sample = [&] {
    if (noisy) {
      neighbour.reset();
      time_before(one_call);
      neighbour.emplace();
    } else if (peak_partner && pt.partner->read) {  // the time the probe's rate would take for K and V's bytes
      before.push_back(kv_bytes(pt.shape, p) / (read_gbs_probe(unsigned(pt.threads)) * 1e9));
    } else if (peak_partner) {  // the time the probe's rate would take for the point's FLOPs
      before.push_back(pass_flops(pt.shape, pt.causal, pass) / (fp32_fma_gflops_core() * 1e9));
    } else if (paired) {
      time_before(partner_call);
    }
  };
  const auto warm_t0 = std::chrono::steady_clock::now();
  one_call();  // warm: workspace and outputs touched
  const double warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_t0).count();
  std::vector<double> samples;  // adaptive sampling: one entry per sample (a batch's time per call)
  double interval_width = 0;  // the 95% interval's width over the median (0: fewer than six samples, no interval)
  bool out_of_time = false;  // adaptive sampling stopped by its time cap, not by the width or the sample cap
  if (sampling.adaptive()) {
    // Google Benchmark runs this once (--benchmark_min_time=0 in adaptive mode); the samples are taken here.
    for (auto _ : state)
      if (samples.empty())
        if (const auto interval = sample_adaptively(
                [&] { return (cold ? release() : void()), time_one(); }, before_sample, warm, cold, samples,
                out_of_time))
          interval_width = (interval->second - interval->first) / median(samples);
  } else {
    for (auto _ : state) {
      if (cold) {
        state.PauseTiming();
        release();
        state.ResumeTiming();
      }
      time_one();
    }
  }
  double wall = 0;
  for (double t : per_call) wall += t;
  if (pass == Pass::forward && !call.out_finite()) return state.SkipWithError("NaN or Inf in the output after timing");
  if (pass != Pass::forward) {
    const Gradients<double> g = call.gradients();
    if (!finite(g.dq) || !finite(g.dk) || !finite(g.dv)) return state.SkipWithError("NaN or Inf in a gradient after timing");
  }

  const Shape& shape = pt.shape;
  const double calls = double(per_call.size());
  const double call_flops = pass_flops(shape, pt.causal, pass);
  state.counters["seconds_per_call"] = wall / calls;
  // The median call and the 10th and 90th percentiles (nearest rank) of the
  // calls: the spread a shared machine's noise puts on one benchmark.
  std::sort(per_call.begin(), per_call.end());
  auto rank = [&](double q) { return per_call[std::min(per_call.size() - 1, std::size_t(q * double(per_call.size())))]; };
  state.counters["seconds_median"] = median(per_call);
  state.counters["seconds_p10"] = rank(0.1);
  state.counters["seconds_p90"] = rank(0.9);
  state.counters["FLOP/s"] = call_flops * calls / wall;
  state.counters["qkvo_bytes/s"] = double(tensor_bytes(shape, p)) * calls / wall;
  // K and V read once (a decode step's floor of memory traffic)
  state.counters["kv_bytes/s"] = kv_bytes(shape, p) * calls / wall;
  // A plugin's memory is its own allocator's (the heap counter does not see
  // it): no memory counters for it rather than a zero that reads as measured.
  if (!b.traits.plugin) {
    state.counters["workspace_model_bytes"] = double(prep.model);
    state.counters["peak_heap_bytes"] = double(prep.peak);
    // The same less the tensors the call returns (the output; the gradients
    // dQ, dK, dV): the backend's own extra memory.
    const double out_bytes = pass == Pass::forward
                                 ? double(shape.batch * shape.heads * shape.n_q * shape.d_v * p.bytes)
                                 : double(shape.batch * (shape.heads * shape.n_q * shape.d_k +
                                                          shape.kv_head_count() * shape.n_kv * (shape.d_k + shape.d_v)) *
                                          p.bytes);
    state.counters["peak_extra_heap_bytes"] = std::max(0.0, double(prep.peak) - out_bytes);
  }
  state.counters["max_abs_error"] = prep.err;
  state.counters["error_bound"] = prep.bound;  // the tight tolerance
  state.counters["error_bound_worst_case"] = prep.worst_bound;
  state.counters["error_ref_digits"] = prep.exact_ref ? 50 : 16;
  state.counters["blas_threads"] = pt.threads;
  // What the benchmark cost besides its timed calls (the sweep's cost model is fitted on it).
  state.counters["prepare_seconds"] = prep.seconds;
  if (sampling.adaptive()) {
    // The samples themselves go into --benchmark_out's JSON (annotate_output); here their count and the
    // interval's width relative to the median (0 when fewer than six samples give no interval).
    state.counters["sample_count"] = double(samples.size());
    state.counters["sampling_out_of_time"] = out_of_time ? 1.0 : 0.0;
    state.counters["interval_relative_width"] = interval_width;
    recorded_samples[key].push_back(std::move(samples));
    if (noisy) recorded_quiet[key].push_back(before);
    if (paired) recorded_partner[key].push_back(before);
  }
  if (prep.acc != p.default_accumulate) {
    state.SetLabel("accumulate " + std::string(accumulate_name(prep.acc)));
    benchmark_fields[key]["accumulation"] = accumulate_name(prep.acc);
  }
}

std::string name_of(std::string_view family, std::string_view backend, std::string_view precision, const Point& pt) {
  const Shape& s = pt.shape;
  const std::string heads = "/h:" + std::to_string(s.heads) + "/h_kv:" + std::to_string(s.kv_head_count());
  if (pt.variant == "decode")
    return std::string(family) + "/" + std::string(backend) + "/" + std::string(precision) + "/threads:" +
           std::to_string(pt.threads) + "/n_kv:" + std::to_string(s.n_kv) + "/d:" + std::to_string(s.d_k) + heads;
  std::string name = std::string(family) + "/" + std::string(backend) + "/" + std::string(precision) +
                     "/causal:" + (pt.causal ? "1" : "0") + "/threads:" + std::to_string(pt.threads) + "/";
  if (pt.cross) name += "n_q:" + std::to_string(s.n_q) + "/n_kv:" + std::to_string(s.n_kv);
  else name += "n:" + std::to_string(s.n_q);
  name += "/d:" + std::to_string(s.d_k);
  if (!pt.variant.empty()) name += heads + "/variant:" + pt.variant;
  return name;
}

std::string_view pass_name(Pass pass) {
  return pass == Pass::forward ? "forward" : pass == Pass::backward ? "backward" : "forward_backward";
}

// The benchmark schema (version schema_version): what each benchmark is, as fields, so that no tool parses
// names. attn-bench writes them as "attn" beside each benchmark in --benchmark_out's JSON and in each
// --list-plan line; "accumulation" is the policy the benchmark ran (a plugin's own where it lacks the
// precision's default), "variant" is attn_var's (plain, gqa, mha, softcap, sinks, alibi, documents),
// "decode" for attn_decode, "noisy" for attn_noisy, "versus" for attn_versus, "paired" for attn_paired and
// attn_bwd_paired, "" elsewhere.
// "partner" (null where none) is what the call before each sample times (Point::partner): its backend, storage,
// causal and threads (added within schema 2: a reader that does not know it reads the rest as before); backend
// "fp32-fma-peak" where it is the FMA probe (Point::Partner::peak), its samples the probe's time for the point's FLOPs;
// "read-probe" where it is the read probe (Point::Partner::read, the point's storage and threads), its samples the
// probe's time for K and V's bytes.
constexpr int schema_version = 2;
Json partner_fields(const BackendInfo& b, const PrecisionInfo& p, const Point& pt) {
  if (!pt.partner) return nullptr;
  const Point q = partner_point(pt);
  if (pt.partner->peak) return {{"backend", "fp32-fma-peak"}, {"storage", "fp32"}, {"causal", false}, {"threads", 1}};
  if (pt.partner->read)
    return {{"backend", "read-probe"}, {"storage", p.name}, {"causal", false}, {"threads", pt.threads}};
  return {{"backend", pt.partner->fused ? fused_backend().name : b.name},
          {"storage", pt.partner->precision.empty() ? p.name : pt.partner->precision},
          {"causal", q.causal},
          {"threads", q.threads}};
}
Json fields_of(const Series& s, const BackendInfo& b, const PrecisionInfo& p, const Point& pt) {
  const Shape& sh = pt.shape;
  return {{"family", s.family},   {"role", s.role},         {"pass", pass_name(s.pass)},
          {"backend", b.name},    {"storage", p.name},      {"accumulation", accumulate_name(p.default_accumulate)},
          {"causal", pt.causal},  {"threads", pt.threads},  {"batch", sh.batch},
          {"heads", sh.heads},    {"kv_heads", sh.kv_head_count()}, {"n_q", sh.n_q},
          {"n_kv", sh.n_kv},      {"d_k", sh.d_k},          {"d_v", sh.d_v},
          {"variant", pt.variant}, {"cold", s.cold},        {"plugin", b.traits.plugin},
          {"partner", partner_fields(b, p, pt)}};
}

// What scripts/run --plan needs of one benchmark (attn-bench --list-plan, one JSON line each): its name and
// what its cost model (backend.hpp's flops, reference_cost) says of the timed call and of its verification.
Json plan_entry(const std::string& name, const Json& fields, const BackendInfo& b, const PrecisionInfo& p,
                const Point& pt, Pass pass) {
  const Shape& s = pt.shape;
  // A point no accumulation policy of the backend supports skips at once (prepare_forward): nearly free.
  bool supported = pass != Pass::forward;
  for (Accumulate acc : accumulate_policies())
    supported = supported || b.unsupported_reason(p, acc, s, options_of(pt)).empty();
  Shape checked = pass == Pass::forward ? verified_shape(pt) : s;
  if (pass != Pass::forward) checked.heads = 1, checked.n_q = checked.n_kv = std::min<std::size_t>(s.n_q, 1024);
  // A partner's calls (one per sample) about double the timed work, and its verification the check's; the
  // peak's probe (about 10 ms a sample) neither.
  const double partners = pt.partner && !pt.partner->peak && !pt.partner->read ? 1 : 0;
  const bool partner_causal = pt.partner ? partner_point(pt).causal : false;
  return {{"name", name},
          {"attn", fields},
          {"flops", pass_flops(s, pt.causal, pass) + partners * pass_flops(s, partner_causal, pass)},
          {"verify_flops", (flops(checked, pt.causal) + partners * flops(checked, partner_causal)) *
                               (pass == Pass::forward ? 1 : 3.5)},
          {"verify_reference_cost", backends::reference_cost(checked) * (pass == Pass::forward ? 1 : 2.5)},
          {"reference_budget", backends::reference_budget},
          {"supported", supported}};
}

// --names FILE: only these benchmarks are registered (a shard of a plan); --list-plan: none runs, each one's
// plan_entry is printed.
std::set<std::string> only_names;
bool list_plan = false;

void register_all(const Profile& prof) {
  std::set<std::string> names;
  for (const BackendInfo& b : all_backends())
    for (const PrecisionInfo& p : precisions())
      for (const Series& s : series()) {
        if (!s.backends(b.traits) || (s.pass != Pass::forward && !b.has_backward)) continue;
        for (const Point& pt : s.points(prof, p, b.traits)) {
          // The exact backend only where 50 digits are affordable (not registered beyond: it could not run).
          if (b.traits.exact && backends::reference_cost(pt.shape) > backends::reference_budget) continue;
          if (b.traits.exact && !prof.exact_all_precisions && p.name != "fp64") continue;
          const std::string name = name_of(s.family, b.name, p.name, pt);
          if (!names.insert(name).second) continue;  // two series may share a point
          benchmark_fields[name] = fields_of(s, b, p, pt);
          if (list_plan) std::printf("%s\n", dump(plan_entry(name, benchmark_fields[name], b, p, pt, s.pass)).c_str());
          if (list_plan || (!only_names.empty() && !only_names.count(name))) continue;
          const bool cold = s.cold;
          const Pass pass = s.pass;
          benchmark::RegisterBenchmark(name.c_str(), [name, &b, &p, pt, cold, pass](benchmark::State& st) {
            // A backend that fails (a plugin's kernel raising, say) is this benchmark's error, not the end of
            // attn-bench (an exception out of a benchmark terminates Google Benchmark's process).
            try {
              run_benchmark(st, name, b, p, pt, cold, pass);
            } catch (const Error& e) {
              st.SkipWithError(e.what());
            }
          })->Unit(benchmark::kMillisecond);
        }
      }
  for (const std::string& name : only_names)
    if (!names.count(name))
      throw Error("--names: no benchmark '" + name + "' in this profile and version (a plan made by another?)");
}

}  // namespace
}  // namespace attn::bench

int main(int argc, char** argv) {
  using namespace attn::bench;
  // Our flags, removed before Google Benchmark reads the rest.
  std::string profile_name = "quick";
  std::vector<std::string> plugins;  // --plugin PATH, repeatable: kernels of plugin libraries as backends
  std::string names_file;         // --names FILE: one benchmark name per line, only these run
  std::string out_path;           // --benchmark_out=FILE: each benchmark's fields (and adaptive samples) added to it
  std::string out_format = "json";  // --benchmark_out_format (only JSON is completed)
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      if (a == flag && i + 1 < argc) return argv[++i];
      if (a.rfind(flag + "=", 0) == 0) return argv[i] + flag.size() + 1;
      return nullptr;
    };
    if (const char* v = value("--profile")) profile_name = v;
    else if (const char* v = value("--plugin")) plugins.emplace_back(v);
    else if (const char* v = value("--memory-cap")) ::setenv("ATTN_MEMORY_CAP", v, 1);
    else if (const char* v = value("--names")) names_file = v;
    else if (a == "--list-plan") list_plan = true;
    else if (const char* v = value("--adaptive")) {
      char* end = nullptr;
      sampling.width = std::strtod(v, &end);
      if (end == v || *end || !(sampling.width > 0 && sampling.width < 1)) {
        std::fprintf(stderr, "attn-bench: --adaptive needs a relative width between 0 and 1 (e.g. 0.03), not '%s'\n", v);
        return 2;
      }
    } else if (const char* v = value("--max-samples")) {
      char* end = nullptr;
      const long m = std::strtol(v, &end, 10);
      if (end == v || *end || m < 6 || m > 100000) {
        std::fprintf(stderr, "attn-bench: --max-samples needs a whole number from 6, not '%s'\n", v);
        return 2;
      }
      sampling.max_samples = std::size_t(m);
    } else if (a.rfind("--benchmark_out_format=", 0) == 0) {
      out_format = a.substr(std::strlen("--benchmark_out_format="));
      rest.push_back(argv[i]);
    } else if (a.rfind("--benchmark_out=", 0) == 0) {
      out_path = a.substr(std::strlen("--benchmark_out="));
      rest.push_back(argv[i]);
    }
    else if (a == "--help") {
      std::printf(
          "attn-bench [--profile smoke|quick|full] [--memory-cap BYTES] [--plugin PATH ...] [--names FILE]\n"
          "           [--list-plan] [--adaptive WIDTH [--max-samples N]] [Google Benchmark flags]\n"
          "  --adaptive WIDTH: each benchmark samples until the 95%% interval of its median is at most WIDTH x the\n"
          "         median wide (at least 6 samples, at most --max-samples, default 40, or 4 s of sampling); a\n"
          "         sample is one call or a batch of calls of at least 5 ms. The samples are added to the\n"
          "         --benchmark_out JSON (\"samples\"); sets --benchmark_min_time=0 (one Google Benchmark run each).\n"
          "  --names FILE: only the benchmarks named in FILE (one per line; a shard of scripts/run --plan); a name\n"
          "         this profile does not have is an error.\n"
          "  --list-plan: run nothing; one JSON line per benchmark of the profile with its cost model's figures\n"
          "         (FLOP of the timed call, of its verification, the 50-digit reference's cost): scripts/run --plan.\n"
          "  --plugin PATH: the kernels of a plugin library (include/attn/plugin.h) join every family their\n"
          "         traits fit; a point a kernel does not support is reported as an error 'not supported: ...'.\n"
          "  quick: fp32 at n = 1024, 4096 and d = 64, 128 (causal too at d = 64), fp32 at n = 256,\n"
          "         512, 2048 (d = 64) and d = 32, 256 (n = 1024) for the scaling report, other\n"
          "         precisions at n = 1024, d = 64, threads:2 for math/blocked/streaming at n = 4096, d = 64,\n"
          "         streaming at n = 8192, 16384 (d = 64, its memory series), cross-attention n_q = 64 over\n"
          "         n_kv = 4096, 65536, one cold-call family, and attn_h8 (B = 1, H = 8, n = 4096, d = 64, 128:\n"
          "         math, blocked, streaming fp32; streaming causal, 2 threads, bf16, fp16), attn_bwd (n = 1024,\n"
          "         4096, B = 1, H = 8: streaming fp32, causal, 2 threads, bf16, fp16; the GEMM backends' backward and\n"
          "         attn_fwdbwd only in full), attn_var (the variants at n = 2048, d = 128, causal: H = 8 plain,\n"
          "         softcap, sinks, alibi, documents; H = 32 gqa (H_kv = 8) and mha; streaming fp32, bf16; math,\n"
          "         blocked at n = 1024, d = 64), attn_decode (n_q = 1, n_kv = 1024 ... 131072, H = 32, H_kv = 8,\n"
          "         d = 128; more lengths in full) and attn_noisy (attn_h8's one-thread fp32 forward of streaming and\n"
          "         math beside a cache-polluting thread on the other core), attn_versus (each plugin's attn_h8\n"
          "         one-thread fp32 and bf16 forward, each sample after one call of streaming), attn_paired and\n"
          "         attn_bwd_paired (streaming's ratio targets, each sample after one call of the other side:\n"
          "         2 threads after 1, causal after no mask, bf16 and fp16 after fp32); full: every precision at\n"
          "         n = 128 ... 16384, d = 32 ... 256; smoke: n = 128, d = 32, the exact backend in fp64 only (with\n"
          "         --benchmark_min_time=0: one iteration each).\n"
          "  The memory cap defaults to a quarter of RAM.\n\n"
          "examples:\n"
          "  attn-bench --profile smoke --benchmark_min_time=0\n"
          "  attn-bench --profile quick --adaptive=0.03 --benchmark_filter=attn_h8/streaming/fp32/causal:0/threads:1/ "
          "--benchmark_out=bench.json --benchmark_out_format=json\n\n");
      rest.push_back(argv[i]);
    } else rest.push_back(argv[i]);
  }
  try {
    memory_cap = attn::workspace_cap();
    for (const std::string& path : plugins) attn::load_plugin(path);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-bench: %s\n", e.what());
    return 2;
  }
  mallopt(M_MMAP_THRESHOLD, timed_mmap_threshold);  // (CallerHeap)
  mallopt(M_TRIM_THRESHOLD, timed_mmap_threshold);
  const Profile prof = profile(profile_name);
  try {
    if (!names_file.empty()) {
      std::ifstream f(names_file);
      if (!f) throw attn::Error("--names: cannot read '" + names_file + "'");
      for (std::string line; std::getline(f, line);)
        if (!line.empty()) only_names.insert(line);
      if (only_names.empty()) throw attn::Error("--names: '" + names_file + "' names no benchmark");
    }
    register_all(prof);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-bench: %s\n", e.what());
    return 2;
  }
  if (list_plan) return 0;
  static char min_time_zero[] = "--benchmark_min_time=0";  // adaptive: the sampling is ours, one run each
  if (sampling.adaptive()) rest.push_back(min_time_zero);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::AddCustomContext("attn_profile", profile_name);
  // The schema's version and every family of the series table: a reader refuses a family not listed here.
  benchmark::AddCustomContext("attn_schema", std::to_string(schema_version));
  attn::Json families = attn::Json::object();
  for (const Series& s : series()) families[std::string(s.family)] = pass_name(s.pass);
  benchmark::AddCustomContext("attn_families", attn::dump(families));
  benchmark::AddCustomContext("blas", attn::blas_info());
  benchmark::AddCustomContext("simd", attn::simd_summary());  // the vector kernels every backend ran
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::AddCustomContext("memory_cap_bytes", std::to_string(memory_cap));
  // The registry's traits, so reports choose backends by what they are, never by name.
  attn::Json traits = attn::Json::object();
  for (const attn::BackendInfo& b : attn::all_backends())
    traits[b.name] = attn::to_json(b.traits);
  benchmark::AddCustomContext("backend_traits", attn::dump(traits));
  benchmark::AddCustomContext("adaptive_sampling",
                              sampling.adaptive() ? "width " + std::to_string(sampling.width) + ", samples 6 to " +
                                                        std::to_string(sampling.max_samples)
                                                  : "off");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!out_path.empty() && out_format == "json") {
    try {
      annotate_output(out_path);
    } catch (const attn::Error& e) {
      std::fprintf(stderr, "attn-bench: %s\n", e.what());
      return 2;
    }
  }
  return 0;
}
