#include "attn/simd/simd.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#if defined(ATTN_SIMD_AVX512AMX)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "attn/core/error.hpp"

namespace attn {

namespace simd_kernels {
extern const SimdKernels kernels_baseline;
#if defined(ATTN_SIMD_AVX2)
extern const SimdKernels kernels_avx2;
#endif
#if defined(ATTN_SIMD_AVX512)
extern const SimdKernels kernels_avx512;
#endif
#if defined(ATTN_SIMD_AVX512BF16)
extern const SimdKernels kernels_avx512bf16;
#endif
#if defined(ATTN_SIMD_AVX512AMX)
extern const SimdKernels kernels_avx512amx;
#endif
}  // namespace simd_kernels

namespace {

#if defined(ATTN_SIMD_AVX512AMX)
// AMX with bf16 tiles: CPUID (leaf 7: AMX-BF16 EDX bit 22, AMX-TILE bit 24),
// the tile state enabled by the OS (XCR0 bits 17 and 18), and Linux's grant
// of that state to this process (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, process-wide, asked once: without it the first tile
// instruction is a SIGILL). clang 14's __builtin_cpu_supports has no AMX
// names (GCC 12's has) and no builtin asks for the grant, hence CPUID.
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE: xgetbv exists
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  static const bool granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return granted;
}
#endif

// The CPU (and OS: GCC's check includes the XSAVE state the registers need)
// runs every feature named in `features`, a space-separated list of
// __builtin_cpu_supports names.
bool cpu_supports(std::string_view features) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  while (!features.empty()) {
    const std::size_t end = std::min(features.find(' '), features.size());
    const std::string f(features.substr(0, end));
    // __builtin_cpu_supports needs a literal: the names this file uses.
    bool ok = false;
    if (f == "avx2") ok = __builtin_cpu_supports("avx2");
    else if (f == "fma") ok = __builtin_cpu_supports("fma");
    else if (f == "f16c") ok = __builtin_cpu_supports("f16c");
    else if (f == "avx512f") ok = __builtin_cpu_supports("avx512f");
    else if (f == "avx512bw") ok = __builtin_cpu_supports("avx512bw");
    else if (f == "avx512dq") ok = __builtin_cpu_supports("avx512dq");
    else if (f == "avx512vl") ok = __builtin_cpu_supports("avx512vl");
    else if (f == "avx512bf16") ok = __builtin_cpu_supports("avx512bf16");
    else if (f == "sse4.2") ok = __builtin_cpu_supports("sse4.2");
    else if (f == "popcnt") ok = __builtin_cpu_supports("popcnt");
    else if (f == "avx") ok = __builtin_cpu_supports("avx");
#if defined(ATTN_SIMD_AVX512AMX)
    else if (f == "amx-bf16") ok = amx_usable();  // with amx-tile and the OS's grant
#endif
    if (!ok) return false;
    features.remove_prefix(std::min(end + 1, features.size()));
  }
  return true;
#else
  return features.empty();
#endif
}

// What the build's baseline flags require of the CPU (x86-64 only).
constexpr std::string_view baseline_features =
#if defined(__x86_64__) && defined(__F16C__) && defined(__SSE4_2__) && !defined(__AVX2__)
    "sse4.2 popcnt avx f16c";
#else
    "";  // a -march=native build: this machine's own flags
#endif

std::vector<SimdVariant> detect() {
  std::vector<SimdVariant> v;
  auto add = [&](const SimdKernels& k, std::string features) {
    const bool ok = cpu_supports(features);
    v.push_back({&k, ok, std::move(features)});
  };
#if defined(ATTN_SIMD_AVX512AMX)
  add(simd_kernels::kernels_avx512amx, "avx512f avx512bw avx512dq avx512vl avx512bf16 amx-bf16 fma f16c");
#endif
#if defined(ATTN_SIMD_AVX512BF16)
  add(simd_kernels::kernels_avx512bf16, "avx512f avx512bw avx512dq avx512vl avx512bf16 fma f16c");
#endif
#if defined(ATTN_SIMD_AVX512)
  add(simd_kernels::kernels_avx512, "avx512f avx512bw avx512dq avx512vl fma f16c");
#endif
#if defined(ATTN_SIMD_AVX2)
  add(simd_kernels::kernels_avx2, "avx2 fma f16c");
#endif
  // The baseline needs what the build's own flags need (meson.build).
  add(simd_kernels::kernels_baseline, std::string(baseline_features));
  return v;
}

struct Choice {
  const SimdKernels* kernels = nullptr;
  bool forced = false;
  const SimdKernels* passed_over = nullptr;  // a wider variant whose bf16 dot products did not pay
  std::optional<double> dot_ratio = {};  // the chosen variant's dot-product rate over the FMA's (else the passed-over one's)
};

// The bf16 dot product's rate over the fp32 FMA's on this core, from the
// variant's own probes: five rounds alternating the two (so a drift of the
// host's speed reaches both), the best of each; about 0.5 ms a probe.
double dot_over_fma(const SimdKernels& k) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](auto&& f) {
    const auto t0 = clock::now();
    f();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const double lanes = double(k.lanes_f32()), chains = double(k.peak_chains);
  constexpr long fma_iters = 100'000;
  const long dot_iters = long(3.2e7 / k.dot_chains_flops) + 1;  // 50'000 steps of vdpbf16ps's
  double fma = 1e300, dot = 1e300;
  volatile double sink = 0;
  for (int round = 0; round < 5; ++round) {
    fma = std::min(fma, seconds([&] { sink = sink + k.fma_chains_f32(fma_iters); }));
    dot = std::min(dot, seconds([&] { sink = sink + k.dot_chains_bf16(dot_iters); }));
  }
  return (k.dot_chains_flops * double(dot_iters) / dot) / (2 * lanes * chains * double(fma_iters) / fma);
}

Choice choose() {
  const auto& all = simd_variants();
  const char* env = std::getenv("ATTN_SIMD");
  if (env && *env) {
    std::string names;
    for (const auto& v : all) names += std::string(names.empty() ? "" : ", ") + std::string(v.kernels->id);
    for (const auto& v : all)
      if (v.kernels->id == env) {
        if (!v.executable)
          throw Error("ATTN_SIMD=" + std::string(env) + ": this CPU cannot execute the " + std::string(env) +
                      " kernels (they need " + v.requires_ + "); compiled variants: " + names);
        return {v.kernels, true};
      }
    throw Error("ATTN_SIMD=" + std::string(env) + ": no such kernel variant; compiled variants: " + names);
  }
  Choice c;
  for (const auto& v : all) {  // each variant with dot products measured on its own probe
    if (!v.executable) continue;
    if (v.kernels->dot_chains_bf16) {
      const double ratio = dot_over_fma(*v.kernels);
      if (!bf16_dots_pay(ratio, 1.0)) {
        if (!c.passed_over) c.passed_over = v.kernels, c.dot_ratio = ratio;
        continue;
      }
      c.dot_ratio = ratio;
    }
    c.kernels = v.kernels;
    return c;
  }
  throw Error("this CPU lacks " + all.back().requires_ +
              ", which this build's baseline needs (meson.build: rebuild with -Dnative=true on this machine)");
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

const std::vector<SimdVariant>& simd_variants() {
  static const std::vector<SimdVariant> v = detect();
  return v;
}

const SimdKernels& simd() { return *choice().kernels; }

bool bf16_dots_pay(double dot_flops_per_second, double fma_flops_per_second) {
  return dot_flops_per_second >= bf16_dot_min_ratio * fma_flops_per_second;
}

std::optional<double> simd_bf16_dot_ratio() { return choice().dot_ratio; }

std::string simd_summary() {
  const Choice& c = choice();
  // No measured figure in it: runs name their machine by this string (a number that moved from one process to
  // the next split one sweep's shards into two machines); simd_bf16_dot_ratio() has the figure.
  std::string why = c.forced ? "forced by ATTN_SIMD" : "the widest this CPU executes";
  if (c.passed_over)
    why = "not the " + std::string(c.passed_over->id) + " variant: its bf16 dot product measured below " +
          std::to_string(bf16_dot_min_ratio).substr(0, 4) + "x the fp32 FMA rate here";
  return std::string(c.kernels->arch) + " (" + std::string(c.kernels->id) + " variant, " + why + ")";
}

}  // namespace attn
