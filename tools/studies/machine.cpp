#include "studies/machine.hpp"

#include <chrono>
#include <cstdio>
#include <optional>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>
#include <xtensor-blas/xblas.hpp>

#include "attn/registry/registry.hpp"
#include "attn/simd/simd.hpp"
#include "attn/core/xt.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif


namespace attn {

namespace {

using clock_type = std::chrono::steady_clock;

// Best (shortest) wall time of `reps` runs of f.
double best_seconds(int reps, const std::function<void()>& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    f();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

// 2 * lanes * chains * iters FLOPs of independent FMA chains in the vector
// kernels in use (attn/simd/simd.hpp): as many chains as the target's registers
// hold beside the two constants (14 ymm on AVX2, 30 zmm on AVX-512), more
// than FMA latency x pipes, so every pipe stays busy and nothing spills.
template <class T>
double fma_gflops_one_thread() {
  const SimdKernels& k = simd();
  const bool fp64 = std::is_same_v<T, double>;
  const std::size_t lanes = fp64 ? k.lanes_f64() : k.lanes_f32();
  const long iters = long(320'000'000 / (lanes * k.peak_chains));
  volatile double sink = 0;
  const double seconds = best_seconds(5, [&] { sink = sink + (fp64 ? k.fma_chains_f64(iters) : k.fma_chains_f32(iters)); });
  return 2.0 * double(lanes * k.peak_chains) * double(iters) / seconds / 1e9;
}

// The same probe on every core at once: the sum of the threads' rates.
template <class T>
double fma_gflops_all(unsigned cores) {
  std::vector<double> rates(cores);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < cores; ++t) threads.emplace_back([&, t] { rates[t] = fma_gflops_one_thread<T>(); });
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

// The bf16 dot-product peak: the probe (simd.hpp's dot_chains_bf16) of the variant in use where it has bf16
// dot products, else of the widest this CPU executes that has them (avx512amx: TDPBF16PS on AMX tiles;
// avx512bf16: vdpbf16ps), the ceiling of a kernel that multiplies in bf16 and accumulates in fp32, measured
// whether or not the kernels in use are that variant's (simd.cpp chooses them by this rate over the FMA's).
const SimdKernels* bf16_dot_kernels() {
  if (simd().dot_chains_bf16) return &simd();
  for (const SimdVariant& v : simd_variants())
    if (v.executable && v.kernels->dot_chains_bf16) return v.kernels;
  return nullptr;
}

bool has_bf16_dot() { return bf16_dot_kernels() != nullptr; }

std::optional<double> bf16_dot_gflops_one_thread() {
  const SimdKernels* k = bf16_dot_kernels();
  if (!k) return std::nullopt;
  const long iters = long(2.56e9 / k->dot_chains_flops);  // 2.56 GFLOPs a probe
  volatile double sink = 0;
  const double seconds = best_seconds(5, [&] { sink = sink + k->dot_chains_bf16(iters); });
  return k->dot_chains_flops * double(iters) / seconds / 1e9;
}

#if defined(__x86_64__)
// AVX512_FP16's FMA (vfmadd231ph: 32 fp16 lanes, every product and sum rounded to fp16): the ceiling of fp16
// arithmetic with fp16 accumulation, which no kernel here uses. fp16 storage widens to fp32 (its default
// accumulation): an fp16 kernel like the bf16 one would multiply fp16 pairs into fp32 sums (AVX10.2's
// VDPPHPS), which no CPU seen here has (docs/performance.md, section 26). Hand-written with a target attribute
// as no kernel variant is compiled for AVX512_FP16; 30 chains, as the other probes.
__attribute__((target("avx512f,avx512fp16"))) double fp16_fma_chains(long iters) {
  constexpr int chains = 30;
  __m512h acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ph(_Float16(c));  // distinct: no chain merged with another
  const __m512h one = _mm512_set1_ph(_Float16(1.0f)), small = _mm512_set1_ph(_Float16(0x1p-10f));
  for (long i = 0; i < iters; ++i)
#pragma GCC unroll 32
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_fmadd_ph(acc[c], one, small);
  __m512h sum = acc[0];
  for (int c = 1; c < chains; ++c) sum = _mm512_add_ph(sum, acc[c]);
  // (the lanes summed through memory: GCC 12's _mm512_reduce_add_ph warns of its own uninitialised temporary)
  alignas(64) _Float16 lanes[32];
  _mm512_store_ph(lanes, sum);
  double total = 0;
  for (_Float16 x : lanes) total += double(x);
  return total;
}

std::optional<double> fp16_fma_gflops_one_thread() {
  if (!__builtin_cpu_supports("avx512fp16")) return std::nullopt;
  const long iters = long(640'000'000 / (32 * 30));
  volatile double sink = 0;
  const double seconds = best_seconds(5, [&] { sink = sink + fp16_fma_chains(iters); });
  return 2.0 * 32 * 30 * double(iters) / seconds / 1e9;
}
#else
std::optional<double> fp16_fma_gflops_one_thread() { return std::nullopt; }
#endif

std::optional<double> bf16_dot_gflops_all(unsigned cores) {
  if (!has_bf16_dot()) return std::nullopt;
  std::vector<double> rates(cores);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < cores; ++t) threads.emplace_back([&, t] { rates[t] = *bf16_dot_gflops_one_thread(); });
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

// How a GEMM probe is timed: full, a warm-up call (OpenBLAS's buffers, caches) then the best of three; quick
// (PeakEffort::quick), one call, warmed by the probes before it (every array is written, so first-touched,
// before its timed call; the first probe keeps its warm-up: without it SGEMM at n = 1024 read 18-26 GFLOP/s
// against 24-32 of the full probe in the same minutes, OpenBLAS's buffers first touched inside the call).
// With OpenBLAS's Prescott kernel the six GEMM probes were 10 of the peak's 14 s, most of it DGEMM at
// n = 2048 (1.3 s a call).
struct GemmTiming {
  bool warm_up;
  int reps;
};
GemmTiming gemm_timing(PeakEffort effort) {
  return effort == PeakEffort::full ? GemmTiming{true, 3} : GemmTiming{false, 1};
}

template <class T>
double gemm_gflops(std::size_t n, GemmTiming t) {
  xt::xtensor<T, 2> a = xt::xtensor<T, 2>::from_shape({n, n}), b = a, c = a;
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = b.data()[i] = T(1) / T(1 + i % 7);
  c.fill(0);
  if (t.warm_up) xt::blas::gemm(a, b, c);
  const double s = best_seconds(t.reps, [&] { xt::blas::gemm(a, b, c); });
  return 2.0 * double(n) * double(n) * double(n) / s / 1e9;
}

// S = Q K^T [n, n] then O = S V [n, d], as the math backend calls them.
double attention_gemm_gflops(std::size_t n, std::size_t d, GemmTiming t) {
  xt::xtensor<float, 2> q = xt::xtensor<float, 2>::from_shape({n, d}), k = q, v = q, o = q;
  xt::xtensor<float, 2> s = xt::xtensor<float, 2>::from_shape({n, n});
  for (std::size_t i = 0; i < q.size(); ++i) q.data()[i] = k.data()[i] = v.data()[i] = 1.0f / float(1 + i % 7);
  s.fill(0);
  auto pair = [&] {
    xt::blas::gemm(q, k, s, false, true);
    xt::blas::gemm(s, v, o);
  };
  if (t.warm_up) pair();
  const double secs = best_seconds(t.reps, pair);
  return 4.0 * double(n) * double(n) * double(d) / secs / 1e9;
}

double triad_gbs(unsigned threads) {
  const std::size_t n = std::size_t(1) << 23;  // 64 MiB per array per thread: far beyond cache
  std::vector<std::vector<double>> a(threads, std::vector<double>(n, 1.0)), b = a, c = a;
  auto run = [&](unsigned t) {
    double* pa = a[t].data();
    const double *pb = b[t].data(), *pc = c[t].data();
    for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0 * pc[i];
  };
  const double s = best_seconds(5, [&] {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(run, t);
    for (auto& t : pool) t.join();
  });
  return 3.0 * 8.0 * double(n) * threads / s / 1e9;
}

// Read bandwidth: each thread sums its own 256 MiB of 64-bit integers (far
// beyond cache), the ceiling of a pass that only reads (a decode step reading
// its KV cache). Integer sums so the compiler vectorises the loop freely.
// The arrays stay from one call to the next (attn-bench times the probe before each sample of a decode
// step: fresh pages cost ~15 us per 4 KiB to touch, 1 s per call).
double read_gbs(unsigned threads) {
  const std::size_t n = std::size_t(1) << 25;  // 256 MiB per thread (a multiple of 8)
  static std::vector<std::vector<std::uint64_t>> a;
  while (a.size() < threads) a.emplace_back(n, 1);
  std::vector<std::uint64_t> sums(threads);
  // Each cache line's first element also prefetches the line `ahead` bytes on, as the decode kernels
  // prefetch K and V (simd/variant.inc): with the hardware prefetchers alone the probe read less than
  // those kernels (one Xeon core: 9.2 GB/s against the fp32 decode step's 10.0 at n_kv = 131072), a
  // ceiling below what it bounds. 4 KiB ahead read 10.8-11.2 GB/s one core, 22.5-25.2 both, against
  // 10.3-10.6 and 18.1-20.7 at 1 KiB and 8.8-9.8 and 15.8-18.7 without (docs/performance.md, section 27).
  constexpr std::size_t ahead = 4096;  // bytes, in uint64 elements below
  auto run = [&](unsigned t) {
    const std::uint64_t* pa = a[t].data();
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; i += 8) {
      __builtin_prefetch(pa + std::min(i + ahead / 8, n - 1));
      for (std::size_t l = 0; l < 8; ++l) sum += pa[i + l];
    }
    sums[t] = sum;
  };
  const double s = best_seconds(5, [&] {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(run, t);
    for (auto& t : pool) t.join();
  });
  for (std::uint64_t sum : sums)
    if (sum != n) throw Error("read bandwidth probe: wrong sum");
  return 8.0 * double(n) * threads / s / 1e9;
}

// The value of the first /proc/cpuinfo line starting with `key`.
std::string cpuinfo(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

double fp32_fma_gflops_core() { return fma_gflops_one_thread<float>(); }
double read_gbs_probe(unsigned threads) { return read_gbs(threads); }

MachinePeak measure_peak(PeakEffort effort) {
  MachinePeak p;
  p.quick = effort == PeakEffort::quick;
  const GemmTiming t = gemm_timing(effort);
  p.cores = std::max(1u, std::thread::hardware_concurrency());
  p.simd = simd_summary();
  p.fma_chains = simd().peak_chains;
  p.bf16_dot_in_use = simd().gemm_bf16 != nullptr;
  if (const SimdKernels* k = bf16_dot_kernels())
    p.bf16_dot_instruction = k->id == "avx512amx" ? "AMX-BF16 tiles, TDPBF16PS" : "AVX512_BF16, vdpbf16ps";
  p.cpu = cpuinfo("model name");
  p.cpu_flags = cpuinfo("flags");
  p.fp32_fma_gflops_core = fma_gflops_one_thread<float>();
  p.fp64_fma_gflops_core = fma_gflops_one_thread<double>();
  p.fp32_fma_gflops_all = fma_gflops_all<float>(p.cores);
  p.fp64_fma_gflops_all = fma_gflops_all<double>(p.cores);
  p.bf16_dot_gflops_core = bf16_dot_gflops_one_thread();
  p.bf16_dot_gflops_all = bf16_dot_gflops_all(p.cores);
  p.fp16_fma_gflops_core = fp16_fma_gflops_one_thread();
  {  // OpenBLAS's GEMM rates on one thread
    const ScopedBlasThreads one_thread(true, 1);
    p.sgemm_gflops_1024 = gemm_gflops<float>(1024, {true, t.reps});  // the first: warmed up in either effort
    p.sgemm_gflops_2048 = gemm_gflops<float>(2048, t);
    p.dgemm_gflops_1024 = gemm_gflops<double>(1024, t);
    p.dgemm_gflops_2048 = gemm_gflops<double>(2048, t);
    p.sgemm_attention_gflops_d64 = attention_gemm_gflops(4096, 64, t);
    p.sgemm_attention_gflops_d128 = attention_gemm_gflops(4096, 128, t);
  }
  p.triad_gbs_core = triad_gbs(1);
  p.triad_gbs_all = triad_gbs(p.cores);
  p.read_gbs_core = read_gbs(1);
  p.read_gbs_all = read_gbs(p.cores);
  p.blas = blas_info();
  return p;
}

std::vector<std::string> instrument_errors(const MachinePeak& p) {
  std::vector<std::string> e;
  auto above = [&](const char* what, double rate, double peak, const char* peak_name) {
    if (rate > peak) {
      char line[200];
      std::snprintf(line, sizeof line, "%s %.1f GFLOP/s is above the %s %.1f", what, rate, peak_name, peak);
      e.emplace_back(line);
    }
  };
  above("sgemm n = 1024", p.sgemm_gflops_1024, p.fp32_fma_gflops_core, "fp32 FMA peak");
  above("sgemm n = 2048", p.sgemm_gflops_2048, p.fp32_fma_gflops_core, "fp32 FMA peak");
  above("attention GEMMs d = 64", p.sgemm_attention_gflops_d64, p.fp32_fma_gflops_core, "fp32 FMA peak");
  above("attention GEMMs d = 128", p.sgemm_attention_gflops_d128, p.fp32_fma_gflops_core, "fp32 FMA peak");
  above("dgemm n = 1024", p.dgemm_gflops_1024, p.fp64_fma_gflops_core, "fp64 FMA peak");
  above("dgemm n = 2048", p.dgemm_gflops_2048, p.fp64_fma_gflops_core, "fp64 FMA peak");
  return e;
}

Json to_json(const MachinePeak& p) {
  return {{"cpu", p.cpu},
          {"cpu_flags", p.cpu_flags},
          {"cores", p.cores},
          {"simd", p.simd},
          {"fma_chains", p.fma_chains},
          {"blas", p.blas},
          {"quick", p.quick},
          {"fp32_fma_gflops_core", p.fp32_fma_gflops_core},
          {"fp32_fma_gflops_all", p.fp32_fma_gflops_all},
          {"fp64_fma_gflops_core", p.fp64_fma_gflops_core},
          {"fp64_fma_gflops_all", p.fp64_fma_gflops_all},
          {"bf16_dot_gflops_core", p.bf16_dot_gflops_core ? Json(*p.bf16_dot_gflops_core) : Json(nullptr)},
          {"bf16_dot_gflops_all", p.bf16_dot_gflops_all ? Json(*p.bf16_dot_gflops_all) : Json(nullptr)},
          {"bf16_dot_in_use", p.bf16_dot_in_use},
          {"bf16_dot_instruction", p.bf16_dot_instruction.empty() ? Json(nullptr) : Json(p.bf16_dot_instruction)},
          {"fp16_fma_gflops_core", p.fp16_fma_gflops_core ? Json(*p.fp16_fma_gflops_core) : Json(nullptr)},
          {"sgemm_gflops_1024", p.sgemm_gflops_1024},
          {"sgemm_gflops_2048", p.sgemm_gflops_2048},
          {"dgemm_gflops_1024", p.dgemm_gflops_1024},
          {"dgemm_gflops_2048", p.dgemm_gflops_2048},
          {"sgemm_attention_gflops_d64", p.sgemm_attention_gflops_d64},
          {"sgemm_attention_gflops_d128", p.sgemm_attention_gflops_d128},
          {"triad_gbs_core", p.triad_gbs_core},
          {"triad_gbs_all", p.triad_gbs_all},
          {"read_gbs_core", p.read_gbs_core},
          {"read_gbs_all", p.read_gbs_all},
          {"instrument_errors", instrument_errors(p)}};
}

}  // namespace attn
