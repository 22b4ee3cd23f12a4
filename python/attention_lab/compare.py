#!/usr/bin/python3
"""attn-lab compare: is B faster than A? Two runs compared benchmark by benchmark.

    attn-lab compare A B [--out DIR] [--force] [--level 0.95] [--fail-on-regression PCT] [--across-machines]

A and B are run folders (reports/runs/<stamp>/) or Google Benchmark JSON
files. For every benchmark in both: the ratio of B's median time to A's
(> 1: B is slower) with a 95% percentile-bootstrap interval, the two-sided
Mann-Whitney U test over the repetitions (as Google Benchmark's compare.py
runs it), and a verdict (faster, slower, no significant difference) at the
level after Holm's correction for testing every common benchmark at once.
A benchmark with one sample on either side (a run without repetitions) has
no test: it is listed as such, never as "no difference". From run folders
also: accuracy points whose error left its tight tolerance or grew by more
than 2x, and the claims whose verdict changed.

Runs from different machines (fingerprint: CPU model and flags, vector
kernels, OpenBLAS core, compiler and flags; python/attention_lab/runs.py) are refused
unless --across-machines, which compares each time multiplied by its own
machine's measured fp32 FMA peak (the fraction of peak, inverted), and says
so in the header.

Writes DIR/compare.md, compare.json, compare.svg and compare.html through a
temporary folder renamed when complete (default DIR: compare-<A>-vs-<B>);
an existing DIR is kept unless --force. Exit status: 0, or 1 when
--fail-on-regression PCT is given and a significant slowdown larger than
PCT percent exists, 2 for bad input (one line on stderr).

examples:
  attn-lab compare reports/runs/20261201-071503 reports/latest --across-machines --out across
  attn-lab compare --help
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend)

from attention_lab import io, runs, stats  # noqa: E402
from attention_lab.reports import html_page  # noqa: E402

ACCURACY_KEYS = ("backend", "precision", "accumulate", "n", "d", "mask", "logit_scale", "gradient")


class CompareError(Exception):
    pass


def cost(run, name, across):
    """The samples compared: seconds per call, times the machine's own peak when comparing across machines."""
    s = run.samples[name]
    if not across:
        return s
    peak = run.peak_gflops(run.fields[name]["threads"])
    if peak is None:
        raise CompareError(f"{run.path}: --across-machines needs its measured peak (data/peak.json)")
    return [x * peak for x in s]


def compare_benchmarks(a, b, level, across):
    common = [n for n in a.samples if n in b.samples]
    if not common:
        raise CompareError(f"no benchmark is in both runs ({len(a.samples)} in A, {len(b.samples)} in B)")
    rows = []
    for name in common:
        ca, cb = cost(a, name, across), cost(b, name, across)
        ratio, ci = stats.ratio_ci(cb, ca, level=level)
        rows.append({"benchmark": name, "repetitions_a": len(ca), "repetitions_b": len(cb),
                     "median_a": stats.median(ca), "median_b": stats.median(cb), "ratio": ratio,
                     "interval": ci, "p": stats.mann_whitney(ca, cb)})
    adjusted = stats.holm([r["p"] for r in rows])
    tested = sum(not math.isnan(p) for p in adjusted)
    for r, p in zip(rows, adjusted):
        r["p_holm"] = p
        if math.isnan(p):
            r["verdict"] = "no test (one sample)"
        elif p < 1 - level:
            r["verdict"] = "slower" if r["ratio"] > 1 else "faster"
        elif stats.smallest_p(r["repetitions_a"], r["repetitions_b"]) * tested >= 1 - level:
            r["verdict"] = "undecidable (too few repetitions)"
        else:
            r["verdict"] = "no significant difference"
    rows.sort(key=lambda r: r["ratio"])
    return rows, tested


def accuracy_deltas(a, b):
    if not (a.accuracy and b.accuracy):
        return None
    flagged = []
    for kind in ("points", "gradient_points"):
        old = {tuple(p.get(k) for k in ACCURACY_KEYS): p for p in a.accuracy.get(kind, [])}
        for p in b.accuracy.get(kind, []):
            q = old.get(tuple(p.get(k) for k in ACCURACY_KEYS))
            if q is None:
                continue
            why = []
            if q.get("within_tight") and not p.get("within_tight"):
                why.append("left its tight tolerance")
            if q.get("within", True) and not p.get("within", True):
                why.append("left its worst-case bound")
            if q["max_abs"] > 0 and p["max_abs"] > 2 * q["max_abs"]:
                why.append(f"grew {p['max_abs'] / q['max_abs']:.3g}x")
            if why:
                flagged.append({"point": {k: p.get(k) for k in ACCURACY_KEYS if p.get(k) is not None},
                                "max_abs_a": q["max_abs"], "max_abs_b": p["max_abs"], "why": "; ".join(why)})
    return flagged


def claim_changes(a, b):
    if not (a.claims and b.claims):
        return None
    old = {c["id"]: c["verdict"] for c in a.claims.get("claims", [])}
    return [{"id": c["id"], "a": old[c["id"]], "b": c["verdict"]} for c in b.claims.get("claims", [])
            if c["id"] in old and old[c["id"]] != c["verdict"]]


def figure(rows, folder, across):
    shown = [r for r in rows if r["interval"]]
    h = max(3.0, 0.16 * len(shown) + 1.2)
    fig, ax = plt.subplots(figsize=(8.5, h))
    colour = {"faster": "tab:green", "slower": "tab:red"}
    for i, r in enumerate(shown):
        lo, hi = r["interval"]
        ax.plot([lo, hi], [i, i], color=colour.get(r["verdict"], "grey"), lw=1.5)
        ax.plot([r["ratio"]], [i], "o", ms=3, color=colour.get(r["verdict"], "black"))
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([r["benchmark"] for r in shown], fontsize=5)
    ax.set_xscale("log")
    ax.set_xlabel(("B / A of time x own fp32 peak" if across else "B / A median time")
                  + " with its 95% interval (green: B faster, red: B slower, grey: no significant difference)",
                  fontsize=7)
    ax.set_ylim(-1, len(shown))
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "compare.svg"), format="svg")
    plt.close(fig)


def render(a, b, rows, tested, acc, claims, level, across, fail_pct):
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    lines = [f"# Comparison: B = `{b.stamp}` against A = `{a.stamp}`", ""]
    if across:
        lines += ["**Across machines** (`--across-machines`): A ran on " + runs.describe(a.machine) + ", B on "
                  + runs.describe(b.machine) + ". Each time is multiplied by its own machine's measured fp32 FMA peak "
                  "(attn-lab peak of that run, the thread count's), so a ratio compares fractions of peak, not "
                  "raw speed.", ""]
    else:
        lines += [f"Machine (both runs, fingerprint `{a.fingerprint}`): {runs.describe(a.machine)}.", ""]
    peaks = lambda r: (f"{r.measured_peaks['fp32_fma_gflops_core']:.1f} GFLOP/s" if r.measured_peaks.get(  # noqa: E731
        "fp32_fma_gflops_core") else "not recorded")
    lines += [f"Measured one-thread fp32 FMA peak (attn-lab peak of each run): A {peaks(a)}, B {peaks(b)}.", ""]
    lines += [f"A: `{a.path}` (commit {a.commit}, profile {a.profile}); B: `{b.path}` (commit {b.commit}, profile "
              f"{b.profile}).", "",
              f"{len(rows)} benchmarks in both runs; {tested} with at least two repetitions on each side were tested. "
              f"Ratio: B's median over A's (> 1: B slower), interval: {100 * level:.0f}% percentile bootstrap "
              f"({stats.BOOTSTRAP} resamples, seed {stats.SEED}); test: two-sided Mann-Whitney U over the "
              f"repetitions, p-values corrected for {tested} tests at once by Holm's method; significant below "
              f"{1 - level:.2g}.", "",
              "Verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + ".", ""]
    regressions = [r for r in rows if r["verdict"] == "slower" and fail_pct is not None
                   and r["ratio"] > 1 + fail_pct / 100]
    if fail_pct is not None:
        lines += [f"Gate `--fail-on-regression {fail_pct:g}`: " + (
            f"**{len(regressions)} significant slowdown(s) larger than {fail_pct:g}%**" if regressions else
            f"no significant slowdown larger than {fail_pct:g}%") + ".", ""]
    lines += ["![ratio per benchmark](compare.svg)", "",
              "| benchmark | reps A, B | median A | median B | B / A | interval | p (Holm) | verdict |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    unit = "" if across else " s"
    for r in rows:
        p = "-" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.2g}"
        lines.append(f"| {r['benchmark']} | {r['repetitions_a']}, {r['repetitions_b']} | {r['median_a']:.4g}{unit} | "
                     f"{r['median_b']:.4g}{unit} | {r['ratio']:.3f} | {stats.fmt_interval(r['interval'], '{:.3f}')} | "
                     f"{p} | {r['verdict']} |")
    lines += ["", "## Accuracy", ""]
    if acc is None:
        lines.append("Not compared: one of the runs has no data/accuracy.json.")
    elif not acc:
        lines.append("No accuracy point left its tolerance or its bound, and none grew by more than 2x (errors are "
                     "deterministic: no interval).")
    else:
        lines += ["| point | error A | error B | flagged |", "|---|---:|---:|---|"]
        lines += [f"| {', '.join(f'{k}={v}' for k, v in f['point'].items())} | {f['max_abs_a']:.3g} | "
                  f"{f['max_abs_b']:.3g} | {f['why']} |" for f in acc]
    lines += ["", "## Claims", ""]
    if claims is None:
        lines.append("Not compared: one of the runs has no data/claims.json.")
    elif not claims:
        lines.append("No claim changed its verdict.")
    else:
        lines += ["| claim | A | B |", "|---|---|---|"] + [f"| {c['id']} | {c['a']} | {c['b']} |" for c in claims]
    return "\n".join(lines) + "\n", regressions


def compare_runs(path_a, path_b, level=stats.LEVEL, across=False, fail_pct=None):
    """Run B against run A: (a, b, the result compare.json holds, the Markdown, the regressions beyond fail_pct
    percent); what `attn-lab compare` writes and attention_lab.compare_runs returns. CompareError or
    runs.RunError for runs that cannot be compared."""
    if os.path.realpath(path_a) == os.path.realpath(path_b):
        raise CompareError(f"A and B are the same run ({path_a}): compare a run with another one")
    a, b = runs.Run(path_a), runs.Run(path_b)
    if a.fingerprint != b.fingerprint and not across:
        diff = [k for k in a.machine if a.machine[k] != b.machine.get(k)]
        raise CompareError(f"the runs are from different machines or builds (fingerprints {a.fingerprint} and "
                           f"{b.fingerprint}; differ in {', '.join(diff)}): raw times do not compare; "
                           "--across-machines compares fractions of each machine's measured peak")
    rows, tested = compare_benchmarks(a, b, level, across)
    acc, claims = accuracy_deltas(a, b), claim_changes(a, b)
    md, regressions = render(a, b, rows, tested, acc, claims, level, across, fail_pct)
    result = {"kind": "compare", "a": a.path, "b": b.path, "fingerprint_a": a.fingerprint,
              "fingerprint_b": b.fingerprint, "across_machines": across, "level": level,
              "test": "Mann-Whitney U, two-sided", "correction": "Holm", "interval": "percentile bootstrap",
              "benchmarks": rows, "accuracy_flagged": acc, "claims_changed": claims,
              "regressions": [r["benchmark"] for r in regressions]}
    return a, b, result, md, regressions


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attn-lab compare", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("a", help="the baseline: a run folder or a Google Benchmark JSON file")
    ap.add_argument("b", help="the candidate: a run folder or a Google Benchmark JSON file")
    ap.add_argument("--out", help="the folder to write (default compare-<A>-vs-<B>)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out folder")
    ap.add_argument("--level", type=float, default=stats.LEVEL, help="confidence level (default 0.95)")
    ap.add_argument("--fail-on-regression", type=float, metavar="PCT",
                    help="exit 1 when a significant slowdown larger than PCT percent exists")
    ap.add_argument("--across-machines", action="store_true",
                    help="compare runs of different machines by fractions of each one's measured peak")
    args = ap.parse_args(argv)
    try:
        if not 0.5 < args.level < 1:
            raise CompareError(f"--level {args.level}: must be between 0.5 and 1")
        if args.fail_on_regression is not None and not args.fail_on_regression >= 0:
            raise CompareError(f"--fail-on-regression {args.fail_on_regression}: must be a percentage >= 0")
        a, b, result, md, regressions = compare_runs(args.a, args.b, args.level, args.across_machines,
                                                     args.fail_on_regression)
        rows = result["benchmarks"]
        out = args.out or f"compare-{a.stamp}-vs-{b.stamp}".replace(".json", "")
        if os.path.exists(out) and not args.force:
            raise CompareError(f"{out} exists; --force replaces it")
        def fill(folder):
            for name, text in (("compare.md", md), ("compare.json", json.dumps(result, indent=1))):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            figure(rows, folder, args.across_machines)
            html_page.standalone(folder, "compare.html", f"attention-lab comparison {b.stamp} against {a.stamp}", md)
        io.publish_folder(fill, out)
    except (CompareError, runs.RunError) as e:
        print(f"attn-lab compare: {e}", file=sys.stderr)
        return 2
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print(f"{len(rows)} benchmarks: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + f"; {out}/compare.md")
    if regressions:
        print(f"{len(regressions)} significant slowdown(s) larger than {args.fail_on_regression:g}%: "
              + ", ".join(r["benchmark"] for r in regressions[-5:]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
