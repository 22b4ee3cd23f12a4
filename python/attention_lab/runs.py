"""What `attn-lab compare` and `attn-lab history` read of a run, in one place:
a run folder (reports/runs/<stamp>/, its JSON under data/) or a Google
Benchmark JSON file alone, its benchmarks' repetitions and its machine's
fingerprint.

A benchmark's fields and samples are attention_lab.bench_json's (the one reader
of bench.json). A run with one sample per benchmark gives no interval and no
test, and the tools say so.

The fingerprint names the machine and the build, never the measured peaks
(those vary from run to run on one machine; they are recorded beside it):
CPU model and flags, hardware threads, the vector kernels that ran,
OpenBLAS's kernel, compiler, build flags and library versions. Two runs with the same fingerprint ran the same code paths on the
same kind of machine.
"""
import hashlib
import json
import math
import os
import re
import subprocess

from attention_lab import bench_json
from attention_lab.io import RunError, load_json


def tight_ratio(q):
    """A verdict point's error over its tight tolerance (accuracy.json, attend --json): the deciding row's
    (`tight_ratio`, each row judged by its own tolerance); a point written before per-row verdicts has one
    tolerance for the tensor, max_abs / tight_tolerance. inf where the tolerance is 0 and the error is not."""
    if isinstance(q.get("tight_ratio"), (int, float)):
        return float(q["tight_ratio"])
    err, tol = q.get("max_abs", 0), q.get("tight_tolerance")
    if not isinstance(tol, (int, float)):
        return math.inf
    return 0.0 if err == 0 else (err / tol if tol > 0 else math.inf)


def informative(q):
    """Whether a verdict point's tight tolerance stays below the quantity it judges (`tight_informative`);
    an uninformative point is counted apart and never as a pass. Points written before the flag existed
    carry none and count as informative (their reports said so)."""
    return q.get("tight_informative", True) is not False


def verdict_counts(points):
    """(passed, failed, uninformative) of verdict points: an uninformative point is neither a pass nor a
    failure unless it failed (a failure is a failure whatever its tolerance)."""
    failed = sum(1 for q in points if q.get("within_tight") is False or q.get("within") is False)
    unin = sum(1 for q in points if informative(q) is False and q.get("within_tight") is not False
               and q.get("within") is not False)
    return len(points) - failed - unin, failed, unin


def bf16_dots_in_use(peak):
    """Whether the run's kernels multiplied bf16 storage with AVX512_BF16's dot product (attn-lab peak's
    bf16_dot_in_use: the library uses it only where it measured at least sqrt(2) times the fp32 FMA rate,
    attn/simd/simd.hpp); runs from before that field used it wherever the CPU had it."""
    if "bf16_dot_in_use" in peak:
        return bool(peak["bf16_dot_in_use"])
    return bool(peak.get("bf16_dot_gflops_core"))


def precision_peak(peak, precision, threads=1):
    """The measured peak a rate in `precision` is a fraction of: the bf16 dot product's (attn-lab peak's
    bf16_dot_gflops_core: AVX512_BF16, bf16 products accumulated in fp32) for bf16 where the kernels used it,
    else the fp32 FMA peak (every other precision's kernels compute in fp32 vectors, or fp64 at half its
    rate); threads x the one-thread peak."""
    bf16 = precision == "bf16" and bf16_dots_in_use(peak)
    return threads * (peak["bf16_dot_gflops_core"] if bf16 else peak["fp32_fma_gflops_core"])


class Run:
    """One run: .path, .bench (Google Benchmark JSON), .peak/.build/.accuracy/.claims (None when absent),
    .samples {benchmark name: [seconds per call, its samples (bench_json.samples_of) over every repetition]},
    .fields {name: its fields (bench_json.fields)}, .flops {name: FLOP per call},
    .fingerprint (12 hex digits), .machine (its fields, for people), .stamp, .commit (build.json's, else
    committed_in), .profile."""

    def __init__(self, path):
        self.path = path  # as given: reports name runs by their relative path
        if os.path.isdir(path):
            # a run folder, or a run's data folder before its report exists (scripts/run)
            data = path if os.path.isfile(os.path.join(path, "bench.json")) else os.path.join(path, "data")
            if not os.path.isfile(os.path.join(data, "bench.json")):
                raise RunError(f"{path}: not a run folder (no data/bench.json)")
            self.bench = load_json(os.path.join(data, "bench.json"))
            opt = lambda n: load_json(os.path.join(data, n)) if os.path.isfile(os.path.join(data, n)) else None
            self.peak, self.build, self.accuracy, self.claims = (opt("peak.json"), opt("build.json"),
                                                                 opt("accuracy.json"), opt("claims.json"))
            self.stamp = os.path.basename(os.path.realpath(path))  # reports/latest: the run it points at
        else:
            self.bench = load_json(path)
            self.peak = self.build = self.accuracy = self.claims = None
            self.stamp = os.path.basename(path)
        self.samples, self.flops, self.fields = {}, {}, {}
        for f, b in bench_json.iterations(self.bench, path, RunError):
            name = f["name"]
            self.fields[name] = f
            self.samples.setdefault(name, []).extend(bench_json.samples_of(b, path, RunError))
            if isinstance(b.get("FLOP/s"), (int, float)) and isinstance(b.get("seconds_per_call"), (int, float)):
                self.flops[name] = b["FLOP/s"] * b["seconds_per_call"]
        if not self.samples:
            raise RunError(f"{path}: no benchmark that ran")
        ctx = self.bench["context"]
        self.profile = ctx.get("attn_profile", "?")
        self.commit = (self.build or {}).get("commit") or committed_in(path)
        self.machine = fingerprint_fields(self.peak, self.build, ctx)
        self.fingerprint = fingerprint_of(self.machine)
        # Recorded beside the fingerprint, not part of it: they vary from run to run on one machine.
        self.measured_peaks = {k: v for k, v in (self.peak or {}).items() if k.endswith(("_gflops_core", "_gflops_all",
                                                                                            "_gbs_core", "_gbs_all"))}

    def peak_gflops(self, threads):
        """This run's own measured fp32 FMA peak for a thread count (attn-lab peak), or None."""
        if not self.peak:
            return None
        return self.peak["fp32_fma_gflops_core"] if threads == 1 else self.peak["fp32_fma_gflops_all"]


def committed_in(path):
    """For a run recorded before build.json had its commit: '~' and the commit that added the run's folder to
    git (the run was made from the tree just before it), or 'unknown'."""
    try:
        real = os.path.realpath(path)
        sha = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h", "-1", "--", real],
                             cwd=os.path.dirname(real), capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return "~" + sha if sha else "unknown"


def fingerprint_fields(peak, build, ctx):
    """The machine and build a run ran on (peak.json, build.json, the benchmark context), without measured figures."""
    peak, build = peak or {}, build or {}
    blas = peak.get("blas") or ctx.get("blas") or "?"
    core = re.search(r"core (\w+)", blas)
    return {"cpu": peak.get("cpu") or ctx.get("host_name", "?"),
            "cpu_flags": peak.get("cpu_flags", "?"),
            "hardware_threads": peak.get("cores") or ctx.get("num_cpus"),
            "simd": ctx.get("simd") or peak.get("simd", "?"),
            "blas_core": core.group(1) if core else blas,
            "compiler": build.get("compiler", "?"),
            "flags": build.get("flags", "?"),
            "libraries": build.get("libraries", "?")}


def fingerprint_of(machine):
    """The 12 hex digits naming a machine's fingerprint_fields."""
    return hashlib.sha1(json.dumps(machine, sort_keys=True).encode()).hexdigest()[:12]


def describe(machine):
    simd = str(machine.get("simd", "?")).split(" (")[0]
    return f"{machine.get('cpu')}, {machine.get('hardware_threads')} threads, {simd}, OpenBLAS core {machine.get('blas_core')}"
