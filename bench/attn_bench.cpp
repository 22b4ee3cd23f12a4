// attn-bench: Google Benchmark families over backend x precision x n x d x
// mask x threads, registered from the compile-time registry. Names are
// stable (tools join on them; never rename one):
//   attn/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>
//   attn/<backend>/<precision>/causal:<0|1>/threads:<t>/n_q:<n_q>/n_kv:<n_kv>/d:<d>
//   attn_cold/<backend>/<precision>/causal:0/threads:1/n:<n>/d:<d>   (allocation and first touch included)
//   attn_h8/<backend>/<precision>/causal:<0|1>/threads:<t>/n:<n>/d:<d>  (B = 1, H = 8: the performance targets)
// Every other family runs B = H = 1. threads:<t> is the streaming backend's
// own worker count and OpenBLAS's thread count for the BLAS backends.
// Counters: FLOP/s (4 B H n_q n_kv d, halved for causal), bytes of Q/K/V/O
// per second, the model's workspace bytes, the measured peak heap of one
// cold call, and the error against the reference (50 digits where
// affordable, else blocked in fp64: error_ref_digits 50 or 16).
// Each benchmark validates its output against the derived bound before
// timing and skips with an error on a mismatch; a size whose workspace and
// tensors exceed the memory cap is skipped with the bytes it would need.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/alloc_counter.hpp"
#include "attn/machine.hpp"
#include "attn/metrics.hpp"
#include "attn/random.hpp"
#include "attn/registry.hpp"

namespace attn::bench {
namespace {

struct Profile {
  std::vector<std::size_t> n, d, cross_n_kv;
  // Extra fp32, non-causal, 1-thread points for the scaling report:
  // n at d_other, and d at n_other.
  std::vector<std::size_t> scaling_n = {}, scaling_d = {};
  std::vector<bool> causal;
  bool all_precisions_everywhere;           // else fp32 everywhere, others at n_other only
  std::size_t n_other = 1024, d_other = 64;  // where the non-fp32 precisions run in a reduced profile
  std::size_t thread_n = 4096;              // where threads:2 runs in a reduced profile
  // Streaming only, fp32, d_other: the n series of its peak-heap counter.
  std::vector<std::size_t> streaming_memory_n = {};
  // attn_h8: B = 1, H = 8 at this n (0: none), d in d.
  std::size_t h8_n = 0;
};

Profile profile(const std::string& name) {
  if (name == "full")
    return {{128, 256, 512, 1024, 2048, 4096, 8192, 16384}, {32, 64, 128, 256}, {1024, 4096, 16384, 65536}, {}, {},
            {false, true}, true, 1024, 64, 4096, {}, 4096};
  if (name == "quick") {
    Profile p{{1024, 4096}, {64, 128}, {4096, 65536}, {256, 512, 2048}, {32, 256}, {false, true}, false};
    p.streaming_memory_n = {8192, 16384};
    p.h8_n = 4096;
    return p;
  }
  if (name == "smoke") {
    Profile p{{128}, {32}, {256}, {}, {}, {false, true}, true};
    p.n_other = 128;
    p.d_other = 32;
    p.thread_n = 128;
    p.h8_n = 128;
    return p;
  }
  std::fprintf(stderr, "attn-bench: unknown profile '%s' (smoke, quick, full)\n", name.c_str());
  std::exit(2);
}

// The 50-digit reference (about 1 us per multiply-add) is affordable while
// backends::reference_cost stays under this; beyond, the compensated one.
constexpr double reference_budget = 4e6;
using backends::reference_cost;

template <class S>
std::size_t tensor_bytes(const Shape& s) {
  return (s.batch * s.heads) * (s.n_q * s.d_k + s.n_kv * s.d_k + s.n_kv * s.d_v + s.n_q * s.d_v) * sizeof(S);
}

std::string cap_message(std::size_t need, std::size_t cap) {
  return "needs " + std::to_string(need >> 20) + " MiB (workspace + tensors), over the memory cap of " +
         std::to_string(cap >> 20) + " MiB (--memory-cap or ATTN_MEMORY_CAP)";
}

std::size_t memory_cap = 0;

// What a benchmark needs before its timed loop, prepared once: Google
// Benchmark calls the function several times (to pick the iteration count),
// and the validation against the reference costs more than the timing.
template <class S>
struct Prepared {
  std::string skip;  // non-empty: why this benchmark cannot run
  Inputs<S> in;
  Options opt;
  std::size_t model = 0, peak = 0;
  double err = 0, bound = 0;
  bool exact_ref = false;
};

// One slot: the runs of a benchmark are consecutive, so only the current one is kept.
struct Slot {
  std::string key;
  std::shared_ptr<void> data;
};
Slot slot;

template <class B, class S>
const Prepared<S>& prepare(const std::string& key, const Shape& shape, bool causal, int threads) {
  if (slot.key == key) return *static_cast<const Prepared<S>*>(slot.data.get());
  slot = {};
  auto p = std::make_shared<Prepared<S>>();
  constexpr Accumulate P = default_accumulate<S>;
  if (causal) p->opt.mask = mask::Causal{};
  p->opt.threads = static_cast<std::size_t>(threads);
  set_blas_threads(threads);
  p->model = B::template workspace_bytes<S, P>(shape, p->opt);
  const std::size_t need = p->model + 2 * tensor_bytes<S>(shape);
  if (need > memory_cap) p->skip = cap_message(need, memory_cap);
  if constexpr (requires { B::exact; })
    if (reference_cost(shape) > reference_budget) p->skip = "the 50-digit reference is not affordable at this size";
  if (p->skip.empty()) {
    // Inputs: random (never zeros), fixed seed, rounded to storage, touched here.
    p->in = convert_inputs<S>(random_inputs(shape, /*seed=*/42));
    const Inputs<double> seen = convert_inputs<double>(p->in);
    validate(p->in, p->opt);
    // One cold call with the heap watched: its high-water mark is the peak.
    Workspace ws;
    heap::Watch watch;
    const Result<S> r = B::template run<S, P>(p->in, p->opt, ws);
    p->peak = watch.peak_growth();
    // Its output against the reference, within the derived bound.
    // The truth: 50 digits where affordable; beyond, the blocked backend in
    // fp64 (GEMM speed; the compensated reference would take tens of
    // seconds at n = 4096), whose own derived bound is added to the tolerance.
    p->exact_ref = reference_cost(shape) <= reference_budget;
    const Result<double> truth = p->exact_ref ? backends::reference_attention(seen, p->opt)
                                              : backends::Blocked::run<double, Accumulate::fp64>(seen, p->opt, ws);
    p->err = compare(convert_tensor<double>(r.out), truth.out, precision_traits<S>::unit_roundoff).max_abs;
    p->bound = error_bound(seen, p->opt, accumulation_unit_roundoff<B, S, P>(), precision_traits<S>::unit_roundoff).out;
    const double tolerance = p->bound + (p->exact_ref ? 0 : error_bound(seen, p->opt, 0x1p-53, 0x1p-53).out);
    if (!(p->err <= tolerance))
      p->skip = "output error " + std::to_string(p->err) + " exceeds the derived bound " + std::to_string(tolerance);
  }
  slot = {key, p};
  return *p;
}

template <class B, class S>
void run_benchmark(benchmark::State& state, const std::string& key, Shape shape, bool causal, int threads,
                   bool cold) {
  constexpr Accumulate P = default_accumulate<S>;
  const Prepared<S>& p = prepare<B, S>(key, shape, causal, threads);
  if (!p.skip.empty()) return state.SkipWithError(p.skip.c_str());
  set_blas_threads(threads);

  // Rates come from the wall time of the calls themselves (OpenBLAS threads
  // would make CPU time misleading); measured here rather than with
  // UseRealTime(), which would append "/real_time" to the stable names.
  Workspace ws;
  Result<S> r = B::template run<S, P>(p.in, p.opt, ws);  // warm: workspace and output touched
  double wall = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      ws = Workspace{};
      malloc_trim(0);  // give freed pages back, so the call touches fresh memory
      state.ResumeTiming();
    }
    const auto t0 = std::chrono::steady_clock::now();
    r = B::template run<S, P>(p.in, p.opt, ws);
    benchmark::DoNotOptimize(r.out.data());
    benchmark::ClobberMemory();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (const S& x : r.out)
    if (!std::isfinite(static_cast<double>(x))) return state.SkipWithError("NaN or Inf in the output after timing");

  const double calls = double(state.iterations());
  state.counters["seconds_per_call"] = wall / calls;
  state.counters["FLOP/s"] = flops(shape, causal) * calls / wall;
  state.counters["qkvo_bytes/s"] = double(tensor_bytes<S>(shape)) * calls / wall;
  state.counters["workspace_model_bytes"] = double(p.model);
  state.counters["peak_heap_bytes"] = double(p.peak);
  // The same less the output tensor the call returns: the backend's own extra memory.
  const double out_bytes = double(shape.batch * shape.heads * shape.n_q * shape.d_v * sizeof(S));
  state.counters["peak_extra_heap_bytes"] = std::max(0.0, double(p.peak) - out_bytes);
  state.counters["max_abs_error"] = p.err;
  state.counters["error_bound"] = p.bound;
  state.counters["error_ref_digits"] = p.exact_ref ? 50 : 16;
  state.counters["blas_threads"] = threads;
}

std::string name_of(std::string_view family, std::string_view backend, std::string_view precision, bool causal,
                    int threads, const Shape& s, bool cross) {
  std::string name = std::string(family) + "/" + std::string(backend) + "/" + std::string(precision) +
                     "/causal:" + (causal ? "1" : "0") + "/threads:" + std::to_string(threads) + "/";
  if (cross) name += "n_q:" + std::to_string(s.n_q) + "/n_kv:" + std::to_string(s.n_kv);
  else name += "n:" + std::to_string(s.n_q);
  return name + "/d:" + std::to_string(s.d_k);
}

template <class B, class S>
void add(const Profile&, std::string_view family, const Shape& s, bool causal, int threads, bool cross,
         bool cold) {
  const std::string name =
      name_of(family, B::name, precision_traits<S>::name, causal, threads, s, cross);
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
    run_benchmark<B, S>(st, name, s, causal, threads, cold);
  });
  b->Unit(benchmark::kMillisecond);
}

void register_all(const Profile& prof) {
  for_each_backend([&](auto bt) {
    using B = typename decltype(bt)::type;
    for_each_storage([&](auto st) {
      using S = typename decltype(st)::type;
      const bool fp32 = std::is_same_v<S, float>;
      for (std::size_t n : prof.n)
        for (std::size_t d : prof.d) {
          if (!fp32 && !prof.all_precisions_everywhere && (n != prof.n_other || d != prof.d_other)) continue;
          for (bool causal : prof.causal) {
            // Reduced profiles: causal and threads:2 at d_other only.
            if (causal && !prof.all_precisions_everywhere && d != prof.d_other) continue;
            add<B, S>(prof, "attn", {1, 1, n, n, d, d}, causal, 1, false, false);
            if constexpr (requires { B::uses_blas; })
              if (prof.all_precisions_everywhere || (fp32 && n == prof.thread_n && d == prof.d_other))
                add<B, S>(prof, "attn", {1, 1, n, n, d, d}, causal, 2, false, false);
          }
        }
      if constexpr (std::is_same_v<B, backends::Streaming>) {
        if (fp32)
          for (std::size_t n : prof.streaming_memory_n)
            add<B, S>(prof, "attn", {1, 1, n, n, prof.d_other, prof.d_other}, false, 1, false, false);
      }
      // The performance targets at B = 1, H = 8: the GEMM backends and streaming in fp32
      // (streaming also causal and on 2 threads), streaming in bf16 and fp16.
      if (prof.h8_n && !std::is_same_v<B, backends::Naive> && !requires { B::exact; }) {
        constexpr bool streaming = std::is_same_v<B, backends::Streaming>;
        for (std::size_t d : prof.d) {
          const Shape s8{1, 8, prof.h8_n, prof.h8_n, d, d};
          if (fp32) add<B, S>(prof, "attn_h8", s8, false, 1, false, false);
          if (fp32 && streaming) {
            add<B, S>(prof, "attn_h8", s8, true, 1, false, false);
            add<B, S>(prof, "attn_h8", s8, false, 2, false, false);
            add<B, S>(prof, "attn_h8", s8, true, 2, false, false);
          }
          if (streaming && (std::is_same_v<S, bf16> || std::is_same_v<S, fp16>))
            add<B, S>(prof, "attn_h8", s8, false, 1, false, false);
        }
      }
      if (fp32) {
        for (std::size_t n : prof.scaling_n)
          add<B, S>(prof, "attn", {1, 1, n, n, prof.d_other, prof.d_other}, false, 1, false, false);
        for (std::size_t d : prof.scaling_d)
          add<B, S>(prof, "attn", {1, 1, prof.n_other, prof.n_other, d, d}, false, 1, false, false);
      }
      if (!fp32 && !prof.all_precisions_everywhere) return;
      for (std::size_t n_kv : prof.cross_n_kv)
        add<B, S>(prof, "attn", {1, 1, 64, n_kv, prof.d_other, prof.d_other}, false, 1, true, false);
      // The cold call, on purpose: allocation and first touch of the workspace included.
      add<B, S>(prof, "attn_cold", {1, 1, prof.n.back() >= 4096 ? 4096 : prof.n.back(),
                                    prof.n.back() >= 4096 ? 4096 : prof.n.back(), prof.d_other, prof.d_other},
                false, 1, false, true);
    });
  });
}

}  // namespace
}  // namespace attn::bench

int main(int argc, char** argv) {
  using namespace attn::bench;
  // Our flags, removed before Google Benchmark reads the rest.
  std::string profile_name = "quick";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      if (a == flag && i + 1 < argc) return argv[++i];
      if (a.rfind(flag + "=", 0) == 0) return argv[i] + flag.size() + 1;
      return nullptr;
    };
    if (const char* v = value("--profile")) profile_name = v;
    else if (const char* v = value("--memory-cap")) ::setenv("ATTN_MEMORY_CAP", v, 1);
    else if (a == "--help") {
      std::printf(
          "attn-bench [--profile smoke|quick|full] [--memory-cap BYTES] [Google Benchmark flags]\n"
          "  quick: fp32 at n = 1024, 4096 and d = 64, 128 (causal too at d = 64), fp32 at n = 256,\n"
          "         512, 2048 (d = 64) and d = 32, 256 (n = 1024) for the scaling report, other\n"
          "         precisions at n = 1024, d = 64, threads:2 for math/blocked/streaming at n = 4096, d = 64,\n"
          "         streaming at n = 8192, 16384 (d = 64, its memory series), cross-attention n_q = 64 over\n"
          "         n_kv = 4096, 65536, one cold-call family, and attn_h8 (B = 1, H = 8, n = 4096, d = 64, 128:\n"
          "         math, blocked, streaming fp32; streaming causal, 2 threads, bf16, fp16); full: every precision at\n"
          "         n = 128 ... 16384, d = 32 ... 256; smoke: n = 128, d = 32 (with --benchmark_min_time=0:\n"
          "         one iteration each).\n"
          "  The memory cap defaults to a quarter of RAM. Example:\n"
          "    attn-bench --profile quick --benchmark_out=bench.json --benchmark_out_format=json\n\n");
      rest.push_back(argv[i]);
    } else rest.push_back(argv[i]);
  }
  try {
    memory_cap = attn::workspace_cap();
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-bench: %s\n", e.what());
    return 2;
  }
  // Freed memory stays in the heap for the next iteration (no first-touch in
  // timings); the cold family returns it explicitly with malloc_trim.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  const Profile prof = profile(profile_name);
  register_all(prof);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::AddCustomContext("attn_profile", profile_name);
  benchmark::AddCustomContext("blas", attn::blas_info());
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::AddCustomContext("memory_cap_bytes", std::to_string(memory_cap));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
