#!/usr/bin/python3
"""plugins: kernels loaded from shared libraries (include/attn/plugin.h) are
rows of the registry like the built-in backends, and bad plugins get one
clear error.

    test_plugins.py ATTN_LAB ATTN_BENCH PROPS EXAMPLE.so WRONG.so BAD_ABI.so BAD_ERROR.so BAD_NAN.so BAD_CRASH.so

What it shows: the example plugin is listed, runs through attend (verdict
passes), accuracy, the property suite (ATTN_PLUGINS) and attn-bench, and
every combination it does not claim is reported as "not supported" (never
passed, never silently missing); the wrong plugin (mask after the softmax)
fails attend's verdict on a masked problem and passes it unmasked, so the
verdict sees the bug and nothing else; a missing file, a library without the
entry symbol, another ABI version, a duplicate name, a plugin returning an
error and one writing NaN each give one clear line (or a failed verdict),
and loading a plugin that crashes when run breaks nothing else.
"""
import json
import os
import shlex
import shutil
import subprocess
import tempfile

from checklib import Checks
from paths import ATTN_BENCH, ATTN_LAB, PROPS, plugin

EXAMPLE, WRONG = plugin("example"), plugin("wrong_mask_after_softmax")
BAD_ABI, BAD_ERROR, BAD_NAN, BAD_CRASH = (plugin("bad_" + flaw) for flaw in ("abi", "error", "nan", "crash"))
CHECKS = Checks()
record = CHECKS.record
SEED = 20261201  # of the random problems; RapidCheck's below is printed by props
RC_PARAMS = "seed=20261201 max_success=20"


def lab(args, status, *, contains=(), cwd=None, env=None):
    """Runs attn-lab; wants exit `status`; with 2, exactly one stderr line; `contains` in its output."""
    p = subprocess.run([ATTN_LAB] + args, capture_output=True, text=True, cwd=cwd, env=env)
    ok = p.returncode == status
    if status == 2:
        lines = p.stderr.strip().splitlines()
        ok = ok and len(lines) == 1 and lines[0].startswith("attn-lab: ")
    text = p.stdout + p.stderr
    missing = [c for c in contains if c not in text]
    record(ok and not missing, f"attn-lab {' '.join(args)}: exit {p.returncode} (want {status}); "
                               f"missing {missing}; output: {text.strip()[-600:]}")
    return p


def problem(*extra):
    return ["attend", "--random", "2,4,37,53,16,16,2", "--seed", str(SEED)] + list(extra)


def mha_problem(*extra):
    return ["attend", "--random", "2,4,37,53,16,16", "--seed", str(SEED)] + list(extra)


def test_plugins():
    # Listed, with where it came from and what it claims.
    p = lab(["list", "--json", "--plugin", EXAMPLE], 0)
    rows = {b["name"]: b for b in json.loads(p.stdout)["backends"]}
    record("example" in rows and rows["example"]["source"] == EXAMPLE and "claims fp64 fp32 acc:fp64" in
           rows["example"]["description"], f"list --json: example row {rows.get('example')}")
    record(all(rows[b]["source"] == "built-in" for b in rows if b != "example"), "the other rows are built-in")
    lab(["list", "--plugin", EXAMPLE, "--plugin", EXAMPLE], 0, contains=["example", "plugin"])  # twice: loaded once

    # attend: the verdict passes on what it claims, in every mask and variant it claims.
    ex = ["--backend", "example", "--plugin", EXAMPLE, "--check"]
    for extra in (["--precision", "fp64"], ["--precision", "fp32", "--accumulate", "fp64"],
                  ["--precision", "fp64", "--mask", "causal", "--softcap", "5", "--alibi"],
                  ["--precision", "fp64", "--mask", "window:7", "--sinks", "SINKS"]):
        with tempfile.TemporaryDirectory() as work:
            if "SINKS" in extra:
                import numpy as np
                np.save(os.path.join(work, "s.npy"), np.array([0.5, -1.0, float("-inf"), 2.0]))
                extra = [("s.npy" if e == "SINKS" else e) for e in extra]
            lab(problem(*extra, *ex), 0, contains=["within"], cwd=work)
    # ... and what it does not claim is "not supported", one line naming it.
    lab(problem("--precision", "bf16", *ex), 2, contains=["does not support bf16 storage", "acc:fp64"])
    lab(problem("--precision", "fp32", *ex), 2, contains=["does not support fp32 accumulation"])
    lab(problem("--precision", "fp64", "--weights", "w.npy", "--backend", "example", "--plugin", EXAMPLE), 2,
        contains=["does not support the weights"])
    lab(problem("--precision", "fp64", "--backward", "--backend", "example", "--plugin", EXAMPLE), 2,
        contains=["no backward pass"])

    # The wrong plugin: caught with a mask, not without (the verdict sees exactly the bug).
    wr = ["--backend", "wrong-mask-after-softmax", "--plugin", WRONG, "--precision", "fp64", "--check"]
    lab(problem("--mask", "causal", *wr), 1, contains=["EXCEEDED"])
    lab(problem(*wr), 0)

    # Bad plugins: one clear line each.
    lab(["list", "--plugin", "/nonexistent/libnone.so"], 2, contains=["no such file"])
    lab(["list", "--plugin"], 2, contains=["--plugin needs"])
    libm = next((p for p in ("/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6")
                 if os.path.exists(p)), None)
    if libm:
        lab(["list", "--plugin", libm], 2, contains=["no attn_plugin_get symbol"])
    with tempfile.TemporaryDirectory() as work:
        text = os.path.join(work, "not-a-library.so")
        with open(text, "w") as f:
            f.write("not a shared library\n")
        lab(["list", "--plugin", text], 2, contains=["cannot be loaded"])
        twin = os.path.join(work, "libtwin.so")
        shutil.copy(EXAMPLE, twin)
        lab(["list", "--plugin", EXAMPLE, "--plugin", twin], 2, contains=["'example' is registered already", EXAMPLE])
    lab(["list", "--plugin", BAD_ABI], 2, contains=["ABI version 999", "loads versions 1 and 2"])
    bad = ["--precision", "fp64", "--check"]
    lab(mha_problem("--backend", "bad-error", "--plugin", BAD_ERROR, *bad), 2,
        contains=["backend 'bad-error' failed: bad-error: refuses every call (n_q = 37)"])
    lab(mha_problem("--backend", "bad-nan", "--plugin", BAD_NAN, *bad), 1, contains=["EXCEEDED"])
    lab(["list", "--plugin", BAD_CRASH], 0, contains=["bad-crash"])  # loading it is harmless
    crash = subprocess.run([ATTN_LAB] + mha_problem("--backend", "bad-crash", "--plugin", BAD_CRASH, *bad),
                           capture_output=True, text=True)
    record(crash.returncode < 0, f"attend on a crashing plugin dies by its signal (verify isolates it): "
                                 f"{crash.returncode}")

    # accuracy: the plugin's points beside the others; what it does not claim listed as such.
    with tempfile.TemporaryDirectory() as work:
        lab(["accuracy", "--profile", "smoke", "--out", "a.json", "--plugin", EXAMPLE], 0, cwd=work)
        acc = json.load(open(os.path.join(work, "a.json")))
        mine = [pt for pt in acc["points"] if pt["backend"] == "example"]
        ns = [pt for pt in acc["not_supported"] if pt["backend"] == "example"]
        record(mine and all(pt["within_tight"] and pt["within"] for pt in mine),
               f"accuracy: example's {len(mine)} points within their tolerances")
        record({(pt["precision"], pt["accumulate"]) for pt in mine} == {("fp64", "fp64"), ("fp32", "fp64")},
               f"accuracy: example ran exactly what it claims: {sorted({(p['precision'], p['accumulate']) for p in mine})}")
        # (besides the plugin's, only gradients whose truth no storage holds, listed for every backend)
        others = [pt for pt in acc["not_supported"] if pt["backend"] != "example"]
        record(ns and all("does not support" in pt["reason"] for pt in ns) and
               all(pt["backend"] == "every backend" and "exceeds half of" in pt["reason"] for pt in others),
               f"accuracy: {len(ns)} combinations listed as not supported, all the plugin's "
               f"(and {len(others)} not representable, every backend's)")

    # The property suite over the registry with the plugin in it (ATTN_PLUGINS).
    env = dict(os.environ, ATTN_PLUGINS=EXAMPLE, RC_PARAMS=RC_PARAMS)
    props = subprocess.run([PROPS, "--gtest_filter=Properties.agrees_with_reference:Properties.rows_sum_to_one:"
                            "Properties.zz_caseCountTable"], capture_output=True, text=True, env=env)
    lines = props.stdout[props.stdout.find("property x backend"):].splitlines()
    record(props.returncode == 0 and "plugin backend: example" in props.stdout,
           f"props with ATTN_PLUGINS: exit {props.returncode}: {props.stdout[-1500:]}")
    header = lines[1].split()[1:] if len(lines) > 1 else []  # the backends' columns
    cells = {}
    for line in lines[2:]:
        words = line.split()
        if len(words) > len(header) and not line.startswith("("):
            cells[" ".join(words[:-len(header)])] = words[-len(header):]
    col = header.index("example") if "example" in header else None
    agree = next((v for k, v in cells.items() if k.startswith("agrees with reference")), None)
    sums = next((v for k, v in cells.items() if k.startswith("rows sum")), None)
    record(col is not None and agree and agree[col].isdigit() and int(agree[col]) > 0,
           f"props: the example ran the agreement property: {agree} (columns {header})")
    record(col is not None and sums and sums[col] == "n/s",
           f"props: rows sum to 1 needs the weights, so it is not supported for the example: {sums}")
    env["ATTN_PLUGINS"] = "/nonexistent/lib.so"
    p = subprocess.run([PROPS, "--gtest_filter=Properties.rows_sum*"], capture_output=True, text=True, env=env)
    record(p.returncode == 2 and "no such file" in p.stderr, f"props with a bad ATTN_PLUGINS: {p.returncode} {p.stderr}")

    # attn-bench: its points measured (a storage it runs with another accumulation only, with that one and a
    # label), the ones it does not claim at all reported as not supported.
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "b.json")
        p = subprocess.run([ATTN_BENCH, "--profile", "smoke", "--plugin", EXAMPLE, "--benchmark_min_time=0",
                            "--benchmark_filter=^attn/example/", "--benchmark_out=" + out,
                            "--benchmark_out_format=json"], capture_output=True, text=True)
        record(p.returncode == 0, f"attn-bench --plugin: exit {p.returncode}: {p.stderr[-500:]}")
        runs = json.load(open(out))["benchmarks"] if p.returncode == 0 else []
        timed = [r for r in runs if not r.get("error_occurred")]
        ns = [r for r in runs if r.get("error_occurred") and r["error_message"].startswith("not supported")]
        # fp64 at its default accumulation; fp32 with the fp64 accumulation it claims, labelled so
        record(timed and {r["name"].split("/")[2] for r in timed} == {"fp64", "fp32"} and
               all(r.get("label", "") == ("accumulate fp64" if r["name"].split("/")[2] == "fp32" else "") for r in timed),
               f"attn-bench: example timed at fp64 and fp32 (labelled): {[(r['name'], r.get('label')) for r in timed]}")
        record(ns and len(ns) + len(timed) == len(runs),
               f"attn-bench: the rest are 'not supported': {[(r['name'], r.get('error_message')) for r in runs]}")
    check_verify()
    CHECKS.finish()


def verify(plugin, work, status):
    p = subprocess.run([ATTN_LAB, "verify", "--plugin", plugin, "--profile", "smoke", "--out", "v"], cwd=work,
                       capture_output=True, text=True)
    ok = p.returncode == status
    record(ok, f"verify {os.path.basename(plugin)}: exit {p.returncode} (want {status}): {p.stderr.strip()[-800:]}")
    path = os.path.join(work, "v", "verdict.json")
    return json.load(open(path)) if os.path.exists(path) else None


def cells(verdict):
    return [c for k in (verdict or {}).get("kernels", []) for c in k["cells"]]


def check_verify():
    """attn-lab verify: passes the example on what it claims, fails the wrong plugin with a
    replayable counterexample, reports a crashing plugin's crashes with their cases."""
    with tempfile.TemporaryDirectory() as work:
        v = verify(EXAMPLE, work, 0)
        cs = cells(v)
        record(v and v["verdict"] == "PASS" and cs and all(c["status"] in ("pass", "not supported") for c in cs),
               f"verify example: {[(c['property'], c['config'], c['status']) for c in cs if c['status'] != 'pass']}")
        agree = [c for c in cs if c["property"] == "agrees_with_reference"]
        record({c["config"] for c in agree} == {"fp64/fp64", "fp32/fp64"} and
               all(c["status"] == "pass" and c["cases"] > 0 for c in agree),
               f"verify example: agreement ran in both claimed configurations: {agree}")
        record(all(c["status"] == "not supported" for c in cs if c["property"].startswith("gradient")),
               "verify example: the gradient properties are not supported (no backward pass), never passed")
        md = open(os.path.join(work, "v", "verdict.md")).read()
        record("| agrees with reference (bound, 2x naive) | pass (" in md and "| example | fp64 |" in md,
               "verify example: verdict.md has the table and the benchmark beside the built-in backends")
        lab(["verify", "--plugin", EXAMPLE, "--out", "v"], 2, contains=["holds a verdict already"], cwd=work)
    with tempfile.TemporaryDirectory() as work:
        v = verify(WRONG, work, 1)
        failed = {c["property"]: c for c in cells(v) if c["status"] == "fail"}
        record("agrees_with_reference" in failed, f"verify wrong: agreement fails: {sorted(failed)}")
        ce = failed.get("agrees_with_reference", {}).get("counterexample")
        record(ce and os.path.exists(os.path.join(work, ce["folder"], "q.npy")),
               f"verify wrong: the counterexample's inputs are saved: {ce}")
        if ce:
            argv = shlex.split(ce["replay"])
            replay = subprocess.run([ATTN_LAB] + argv[1:], cwd=work, capture_output=True, text=True)
            record(replay.returncode == 1 and "EXCEEDED" in replay.stdout,
                   f"verify wrong: the replay command fails the verdict: {replay.returncode} {replay.stdout[-300:]}")
    with tempfile.TemporaryDirectory() as work:
        v = verify(BAD_CRASH, work, 1)
        crashed = [c for c in cells(v) if c["status"] == "crash"]
        # (a property's case is its problem, B=...; an invariance's is the comparison it ran)
        record(crashed and all("signal 11" in c["description"] and
                               c["case"].startswith("invariant: " if c["property"].startswith("invariance:") else "B=")
                               for c in crashed) and any(c["property"].startswith("invariance:") for c in crashed),
               f"verify crash: {len(crashed)} cells report the crash with their case: "
               f"{[(c['property'], c['case'][:40]) for c in crashed if not c['case'].startswith('B=')]}")
    with tempfile.TemporaryDirectory() as work:
        v = verify(BAD_NAN, work, 1)
        record(v and v["verdict"] == "FAIL", "verify nan: fails")
        verify(BAD_ABI, work, 2)
        lab(["verify", "--plugin", "/nonexistent/lib.so"], 2, contains=["no such file"], cwd=work)

