#!/usr/bin/python3
"""PyTorch beside us: PyTorch's math attention timed on the shapes of the
attn_h8 benchmark family, written into preallocated buffers, so that a run's
performance report can say how the suite's backends compare with it on the
same machine in the same hour.

    torch_bench.py --attn-bench PATH [--profile quick|full|smoke] [--reps N] --out FILE

The shapes come from attn-bench itself (`--benchmark_list_tests` of
attn_h8/streaming/fp32/causal:0), so the two never drift apart. For each
shape and each thread count (1 and 2, as attn_h8 runs them) one child
process pins the threads before torch loads: torch.set_num_threads for
ATen's own pool and OPENBLAS_NUM_THREADS / OMP_NUM_THREADS for the BLAS
Debian's torch calls (torch.set_num_threads does not reach it). The child
runs one warm-up call and N timed calls of

    S = scale Q K^T   torch.baddbmm(S, Q, K^T, beta=0, alpha=scale, out=S)
    P = softmax(S)    torch._softmax(S, -1, False, out=P)
    O = P V           torch.bmm(P, V, out=O)

fp32, B = 1 folded into H = 8 batched heads, the FLOPs counted as attn-bench
counts them (4 n^2 d per head). Output: JSON with every call's seconds, the
median and the range, the torch version and the BLAS library its process
loaded (with OpenBLAS's core name when it is OpenBLAS).
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def child(n, d, heads, threads, reps):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(20261130)
    q, k, v = (torch.randn(heads, n, d) for _ in range(3))
    s, p, o = torch.empty(heads, n, n), torch.empty(heads, n, n), torch.empty(heads, n, d)
    scale = 1.0 / d ** 0.5
    kt = k.transpose(1, 2)

    def call():
        torch.baddbmm(s, q, kt, beta=0.0, alpha=scale, out=s)
        torch._softmax(s, -1, False, out=p)
        torch.bmm(p, v, out=o)

    import time
    call()  # warm-up: first touch of S, P, O and BLAS buffers
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - t0)
    # Which BLAS this process runs, and OpenBLAS's kernel if it is OpenBLAS.
    blas, core = "unknown", None
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if re.search(r"lib(open)?blas|libmkl|libblis", line)})
    for lib in libs:
        blas = lib
        if "openblas" in lib:
            try:
                so = ctypes.CDLL(lib)
                so.openblas_get_corename.restype = ctypes.c_char_p
                so.openblas_get_config.restype = ctypes.c_char_p
                core = so.openblas_get_corename().decode()
                blas = f"{lib}: {so.openblas_get_config().decode()}"
            except (OSError, AttributeError):
                pass
    return {"torch": torch.__version__, "blas": blas, "blas_core": core,
            "aten_capability": torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else None,
            "seconds": seconds}


def shapes(attn_bench, profile):
    names = subprocess.run([attn_bench, "--profile", profile, "--benchmark_list_tests",
                            "--benchmark_filter=attn_h8/streaming/fp32/causal:0/"],
                           capture_output=True, text=True, check=True).stdout.split()
    pts = sorted({(int(re.search(r"/n:(\d+)", x)[1]), int(re.search(r"/d:(\d+)", x)[1]),
                   int(re.search(r"/threads:(\d+)", x)[1])) for x in names})
    if not pts:
        raise SystemExit(f"torch_bench: attn-bench --profile {profile} lists no attn_h8 benchmarks")
    return pts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attn-bench", required=True)
    ap.add_argument("--profile", default="quick", choices=["smoke", "quick", "full"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", nargs=4, type=int, metavar=("N", "D", "THREADS", "REPS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    heads = 8
    if a.child:
        n, d, threads, reps = a.child
        json.dump(child(n, d, heads, threads, reps), open(a.out, "w"))
        return
    if a.reps < 1:
        raise SystemExit("torch_bench: --reps must be at least 1")
    rows = []
    for n, d, threads in shapes(a.attn_bench, a.profile):
        print(f"torch_bench: n = {n}, d = {d}, {threads} thread(s), {a.reps} timed calls", file=sys.stderr)
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads))
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            subprocess.run([sys.executable, __file__, "--attn-bench", a.attn_bench, "--out", tmp.name,
                            "--child", str(n), str(d), str(threads), str(a.reps)], env=env, check=True)
            r = json.load(open(tmp.name))
        flops = 4.0 * n * n * d * heads
        secs = r.pop("seconds")
        rows.append({"name": f"torch_math/fp32/causal:0/threads:{threads}/n:{n}/d:{d}", "n": n, "d": d,
                     "heads": heads, "threads": threads, "seconds": secs, "median_seconds": statistics.median(secs),
                     "gflops_median": flops / statistics.median(secs) / 1e9, "gflops_min": flops / max(secs) / 1e9,
                     "gflops_max": flops / min(secs) / 1e9, **r})
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"what": "PyTorch math attention into preallocated buffers (baddbmm, _softmax, bmm), fp32",
                   "profile": a.profile, "rows": rows}, f, indent=1)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
