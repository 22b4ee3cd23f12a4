#!/usr/bin/python3
"""attn-lab history: every run's results across commits and machines, in one SQLite store.

    attn-lab history [--benchmark REGEX] [--machine FP] [--db FILE] [--out DIR] [--force]
    attn-lab history append RUN... [--db FILE]

`append` adds run folders (reports/runs/<stamp>/) to the store (default
reports/history.sqlite): one row per benchmark repetition, accuracy point
and claim verdict, keyed by run id (the folder's stamp), git commit,
machine fingerprint (python/attention_lab/runs.py) and profile, all in one transaction,
so a writer killed mid-append leaves the store as it was. A run already in
the store is skipped. `scripts/run` appends every run it makes.

Without `append`: for each machine (fingerprint) and each benchmark that
REGEX selects (Python `re.search`; default: the fused backend's attn_h8
fp32 rows), the median time per run over commits with its 95% interval
(order statistics of the repetitions; none for a run without them) as a
figure with the interval as a band, and a table of the largest significant
changes between consecutive runs of one machine (Mann-Whitney U over the
repetitions, Holm-corrected over every consecutive pair tested) with the
commits that made them. Written as history.md, history.svg, history.json
and history.html into DIR (default reports/history), through a temporary
folder renamed when complete.

Schema (version 1; `meta.schema_version`): a tool refuses a store whose
version is newer than its own, with one line saying so.
  meta(key PRIMARY KEY, value)
  runs(run_id PRIMARY KEY, stamp, git_commit, fingerprint, machine JSON (the fingerprint's fields and the
       run's measured peaks), profile, appended_at)
  samples(run_id, benchmark, repetition, seconds, flop_per_call, peak_gflops)   seconds: one repetition's median call
  accuracy(run_id, kind, point JSON, max_abs, tight_tolerance, within_tight, within)
  claims(run_id, claim, verdict)

examples:
  attn-lab history --benchmark attn_h8/streaming/fp32/causal:0/threads:1/n:4096/ --out history
  attn-lab history append reports/runs/20261201-131420 --db mine.sqlite
"""
import argparse
import datetime
import json
import math
import os
import re
import sqlite3
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attention_lab import ROOT, io, runs, stats  # noqa: E402
from attention_lab.reports import html_page  # noqa: E402

SCHEMA_VERSION = 1
DEFAULT_DB = os.path.join(ROOT, "reports", "history.sqlite")
DEFAULT_SELECTION = r"^attn_h8/streaming/fp32/causal:0/"
# For the test that kills a writer mid-append: sleep this many seconds inside the transaction, after the samples.
PAUSE_ENV = "ATTN_HISTORY_TEST_PAUSE"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs(run_id TEXT PRIMARY KEY, stamp TEXT NOT NULL, git_commit TEXT NOT NULL, fingerprint TEXT NOT NULL,
                  machine TEXT NOT NULL, profile TEXT NOT NULL, appended_at TEXT NOT NULL);
CREATE TABLE samples(run_id TEXT NOT NULL REFERENCES runs(run_id), benchmark TEXT NOT NULL, repetition INTEGER NOT NULL,
                     seconds REAL NOT NULL, flop_per_call REAL, peak_gflops REAL);
CREATE TABLE accuracy(run_id TEXT NOT NULL REFERENCES runs(run_id), kind TEXT NOT NULL, point TEXT NOT NULL,
                      max_abs REAL, tight_tolerance REAL, within_tight INTEGER, within INTEGER);
CREATE TABLE claims(run_id TEXT NOT NULL REFERENCES runs(run_id), claim TEXT NOT NULL, verdict TEXT NOT NULL);
CREATE INDEX samples_by_benchmark ON samples(benchmark, run_id);
"""


class HistoryError(Exception):
    pass


def open_store(path, create):
    if not os.path.exists(path):
        if not create:
            raise HistoryError(f"{path}: no history store (scripts/run makes it; `attn-lab history append RUN` "
                               "adds a run folder)")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.new.{os.getpid()}"  # made whole, then renamed: never a store without its schema
        db = sqlite3.connect(tmp)
        db.executescript(SCHEMA)
        db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        db.commit()
        db.close()
        os.replace(tmp, path)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{path}: not a history store ({e})")
    if row is None:
        raise HistoryError(f"{path}: not a history store (no schema_version)")
    if int(row[0]) > SCHEMA_VERSION:
        raise HistoryError(f"{path}: schema version {row[0]} is newer than this tool's ({SCHEMA_VERSION}); "
                           "update attention-lab to read it")
    return db


def append(db, run):
    """Adds one run in one transaction; returns False when it is in the store already."""
    if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.stamp,)).fetchone():
        return False
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (run.stamp, run.stamp, run.commit, run.fingerprint,
                    json.dumps(dict(run.machine, measured_peaks=run.measured_peaks), sort_keys=True),
                    run.profile, datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")))
        db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                       [(run.stamp, name, i, s, run.flops.get(name), run.peak_gflops(run.fields[name]["threads"]))
                        for name, ss in run.samples.items() for i, s in enumerate(ss)])
        if os.environ.get(PAUSE_ENV):
            print("history: paused inside the transaction", file=sys.stderr, flush=True)
            time.sleep(float(os.environ[PAUSE_ENV]))
        for kind in ("points", "gradient_points"):
            db.executemany("INSERT INTO accuracy VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(run.stamp, kind, json.dumps({k: p.get(k) for k in ("backend", "precision", "accumulate",
                                                                               "n", "d", "mask", "logit_scale",
                                                                               "gradient") if k in p}, sort_keys=True),
                             p.get("max_abs"), p.get("tight_tolerance"), p.get("within_tight"), p.get("within"))
                            for p in (run.accuracy or {}).get(kind, [])])
        db.executemany("INSERT INTO claims VALUES (?, ?, ?)",
                       [(run.stamp, c["id"], c["verdict"]) for c in (run.claims or {}).get("claims", [])])
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return True


def series(db, pattern, machine):
    """{(fingerprint, benchmark): [(stamp, commit, [seconds...])]} in run order."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise HistoryError(f"--benchmark {pattern!r}: not a regular expression ({e})")
    q = ("SELECT r.fingerprint, s.benchmark, r.stamp, r.git_commit, s.seconds FROM samples s JOIN runs r "
         "USING (run_id) ORDER BY r.stamp, s.repetition")
    out = {}
    for fp, name, stamp, commit, sec in db.execute(q):
        if machine and not fp.startswith(machine):
            continue
        if not rx.search(name):
            continue
        pts = out.setdefault((fp, name), [])
        if not pts or pts[-1][0] != stamp:
            pts.append((stamp, commit, []))
        pts[-1][2].append(sec)
    return out


def changes(all_series, level):
    """Every consecutive pair of runs of one machine and benchmark, tested; Holm over all of them."""
    pairs = []
    for (fp, name), pts in all_series.items():
        for (s0, c0, x0), (s1, c1, x1) in zip(pts, pts[1:]):
            ratio, ci = stats.ratio_ci(x1, x0, level=level)
            pairs.append({"fingerprint": fp, "benchmark": name, "from": s0, "to": s1, "commit_from": c0,
                          "commit_to": c1, "ratio": ratio, "interval": ci, "p": stats.mann_whitney(x1, x0)})
    for p, adj in zip(pairs, stats.holm([p["p"] for p in pairs])):
        p["p_holm"] = adj
        p["significant"] = not math.isnan(adj) and adj < 1 - level
    return pairs


def render(db, all_series, pairs, pattern, machine, folder, limit=12):
    machines = {fp: json.loads(m) for fp, m in db.execute("SELECT fingerprint, machine FROM runs")}
    nruns = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    keys = sorted(all_series)
    lines = ["# History", "",
             f"{nruns} runs in the store; benchmarks selected by `{pattern}`"
             + (f" on machine `{machine}`" if machine else "") + f": {len(keys)} series.", ""]
    if not keys:
        lines.append("No series: nothing in the store matches.")
    shown = keys[:limit]
    if len(keys) > limit:
        lines += [f"The figure shows the first {limit} series; narrow `--benchmark` to see others.", ""]
    if shown:
        fig, axes = plt.subplots(len(shown), 1, figsize=(7.5, 2.2 * len(shown)), squeeze=False)
        for ax, key in zip(axes[:, 0], shown):
            pts = all_series[key]
            xs = range(len(pts))
            med = [1e3 * stats.median(x) for _, _, x in pts]
            cis = [stats.median_ci(x) for _, _, x in pts]
            ax.plot(xs, med, "o-", ms=3)
            lo = [1e3 * c[0] if c else m for c, m in zip(cis, med)]
            hi = [1e3 * c[1] if c else m for c, m in zip(cis, med)]
            ax.fill_between(xs, lo, hi, alpha=0.3, label="95% interval of the median (order statistics)")
            ax.set_xticks(list(xs))
            ax.set_xticklabels([f"{s}\n{c[:8]}" for s, c, _ in pts], fontsize=5)
            ax.set_ylabel("ms per call", fontsize=7)
            ax.set_title(f"{key[1]} on {key[0]}", fontsize=7)
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, "history.svg"), format="svg")
        plt.close(fig)
        lines += ["![history](history.svg)", ""]
    lines += ["## Machines", ""] + [f"- `{fp}`: {runs.describe(m)}" for fp, m in sorted(machines.items())] + [""]
    lines += ["## Series", "", "| machine | benchmark | run | commit | repetitions | median ms | 95% interval (ms) |",
              "|---|---|---|---|---:|---:|---|"]
    for key in keys:
        for stamp, commit, x in all_series[key]:
            ci = stats.median_ci(x)
            lines.append(f"| `{key[0]}` | {key[1]} | {stamp} | {commit[:10]} | {len(x)} | {1e3 * stats.median(x):.3f} | "
                         + (f"[{1e3 * ci[0]:.3f}, {1e3 * ci[1]:.3f}]" if ci else "none (fewer than 6 repetitions)")
                         + " |")
    sig = sorted((p for p in pairs if p["significant"]), key=lambda p: -abs(math.log(p["ratio"])))
    tested = sum(not math.isnan(p["p"]) for p in pairs)
    lines += ["", "## Largest significant changes between consecutive runs of one machine", "",
              f"{len(pairs)} consecutive pairs, {tested} with repetitions on both sides tested (two-sided Mann-Whitney "
              f"U, Holm-corrected over the {tested}); {len(sig)} significant at 0.05.", ""]
    if sig:
        lines += ["| machine | benchmark | from (commit) | to (commit) | time ratio | interval | p (Holm) |",
                  "|---|---|---|---|---:|---|---:|"]
        lines += [f"| `{p['fingerprint']}` | {p['benchmark']} | {p['from']} ({p['commit_from'][:10]}) | {p['to']} "
                  f"({p['commit_to'][:10]}) | {p['ratio']:.3f} | {stats.fmt_interval(p['interval'], '{:.3f}')} | "
                  f"{p['p_holm']:.2g} |" for p in sig[:20]]
    return "\n".join(lines) + "\n"


def show(args):
    db = open_store(args.db, create=False)
    all_series = series(db, args.benchmark, args.machine)
    pairs = changes(all_series, stats.LEVEL)
    out = args.out
    if os.path.exists(out) and not args.force and not os.path.isfile(os.path.join(out, "history.md")):
        raise HistoryError(f"{out} exists and is not a history folder; --force replaces it")
    def fill(folder):
        md = render(db, all_series, pairs, args.benchmark, args.machine, folder)
        with open(os.path.join(folder, "history.md"), "w") as f:
            f.write(md)
        with open(os.path.join(folder, "history.json"), "w") as f:
            json.dump({"kind": "history", "schema_version": SCHEMA_VERSION, "selection": args.benchmark,
                       "series": [{"fingerprint": fp, "benchmark": name,
                                   "runs": [{"stamp": s, "commit": c, "seconds": x} for s, c, x in pts]}
                                  for (fp, name), pts in sorted(all_series.items())],
                       "changes": pairs}, f, indent=1)
        html_page.standalone(folder, "history.html", "attention-lab history", md)
    io.publish_folder(fill, out)
    print(f"{len(all_series)} series, {sum(p['significant'] for p in pairs)} significant changes; {out}/history.md")


def previous(db, run):
    """The stamp of the latest run in the store before `run` with its fingerprint and profile, or None."""
    row = db.execute("SELECT stamp FROM runs WHERE fingerprint = ? AND profile = ? AND stamp < ? ORDER BY stamp DESC "
                     "LIMIT 1", (run.fingerprint, run.profile, run.stamp)).fetchone()
    return row[0] if row else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "previous":  # scripts/run: which run to compare a new one with
            ap = argparse.ArgumentParser(prog="attn-lab history previous",
                                         description="print the stamp of the latest stored run of RUN's machine and "
                                                     "profile before it (nothing when there is none)")
            ap.add_argument("run")
            ap.add_argument("--stamp", help="the run's stamp, when RUN is a data folder")
            ap.add_argument("--db", default=DEFAULT_DB)
            args = ap.parse_args(argv[1:])
            run = runs.Run(args.run)
            if args.stamp:
                run.stamp = args.stamp
            if os.path.exists(args.db):
                stamp = previous(open_store(args.db, create=False), run)
                if stamp:
                    print(stamp)
            return 0
        if argv and argv[0] == "append":
            ap = argparse.ArgumentParser(prog="attn-lab history append", description="add run folders to the store")
            ap.add_argument("runs", nargs="+", help="run folders (reports/runs/<stamp>/)")
            ap.add_argument("--db", default=DEFAULT_DB)
            args = ap.parse_args(argv[1:])
            loaded = [runs.Run(r) for r in args.runs]  # every run readable before the store is touched
            db = open_store(args.db, create=True)
            for r in loaded:
                print(f"{r.stamp}: " + ("appended" if append(db, r) else "already in the store"))
            return 0
        ap = argparse.ArgumentParser(prog="attn-lab history", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
        ap.add_argument("--benchmark", default=DEFAULT_SELECTION, metavar="REGEX")
        ap.add_argument("--machine", metavar="FP", help="a fingerprint (or its first digits)")
        ap.add_argument("--db", default=DEFAULT_DB)
        ap.add_argument("--out", default=os.path.join(ROOT, "reports", "history"))
        ap.add_argument("--force", action="store_true")
        show(ap.parse_args(argv))
        return 0
    except (HistoryError, runs.RunError) as e:
        print(f"attn-lab history: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
