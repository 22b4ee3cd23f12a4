#!/usr/bin/python3
"""Tests of python/attention_lab/reports on small synthetic JSON: every report and
figure is produced; a broken, partial or missing input gives one clear error
and leaves no run folder behind."""
import json
import os
import re
import shutil
import tempfile
import unittest

import paths  # noqa: E402,F401  (the package on sys.path)
from attention_lab import bench_json  # noqa: E402
from attention_lab import reports as report  # noqa: E402
from attention_lab.reports.common import Targets, memory_growth, target_bounds  # noqa: E402
from attention_lab.runs import bf16_dots_in_use, precision_peak  # noqa: E402

BACKENDS = ["naive", "streaming"]


def synthetic(folder):
    peak = {k: 100.0 for k in ["fp32_fma_gflops_core", "fp32_fma_gflops_all", "fp64_fma_gflops_core",
                               "fp64_fma_gflops_all", "sgemm_gflops_1024", "sgemm_gflops_2048",
                               "dgemm_gflops_1024", "dgemm_gflops_2048", "triad_gbs_core", "triad_gbs_all"]}
    peak.update(cpu="test cpu", cores=2, simd="avx512bw", blas="test blas")
    runs = []
    for b in BACKENDS:
        for n in (256, 512, 1024):
            for d in ((32, 64, 128) if n == 1024 else (64,)):
                t = 1e-9 * n * n * d * (1 if b == "streaming" else 3)
                runs.append({"name": f"attn/{b}/fp32/causal:0/threads:1/n:{n}/d:{d}", "seconds_per_call": t,
                             "FLOP/s": 4 * n * n * d / t, "peak_heap_bytes": (n * n * 4 if b == "naive" else n * 400),
                             "workspace_model_bytes": (n * n * 4 if b == "naive" else 33280)})
    runs.append({"name": "attn/reference/fp32/causal:0/threads:1/n:1024/d:64", "error_occurred": True,
                 "error_message": "not affordable"})
    bench = {"context": {"host_name": "test", "num_cpus": 2, "mhz_per_cpu": 1000, "attn_profile": "quick",
                         "OPENBLAS_CORETYPE": "(unset)",
                         "backend_traits": json.dumps({
                             "naive": {"exact": False, "baseline": True, "own_threads": False, "uses_blas": False,
                                       "memory_independent_of_n": False},
                             "streaming": {"exact": False, "baseline": False, "own_threads": True, "uses_blas": True,
                                           "memory_independent_of_n": True},
                             "reference": {"exact": True, "baseline": False, "own_threads": False, "uses_blas": False,
                                           "memory_independent_of_n": False}}),
                         "attn_schema": "2", "attn_families": json.dumps(bench_json.LEGACY_FAMILIES)},
             "benchmarks": runs}
    for r in runs:  # attn-bench's schema (the fields tools read), here as its names imply
        r["attn"] = dict(bench_json.legacy_fields(r["name"]), role="grid", accumulation="fp32", plugin=False)
    points = []
    for b in BACKENDS:
        for prec, u in (("fp64", 2**-53), ("fp32", 2**-24), ("bf16", 2**-8), ("fp16", 2**-11)):
            for acc in ("fp64", "fp32", "storage"):
                for n in (16, 64, 256):
                    for scale in (1, 10, 100, 1000):
                        points.append({"backend": b, "precision": prec, "accumulate": acc, "n": n, "d": 64,
                                       "mask": "none", "logit_scale": scale, "max_abs": u * n ** 0.5 * scale ** 0.5,
                                       "u_store": u})
    # Gradient points: relative error u sqrt(n) for every gradient, streaming's dk 4x beyond its tight tolerance at n = 256.
    gradient_points = []
    for b in ("naive", "streaming"):
        for prec, u in (("fp32", 2**-24), ("bf16", 2**-8)):
            for n in (16, 64, 256):
                for scale in (1, 10):
                    for g in ("dq", "dk", "dv"):
                        err = u * n ** 0.5
                        tight = err / 4 if (b, g, n) == ("streaming", "dk", 256) else 2 * err
                        gradient_points.append({"backend": b, "precision": prec, "accumulate": "fp32", "n": n, "d": 64,
                                                "mask": "none", "logit_scale": scale, "gradient": g, "max_abs": err,
                                                "relative": err, "u_store": u, "bound": 100 * err,
                                                "tight_tolerance": tight, "within": True,
                                                "within_tight": err <= tight})
    accuracy = {"kind": "accuracy", "points": points, "gradient_points": gradient_points,
                "precisions": [{"name": p, "default_accumulate": "fp64" if p == "fp64" else "fp32", "unit_roundoff": u}
                               for p, u in (("fp64", 2**-53), ("fp32", 2**-24), ("bf16", 2**-8), ("fp16", 2**-11))]}
    entropy = {"kind": "entropy", "draws": 100, "keys": 10,
               "rows": [{"d": d, "raw_mean": 2.0 / d ** 0.5, "raw_se": 0.01, "scaled_mean": 1.93, "scaled_se": 0.005,
                         "var_qk": float(d), "var_qk_scaled": 1.0} for d in (8, 32, 128, 512)]}
    build = {"compiler": "g++ test", "flags": "-O2", "libraries": "none"}
    claims = {"kind": "claims", "profile": "smoke", "claims": [
        {"id": "toy", "source": "a paper", "quote": "q", "statement": "s", "experiment": "e", "criterion": "c",
         "verdict": "does not hold", "why": "measured 3 > 2", "command": "attn-lab claims --only toy",
         "figures": {"ratio": 3.0},
         "plots": [{"title": "toy", "xlabel": "n", "ylabel": "e", "logx": True, "logy": False, "x": [1, 2],
                    "series": {"a": [1.0, 2.0], "b": [2.0, None]}}]}]}
    for name, obj in (("peak.json", peak), ("bench.json", bench), ("accuracy.json", accuracy),
                      ("entropy.json", entropy), ("claims.json", claims), ("build.json", build)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(obj, f)


def add_plugin(bench, name):
    """bench.json's context with one more backend, loaded from a plugin (trait plugin)."""
    traits = json.loads(bench["context"]["backend_traits"])
    traits[name] = {"exact": False, "baseline": False, "own_threads": True, "uses_blas": False,
                    "memory_independent_of_n": False, "plugin": True}
    bench["context"]["backend_traits"] = json.dumps(traits)


def h8_fields(family, role, backend, n, d, variant, plugin):
    """attn-bench's fields ("attn") of a one-thread fp32 forward point at B = 1, H = 8 without a mask."""
    return {"family": family, "role": role, "pass": "forward", "backend": backend, "storage": "fp32",
            "accumulation": "fp32", "causal": False, "threads": 1, "batch": 1, "heads": 8, "kv_heads": 8, "n_q": n,
            "n_kv": n, "d_k": d, "d_v": d, "variant": variant, "cold": False, "plugin": plugin}


def adaptive_row(name, flops, samples, memory, **extra):
    """One benchmark in attn-bench --adaptive's form (one row, its samples listed), with the memory counters
    unless it is a plugin's; `extra`: its fields ("attn"), its partner's or quiet samples."""
    return {"name": name, "run_type": "iteration", "repetition_index": 0, "seconds_per_call": 1.0,
            "seconds_median": 1.0, "FLOP/s": flops, "samples": samples,
            **({"peak_heap_bytes": 1000, "workspace_model_bytes": 1000} if memory else {}), **extra}


def add_families(bench, *families):
    """The families a test's rows are of, listed in the context as attn-bench lists its series table's."""
    if "attn_families" in bench["context"]:
        fams = json.loads(bench["context"]["attn_families"])
        fams.update({f: "forward" for f in families})
        bench["context"]["attn_families"] = json.dumps(fams)


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.data = os.path.join(self.tmp, "data")
        self.out = os.path.join(self.tmp, "reports")
        os.makedirs(self.data)
        synthetic(self.data)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def performance_md(self, stamp):
        final, _ = report.make_report(self.data, self.out, "test", stamp=stamp)
        with open(os.path.join(final, "performance.md")) as f:
            return f.read()

    def run_folders(self):
        runs = os.path.join(self.out, "runs")
        return sorted(os.listdir(runs)) if os.path.isdir(runs) else []

    def test_every_report_and_figure_is_written(self):
        final, readings = report.make_report(self.data, self.out, "test", stamp="run1")
        for name in ("index.md", "index.html", "scaling.md", "memory.md", "accuracy.md", "entropy.md", "claims.md", "scaling_n.svg",
                     "scaling_d.svg", "roofline.svg", "memory_n.svg", "accuracy_n.svg", "accuracy_scale.svg",
                     "entropy.svg", "claim_toy_0.svg", "data/bench.json"):
            path = os.path.join(final, name)
            self.assertTrue(os.path.getsize(path) > 0, name)
        self.assertEqual(os.readlink(os.path.join(self.out, "latest")), os.path.join("runs", "run1"))
        # The synthetic times grow exactly like n^2 at fixed d: the fit must say 2.00.
        self.assertIn("naive 2.00", readings[0])
        self.assertIn("streaming 2.00", readings[0])
        with open(os.path.join(final, "memory.md")) as f:
            self.assertIn("naive 2.00", f.read())
        with open(os.path.join(final, "claims.md")) as f:
            self.assertIn("| toy | **does not hold** | measured 3 > 2 |", f.read())
        # The backward pass's rows: bf16 dq over 12 points, median sqrt(64) u, largest sqrt(256) u; fp32 dk's
        # failed tight verdicts are streaming's two at n = 256 (4x its tolerance), and none fails the worst case.
        for name in ("accuracy_grad_n.svg", "accuracy_grad_scale.svg"):
            self.assertTrue(os.path.getsize(os.path.join(final, name)) > 0, name)
        with open(os.path.join(final, "accuracy.md")) as f:
            text = f.read()
        self.assertIn("## The backward pass", text)
        self.assertIn(f"| bf16 | fp32 | dq | 12 | 12 | 0 | {8 * 2**-8:.3g} | {16 * 2**-8:.3g} | 0.5 | 0.5 | 0.01 | 0 | 0 |", text)
        self.assertIn(f"| fp32 | fp32 | dk | 12 | 10 | 0 | {8 * 2**-24:.3g} | {16 * 2**-24:.3g} | 0.5 | 4 | 0.01 | 2 | 0 |", text)

    def test_rates_above_the_peak_are_instrument_errors_and_pytorch_is_compared(self):
        # attn_h8 rows of 9 repetitions each: streaming at 120 GFLOP/s on one thread against a probe peak of
        # 100 (an instrument error, never "120%"); 60 at d = 128 with +-3% noise (interval 59% ... 61%:
        # MISSED against the d = 128 target); PyTorch's math attention (the torch plugin's torch-math, no memory counters:
        # a plugin's allocator is its own) at 50: 2.40x (met, no noise) and, at d = 128 with +-15% noise, at
        # 60 / (0.95 need) so that streaming's 0.95 need has an interval that straddles the target's bound: within
        # noise (that row in attn-bench --adaptive's form, its nine samples listed in one row: the same figures
        # as from nine repetitions).
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        add_plugin(bench, "torch-math")
        n = 1024
        tight = [0.97, 0.98, 0.99, 0.995, 1.0, 1.005, 1.01, 1.02, 1.03]
        wide = [0.85, 0.9, 0.95, 0.98, 1.0, 1.02, 1.05, 1.1, 1.15]
        need_peer = target_bounds()["forward_over_fastest_peer"]["min"]
        g128 = 60.0 / (0.95 * need_peer)
        for b, d, g, noise in (("streaming", 64, 120.0, [1] * 9), ("streaming", 128, 60.0, tight),
                               ("torch-math", 64, 50.0, [1] * 9), ("torch-math", 128, g128, wide)):
            flops = 4 * 8 * n * n * d
            if b == "torch-math" and d == 128:  # attn-bench --adaptive's form: one row, its samples listed
                ts = [flops / g / 1e9 * f for f in noise]
                bench["benchmarks"].append({"name": f"attn_h8/{b}/fp32/causal:0/threads:1/n:{n}/d:{d}",
                                            "run_type": "iteration", "repetition_index": 0, "seconds_per_call": 1.0,
                                            "seconds_median": 1.0, "FLOP/s": flops, "samples": ts})
                continue
            for i, f in enumerate(noise):
                t = flops / g / 1e9 * f
                bench["benchmarks"].append({"name": f"attn_h8/{b}/fp32/causal:0/threads:1/n:{n}/d:{d}",
                                            "run_type": "iteration", "repetition_index": i, "seconds_per_call": t,
                                            "seconds_median": t, "FLOP/s": flops / t})
                if b == "streaming":
                    bench["benchmarks"][-1].update(peak_heap_bytes=1000, workspace_model_bytes=1000)
            bench["benchmarks"].append({"name": f"attn_h8/{b}/fp32/causal:0/threads:1/n:{n}/d:{d}_mean",
                                        "run_type": "aggregate", "seconds_per_call": 1.0, "FLOP/s": 1.0})
        # attn_noisy: streaming at d = 128 beside the neighbour at 0.8x its quiet rate (the same +-3% noise):
        # retained 0.80x, MISSED against 0.9x; no row at d = 64: "not measured", never a verdict
        add_families(bench, "attn_noisy")
        flops = 4 * 8 * n * n * 128
        bench["benchmarks"].append(adaptive_row(
            f"attn_noisy/streaming/fp32/causal:0/threads:1/n:{n}/d:128/h:8/h_kv:8/variant:noisy", flops,
            [flops / 48e9 * f for f in tight], True,
            attn=h8_fields("attn_noisy", "noisy-neighbour", "streaming", n, 128, "noisy", False)))
        # and at d = 64 with its own quiet calls (attn-bench --adaptive alternates them): 95 beside the neighbour
        # against 100 quiet in those calls, whatever attn_h8 measured: retained 0.95x, met
        flops = 4 * 8 * n * n * 64
        row = dict(bench["benchmarks"][-1], name=f"attn_noisy/streaming/fp32/causal:0/threads:1/n:{n}/d:64/h:8/h_kv:8/"
                   "variant:noisy", FLOP_s=None, samples=[flops / 95e9 * f for f in tight],
                   quiet_samples=[flops / 100e9 * f for f in tight])
        row.pop("FLOP_s")
        row["FLOP/s"] = flops
        row["attn"] = dict(row["attn"], d_k=64, d_v=64)
        bench["benchmarks"].append(row)
        # PyTorch's bf16 at 150 GFLOP/s, above the fp32 FMA peak (100) and under the bf16 dot product's (200):
        # 75% of the bf16 peak, not an instrument error.
        flops = 4 * 8 * n * n * 64
        for i in range(9):
            bench["benchmarks"].append({"name": f"attn_h8/torch-math/bf16/causal:0/threads:1/n:{n}/d:64",
                                        "run_type": "iteration", "repetition_index": i,
                                        "seconds_per_call": flops / 150e9, "seconds_median": flops / 150e9,
                                        "FLOP/s": 150e9})
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        with open(os.path.join(self.data, "peak.json")) as f:
            peak = json.load(f)
        peak["instrument_errors"] = ["sgemm n = 2048 120.0 GFLOP/s is above the fp32 FMA peak 100.0"]
        peak["bf16_dot_gflops_core"], peak["bf16_dot_gflops_all"] = 200.0, 400.0
        with open(os.path.join(self.data, "peak.json"), "w") as f:
            json.dump(peak, f)
        final, readings = report.make_report(self.data, self.out, "test", stamp="peak")
        with open(os.path.join(final, "performance.md")) as f:
            text = f.read()
        self.assertRegex(text, r"\| streaming fp32, d = 128, 1 thread, beside a noisy neighbour: rate over its quiet "
                               r"rate \| 0\.8000x \| [^|]* \| >= 0\.90x \| MISSED")
        self.assertRegex(text, r"\| streaming fp32, d = 64, 1 thread, beside a noisy neighbour: rate over its quiet "
                               r"rate \| 0\.9500x \| [^|]* \| >= 0\.90x \| met")
        self.assertIn("| streaming | 64 | 100.0 | 95.0 | 0.950x | 0.", text)
        self.assertIn("| alternating calls |", text)
        self.assertIn("| streaming | 128 | 60.0 | 48.0 | 0.800x |", text)
        self.assertIn("| attn_h8 |", text)
        need = {d: f"{100 * v:.0f}%" for d, v in target_bounds()["forward_fraction_of_peak"]["min"].items()}
        self.assertIn("| streaming fp32, d = 64, 1 thread: fraction of fp32 FMA peak | INSTRUMENT ERROR: 120.0 above "
                      f"the measured peak 100.0 |  | >= {need['64']} | instrument error |", text)
        self.assertIn("| streaming fp32, d = 128, 1 thread: fraction of fp32 FMA peak | 60% | 59% ... 61% | "
                      f">= {need['128']} | MISSED |", text)
        self.assertIn("| streaming fp32, d = 64, 1 thread: rate over the fastest outside CPU kernel of this run "
                      f"(torch-math) | 2.4000x | 2.4000x ... 2.4000x | >= {need_peer:.2f}x | met |", text)
        row = next(line for line in text.splitlines() if line.startswith(
            "| streaming fp32, d = 128, 1 thread: rate over the fastest outside CPU kernel of this run"))
        lo, hi = (float(x.strip(" x")) for x in row.split("|")[3].split("..."))
        self.assertTrue(lo < 0.95 * need_peer < need_peer < hi, row)
        self.assertIn(f"| {0.95 * need_peer:.4f}x |", row)
        self.assertTrue(row.endswith(f"| >= {need_peer:.2f}x | within noise |"), row)
        self.assertIn(f"| torch-math | fp32 | 0 | 1 | 128 | {4 * 8 * n * n * 128 / g128 / 1e6:.1f} | {g128:.1f} | "
                      f"{g128 / 1.1:.1f} ... {g128 / 0.9:.1f} | {g128:.0f}% |", text)
        self.assertIn(f"| torch-math | bf16 | 0 | 1 | 64 | {1e3 * flops / 150e9:.1f} | 150.0 | 150.0 ... 150.0 | 75% |",
                      text)
        self.assertIn("Each benchmark took 9 samples", text)
        self.assertIn("their speed beside streaming is in [plugins](plugins.md)", text)
        self.assertNotIn("120%", text)
        self.assertNotIn("_mean", text)  # aggregates are not benchmarks
        self.assertIn("**INSTRUMENT ERROR** (attn-lab peak): sgemm n = 2048", text)
        self.assertTrue(any(r.startswith("INSTRUMENT ERROR (attn-lab peak)") for r in readings))
        self.assertTrue(any(r.startswith("performance targets within noise: streaming fp32, d = 128") for r in readings))

    def test_ratio_targets_take_the_alternated_calls(self):
        # attn_h8 (timed minutes apart): streaming 60 GFLOP/s against torch-math 50 at both d (1.2x). attn_versus
        # at d = 64: torch-math's samples at 50 with streaming's alternated calls at 45 (a host that slowed while
        # streaming's attn_h8 point was not being timed, say): the target is the alternated 0.90x, MISSED; at
        # d = 128 no attn_versus row: the attn_h8 ratio, 1.2x, met. That attn_versus row is in the form of runs
        # before attn_paired ("fused_samples", no partner field: the fused backend is its partner).
        # attn_paired at d = 64: streaming on 2 threads at 90 GFLOP/s after each 1-thread call at 60 (1.5x, MISSED
        # against 1.85x), where attn_h8's 2-thread point at 120 would give 2.0x (met); the pairs drift together
        # (each pair's factor from `drift`, +-20%), so their ratio is 1.5x in every pair: the interval is the point.
        # At d = 128 no attn_paired row: the attn_h8 points, 2.0x, met.
        # The fraction of peak at d = 64 with the FMA probe timed before each sample (partner fp32-fma-peak): the
        # probe at 110 GFLOP/s and streaming at 77, both drifting: 70% in every pair (met against 65%), where
        # attn_h8's 60 over peak.json's 100 would give 60% (MISSED); at d = 128 no such row: 60%, MISSED.
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        add_plugin(bench, "torch-math")
        add_families(bench, "attn_versus", "attn_paired")
        n, drift = 1024, [0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 0.85, 1.15]
        for d in (64, 128):
            flops = 4 * 8 * n * n * d
            bench["benchmarks"].append(adaptive_row(f"attn_h8/streaming/fp32/causal:0/threads:2/n:{n}/d:{d}", flops,
                                                    [flops / 120e9] * 9, True))
        flops = 4 * 8 * n * n * 64
        bench["benchmarks"].append(adaptive_row(
            f"attn_paired/streaming/fp32/causal:0/threads:2/n:{n}/d:64/h:8/h_kv:8/variant:paired", flops,
            [flops / 90e9 * f for f in drift], True, partner_samples=[flops / 60e9 * f for f in drift],
            attn=dict(h8_fields("attn_paired", "paired", "streaming", n, 64, "paired", False), threads=2,
                      partner={"backend": "streaming", "storage": "fp32", "causal": False, "threads": 1})))
        bench["benchmarks"].append(adaptive_row(
            f"attn_paired/streaming/fp32/causal:0/threads:1/n:{n}/d:64/h:8/h_kv:8/variant:paired", flops,
            [flops / 77e9 / f for f in drift], True, partner_samples=[flops / 110e9 / f for f in drift],
            attn=dict(h8_fields("attn_paired", "paired", "streaming", n, 64, "paired", False),
                      partner={"backend": "fp32-fma-peak", "storage": "fp32", "causal": False, "threads": 1})))
        n, tight = 1024, [0.97, 0.98, 0.99, 0.995, 1.0, 1.005, 1.01, 1.02, 1.03]
        for b, d, g in (("streaming", 64, 60.0), ("streaming", 128, 60.0), ("torch-math", 64, 50.0),
                        ("torch-math", 128, 50.0)):
            flops = 4 * 8 * n * n * d
            bench["benchmarks"].append(adaptive_row(f"attn_h8/{b}/fp32/causal:0/threads:1/n:{n}/d:{d}", flops,
                                                    [flops / g / 1e9 * f for f in tight], b == "streaming"))
        flops = 4 * 8 * n * n * 64
        bench["benchmarks"].append(adaptive_row(
            f"attn_versus/torch-math/fp32/causal:0/threads:1/n:{n}/d:64/h:8/h_kv:8/variant:versus", flops,
            [flops / 50e9 * f for f in tight], False, fused_samples=[flops / 45e9 * f for f in tight],
            attn=h8_fields("attn_versus", "versus", "torch-math", n, 64, "versus", True)))
        # bf16 at d = 64 (attn_versus in bf16 since 2026-12-07): attn_h8 streaming 100 GFLOP/s against torch-math 80
        # (1.25x, minutes apart); attn_versus torch-math at 80 with streaming bf16's alternated calls at 72: 0.90x,
        # MISSED, the alternated ratio and not attn_h8's.
        flops = 4 * 8 * n * n * 64
        for b, g in (("streaming", 100.0), ("torch-math", 80.0)):
            bench["benchmarks"].append(adaptive_row(f"attn_h8/{b}/bf16/causal:0/threads:1/n:{n}/d:64", flops,
                                                    [flops / g / 1e9 * f for f in tight], b == "streaming"))
        bench["benchmarks"].append(adaptive_row(
            f"attn_versus/torch-math/bf16/causal:0/threads:1/n:{n}/d:64/h:8/h_kv:8/variant:versus", flops,
            [flops / 80e9 * f for f in tight], False, partner_samples=[flops / 72e9 * f for f in tight],
            attn=dict(h8_fields("attn_versus", "versus", "torch-math", n, 64, "versus", True), storage="bf16",
                      partner={"backend": "streaming", "storage": "bf16", "causal": False, "threads": 1})))
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        text = self.performance_md("versus")
        need = target_bounds()["forward_over_fastest_peer"]["min"]
        prefix = ("| streaming bf16 (fp32 accumulation), d = 64, 1 thread: rate over the fastest outside CPU kernel of "
                  "this run (torch-math, calls alternated)")
        self.assertRegex(text, re.escape(f"{prefix} | 0.9000x | ") + r"[^|]*" + re.escape(f" | >= {need:.2f}x | MISSED |"))
        for d, source, value, verdict in ((64, "torch-math, calls alternated", "0.9000x", "MISSED"),
                                          (128, "torch-math", "1.2000x", "met")):
            prefix = f"| streaming fp32, d = {d}, 1 thread: rate over the fastest outside CPU kernel of this run ({source})"
            self.assertRegex(text, re.escape(f"{prefix} | {value} | ") + r"[^|]*" + re.escape(f" | >= {need:.2f}x | {verdict} |"))
        need = target_bounds()["two_threads"]["min"]
        self.assertIn(f"| streaming fp32, d = 64: 2 threads over 1 (calls alternated) | 1.5000x | 1.5000x ... 1.5000x "
                      f"| >= {need:.2f}x | MISSED |", text)
        self.assertRegex(text, re.escape("| streaming fp32, d = 128: 2 threads over 1 | 2.0000x | ") + r"[^|]*"
                         + re.escape(f" | >= {need:.2f}x | met |"))
        self.assertIn("| streaming fp32, d = 64, 1 thread: fraction of fp32 FMA peak (the probe timed before each "
                      "sample) | 70% | 70% ... 70% | >= 65% | met |", text)
        self.assertIn("| streaming fp32, d = 128, 1 thread: fraction of fp32 FMA peak | 60% | 59% ... 61% | >= 75% | "
                      "MISSED |", text)
        self.assertIn("| forward | streaming fp32, no mask, 1 thread, d = 64 | 27.9 | the fp32 FMA probe (its time for "
                      "the point's FLOPs) | 19.5 | 0.700x | 0.700 ... 0.700 | 9 |", text)
        self.assertIn("## Calls alternated", text)
        self.assertIn("| forward | torch-math fp32, no mask, 1 thread, d = 64 | 42.9 | streaming fp32, no mask, 1 thread, "
                      "d = 64 | 47.7 | 1.111x | 1.111 ... 1.111 | 9 |", text)
        self.assertIn("| forward | streaming fp32, no mask, 2 threads, d = 64 | 23.9 | streaming fp32, no mask, 1 thread, "
                      "d = 64 | 35.8 | 1.500x | 1.500 ... 1.500 | 9 |", text)

    def test_memory_growth_is_judged_between_the_ends_of_the_full_tile_series(self):
        # The forward's series of run 20261203-171920: the same extra heap at every n but n = 2048 (split-KV's
        # partials, 3.3x): the ends, n = 1024 and 16384, are equal: met. The backward's: 673 KB at n = 256 (tiles
        # not counted: below 1024) growing to 738 KB at 16384 (D_i, 4 bytes a query row): 1.091x, MISSED. One n at
        # full tiles: not measured, never a ratio of a point with itself (what the rule before did).
        bound = target_bounds()["memory_independent_of_n"]["max"]
        t = Targets()
        memory_growth(t, "fwd", [(256, 460888), (1024, 460888), (2048, 1542232), (4096, 460888), (16384, 460888)], bound)
        memory_growth(t, "bwd", [(256, 673304), (1024, 676376), (4096, 688664), (16384, 737816)], bound)
        memory_growth(t, "one", [(256, 100), (1024, 100)], bound)
        self.assertEqual([(w, v, k) for w, v, _, _, k in t.rows],
                         [("fwd, peak extra heap: n = 16384 over n = 1024 (full tiles)", "1.0000x", "met"),
                          ("bwd, peak extra heap: n = 16384 over n = 1024 (full tiles)", "1.0908x", "MISSED"),
                          ("one, peak extra heap: at the largest n over the smallest n >= 1024", "not measured", "-")])

    def test_a_peak_below_the_workspace_model_is_the_counters_error(self):
        # Naive at n = 1024 read 0 B against its 4 MiB score matrix (as naive and math at n = 4096 did in runs
        # with the Python peers before the heap counter's count was signed): said so, neither plotted nor fitted
        # (the other two points still fit 2.00), never a "0 B" measured peak.
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        for r in bench["benchmarks"]:
            if r["name"] == "attn/naive/fp32/causal:0/threads:1/n:1024/d:64":
                r["peak_heap_bytes"] = 0
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        final, _ = report.make_report(self.data, self.out, "test", stamp="run1")
        with open(os.path.join(final, "memory.md")) as f:
            text = f.read()
        self.assertIn("| naive | 1024 | 0 B: below the workspace the call allocates, not a reading (not fitted) | "
                      "4.0 MiB |", text)
        self.assertIn("1 reading(s) below the workspace the call allocates", text)
        self.assertIn("naive 2.00 (model 2.00)", text)
        self.assertIn("| naive | 512 | 1.0 MiB | 1.0 MiB |", text)

    def test_bf16_is_a_fraction_of_the_peak_its_kernels_multiplied_with(self):
        # An Intel Xeon where the bf16 dot product ran at 0.48x the fp32 FMA rate and the library widened bf16
        # instead: its bf16 rates are fractions of the fp32 peak; a Zen 5 EPYC's (1.98x, the dot product in use)
        # of the bf16 peak; a run from before the field, of the bf16 peak wherever one was measured.
        xeon = {"fp32_fma_gflops_core": 168.9, "bf16_dot_gflops_core": 81.9, "bf16_dot_in_use": False}
        epyc = {"fp32_fma_gflops_core": 249.1, "bf16_dot_gflops_core": 493.9, "bf16_dot_in_use": True}
        old = {"fp32_fma_gflops_core": 249.1, "bf16_dot_gflops_core": 493.9}
        self.assertEqual((precision_peak(xeon, "bf16"), precision_peak(xeon, "bf16", 2)), (168.9, 337.8))
        self.assertEqual((precision_peak(epyc, "bf16"), precision_peak(epyc, "fp16")), (493.9, 249.1))
        self.assertEqual(precision_peak(old, "bf16"), 493.9)
        self.assertEqual([bf16_dots_in_use(p) for p in (xeon, epyc, old, {"fp32_fma_gflops_core": 1.0})],
                         [False, True, True, False])

    def test_a_host_that_slowed_during_the_run_is_said_so(self):
        # peak.json's second reading (the sweep's "after_bench"): the FMA peak 10% lower after the benchmarks is
        # flagged; a move of 2% is reported without the flag
        with open(os.path.join(self.data, "peak.json")) as f:
            peak = json.load(f)
        for factor, flagged in ((0.9, True), (0.98, False)):
            peak["after_bench"] = {"fp32_fma_gflops_core": peak["fp32_fma_gflops_core"] * factor,
                                   "sgemm_gflops_2048": peak["sgemm_gflops_2048"]}
            with open(os.path.join(self.data, "peak.json"), "w") as f:
                json.dump(peak, f)
            final, _ = report.make_report(self.data, self.out, "test", stamp=f"drift{factor}")
            with open(os.path.join(final, "performance.md")) as f:
                text = f.read()
            self.assertIn(f"Measured again after the benchmarks: fp32 FMA, one thread {peak['fp32_fma_gflops_core']:.1f} "
                          f"-> {peak['fp32_fma_gflops_core'] * factor:.1f} GFLOP/s ({100 * (factor - 1):+.0f}%)", text)
            self.assertEqual("**The host's speed changed during the run** (fp32 FMA, one thread moved by more than 5%)"
                             in text, flagged)

    def test_a_quick_peak_is_named_in_the_header(self):
        # attn-lab peak --quick (the smoke sweeps'): "quick": true in peak.json; the index's line on the peak says it
        with open(os.path.join(self.data, "peak.json")) as f:
            peak = json.load(f)
        for quick in (False, True):
            peak["quick"] = quick
            with open(os.path.join(self.data, "peak.json"), "w") as f:
                json.dump(peak, f)
            final, _ = report.make_report(self.data, self.out, "test", stamp=f"quick{quick}")
            with open(os.path.join(final, "index.md")) as f:
                line = next(l for l in f if l.startswith("- Measured peak"))
            self.assertEqual(line.startswith("- Measured peak (attn-lab peak --quick: each GEMM probe timed once, "
                                             "this run): fp32 FMA 100.0"), quick, line)
            self.assertEqual(line.startswith("- Measured peak (attn-lab peak, this run): fp32 FMA 100.0"), not quick, line)

    def test_above_read_peak_names_a_cause_only_from_the_recorded_caches(self):
        from attention_lab.reports.variants import above_read_peak
        self.assertEqual(above_read_peak(2**20, None), " (above the DRAM read peak)")
        self.assertEqual(above_read_peak(2**20, [{"type": "Instruction", "size": 2**25}]), " (above the DRAM read peak)")
        l3 = [{"type": "Unified", "level": 3, "size": 2**25}]
        self.assertIn("fit in the 32 MiB last-level cache", above_read_peak(2**25, l3))
        self.assertIn("exceed the 32 MiB last-level cache", above_read_peak(2**25 + 1, l3))

    def test_variants_costs_and_decode_bandwidth(self):
        # attn_var: soft-cap's median call 1.5x plain's, GQA 0.25x MHA's, soft-cap's error above its bound;
        # attn_decode: 1 GB of K/V in 0.1 s = 10 GB/s against a read peak of 20 (50%), and 40 GB/s at a
        # short cache (above the DRAM peak: said so, never a bare "200%", with why: its 7.45 MiB fit in the
        # 32 MiB L3), 25 GB/s over 250 MB (above peak.json's figure too, but far beyond the L3: not "cached").
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        bench["context"]["caches"] = [{"type": "Data", "level": 1, "size": 32768, "num_sharing": 1},
                                      {"type": "Instruction", "level": 1, "size": 2**26, "num_sharing": 1},
                                      {"type": "Unified", "level": 2, "size": 2**20, "num_sharing": 1},
                                      {"type": "Unified", "level": 3, "size": 2**25, "num_sharing": 2}]
        var = "attn_var/streaming/fp32/causal:1/threads:1/n:4096/d:128"
        for tail, t, err in (("/h:8/h_kv:8/variant:plain", 0.02, 1e-7), ("/h:8/h_kv:8/variant:softcap", 0.03, 9e-6),
                             ("/h:32/h_kv:32/variant:mha", 0.08, 1e-7), ("/h:32/h_kv:8/variant:gqa", 0.02, 1e-7)):
            bench["benchmarks"].append({"name": var + tail, "seconds_per_call": t, "seconds_median": t,
                                        "seconds_p10": 0.9 * t, "seconds_p90": 1.2 * t, "FLOP/s": 1e9,
                                        "peak_heap_bytes": 1, "workspace_model_bytes": 1, "max_abs_error": err,
                                        "error_bound": 1e-6})
        for n_kv, t in ((131072, 0.1), (1024, 0.1 / 128 / 4), (32768, 0.01)):
            bench["benchmarks"].append({"name": f"attn_decode/streaming/bf16/threads:1/n_kv:{n_kv}/d:128/h:32/h_kv:8",
                                        "seconds_per_call": t, "seconds_median": t, "seconds_p10": t,
                                        "seconds_p90": t, "FLOP/s": 1e9, "peak_heap_bytes": 1,
                                        "workspace_model_bytes": 1, "kv_bytes/s": n_kv / 131072 * 1e9 / t})
        # ... and on 2 threads with the read probe timed before each sample (partner read-probe): 1 GB of K/V at
        # 24 GB/s after each probe at 30, both drifting: 80% in every pair (met), where peak.json's all-threads
        # reading of 40 GB/s, taken at another time, would give 60% (MISSED)
        drift = [0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 0.85, 1.15]
        add_families(bench, "attn_decode")
        bench["benchmarks"].append(adaptive_row(
            "attn_decode/streaming/bf16/threads:2/n_kv:131072/d:128/h:32/h_kv:8", 1e9, [1 / 24 * f for f in drift],
            True, partner_samples=[1 / 30 * f for f in drift],
            **{"kv_bytes/s": 24e9, "seconds_per_call": 1 / 24, "seconds_median": 1 / 24, "seconds_p10": 1 / 24,
               "seconds_p90": 1 / 24},
            attn={"family": "attn_decode", "role": "decode", "pass": "forward", "backend": "streaming",
                  "storage": "bf16", "accumulation": "fp32", "causal": False, "threads": 2, "batch": 1, "heads": 32,
                  "kv_heads": 8, "n_q": 1, "n_kv": 131072, "d_k": 128, "d_v": 128, "variant": "decode",
                  "cold": False, "plugin": False,
                  "partner": {"backend": "read-probe", "storage": "bf16", "causal": False, "threads": 2}}))
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        with open(os.path.join(self.data, "peak.json")) as f:
            peak = json.load(f)
        peak.update(read_gbs_core=20.0, read_gbs_all=40.0)
        with open(os.path.join(self.data, "peak.json"), "w") as f:
            json.dump(peak, f)
        final, readings = report.make_report(self.data, self.out, "test", stamp="variants")
        with open(os.path.join(final, "variants.md")) as f:
            text = f.read()
        self.assertIn("| streaming | fp32 | 4096 | 128 | softcap | 30 (27 to 36) | 1.50 | 9e-06 | 1e-06 |", text)
        self.assertIn("| streaming | fp32 | 4096 | 128 | gqa | 20 (18 to 24) | 0.25 |", text)
        self.assertIn("1 of 4 variant benchmarks exceed their bound: streaming fp32 softcap.", text)
        self.assertIn("| streaming | bf16 | 1 | 131072 | 100 (100 to 100) | 10.00 | 50% |", text)
        self.assertIn("| 40.00 | 200% (above the DRAM read peak: the 7.45 MiB of K/V fit in the 32 MiB last-level "
                      "cache) |", text)
        self.assertIn("| 25.00 | 125% (above the read figure of `attn-lab peak`, measured in another process at "
                      "another moment of the run; the 238 MiB of K/V exceed the 32 MiB last-level cache) |", text)
        self.assertTrue(os.path.getsize(os.path.join(final, "decode_bandwidth.svg")) > 0)
        self.assertIn("variants: largest time over plain per variant: softcap 1.50x", readings)
        self.assertIn("decode, n_kv = 131072: best streaming bf16 2 thread(s) 24.00 GB/s of K/V = 80% of the read "
                      "bandwidth measured before each sample", readings)
        # the decode target at the longest cache: 50% of the read bandwidth misses 70%
        with open(os.path.join(final, "performance.md")) as f:
            perf = f.read()
        self.assertRegex(perf, r"\| decode: streaming bf16, 1 thread, n_kv = 131072 \(H = 32, H_kv = 8, d = 128\): K/V "
                               r"GB/s as a fraction of the measured read bandwidth \| 50% \| [^|]* \| >= 70% \| MISSED")
        self.assertIn("| decode: streaming bf16, 2 threads, n_kv = 131072 (H = 32, H_kv = 8, d = 128): K/V GB/s as a "
                      "fraction of the measured read bandwidth (the probe timed before each sample) | 80% | 80% ... 80% "
                      "| >= 70% | met |", perf)
        self.assertIn("| streaming | bf16 | 2 | 131072 |", text)
        self.assertIn("| 60%; 80% of the probe beside each sample |", text)
        # the decode step's pairs with the read probe stay out of the table of alternated calls (B = 1, H = 8,
        # keyed without the shape: the decode step there read as a forward at n = 4096)
        self.assertNotIn("read-probe", perf)

    def test_the_narrow_backward_is_judged_against_fp32(self):
        # attn_bwd at n = 4096, d = 64: streaming fp32 10 ms a call, bf16 8 ms (1.25x: met), fp16 11 ms (0.909x:
        # MISSED against 1.0x); d = 128 has no narrow rows: "not measured", never a verdict
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        tight = [0.97, 0.98, 0.99, 0.995, 1.0, 1.005, 1.01, 1.02, 1.03]
        for p, t in (("fp32", 0.010), ("bf16", 0.008), ("fp16", 0.011)):
            bench["benchmarks"].append({"name": f"attn_bwd/streaming/{p}/causal:0/threads:1/n:4096/d:64",
                                        "run_type": "iteration", "repetition_index": 0, "seconds_per_call": t,
                                        "seconds_median": t, "FLOP/s": 1e9, "peak_heap_bytes": 1,
                                        "workspace_model_bytes": 1, "samples": [t * f for f in tight]})
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        final, _ = report.make_report(self.data, self.out, "test", stamp="narrowbwd")
        with open(os.path.join(final, "performance.md")) as f:
            text = f.read()
        self.assertRegex(text, r"\| backward: streaming bf16 \(fp32 accumulation\), d = 64, 1 thread: rate over fp32 "
                               r"\| 1\.2500x \| [^|]* \| >= 1\.00x \| met")
        self.assertRegex(text, r"\| backward: streaming fp16 \(fp32 accumulation\), d = 64, 1 thread: rate over fp32 "
                               r"\| 0\.9091x \| [^|]* \| >= 1\.00x \| MISSED")
        self.assertRegex(text, r"\| backward: streaming fp16 \(fp32 accumulation\), d = 128, 1 thread: rate over fp32 "
                               r"\| not measured")

    def test_the_invariance_matrix(self):
        # naive bitwise everywhere; streaming: threads bitwise (forward and backward), key split within its bounds
        # (informative) in fp32 and within bounds at or above the values in bf16 (~?), batch with a pair left out
        # (a note: *), GQA BEYOND in the backward; a run without invariance.json says so
        invs = [{"id": "threads", "name": "thread count", "what": "1 vs 2", "forward": True, "backward": True},
                {"id": "batch", "name": "batch composition", "what": "alone vs in a batch", "forward": True,
                 "backward": True},
                {"id": "key_split", "name": "key split", "what": "split vs not", "forward": True, "backward": False},
                {"id": "gqa", "name": "GQA = repeated K/V", "what": "grouped vs repeated", "forward": True,
                 "backward": True}]
        cells = []
        for b in ("naive", "streaming"):
            for p in ("fp32", "bf16"):
                for i in invs:
                    for pas in ("forward", "backward"):
                        if not i[pas]:
                            continue
                        c = {"backend": b, "precision": p, "accumulate": "fp32", "pass": pas, "invariance": i["id"],
                             "verdict": "bitwise", "compared": 100, "differing": 0, "max_diff": 0.0, "tolerance": 0.0,
                             "max_abs": 1.0}
                        if b == "streaming" and i["id"] == "key_split":
                            c.update(verdict="within bounds", differing=7, max_diff=1e-7,
                                     tolerance=1e-3 if p == "fp32" else 19.0, informative=p == "fp32",
                                     first="one chunk vs 3, out[0, 0, 0, 0]: 0.25 vs 0.2500001")
                        if b == "streaming" and i["id"] == "batch":
                            c["note"] = "batches of other lengths not compared: no key padding"
                        if (b, p, i["id"], pas) == ("streaming", "fp32", "gqa", "backward"):
                            c.update(verdict="BEYOND", differing=1, max_diff=0.5, tolerance=0.01,
                                     first="grouped vs repeated, dq[0, 1, 2, 3]: 1 vs 1.5")
                        cells.append(c)
        with open(os.path.join(self.data, "invariance.json"), "w") as f:
            json.dump({"kind": "invariance", "seed": 39, "profile": "quick", "simd": "avx2", "cores": 2,
                       "blas": "test blas", "invariances": invs, "cells": cells}, f)
        final, readings = report.make_report(self.data, self.out, "test", stamp="invariance")
        with open(os.path.join(final, "invariance.md")) as f:
            text = f.read()
        self.assertTrue(os.path.getsize(os.path.join(final, "invariance.svg")) > 0)
        self.assertIn("| naive | fp32 | fp32 | = | = | = | = | = | = | = |", text)
        self.assertIn("| streaming | fp32 | fp32 | = | = | =* | =* | ~ | = | **BEYOND** |", text)
        self.assertIn("| streaming | bf16 | fp32 | = | = | =* | =* | ~? | = | = |", text)
        self.assertIn("- naive: thread count, batch composition, key split, GQA = repeated K/V", text)
        self.assertIn("- streaming: thread count, batch composition; not: key split, GQA = repeated K/V", text)
        self.assertIn("- streaming batch: batches of other lengths not compared: no key padding", text)
        self.assertIn("| streaming | fp32 | fp32 | backward | GQA = repeated K/V | 1 / 100 | 0.5 | 0.01 | grouped vs "
                      "repeated, dq[0, 1, 2, 3]: 1 vs 1.5 |", text)
        self.assertIn("invariance: 1 comparison(s) BEYOND the bounds", readings)
        # and without the file: the report says so, never an empty matrix
        os.remove(os.path.join(self.data, "invariance.json"))
        final, _ = report.make_report(self.data, self.out, "test", stamp="noinvariance")
        with open(os.path.join(final, "invariance.md")) as f:
            self.assertIn("Not in this run: it has no invariance.json", f.read())

    def test_plugins_verdicts_speed_and_accuracy(self):
        # A plugin row (trait plugin) at attn_h8 fp32 d = 64 taking 30 ms against streaming's 10 ms: 3.00x;
        # its accuracy points (one within the tight tolerance, one at twice it); a verdict with one failed cell.
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        add_plugin(bench, "torch-math")
        for b, t in (("streaming", 0.01), ("torch-math", 0.03)):
            bench["benchmarks"].append({"name": f"attn_h8/{b}/fp32/causal:0/threads:1/n:4096/d:64",
                                        "seconds_per_call": t, "seconds_median": t, "seconds_p10": t,
                                        "seconds_p90": t, "FLOP/s": 1e9, "peak_heap_bytes": 1,
                                        "workspace_model_bytes": 1})
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        with open(os.path.join(self.data, "accuracy.json")) as f:
            acc = json.load(f)
        # One within, one 2x over its tolerance, one within but uninformative (its tolerance reaches the output):
        # 1 passed, 1 uninformative (neither a pass nor a failure), largest ratio 2.
        for err, informative in ((1e-7, True), (4e-6, True), (1e-6, False)):
            acc["points"].append({"backend": "torch-math", "precision": "fp32", "accumulate": "fp32", "n": 16, "d": 64,
                                  "mask": "none", "logit_scale": 1, "max_abs": err, "u_store": 2**-24,
                                  "tight_tolerance": 2e-6, "within_tight": err <= 2e-6,
                                  "tight_informative": informative})
        acc["not_supported"] = [{"backend": "torch-math", "precision": "fp16", "accumulate": "fp32", "reason": "r"}]
        with open(os.path.join(self.data, "accuracy.json"), "w") as f:
            json.dump(acc, f)
        cell = {"kernel": "torch-math", "config": "fp32/fp32", "seed": 1, "cases": 30}
        verdict = {"plugin": "libattn_torch.so", "profile": "quick", "seed": 1, "cases_per_cell": 30, "verdict": "FAIL",
                   "kernels": [{"name": "torch-math", "description": "d", "cells": [
                       dict(cell, property="agrees_with_reference", property_name="agrees", status="fail",
                            counterexample={"case": "B=1 H=1 masked row 0"}),
                       dict(cell, property="permutation_equivariant", property_name="permutation", status="pass")]}]}
        with open(os.path.join(self.data, "verdicts.json"), "w") as f:
            json.dump([verdict], f)
        final, readings = report.make_report(self.data, self.out, "test", stamp="plugins")
        with open(os.path.join(final, "plugins.md")) as f:
            text = f.read()
        self.assertIn("| agrees | fail |", text)
        self.assertIn("| permutation | pass (30) |", text)
        self.assertIn("- fail: agrees, fp32/fp32: smallest case `B=1 H=1 masked row 0`", text)
        self.assertIn("| torch-math | attn_h8 | fp32 | 4096 | 64 | 0 | 1 | 30 (30 to 30) | 10 (10 to 10) | 3.00x |", text)
        self.assertIn("| torch-math | fp32 | fp32 | 3 | 1 | 1 | 2 |", text)
        self.assertIn("1 (problem, precision, accumulation) combinations were not supported", text)
        self.assertTrue(os.path.exists(os.path.join(final, "data", "verdicts.json")))
        self.assertIn("verify torch-math: 1 cells pass, 1 fail, 0 not supported", readings)
        # Without plugins the report says so.
        os.remove(os.path.join(self.data, "verdicts.json"))
        synthetic(self.data)
        final, _ = report.make_report(self.data, self.out, "test", stamp="no-plugins")
        with open(os.path.join(final, "plugins.md")) as f:
            self.assertIn("No plugin was loaded in this run", f.read())

    def test_the_benchmark_schema_is_read_and_an_unknown_family_refused(self):
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        rows = {r["name"]: r for r in bench_json.rows(bench)}
        r = rows["attn/streaming/fp32/causal:0/threads:1/n:1024/d:64"]
        self.assertEqual((r["family"], r["backend"], r["precision"], r["n"], r["d"], r["causal"], r["threads"]),
                         ("attn", "streaming", "fp32", 1024, 64, 0, 1))
        # a run recorded before the schema (no fields): the same rows from the names
        legacy = json.loads(json.dumps(bench))
        for b in legacy["benchmarks"]:
            b.pop("attn", None)
        del legacy["context"]["attn_families"], legacy["context"]["attn_schema"]
        old = {r["name"]: r for r in bench_json.rows(legacy)}
        self.assertEqual({k: (v["family"], v["n_q"], v["d"], v["causal"]) for k, v in old.items()},
                         {k: (v["family"], v["n_q"], v["d"], v["causal"]) for k, v in rows.items()})
        # a family attn-bench's series table does not list: one error naming it, never a silent drop
        bench["benchmarks"][0]["attn"]["family"] = "attn_new"
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        with self.assertRaises(report.ReportError) as e:
            report.make_report(self.data, self.out, "test", stamp="unknown")
        self.assertIn("'attn_new'", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.out, "runs", "unknown")))
        # a newer schema than the reader's: refused
        bench["context"]["attn_schema"] = "3"
        with self.assertRaises(bench_json.BenchError):
            bench_json.rows(bench)

    def test_broken_json_is_one_clear_error_and_no_run_folder(self):
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            f.write('{"benchmarks": [')
        with self.assertRaises(report.ReportError) as e:
            report.make_report(self.data, self.out, "test", stamp="run2")
        self.assertIn("bench.json: not valid JSON", str(e.exception))
        self.assertEqual(self.run_folders(), [])

    def test_partial_inputs_fail_cleanly(self):
        os.remove(os.path.join(self.data, "entropy.json"))
        with self.assertRaises(report.ReportError) as e:
            report.make_report(self.data, self.out, "test", stamp="run3")
        self.assertIn("entropy.json: missing", str(e.exception))
        synthetic(self.data)
        with open(os.path.join(self.data, "bench.json")) as f:
            bench = json.load(f)
        del bench["benchmarks"][0]["peak_heap_bytes"]
        with open(os.path.join(self.data, "bench.json"), "w") as f:
            json.dump(bench, f)
        with self.assertRaises(report.ReportError) as e:
            report.make_report(self.data, self.out, "test", stamp="run4")
        self.assertIn("lacks counter 'peak_heap_bytes'", str(e.exception))
        self.assertEqual(self.run_folders(), [])

    def test_an_existing_run_is_never_overwritten(self):
        report.make_report(self.data, self.out, "test", stamp="same")
        with self.assertRaises(report.ReportError):
            report.make_report(self.data, self.out, "test", stamp="same")
        self.assertEqual(self.run_folders(), ["same"])

    def test_command_line_exit_code_and_message(self):
        with open(os.path.join(self.data, "peak.json"), "w") as f:
            f.write("{}")
        self.assertEqual(report.main(["--data", self.data, "--out-root", self.out, "--stamp", "x"]), 2)
        self.assertEqual(self.run_folders(), [])

