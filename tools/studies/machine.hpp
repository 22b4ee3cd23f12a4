// This machine's own measured limits, for the roofline of the reports:
// FMA throughput (fp32, fp64) per core and for all cores, the linked BLAS's
// single-thread GEMM rate, and the stream (triad) and read bandwidths. Measured, never
// taken from a datasheet.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn/io/json.hpp"

namespace attn {

struct MachinePeak {
  double fp32_fma_gflops_core = 0, fp32_fma_gflops_all = 0;
  double fp64_fma_gflops_core = 0, fp64_fma_gflops_all = 0;
  // AVX512_BF16's dot product (bf16 products accumulated in fp32); none without the instruction.
  std::optional<double> bf16_dot_gflops_core, bf16_dot_gflops_all;
  // Whether the kernels in use multiply bf16 storage with it (simd.cpp: only where it pays); when not, a
  // bf16 rate is a fraction of the fp32 FMA peak.
  bool bf16_dot_in_use = false;
  std::string bf16_dot_instruction;  // what the bf16 dot-product probe ran ("" where none)
  // AVX512_FP16's FMA on one core (fp16 products and sums: fp16 accumulation, which no kernel here uses);
  // none without the instruction.
  std::optional<double> fp16_fma_gflops_core;
  double sgemm_gflops_1024 = 0, sgemm_gflops_2048 = 0;  // one thread
  double dgemm_gflops_1024 = 0, dgemm_gflops_2048 = 0;
  // The two GEMMs of one attention head at n = 4096 (S = Q K^T, then O = P V,
  // 4 n^2 d FLOPs), fp32, one thread: the ceiling of the math backend.
  double sgemm_attention_gflops_d64 = 0, sgemm_attention_gflops_d128 = 0;
  double triad_gbs_core = 0, triad_gbs_all = 0;  // a[i] = b[i] + s c[i], 3 x 8 bytes per element
  double read_gbs_core = 0, read_gbs_all = 0;    // a sum over 256 MiB per thread, prefetched 4 KiB ahead: reading only
  unsigned cores = 0;
  std::string simd;  // the vector kernels in use (attn/simd/simd.hpp), which the FMA probe ran
  std::size_t fma_chains = 0;  // independent FMA chains of the probe
  std::string blas;  // blas_info()
  std::string cpu;   // model name from /proc/cpuinfo
  std::string cpu_flags;  // its feature flags
  bool quick = false;     // measured with PeakEffort::quick
};

// How thoroughly measure_peak times its GEMM probes: full (a warm-up call, then the best of three) or quick
// (one call each, 4.6 s instead of 12-14 on a Xeon whose OpenBLAS ran its Prescott kernel: the smoke sweeps',
// whose figures are not for quoting). The FMA and bandwidth probes are the same in both.
enum class PeakEffort { full, quick };

// The fp32 FMA probe of MachinePeak::fp32_fma_gflops_core alone (the kernels in use, one thread, best of
// five runs of about 2 ms each): attn-bench times it before each sample of a point whose partner is the peak.
double fp32_fma_gflops_core();
// The read probe of MachinePeak::read_gbs_core (threads = 1) and read_gbs_all (threads = cores) alone: each
// thread sums its 256 MiB, best of five passes (about 70 ms at 20 GB/s); attn-bench times it before each
// sample of a decode step whose partner is the read probe. Its arrays are kept (threads x 256 MiB) for the
// next call.
double read_gbs_probe(unsigned threads);
// Takes a few seconds: best of several repetitions of each probe.
MachinePeak measure_peak(PeakEffort effort = PeakEffort::full);
Json to_json(const MachinePeak& p);
// Rates measured above the FMA peak they must stay under (a GEMM faster than
// the peak means the probe, not the GEMM, is wrong): one line each.
std::vector<std::string> instrument_errors(const MachinePeak& p);

// Threads OpenBLAS may use from now on (1 for single-thread measurements).
}  // namespace attn
