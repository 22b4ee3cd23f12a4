"""The reports: the JSON of one run (attn-lab peak, attn-bench, attn-lab
accuracy, entropy, claims, verify) into Markdown reports with SVG figures and
the run's page (index.html).

    python3 -m attention_lab.reports --data DIR --out-root reports [--command "scripts/run"]

One module per report (scaling, performance, memory, accuracy, entropy,
claims, variants, plugins), each one entry of REPORTS below; what they share
is in common; html_page renders the page, readme the README's figures.

DIR holds peak.json, bench.json (Google Benchmark's format), accuracy.json,
entropy.json, claims.json and build.json (and verdicts.json when plugins were
verified). The run is written to reports/runs/<stamp>/
through a temporary folder renamed when complete, so an interrupted or
failed run leaves no half report; reports/latest then points at it. The
reports read only JSON; every figure's paragraph is written from the numbers."""
import matplotlib

matplotlib.use("Agg")  # before any submodule imports pyplot

import argparse
import datetime
import os
import shutil
import sys

from attention_lab.reports import html_page
from attention_lab import runs
from attention_lab.reports.accuracy import accuracy_report
from attention_lab.reports.claims import claims_report
from attention_lab.reports.common import INPUTS, OPTIONAL_INPUTS, PAGE_INPUTS, ReportError, SWEEP_INPUTS, backends_with, bench_rows, load, require
from attention_lab.reports.entropy import entropy_report
from attention_lab.reports.invariance import invariance_report
from attention_lab.reports.memory import memory_report
from attention_lab.reports.performance import performance_report
from attention_lab.reports.plugins import plugins_report
from attention_lab.reports.scaling import scaling_report
from attention_lab.reports.variants import variants_report


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
           lambda d, folder: variants_report(bench_rows(d["bench.json"]), d["peak.json"], folder,
                                             d["bench.json"].get("context", {}).get("caches"))),
    Report("accuracy", "error vs n, logit scale, precision and accumulation",
           lambda d, folder: accuracy_report(d["accuracy.json"], folder), ["accuracy.json"]),
    Report("entropy", "EXAMPLES.md E7", lambda d, folder: entropy_report(d["entropy.json"], folder), ["entropy.json"]),
    Report("invariance", "run to run, threads, batch, query block, key split, GQA: bitwise, within the bounds or beyond",
           lambda d, folder: invariance_report(d.get("invariance.json"), folder)),
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
             f"- Measured peak (attn-lab peak{' --quick: each GEMM probe timed once' if peak.get('quick') else ''}, "
             f"this run): fp32 FMA {peak['fp32_fma_gflops_core']:.1f} GFLOP/s one "
             f"thread, {peak['fp32_fma_gflops_all']:.1f} all; fp64 {peak['fp64_fma_gflops_core']:.1f} / "
             f"{peak['fp64_fma_gflops_all']:.1f}; "
             + (f"bf16 dot product ({peak.get('bf16_dot_instruction') or 'AVX512_BF16'}) {peak['bf16_dot_gflops_core']:.1f} / {peak['bf16_dot_gflops_all']:.1f}"
                + ("" if runs.bf16_dots_in_use(peak) else " (not used: bf16 widened to fp32)") + "; "
                if peak.get("bf16_dot_gflops_core") else "")
             + (f"fp16 FMA (AVX512_FP16, fp16 accumulation, no kernel uses it) {peak['fp16_fma_gflops_core']:.1f} one "
                "thread; " if peak.get("fp16_fma_gflops_core") else "")
             + f"SGEMM (1 thread) {peak['sgemm_gflops_1024']:.1f} at n = 1024, "
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
    index's readings. `sweep`: the sweep's lines for the index (python/attention_lab/sweep.py merge)."""
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
            f"The shards ran on {len(machines)} kinds of machine (python/attention_lab/runs.py's fingerprint: CPU, flags, vector "
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
