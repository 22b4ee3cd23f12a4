#!/usr/bin/python3
"""Turns the JSON of one run (attn-lab peak, attn-bench, attn-lab accuracy,
attn-lab entropy) into Markdown reports with SVG figures.

    scripts/report.py --data DIR --out-root reports [--command "scripts/run"]

DIR holds peak.json, bench.json (Google Benchmark's format), accuracy.json,
entropy.json, claims.json and build.json (and verdicts.json when plugins were
verified). The run is written to reports/runs/<stamp>/
through a temporary folder renamed when complete, so an interrupted or
failed run leaves no half report; reports/latest then points at it. The
script reads only JSON; every figure's paragraph is written from the numbers.
"""
import argparse
import datetime
import json
import math
import os
import shutil
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import html_page  # noqa: E402
import runs  # noqa: E402
import stats  # noqa: E402

INPUTS = ["peak.json", "bench.json", "build.json"]
# Inputs a sweep's merge may lack when the shard that ran them did not complete: each report needing one says
# so in its place (the index names the shard).
SWEEP_INPUTS = ["accuracy.json", "entropy.json", "claims.json"]
# Optional inputs of index.html (scripts/html_page.py collect writes them).
PAGE_INPUTS = ["heatmaps.json", "explorer.json"]
# Optional inputs of the reports: attn-lab verify's verdicts (a list), when scripts/run verified plugins.
OPTIONAL_INPUTS = ["verdicts.json"]
BENCH_NAME_KEYS = ("family", "backend", "precision", "causal", "threads")


class ReportError(Exception):
    """An input the report cannot be made from: one line, naming the file."""


def load(data_dir, name):
    return runs.load_json(os.path.join(data_dir, name), ReportError, name)


def require(obj, keys, where):
    for k in keys:
        if k not in obj:
            raise ReportError(f"{where}: missing field '{k}'")


def parse_bench_name(name):
    """attn/<backend>/<precision>/causal:<c>/threads:<t>/n:<n>/d:<d> (or n_q:/n_kv:) -> dict."""
    parts = name.split("/")
    if len(parts) < 7 or parts[0] not in ("attn", "attn_cold", "attn_h8", "attn_bwd", "attn_bwd_mem", "attn_fwdbwd",
                                          "attn_var", "attn_decode"):
        return None
    row = {"family": parts[0], "backend": parts[1], "precision": parts[2]}
    for p in parts[3:]:
        if ":" not in p:
            return None
        k, v = p.split(":", 1)
        row[k] = int(v) if v.isdigit() else v  # variant:softcap
    return row


def fit_exponent(xs, ys):
    """Least-squares slope of log y against log x."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else float("nan")


def savefig(fig, folder, name):
    fig.tight_layout()
    fig.savefig(os.path.join(folder, name), format="svg")
    plt.close(fig)
    return name


def fmt_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024


# --- The reports ------------------------------------------------------------------


def bench_rows(bench):
    """One row per benchmark: its name's fields and counters. Its `samples` are runs.samples_of over its rows:
    attn-bench's adaptive samples, else one per repetition (--benchmark_repetitions; aggregate rows are ignored),
    that one's median call; its times are the medians over its repetitions."""
    require(bench, ["benchmarks", "context"], "bench.json")
    plugins = backends_with(bench, plugin=True) if "backend_traits" in bench["context"] else []
    groups = {}
    for b in bench["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b.get("name", ""))
        meta = parse_bench_name(name)
        if meta is None or b.get("error_occurred"):
            continue
        # The memory counters are absent for plugins (their allocator is their own).
        needed = ("seconds_per_call", "FLOP/s") + (() if meta["backend"] in plugins else
                                                   ("peak_heap_bytes", "workspace_model_bytes"))
        for k in needed:
            if not isinstance(b.get(k), (int, float)):
                raise ReportError(f"bench.json: {name} lacks counter '{k}'")
        groups.setdefault(name, (meta, []))[1].append(b)
    rows = []
    for name, (meta, reps) in groups.items():
        first = reps[0]
        for k in ("peak_heap_bytes", "workspace_model_bytes", "peak_extra_heap_bytes", "kv_bytes/s",
                  "max_abs_error", "error_bound"):
            meta[k] = first.get(k)
        meta["flop_per_call"] = first["FLOP/s"] * first["seconds_per_call"]
        try:
            meta["samples"] = [x for b in reps for x in runs.samples_of(b)]
        except runs.RunError as e:
            raise ReportError(str(e))
        meta["repetitions"] = len(reps)
        meta["name"] = name
        meta["seconds_per_call"] = stats.median([b["seconds_per_call"] for b in reps])
        meta["FLOP/s"] = meta["flop_per_call"] / meta["seconds_per_call"]
        for k in ("seconds_median", "seconds_p10", "seconds_p90"):
            vals = [b[k] for b in reps if isinstance(b.get(k), (int, float))]
            meta[k] = stats.median(vals) if vals else None
        rows.append(meta)
    if not rows:
        raise ReportError("bench.json: no benchmark that ran")
    return rows


def rate_estimate(r):
    """A row's GFLOP/s from its median sample, with the interval its repetitions give
    (stats.median_ci; None with fewer than six): {"value", "interval"}, or None without the row."""
    if not r:
        return None
    ci = stats.median_ci(r["samples"])
    g = lambda s: r["flop_per_call"] / s / 1e9  # noqa: E731
    return {"value": g(stats.median(r["samples"])), "interval": ci and (g(ci[1]), g(ci[0]))}


def time_ratio(num, den):
    """median time of num over den's, with its bootstrap interval (stats.ratio_ci); None without both rows.
    The rate of A over B is time_ratio(B, A)."""
    if not (num and den):
        return None
    v, ci = stats.ratio_ci(num["samples"], den["samples"])
    return {"value": v, "interval": ci}


def scaled(est, k):
    """An estimate divided by a constant (a measured peak): its interval too."""
    if not est or not k:
        return None
    return {"value": est["value"] / k, "interval": est["interval"] and (est["interval"][0] / k, est["interval"][1] / k)}


class Targets:
    """The target table: each target's measured value, its interval, the requirement and a verdict that
    noise cannot flip: met when `ok` holds at both ends of the interval, MISSED when at neither, "within noise"
    when the interval straddles the requirement. Timing estimates carry an interval; deterministic figures
    (memory, fitted exponents) are plain numbers and say so."""

    def __init__(self):
        self.rows = []

    def __call__(self, what, est, need, fmt, ok):
        if est is None or (isinstance(est, dict) and est["value"] is None):
            self.rows.append((what, "not measured", "", need, "-"))
            return
        value, iv = (est["value"], est["interval"]) if isinstance(est, dict) else (est, "deterministic")
        shown = fmt(value)
        if shown.startswith("INSTRUMENT ERROR"):
            verdict, iv_shown = "instrument error", ""
        elif iv == "deterministic":
            verdict, iv_shown = ("met" if ok(value) else "MISSED"), "deterministic"
        elif iv is None:
            verdict, iv_shown = ("met" if ok(value) else "MISSED") + " (point estimate)", "none: fewer than 6 repetitions"
        else:
            a, b = ok(iv[0]), ok(iv[1])
            verdict = "met" if a and b else "MISSED" if not (a or b) else "within noise"
            iv_shown = f"{fmt(iv[0])} ... {fmt(iv[1])}"
        self.rows.append((what, shown, iv_shown, need, verdict))

    def table(self):
        return (["| target | measured (median) | 95% interval | required | verdict |", "|---|---:|---:|---:|---|"]
                + [f"| {w} | {v} | {i} | {n} | {k} |" for w, v, i, n, k in self.rows])


def series(rows, x, **fixed):
    """{backend: [(x, row)]} over rows matching `fixed`, sorted by x."""
    out = {}
    for r in rows:
        if r.get("family") != "attn" or "n" not in r or any(r.get(k) != v for k, v in fixed.items()):
            continue
        out.setdefault(r["backend"], []).append((r[x], r))
    return {b: sorted(v, key=lambda t: t[0]) for b, v in out.items()}


def loglog_fits(folder, name, data, xlabel, ylabel, title):
    """One log-log line per backend from {backend: [(x, y)]}, labelled with
    its fitted exponent; returns (figure file, {backend: exponent})."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    fits = {}
    for b, pts in sorted(data.items()):
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        fits[b] = fit_exponent(xs, ys)
        ax.loglog(xs, ys, "o-", label=f"{b} (exponent {fits[b]:.2f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return savefig(fig, folder, name), fits


def of_peak(gflops, peak_gflops):
    """A rate as a percentage of the peak it must stay under; a rate above it
    means the peak probe (the instrument) is wrong, and is said so instead of
    printing a fraction above 100%."""
    if gflops > peak_gflops:
        return f"INSTRUMENT ERROR: {gflops:.1f} above the measured peak {peak_gflops:.1f}"
    return f"{100 * gflops / peak_gflops:.0f}%"


def widest(rows, x, key, **fixed):
    """The value of `key` whose series over `x` (rows matching `fixed`) has the
    most points: the quick profile's d = 64 for the n series, n = 1024 for the
    d series; whatever the profile measured otherwise (None: no rows)."""
    xs = {}
    for r in rows:
        if r.get("family") == "attn" and key in r and x in r and all(r.get(k) == v for k, v in fixed.items()):
            xs.setdefault(r[key], set()).add(r[x])
    return max(sorted(xs), key=lambda v: len(xs[v])) if xs else None


def scaling_report(rows, peak, folder):
    fixed = dict(precision="fp32", causal=0, threads=1)
    d_of_n, n_of_d = widest(rows, "n", "d", **fixed), widest(rows, "d", "n", **fixed)
    if d_of_n is None:
        return "# Scaling\n\nThis run measured no fp32 single-thread attn points.\n", []
    by_n = series(rows, "n", d=d_of_n, **fixed)
    f1, fits = loglog_fits(folder, "scaling_n.svg", {b: [(n, r["seconds_per_call"]) for n, r in pts]
                                                     for b, pts in by_n.items()},
                           "n (n_q = n_kv)", "seconds per call", f"time vs n: fp32, d = {d_of_n}, no mask, 1 thread")
    fits = {b: (e, [n for n, _ in by_n[b]]) for b, e in fits.items()}
    by_d = series(rows, "d", n=n_of_d, **fixed)
    f2, dfits = loglog_fits(folder, "scaling_d.svg", {b: [(d, r["seconds_per_call"]) for d, r in pts]
                                                      for b, pts in by_d.items()},
                            "d_k = d_v", "seconds per call", f"time vs d: fp32, n = {n_of_d}, no mask, 1 thread")

    fp32_peak = peak["fp32_fma_gflops_core"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    roof = {}
    for b, pts in sorted(by_n.items()):
        fr = [p[1]["FLOP/s"] / 1e9 / fp32_peak for p in pts]
        roof[b] = max(fr)
        ax.semilogx([p[0] for p in pts], fr, "o-", label=b)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("n")
    ax.set_ylabel("fraction of measured fp32 FMA peak (one thread)")
    ax.set_title(f"roofline: peak {fp32_peak:.1f} GFLOP/s measured in this run")
    ax.legend(fontsize=8)
    f3 = savefig(fig, folder, "roofline.svg")

    lines = ["# Scaling", "", f"![time vs n]({f1})", ""]
    desc = "; ".join(f"{b}'s time grows with exponent {e:.2f} over n = {min(ns)} ... {max(ns)}"
                     for b, (e, ns) in sorted(fits.items()))
    lines += [f"Fitted on a log-log least-squares line: {desc}. Work quadratic in n would give 2.0.", ""]
    lines += [f"![time vs d]({f2})", ""]
    lines += [f"At n = {n_of_d}, time against d: " + "; ".join(f"{b} exponent {e:.2f}" for b, e in sorted(dfits.items()))
              + ". The products grow linearly in d (exponent 1); the n^2 exponentials do not grow with d, so "
              "an exponent below 1 measures how much of the time they take.", ""]
    lines += [f"![roofline]({f3})", ""]
    best = max(roof.items(), key=lambda t: t[1])
    lines += [f"GFLOP/s (4 n^2 d per head) as a fraction of this machine's fp32 FMA peak of {fp32_peak:.1f} "
              f"GFLOP/s for one thread, measured by `attn-lab peak` in the same run. The best is {best[0]} at "
              f"{of_peak(best[1] * fp32_peak, fp32_peak)}: "
              + ", ".join(f"{b} {of_peak(v * fp32_peak, fp32_peak)}" for b, v in sorted(roof.items())) + ".", ""]
    lines += ["| backend | n | d | ms per call | GFLOP/s |", "|---|---:|---:|---:|---:|"]
    for b, pts in sorted(by_n.items()):
        for n, r in pts:
            lines.append(f"| {b} | {n} | {d_of_n} | {1e3 * r['seconds_per_call']:.2f} | {r['FLOP/s'] / 1e9:.1f} |")
    bwd = backward_series(rows)
    bwd_fits = {b: fit_exponent([n for n, _ in pts], [r["seconds_per_call"] for _, r in pts]) for b, pts in bwd.items()}
    if bwd:
        lines += ["", "## The backward pass", "",
                  "Time of the backward alone (attn_bwd_mem: B = H = 1, fp32, d = 64, 1 thread) against n; fitted "
                  "exponents: " + "; ".join(f"{b} {e:.2f} over n = {bwd[b][0][0]} ... {bwd[b][-1][0]}"
                                            for b, e in sorted(bwd_fits.items())) + ".", "",
                  "| backend | n | ms per backward | GFLOP/s (2.5x the forward's FLOPs) |", "|---|---:|---:|---:|"]
        for b, pts in sorted(bwd.items()):
            for n, r in pts:
                lines.append(f"| {b} | {n} | {1e3 * r['seconds_per_call']:.2f} | {r['FLOP/s'] / 1e9:.1f} |")
    return "\n".join(lines) + "\n", ["time exponent in n: " + ", ".join(f"{b} {e:.2f}" for b, (e, _) in sorted(fits.items()))
                                      + ("; backward: " + ", ".join(f"{b} {e:.2f}" for b, e in sorted(bwd_fits.items()))
                                         if bwd else "")]


def backward_series(rows):
    """{backend: [(n, row)]} of the backward's memory series (attn_bwd_mem), sorted by n."""
    out = {}
    for r in rows:
        if r["family"] == "attn_bwd_mem" and "n" in r:
            out.setdefault(r["backend"], []).append((r["n"], r))
    return {b: sorted(v, key=lambda t: t[0]) for b, v in out.items()}


def backends_with(bench, **traits):
    """The backends whose traits (attn-bench's context "backend_traits") have these values, in registry order."""
    table = json.loads(bench["context"]["backend_traits"])
    return [b for b, t in table.items() if all(t.get(k) == v for k, v in traits.items())]


# PyTorch's math attention, the peer of the performance targets: the torch
# plugin's kernel (plugins/torch), timed by attn-bench beside ours.
TORCH_MATH = "torch-math"


def performance_report(rows, peak, bench, folder):
    """The roofline (GFLOP/s of every backend x precision against n, with the
    measured peaks drawn) and the performance targets, each measured in this
    run, PyTorch's math attention (the torch plugin) among them. The targets
    name backends by trait: the fused one runs its own threads with memory
    independent of n; the BLAS ones leave threads to OpenBLAS."""
    fused_all = backends_with(bench, own_threads=True, memory_independent_of_n=True)
    if not fused_all:
        raise ReportError("bench.json: no backend with its own threads and memory independent of n")
    fused = fused_all[0]
    blas = backends_with(bench, uses_blas=True, own_threads=False, exact=False)
    fp32_peak, sgemm = peak["fp32_fma_gflops_core"], peak["sgemm_gflops_2048"]
    att = {d: peak.get(f"sgemm_attention_gflops_d{d}") for d in (64, 128)}
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    curves = {}
    for r in rows:
        if (r["family"] == "attn" and "n" in r and r["causal"] == 0 and r["threads"] == 1 and r["d"] == 64
                and r["backend"] not in backends_with(bench, plugin=True)):
            curves.setdefault((r["backend"], r["precision"]), []).append((r["n"], r["FLOP/s"] / 1e9))
    for (b, p), pts in sorted(curves.items()):
        pts.sort()
        ax.loglog([x for x, _ in pts], [y for _, y in pts], "o-" if p == "fp32" else "s:", ms=4, label=f"{b} {p}")
    ax.axhline(fp32_peak, color="k", lw=1.2, label=f"fp32 FMA peak, 1 thread ({fp32_peak:.0f})")
    ax.axhline(sgemm, color="k", ls="--", lw=0.9, label=f"SGEMM n = 2048, 1 thread ({sgemm:.0f})")
    if att[64]:
        ax.axhline(att[64], color="grey", ls=":", lw=0.9, label=f"attention GEMMs n = 4096, d = 64 ({att[64]:.0f})")
    ax.set_xlabel("n (n_q = n_kv), d = 64, B = H = 1, no mask, 1 thread")
    ax.set_ylabel("GFLOP/s (4 n^2 d)")
    ax.set_title("roofline: each backend x precision against this run's measured peaks")
    ax.legend(fontsize=6, ncol=2)
    f1 = savefig(fig, folder, "roofline_precisions.svg")

    h8 = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in rows if r["family"] == "attn_h8"}
    lines = ["# Performance", "", f"![roofline]({f1})", "",
             f"Peaks measured by `attn-lab peak` in this run: fp32 FMA {fp32_peak:.1f} GFLOP/s on one thread "
             f"({peak['fp32_fma_gflops_all']:.1f} on all), SGEMM {sgemm:.1f} (n = 2048, one thread)"
             + (f", OpenBLAS's two attention GEMMs alone (Q K^T then P V at n = 4096, one thread) {att[64]:.1f} at "
                f"d = 64 and {att[128]:.1f} at d = 128" if att[64] else "") + ". "
             f"Vector kernels of every backend and of the FMA probe: {bench['context'].get('simd', peak.get('simd'))}"
             + (f" ({peak['fma_chains']} independent FMA chains)" if peak.get("fma_chains") else "") + ".", ""]
    for e in peak.get("instrument_errors", []):
        lines += [f"**INSTRUMENT ERROR** (attn-lab peak): {e}: the FMA probe under-measures this machine's peak, "
                  "so no fraction of peak in this report can be trusted.", ""]
    target = Targets()
    rate = lambda key: rate_estimate(h8.get(key))  # noqa: E731
    faster = lambda a, b: time_ratio(h8.get(b), h8.get(a))  # noqa: E731  the rate of a over b

    pct = lambda v: f"{100 * v:.0f}%"
    ratio = lambda v: f"{v:.4f}x"
    for d, need in ((128, 0.65), (64, 0.55)):
        target(f"{fused} fp32, d = {d}, 1 thread: fraction of fp32 FMA peak", scaled(rate((fused, "fp32", 0, 1, d)),
                                                                                      fp32_peak),
               f">= {pct(need)}", lambda v: of_peak(v * fp32_peak, fp32_peak),
               lambda v, need=need: need <= v <= 1.0)
    for d in (64, 128):
        target(f"{fused} fp32, d = {d}, 1 thread: rate over PyTorch's math attention ({TORCH_MATH}, preallocated)",
               faster((fused, "fp32", 0, 1, d), (TORCH_MATH, "fp32", 0, 1, d)), ">= 1.25x", ratio, lambda v: v >= 1.25)
    for b in blas:
        for d in (64, 128):
            target(f"{fused} fp32, d = {d}, 1 thread: rate over {b}", faster((fused, "fp32", 0, 1, d), (b, "fp32", 0, 1, d)),
                   ">= 1.00x", ratio, lambda v: v >= 1.0)
    for d in (64, 128):
        target(f"{fused} fp32, d = {d}: 2 threads over 1", faster((fused, "fp32", 0, 2, d), (fused, "fp32", 0, 1, d)),
               ">= 1.80x", ratio, lambda v: v >= 1.8)
    for d in (64, 128):
        target(f"{fused} fp32, d = {d}: causal speed-up (time ratio)",
               time_ratio(h8.get((fused, "fp32", 0, 1, d)), h8.get((fused, "fp32", 1, 1, d))), ">= 1.80x", ratio,
               lambda v: v >= 1.8)
    for p in ("bf16", "fp16"):
        for d in (64, 128):
            target(f"{fused} {p} (fp32 accumulation), d = {d}: rate over fp32",
                   faster((fused, p, 0, 1, d), (fused, "fp32", 0, 1, d)), ">= 1.00x", ratio, lambda v: v >= 1.0)
    for b in blas:
        for d in (64, 128):
            target(f"{b} fp32, d = {d}: fraction of the two attention GEMMs alone (attn-lab peak)",
                   scaled(rate((b, "fp32", 0, 1, d)), att[d]), ">= 85%", pct, lambda v: v >= 0.85)
    mem_rows = sorted((r for r in rows if r["family"] == "attn" and r["backend"] == fused and r["precision"] == "fp32"
                       and r.get("causal") == 0 and r.get("threads") == 1 and r.get("d") == 64 and "n" in r
                       and r.get("peak_extra_heap_bytes") is not None), key=lambda r: r["n"])
    mem = [(r["n"], r["peak_extra_heap_bytes"]) for r in mem_rows]
    if mem:
        # Judged where the tiles are full: below B_q (or B_k) keys the tiles,
        # and so the workspace model, shrink with n; beyond, memory must not grow.
        full_model = max(r["workspace_model_bytes"] for r in mem_rows)
        full = [(r["n"], r["peak_extra_heap_bytes"]) for r in mem_rows if r["workspace_model_bytes"] == full_model]
        lo, hi = min(m for _, m in full), max(m for _, m in full)
        target(f"{fused} peak extra heap, n = {full[0][0]} ... {full[-1][0]} (full tiles; max / min)",
               hi / lo if lo else None, "independent of n (1.0000x)", ratio, lambda v: v <= 1.05)
    bwd_lines = backward_performance(rows, fused, fp32_peak, target)  # its targets join the table below
    counts = sorted({len(r["samples"]) for r in h8.values()})
    sampling = bench["context"].get("adaptive_sampling", "off")
    lines += ["## Performance targets, B = 1, H = 8, n = 4096", "",
              f"Each benchmark took {counts[0] if len(counts) == 1 else f'{counts[0]} to {counts[-1]}' if counts else '?'}"
              " samples, one after the other: "
              + (f"attn-bench's adaptive sampling ({sampling}: it stops when the 95% interval of the median is that "
                 "fraction of the median wide, or at the cap), a sample one call or a batch of calls of at least 5 ms"
                 if sampling != "off" else "Google Benchmark's repetitions, a sample one repetition's median call")
              + ". A rate's interval is the 95% order-statistics interval of the median over the samples "
              "(distribution-free; none with fewer than 6); a ratio's is a 95% percentile bootstrap of the ratio of "
              f"medians ({stats.BOOTSTRAP} resamples, seed {stats.SEED}). Verdict: met when the whole interval "
              "meets the requirement, MISSED when none of it does, within noise when it straddles it. Memory "
              "figures are deterministic (one allocation count), without interval.", ""]
    lines += target.table()
    lines += ["", "## Fraction of peak, every attn_h8 run", "",
              "| backend | precision | causal | threads | d | ms per call (median) | GFLOP/s | 95% interval | of fp32 "
              "peak (threads x 1-thread) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (b, p, c, t, d), r in sorted(h8.items()):
        e = rate_estimate(r)
        lines.append(f"| {b} | {p} | {c} | {t} | {d} | {1e3 * stats.median(r['samples']):.1f} | {e['value']:.1f} | "
                     + (f"{e['interval'][0]:.1f} ... {e['interval'][1]:.1f}" if e["interval"] else "none")
                     + f" | {of_peak(e['value'], t * fp32_peak)} |")
    if backends_with(bench, plugin=True):
        lines += ["", "Kernels loaded from plugins (PyTorch's among them) are timed beside these in the same run: "
                  "their speed beside " + fused + " is in [plugins](plugins.md)."]
    small = [r for r in rows if r["family"] == "attn" and r["precision"] == "fp32" and r.get("causal") == 0
             and r.get("threads") == 1 and "n" in r and ((r["n"] == 256 and r["d"] == 64) or (r["d"] == 32))]
    if small:
        lines += ["", "## Small shapes (B = H = 1, fp32, 1 thread)", "",
                  "| backend | n | d | ms per call | GFLOP/s | of fp32 peak |", "|---|---:|---:|---:|---:|---:|"]
        for r in sorted(small, key=lambda r: (r["backend"], r["n"], r["d"])):
            g = r["FLOP/s"] / 1e9
            lines.append(f"| {r['backend']} | {r['n']} | {r['d']} | {1e3 * r['seconds_per_call']:.3f} | {g:.1f} | "
                         f"{of_peak(g, fp32_peak)} |")
    if mem:
        lines += ["", f"## {fused}'s extra memory against n (fp32, d = 64, 1 thread)", "",
                  "Peak heap of one cold call less the returned output tensor.", "",
                  "| n | peak extra heap |", "|---:|---:|"]
        lines += [f"| {n} | {fmt_bytes(m)} |" for n, m in mem]
    lines += bwd_lines
    missed = [f"{w}: {v} ({k})" for w, v, _, _, k in target.rows if k.startswith("MISSED") or k == "instrument error"]
    noise = [f"{w}: {v} ({i})" for w, v, i, _, k in target.rows if k == "within noise"]
    return "\n".join(lines) + "\n", (["performance targets missed: " + ("; ".join(missed) if missed else "none")]
                                      + (["performance targets within noise: " + "; ".join(noise)] if noise else [])
                                      + [f"INSTRUMENT ERROR (attn-lab peak): {e}" for e in peak.get("instrument_errors", [])])


def backward_performance(rows, fused, fp32_peak, target):
    """The backward pass's targets (appended to the target table through `target`) and the table of every
    attn_bwd / attn_fwdbwd run. FLOPs: 2.5x the forward's (FlashAttention-2's count), 3.5x for forward + backward."""
    bwd = [r for r in rows if r["family"] in ("attn_bwd", "attn_fwdbwd")]
    if not bwd:
        return ["", "## The backward pass", "", "not measured in this run (no attn_bwd benchmarks)."]
    n8 = max(r["n"] for r in bwd if r["family"] == "attn_bwd")  # the targets' n (4096 in the quick profile)
    at = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in bwd
          if r["family"] == "attn_bwd" and r["n"] == n8}
    get = at.get
    rate = lambda key: rate_estimate(at.get(key))  # noqa: E731
    pct = lambda v: f"{100 * v:.0f}%"
    ratio = lambda v: f"{v:.4f}x"
    for d, need in ((128, 0.50), (64, 0.40)):
        target(f"backward: {fused} fp32, d = {d}, 1 thread: fraction of fp32 FMA peak (2.5x forward FLOPs)",
               scaled(rate((fused, "fp32", 0, 1, d)), fp32_peak), f">= {pct(need)}", lambda v: of_peak(v * fp32_peak, fp32_peak),
               lambda v, need=need: need <= v <= 1.0)
    for d in (64, 128):
        target(f"backward: {fused} fp32, d = {d}: 2 threads over 1",
               time_ratio(get((fused, "fp32", 0, 1, d)), get((fused, "fp32", 0, 2, d))), ">= 1.80x", ratio,
               lambda v: v >= 1.8)
    for d in (64, 128):
        target(f"backward: {fused} fp32, d = {d}: causal speed-up (time ratio)",
               time_ratio(get((fused, "fp32", 0, 1, d)), get((fused, "fp32", 1, 1, d))), ">= 1.80x", ratio,
               lambda v: v >= 1.8)
    mem = backward_series(rows)
    if fused in mem:
        full_model = max(r["workspace_model_bytes"] for _, r in mem[fused])
        full = [(n, r["peak_extra_heap_bytes"]) for n, r in mem[fused] if r["workspace_model_bytes"] == full_model]
        lo, hi = min(m for _, m in full), max(m for _, m in full)
        target(f"backward: {fused} peak extra heap, n = {full[0][0]} ... {full[-1][0]} (full tiles; max / min)",
               hi / lo if lo else None, "independent of n (<= 1.05x)", ratio, lambda v: v <= 1.05)
    for b, pts in sorted(mem.items()):
        if b == fused or len(pts) < 2:
            continue
        e = fit_exponent([n for n, _ in pts], [r["peak_extra_heap_bytes"] for _, r in pts])
        target(f"backward: {b} peak extra heap, fitted exponent in n over n = {pts[0][0]} ... {pts[-1][0]}", e,
               "grows as n^2 (>= 1.8)", lambda v: f"{v:.2f}", lambda v: v >= 1.8)
    lines = ["", "## The backward pass: every attn_bwd and attn_fwdbwd run", "",
             "FLOPs counted as the FlashAttention-2 paper counts them: the backward is 2.5x the forward (five matrix "
             "products of 2 n_q n_kv d per head), forward + backward 3.5x; halved for causal. The backward's forward "
             "state (output, logsumexp) is prepared outside its timing.", "",
             "| family | backend | precision | causal | threads | n | d | ms per call | GFLOP/s | of fp32 peak "
             "(threads x 1-thread) | peak extra heap |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(bwd, key=lambda r: (r["family"], r["backend"], r["precision"], r["causal"], r["threads"], r["n"],
                                        r["d"])):
        g = r["FLOP/s"] / 1e9
        lines.append(f"| {r['family']} | {r['backend']} | {r['precision']} | {r['causal']} | {r['threads']} | {r['n']} "
                     f"| {r['d']} | {1e3 * r['seconds_per_call']:.1f} | {g:.1f} | {of_peak(g, r['threads'] * fp32_peak)}"
                     f" | {fmt_bytes(r['peak_extra_heap_bytes'] or 0)} |")
    return lines


def memory_report(rows, folder):
    by_n = series(rows, "n", precision="fp32", causal=0, threads=1, d=64)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    fits = {}
    for b, pts in sorted(by_n.items()):
        ns = [p[0] for p in pts]
        peak = [p[1]["peak_heap_bytes"] for p in pts]
        model = [p[1]["workspace_model_bytes"] for p in pts]
        fits[b] = (fit_exponent(ns, peak), fit_exponent(ns, model))
        line, = ax.loglog(ns, peak, "o-", label=f"{b} measured (exponent {fits[b][0]:.2f})")
        ax.loglog(ns, model, "--", color=line.get_color(), lw=0.9, label=f"{b} workspace model")
    # EXAMPLES.md E6: an explicit fp16 score matrix, 2 MiB at n = 1024 and 8 MiB at 2048.
    ax.loglog([1024, 2048], [2 * 2**20, 8 * 2**20], "k*", ms=11, label="E6: fp16 n x n scores (2 -> 8 MiB)")
    ax.set_xlabel("n")
    ax.set_ylabel("bytes")
    ax.set_title("peak heap of one call vs n: fp32, d = 64")
    ax.legend(fontsize=7)
    f1 = savefig(fig, folder, "memory_n.svg")
    lines = ["# Memory", "", f"![memory vs n]({f1})", ""]
    lines += ["Measured peak heap of one cold call (counting allocator: workspace, output, everything the call "
              "allocates) against each backend's own workspace model (dashed). Fitted exponents of the measured "
              "peak in n: " + "; ".join(f"{b} {m:.2f} (model {w:.2f})" for b, (m, w) in sorted(fits.items()))
              + ". The stars are EXAMPLES.md E6: an explicit fp16 score matrix of one head grows from 2 MiB at "
              "n = 1024 to 8 MiB at n = 2048 (4x for 2x n).", ""]
    lines += ["| backend | n | measured peak | workspace model |", "|---|---:|---:|---:|"]
    for b, pts in sorted(by_n.items()):
        for n, r in pts:
            lines.append(f"| {b} | {n} | {fmt_bytes(r['peak_heap_bytes'])} | {fmt_bytes(r['workspace_model_bytes'])} |")
    bwd = backward_series(rows)
    bwd_fits = {}
    if bwd:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for b, pts in sorted(bwd.items()):
            ns = [n for n, _ in pts]
            extra = [r["peak_extra_heap_bytes"] for _, r in pts]
            bwd_fits[b] = (fit_exponent(ns, extra), fit_exponent(ns, [r["workspace_model_bytes"] for _, r in pts]))
            line, = ax.loglog(ns, extra, "o-", label=f"{b} backward measured (exponent {bwd_fits[b][0]:.2f})")
            ax.loglog(ns, [r["workspace_model_bytes"] for _, r in pts], "--", color=line.get_color(), lw=0.9,
                      label=f"{b} backward workspace model")
        ax.set_xlabel("n")
        ax.set_ylabel("bytes")
        ax.set_title("backward: peak extra heap of one call vs n (fp32, d = 64)")
        ax.legend(fontsize=7)
        f2 = savefig(fig, folder, "memory_backward_n.svg")
        lines += ["", "## The backward pass", "", f"![backward memory vs n]({f2})", "",
                  "Peak heap of one backward call on a fresh workspace, less the gradients it returns (dQ, dK, dV), "
                  "against the backend's workspace model: the math backward holds P and dS of a head (2 n^2 values), "
                  "the streaming backward its tiles only. Fitted exponents in n: "
                  + "; ".join(f"{b} {m:.2f} (model {w:.2f})" for b, (m, w) in sorted(bwd_fits.items())) + ".", "",
                  "| backend | n | peak extra heap | workspace model |", "|---|---:|---:|---:|"]
        for b, pts in sorted(bwd.items()):
            for n, r in pts:
                lines.append(f"| {b} | {n} | {fmt_bytes(r['peak_extra_heap_bytes'] or 0)} | "
                             f"{fmt_bytes(r['workspace_model_bytes'])} |")
    return "\n".join(lines) + "\n", ["peak-memory exponent in n: " + ", ".join(f"{b} {m:.2f}" for b, (m, _) in sorted(fits.items()))
                                      + ("; backward: " + ", ".join(f"{b} {m:.2f}" for b, (m, _) in sorted(bwd_fits.items()))
                                         if bwd_fits else "")]


DEFAULT_ACC = {"fp64": "fp64", "fp32": "fp32", "bf16": "fp32", "fp16": "fp32", "e4m3": "fp32", "e5m2": "fp32"}


def richest_n(points):
    """The largest n among those swept over the most logit scales (the n of the error-against-logit-scale
    panels; a shard of a sweep may hold only part of the scales)."""
    scales = {}
    for q in points:
        scales.setdefault(q["n"], set()).add(q["logit_scale"])
    most = max(len(s) for s in scales.values())
    return max(n for n, s in scales.items() if len(s) == most)


def accuracy_report(acc, folder):
    require(acc, ["points"], "accuracy.json")
    every = acc["points"]
    if not every:
        raise ReportError("accuracy.json: no points")
    # The figures and the medians: one head, d_k = d_v (the problems every profile sweeps over n and the logit
    # scale); the problems of several batches and heads have their own table below, and every point counts in
    # the verdicts' headroom.
    pts = [q for q in every if q.get("batch", 1) == 1 and q.get("heads", 1) == 1 and q.get("d_v", q.get("d")) == q.get("d")]
    multi = [q for q in every if q not in pts]
    if not pts:
        raise ReportError("accuracy.json: no single-head point")
    for p in every:
        require(p, ["backend", "precision", "accumulate", "n", "d", "mask", "logit_scale", "max_abs", "u_store"],
                "accuracy.json point")
    precisions = [p for p in DEFAULT_ACC if any(q["precision"] == p for q in pts)]
    backends = sorted({q["backend"] for q in pts})

    def pick(**fixed):
        return [q for q in pts if all(q.get(k) == v for k, v in fixed.items())]

    def relative(q):  # max |O - truth| / max |truth|
        return max(q["max_abs_over_u"] * q["u_store"], 1e-300) if "max_abs_over_u" in q else max(q["max_abs"], 1e-300)

    def panels(name, x, xlabel, points=pts, y=relative, ylabel="max |O - truth| / max |truth|", among=precisions,
               **fixed):
        """One panel per precision of `among` (default accumulation), one line per backend, y(point) against x
        (points with y <= 0, an exact result, are left off the log axis)."""
        fig, axes = plt.subplots(1, len(among), figsize=(3.2 * len(among), 3.6), squeeze=False)
        for ax, prec in zip(axes[0], among):
            for b in backends:
                s = sorted((q for q in points if q["backend"] == b and q["precision"] == prec and y(q) > 0
                            and q["accumulate"] == DEFAULT_ACC[prec] and all(q.get(k) == v for k, v in fixed.items())),
                           key=lambda q: q[x])
                if s:
                    ax.loglog([q[x] for q in s], [y(q) for q in s], "o-", label=b, ms=3)
            u = next(q["u_store"] for q in pts if q["precision"] == prec)
            ax.axhline(u, color="k", lw=0.8, ls=":", label=f"u = {u:.2g}")
            ax.set_title(f"{prec} (accumulate {DEFAULT_ACC[prec]})", fontsize=9)
            ax.set_xlabel(xlabel)
        axes[0][0].set_ylabel(ylabel)
        axes[0][0].legend(fontsize=7)
        return savefig(fig, folder, name)

    f1 = panels("accuracy_n.svg", "n", "n", mask="none", logit_scale=1, d=64)
    n_scale = richest_n(pts)
    f2 = panels("accuracy_scale.svg", "logit_scale", "logit scale", mask="none", n=n_scale, d=64)

    lines = ["# Accuracy", "", "Every error here is deterministic (fixed seeds, one evaluation of each point against the "
             "50-digit reference where affordable): it carries no interval, unlike the timings.", "",
             f"![error vs n]({f1})", ""]
    worst = {}
    for prec in precisions:
        s = pick(precision=prec, accumulate=DEFAULT_ACC[prec], mask="none", logit_scale=1, d=64)
        if s:
            w = max(s, key=lambda q: q["max_abs"])
            worst[prec] = w
    lines += ["Max |O - truth| / max |truth| against n (d = 64, no mask, scaled scores of unit variance), each "
              "precision at its default accumulation; the dotted line is the storage format's unit roundoff u. The truth is "
              "verify()'s, code of its own (independent.hpp: no BLAS, no library helper): 50 digits where affordable, "
              "else double-double (fp64 storage) or plain fp64 (fp32 and narrower), its own bound added (each point's `reference` in "
              "data/accuracy.json says which). e4m3 and "
              "e5m2 are emulated: inputs and output quantised (power-of-two scale per tensor) around an fp32 "
              "computation. Largest "
              "errors: " + "; ".join(f"{p}: {w['max_abs']:.2g} ({w['backend']}, n = {w['n']}, "
                                     f"{w['max_abs'] / w['u_store']:.2f} u)" for p, w in worst.items()) + ".", ""]
    lines += [f"![error vs logit scale]({f2})", ""]
    growth = []
    for prec in precisions:
        s1 = pick(precision=prec, accumulate=DEFAULT_ACC[prec], mask="none", n=n_scale, d=64, logit_scale=1)
        s3 = pick(precision=prec, accumulate=DEFAULT_ACC[prec], mask="none", n=n_scale, d=64, logit_scale=1000)
        if s1 and s3:
            a, b = max(q["max_abs"] for q in s1), max(q["max_abs"] for q in s3)
            growth.append(f"{prec} {a:.2g} -> {b:.2g}")
    lines += [f"At n = {n_scale}, error against the logit scale (the standard deviation of the scaled scores), "
              "worst backend at logit scale 1 -> 1000: " + "; ".join(growth) + ".", ""]
    lines += ["Median max-abs error over all problems, by precision and accumulation:", "",
              "| precision | accumulate | median max_abs | median in u_store | points |", "|---|---|---:|---:|---:|"]
    for prec in precisions:
        for a in ("fp64", "fp32", "storage"):
            s = sorted(q["max_abs"] / q["u_store"] for q in pick(precision=prec, accumulate=a))
            t = sorted(q["max_abs"] for q in pick(precision=prec, accumulate=a))
            if s:
                lines.append(f"| {prec} | {a} | {t[len(t) // 2]:.3g} | {s[len(s) // 2]:.3g} | {len(s)} |")
    if multi:
        lines += ["", "## Several batches and heads, d_k != d_v", "",
                  f"B = 2, H = 4, n = {'/'.join(str(n) for n in sorted({q['n'] for q in multi}))}, d_k = 64, d_v = 32, head h's V scaled by 10^h (heads 1e3 apart; fp16 holds 65504), no mask "
                  "and causal, logit scales 1 and 100; the output, the logsumexp and the weights each judged row by "
                  "row (a verdict passes when all three do).", "",
                  "| precision | accumulate | points | passed | uninformative | failed | largest err/tight (output) |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                g = [q for q in multi if q["precision"] == prec and q["accumulate"] == a]
                if g:
                    passed, failed, unin = runs.verdict_counts(g)
                    lines.append(f"| {prec} | {a} | {len(g)} | {passed} | {unin} | {failed} | "
                                 f"{max(runs.tight_ratio(q) for q in g):.3g} |")
    tight = [q for q in every if isinstance(q.get("tight_tolerance"), (int, float)) and q["tight_tolerance"] > 0]
    if tight:
        lines += ["", "## Headroom of each verdict", "",
                  "Actual error over the tight tolerance, row by row (verify(): each query row within the smaller of "
                  "its probabilistic bound, failure probability 1e-9 per check, and (2 beta + 2) f, f the row's unit "
                  "of rounding noise and beta the baseline backend's largest row error in those units; the ratio is "
                  "the deciding row's), and over the worst-case bound, over every backend and problem of the sweep. "
                  "A ratio near 1 means the verdict would flag a small increase of the error; the worst-case bound's "
                  "small ratios are what it lets through. The criterion column says which part can decide in that "
                  "configuration (the baseline is judged by the probabilistic bound alone; where that bound is "
                  "trivial, the baseline rule alone decides). Uninformative: points where some row's tolerance "
                  "reaches the size of the output it judges (a 100% error would pass); they are counted apart, "
                  "never as passes, and left out of the ratios.",
                  "", "| precision | accumulate | criterion | points | passed | uninformative | median err/tight | "
                  "max err/tight | median err/worst-case | failed tight | failed worst-case |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                group = [q for q in tight if q["precision"] == prec and q["accumulate"] == a]
                for crit in sorted({q.get("criterion", "?") for q in group}):
                    g = [q for q in group if q.get("criterion", "?") == crit]
                    passed, _, unin = runs.verdict_counts(g)
                    rt = sorted(runs.tight_ratio(q) for q in g if runs.informative(q))
                    rw = sorted(q["max_abs"] / q["bound"] for q in g if q.get("bound"))
                    med = lambda xs: f"{xs[len(xs) // 2]:.3g}" if xs else "-"
                    lines.append(f"| {prec} | {a} | {crit} | {len(g)} | {passed} | {unin} | {med(rt)} | "
                                 + (f"{rt[-1]:.3g}" if rt else "-") + f" | {med(rw)} | "
                                 f"{sum(1 for q in g if q.get('within_tight') is False)} | "
                                 f"{sum(1 for q in g if q.get('within') is False)} |")
    if tight:
        lines += ["", "## Looseness by logit scale", "",
                  "Tight tolerance over error (1 / err_tight of the deciding row) per precision, accumulation and "
                  "logit scale, over the informative points with a non-zero error: the median and the loosest "
                  "(largest: how much larger an error would still pass), and the tightest; uninformative points "
                  "(a row's tolerance reaches its output) are counted, not included.", "",
                  "| precision | accumulate | logit scale | points | uninformative | median tol/err | loosest | tightest |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                for ls in sorted({q["logit_scale"] for q in tight}):
                    g = [q for q in tight if q["precision"] == prec and q["accumulate"] == a and q["logit_scale"] == ls]
                    if not g:
                        continue
                    r = sorted(1 / runs.tight_ratio(q) for q in g if runs.informative(q) and 0 < runs.tight_ratio(q))
                    unin = sum(1 for q in g if not runs.informative(q))
                    lines.append(f"| {prec} | {a} | {ls:g} | {len(g)} | {unin} | "
                                 + (f"{r[len(r) // 2]:.3g} | {r[-1]:.3g} | {r[0]:.3g} |" if r else "- | - | - |"))
    dist = [q for q in every if isinstance(q.get("distribution"), dict)]
    if dist:
        lines += ["", "## Beneath the output's rounding: the distribution verdict", "",
                  "In bf16, fp16 (and the emulated FP8) storage each element's tolerance is at least one rounding of "
                  "the output; the distribution verdict (docs/DESIGN.md) measures the internal error's mean square "
                  "beneath it, mean (e^2 - r^2) with r the truth's own rounding, in ulps of each row's largest |O|, "
                  "and requires its RMS (at the low end of a 6-sigma interval) within 2x the baseline's + 2 units "
                  "of the model's noise. Ratio: measured / allowed (above 1 fails); every backend but the baseline.", "",
                  "| precision | accumulate | points | failed | median internal RMS (ulps) | median allowed | "
                  "median ratio | largest ratio |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for prec in sorted({q["precision"] for q in dist}):
            for a in ("fp64", "fp32", "storage"):
                g = [q["distribution"] for q in dist if q["precision"] == prec and q["accumulate"] == a]
                if not g:
                    continue
                med = lambda key: sorted(x[key] for x in g)[len(g) // 2]
                lines.append(f"| {prec} | {a} | {len(g)} | {sum(1 for x in g if not x['within'])} | "
                             f"{med('internal_rms'):.3g} | {med('allowed_rms'):.3g} | {med('ratio'):.3g} | "
                             f"{max(x['ratio'] for x in g):.3g} |")
    grads = acc.get("gradient_points", [])
    if grads:
        lines += gradient_section(grads, precisions, panels)
    return "\n".join(lines) + "\n", ["largest error at unit logits (d = 64, no mask): "
                                      + ", ".join(f"{p} {w['max_abs']:.2g}" for p, w in worst.items())]


def gradient_section(grads, precisions, panels):
    """The backward pass's part of the accuracy report: gradient error against n and the logit
    scale (figures), and per precision, policy and gradient the error and each verdict's headroom."""
    # A non-finite gradient's relative error is null in the JSON: infinite here (and its verdicts fail).
    grads = [dict(q, relative=math.inf) if q.get("relative") is None else q for q in grads]
    for q in grads:
        require(q, ["backend", "precision", "accumulate", "n", "d", "mask", "logit_scale", "gradient", "relative",
                    "max_abs", "bound", "tight_tolerance", "within", "within_tight"], "accuracy.json gradient point")
    # One point per (backend, precision, policy, problem): the largest relative error of dQ, dK, dV.
    merged = {}
    for q in grads:
        key = tuple(q[k] for k in ("backend", "precision", "accumulate", "n", "d", "mask", "logit_scale"))
        if key not in merged or q["relative"] > merged[key]["relative"]:
            merged[key] = q
    worst = list(merged.values())
    gprecisions = [p for p in precisions if any(q["precision"] == p for q in grads)]
    ylabel = "max over dQ, dK, dV of max |g - truth| / max |truth|"
    f1 = panels("accuracy_grad_n.svg", "n", "n", points=worst, y=lambda q: q["relative"], ylabel=ylabel,
                among=gprecisions, mask="none", logit_scale=1, d=64)
    n_scale = richest_n(grads)
    f2 = panels("accuracy_grad_scale.svg", "logit_scale", "logit scale", points=worst, y=lambda q: q["relative"],
                ylabel=ylabel, among=gprecisions, mask="none", n=n_scale, d=64)
    lines = ["", "## The backward pass", "",
             f"![gradient error vs n]({f1})", "",
             "The gradients dQ, dK, dV of every backend with a backward pass, dO ~ N(0, 1) (seed 2000 + the "
             "problem's index), against `gradient_truth()`: the independent code's backward in 50 digits where affordable, "
             "else in double-double or fp64 with its bound, never a backend's (each point's `reference` says which). Each point is "
             "the largest of the three relative errors max |g - truth| / max |truth|; d = 64, no mask, unit "
             "logits, each precision at its default accumulation (an exact result, error 0, is left off the log "
             "axis).", "",
             f"![gradient error vs logit scale]({f2})", "",
             f"At n = {n_scale}, against the logit scale. Per precision, policy and gradient over every problem "
             "(err/tight: the deciding row's error over its tight tolerance, verify_backward() judging each row "
             "of dQ and each key's row of dK and dV in its own units, min(probabilistic bound, the baseline's rule); "
             "err/worst: over the worst-case bound of metrics.hpp):", "",
             "| precision | accumulate | gradient | points | passed | uninformative | median relative | max relative | "
             "median err/tight | max err/tight | median err/worst | failed tight | failed worst-case |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for prec in gprecisions:
        for a in ("fp64", "fp32", "storage"):
            for g in ("dq", "dk", "dv"):
                s = [q for q in grads if q["precision"] == prec and q["accumulate"] == a and q["gradient"] == g]
                if not s:
                    continue
                rel = sorted(q["relative"] for q in s)
                # An infinite bound (a non-informative one) is null in the JSON.
                finite = lambda x: isinstance(x, (int, float)) and 0 < x < math.inf
                rt = sorted(runs.tight_ratio(q) for q in s if finite(q["tight_tolerance"]) and runs.informative(q))
                rw = sorted(q["max_abs"] / q["bound"] for q in s if finite(q["bound"]))
                med = lambda xs: f"{xs[len(xs) // 2]:.3g}" if xs else "-"
                passed, _, unin = runs.verdict_counts(s)
                lines.append(f"| {prec} | {a} | {g} | {len(s)} | {passed} | {unin} | {med(rel)} | {rel[-1]:.3g} | {med(rt)} | "
                             + (f"{rt[-1]:.3g}" if rt else "-") + f" | {med(rw)} | "
                             f"{sum(1 for q in s if q['within_tight'] is False)} | "
                             f"{sum(1 for q in s if q['within'] is False)} |")
    top = max(grads, key=lambda q: q["relative"])
    if "max_truth" in top:
        lines += ["", f"The largest relative error, {top['relative']:.3g} ({top['backend']} {top['precision']}, "
                  f"accumulate {top['accumulate']}, {top['gradient']}, n = {top['n']}, {top['mask']}, logit scale "
                  f"{top['logit_scale']:g}), is against a true gradient of max |{top['gradient']}| = "
                  f"{top['max_truth']:.3g}: where the softmax saturates, dS = P o (dP - D) vanishes and the relative "
                  f"error measures rounding against almost nothing. Its absolute error {top['max_abs']:.3g} against "
                  f"the tight tolerance {top['tight_tolerance']:.3g}: "
                  + ("within, and informative." if runs.informative(top) and top.get("within_tight") else
                     "within, but the tolerance reaches the gradient itself: uninformative, not a pass."
                     if top.get("within_tight") else "EXCEEDED.")]
    return lines


def entropy_report(ent, folder):
    require(ent, ["rows", "draws", "keys"], "entropy.json")
    rows = ent["rows"]
    if not rows:
        raise ReportError("entropy.json: no rows")
    ds = [r["d"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.errorbar(ds, [r["raw_mean"] for r in rows], yerr=[5 * r["raw_se"] for r in rows], fmt="o-",
                label="softmax(q.k)")
    ax.errorbar(ds, [r["scaled_mean"] for r in rows], yerr=[5 * r["scaled_se"] for r in rows], fmt="s-",
                label="softmax(q.k / sqrt(d_k))")
    ax.axhline(math.log(ent["keys"]), color="k", lw=0.8, ls=":", label=f"uniform: log {ent['keys']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_k")
    ax.set_ylabel("mean entropy (nats), bars: 5 standard errors")
    ax.set_title(f"E7: {ent['draws']} draws over {ent['keys']} keys")
    ax.legend(fontsize=8)
    f1 = savefig(fig, folder, "entropy.svg")
    raw, sc = [r["raw_mean"] for r in rows], [r["scaled_mean"] for r in rows]
    lines = ["# Entropy (EXAMPLES.md E7)", "", f"![entropy]({f1})", ""]
    lines += [f"Without the scale the mean entropy falls from {raw[0]:.3f} nats at d_k = {ds[0]} to {raw[-1]:.3f} "
              f"at d_k = {ds[-1]}; with it, it stays between {min(sc):.3f} and {max(sc):.3f} (a spread of "
              f"{max(sc) - min(sc):.3f}, {100 * (max(sc) - min(sc)) / (raw[0] - raw[-1]):.1f}% of the unscaled "
              "fall). The variance of q.k grows like d_k; divided by sqrt(d_k) it stays near 1:", ""]
    lines += ["| d_k | entropy | se | entropy scaled | se | var(q.k) | var(q.k/sqrt(d_k)) |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['d']} | {r['raw_mean']:.4f} | {r['raw_se']:.4f} | {r['scaled_mean']:.4f} | "
                     f"{r['scaled_se']:.4f} | {r['var_qk']:.2f} | {r['var_qk_scaled']:.3f} |")
    return "\n".join(lines) + "\n", []


def claim_plot(plot, folder, name):
    require(plot, ["title", "xlabel", "ylabel", "x", "series"], "claims.json plot")
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for label, ys in plot["series"].items():
        if len(ys) != len(plot["x"]):
            raise ReportError(f"claims.json: plot '{plot['title']}' series '{label}' has {len(ys)} values "
                              f"for {len(plot['x'])} x")
        ax.plot(plot["x"], [y if y is not None else float("nan") for y in ys], "o-", label=label)
    if plot.get("logx"):
        ax.set_xscale("log")
    if plot.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(plot["xlabel"])
    ax.set_ylabel(plot["ylabel"])
    ax.set_title(plot["title"], fontsize=10)
    ax.legend(fontsize=8)
    return savefig(fig, folder, name)


def claims_report(claims, folder):
    require(claims, ["claims", "profile"], "claims.json")
    if not claims["claims"]:
        raise ReportError("claims.json: no claims")
    lines = ["# Claims ledger", "",
             f"Each claim was run as an experiment against a criterion fixed before it ran (profile "
             f"`{claims['profile']}`; `--profile full` uses paper-sized samples). A claim that does not hold on "
             "these measurements is reported as such, with the numbers.", "",
             "| id | verdict | measured | source |", "|---|---|---|---|"]
    for c in claims["claims"]:
        require(c, ["id", "verdict", "why", "source", "statement", "criterion", "command", "figures"], "claims.json claim")
        lines.append(f"| {c['id']} | **{c['verdict']}** | {c['why']} | {c['source']} |")
    lines.append("")
    for c in claims["claims"]:
        lines += [f"## {c['id']}: {c['verdict']}", "", f"- Source: {c['source']}", f"- Quote: \"{c['quote']}\"",
                  f"- Statement tested: {c['statement']}", f"- Experiment: {c['experiment']}",
                  f"- Criterion (fixed before running): {c['criterion']}", f"- Measured: {c['why']}",
                  f"- Reproduce: `{c['command']}`", "", "| figure | value |", "|---|---:|"]
        lines += [f"| {k} | {v:.6g} |" if isinstance(v, (int, float)) else f"| {k} | {v} |"
                  for k, v in c["figures"].items()]
        lines.append("")
        for k, plot in enumerate(c.get("plots", [])):
            name = claim_plot(plot, folder, f"claim_{c['id']}_{k}.svg")
            lines += [f"![{plot['title']}]({name})", ""]
    retired = claims.get("retired", [])
    if retired:
        lines += ["## Retired claims", "", "Entries whose criterion could not fail: their experiments were removed; "
                  "the ledger keeps each with the reason.", "", "| id | retired | statement | reason |", "|---|---|---|---|"]
        for r in retired:
            require(r, ["id", "date", "statement", "reason"], "claims.json retired claim")
            lines.append(f"| {r['id']} | {r['date']} | {r['statement']} | {r['reason']} |")
        lines.append("")
    return "\n".join(lines) + "\n", ["claims: " + "; ".join(f"{c['id']} {c['verdict']}" for c in claims["claims"])]


def spread_ms(r):
    """'median (p10 to p90)' of one benchmark's calls, in ms (attn-bench's per-call counters)."""
    if r.get("seconds_median") is None:
        return f"{1e3 * r['seconds_per_call']:.3g} (mean; no per-call spread recorded)"
    if r.get("seconds_p10") is None or r.get("seconds_p90") is None:
        return f"{1e3 * r['seconds_median']:.3g}"
    return f"{1e3 * r['seconds_median']:.3g} ({1e3 * r['seconds_p10']:.3g} to {1e3 * r['seconds_p90']:.3g})"


def fmt_or_nan(x):
    return "n/a" if x is None else f"{x:.2g}"


def median_seconds(r):
    return r.get("seconds_median") or r["seconds_per_call"]


def variants_report(rows, peak, folder):
    """The attention variants (attn_var: soft-cap, sinks, ALiBi, documents against plain causal attention at
    H = 8; GQA H_kv = 8 against MHA at H = 32) with each one's cost and error against its bound, and the decode
    step (attn_decode: one query over a KV cache of n_kv, H = 32, H_kv = 8, d = 128) as K/V bytes per second
    against this run's measured read bandwidth (`attn-lab peak`)."""
    var = [r for r in rows if r["family"] == "attn_var"]
    dec = [r for r in rows if r["family"] == "attn_decode"]
    lines, readings = ["# Variants and decoding", ""], []
    if not var and not dec:
        return "\n".join(lines + ["This run measured no attn_var or attn_decode benchmark.", ""]), readings
    lines += ["Every time below is the median call of one benchmark with the 10th to 90th percentile of its calls "
              "(`seconds_median`, `seconds_p10`, `seconds_p90` of attn-bench), so a ratio of two rows compares "
              "medians measured minutes apart in one run on a shared machine.", ""]
    if var:
        lines += ["## The variants", "",
                  "Causal self-attention, B = 1. `time / base`: the variant's median over plain attention's (H = 8) "
                  "or, for GQA (H = 32, H_kv = 8), over MHA's (H = 32, H_kv = 32) at the same backend, precision, "
                  "n and d. `error`: max |O - truth| on the benchmark's own small check problem "
                  "(`verify_small`), `bound` its tight tolerance.", "",
                  "| backend | precision | n | d | variant | ms median (p10 to p90) | time / base | error | bound |",
                  "|---|---|---:|---:|---|---:|---:|---:|---:|"]
        key = lambda r: (r["backend"], r["precision"], r["n"], r["d"])
        table = {(key(r), r["variant"]): r for r in var}
        worst = {}
        for r in sorted(var, key=lambda r: (key(r), ["plain", "softcap", "sinks", "alibi", "documents", "mha",
                                                     "gqa"].index(r["variant"]) if r["variant"] in
                                            ("plain", "softcap", "sinks", "alibi", "documents", "mha", "gqa") else 9)):
            base = {"gqa": "mha", "softcap": "plain", "sinks": "plain", "alibi": "plain", "documents": "plain"}.get(r["variant"])
            base = table.get((key(r), base))
            ratio = median_seconds(r) / median_seconds(base) if base else None
            if ratio is not None and r["variant"] != "gqa":
                worst[r["variant"]] = max(worst.get(r["variant"], 0), ratio)
            lines.append(f"| {r['backend']} | {r['precision']} | {r['n']} | {r['d']} | {r['variant']} | "
                         f"{spread_ms(r)} | {'' if ratio is None else f'{ratio:.2f}'} | "
                         f"{fmt_or_nan(r.get('max_abs_error'))} | {fmt_or_nan(r.get('error_bound'))} |")
        over = [r for r in var if (r.get("max_abs_error") or 0) > (r.get("error_bound") or float("inf"))]
        lines += ["", f"{len(over)} of {len(var)} variant benchmarks exceed their bound" +
                  (": " + ", ".join(f"{r['backend']} {r['precision']} {r['variant']}" for r in over) if over else "") + ".", ""]
        gqa = [(r, table.get((key(r), "mha"))) for r in var if r["variant"] == "gqa"]
        gqa = [(g, m) for g, m in gqa if m]
        if worst:
            readings.append("variants: largest time over plain per variant: " +
                            ", ".join(f"{v} {x:.2f}x" for v, x in sorted(worst.items())))
        if gqa:
            readings.append("GQA (H_kv = 8) over MHA (H_kv = 32) time, H = 32: " + ", ".join(
                f"{g['backend']} {g['precision']} n = {g['n']} {median_seconds(g) / median_seconds(m):.2f}" for g, m in gqa))
    if dec:
        read_core, read_all = peak.get("read_gbs_core"), peak.get("read_gbs_all")
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        curves = {}
        for r in dec:
            kv_bytes = r["kv_bytes/s"] * r["seconds_per_call"] if r.get("kv_bytes/s") else None
            r["_kv_gbs"] = kv_bytes / median_seconds(r) / 1e9 if kv_bytes else float("nan")
            curves.setdefault((r["backend"], r["precision"], r["threads"]), []).append((r["n_kv"], r["_kv_gbs"]))
        for (b, p, t), pts in sorted(curves.items()):
            pts.sort()
            ax.semilogx([x for x, _ in pts], [y for _, y in pts], "o-" if t == 1 else "s--", ms=4,
                        label=f"{b} {p} {t} thread{'s' if t > 1 else ''}")
        for bw, what, ls in ((read_core, "one thread", "-"), (read_all, "all threads", "--")):
            if bw:
                ax.axhline(bw, color="k", ls=ls, lw=0.9, label=f"measured read bandwidth, {what} ({bw:.1f} GB/s)")
        ax.set_xlabel("n_kv (KV cache length; one query, H = 32, H_kv = 8, d = 128)")
        ax.set_ylabel("K/V bytes read per second (GB/s, median call)")
        ax.set_title("decode step: K/V bandwidth against this run's read peak")
        ax.legend(fontsize=6)
        f = savefig(fig, folder, "decode_bandwidth.svg")
        lines += ["## Decoding: one query over a KV cache", "", f"![decode bandwidth]({f})", "",
                  "A decode step reads every K and V element once; its floor is the K/V bytes over the machine's "
                  "read bandwidth, measured in this run by `attn-lab peak` (" +
                  (f"{read_core:.1f} GB/s one thread, {read_all:.1f} GB/s all" if read_core and read_all
                   else "not recorded in this run's peak.json") + "). `of read peak`: the one-thread figure for "
                  "1 thread, the all-threads one otherwise.", "",
                  "| backend | precision | threads | n_kv | ms median (p10 to p90) | K/V GB/s | of read peak |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        best = None
        for r in sorted(dec, key=lambda r: (r["backend"], r["precision"], r["threads"], r["n_kv"])):
            bw = read_core if r["threads"] == 1 else read_all
            frac = f"{100 * r['_kv_gbs'] / bw:.0f}%" if bw else ""
            if bw and r["_kv_gbs"] > bw:
                frac += " (above the DRAM read peak: K/V cache-resident)"
            lines.append(f"| {r['backend']} | {r['precision']} | {r['threads']} | {r['n_kv']} | {spread_ms(r)} | "
                         f"{r['_kv_gbs']:.2f} | {frac} |")
            if bw and r["n_kv"] == max(x["n_kv"] for x in dec) and (best is None or r["_kv_gbs"] / bw > best[1]):
                best = (r, r["_kv_gbs"] / bw)
        lines.append("")
        if best:
            r, f = best
            readings.append(f"decode, n_kv = {r['n_kv']}: best {r['backend']} {r['precision']} {r['threads']} "
                            f"thread(s) {r['_kv_gbs']:.2f} GB/s of K/V = {100 * f:.0f}% of the measured read bandwidth")
    return "\n".join(lines) + "\n", readings


def plugins_report(rows, bench, acc, verdicts, folder):
    """Kernels loaded from plugin libraries (trait `plugin`): attn-lab verify's verdict per property x
    configuration, their speed beside the fused backend on the same benchmarks of this run, their accuracy."""
    plugins = backends_with(bench, plugin=True)
    lines = ["# Plugins: kernels written elsewhere", ""]
    readings = []
    if not plugins and not verdicts:
        lines += ["No plugin was loaded in this run (`scripts/run --plugin PATH`; the PyTorch plugin joins "
                  "when libtorch-dev is installed)."]
        return "\n".join(lines) + "\n", readings
    for v in verdicts or []:
        lines += [f"## attn-lab verify --plugin {v['plugin']} --profile {v['profile']}: {v['verdict']}", "",
                  f"RapidCheck seed {v['seed']}, {3 * v['cases_per_cell']} generated cases per property and "
                  "configuration (a cell counts those that applied to the property and the kernel's claims).", ""]
        for k in v["kernels"]:
            configs = sorted({c["config"] for c in k["cells"]})
            names = list(dict.fromkeys(c["property_name"] for c in k["cells"] if "property_name" in c))
            lines += [f"### {k['name']}", "", k["description"], "",
                      "| property | " + " | ".join(configs) + " |", "|---|" + "---|" * len(configs)]
            for name in names:
                cell = {c["config"]: c for c in k["cells"] if c.get("property_name") == name}
                lines.append(f"| {name} | " + " | ".join(
                    (f"pass ({cell[c]['cases']})" if cell[c]["status"] == "pass" else cell[c]["status"])
                    if c in cell else "" for c in configs) + " |")
            failed = [c for c in k["cells"] if c["status"] not in ("pass", "not supported")]
            lines.append("")
            for c in failed:
                ce = c.get("counterexample", {})
                lines.append(f"- {c['status']}: {c.get('property_name', c['property'])}, {c['config']}: smallest case "
                             f"`{ce.get('case', c.get('case', '?'))}`")
            readings.append(f"verify {k['name']}: {sum(c['status'] == 'pass' for c in k['cells'])} cells pass, "
                            f"{len(failed)} fail, {sum(c['status'] == 'not supported' for c in k['cells'])} not supported")
            lines.append("")
    fused = backends_with(bench, own_threads=True, memory_independent_of_n=True)
    same = [r for r in rows if r["family"] in ("attn", "attn_h8") and "n" in r]
    if plugins and fused and same:
        lines += ["## Speed beside the fused backend (the same benchmarks of this run)", "",
                  "attn: B = H = 1; attn_h8: B = 1, H = 8; n_q = n_kv = n. A plugin runs inside attn-bench's process, "
                  "timed as every backend is (warm calls into buffers the caller allocated once); a plugin's own "
                  "BLAS calls reach the process's BLAS (" + str(bench["context"].get("blas", "?")) + ") with the "
                  "benchmark's thread count. Speed-up: the plugin's median call over " + fused[0] + "'s.", "",
                  "| plugin | family | precision | n | d | causal | threads | plugin ms, median (p10 to p90) | " + fused[0] +
                  " ms | " + fused[0] + " speed-up |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        key = lambda r: (r["family"], r["precision"], r["n"], r["d"], r["causal"], r["threads"])  # noqa: E731
        ours = {key(r): r for r in same if r["backend"] == fused[0]}
        for r in sorted((r for r in same if r["backend"] in plugins), key=lambda r: (r["backend"],) + key(r)):
            o = ours.get(key(r))
            if not o:
                continue
            ratio = median_seconds(r) / median_seconds(o)
            lines.append(f"| {r['backend']} | {r['family']} | {r['precision']} | {r['n']} | {r['d']} | {r['causal']} | "
                         f"{r['threads']} | {spread_ms(r)} | {spread_ms(o)} | {ratio:.2f}x |")
            if r["family"] == "attn_h8" and r["precision"] == "fp32" and r["causal"] == 0:
                readings.append(f"{fused[0]} over {r['backend']} (attn_h8 fp32 n = {r['n']} d = {r['d']} "
                                f"threads {r['threads']}): {ratio:.2f}x")
        lines.append("")
    pts = [q for q in acc.get("points", []) if q["backend"] in plugins]
    if pts:
        lines += ["## Accuracy (attn-lab accuracy, this run)", "", "| plugin | precision | accumulate | points | passed | "
                  "uninformative | largest error / tight tolerance |", "|---|---|---|---:|---:|---:|---:|"]
        groups = {}
        for q in pts:
            groups.setdefault((q["backend"], q["precision"], q["accumulate"]), []).append(q)
        for (b, p, a), qs in sorted(groups.items()):
            worst = max(runs.tight_ratio(q) for q in qs)
            passed, _, unin = runs.verdict_counts(qs)
            lines.append(f"| {b} | {p} | {a} | {len(qs)} | {passed} | {unin} | {worst:.3g} |")
        ns = [q for q in acc.get("not_supported", []) if q["backend"] in plugins]
        lines += ["", f"{len(ns)} (problem, precision, accumulation) combinations were not supported by the plugins "
                      "(listed in data/accuracy.json, `not_supported`)."]
    return "\n".join(lines) + "\n", readings


class Report:
    """One report of a run: its file (NAME.md), its section of index.html and
    its line in index.md all follow from this entry; `make(data, folder)`
    returns (Markdown, readings for the index)."""

    def __init__(self, name, summary, make, needs=()):
        self.name, self.summary, self.make, self.needs = name, summary, make, needs

    def text(self, data, folder):
        """The report, or where an input it needs is absent (a sweep's shard that did not complete) a page
        saying so."""
        absent = [n for n in self.needs if n not in data]
        if absent:
            return (f"# {self.name}\n\nNot in this run: {', '.join(absent)} is missing, since the shard of the "
                    "sweep that ran it did not complete (the index names it).\n", [])
        return self.make(data, folder)


# The reports, in the order of the index and the page. Adding a report is one entry here.
REPORTS = [
    Report("scaling", "time vs n and d_k, fitted exponents, roofline",
           lambda d, folder: scaling_report(bench_rows(d["bench.json"]), d["peak.json"], folder)),
    Report("memory", "measured peak heap vs n against each backend's model, E6 (not plugins: their allocator is their own)",
           lambda d, folder: memory_report([r for r in bench_rows(d["bench.json"])
                                            if r["backend"] not in backends_with(d["bench.json"], plugin=True)], folder)),
    Report("performance", "roofline of every backend x precision, the performance targets, fraction of peak",
           lambda d, folder: performance_report(bench_rows(d["bench.json"]), d["peak.json"], d["bench.json"], folder)),
    Report("variants", "grouped-query heads, soft-cap, sinks, ALiBi, documents: cost and error; decode bandwidth",
           lambda d, folder: variants_report(bench_rows(d["bench.json"]), d["peak.json"], folder)),
    Report("accuracy", "error vs n, logit scale, precision and accumulation",
           lambda d, folder: accuracy_report(d["accuracy.json"], folder), ["accuracy.json"]),
    Report("entropy", "EXAMPLES.md E7", lambda d, folder: entropy_report(d["entropy.json"], folder), ["entropy.json"]),
    Report("claims", "the claims ledger, each claim with its criterion and verdict",
           lambda d, folder: claims_report(d["claims.json"], folder), ["claims.json"]),
    Report("plugins", "kernels from plugin libraries (PyTorch's among them): verify's verdicts, speed beside ours, accuracy",
           lambda d, folder: plugins_report(bench_rows(d["bench.json"]), d["bench.json"], d["accuracy.json"],
                                            d.get("verdicts.json"), folder), ["accuracy.json"]),
]


def index_report(peak, build, bench, command, stamp, readings, previous=None, sweep=None):
    ctx = bench["context"]
    lines = [f"# attention-lab run {stamp}", "", f"Command: `{command}`" + (f" (steps before the report: {build['run_seconds'] // 60} min "
                                                                 f"{build['run_seconds'] % 60} s)" if build.get("run_seconds") else ""), ""]
    if sweep:
        lines += ["## Sweep", ""] + sweep + [""]
    lines += ["## Machine", "",
             f"- CPU: {peak.get('cpu')} ({peak.get('cores')} hardware threads); vector kernels (every backend and "
             f"the FMA probe): {ctx.get('simd', peak.get('simd'))}",
             f"- CPU flags: {peak.get('cpu_flags', 'not recorded')}",
             f"- Measured peak (attn-lab peak, this run): fp32 FMA {peak['fp32_fma_gflops_core']:.1f} GFLOP/s one "
             f"thread, {peak['fp32_fma_gflops_all']:.1f} all; fp64 {peak['fp64_fma_gflops_core']:.1f} / "
             f"{peak['fp64_fma_gflops_all']:.1f}; SGEMM (1 thread) {peak['sgemm_gflops_1024']:.1f} at n = 1024, "
             f"{peak['sgemm_gflops_2048']:.1f} at 2048; DGEMM {peak['dgemm_gflops_1024']:.1f} / "
             f"{peak['dgemm_gflops_2048']:.1f}; triad {peak['triad_gbs_core']:.1f} GB/s one thread, "
             f"{peak['triad_gbs_all']:.1f} all",
             f"- BLAS: {peak.get('blas')}; OPENBLAS_CORETYPE: {ctx.get('OPENBLAS_CORETYPE', '?')}",
             f"- Compiler: {build.get('compiler')}; flags: {build.get('flags')}",
             f"- Libraries: {build.get('libraries')}",
             f"- Benchmark host: {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz; "
             f"profile {ctx.get('attn_profile')}"
             + (" (the pipeline's smoke test: one iteration per benchmark, no figure here is a measurement)"
                if ctx.get("attn_profile") == "smoke" else ""), "",
             "## Reports", ""]
    lines += [f"- [{r.name}]({r.name}.md): {r.summary}" for r in REPORTS]
    lines += ["- [data](data/): the JSON every figure was drawn from", "", "## Across runs", "",
              (f"- [comparison with {previous}](compare-previous/compare.html), the previous run of this machine and "
               "profile (`attn-lab compare`)" if previous else
               "- no earlier run of this machine and profile in the history store: nothing to compare with"),
              "- [history](../../history/history.html): every run in the store across commits and machines "
              "(`attn-lab history`)", "", "## Readings", ""]
    lines += [f"- {r}" for r in readings]
    return "\n".join(lines) + "\n"


def render_run(data_dir, folder, command, stamp, previous=None, sweep=None):
    """Fills `folder` with one run's reports, index (md, html) and data/ from the JSON in data_dir; returns the
    index's readings. `sweep`: the sweep's lines for the index (scripts/sweep.py merge)."""
    data = {name: load(data_dir, name) for name in INPUTS}
    data.update({n: load(data_dir, n) for n in SWEEP_INPUTS + OPTIONAL_INPUTS
                 if os.path.exists(os.path.join(data_dir, n))})
    peak, bench, build = data["peak.json"], data["bench.json"], data["build.json"]
    require(peak, ["fp32_fma_gflops_core", "fp32_fma_gflops_all", "fp64_fma_gflops_core", "fp64_fma_gflops_all",
                   "sgemm_gflops_1024", "sgemm_gflops_2048", "dgemm_gflops_1024", "dgemm_gflops_2048",
                   "triad_gbs_core", "triad_gbs_all"], "peak.json")
    require(bench, ["benchmarks", "context"], "bench.json")
    require(bench["context"], ["backend_traits"], "bench.json context")
    if sweep is None:  # a single run has every input
        for name in SWEEP_INPUTS:
            if name not in data:
                load(data_dir, name)  # the missing file's one-line error
    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    texts, readings = {}, []
    for r in REPORTS:
        texts[r.name], more = r.text(data, folder)
        readings += more
    index_text = index_report(peak, build, bench, command, stamp, readings, previous, sweep)
    for name, text in list(texts.items()) + [("index", index_text)]:
        with open(os.path.join(folder, name + ".md"), "w") as f:
            f.write(text)
    pages = [("index", "run", index_text)] + [(r.name, r.name, texts[r.name]) for r in REPORTS]
    extra = {n: load(data_dir, n) for n in PAGE_INPUTS if os.path.exists(os.path.join(data_dir, n))}
    html_page.render(folder, stamp, command, pages, bench, peak, extra.get("heatmaps.json"), extra.get("explorer.json"))
    for name in list(extra) + [n for n in INPUTS + SWEEP_INPUTS + OPTIONAL_INPUTS if n in data]:
        shutil.copy(os.path.join(data_dir, name), os.path.join(folder, "data", name))
    return readings


def publish_run(fill, out_root, stamp):
    """out_root/runs/<stamp>/ through a temporary folder `fill(tmp)` fills (renamed when complete: an interrupted
    or failed report leaves nothing), then out_root/latest pointing at it. Returns the folder."""
    runs_dir = os.path.join(out_root, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    final = os.path.join(runs_dir, stamp)
    if os.path.exists(final):
        raise ReportError(f"{final} exists already; nothing was overwritten")
    tmp = os.path.join(runs_dir, f".incomplete-{stamp}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        fill(tmp)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    latest = os.path.join(out_root, "latest")
    link_tmp = latest + ".tmp"
    if os.path.lexists(link_tmp):
        os.remove(link_tmp)
    os.symlink(os.path.join("runs", stamp), link_tmp)
    os.replace(link_tmp, latest)
    return final


def make_report(data_dir, out_root, command, stamp=None, previous=None, sweep=None):
    stamp = stamp or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    readings = []
    final = publish_run(lambda tmp: readings.extend(render_run(data_dir, tmp, command, stamp, previous, sweep)),
                        out_root, stamp)
    return final, readings


def make_machines_report(machines, out_root, command, stamp, sweep, cross_lines):
    """A sweep whose shards ran on several kinds of machine: a whole report per machine type under
    machines/<fingerprint>/ (against its own measured peak), and an index with the sweep, the machine types and
    the cross-machine table (`cross_lines`, fractions of each machine's own peak). `machines`: (fingerprint,
    data folder, shard records)."""
    readings = []

    def fill(tmp):
        lines = [f"# attention-lab sweep {stamp}", "", f"Command: `{command}`", "", "## Sweep", ""] + sweep + [
            "", "## Machine types", "",
            f"The shards ran on {len(machines)} kinds of machine (scripts/runs.py's fingerprint: CPU, flags, vector "
            "kernels, OpenBLAS core, compiler, libraries). Each has its own section, a whole report against the peak "
            "measured on it; a benchmark ran on one kind only, so no section has every benchmark.", ""]
        for fp, data_dir, recs in machines:
            folder = os.path.join(tmp, "machines", fp)
            more = render_run(data_dir, folder, command, f"{stamp} / machine {fp}", sweep=[
                f"One machine type of sweep {stamp}: shards {', '.join(str(r['shard']) for r in recs)} "
                "([the sweep](../../index.md))."])
            readings.extend(f"{fp}: {r}" for r in more)
            peak = load(data_dir, "peak.json")
            lines.append(f"- [{fp}](machines/{fp}/index.md): {runs.describe(recs[0]['machine'])}; shards "
                         f"{', '.join(str(r['shard']) for r in recs)}; measured fp32 FMA peak "
                         f"{peak['fp32_fma_gflops_core']:.1f} GFLOP/s one thread, {peak['fp32_fma_gflops_all']:.1f} all")
        lines += ["", "## Across machines", "",
                  "Each benchmark's median rate over the peak measured on the machine it ran on (fp32 FMA; fp64 FMA "
                  "for fp64; one thread's or all threads' by the benchmark's thread count).", ""] + cross_lines
        text = "\n".join(lines) + "\n"
        with open(os.path.join(tmp, "index.md"), "w") as f:
            f.write(text)
        html_page.standalone(tmp, "index.html", f"attention-lab sweep {stamp}", text)

    return publish_run(fill, out_root, stamp), readings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="folder with peak/bench/accuracy/entropy/claims/build .json")
    ap.add_argument("--out-root", default="reports", help="reports folder (default: reports)")
    ap.add_argument("--command", default="scripts/run", help="the command that produced the data")
    ap.add_argument("--stamp", help="run folder name (default: the date and time)")
    ap.add_argument("--previous", metavar="STAMP", help="the run scripts/run compares this one with (compare-previous/)")
    args = ap.parse_args(argv)
    try:
        final, readings = make_report(args.data, args.out_root, args.command, args.stamp, args.previous)
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    print(f"report written to {final}")
    for r in readings:
        print(f"  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
