#!/usr/bin/python3
"""A sweep as independent shards: a plan, one shard at a time anywhere (a Slurm
array task, a laptop), and a merge of the shards into one run folder.

    scripts/run --plan [--profile P] [--shards N] [--out DIR] [--only REGEX]     sweep.py plan
    scripts/run --shard I/N [--out DIR]                           sweep.py shard
    scripts/run --merge DIR                                       sweep.py merge

What a sweep runs, as items: every benchmark of the profile (attn-bench
--names), every accuracy problem (attn-lab accuracy --problems), every claim
(attn-lab claims --only) and three single steps: the plugins' verdicts
(attn-lab verify), the entropy study and the page data (attention_lab.reports collect).
--only REGEX keeps the items whose label (label(): a benchmark's name,
accuracy/<index>, claims/<id>, step/<name>) it finds; the plan records it.
Every shard also measures its machine's peaks (attn-lab peak) and records its
build: a machine type's report is against its own peak.

The plan (DIR/plan.jsonl) is one JSON line per shard: the plan's id, the
shard's index, what it runs and its estimated seconds. Items are placed
longest first on the least loaded shard (ties: the lower index), so shards
take similar time and the plan is the same for the same profile, shard count,
plugins and code. Estimates come from the cost model, python/attention_lab/cost_model.json
(`sweep.py calibrate RUN` writes it from a run's measurements): a benchmark's
FLOP (backend.hpp's cost model, through attn-bench --list-plan) over its
backend's measured rate, times its repetitions, plus its verification (the
50-digit reference's cost where affordable, else fp64 FLOP); an accuracy
problem's FLOP and reference cost likewise; a claim's measured seconds.

A shard writes DIR/shards/shard-IIII.json atomically: its status (complete, or
failed with the step and its error), host, Slurm job, machine fingerprint
(python/attention_lab/runs.py), estimated and measured seconds and every JSON its steps
wrote. A shard already complete under the same plan id is skipped, so a
re-submitted array reruns only what failed.

The merge groups complete shards by machine fingerprint. One machine type:
one run folder, as scripts/run writes it. Several: a section (a whole report)
per machine type under machines/<fingerprint>/, each against its own measured
peak, and a cross-machine table of every benchmark in fractions of the peak of
the machine it ran on. Missing, failed and stale shards (another plan's) are
named at the top of the index and make the exit status 1.
"""
import argparse
import datetime
import hashlib
import json
import math
import re
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from attention_lab import ROOT, history, io, module_command, module_env, progress, race, reports, runs, stats
from attention_lab.reports import common as report_common

BENCH = os.path.join(ROOT, "build", "bench", "attn-bench")
LAB = os.path.join(ROOT, "build", "tools", "attn-lab")
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cost_model.json")
BRIDGE = os.path.join(ROOT, "build", "plugins", "libattn_python.so")  # Python kernels (attention_lab.bridge)
# The peers every run races and verifies where the bridge is built and PyTorch imports (attention_lab.peers),
# and the fastest CPU runtime of the committed runtime race (attention_lab.race, bench/runtime_race.json).
PEERS = ["python:attention_lab.peers:torch_math", "python:attention_lab.peers:torch_flash"]
PROFILES = ("smoke", "quick", "full")
STEPS = ("verify", "entropy", "invariance", "pages")  # the single steps, one item each
# How each benchmark is timed: smoke runs the pipeline (two one-iteration repetitions, no measurement); the
# others sample adaptively (attn-bench --adaptive: until the 95% interval of the median is at most WIDTH of it
# wide, 6 to MAX samples, about 4 s of sampling at most), so stable long calls stop at six samples and noisy short
# ones take more. The samples are the intervals' and tests' data (python/attention_lab/stats.py).
TIMING = {"smoke": ["--benchmark_repetitions=2", "--benchmark_min_time=0"],
          "quick": ["--adaptive=0.03", "--max-samples=40"],
          "full": ["--adaptive=0.02", "--max-samples=60"]}


class SweepError(Exception):
    """What stops a sweep command: one line."""


def say(text):
    print(text, file=sys.stderr, flush=True)


def output(cmd):
    """A tool's standard output; its failure as one SweepError line."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SweepError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r.stdout


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def commit():
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    sha = git("rev-parse", "HEAD") or "unknown"
    return sha + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def check_binaries():
    """The built tools, and that they run on any x86-64 node: a -march=native build may die with an illegal
    instruction on another kind of node, so a sweep refuses it."""
    for path in (BENCH, LAB):
        if not os.access(path, os.X_OK):
            raise SweepError(f"{os.path.relpath(path, ROOT)} is not built (scripts/setup.sh builds it)")
    if build_options().get("native"):
        raise SweepError("build/ is configured with -Dnative=true: its binaries may die with an illegal instruction "
                         "on another kind of node; reconfigure with -Dnative=false (the default: one portable "
                         "binary that picks its vector kernels at run time)")


def build_options():
    """build/'s meson options, from the file meson writes (a compute node need not have meson)."""
    path = os.path.join(ROOT, "build", "meson-info", "intro-buildoptions.json")
    return {o["name"]: o["value"] for o in io.load_json(path, SweepError, "build/'s meson options")}


def the_build():
    """What built the binaries every shard runs, recorded once in the plan (on the node that built them)."""
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()
    val = build_options()
    return {"compiler": compiler[0] if compiler else "unknown",
            "flags": f"-std={val.get('cpp_std')} buildtype={val.get('buildtype')} native={val.get('native')} "
                     "(-march=native; false: portable, vector kernels chosen at run time)"}


# --- The cost model ---------------------------------------------------------------------------------------


def load_model():
    return io.load_json(MODEL, SweepError, "the cost model (python/attention_lab/cost_model.json)")


def rate(model, backend, precision, pass_):
    """FLOP/s of a backend: its measured rate for this precision and pass, else its slowest measured, else the
    model's rate for an unknown backend (a plugin it has not seen)."""
    r = model["rates"]
    for key in (f"{backend}/{precision}/{pass_}", f"{backend}/*/{pass_}", f"{backend}/*/*"):
        if key in r:
            return r[key]
    return r["*"]


def verify_seconds(model, flops_fp64, reference_cost, budget):
    """The ground truth of a verification: 50 digits where affordable, else fp64 at the model's fp64 rate."""
    if reference_cost <= budget:
        return model["seconds_per_reference_cost"] * reference_cost
    return flops_fp64 / model["verify_fp64_flops_per_second"]


def overhead(model, profile):
    """Seconds per benchmark that FLOP and rates do not see (set-up, verification beyond the model): fitted per
    profile by calibrate; a profile never calibrated takes the quick profile's."""
    o = model["benchmark_overhead_seconds"]
    return o.get(profile, o["quick"])


def bench_seconds(model, e, profile):
    """One benchmark: its timing (smoke: two repetitions of a warm call and one timed call; adaptive: a warm call
    and the samples, six at least, the model's expected count for short calls, at most about 4 s of sampling) and
    its preparation (a cold call and the verification); a point its backend does not support skips at once."""
    if not e.get("supported", True):
        return 0.1
    f = e["attn"]  # the benchmark's fields (attn-bench --list-plan: the schema of attention_lab.bench_json)
    t = e["flops"] / rate(model, f["backend"], f["storage"], f["pass"])
    if profile == "smoke":
        timing = 2 * 2 * t
    else:
        per_sample = max(t, 0.005)  # a sample is a call, or a batch of at least 5 ms
        samples = max(6.0, min(model["adaptive_samples"], 4.0 / per_sample))
        timing = t + samples * per_sample
    return (overhead(model, profile) + timing + t
            + verify_seconds(model, e["verify_flops"], e["verify_reference_cost"], e["reference_budget"]))


def accuracy_seconds(model, p):
    """One accuracy problem: every backend x precision x policy (FLOP at the model's sweep rate), its truths,
    and the gradients where the problem checks them."""
    a = model["accuracy"]
    s = a["overhead_seconds"] + p["flops"] * a["seconds_per_flop"]
    s += verify_seconds(model, 0, p["reference_cost"], p["reference_budget"]) if p["reference_cost"] <= p[
        "reference_budget"] else 0
    if p["backward"]:
        s += p["flops"] * a["backward_seconds_per_flop"]
        if 2.5 * p["reference_cost"] <= p["reference_budget"]:
            s += model["seconds_per_reference_cost"] * 2.5 * p["reference_cost"]
    return s


def claim_seconds(model, claim, profile):
    c = model["claims"]
    measured = c.get(profile, {})
    return measured.get(claim, c["default_seconds"][profile])


# --- The plan ---------------------------------------------------------------------------------------------


def default_plugins():
    if not os.path.isfile(BRIDGE):
        return []
    try:
        import torch  # noqa: F401  (the project's environment has it: scripts/setup.sh)
    except ImportError:
        return []
    winner = race.winner_spec()
    return list(PEERS) + ([winner] if winner and winner not in PEERS else [])


def plugin_arg(p):
    """A plugin as the tools take it: a library's path from the checkout, or a Python kernel's spec as it is."""
    return p if p.startswith("python:") else os.path.join(ROOT, p)


def shown(path):
    """A path as the plan records it: relative to the checkout when inside it (the same on every node); a
    Python kernel's spec as it is."""
    if path.startswith("python:"):
        return path
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def items(profile, plugins):
    """Every item of a sweep with its estimated seconds, in the order a single run runs them."""
    model = load_model()
    flags = [f for p in plugins for f in ("--plugin", plugin_arg(p))]
    out = []
    for e in json_lines(output([BENCH, "--profile", profile, "--list-plan", *flags])):
        out.append({"kind": "bench", "key": e["name"], "seconds": bench_seconds(model, e, profile)})
    for p in json_lines(output([LAB, "accuracy", "--profile", profile, "--list", *flags])):
        out.append({"kind": "accuracy", "key": p["index"], "seconds": accuracy_seconds(model, p)})
    for c in output([LAB, "claims", "--list"]).split():
        out.append({"kind": "claims", "key": c, "seconds": claim_seconds(model, c, profile)})
    for s in STEPS:
        if s != "verify" or plugins:
            out.append({"kind": "step", "key": s, "seconds": model["steps"][s][profile]})
    return out


def label(it):
    """An item's name for --only: a benchmark's name, accuracy/<index>, claims/<id>, step/<name>."""
    return it["key"] if it["kind"] == "bench" else f"{it['kind']}/{it['key']}"


def only_pattern(only):
    """--only's regular expression compiled (None: every item), checked before the items are listed."""
    if only is None:
        return None
    try:
        return re.compile(only)
    except re.error as e:
        raise SweepError(f"--only '{only}': not a regular expression ({e})")


def selected(every, only, profile):
    """The items whose label (label()) the regular expression `only` finds (re.search); all when None."""
    pattern = only_pattern(only)
    if pattern is None:
        return every
    chosen = [it for it in every if pattern.search(label(it))]
    if not chosen:
        raise SweepError(f"--only '{only}' matches no item of the {profile} profile (labels: benchmark names, "
                         "accuracy/<index>, claims/<id>, step/<verify|entropy|invariance|pages>)")
    return chosen


def make_plan(profile, shards, plugins, only=None):
    """The shards: items longest first onto the least loaded shard; within a shard, the single run's order.
    only: a regular expression on the items' labels (selected()), the plan then holding those alone."""
    if profile not in PROFILES:
        raise SweepError(f"--profile must be one of {', '.join(PROFILES)}, not '{profile}'")
    if shards < 1:
        raise SweepError(f"the number of shards must be at least 1, not {shards}")
    plugins = [shown(p) for p in plugins]
    only_pattern(only)  # a bad pattern refused before the tools list the items
    every = selected(items(profile, plugins), only, profile)
    if shards > len(every):
        raise SweepError(f"{shards} shards for {len(every)} items: at most {len(every)}")
    model = load_model()
    order = {(it["kind"], it["key"]): i for i, it in enumerate(every)}
    load = [model["shard_overhead_seconds"][profile]] * shards
    placed = [[] for _ in range(shards)]
    for it in sorted(every, key=lambda it: (-it["seconds"], order[(it["kind"], it["key"])])):
        i = min(range(shards), key=lambda k: (load[k], k))
        placed[i].append(it)
        load[i] += it["seconds"]
    version, build = commit(), the_build()
    lines = []
    for i in range(shards):
        mine = sorted(placed[i], key=lambda it: order[(it["kind"], it["key"])])
        lines.append({"shard": i, "of": shards, "profile": profile, "commit": version, "build": build,
                      "plugins": plugins,
                      **({"only": only} if only is not None else {}),
                      "estimated_seconds": round(load[i], 1),
                      "bench": [it["key"] for it in mine if it["kind"] == "bench"],
                      "accuracy": [it["key"] for it in mine if it["kind"] == "accuracy"],
                      "claims": [it["key"] for it in mine if it["kind"] == "claims"],
                      "steps": [it["key"] for it in mine if it["kind"] == "step"]})
    plan_id = hashlib.sha1(json.dumps(lines, sort_keys=True).encode()).hexdigest()[:12]
    return [{"plan": plan_id, **line} for line in lines]


def plan_text(plan):
    return "".join(json.dumps(line) + "\n" for line in plan)


def read_plan(folder):
    path = os.path.join(folder, "plan.jsonl")
    if not os.path.isfile(path):
        raise SweepError(f"{path}: no plan (scripts/run --plan --out {folder} writes one)")
    try:
        plan = json_lines(open(path).read())
    except json.JSONDecodeError as e:
        raise SweepError(f"{path}: not a plan ({e.msg} at line {e.lineno})")
    if not plan or any(line.get("plan") != plan[0]["plan"] or line.get("shard") != i for i, line in enumerate(plan)):
        raise SweepError(f"{path}: not a plan (its lines must be shards 0 to N-1 of one plan id)")
    return plan


def fmt_minutes(seconds):
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def summary_lines(plan):
    est = [s["estimated_seconds"] for s in plan]
    count = lambda k: sum(len(s[k]) for s in plan)  # noqa: E731
    only = f" (--only '{plan[0]['only']}')" if "only" in plan[0] else ""
    return [f"plan {plan[0]['plan']}: profile {plan[0]['profile']}{only}, {len(plan)} shard(s), commit {plan[0]['commit']}",
            f"  {count('bench')} benchmarks, {count('accuracy')} accuracy problems, {count('claims')} claims, "
            f"steps {', '.join(x for s in plan for x in s['steps']) or 'none'}",
            f"  estimated {fmt_minutes(sum(est))} in all; per shard {fmt_minutes(min(est))} to {fmt_minutes(max(est))}"]


def cmd_plan(args):
    if args.profile not in PROFILES:
        raise SweepError(f"--profile must be one of {', '.join(PROFILES)}, not '{args.profile}'")
    check_binaries()
    only_pattern(args.only)
    plugins = list(dict.fromkeys(p if p.startswith("python:") else os.path.realpath(p)
                                 for p in default_plugins() + args.plugin))
    for p in plugins:
        if not p.startswith("python:") and not os.path.isfile(p):
            raise SweepError(f"plugin '{p}': no such file")
    if args.shards is None:  # shards of about max_shard_minutes each
        total = sum(it["seconds"] for it in selected(items(args.profile, [shown(p) for p in plugins]), args.only,
                                                     args.profile))
        args.shards = max(1, math.ceil(total / (60 * load_model()["max_shard_minutes"])))
    plan = make_plan(args.profile, args.shards, plugins, args.only)
    path = os.path.join(args.out, "plan.jsonl")
    if os.path.isfile(path) and open(path).read() != plan_text(plan) and not args.force:
        raise SweepError(f"{path} holds another plan (another profile, shard count or version); --force replaces it "
                         "(shards of the old plan are then ignored by the merge)")
    io.write_atomic(path, plan_text(plan))
    for line in summary_lines(plan):
        print(line)
    print(f"plan written to {path}")
    return 0


# --- One shard --------------------------------------------------------------------------------------------


def shard_path(folder, i):
    return os.path.join(folder, "shards", f"shard-{i:04d}.json")


# The project environment's packages a run's figures depend on (the peers' PyTorch among them), by name.
PYTHON_PACKAGES = ("torch", "jax", "jaxlib", "openvino", "onnxruntime", "numpy", "scipy", "matplotlib")


def build_info(line):
    """The report's build.json for a shard: the plan's build (compiler, flags, commit), the library versions
    installed on this node (the ones the binary loads here) and the project environment's package versions."""
    pkgs = ["libxtensor-dev", "libxtensor-blas-dev", "libxsimd-dev", "libopenblas0-pthread", "libbenchmark-dev",
            "librapidcheck-dev", "libboost-dev"]
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}, "] + pkgs, capture_output=True, text=True)
    python = {}
    for name in PYTHON_PACKAGES:
        try:
            python[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            python[name] = "not installed"
    return {**line["build"], "libraries": r.stdout.strip().rstrip(",") if r.returncode == 0 else "unknown",
            "python_packages": python, "commit": line["commit"]}


class StepFailed(Exception):
    def __init__(self, step, why):
        super().__init__(f"{step}: {why}")
        self.step = step


def run_step(step, cmd, watch=None, on_line=None, **kw):
    """A step's command, its output on stderr (the shard's log, through the progress display); a failure as
    StepFailed naming it. watch ("stdout" or "stderr"): each line of that stream is shown and goes to on_line
    (progress)."""
    if watch is None:
        kw.setdefault("stdout", sys.stderr)
        r = subprocess.run(cmd, **kw)
        code = r.returncode
    else:
        other = "stderr" if watch == "stdout" else "stdout"
        kw.setdefault(other, sys.stderr)
        p = subprocess.Popen(cmd, text=True, bufsize=1, **{watch: subprocess.PIPE}, **kw)
        for text in getattr(p, watch):
            (PROGRESS.log if PROGRESS else say)(text.rstrip("\n"))
            on_line(text)
        code = p.wait()
    if code != 0:
        raise StepFailed(step, f"{os.path.basename(cmd[0])} {' '.join(cmd[1:3])} ... exited {code}")


# The shard's progress display (progress.Progress over its items), while a shard runs; None otherwise.
PROGRESS = None


class ShardProgress:
    """A shard's items in the order they run, each with its estimated seconds (the plan's cost model), shown as
    progress.Progress: begin(kind, key) when an item starts (the previous one has then finished)."""

    def __init__(self, line, estimates, started):
        self.units = ([("peak", "")] + [("bench", b) for b in line["bench"]]
                      + [("accuracy", a) for a in line["accuracy"]]
                      + [("step", s) for s in ("verify", "entropy", "invariance") if s in line["steps"]]
                      + [("claims", c) for c in line["claims"]]
                      + [("step", "pages")] * ("pages" in line["steps"]))
        self.index = {u: k for k, u in enumerate(self.units)}
        model = load_model()
        est = [model["shard_overhead_seconds"][line["profile"]] if u[0] == "peak" else estimates.get(u, 1.0)
               for u in self.units]
        self.display = progress.Progress(est, f"shard {line['shard']}/{line['of']}", started=started)
        self.current = None

    def begin(self, kind, key):
        k = self.index.get((kind, key))
        if k is None:
            return
        if self.current is not None:
            self.display.finish(self.current)
        self.current = k
        self.display.start(k, f"{kind} {key}" if key != "" else kind)

    def log(self, text):
        self.display.log(text)

    def end(self, final):
        if self.current is not None:
            self.display.finish(self.current)
        self.display.close(final)


def begin(kind, key):
    """Marks an item of the running shard as started (progress), when there is a display."""
    if PROGRESS:
        PROGRESS.begin(kind, key)


def follow(names, kind):
    """on_line for a step whose output names each item when it finishes (attn-bench's console lines): the next
    item starts."""
    state = {"i": 0}
    begin(kind, names[0])

    def on_line(text):
        words = text.split()
        if words and state["i"] < len(names) and words[0] == names[state["i"]]:
            state["i"] += 1
            if state["i"] < len(names):
                begin(kind, names[state["i"]])
    return on_line


def on_accuracy_line(text):
    m = re.match(r"accuracy: problem \d+ of \d+ \(index (\d+)", text)
    if m:
        begin("accuracy", int(m.group(1)))


def on_claims_line(text):
    m = re.match(r"\[\d+/\d+\] claim (\S+)", text)  # attn-lab claims announces each claim on stderr
    if m:
        begin("claims", m.group(1))


# The peaks measured again after a shard's benchmarks (peak.json's "after_bench").
PEAK_AGAIN = ("fp32_fma_gflops_core", "fp32_fma_gflops_all", "bf16_dot_gflops_core", "sgemm_gflops_2048",
              "read_gbs_core", "read_gbs_all")


def shard_steps(line, data):
    """The steps of one shard, in a single run's order: (name, what, function)."""
    profile = line["profile"]
    plugins = [plugin_arg(p) for p in line["plugins"]]
    flags = [f for p in plugins for f in ("--plugin", p)]
    # (smoke: the quick peak, each GEMM probe timed once: 4.6 s instead of 12-14 on a Xeon whose OpenBLAS ran its
    # Prescott kernel, a shard's largest step there; the test suite's smoke sweeps run about eight shards)
    quick = ["--quick"] if profile == "smoke" else []
    steps = [("peak", "attn-lab peak: this machine's peaks",
              lambda: (begin("peak", ""),
                       run_step("peak", [LAB, "peak", *quick, "--out", os.path.join(data, "peak.json")])))]
    if line["bench"]:
        def bench():
            names = os.path.join(data, "names.txt")
            with open(names, "w") as f:
                f.write("".join(n + "\n" for n in line["bench"]))
            run_step("bench", [BENCH, "--profile", profile, "--names", names, *TIMING[profile], *flags,
                               f"--benchmark_out={os.path.join(data, 'bench.json')}", "--benchmark_out_format=json"],
                     watch="stdout", on_line=follow(line["bench"], "bench"))
            os.remove(names)
        steps.append(("bench", f"attn-bench: {len(line['bench'])} benchmarks", bench))

        def peak_after():
            # The same probes again once the benchmarks are done, kept in peak.json as "after_bench": a host whose
            # speed moved during the benchmarks (a neighbour, a frequency change) is said so in the reports.
            after = os.path.join(data, "peak_after.json")
            run_step("peak", [LAB, "peak", "--out", after])
            peak = io.load_json(os.path.join(data, "peak.json"), SweepError)
            again = io.load_json(after, SweepError)
            peak["after_bench"] = {k: again[k] for k in PEAK_AGAIN if k in again}
            io.write_json(os.path.join(data, "peak.json"), peak)
            os.remove(after)
        # Not in the smoke profile, whose figures are not for quoting: the second reading cost 16 s a shard on an
        # Intel Xeon whose OpenBLAS ran its Prescott kernel (the GEMM probes), some 80 s of the test suite's smoke
        # sweeps in all; the report's line on it is tested on data (test_report.py).
        if profile != "smoke":
            steps.append(("peak-after", "attn-lab peak again: the host's speed after the benchmarks", peak_after))
    if line["accuracy"]:
        steps.append(("accuracy", f"attn-lab accuracy: {len(line['accuracy'])} problems",
                      lambda: run_step("accuracy", [LAB, "accuracy", "--profile", profile, "--problems",
                                                    ",".join(map(str, line["accuracy"])), *flags,
                                                    "--out", os.path.join(data, "accuracy.json")],
                                       watch="stderr", on_line=on_accuracy_line)))
    if "verify" in line["steps"]:
        # A smoke run verifies the first plugin only: the step's path (the worker, the verdict into the report) is
        # exercised, and the test suite's four smoke runs spend 30 s less each (three PyTorch / OpenVINO workers took
        # 40 s of a 2-minute run); the quick and full profiles verify every plugin.
        verified = plugins[:1] if profile == "smoke" else plugins

        def verify():
            begin("step", "verify")
            verdicts = []
            for i, p in enumerate(verified):
                folder = os.path.join(data, f"verify-{i}")
                status = subprocess.run([LAB, "verify", "--plugin", p, "--profile",
                                         "smoke" if profile == "smoke" else "quick", "--out", folder],
                                        stdout=sys.stderr).returncode
                if status <= 1:  # 1: a property failed, a verdict
                    verdicts.append(io.load_json(os.path.join(folder, "verdict.json"), SweepError))
                else:
                    say(f"plugin '{p}' could not be used (verify exit {status}); the report has no verdict for it")
                shutil.rmtree(folder, ignore_errors=True)
            if verdicts:
                with open(os.path.join(data, "verdicts.json"), "w") as f:
                    json.dump(verdicts, f)
        steps.append(("verify", f"attn-lab verify: {len(verified)} of {len(plugins)} plugin(s)", verify))
    if "entropy" in line["steps"]:
        steps.append(("entropy", "attn-lab entropy",
                      lambda: (begin("step", "entropy"),
                               run_step("entropy", [LAB, "entropy", "--out", os.path.join(data, "entropy.json")]))))
    if "invariance" in line["steps"]:
        def invariance():
            begin("step", "invariance")
            # exit 1: some comparison is BEYOND the bounds, a verdict the report shows (its problems saved)
            status = subprocess.run([LAB, "invariance", "--profile", profile, *flags, "--out",
                                     os.path.join(data, "invariance.json")], stdout=subprocess.DEVNULL).returncode
            if status > 1:
                raise StepFailed("invariance", f"attn-lab invariance exited {status}")
        steps.append(("invariance", "attn-lab invariance: the invariance matrix", invariance))
    if line["claims"]:
        steps.append(("claims", f"attn-lab claims: {len(line['claims'])} claims",
                      lambda: run_step("claims", [LAB, "claims", "--profile", profile, "--only",
                                                  ",".join(line["claims"]), "--out",
                                                  os.path.join(data, "claims.json")],
                                       stdout=subprocess.DEVNULL, watch="stderr", on_line=on_claims_line)))
    if "pages" in line["steps"]:
        steps.append(("pages", "attention_lab.reports collect: heatmaps and explorer reference points",
                      lambda: (begin("step", "pages"),
                               run_step("pages", module_command("attention_lab.reports", "collect", "--attn-lab",
                                                                   LAB, "--data", data), env=module_env()))))
    return steps


def machine_of(data):
    """The fingerprint fields (runs.py) of a shard's data and their 12-digit hash."""
    load = lambda n: io.load_json(os.path.join(data, n), SweepError) if os.path.isfile(  # noqa: E731
        os.path.join(data, n)) else None
    bench = load("bench.json") or {"context": {}}
    machine = runs.fingerprint_fields(load("peak.json"), load("build.json"), bench["context"])
    return machine, runs.fingerprint_of(machine)


def cmd_shard(args):
    try:
        i, n = (int(x) for x in args.which.split("/"))
    except ValueError:
        raise SweepError(f"--shard needs I/N (shard I of N, from 0), not '{args.which}'")
    plan = read_plan(args.out)
    if n != len(plan) or not 0 <= i < n:
        raise SweepError(f"--shard {args.which}: the plan in {args.out} has {len(plan)} shards (0 to {len(plan) - 1})")
    line = plan[i]
    path = shard_path(args.out, i)
    if os.path.isfile(path):
        try:
            old = json.load(open(path))
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("plan") == line["plan"] and old.get("status") == "complete":
            say(f"shard {i}/{n}: already complete under plan {line['plan']} ({path}); skipped")
            return 0
    check_binaries()
    env = {k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                                      "SLURMD_NODENAME", "SLURM_JOB_PARTITION") if k in os.environ}
    record = {"plan": line["plan"], "shard": i, "of": n, "profile": line["profile"], "host": socket.gethostname(),
              "slurm": env, "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "estimated_seconds": line["estimated_seconds"]}
    start = time.monotonic()
    data = tempfile.mkdtemp(prefix=f"attn-shard-{i}-")

    def removed_on_terminate(signum, _frame):
        # scancel or a time limit (SIGTERM, which no `finally` sees): the scratch folder goes, then the default
        # action, so the shard stays without a result (the merge names it missing) as before
        shutil.rmtree(data, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    signal.signal(signal.SIGTERM, removed_on_terminate)
    global PROGRESS
    try:
        estimates = {(it["kind"], it["key"]): it["seconds"] for it in items(line["profile"], line["plugins"])}
        PROGRESS = ShardProgress(line, estimates, start)
        steps = shard_steps(line, data)
        timings = []
        for k, (name, what, fn) in enumerate(steps, 1):
            PROGRESS.log(f"[shard {i}/{n} step {k}/{len(steps)}] {what}")
            t0 = time.monotonic()
            fn()
            timings.append({"step": name, "seconds": round(time.monotonic() - t0, 1)})
        with open(os.path.join(data, "build.json"), "w") as f:
            json.dump(build_info(line), f)
        record["machine"], record["fingerprint"] = machine_of(data)
        record["status"] = "complete"
        record["steps"] = timings
        record["data"] = {name: io.load_json(os.path.join(data, name), SweepError) for name in sorted(os.listdir(data))
                          if name.endswith(".json")}
    except Exception as e:  # noqa: BLE001 -- any failure is the shard's recorded state, never a lost result
        record["status"], record["error"] = "failed", str(e) or type(e).__name__
        (PROGRESS.log if PROGRESS else say)(f"shard {i}/{n}: failed: {e}")
    finally:
        shutil.rmtree(data, ignore_errors=True)
        if PROGRESS:
            PROGRESS.end(None)
        PROGRESS = None
    record["seconds"] = round(time.monotonic() - start, 1)
    io.write_atomic(path, json.dumps(record) + "\n")
    say(f"shard {i}/{n}: {record['status']} in {fmt_minutes(record['seconds'])} "
        f"(estimated {fmt_minutes(line['estimated_seconds'])}); {path}")
    return 0 if record["status"] == "complete" else 1


# --- The merge --------------------------------------------------------------------------------------------


def shard_states(folder, plan):
    """Each shard of the plan: (line, record or None, state, why)."""
    states = []
    for line in plan:
        path = shard_path(folder, line["shard"])
        if not os.path.isfile(path):
            states.append((line, None, "missing", "no result: never ran, killed or lost"))
            continue
        try:
            rec = json.load(open(path))
        except (OSError, json.JSONDecodeError) as e:
            states.append((line, None, "failed", f"unreadable result ({e})"))
            continue
        if rec.get("plan") != line["plan"]:
            states.append((line, None, "stale", f"a result of another plan ({rec.get('plan')})"))
        elif rec.get("status") != "complete":
            states.append((line, rec, "failed", rec.get("error", "no error recorded")))
        else:
            states.append((line, rec, "complete", ""))
    return states


def merged_data(records, order):
    """One data folder's JSON from the complete shards of one machine type: {file name: content}."""
    out = {}
    datas = [r["data"] for r in records]
    # The peak: the shard with the median one-thread fp32 peak (a measurement, not a blend of several).
    peaks = sorted((d["peak.json"] for d in datas), key=lambda p: p["fp32_fma_gflops_core"])
    out["peak.json"] = peaks[(len(peaks) - 1) // 2]
    benches = [d["bench.json"] for d in datas if "bench.json" in d]
    if benches:
        rows = [b for bench in benches for b in bench["benchmarks"]]
        rank = lambda b: (order.get(b.get("run_name", b["name"]), len(order)), b.get("repetition_index", 0))  # noqa
        out["bench.json"] = {"context": benches[0]["context"], "benchmarks": sorted(rows, key=rank)}
    accs = [d["accuracy.json"] for d in datas if "accuracy.json" in d]
    if accs:
        acc = {"kind": "accuracy", "precisions": accs[0].get("precisions", [])}  # the registry's, in every shard
        for key in ("points", "gradient_points", "not_supported", "problem_seconds"):
            acc[key] = sorted((p for a in accs for p in a.get(key, [])), key=lambda p: p.get("problem", 0))
        out["accuracy.json"] = acc
    claims = [d["claims.json"] for d in datas if "claims.json" in d]
    if claims:
        listed = [c for cl in claims for c in cl["claims"]]
        out["claims.json"] = {"kind": "claims", "profile": claims[0]["profile"],
                              "claims": sorted(listed, key=lambda c: c["id"]),
                              "retired": claims[0].get("retired", [])}  # the ledger's, the same in every shard
    for name in ("entropy.json", "verdicts.json", "invariance.json", "heatmaps.json", "explorer.json"):
        for d in datas:
            if name in d:
                out[name] = d[name]
    build = dict(datas[0]["build.json"])
    build["run_seconds"] = int(sum(r["seconds"] for r in records))  # the shards' time added up
    out["build.json"] = build
    return out


def sweep_section(plan, states):
    """The index's account of the sweep: every shard with its state, host, machine, estimate and measured time."""
    bad = [(line, st, why) for line, _, st, why in states if st != "complete"]
    lines = []
    if bad:
        lines += [f"**Incomplete sweep: {len(bad)} of {len(plan)} shards did not complete; what they ran is not in "
                  f"this report.**", ""]
        for line, st, why in bad:
            what = (f"{len(line['bench'])} benchmarks, accuracy problems {line['accuracy'] or 'none'}, claims "
                    f"{', '.join(line['claims']) or 'none'}, steps {', '.join(line['steps']) or 'none'}")
            lines.append(f"- shard {line['shard']} of {len(plan)}: **{st}** ({why}); it ran {what}")
        lines.append("")
    profile = plan[0]["profile"]
    subset = (f" (the items `--only '{plan[0]['only']}'` selects, not the whole profile)" if "only" in plan[0]
              else "")
    lines += [f"Plan {plan[0]['plan']} (`scripts/run --plan`): profile {profile}{subset}, {len(plan)} shards, "
              f"commit {plan[0]['commit']}: {sum(len(s['bench']) for s in plan)} benchmarks (timed with "
              f"`{' '.join(TIMING[profile])}`), {sum(len(s['accuracy']) for s in plan)} accuracy problems, "
              f"{sum(len(s['claims']) for s in plan)} claims, steps "
              f"{', '.join(sorted({st for s in plan for st in s['steps']})) or 'none'}; estimated "
              f"{fmt_minutes(sum(s['estimated_seconds'] for s in plan))} in all (python/attention_lab/cost_model.json).", "",
              "| shard | state | host | Slurm job | machine | benchmarks | accuracy problems | claims | estimated | "
              "measured |", "|---:|---|---|---|---|---:|---:|---:|---:|---:|"]
    for line, rec, st, _ in states:
        rec = rec or {}
        slurm = rec.get("slurm", {})
        job = (f"{slurm['SLURM_ARRAY_JOB_ID']}_{slurm['SLURM_ARRAY_TASK_ID']}" if "SLURM_ARRAY_JOB_ID" in slurm
               else slurm.get("SLURM_JOB_ID", "-"))
        lines.append(f"| {line['shard']} | {st} | {rec.get('host', '-')} | {job} | {rec.get('fingerprint', '-')} | "
                     f"{len(line['bench'])} | {len(line['accuracy'])} | {len(line['claims'])} | "
                     f"{fmt_minutes(line['estimated_seconds'])} | "
                     f"{fmt_minutes(rec['seconds']) if 'seconds' in rec else '-'} |")
    return lines


def cross_machine_lines(groups):
    """Every benchmark on every machine type it ran on, in fractions of that machine's own measured peak."""
    lines = ["| benchmark | machine | median time | GFLOP/s | fraction of its machine's peak |", "|---|---|---:|---:|---:|"]
    for fp, data in groups:
        peak = data["peak.json"]
        for r in report_common.bench_rows(data["bench.json"]) if "bench.json" in data else []:
            est = report_common.rate_estimate(r)
            if not est:
                continue
            kind = "fp64" if r["precision"] == "fp64" else "fp32"
            own = peak[f"{kind}_fma_gflops_core" if r.get("threads", 1) == 1 else f"{kind}_fma_gflops_all"]
            lines.append(f"| {r['name']} | {fp} | {stats.median(r['samples']) * 1e3:.3g} ms | "
                         f"{est['value']:.1f} | {est['value'] / own:.1%} |")
    return lines


def cmd_merge(args):
    plan = read_plan(args.folder)
    states = shard_states(args.folder, plan)
    complete = [rec for _, rec, st, _ in states if st == "complete"]
    incomplete = len(plan) - len(complete)
    if not complete:
        for line in sweep_section(plan, states):
            say(line)
        raise SweepError(f"{args.folder}: no shard of plan {plan[0]['plan']} is complete: nothing to merge")
    order = {name: k for k, name in enumerate(n for line in plan for n in line["bench"])}
    by_machine = {}
    for rec in complete:
        by_machine.setdefault(rec["fingerprint"], []).append(rec)
    groups = [(fp, merged_data(recs, order)) for fp, recs in sorted(by_machine.items())]
    stamp = args.stamp or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_root = args.out_root or args.folder
    command = args.command or f"scripts/run --merge {args.folder}"
    section = sweep_section(plan, states)
    with tempfile.TemporaryDirectory() as work:
        folders = []
        for fp, data in groups:
            folder = os.path.join(work, fp)
            os.makedirs(folder)
            for name, content in data.items():
                with open(os.path.join(folder, name), "w") as f:
                    json.dump(content, f)
            folders.append((fp, folder))
        previous = None
        if args.history_db and len(groups) == 1 and os.path.exists(args.history_db):
            run = runs.Run(folders[0][1])
            run.stamp = stamp
            previous = history.previous(history.open_store(args.history_db, create=False), run)
        try:
            if len(groups) == 1:
                final, readings = reports.make_report(folders[0][1], out_root, command, stamp, previous, sweep=section)
            else:
                machines = [(fp, folder, by_machine[fp]) for fp, folder in folders]
                final, readings = reports.make_machines_report(machines, out_root, command, stamp, section,
                                                              cross_machine_lines(groups))
        except report_common.ReportError as e:
            raise SweepError(f"report: {e}")
    if args.print_stamp:
        print(stamp)
    say(f"merged {len(complete)} of {len(plan)} shards ({len(groups)} machine type(s)) into {final}")
    if incomplete:
        say(f"incomplete: {incomplete} shard(s) missing or failed (named at the top of {final}/index.md)")
    return 1 if incomplete else 0


# --- Calibration ------------------------------------------------------------------------------------------


def cmd_calibrate(args):
    """Rates of the cost model from a run folder: each backend x precision x pass's median FLOP/s (those it did
    not run keep theirs), the adaptive samples' typical count, and each claim's seconds under the run's profile;
    the rest of the model is kept."""
    run = runs.Run(args.run)
    model = load_model()
    got = {}
    for r in report_common.bench_rows(run.bench):
        est = report_common.rate_estimate(r)
        if est and r["family"] != "attn_decode":  # a decode step's rate is memory's, not the kernel's
            got.setdefault(f"{r['backend']}/{r['precision']}/{r['pass']}", []).append(est["value"] * 1e9)
    # This run's medians; a key it did not measure (a family only the full profile runs) keeps its old rate.
    rates = {k: v for k, v in model["rates"].items() if "*" not in k}
    rates.update({k: statistics.median(v) for k, v in sorted(got.items())})
    # The samples an adaptive benchmark takes where its time cap does not bind (calls of at most 0.1 s).
    counts = [len(b["samples"]) for b in run.bench["benchmarks"] if isinstance(b.get("samples"), list)
              and b.get("seconds_median", 1.0) <= 0.1]
    if counts:
        model["adaptive_samples"] = round(statistics.mean(counts), 1)
    for backend in sorted({k.split("/")[0] for k in rates}):
        rates[f"{backend}/*/*"] = min(v for k, v in rates.items() if k.startswith(backend + "/"))
    rates["*"] = model["rates"]["*"]
    model["rates"] = {k: round(v, -6) for k, v in rates.items()}
    if run.claims:
        model["claims"][run.profile] = {c["id"]: round(c["seconds"], 1) for c in run.claims["claims"]}
    model["calibrated_from"] = f"{run.stamp} ({run.profile}, machine {run.fingerprint}: {runs.describe(run.machine)})"
    # What FLOP and rates do not see (each benchmark's set-up, verification beyond the model, the process's
    # start): spread over the benchmarks so that the plan of the run's profile takes the run's measured time.
    seconds = (run.build or {}).get("run_seconds")
    if seconds and run.profile in PROFILES:
        io.write_atomic(args.out, json.dumps(dict(model, benchmark_overhead_seconds=dict(
            model["benchmark_overhead_seconds"], **{run.profile: 0})), indent=1) + "\n")
        every = items(run.profile, [shown(p) for p in default_plugins()])
        bench = [it for it in every if it["kind"] == "bench"]
        rest = sum(it["seconds"] for it in every) - sum(it["seconds"] for it in bench)
        model["benchmark_overhead_seconds"][run.profile] = round(max(0.0, (seconds - rest - model[
            "shard_overhead_seconds"][run.profile] - sum(it["seconds"] for it in bench)) / len(bench)), 2)
    io.write_atomic(args.out, json.dumps(model, indent=1) + "\n")
    print(f"cost model written to {args.out} from {args.run}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m attention_lab.sweep", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command_name", required=True)
    p = sub.add_parser("plan", help="write DIR/plan.jsonl")
    p.add_argument("--profile", default="quick")
    p.add_argument("--shards", type=int, help="how many (default: shards of about the model's max_shard_minutes)")
    p.add_argument("--out", default="reports/sweep", help="the sweep's folder")
    p.add_argument("--plugin", action="append", default=[])
    p.add_argument("--force", action="store_true", help="replace a different plan in the folder")
    p.add_argument("--only", metavar="REGEX", help="only the items whose label matches (re.search): a benchmark's "
                   "name, accuracy/<index>, claims/<id>, step/<verify|entropy|invariance|pages>")
    p = sub.add_parser("shard", help="run shard I of N of DIR's plan into DIR/shards/")
    p.add_argument("which", metavar="I/N")
    p.add_argument("--out", default="reports/sweep")
    p = sub.add_parser("merge", help="DIR's shards into one run folder")
    p.add_argument("folder")
    p.add_argument("--out-root", help="where runs/<stamp>/ and latest go (default: the sweep's folder)")
    p.add_argument("--stamp")
    p.add_argument("--command")
    p.add_argument("--history-db", help="link the previous run of this machine and profile in this store")
    p.add_argument("--print-stamp", action="store_true")
    p = sub.add_parser("calibrate", help="the cost model's rates from a run folder")
    p.add_argument("run")
    p.add_argument("--out", default=MODEL)
    args = ap.parse_args(argv)
    try:
        return {"plan": cmd_plan, "shard": cmd_shard, "merge": cmd_merge, "calibrate": cmd_calibrate}[
            args.command_name](args)
    except (SweepError, runs.RunError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
