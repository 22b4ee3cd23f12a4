#!/usr/bin/python3
"""The sweep on a real Slurm: a single-node cluster from Debian's munge and slurm-wlm started here
(scripts/slurm/local_cluster.py: loopback only, stopped by pid at the end), part of the smoke profile (ONLY:
naive's and streaming's fp32 and bf16 benchmarks, eight accuracy problems, three claims, two single steps)
submitted by scripts/slurm/submit --only as an array of 4 shards and a dependent merge. The Slurm machinery
needs no more items; the whole smoke profile runs locally in doc_commands (scripts/run, and docs/cluster.md's
two shards and merge). With the whole profile this test took 412 s of the suite's 2 cores.

  1. The plan without Slurm: deterministic, every selected item in exactly one shard and no other, balanced
     by estimate, bad input (a pattern that selects nothing, or is no regular expression) refused in one line.
  2. First submission, one shard killed on purpose (scancel of its array task while it runs): the merge job
     still runs (afterany), exits non-zero, and the report's header names the shard as missing.
  3. The same command again: the three complete shards are skipped (their results keep the first array's job
     ids), the killed one runs, the merge exits 0 and the report has every benchmark, accuracy problem and
     claim and step the plan selected, no missing shard.
  4. The merge's grouping by machine: the shards copied with one shard's recorded CPU changed (a second kind
     of machine, simulated) give one section per machine type and the cross-machine table; a stale shard (of
     another plan) is named and refused.
Afterwards no daemon this test started is alive and its folder is gone.

    tests/python/test_slurm.py
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
from paths import SOURCE as ROOT  # noqa: E402  (and the package on sys.path)

sys.path.insert(0, os.path.join(ROOT, "scripts", "slurm"))
from checklib import Checks  # noqa: E402
import local_cluster  # noqa: E402
from attention_lab import module_env, sweep  # noqa: E402

checks = Checks()
WAIT = 900  # seconds: the bound on each submission (the whole smoke profile took about 4 minutes here)
# The items the test's plan holds (sweep.py --only): every shard gets some, and shard 1 runs long enough to be
# killed inside its steps.
ONLY = r"^attn/(naive|streaming)/(fp32|bf16)/|^accuracy/[0-7]$|^claims/(overflow|saturation|entropy)$|^step/(entropy|pages)$"


def run(*cmd, env=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, cwd=ROOT, env=module_env(env))


def check_plan(work):
    folder = os.path.join(work, "plan")
    plan_cmd = [sys.executable, "-m", "attention_lab.sweep", "plan", "--profile", "smoke", "--shards", "4",
                "--only", ONLY, "--out", folder]
    r1 = run(*plan_cmd)
    checks.record(r1.returncode == 0 and f"(--only '{ONLY}')" in r1.stdout, f"plan: {r1.stdout} {r1.stderr}")
    first = open(os.path.join(folder, "plan.jsonl")).read()
    r2 = run(*plan_cmd)
    checks.record(r2.returncode == 0 and open(os.path.join(folder, "plan.jsonl")).read() == first,
                  "the plan is the same when made twice")
    plan = sweep.read_plan(folder)
    plugins = [sweep.plugin_arg(p) for p in plan[0]["plugins"]]
    everything = sweep.items("smoke", plan[0]["plugins"])
    for kind in ("bench", "accuracy", "claims", "steps"):
        listed = [x for line in plan for x in line[kind]]
        of_kind = [it for it in everything if it["kind"] == ("step" if kind == "steps" else kind)]
        want = [it["key"] for it in of_kind if re.search(ONLY, sweep.label(it))]
        checks.record(sorted(map(str, listed)) == sorted(map(str, want)) and 0 < len(want) < len(of_kind),
                      f"every selected {kind} item in exactly one shard, no other ({len(listed)} placed, {len(want)} "
                      f"selected of {len(of_kind)})")
    checks.record(all(any(line[k] for k in ("bench", "accuracy", "claims", "steps")) and line.get("only") == ONLY
                      for line in plan), "every shard has items and the plan records its --only")
    est = [line["estimated_seconds"] for line in plan]
    biggest = max(it["seconds"] for it in everything)
    # Longest-first placement: no shard exceeds the mean by more than the largest item.
    checks.record(max(est) <= sum(est) / len(est) + biggest,
                  f"shards balanced: estimates {est}, largest item {biggest:.1f} s")
    bench_names = set(run(os.path.join(ROOT, "build/bench/attn-bench"), "--profile", "smoke",
                          "--benchmark_list_tests", *[f for p in plugins for f in ("--plugin", p)]).stdout.split())
    bench_names = {n for n in bench_names if re.search(ONLY, n)}
    checks.record(bench_names == {n for line in plan for n in line["bench"]},
                  "the plan's benchmarks are those of attn-bench --benchmark_list_tests that --only selects")
    for args, want in [(["shard", "5/4", "--out", folder], "has 4 shards"),
                       (["shard", "x", "--out", folder], "needs I/N"),
                       (["plan", "--profile", "smoke", "--shards", "3", "--out", folder], "holds another plan"),
                       (["plan", "--profile", "huge", "--out", os.path.join(work, "p2")], "must be one of"),
                       (["plan", "--profile", "smoke", "--only", "^nothing$", "--out", os.path.join(work, "p3")],
                        "matches no item"),
                       (["plan", "--profile", "smoke", "--only", "attn/(", "--out", os.path.join(work, "p4")],
                        "not a regular expression"),
                       (["merge", os.path.join(work, "nothing")], "no plan")]:
        r = run(sys.executable, "-m", "attention_lab.sweep", *args)
        checks.record(r.returncode == 2 and want in r.stderr and len(r.stderr.strip().splitlines()) == 1,
                      f"sweep.py {' '.join(args[:2])}: one line naming '{want}' (got {r.returncode}: {r.stderr!r})")
    return bench_names


def wait_empty(c, what):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if not c.run("squeue", "-h").stdout.strip():
            return True
        time.sleep(2)
    checks.record(False, f"{what}: the queue did not empty within {WAIT} s")
    return False


def job_field(c, job, field):
    m = re.search(rf"\b{field}=(\S+)", c.run("scontrol", "show", "job", job, check=False).stdout)
    return m.group(1) if m else None


def submit(c, out):
    r = c.run(os.path.join(ROOT, "scripts/slurm/submit"), "--profile", "smoke", "--shards", "4", "--only", ONLY,
              "--out", out, "--time", "15", check=False)
    checks.record(r.returncode == 0 and "submitted: shards" in r.stdout, f"submit: {r.stdout} {r.stderr[-800:]}")
    return open(os.path.join(out, "slurm", "jobs")).read().split()


def records(out):
    return {i: json.load(open(sweep.shard_path(out, i))) for i in range(4) if os.path.exists(sweep.shard_path(out, i))}


def check_slurm(work, bench_names):
    out = os.path.join(work, "sweep")
    with local_cluster.LocalCluster() as c:
        pids = [p.pid for _, p in c.procs]
        cluster_dir = c.dir
        # the shards' scratch folders (tempfile, under TMPDIR, which sbatch passes on to the jobs)
        scratch = os.path.join(work, "slurm-tmp")
        os.makedirs(scratch)
        c.env["TMPDIR"] = scratch
        # 2. One shard killed while it runs.
        t0 = time.monotonic()
        array, merge = submit(c, out)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and c.run("squeue", "-h", "-j", f"{array}_1", "-o", "%T",
                                                    check=False).stdout.strip() != "RUNNING":
            time.sleep(0.5)
        # Inside its steps: its log shows one (a fixed 3 s after RUNNING was not always enough: on a loaded
        # machine the shard's Python had not printed its first step yet, and the check below failed).
        shard_log = os.path.join(out, "slurm", "logs", "shard-1.err")
        while time.monotonic() < deadline and "[shard 1/4 step" not in (
                open(shard_log).read() if os.path.exists(shard_log) else ""):
            time.sleep(0.2)
        checks.record(c.run("scancel", f"{array}_1", check=False).returncode == 0, "scancel of shard 1's task")
        wait_empty(c, "first submission")
        first_seconds = time.monotonic() - t0
        state, code = job_field(c, merge, "JobState"), job_field(c, merge, "ExitCode")
        checks.record(state == "FAILED" and code == "1:0", f"the merge after a killed shard exits 1 ({state}, {code})")
        index = open(os.path.join(out, "latest", "index.md")).read()
        checks.record("shard 1 of 4: **missing**" in index and "Incomplete sweep: 1 of 4" in index,
                      "the report's header names the killed shard as missing")
        killed = sweep.read_plan(out)[1]
        if "entropy" in killed["steps"]:  # its only input was in the killed shard: the report says so
            text = open(os.path.join(out, "latest", "entropy.md")).read()
            checks.record(text.startswith("# entropy\n\nNot in this run: entropy.json is missing"),
                          f"the entropy report of the incomplete sweep says its input is missing ({text[:80]!r})")
        others = [p for line in sweep.read_plan(out) if line["shard"] != 1 for p in line["accuracy"]]
        acc = json.load(open(os.path.join(out, "latest", "data", "accuracy.json")))
        checks.record(sorted({p["problem"] for p in acc["points"]}) == sorted(others),
                      "the incomplete sweep's accuracy holds exactly the problems of the shards that completed")
        log = open(os.path.join(out, "slurm", "logs", "shard-1.err")).read()
        checks.record("[shard 1/4 step" in log and "complete in" not in log, "shard 1 was killed while running")
        left = [f for f in os.listdir(scratch) if f.startswith("attn-shard-")]
        checks.record(not left, f"every shard's scratch folder removed, the killed one's too: {left}")
        got = records(out)
        checks.record(sorted(got) == [0, 2, 3] and all(r["status"] == "complete" for r in got.values()),
                      f"shards 0, 2, 3 complete, no result for 1 ({sorted(got)})")
        first_jobs = {i: r["slurm"].get("SLURM_ARRAY_JOB_ID") for i, r in got.items()}
        # 3. The same command again: only shard 1 runs.
        t1 = time.monotonic()
        array2, merge2 = submit(c, out)
        wait_empty(c, "second submission")
        second_seconds = time.monotonic() - t1
        state, code = job_field(c, merge2, "JobState"), job_field(c, merge2, "ExitCode")
        checks.record(state == "COMPLETED" and code == "0:0", f"the complete sweep's merge exits 0 ({state}, {code})")
        got = records(out)
        checks.record(all(got[i]["slurm"].get("SLURM_ARRAY_JOB_ID") == first_jobs[i] for i in (0, 2, 3)) and
                      got[1]["slurm"].get("SLURM_ARRAY_JOB_ID") == array2,
                      "re-submitted: shards 0, 2, 3 kept (skipped), shard 1 ran in the second array")
        for i in (0, 2, 3):
            log = open(os.path.join(out, "slurm", "logs", f"shard-{i}.err")).read()
            checks.record("already complete" in log and "skipped" in log, f"shard {i}'s second task says it skipped")
        index = open(os.path.join(out, "latest", "index.md")).read()
        checks.record("Incomplete" not in index and "missing" not in index.split("## Machine")[0],
                      "the complete sweep's header names no missing shard")
        data = os.path.join(out, "latest", "data")
        bench = json.load(open(os.path.join(data, "bench.json")))
        merged = {b.get("run_name", b["name"]) for b in bench["benchmarks"]}
        checks.record(merged == bench_names, f"every benchmark of the plan is in the merged report "
                                             f"({len(merged)} of {len(bench_names)}; absent: "
                                             f"{sorted(bench_names - merged)[:3]})")
        reps = {}
        for b in bench["benchmarks"]:
            if b.get("run_type") == "iteration" and not b.get("error_occurred"):
                reps[b["run_name"]] = reps.get(b["run_name"], 0) + 1
        checks.record(set(reps.values()) == {2}, f"every benchmark that ran has its 2 smoke repetitions "
                                                 f"({sorted(set(reps.values()))})")
        problems = [json.loads(line)["index"] for line in run(
            os.path.join(ROOT, "build/tools/attn-lab"), "accuracy", "--profile", "smoke", "--list").stdout.splitlines()]
        problems = [i for i in problems if re.search(ONLY, f"accuracy/{i}")]
        acc = json.load(open(os.path.join(data, "accuracy.json")))
        checks.record(sorted({p["problem"] for p in acc["points"]}) == problems and acc["gradient_points"],
                      f"every accuracy problem of the plan is in the merged report ({problems})")
        claims = [c for c in run(os.path.join(ROOT, "build/tools/attn-lab"), "claims", "--list").stdout.split()
                  if re.search(ONLY, f"claims/{c}")]
        got_claims = [cl["id"] for cl in json.load(open(os.path.join(data, "claims.json")))["claims"]]
        checks.record(got_claims == sorted(claims), f"every claim of the plan is in the merged report ({claims})")
        checks.record(all(os.path.isfile(os.path.join(data, n)) for n in ("entropy.json", "heatmaps.json",
                                                                         "explorer.json", "peak.json", "build.json")),
                      "the selected single steps' data are in the merged report")
        checks.record(not any(os.path.exists(os.path.join(data, n)) for n in ("invariance.json", "verdicts.json")),
                      "the steps --only left out left no data")
        checks.record("selects, not the whole profile" in index, "the report says the plan is a subset")
        print(f"local Slurm, part of the smoke profile: first array (shard 1 killed) and merge {first_seconds:.0f} s; "
              f"re-submission (one shard) and merge {second_seconds:.0f} s")
    gone = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    checks.record(not gone and not os.path.exists(cluster_dir),
                  f"every daemon stopped and the cluster's folder removed (alive: {gone})")
    return out


def check_grouping(work, out):
    """Two machine types (one simulated by editing a shard's recorded CPU) and a stale shard."""
    two = os.path.join(work, "two")
    shutil.copytree(out, two, ignore=shutil.ignore_patterns("runs", "latest", "slurm"))
    path = sweep.shard_path(two, 2)
    rec = json.load(open(path))
    rec["data"]["peak.json"]["cpu"] = "Simulated CPU (test_slurm: a second kind of node)"
    rec["machine"], rec["fingerprint"] = None, None
    with tempfile.TemporaryDirectory() as d:
        for name, content in rec["data"].items():
            json.dump(content, open(os.path.join(d, name), "w"))
        rec["machine"], rec["fingerprint"] = sweep.machine_of(d)
    json.dump(rec, open(path, "w"))
    r = run(sys.executable, "-m", "attention_lab.sweep", "merge", two)
    index = open(os.path.join(two, "latest", "index.md")).read() if os.path.exists(os.path.join(two, "latest")) else ""
    sections = re.findall(r"\]\(machines/(\w+)/index.md\)", index)
    checks.record(r.returncode == 0 and len(sections) == 2 and rec["fingerprint"] in sections,
                  f"two machine types: two sections ({sections}; {r.stderr[-300:]})")
    checks.record(all(os.path.isfile(os.path.join(two, "latest", "machines", fp, "performance.md")) for fp in sections),
                  "each machine type has its own whole report")
    cross = [line for line in index.splitlines() if line.startswith("| attn")]
    on = {line.split("|")[2].strip() for line in cross}
    checks.record(on == set(sections) and len(cross) == len({line.split("|")[1] for line in cross}),
                  f"the cross-machine table has each benchmark once, on the machine it ran on ({len(cross)} rows)")
    checks.record("Simulated CPU" in open(os.path.join(two, "latest", "machines", rec["fingerprint"],
                                                       "index.md")).read(), "the simulated machine's own section")
    good = dict(rec)
    rec["plan"] = "000000000000"
    json.dump(rec, open(path, "w"))
    r = run(sys.executable, "-m", "attention_lab.sweep", "merge", two)
    index = open(os.path.join(two, "latest", "index.md")).read()
    checks.record(r.returncode == 1 and "shard 2 of 4: **stale**" in index,
                  f"a shard of another plan is named stale and the merge exits 1 ({r.returncode})")
    failed = {k: v for k, v in good.items() if k != "data"}
    failed.update(status="failed", error="claims: attn-lab claims ... exited 1")
    json.dump(failed, open(path, "w"))
    r = run(sys.executable, "-m", "attention_lab.sweep", "merge", two)
    index = open(os.path.join(two, "latest", "index.md")).read()
    checks.record(r.returncode == 1 and "shard 2 of 4: **failed** (claims: attn-lab claims ... exited 1)" in index,
                  f"a failed shard is named with its error and the merge exits 1 ({r.returncode})")
    # A shard complete under another plan id is run again, not skipped: its first progress line is a step.
    rec["status"] = "complete"
    json.dump(rec, open(path, "w"))
    scratch = os.path.join(work, "tmp")  # the killed shard's scratch folder goes with the test's
    os.makedirs(scratch)
    p = subprocess.Popen([sys.executable, "-m", "attention_lab.sweep", "shard", "2/4", "--out", two], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=module_env(dict(os.environ, TMPDIR=scratch)))
    first = p.stderr.readline()
    os.killpg(p.pid, signal.SIGKILL)  # the shard and the tool it started
    p.wait()
    checks.record(first.startswith("[shard 2/4 step 1/"), f"a result of another plan is not skipped ({first!r})")


def test_slurm_sweep():
    for tool in (os.path.join(ROOT, "build/bench/attn-bench"), os.path.join(ROOT, "build/tools/attn-lab")):
        if not os.access(tool, os.X_OK):
            raise AssertionError(f"{tool} is not built")
    with tempfile.TemporaryDirectory(prefix="attn-test-slurm-") as work:
        bench_names = check_plan(work)
        out = check_slurm(work, bench_names)
        check_grouping(work, out)
    checks.finish()

