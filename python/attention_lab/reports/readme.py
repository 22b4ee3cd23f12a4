#!/usr/bin/python3
"""The measured figures of the README and the guides (docs/*.md), rendered
from the committed run (reports/latest) and the committed mutation report
(reports/mutation), so that no figure in the docs is typed by hand.

Each generated block sits between `<!-- figures:NAME -->` and
`<!-- /figures:NAME -->` in README.md (the summary, the one block there) or
in a guide under docs/; NAME is one of BLOCKS below (one entry per block: its
name and the function that renders it), and each appears exactly once.

  python3 -m attention_lab.reports.readme --write    rewrite the blocks (atomically, each file)
  python3 -m attention_lab.reports.readme --check    exit 1, naming each block that differs (meson test readme_figures)
"""
import argparse
import json
import re
import sys
from pathlib import Path

from attention_lab import ROOT as _ROOT, io, race
from attention_lab import runs as run_records  # (tight_ratio, verdict_counts; runs() below is a README block)
from attention_lab.mutation import where_text
from attention_lab.reports import common as report  # (bench_rows, backends_with, fmt_bytes, heap_reading, load)

ROOT = Path(_ROOT)

README = ROOT / "README.md"


def documents():
    """The files that may hold blocks: the README and the guides."""
    return [README] + sorted((ROOT / "docs").glob("*.md"))
MARK = re.compile(r"(<!-- figures:([a-z-]+) -->\n)(.*?)(<!-- /figures:\2 -->)", re.S)


def run_data(run):
    data = run / "data"
    bench = report.load(data, "bench.json")
    return {"run": run, "stamp": run.resolve().name, "peak": report.load(data, "peak.json"), "bench": bench,
            "rows": report.bench_rows(bench), "claims": report.load(data, "claims.json"),
            "accuracy": report.load(data, "accuracy.json"),
            "verdicts": report.load(data, "verdicts.json") if (data / "verdicts.json").is_file() else [],
            "build": report.load(data, "build.json")}


def machine(d):
    p = d["peak"]
    core = p["blas"].split("core ")[-1].split(";")[0] if "core " in p["blas"] else "?"
    return f"{p['cpu']}, {p['cores']} cores, {p['simd']}, OpenBLAS core {core}"


def performance(d):
    rows, peak, bench = d["rows"], d["peak"], d["bench"]
    fused = report.backends_with(bench, own_threads=True, memory_independent_of_n=True)[0]
    blas = report.backends_with(bench, uses_blas=True, own_threads=False, exact=False)
    baseline = report.backends_with(bench, baseline=True)
    fp32 = peak["fp32_fma_gflops_core"]
    h8 = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in rows if r["family"] == "attn_h8"}
    g = lambda k: report.rate_estimate(h8[k])["value"] if k in h8 else None  # noqa: E731

    def cell(v, s="", key=None):
        if v is None:
            return "n/a"
        ci = report.rate_estimate(h8[key])["interval"] if key in h8 else None
        return f"{v:.1f}{s}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")

    counts = sorted({len(r["samples"]) for r in h8.values()})
    lines = [f"Measured in the committed run `reports/runs/{d['stamp']}` ({machine(d)}; `performance.md`); "
             "B = 1, H = 8, n = 4096, fp32, GFLOP/s ("
             + (f"median of {counts[0] if len(counts) == 1 else f'{counts[0]} to {counts[-1]}'} samples, "
                "[its 95% interval]" if counts and counts[0] >= 6 else "one sample of each benchmark: no interval")
             + f") and fraction of the one-thread fp32 FMA peak of {fp32:.1f} GFLOP/s measured in the same run:", "",
             "| backend, 1 thread | d = 64 | d = 128 |", "|---|---:|---:|"]

    def row(label, f):
        lines.append(f"| {label} | {f(64)} | {f(128)} |")

    row(fused, lambda dd: cell(g((fused, "fp32", 0, 1, dd)), key=(fused, "fp32", 0, 1, dd))
        + (f" ({report.of_peak(g((fused, 'fp32', 0, 1, dd)), fp32)})" if g((fused, "fp32", 0, 1, dd)) else ""))
    pairs, marked = report.alternated_rows(rows), []

    def ratio_of(a, b):
        """The rate of point a over point b as the performance targets take it (calls alternated where the run
        has them: marked *), or n/a."""
        e, alt = report.rate_over(pairs, "forward", a, b, h8)
        marked.append(alt)
        return f"{e['value']:.2f}x{'*' if alt else ''}" if e else "n/a"

    row(f"{fused}, 2 threads", lambda dd: (f"{g((fused, 'fp32', 0, 2, dd)):.1f} "
                                            f"({ratio_of((fused, 'fp32', 0, 2, dd), (fused, 'fp32', 0, 1, dd))})"
                                            if g((fused, "fp32", 0, 2, dd)) and g((fused, "fp32", 0, 1, dd)) else "n/a"))

    def causal(dd):
        full, c = h8.get((fused, "fp32", 0, 1, dd)), h8.get((fused, "fp32", 1, 1, dd))
        if not (full and c):
            return "n/a"
        return (f"{c['FLOP/s'] / 1e9:.1f}, {ratio_of((fused, 'fp32', 1, 1, dd), (fused, 'fp32', 0, 1, dd))} faster than "
                "non-causal")

    row(f"{fused}, causal (halved FLOPs)", causal)
    row(f"{fused} bf16 / fp16 (fp32 accumulation)",
        lambda dd: f"{cell(g((fused, 'bf16', 0, 1, dd)))} / {cell(g((fused, 'fp16', 0, 1, dd)))}"
        + "".join(f"; {p} {ratio_of((fused, p, 0, 1, dd), (fused, 'fp32', 0, 1, dd))} fp32's" for p in ("bf16", "fp16")
                  if g((fused, p, 0, 1, dd)) and g((fused, "fp32", 0, 1, dd))))
    for b in blas:
        row(b, lambda dd, b=b: cell(g((b, "fp32", 0, 1, dd)), key=(b, "fp32", 0, 1, dd)))
    attn = {(r["backend"], r["n"], r["d"]): r for r in rows if r["family"] == "attn" and "n" in r
            and r["precision"] == "fp32" and r["causal"] == 0 and r["threads"] == 1}
    torch = report.TORCH_MATH
    if g((torch, "fp32", 0, 1, 64)):
        row(f"PyTorch's math attention ({torch} plugin, preallocated)",
            lambda dd: cell(g((torch, "fp32", 0, 1, dd)), key=(torch, "fp32", 0, 1, dd)))

        def over(dd):
            e = report.time_ratio(h8.get((torch, "fp32", 0, 1, dd)), h8.get((fused, "fp32", 0, 1, dd)))
            if not e:
                return "n/a"
            return f"{e['value']:.2f}x" + (f" [{e['interval'][0]:.2f}, {e['interval'][1]:.2f}]" if e["interval"] else "")
        row(f"{fused} / PyTorch (rate ratio)", over)
    for b in baseline:
        row(f"{b} (B = H = 1)", lambda dd, b=b: cell(attn[(b, 4096, dd)]["FLOP/s"] / 1e9 if (b, 4096, dd) in attn else None))
    att = {dd: peak.get(f"sgemm_attention_gflops_d{dd}") for dd in (64, 128)}
    s64, s128 = g((fused, "fp32", 0, 1, 64)), g((fused, "fp32", 0, 1, 128))
    if any(marked):
        lines += ["", "Ratios marked * are of calls that alternated (`attn_paired/`: each sample after one call of the "
                  "other side), as the performance targets take them; the others are of points timed minutes apart."]
    lines += ["", f"OpenBLAS's two attention GEMMs alone (Q K^T then P V, n = 4096, one thread) run at {att[64]:.1f} "
              f"(d = 64) and {att[128]:.1f} (d = 128) GFLOP/s in that run, and a square SGEMM (n = 2048) at "
              f"{peak['sgemm_gflops_2048']:.1f}: {fused}, softmax included, runs at {100 * s64 / att[64]:.0f}% "
              f"(d = 64) and {100 * s128 / att[128]:.0f}% (d = 128) of the GEMMs' rate."]
    mem = sorted((r["n"], r["peak_extra_heap_bytes"]) for (b, n, dd), r in attn.items()
                 if b == fused and dd == 64
                 and report.heap_reading(r.get("peak_extra_heap_bytes"), r.get("workspace_model_bytes")) is not None)
    if mem:
        lo, hi = min(m for _, m in mem), max(m for _, m in mem)
        span = f"{mem[0][0]} to {mem[-1][0]}"
        lines.append("")
        lines.append(f"The extra heap of {fused} is {report.fmt_bytes(hi)} at every n from {span}." if hi <= 1.05 * lo else
                     f"The extra heap of {fused} ranges from {report.fmt_bytes(lo)} to {report.fmt_bytes(hi)} over n = {span}.")
    return "\n".join(lines)


def peers(d):
    """What the suite found about the peers (every plugin of the committed run: PyTorch's kernels and the runtime
    race's winner): the fused backend's speed over each (n, d, threads), their accuracy per precision, attn-lab
    verify's verdicts."""
    bench, rows = d["bench"], d["rows"]
    plugins = report.backends_with(bench, plugin=True)
    if not plugins:
        return f"The committed run (`reports/runs/{d['stamp']}`) has no plugin rows."
    packages = d["build"].get("python_packages", {})
    versions = ", ".join(f"{label} {packages[k]}" for k, label in (("torch", "PyTorch"), ("openvino", "OpenVINO"),
                                                                   ("onnxruntime", "ONNX Runtime"))
                         if packages.get(k, "not installed") != "not installed") or "PyTorch 1.13"
    fused = report.backends_with(bench, own_threads=True, memory_independent_of_n=True)[0]
    at = {(r["backend"], r["family"], r["n"], r["d"], r["threads"], r["precision"], r["causal"]): r for r in rows
          if r["family"] in ("attn", "attn_h8", "attn_bwd") and "n" in r}
    lines = [f"In the committed run `reports/runs/{d['stamp']}` ({machine(d)}; `plugins.md`): time of "
             f"the peers' kernels ({versions}) over {fused}'s "
             "(median calls, same benchmarks of the same attn-bench process; > 1: ours is faster; [95% bootstrap "
             "interval] where both have six samples or more; n/a: not in the run, n/s: the kernel has no such "
             "pass):", "",
             "| pass | shape | precision | causal | threads | d | " + " | ".join(f"{b} / {fused}" for b in plugins) + " |",
             "|---|---|---|---|---:|---:|" + "---:|" * len(plugins)]
    keys = sorted({k[1:] for k in at if k[0] in plugins and (fused,) + k[1:] in at
                   and k[2] in (1024, 4096) and k[3] in (64, 128)})  # every other point: plugins.md
    has_backward = {b for b in plugins if any(k[0] == b and k[1] == "attn_bwd" for k in at)}
    for key in keys:
        fam, n, dd, t, prec, causal = key
        shape = f"B = H = 1, n = {n}" if fam == "attn" else f"B = 1, H = 8, n = {n}"
        cells = []
        for b in plugins:
            e = report.time_ratio(at.get((b,) + key), at.get((fused,) + key))
            cells.append(("n/s" if fam == "attn_bwd" and b not in has_backward else "n/a") if not e else
                         f"{e['value']:.2f}x" + (f" [{e['interval'][0]:.2f}, {e['interval'][1]:.2f}]"
                                                 if e["interval"] else ""))
        lines.append(f"| {'backward' if fam == 'attn_bwd' else 'forward'} | {shape} | {prec} | "
                     f"{'yes' if causal else 'no'} | {t} | {dd} | " + " | ".join(cells) + " |")
    acc = [q for q in d["accuracy"].get("points", []) if q["backend"] in plugins]
    if acc:
        lines += ["", "Accuracy (`attn-lab accuracy`, against the 50-digit reference): points within the tight "
                  "tolerance, and the largest error over its tight tolerance:", ""]
        groups = {}
        for q in acc:
            groups.setdefault((q["backend"], q["precision"], q["accumulate"]), []).append(q)
        lines += [f"- {b} {p} (accumulate {a}): {run_records.verdict_counts(qs)[0]} of {len(qs)} passed "
                  f"({run_records.verdict_counts(qs)[2]} uninformative), largest error / tight tolerance "
                  f"{max(run_records.tight_ratio(q) for q in qs):.3g}"
                  for (b, p, a), qs in sorted(groups.items())]
    for v in d["verdicts"]:
        lines += ["", f"`attn-lab verify --profile {v['profile']}` (seed {v['seed']}): {v['verdict']}"]
        for k in v["kernels"]:
            cells = k["cells"]
            failed = sorted({f"{c.get('property_name', c['property'])}" for c in cells
                             if c["status"] not in ("pass", "not supported")})
            lines.append(f"- {k['name']}: {sum(c['status'] == 'pass' for c in cells)} cells pass, "
                         f"{sum(c['status'] not in ('pass', 'not supported') for c in cells)} fail"
                         + (f" ({', '.join(failed)})" if failed else "") + ", "
                         f"{sum(c['status'] == 'not supported' for c in cells)} not supported")
    return "\n".join(lines)


def peaks(d):
    p = d["peak"]
    return (f"In the committed run ({machine(d)}): fp32 FMA {p['fp32_fma_gflops_core']:.1f} GFLOP/s one thread, "
            f"{p['fp32_fma_gflops_all']:.1f} all; fp64 {p['fp64_fma_gflops_core']:.1f} / {p['fp64_fma_gflops_all']:.1f}; "
            f"SGEMM {p['sgemm_gflops_1024']:.1f} (n = 1024) and {p['sgemm_gflops_2048']:.1f} (2048); DGEMM "
            f"{p['dgemm_gflops_1024']:.1f} and {p['dgemm_gflops_2048']:.1f}; triad {p['triad_gbs_core']:.1f} GB/s one "
            f"thread, {p['triad_gbs_all']:.1f} all.")


def backward(d):
    """The backward pass at the issue's target shape and its memory series, from attn_bwd and attn_bwd_mem."""
    rows, peak, bench = d["rows"], d["peak"], d["bench"]
    fp32 = peak["fp32_fma_gflops_core"]
    bwd = {(r["backend"], r["precision"], r["causal"], r["threads"], r["n"], r["d"]): r for r in rows
           if r["family"] == "attn_bwd"}
    g = lambda b, c=0, t=1, dd=64, p="fp32": (bwd[(b, p, c, t, 4096, dd)]["FLOP/s"] / 1e9
                                              if (b, p, c, t, 4096, dd) in bwd else None)
    lines = [f"Measured in the committed run `reports/runs/{d['stamp']}` ({machine(d)}; `performance.md`, "
             "`attn_bwd/`): the backward alone, B = 1, H = 8, n = 4096, fp32, GFLOP/s (FLOPs 2.5x the forward's) "
             f"and fraction of the one-thread fp32 FMA peak of {fp32:.1f} GFLOP/s measured in the same run:", "",
             "| backend | d = 64 | d = 128 |", "|---|---:|---:|"]
    backends = sorted({k[0] for k in bwd})
    for b in backends:
        cells = [f"{g(b, dd=dd):.1f} ({report.of_peak(g(b, dd=dd), fp32)})" if g(b, dd=dd) else "n/a" for dd in (64, 128)]
        lines.append(f"| {b}, 1 thread | {cells[0]} | {cells[1]} |")
    fused = report.backends_with(bench, own_threads=True, memory_independent_of_n=True)[0]
    # The ratios as the performance targets take them: of calls that alternated (attn_bwd_paired: marked *) where
    # the run has them, else of the two attn_bwd points.
    pairs = report.alternated_rows(rows)
    at = {(b, p, c, t, dd): r for (b, p, c, t, n, dd), r in bwd.items() if n == 4096}

    marked = []

    def ratio_of(a, b):
        e, alt = report.rate_over(pairs, "backward", a, b, at)
        marked.append(alt)
        return f"{e['value']:.2f}x{'*' if alt else ''}" if e else "n/a"

    if g(fused) and g(fused, t=2):
        lines.append(f"| {fused}, 2 threads | " + " | ".join(
            f"{g(fused, t=2, dd=dd):.1f} ({ratio_of((fused, 'fp32', 0, 2, dd), (fused, 'fp32', 0, 1, dd))})"
            for dd in (64, 128)) + " |")
    if g(fused, c=1):
        lines.append(f"| {fused}, causal (halved FLOPs) | " + " | ".join(
            f"{g(fused, c=1, dd=dd):.1f}, {ratio_of((fused, 'fp32', 1, 1, dd), (fused, 'fp32', 0, 1, dd))} faster "
            "than non-causal" for dd in (64, 128)) + " |")
    if any(marked):
        lines += ["", "Ratios marked * are of calls that alternated (`attn_bwd_paired/`), as the performance targets "
                  "take them."]
    mem = {}
    for r in rows:
        if r["family"] == "attn_bwd_mem" and report.heap_reading(r.get("peak_extra_heap_bytes"),
                                                                  r.get("workspace_model_bytes")) is not None:
            mem.setdefault(r["backend"], []).append((r["n"], r["peak_extra_heap_bytes"]))
    if mem:
        lines += ["", "Peak extra heap of one cold backward call (`attn_bwd_mem/`, B = H = 1, d = 64, fp32): " + "; ".join(
            f"{b} {report.fmt_bytes(min(pts)[1])} at n = {min(pts)[0]} and {report.fmt_bytes(max(pts)[1])} at n = "
            f"{max(pts)[0]}" for b, pts in sorted(mem.items())) + "."]
    return "\n".join(lines)


def backend_times(d):
    attn = {(r["backend"], r["n"]): r for r in d["rows"] if r["family"] == "attn" and "n" in r
            and r["precision"] == "fp32" and r["causal"] == 0 and r["threads"] == 1 and r["d"] == 64}
    backends = [b for b in report.backends_with(d["bench"], exact=False)]
    lines = [f"Measured in the committed run `reports/runs/{d['stamp']}` ({machine(d)}; Google Benchmark, "
             "`attn/B/fp32/causal:0/threads:1/n:N/d:64`, B = H = 1; time per warm call; workspace as the backend "
             "reports it):", "", "| backend | n=1024 | n=4096 | workspace n=1024 | workspace n=4096 |",
             "|---|---:|---:|---:|---:|"]
    ms = lambda r: f"{1e3 * r['seconds_per_call']:.1f} ms" if r else "n/a"
    ws = lambda r: ("n/a" if not r else "its own (plugin)" if r.get("workspace_model_bytes") is None  # noqa: E731
                    else f"{int(r['workspace_model_bytes']):,} B")
    for b in backends:
        a, c = attn.get((b, 1024)), attn.get((b, 4096))
        lines.append(f"| {b} | {ms(a)} | {ms(c)} | {ws(a)} | {ws(c)} |")
    return "\n".join(lines)


def claims(d):
    c = d["claims"]["claims"]
    total = sum(x.get("seconds", 0) for x in c)
    lines = [f"In the committed run `reports/runs/{d['stamp']}` (`attn-lab claims --profile {d['claims']['profile']}`, "
             f"{total:.0f} s):", "", "| id | verdict | measured |", "|---|---|---|"]
    lines += [f"| {x['id']} | {x['verdict']} | {x['why'].replace('|', '/')} |" for x in c]
    lines += [f"| {r['id']} | retired {r['date']} | (not run: its criterion could not fail; see the ledger) |"
              for r in d["claims"].get("retired", [])]
    return "\n".join(lines)


def runs(d):
    """The committed runs, each with its machine and how long it took."""
    lines = []
    for run in sorted((ROOT / "reports/runs").iterdir()):
        if not (run / "data/peak.json").is_file():
            continue
        peak = json.loads((run / "data/peak.json").read_text())
        build = json.loads((run / "data/build.json").read_text()) if (run / "data/build.json").is_file() else {}
        secs = build.get("run_seconds")
        took = f"{secs // 60} min {secs % 60} s before the report" if secs else "duration not recorded"
        latest = " = `reports/latest`" if run.name == d["stamp"] else ""
        lines.append(f"- `reports/runs/{run.name}`{latest}: {peak.get('cpu')}, {peak.get('simd')}; {took}")
    return "\n".join(lines)


def mutation(d):
    path = d["run"] / "data/mutation.json"  # a --profile full run carries its own
    if not path.is_file():
        path = ROOT / "reports/mutation/mutation.json"
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"readme_figures: {path.relative_to(ROOT)}: {e} (scripts/mutate --out reports/mutation makes it)")
    s = m["summary"]
    pct = lambda a, b: f"{100 * a / b:.0f}%"
    # survivors: neither killed nor equivalent, nor left unrun (a variant this CPU cannot execute: counted apart)
    surv = [r["id"] for r in m["mutants"]
            if not r["equivalent"] and r["status"] not in ("killed", "timeout", "not run")]
    not_run = s.get("not_run", 0)
    # where it ran (scripts/mutate records it since b429b20; reports from before do not carry it)
    at = f", on {where_text(s['where'])}" if s.get("where") else ""
    return (f"The committed mutation report (`{path.parent.relative_to(ROOT)}/mutation.md`, {round(s['seconds'] / 60)} min"
            f"{at}): "
            f"{s['mutants']} mutants, {s['equivalent']} equivalent"
            + (f", {not_run} not run (their kernel variant does not execute on the CPU of the run)" if not_run else "")
            + f"; **{s['killed']} of {s['non_equivalent']}** "
            f"non-equivalent mutants killed ({pct(s['killed'], s['non_equivalent'])}), "
            f"{s['killed_by_default_check']} ({pct(s['killed_by_default_check'], s['non_equivalent'])}) by "
            f"`attn-lab attend --random 1,1,1024,1024,64,64 --backend B --check` alone and "
            f"{s['killed_by_default_check'] + s['killed_by_check_matrix']} "
            f"({pct(s['killed_by_default_check'] + s['killed_by_check_matrix'], s['non_equivalent'])}) by `--check` "
            f"on its problem matrix" + (f"; survivors: {', '.join(surv)}." if surv else "; no survivor."))


def variants(d):
    """Each variant's cost over plain attention and GQA's over MHA (attn_var, the fused backend at its largest n),
    and the decode step's K/V bandwidth against the run's read peak (attn_decode, its longest cache)."""
    rows, peak, bench = d["rows"], d["peak"], d["bench"]
    fused = report.backends_with(bench, own_threads=True, memory_independent_of_n=True)[0]
    var = [r for r in rows if r["family"] == "attn_var" and r["backend"] == fused]
    dec = [r for r in rows if r["family"] == "attn_decode" and r["backend"] == fused]
    if not var or not dec:
        raise SystemExit("readme_figures: the committed run has no attn_var or attn_decode rows of " + fused)
    n = max(r["n"] for r in var)
    med = lambda r: report.median_seconds(r)
    lines = []
    for prec in ("fp32", "bf16"):
        at = {r["variant"]: r for r in var if r["precision"] == prec and r["n"] == n and r["d"] == max(
            x["d"] for x in var if x["n"] == n)}
        if "plain" not in at:
            continue
        parts = [f"{v} {med(at[v]) / med(at['plain']):.2f}x" for v in ("softcap", "sinks", "alibi", "documents") if v in at]
        if "gqa" in at and "mha" in at:
            parts.append(f"GQA (H_kv = 8) {med(at['gqa']) / med(at['mha']):.2f}x MHA's time at H = 32")
        lines.append(f"- {fused} {prec}, causal, n = {n}, d = {at['plain']['d']}, H = 8, 1 thread: median time over "
                     f"plain attention's ({1e3 * med(at['plain']):.1f} ms): " + ", ".join(parts) + ".")
    n_kv = max(r["n_kv"] for r in dec)
    for r in sorted((r for r in dec if r["n_kv"] == n_kv), key=lambda r: (r["precision"], r["threads"])):
        bw = peak.get("read_gbs_core" if r["threads"] == 1 else "read_gbs_all")
        gbs = r["kv_bytes/s"] * r["seconds_per_call"] / med(r) / 1e9
        frac, beside = report.read_fraction(r, bw)
        of = ("" if not frac else f" = {100 * frac['value']:.0f}% of the read bandwidth measured before each sample "
              "(median of the pairs)" if beside else f" = {100 * frac['value']:.0f}% of the measured read bandwidth "
              f"({bw:.1f} GB/s)")
        lines.append(f"- decode step, {fused} {r['precision']}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}, "
                     f"n_kv = {n_kv}, H = 32, H_kv = 8, d = 128: {1e3 * med(r):.1f} ms median "
                     f"({1e3 * r['seconds_p10']:.1f} to {1e3 * r['seconds_p90']:.1f}), K/V {gbs:.1f} GB/s{of}.")
    return f"In the committed run ({machine(d)}):\n\n" + "\n".join(lines)


def summary(d):
    """The README's one block: the committed run in five lines (the guides and the run's own index have the rest)."""
    rows, peak, bench = d["rows"], d["peak"], d["bench"]
    fused = report.backends_with(bench, own_threads=True, memory_independent_of_n=True)[0]
    fp32 = peak["fp32_fma_gflops_core"]
    h8 = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in rows if r["family"] == "attn_h8"}
    speed = []
    for dd in (64, 128):
        e = report.rate_estimate(h8.get((fused, "fp32", 0, 1, dd)))
        if e:
            speed.append(f"d = {dd}: {e['value']:.1f} GFLOP/s = {report.of_peak(e['value'], fp32)}")
    fwd = run_records.verdict_counts(d["accuracy"]["points"])
    grad = run_records.verdict_counts(d["accuracy"].get("gradient_points", []))
    verdicts = {}
    for c in d["claims"]["claims"]:
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    return "\n".join([
        f"- run `reports/runs/{d['stamp']}` ({machine(d)}), profile {bench['context'].get('attn_profile', '?')};",
        f"- {fused} (the fused backend), fp32, B = 1, H = 8, n = 4096, one thread: " + "; ".join(speed)
        + f" of the one-thread fp32 FMA peak ({fp32:.1f} GFLOP/s) measured in the same run;",
        f"- accuracy against the ground truth: {fwd[0]} forward points passed, {fwd[1]} failed, {fwd[2]} "
        f"uninformative; gradients {grad[0]} passed, {grad[1]} failed, {grad[2]} uninformative;",
        "- claims of the ledger: " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) + ";",
        "- mutation testing of the real kernels: " + mutation(d)])


def runtime_race(d):
    """The committed runtime race (bench/runtime_race.json, scripts/run --race): not the run's data, the race's."""
    result = race.load()
    if result is None:
        raise SystemExit("readme_figures: no bench/runtime_race.json (scripts/run --race makes it)")
    return race.markdown(result)


def invariance(d):
    path = d["run"] / "data/invariance.json"
    if not path.is_file():
        raise SystemExit(f"readme_figures: {path.relative_to(ROOT)}: absent (scripts/run runs attn-lab invariance)")
    inv = json.loads(path.read_text())
    from attention_lab.reports.invariance import holds_everywhere  # (the report's own rule)
    cells, names = inv["cells"], {i["id"]: i["name"] for i in inv["invariances"]}
    lines = [f"From the committed run `reports/runs/{d['stamp']}` (`invariance.md`; {inv.get('simd', '?')}, "
             f"{inv.get('cores', '?')} hardware threads, profile {inv.get('profile', '?')}): bit for bit in every "
             "storage, accumulation and pass it ran, and not:", ""]
    for b in dict.fromkeys(c["backend"] for c in cells):
        ran = [i for i in names if any(c["backend"] == b and c["invariance"] == i and c["verdict"] != "not applicable"
                                       for c in cells)]
        held = [names[i] for i in ran if holds_everywhere(cells, b, i)]
        lost = [names[i] for i in ran if not holds_everywhere(cells, b, i)]
        beyond = sum(c["backend"] == b and c["verdict"] == "BEYOND" for c in cells)
        lines.append(f"- {b}: bitwise: {', '.join(held) or 'none'}" + (f"; within the bounds only: {', '.join(lost)}"
                                                                        if lost else "")
                     + (f"; **{beyond} BEYOND the bounds**" if beyond else ""))
    return "\n".join(lines)


BLOCKS = {"summary": summary, "invariance": invariance, "runs": runs, "variants": variants, "performance": performance, "peaks": peaks, "backend-times": backend_times, "claims": claims,
          "mutation": mutation, "backward": backward, "peers": peers, "runtime-race": runtime_race}


def render(text, d, seen=None, where="README.md"):
    """text with every block re-rendered; raises on an unknown block or one seen before (`seen`: the names
    rendered so far, across files)."""
    seen = set() if seen is None else seen

    def one(m):
        name = m.group(2)
        if name not in BLOCKS:
            raise SystemExit(f"readme_figures: {where} has an unknown block '{name}'")
        if name in seen:
            raise SystemExit(f"readme_figures: {where} repeats the block '{name}' (each appears once)")
        seen.add(name)
        return m.group(1) + BLOCKS[name](d) + "\n" + m.group(4)

    return MARK.sub(one, text)


def render_all(d):
    """{path: (old text, new text)} of every document with blocks; raises when a block appears nowhere."""
    seen, out = set(), {}
    for path in documents():
        text = path.read_text()
        if MARK.search(text):
            out[path] = (text, render(text, d, seen, str(path.relative_to(ROOT))))
    missing = set(BLOCKS) - seen
    if missing:
        raise SystemExit(f"readme_figures: no document has the block(s) {', '.join(sorted(missing))}")
    return out


def differing(old, new):
    a = {m.group(2): m.group(3) for m in MARK.finditer(old)}
    b = {m.group(2): m.group(3) for m in MARK.finditer(new)}
    return [k for k in b if a.get(k) != b[k]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--run", type=Path, default=ROOT / "reports/latest", help="the run folder (default reports/latest)")
    args = ap.parse_args()
    try:
        d = run_data(args.run)
    except report.ReportError as e:
        raise SystemExit(f"readme_figures: {e}")
    docs = render_all(d)
    if args.write:
        for path, (text, new) in docs.items():
            if new != text:
                io.write_atomic(str(path), new)
            print(f"{path.relative_to(ROOT)}: {', '.join(differing(text, new)) or 'no block'} changed")
        return 0
    # --check: also show that a doctored figure would be caught.
    text = README.read_text()
    first = MARK.search(text)
    body = first.group(3)
    digit = re.search(r"\d", body)
    doctored = text
    if digit:
        body = body[:digit.start()] + str((int(digit.group()) + 1) % 10) + body[digit.end():]
        doctored = text[:first.start(3)] + body + text[first.end(3):]
    caught = doctored != text and differing(doctored, render(doctored, d))
    bad = [(path, k) for path, (text, new) in docs.items() for k in differing(text, new)]
    for path, k in bad:
        print(f"FAIL {path.relative_to(ROOT)} block '{k}' differs from the committed run; "
              "run python3 -m attention_lab.reports.readme --write")
    if not caught:
        print("FAIL a doctored README block was not caught")
    print(f"{len(BLOCKS)} blocks in {len(docs)} documents checked against reports/runs/{d['stamp']}; {len(bad)} differ")
    return 1 if bad or not caught else 0


if __name__ == "__main__":
    sys.exit(main())
