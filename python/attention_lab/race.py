"""The runtime race: the fused CPU attention of PyTorch (its CPU flash kernel), OpenVINO
(ScaledDotProductAttention) and ONNX Runtime (Attention), timed once in one attn-bench process on the
performance targets' shapes beside streaming; the fastest of them is a peer of every run after it
(sweep.default_plugins reads the committed result, bench/runtime_race.json).

    scripts/run --race [--profile smoke|quick] [--out FILE]

The shapes are attn-bench's quick profile's attn_h8 (B = 1, H = 8, n = 4096, d = 64 and 128; fp32 with and
without the causal mask at 1 and 2 threads; bf16 and fp16 without a mask at 1 thread) and attn at n = 1024
(B = H = 1, fp32, d = 64 and 128), sampled adaptively as scripts/run samples (95% interval of each median at
most 3% of it wide). The winner is the runtime with the smallest geometric mean of its time over
torch-flash's at the fp32 points every runtime ran; each point says which runtime won it and by how much (the
runner-up's time over the winner's, with its bootstrap interval), and every time over streaming's. A point a
runtime does not take (bf16 in ONNX Runtime, fp16 in OpenVINO) is "not supported", never counted. The result
names the CPU, the instruction set the kernels ran on, OpenBLAS's core and this run's measured FMA peak
(attn-lab peak). smoke: d = 64, one thread, two one-call repetitions: the pipeline, not a result (the test
suite runs it into a scratch file).
"""
import argparse
import datetime
import math
import os
import subprocess
import sys
import tempfile
from importlib import metadata

from attention_lab import ROOT, bench_json as bench_io, io, stats

RESULT = os.path.join(ROOT, "bench", "runtime_race.json")
# One entry per runtime: its backend name, the bridge kernel and the Python package whose version is recorded.
RUNTIMES = {"torch-flash": ("python:attention_lab.peers:torch_flash", "torch"),
            "openvino-sdpa": ("python:attention_lab.peers:openvino_sdpa", "openvino"),
            "onnxruntime-attention": ("python:attention_lab.peers:onnxruntime_attention", "onnxruntime")}
BASELINE = "torch-flash"  # the winner is chosen by time over this one's
OURS = "streaming"
PROFILES = ("smoke", "quick")  # timed as scripts/run times them (sweep.TIMING)


class RaceError(Exception):
    """What stops the race: one line."""


def bench_filter(profile):
    names = "|".join(list(RUNTIMES) + [OURS])
    if profile == "smoke":
        return f"^attn_h8/({names})/fp32/causal:0/threads:1/n:4096/d:64$"
    return f"^(attn_h8/({names})/|attn/({names})/fp32/causal:0/threads:1/n:1024/d:(64|128)$)"


def run(command, label):
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RaceError(f"{label} failed (exit {r.returncode}): {tail}")
    return r


def measure(profile, folder):
    """(peak.json, attn-bench's JSON) of one race in `folder`."""
    from attention_lab.sweep import BENCH, LAB, TIMING  # (sweep imports this module: its winner is a peer)
    peak = os.path.join(folder, "peak.json")
    out = os.path.join(folder, "bench.json")
    print("race: attn-lab peak", file=sys.stderr, flush=True)
    run([LAB, "peak", "--out", peak], "attn-lab peak")
    flags = [f for spec, _ in RUNTIMES.values() for f in ("--plugin", spec)]
    print(f"race: attn-bench {bench_filter(profile)}", file=sys.stderr, flush=True)
    run([BENCH, "--profile", "quick", *flags, f"--benchmark_filter={bench_filter(profile)}", *TIMING[profile],
         f"--benchmark_out={out}", "--benchmark_out_format=json"], "attn-bench")
    return io.load_json(peak, RaceError), io.load_json(out, RaceError)


def point_key(r):
    return (r["family"], r["precision"], r["causal"], r["threads"], r["n_q"], r["d"])


def summarise(peak, bench, profile):
    """The race's result (what bench/runtime_race.json holds) from its measurements."""
    rows = bench_io.rows(bench, "attn-bench's race output", RaceError)
    by_point = {}
    for r in rows:
        by_point.setdefault(point_key(r), {})[r["backend"]] = r
    points, ratios = [], {name: [] for name in RUNTIMES}
    for key in sorted(by_point):
        got = by_point[key]
        family, precision, causal, threads, n, d = key
        entry = {"family": family, "precision": precision, "causal": bool(causal), "threads": threads, "n": n,
                 "d": d, "heads": got[next(iter(got))]["h"], "times": {}}
        for name, r in got.items():
            ci = stats.median_ci(r["samples"])
            entry["times"][name] = {"median_s": stats.median(r["samples"]), "ci_s": ci[:2] if ci else None,
                                    "samples": len(r["samples"]), "gflops": r["FLOP/s"] / 1e9}
        entry["not_supported"] = [name for name in RUNTIMES if name not in got]
        ran = sorted((name for name in RUNTIMES if name in got), key=lambda x: entry["times"][x]["median_s"])
        if ran:
            entry["winner"] = ran[0]
            if len(ran) > 1:
                ratio, ci = stats.ratio_ci(got[ran[1]]["samples"], got[ran[0]]["samples"])
                entry["runner_up"] = {"name": ran[1], "time_over_winner": ratio, "ci": ci}
        if OURS in got:
            entry["over_streaming"] = {name: stats.ratio_ci(got[name]["samples"], got[OURS]["samples"])
                                       for name in ran}
        if precision == "fp32" and all(name in got for name in RUNTIMES):
            for name in RUNTIMES:
                ratios[name].append(entry["times"][name]["median_s"] / entry["times"][BASELINE]["median_s"])
        points.append(entry)
    if not points or not ratios[BASELINE]:
        raise RaceError("no fp32 point that every runtime ran: nothing to decide the race on")
    geomean = {name: math.exp(sum(map(math.log, rs)) / len(rs)) for name, rs in ratios.items()}
    winner = min(geomean, key=geomean.get)
    ctx = bench["context"]
    versions = {}
    for _, package in RUNTIMES.values():
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {"about": "scripts/run --race (python/attention_lab/race.py): the fused CPU attention of three runtimes "
                     "timed in one attn-bench process; the winner joins every run as a peer",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "profile": profile, "cpu": peak.get("cpu", ""), "isa": ctx.get("simd", ""), "blas": ctx.get("blas", ""),
            "fp32_fma_gflops_core": peak.get("fp32_fma_gflops_core"), "versions": versions,
            "time_over_baseline_geomean": geomean, "baseline": BASELINE, "fp32_points_compared": len(ratios[BASELINE]),
            "winner": winner, "winner_spec": RUNTIMES[winner][0], "points": points}


def load(path=RESULT):
    """The committed race result, or None where there is none."""
    if not os.path.isfile(path):
        return None
    return io.load_json(path, RaceError)


def winner_spec(path=RESULT):
    """The bridge spec of the committed race's winner, or None (no race committed, or its runtime not installed)."""
    result = load(path)
    if result is None:
        return None
    package = RUNTIMES.get(result["winner"], (None, None))[1]
    try:
        metadata.version(package)
    except (metadata.PackageNotFoundError, ValueError, TypeError):
        return None
    return result["winner_spec"]


def _interval(ci):
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def markdown(result):
    """The race as Markdown: its machine, the winner and by how much, and a table of every point."""
    v = result["versions"]
    lines = [f"Raced {result['date']} ({result['profile']} profile; `scripts/run --race`, data "
             f"`bench/runtime_race.json`) on {result['cpu'] or 'an unnamed CPU'}, {result['isa']}, OpenBLAS "
             f"{result['blas'].split(';')[1].strip() if ';' in result['blas'] else result['blas']}, one-thread fp32 FMA "
             f"peak {result['fp32_fma_gflops_core']:.1f} GFLOP/s measured in the same run; PyTorch {v.get('torch')}, "
             f"OpenVINO {v.get('openvino')}, ONNX Runtime {v.get('onnxruntime')}.", "",
             f"**Winner: {result['winner']}**: geometric mean of its time over {result['baseline']}'s at the "
             f"{result['fp32_points_compared']} fp32 point{'s' if result['fp32_points_compared'] != 1 else ''} all three "
             "ran: "
             + ", ".join(f"{name} {g:.2f}x" for name, g in sorted(result["time_over_baseline_geomean"].items(),
                                                                   key=lambda kv: kv[1])) + ".", "",
             "| shape | precision | causal | threads | d | " + " | ".join(f"{n} (GFLOP/s)" for n in RUNTIMES)
             + " | won by | runner-up's time / winner's | winner's time / streaming's |",
             "|---|---|---|---:|---:|" + "---:|" * len(RUNTIMES) + "---|---:|---:|"]
    for p in result["points"]:
        shape = f"B = 1, H = {p['heads']}, n = {p['n']}"
        cells = [f"{p['times'][n]['gflops']:.1f}" if n in p["times"] else "n/s" for n in RUNTIMES]
        ru = p.get("runner_up")
        over = p.get("over_streaming", {}).get(p.get("winner"))
        lines.append(f"| {shape} | {p['precision']} | {'yes' if p['causal'] else 'no'} | {p['threads']} | {p['d']} | "
                     + " | ".join(cells) + f" | {p.get('winner', '-')} | "
                     + (f"{ru['time_over_winner']:.2f}x{_interval(ru['ci'])}" if ru else "-") + " | "
                     + (f"{over[0]:.2f}x{_interval(over[1])}" if over else "-") + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/run --race", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=PROFILES, default="quick")
    ap.add_argument("--out", default=RESULT, help="the result's JSON (default bench/runtime_race.json)")
    a = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="attn-race-") as folder:
            result = summarise(*measure(a.profile, folder), a.profile)
        io.write_json(a.out, result, indent=1)
    except (RaceError, bench_io.BenchError) as e:
        print(f"scripts/run: race: {e}", file=sys.stderr)
        return 1
    print(markdown(result))
    print(f"race: written {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
