"""What every report shares: its inputs, its one error type, the loader, figures, rates and their intervals against the targets."""

import json
import math
import os

import matplotlib.pyplot as plt

from attention_lab import ROOT, bench_json, io
from attention_lab import stats

INPUTS = ["peak.json", "bench.json", "build.json"]

# Inputs a sweep's merge may lack when the shard that ran them did not complete: each report needing one says
# so in its place (the index names the shard).
SWEEP_INPUTS = ["accuracy.json", "entropy.json", "claims.json"]

# Optional inputs of index.html (python3 -m attention_lab.reports collect writes them).
PAGE_INPUTS = ["heatmaps.json", "explorer.json"]

# Optional inputs of the reports: attn-lab verify's verdicts (a list), when scripts/run verified plugins; attn-lab
# invariance's matrix (runs before it existed have none).
OPTIONAL_INPUTS = ["verdicts.json", "invariance.json"]


def target_bounds():
    """The performance targets' bounds and rationales (bench/targets.json: one entry per target)."""
    return io.load_json(os.path.join(ROOT, "bench", "targets.json"), ReportError, "bench/targets.json")["targets"]


class ReportError(Exception):
    """An input the report cannot be made from: one line, naming the file."""


def load(data_dir, name):
    return io.load_json(os.path.join(data_dir, name), ReportError, name)


def require(obj, keys, where):
    for k in keys:
        if k not in obj:
            raise ReportError(f"{where}: missing field '{k}'")


def heap_reading(measured, model):
    """A measured peak heap, or None where it is below the workspace model: a cold call reserves its whole
    workspace (attn/core/workspace.hpp), so a lower reading is the heap counter's error, not the backend's
    memory (the 0 B of naive and math at n = 4096 in runs with the Python peers before 2026-12-05: the
    counter wrapped below zero, alloc_counter.hpp)."""
    return measured if measured is not None and model is not None and measured >= model else None


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


def bench_rows(bench):
    """attention_lab.bench_json's rows of bench.json, its errors as ReportError."""
    return bench_json.rows(bench, "bench.json", ReportError)


def rate_estimate(r, per_call=None):
    """A row's GFLOP/s from its median sample (or giga-units per second of `per_call`, e.g. bytes read per
    call), with the interval its repetitions give (stats.median_ci; None with fewer than six):
    {"value", "interval"}, or None without the row."""
    if not r:
        return None
    ci = stats.median_ci(r["samples"])
    amount = r["flop_per_call"] if per_call is None else per_call
    g = lambda s: amount / s / 1e9  # noqa: E731
    return {"value": g(stats.median(r["samples"])), "interval": ci and (g(ci[1]), g(ci[0]))}


def time_ratio(num, den):
    """median time of num over den's, with its bootstrap interval (stats.ratio_ci); None without both rows.
    The rate of A over B is time_ratio(B, A)."""
    if not (num and den):
        return None
    v, ci = stats.ratio_ci(num["samples"], den["samples"])
    return {"value": v, "interval": ci}


def point_key(r):
    """A row's point as the targets key it: (backend, precision, causal, threads, d)."""
    return (r["backend"], r["precision"], r["causal"], r["threads"], r["d"])


def alternated_rows(rows):
    """{(pass, subject, partner): row} of every benchmark timed with its partner's call before each sample
    (attn_versus, attn_paired, attn_bwd_paired), subject and partner keyed as point_key; not attn_bwd_paired's
    one-head point (B = H = 1), whose point_key is that of the H = 8 point beside it (its target reads it
    alone: one_head_rows), nor a decode step beside the read probe (H = 32, n_kv = 131072: read_fraction reads
    it from its row, and the variants report lists it with its shape)."""
    return {(r["pass"], point_key(r), (r["partner"]["backend"], r["partner"]["precision"], r["partner"]["causal"],
                                         r["partner"]["threads"], r["d"])): r
            for r in rows if r.get("partner") and r.get("partner_samples") and r["variant"] != "one-head"
            and r["partner"]["backend"] != READ_PARTNER}


def one_head_rows(rows):
    """attn_bwd_paired's one-head points (B = H = 1, 2 threads, each sample after a call on 1 thread)."""
    return [r for r in rows if r["family"] == "attn_bwd_paired" and r["variant"] == "one-head"
            and r.get("partner_samples")]


def rate_over(pairs, pass_, a, b, points):
    """The rate of point a over point b (point_key) for a pass: from the calls that alternated where the run
    timed one of the two as the other's partner (stats.paired_ratio_ci over the pairs), else from the two rows
    of `points` (timed minutes apart: time_ratio). (estimate or None, whether the calls alternated)."""
    if (pass_, a, b) in pairs:  # a's samples, b's calls before them
        r = pairs[(pass_, a, b)]
        v, ci = stats.paired_ratio_ci(r["partner_samples"], r["samples"])
        return {"value": v, "interval": ci}, True
    if (pass_, b, a) in pairs:
        r = pairs[(pass_, b, a)]
        v, ci = stats.paired_ratio_ci(r["samples"], r["partner_samples"])
        return {"value": v, "interval": ci}, True
    return time_ratio(points.get(b), points.get(a)), False


PEAK_PARTNER = "fp32-fma-peak"  # attn-bench's partner that is `attn-lab peak`'s FMA probe (Point::Partner::peak)


def peak_fraction(pairs, pass_, key, row, peak):
    """A one-thread fp32 point's fraction of the fp32 FMA peak: the median over its pairs of its rate over the
    probe's, the probe timed just before each sample (attn_paired / attn_bwd_paired with PEAK_PARTNER, whose
    partner samples are the probe's time for the point's FLOPs), else its rate (`row`) over `peak`, the run's
    reading of the probe at another time. (estimate or None, whether the two alternated)."""
    probe = (PEAK_PARTNER, "fp32", 0, 1, key[4])
    if (pass_, key, probe) in pairs:
        return rate_over(pairs, pass_, key, probe, {})
    return scaled(rate_estimate(row), peak), False


READ_PARTNER = "read-probe"  # attn-bench's partner that is `attn-lab peak`'s read probe (Point::Partner::read)


def read_fraction(row, bw):
    """A decode step's K/V bytes per second as a fraction of the read bandwidth: the median over its pairs of
    the probe's time for K and V's bytes over the step's, the probe timed just before each sample on the step's
    threads (attn_decode at the longest KV cache, READ_PARTNER), else its rate over `bw`, the run's reading of
    the probe at another time. (estimate or None, whether the two alternated)."""
    if row and (row.get("partner") or {}).get("backend") == READ_PARTNER and row.get("partner_samples"):
        v, ci = stats.paired_ratio_ci(row["partner_samples"], row["samples"])
        return {"value": v, "interval": ci}, True
    kv = row and row.get("kv_bytes/s") and rate_estimate(row, row["kv_bytes/s"] * row["seconds_per_call"])
    return scaled(kv, bw), False


FULL_TILES_N = 1024  # every variant's default tiles (attn/simd/variant_*.cpp: B_q, B_k <= 512) are full from here


def memory_growth(target, what, pts, bound):
    """The target memory_independent_of_n over a memory series [(n, peak extra heap)]: the extra heap at the
    largest n over the extra heap at the smallest n >= FULL_TILES_N (below, the tiles and so the workspace shrink
    with n). The two ends, so that growth with n is what is judged; a scheduling choice at an n between them
    (split-KV's partials, bounded in n) is in the series' table, not here. Fewer than two such n: not measured
    (one point cannot show growth)."""
    full = sorted((n, m) for n, m in pts if n >= FULL_TILES_N)
    ok = lambda v: v <= bound  # noqa: E731
    if len(full) < 2 or not full[0][1]:
        return target(f"{what}, peak extra heap: at the largest n over the smallest n >= {FULL_TILES_N}", None,
                      f"independent of n (<= {bound:.2f}x)", lambda v: f"{v:.4f}x", ok)
    (n0, m0), (n1, m1) = full[0], full[-1]
    target(f"{what}, peak extra heap: n = {n1} over n = {n0} (full tiles)", m1 / m0, f"independent of n (<= {bound:.2f}x)",
           lambda v: f"{v:.4f}x", ok)


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
