// attn-lab peak: this machine's measured peaks.
#include <cstdio>

#include "attn/io/npy.hpp"
#include "cli/command.hpp"
#include "studies/machine.hpp"

namespace attn::cli {
namespace {

int run(const Args& args) {
  refuse_overwrite(args, {"--out"});
  const MachinePeak p = measure_peak(args.flag("--quick") ? PeakEffort::quick : PeakEffort::full);
  if (args.has("--out")) write_file_atomic(args.str("--out"), dump(to_json(p)) + "\n");
  if (args.flag("--json")) {
    print_json(to_json(p));
    return 0;
  }
  std::printf("cpu              %s (%u cores)\n", p.cpu.c_str(), p.cores);
  std::printf("kernels          %s; FMA probe: %zu independent chains\n", p.simd.c_str(), p.fma_chains);
  std::printf("fp32 FMA         %8.1f GFLOP/s per core, %8.1f all cores\n", p.fp32_fma_gflops_core, p.fp32_fma_gflops_all);
  std::printf("fp64 FMA         %8.1f GFLOP/s per core, %8.1f all cores\n", p.fp64_fma_gflops_core, p.fp64_fma_gflops_all);
  if (p.bf16_dot_gflops_core)
    std::printf("bf16 dot product %8.1f GFLOP/s per core, %8.1f all cores (%s, fp32 accumulation; %s)\n",
                *p.bf16_dot_gflops_core, *p.bf16_dot_gflops_all, p.bf16_dot_instruction.c_str(),
                p.bf16_dot_in_use ? "the kernels in use multiply bf16 with it" : "not used: bf16 is widened to fp32");
  else
    std::printf("bf16 dot product none (this CPU has no AVX512_BF16)\n");
  if (p.fp16_fma_gflops_core)
    std::printf("fp16 FMA         %8.1f GFLOP/s per core (AVX512_FP16: fp16 accumulation; no kernel here uses it)\n",
                *p.fp16_fma_gflops_core);
  std::printf("sgemm, 1 thread  %8.1f GFLOP/s at n = 1024, %8.1f at 2048\n", p.sgemm_gflops_1024, p.sgemm_gflops_2048);
  std::printf("attention GEMMs  %8.1f GFLOP/s at n = 4096, d = 64, %8.1f at d = 128 (Q K^T then P V, fp32, 1 thread)\n",
              p.sgemm_attention_gflops_d64, p.sgemm_attention_gflops_d128);
  std::printf("dgemm, 1 thread  %8.1f GFLOP/s at n = 1024, %8.1f at 2048\n", p.dgemm_gflops_1024, p.dgemm_gflops_2048);
  std::printf("triad            %8.1f GB/s one core, %8.1f all cores\n", p.triad_gbs_core, p.triad_gbs_all);
  std::printf("read             %8.1f GB/s one core, %8.1f all cores\n", p.read_gbs_core, p.read_gbs_all);
  std::printf("BLAS             %s\n", p.blas.c_str());
  for (const auto& e : instrument_errors(p)) std::printf("INSTRUMENT ERROR %s\n", e.c_str());
  return 0;
}

}  // namespace

extern const Command peak_command = {
    "peak",
    "  attn-lab peak [--json] [--out FILE] [--quick]\n"
    "                             this machine's measured peaks (about half a minute)\n",
    R"(attn-lab peak [--json] [--out FILE] [--quick]: this machine's measured peaks: FMA GFLOP/s (fp32,
fp64) for one thread and all, the bf16 dot product's where the CPU has AVX512_BF16 (null in the
JSON where not; bf16_dot_instruction: vdpbf16ps, or TDPBF16PS on AMX tiles where the CPU and OS give them;
bf16_dot_in_use: whether the kernels in use multiply bf16 with it), AVX512_FP16's FMA on
one core where the CPU has it (fp16 accumulation: no kernel uses it; null where not), single-thread BLAS GEMM at n = 1024 and 2048, the two GEMMs of
one attention head at n = 4096 (d = 64, 128), stream triad bandwidth, read bandwidth (a sum over
256 MiB per thread, prefetched 4 KiB ahead as the decode kernels prefetch: the ceiling of a decode step reading
its KV cache). Takes up to half a minute (12-16 s on a 2-core Xeon whose OpenBLAS ran its Prescott kernel;
--quick 5 s there).
  --json        one line of JSON on stdout
  --out FILE    the same JSON written to FILE (atomically; --force replaces an existing file)
  --quick       each GEMM probe timed once instead of the best of three after a warm-up (the
                smoke sweeps' peak; "quick": true in the JSON)

examples:
  attn-lab peak --json
)",
    {"--out"},
    {"--json", "--force", "--quick"},
    run};

}  // namespace attn::cli
