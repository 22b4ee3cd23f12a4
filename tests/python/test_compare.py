#!/usr/bin/python3
"""Tests of the statistics (python/attention_lab/stats.py), `attn-lab compare`
(python/attention_lab/compare.py) and the history store (python/attention_lab/history.py) on
synthetic runs with known differences. Every random draw has a fixed seed,
printed.

    python3 -m pytest tests/python/test_compare.py   (through build/tools/attn-lab: its compare and history commands)
"""
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import unittest

import numpy as np

from paths import ATTN_LAB, SOURCE  # noqa: E402  (and the package on sys.path)
from attention_lab import compare, history, stats  # noqa: E402

SEED = 20261201
BENCHMARKS = [f"attn_h8/streaming/fp32/causal:{c}/threads:{t}/n:4096/d:{d}" for c in (0, 1) for t in (1, 2)
              for d in (64, 128)] + [f"attn/math/fp32/causal:0/threads:1/n:{n}/d:64" for n in range(256, 3328, 256)]
REPS = 9
NOISE = 0.03  # log-normal sigma of one repetition, about what this machine shows


def read_text(path):
    with open(path) as f:
        return f.read()


def read_json(path):
    return json.loads(read_text(path))


def draw(rng, factor, reps=REPS, names=BENCHMARKS):
    """{name: [seconds]}: each benchmark's true time (1 ... 20 ms) times factor, log-normal noise."""
    return {n: list(0.001 * (1 + i) * factor * np.exp(rng.normal(0, NOISE, reps))) for i, n in enumerate(names)}


def bench_json(samples, cpu="test cpu"):
    rows = []
    for name, xs in samples.items():
        for i, s in enumerate(xs):
            rows.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": len(xs),
                         "repetition_index": i, "iterations": 3, "real_time": s * 1e3, "time_unit": "ms",
                         "seconds_median": s, "seconds_per_call": s, "FLOP/s": 1e9 / s})
    return {"context": {"host_name": cpu, "num_cpus": 2, "attn_profile": "quick", "simd": "avx2"}, "benchmarks": rows}


def run_folder(root, stamp, samples, cpu="test cpu", peak=100.0, accuracy=None, claims=None, commit="c0ffee"):
    data = os.path.join(root, stamp, "data")
    os.makedirs(data)
    files = {"bench.json": bench_json(samples, cpu),
             "peak.json": {"cpu": cpu, "cpu_flags": "fma avx2", "cores": 2, "simd": "avx2", "blas": "OpenBLAS; core Zen",
                           "fp32_fma_gflops_core": peak, "fp32_fma_gflops_all": 2 * peak},
             "build.json": {"compiler": "g++ 12", "flags": "release", "commit": commit}}
    if accuracy is not None:
        files["accuracy.json"] = accuracy
    if claims is not None:
        files["claims.json"] = claims
    for name, obj in files.items():
        with open(os.path.join(data, name), "w") as f:
            json.dump(obj, f)
    return os.path.join(root, stamp)


def point(err, within_tight=True):
    return {"backend": "streaming", "precision": "fp32", "accumulate": "fp32", "n": 64, "d": 64, "mask": "none",
            "logit_scale": 1.0, "max_abs": err, "tight_tolerance": 1e-6, "within_tight": within_tight, "within": True}


class Statistics(unittest.TestCase):
    def test_one_bootstrap_in_python_and_cpp(self):
        # The claims' timing criteria bootstrap in C++ (tools/studies/studies.hpp, median_ratio): the same level,
        # resamples and seed as stats.ratio_ci, read from the header, so the two cannot drift apart.
        header = open(os.path.join(SOURCE, "tools", "studies", "studies.hpp")).read()
        cpp = {k: float(re.search(rf"constexpr \w+ {k} = ([0-9.]+);", header).group(1))
               for k in ("interval_level", "bootstrap_resamples", "bootstrap_seed")}
        self.assertEqual(cpp, {"interval_level": stats.LEVEL, "bootstrap_resamples": stats.BOOTSTRAP,
                               "bootstrap_seed": stats.SEED})

    def test_median_interval_from_order_statistics(self):
        self.assertIsNone(stats.median_ci([1, 2, 3, 4, 5]))  # (min, max) of 5 covers 93.75% < 95%
        lo, hi, cov = stats.median_ci([6, 1, 5, 2, 4, 3])
        self.assertEqual((lo, hi), (1, 6))
        self.assertAlmostEqual(cov, 1 - 2 / 64)
        lo, hi, cov = stats.median_ci(range(1, 10))
        self.assertEqual((lo, hi), (2, 8))
        self.assertAlmostEqual(cov, 1 - 2 * 10 / 512)
        # Its coverage, measured: 4000 sets of 9 normal draws (seed printed) bracket the true median 0 in
        # 96.1% of them in theory; the measured rate must be within 4 standard errors of that.
        rng = np.random.default_rng(SEED)
        hits = sum(c[0] <= 0 <= c[1] for c in (stats.median_ci(rng.normal(size=9)) for _ in range(4000)))
        se = math.sqrt(0.961 * 0.039 / 4000)
        print(f"median_ci coverage over 4000 draws (seed {SEED}): {hits / 4000:.4f}")
        self.assertLess(abs(hits / 4000 - (1 - 2 * 10 / 512)), 4 * se)

    def test_verdict_rules_at_the_boundaries(self):
        self.assertEqual(stats.verdict((1.25, 1.30), 1.25), "met")          # the interval touches the target from above
        self.assertEqual(stats.verdict((1.249, 1.30), 1.25), "within noise")
        self.assertEqual(stats.verdict((1.10, 1.2499), 1.25), "missed")
        self.assertEqual(stats.verdict((0.9, 1.0), 1.0, higher_is_better=False), "met")
        self.assertEqual(stats.verdict((0.9, 1.01), 1.0, higher_is_better=False), "within noise")
        self.assertEqual(stats.verdict((1.01, 1.2), 1.0, higher_is_better=False), "missed")
        self.assertEqual(stats.verdict(None, 1.0), "too few repetitions")

    def test_holm(self):
        adj = stats.holm([0.01, 0.04, math.nan, 0.03])
        self.assertTrue(math.isnan(adj[2]))
        self.assertEqual([round(x, 6) for x in (adj[0], adj[3], adj[1])], [0.03, 0.06, 0.06])

    def test_ratio_interval_is_reproducible_and_brackets_the_ratio(self):
        rng = np.random.default_rng(SEED)
        a, b = rng.normal(10, 0.3, 9), rng.normal(11, 0.3, 9)
        r1, ci1 = stats.ratio_ci(b, a)
        r2, ci2 = stats.ratio_ci(b, a)
        self.assertEqual((r1, ci1), (r2, ci2))
        self.assertTrue(ci1[0] < r1 < ci1[1])
        self.assertIsNone(stats.ratio_ci([1.0], [2.0])[1])

    def test_paired_ratio_survives_a_drifting_host(self):
        # Calls that alternated (attn-bench's partner calls): b[i] just before a[i], both slowed alike by a host
        # whose speed drifts over the run (a factor 0.8 ... 1.2 per pair), each call with 1% noise of its own;
        # a is truly 0.95x b's time. The pairs' ratio brackets 0.95 within 2%; the bootstrap of two independent
        # medians, which sees the drift on both sides, is several times wider.
        rng = np.random.default_rng(SEED)
        drift = rng.uniform(0.8, 1.2, 12)
        b = drift * rng.normal(1, 0.01, 12)
        a = 0.95 * drift * rng.normal(1, 0.01, 12)
        r, ci = stats.paired_ratio_ci(a, b)
        print(f"paired (seed {SEED}): {r:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]; independent: {stats.ratio_ci(a, b)}")
        self.assertTrue(ci[0] < 0.95 < ci[1] and ci[1] - ci[0] < 0.04, (r, ci))
        _, wide = stats.ratio_ci(a, b)
        self.assertGreater(wide[1] - wide[0], 3 * (ci[1] - ci[0]))
        # Its coverage, measured: 2000 such runs of 8 pairs bracket the true ratio at least 93% of the time.
        hits = 0
        for _ in range(2000):
            drift = rng.uniform(0.8, 1.2, 8)
            _, ci = stats.paired_ratio_ci(0.95 * drift * rng.normal(1, 0.01, 8), drift * rng.normal(1, 0.01, 8))
            hits += ci[0] <= 0.95 <= ci[1]
        print(f"paired ratio coverage: {hits / 2000:.3f}")
        self.assertGreaterEqual(hits / 2000, 0.93)
        self.assertIsNone(stats.paired_ratio_ci([1.0, 2.0], [2.0, 3.0])[1])  # too few pairs for an interval
        with self.assertRaises(ValueError):
            stats.paired_ratio_ci([1.0, 2.0], [1.0])


class Synthetic(unittest.TestCase):
    """Runs drawn with known differences: 10% apart must compare significantly different, the same distribution
    must not, and the false-positive rate over many trials is measured and bounded."""

    def test_ten_percent_apart_is_significant_everywhere(self):
        rng = np.random.default_rng(SEED)
        a, b = draw(rng, 1.0), draw(rng, 1.10)
        rows, tested = compare.compare_benchmarks(FakeRun(a), FakeRun(b), stats.LEVEL, False)
        self.assertEqual(tested, len(BENCHMARKS))
        verdicts = {r["verdict"] for r in rows}
        print(f"10% apart (seed {SEED}): {sorted(verdicts)}")
        self.assertEqual(verdicts, {"slower"})
        faster, _ = compare.compare_benchmarks(FakeRun(b), FakeRun(a), stats.LEVEL, False)
        self.assertEqual({r["verdict"] for r in faster}, {"faster"})
        for r in rows:  # the interval brackets the true ratio at this noise
            self.assertTrue(r["interval"][0] < 1.10 * 1.06 and r["interval"][1] > 1.10 / 1.06, r)

    def test_same_distribution_false_positive_rate(self):
        # 200 pairs of runs from one distribution (seed printed): Holm bounds the chance that a comparison flags
        # any of its benchmarks at 5%. Measured rate within 3 binomial standard errors above 5%.
        rng = np.random.default_rng(SEED + 1)
        trials, flagged, single = 200, 0, 0
        for _ in range(trials):
            rows, _ = compare.compare_benchmarks(FakeRun(draw(rng, 1.0)), FakeRun(draw(rng, 1.0)), stats.LEVEL, False)
            bad = sum(r["verdict"] in ("faster", "slower") for r in rows)
            flagged += bad > 0
            single += bad
        rate = flagged / trials
        print(f"same distribution (seed {SEED + 1}): {flagged} of {trials} comparisons flagged a benchmark "
              f"({rate:.3f}); {single} of {trials * len(BENCHMARKS)} benchmark verdicts")
        self.assertLessEqual(rate, 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials))
        # Without the correction the same data would flag far more: the correction is doing the work.
        raw = 0
        rng = np.random.default_rng(SEED + 1)
        for _ in range(trials):
            a, b = draw(rng, 1.0), draw(rng, 1.0)
            raw += any(stats.mann_whitney(a[n], b[n]) < 0.05 for n in BENCHMARKS)
        print(f"  uncorrected: {raw} of {trials}")
        self.assertGreater(raw, 4 * flagged)

    def test_one_sample_has_no_test_and_few_repetitions_are_undecidable(self):
        rng = np.random.default_rng(SEED)
        rows, tested = compare.compare_benchmarks(FakeRun(draw(rng, 1.0, reps=1)), FakeRun(draw(rng, 2.0, reps=1)),
                                                  stats.LEVEL, False)
        self.assertEqual(tested, 0)
        self.assertEqual({r["verdict"] for r in rows}, {"no test (one sample)"})
        rows, _ = compare.compare_benchmarks(FakeRun(draw(rng, 1.0, reps=3)), FakeRun(draw(rng, 1.0, reps=3)),
                                             stats.LEVEL, False)
        self.assertEqual({r["verdict"] for r in rows}, {"undecidable (too few repetitions)"})


class FakeRun:
    def __init__(self, samples):
        self.samples = samples


class CommandLine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        rng = np.random.default_rng(SEED)
        acc = {"points": [point(1e-7)]}
        self.a = run_folder(self.tmp, "20260101-000000", draw(rng, 1.0), accuracy={"points": [point(1e-7)]},
                            claims={"claims": [{"id": "flash-2x", "verdict": "holds"}]})
        self.b = run_folder(self.tmp, "20260102-000000", draw(rng, 1.10), accuracy={"points": [point(3e-7)]},
                            claims={"claims": [{"id": "flash-2x", "verdict": "does not hold"}]}, commit="beef")
        self.same = run_folder(self.tmp, "20260103-000000", draw(rng, 1.0), accuracy=acc)
        self.other = run_folder(self.tmp, "20260104-000000", draw(rng, 0.5), cpu="other cpu", peak=200.0)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def cmd(self, *args):
        return subprocess.run([ATTN_LAB, "compare", *args], capture_output=True, text=True)  # as a user runs it

    def test_a_real_comparison_with_every_output(self):
        out = os.path.join(self.tmp, "cmp")
        p = self.cmd(self.a, self.b, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"slower {len(BENCHMARKS)};", p.stdout)
        for name in ("compare.md", "compare.json", "compare.svg", "compare.html"):
            self.assertGreater(os.path.getsize(os.path.join(out, name)), 0, name)
        md = read_text(os.path.join(out, "compare.md"))
        self.assertIn("grew 3x", md)
        self.assertIn("| flash-2x | holds | does not hold |", md)
        self.assertIn("Holm", md)
        j = read_json(os.path.join(out, "compare.json"))
        self.assertEqual(len(j["benchmarks"]), len(BENCHMARKS))
        # An existing folder is kept unless --force.
        p = self.cmd(self.a, self.b, "--out", out)
        self.assertEqual(p.returncode, 2)
        self.assertIn("exists", p.stderr)
        self.assertEqual(self.cmd(self.a, self.b, "--out", out, "--force").returncode, 0)
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith(".compare")], [])

    def test_the_regression_gate(self):
        out = os.path.join(self.tmp, "gate")
        p = self.cmd(self.a, self.b, "--out", out, "--fail-on-regression", "5")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("significant slowdown(s) larger than 5%", p.stderr)
        p = self.cmd(self.a, self.b, "--out", out, "--force", "--fail-on-regression", "20")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.cmd(self.b, self.a, "--out", out, "--force", "--fail-on-regression", "0")
        self.assertEqual(p.returncode, 0, p.stderr)  # B faster: no regression

    def test_bad_input_is_one_clear_message(self):
        cases = []
        p = self.cmd(self.a, self.a)
        cases.append((p, "same run"))
        nothing = run_folder(self.tmp, "nothing", {"attn/naive/fp32/causal:0/threads:1/n:1/d:1": [1.0]})
        cases.append((self.cmd(self.a, nothing, "--out", os.path.join(self.tmp, "x")), "no benchmark is in both runs"))
        truncated = os.path.join(self.tmp, "t.json")
        with open(truncated, "w") as f:
            f.write(json.dumps(bench_json({"a/b": [1.0]}))[:40])
        cases.append((self.cmd(self.a, truncated), "truncated?"))
        cases.append((self.cmd(self.a, self.other, "--out", os.path.join(self.tmp, "y")), "different machines"))
        cases.append((self.cmd(self.a, os.path.join(self.tmp, "missing")), "no such file"))
        for p, message in cases:
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(message, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_across_machines_compares_fractions_of_peak(self):
        # "other" is twice as fast on a machine with twice the peak: the same fraction of peak.
        out = os.path.join(self.tmp, "across")
        p = self.cmd(self.a, self.other, "--out", out, "--across-machines")
        self.assertEqual(p.returncode, 0, p.stderr)
        md = read_text(os.path.join(out, "compare.md"))
        self.assertIn("**Across machines**", md)
        j = read_json(os.path.join(out, "compare.json"))
        self.assertNotIn("slower", {r["verdict"] for r in j["benchmarks"]})
        self.assertNotIn("faster", {r["verdict"] for r in j["benchmarks"]})


class HistoryStore(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.db = os.path.join(self.tmp, "history.sqlite")
        rng = np.random.default_rng(SEED)
        self.runs = [run_folder(self.tmp, f"2026010{i}-000000", draw(rng, f), commit=f"commit{i}",
                                accuracy={"points": [point(1e-7)]}, claims={"claims": [{"id": "x", "verdict": "holds"}]})
                     for i, f in ((1, 1.0), (2, 1.0), (3, 1.2))]

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def hist(self, *args, env=None):
        argv = [ATTN_LAB, "history"] + list(args)
        return subprocess.run(argv, capture_output=True, text=True, env=env)

    def counts(self):
        db = sqlite3.connect(self.db)
        return tuple(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("runs", "samples", "accuracy", "claims"))

    def test_append_reopen_query(self):
        p = self.hist("append", *self.runs[:2], "--db", self.db)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.counts(), (2, 2 * REPS * len(BENCHMARKS), 2, 2))
        p = self.hist("append", self.runs[1], "--db", self.db)
        self.assertIn("already in the store", p.stdout)
        self.assertEqual(self.counts()[0], 2)
        self.hist("append", self.runs[2], "--db", self.db)
        out = os.path.join(self.tmp, "h")
        p = self.hist("--db", self.db, "--out", out, "--benchmark", "^attn_h8/streaming/fp32/causal:0/threads:1/")
        self.assertEqual(p.returncode, 0, p.stderr)
        md = read_text(os.path.join(out, "history.md"))
        self.assertIn("2 series", md)
        j = read_json(os.path.join(out, "history.json"))
        self.assertEqual([len(s["runs"]) for s in j["series"]], [3, 3])
        # The 20% step between runs 2 and 3 is significant in both series; 1 -> 2 (same distribution) is not.
        sig = [(c["from"], c["to"]) for c in j["changes"] if c["significant"]]
        self.assertEqual(sorted(sig), [("20260102-000000", "20260103-000000")] * 2)
        self.assertIn("commit3", md)
        self.assertTrue(os.path.getsize(os.path.join(out, "history.svg")) > 0)
        self.assertTrue(os.path.getsize(os.path.join(out, "history.html")) > 0)

    def test_a_writer_killed_mid_append_leaves_the_store_as_before(self):
        self.hist("append", self.runs[0], "--db", self.db)
        before = self.counts()
        argv = [ATTN_LAB, "history"]
        writer = subprocess.Popen(argv + ["append", self.runs[1], "--db", self.db], stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **{history.PAUSE_ENV: "60"}))
        line = writer.stderr.readline()
        self.assertIn("paused inside the transaction", line)  # its samples are written, not committed
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stderr.close()
        self.assertEqual(self.counts(), before)
        self.assertEqual(sqlite3.connect(self.db).execute("PRAGMA integrity_check").fetchone()[0], "ok")
        p = self.hist("append", self.runs[1], "--db", self.db)  # and the store takes the run afterwards
        self.assertIn("appended", p.stdout)

    def test_a_newer_schema_and_a_foreign_file_are_refused(self):
        self.hist("append", self.runs[0], "--db", self.db)
        db = sqlite3.connect(self.db)
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        db.commit()
        db.close()
        for args in (("--db", self.db, "--out", os.path.join(self.tmp, "h")), ("append", self.runs[1], "--db", self.db)):
            p = self.hist(*args)
            self.assertEqual(p.returncode, 2)
            self.assertIn("schema version 2 is newer than this tool's (1)", p.stderr)
        junk = os.path.join(self.tmp, "junk.sqlite")
        with open(junk, "w") as f:
            f.write("not sqlite at all, long enough to have a header of one hundred bytes " * 3)
        p = self.hist("--db", junk, "--out", os.path.join(self.tmp, "h"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a history store", p.stderr)
        p = self.hist("--db", os.path.join(self.tmp, "none.sqlite"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("no history store", p.stderr)
        p = self.hist("--db", self.db, "--benchmark", "(")
        self.assertEqual(p.returncode, 2)

