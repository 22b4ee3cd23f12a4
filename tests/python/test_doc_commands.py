#!/usr/bin/python3
"""doc_commands: every command line the README, the guides and the help texts show is run.

    python3 -m pytest tests/python/test_doc_commands.py   (ATTN_DOC_FAST=1, ATTN_DOC_LIST=1: see below)

ATTN_DOC_FAST=1 (scripts/test --fast, meson test doc_first): only the
README's commands (the five-minute tour), without `scripts/run` (minutes: the
full test runs it) and without the help texts. ATTN_DOC_LIST=1 lists them.

Commands come from
  - README.md and docs/*.md: every line of an indented code block that starts with
    `build/`, `scripts/` or `cc` (a plugin's build line: its source paths
    point into SOURCE_ROOT, and a later command naming the library it
    builds, --plugin ./libmine.so, gets it built in its folder), after any VAR=value assignments (set in its
    environment; a value starting with build/ points into BUILD, as such
    arguments do) and /usr/bin/python3 (a trailing backslash continues the line);
  - `attn-lab --help` and `attn-lab COMMAND --help` for every command it
    lists, `attn-bench --help`, `scripts/run --help` and `scripts/slurm/submit --help`: the indented lines
    under an "examples:" heading.
Each runs in a fresh folder, after the input files it names are written by
NumPy with the shapes the command implies (.npy tensors, masks, a PyTorch
nn.MultiheadAttention state_dict for `--weights DIR` of `layer`); the
committed runs it names (reports/runs/..., reports/latest) are read from
SOURCE_ROOT. A command
fails on a non-zero exit or an error line (a line starting with
"attn-lab:", "attn-bench:", "scripts/run:", a Python traceback, or Google
Benchmark's "ERROR OCCURRED"). One is not run, for a stated reason:
`scripts/test` (this test is part of it). `scripts/run` runs with `--out`
pointing into the scratch folder, so the committed reports/ are not touched,
and, where the command names no profile, at `--profile smoke`: every step
and the report, in about five minutes instead of the quick profile's fifty;
its sweep commands (--plan, --shard, --merge) share one scratch folder per
named folder, in the order given, and `scripts/slurm/submit` runs with
`--dry-run` (test_slurm submits to a real Slurm)
(the measurement itself is what the committed run records;
report.py is tested on synthetic data by test_report.py, and
readme_figures --check renders the committed quick run's figures).
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time

import numpy as np

from paths import BUILD, SOURCE as SRC  # noqa: E402

# ATTN_DOC_FAST=1: the README's first commands only (the fast loop's doc_first); ATTN_DOC_LIST=1: list, run nothing
LIST_ONLY = os.environ.get("ATTN_DOC_LIST") == "1"
FAST = os.environ.get("ATTN_DOC_FAST") == "1"
PROGRAMS = {
    "attn-lab": [os.path.join(BUILD, "tools", "attn-lab")],
    "attn-bench": [os.path.join(BUILD, "bench", "attn-bench")],
    "scripts/run": [os.path.join(SRC, "scripts", "run")],
    "scripts/slurm/submit": [os.path.join(SRC, "scripts", "slurm", "submit")],
    "props": [os.path.join(BUILD, "tests", "cpp", "props")],
    "cc": ["cc"],  # a plugin's build line: source paths point into SOURCE_ROOT
}
INTERPRETERS = {"/usr/bin/python3"}
ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")
NOT_RUN = {"scripts/test": "the test suite itself runs this test"}
# (a benchmark point a plugin does not support is reported as such, not an error)
ERROR_LINE = re.compile(r"^(attn-lab:|attn-bench:|scripts/run:|Traceback|.*ERROR OCCURRED(?!: 'not supported: ))")
SEED = 20261130
SWEEPS = tempfile.mkdtemp(prefix="attn-doc-sweeps-")  # removed by main


def program_of(word):
    """The program a command's first word names, or None."""
    if word == "cc":
        return "cc"
    for name in list(PROGRAMS) + list(NOT_RUN):
        if word == name or word.endswith("/" + name) and word.startswith("build/"):
            return name
    return None


def split_command(words):
    """(environment assignments, program name or None, arguments) of a command's
    words: leading VAR=value words set the environment, and a leading
    interpreter (/usr/bin/python3) runs the script that follows it."""
    env = {}
    while words and ENV_WORD.match(words[0]):
        key, value = words[0].split("=", 1)
        env[key] = value
        words = words[1:]
    if words and words[0] in INTERPRETERS:
        words = words[1:]
    return env, (program_of(words[0]) if words else None), words[1:]


def words_of(line):
    """A line's words as the shell splits them (quotes kept together); plain split if it cannot."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


# The guides under docs/ the README sends a reader to (its "Where to go next"); the design notes and the
# performance analysis (DESIGN.md, EXAMPLES.md, performance.md) are records, their commands not a tour.
GUIDES = ("usage.md", "benchmarking.md", "verification.md", "plugins.md", "cluster.md")


def documents():
    """README.md and every guide (the fast loop: the README alone)."""
    return ["README.md"] + ([] if FAST else [os.path.join("docs", g) for g in GUIDES])


def readme_commands():
    commands = []
    for doc in documents():
        commands += doc_commands(doc)
    return commands


def doc_commands(doc):
    lines = open(os.path.join(SRC, doc)).read().splitlines()
    commands, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("    ") and not line.startswith("     ") and split_command(words_of(line))[1]:
            text = line.strip()
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            text = text.split("  #")[0].strip()  # a trailing comment
            if not (FAST and split_command(words_of(text))[1] == "scripts/run"):
                commands.append((doc, text))
        i += 1
    return commands


def help_examples(origin, text):
    out, on = [], False
    for line in text.splitlines():
        if line.strip().lower() in ("examples:", "example:"):
            on = True
            continue
        if on:
            if not line.startswith("  ") or not line.strip():
                on = False
                continue
            words = line.split()
            if program_of(words[0]):
                out.append((origin, line.strip()))
    return out


def help_commands():
    def help_of(argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout

    lab = PROGRAMS["attn-lab"][0]
    top = help_of([lab, "--help"])
    found = help_examples("attn-lab --help", top)
    names = re.findall(r"^  attn-lab ([a-z]+)\b", top, flags=re.M)
    for name in sorted(set(names)):
        found += help_examples(f"attn-lab {name} --help", help_of([lab, name, "--help"]))
    found += help_examples("attn-bench --help", help_of(PROGRAMS["attn-bench"] + ["--help"]))
    found += help_examples("scripts/run --help", help_of(PROGRAMS["scripts/run"] + ["--help"]))
    found += help_examples("scripts/slurm/submit --help", help_of(PROGRAMS["scripts/slurm/submit"] + ["--help"]))
    return found, sorted(set(names))


# --- Inputs the commands name ---------------------------------------------------

def torch_state_dict(folder, embed, heads, kdim=None):
    import torch
    torch.manual_seed(SEED)
    mha = torch.nn.MultiheadAttention(embed, heads, batch_first=True, kdim=kdim, vdim=kdim).double()
    os.makedirs(folder, exist_ok=True)
    for key, t in mha.state_dict().items():
        np.save(os.path.join(folder, key + ".npy"), t.detach().numpy())


def option(args, name, default=None):
    for k, a in enumerate(args):
        if a == name and k + 1 < len(args):
            return args[k + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return default


def source_paths(args):
    """A cc line's arguments with the repository's paths (include, plugins/...) in SOURCE_ROOT."""
    return [os.path.join(SRC, a) if a == "include" or a.startswith("plugins/") else a for a in args]


def write_inputs(args, work, rng):
    """Writes the input files `args` (after the program) names, with shapes the command implies."""
    if not args:
        return
    command = args[0]
    # A plugin library the README builds with cc (-o NAME): built here by that very line.
    plugin = option(args, "--plugin")
    if plugin and not plugin.startswith("build/"):
        name = os.path.basename(plugin)
        line = next((t for _, t in readme_commands() if t.startswith("cc ") and f"-o {name}" in t), None)
        if line:
            subprocess.run(["cc"] + source_paths(shlex.split(line)[1:]), cwd=work, check=True)
    if command == "attend":
        # the variants' files: one value per query head, one document id per key
        H, NKV = 2, 16  # the file inputs below
        if option(args, "--random"):
            dims = [int(x) for x in option(args, "--random").split(",")]
            H, NKV = dims[1], dims[3]
        for name in ("--sinks", "--alibi-slopes"):
            if option(args, name):
                np.save(os.path.join(work, option(args, name)), rng.normal(size=H) if name == "--sinks"
                        else 2.0 ** -np.arange(1, H + 1))
        if option(args, "--segments"):
            np.save(os.path.join(work, option(args, "--segments")), (np.arange(NKV) * 4 // NKV).astype(np.int64))
    if command == "attend" and option(args, "--q"):
        H, NQ, NKV, DK, DV = 2, 12, 16, 8, 6  # rank-3 files: [heads, n, d], batch 1
        np.save(os.path.join(work, option(args, "--q")), rng.normal(size=(H, NQ, DK)))
        np.save(os.path.join(work, option(args, "--k")), rng.normal(size=(H, NKV, DK)))
        np.save(os.path.join(work, option(args, "--v")), rng.normal(size=(H, NKV, DV)))
        if option(args, "--grad-out"):
            np.save(os.path.join(work, option(args, "--grad-out")), rng.normal(size=(H, NQ, DV)))
        mask = option(args, "--mask", "")
        kind, _, path = mask.partition(":")
        if kind == "bias":
            dist = np.arange(NQ)[:, None] + (NKV - NQ) - np.arange(NKV)[None, :]
            np.save(os.path.join(work, path), np.where(dist >= 0, -0.25 * dist, -np.inf))  # ALiBi, causal
        elif kind == "bool":
            np.save(os.path.join(work, path), rng.random((NQ, NKV)) < 0.7)
        elif kind == "keypad":
            np.save(os.path.join(work, path), np.array([NKV - 3], dtype=np.int64))
    if command == "layer" and option(args, "--x"):
        heads = int(option(args, "--heads", "4"))
        embed = 8 * heads
        np.save(os.path.join(work, option(args, "--x")), rng.normal(size=(2, 9, embed)))
        kdim = None
        if option(args, "--kv"):
            kdim = embed + 4  # cross-attention from a memory of another width: separate projections
            np.save(os.path.join(work, option(args, "--kv")), rng.normal(size=(2, 5, kdim)))
        if option(args, "--weights"):
            torch_state_dict(os.path.join(work, option(args, "--weights")), embed, heads, kdim)


# --- Running -------------------------------------------------------------------------

def run_command(origin, text, failures):
    env, name, args = split_command(shlex.split(text))
    if name in NOT_RUN:
        print(f"not run: {text}  ({origin}): {NOT_RUN[name]}")
        return
    with tempfile.TemporaryDirectory() as work:
        write_inputs(args, work, np.random.default_rng(SEED))
        # Arguments naming the build's programs (build/bench/attn-bench) point into BUILD.
        args = [os.path.join(BUILD, a[len("build/"):]) if a.startswith("build/") else a for a in args]
        # ... and the committed runs (attn-lab compare, history append) into SOURCE_ROOT, read only.
        args = [os.path.join(SRC, a) if a.startswith("reports/runs/") or a == "reports/latest" else a for a in args]
        if name == "cc":
            args = source_paths(args)
        env = {k: os.path.join(BUILD, v[len("build/"):]) if v.startswith("build/") else v for k, v in env.items()}
        sweep_mode = name == "scripts/run" and {"--plan", "--shard", "--merge"} & set(args)
        if sweep_mode:  # a sweep's commands share their folder, in SWEEPS, in the order the README gives them
            args = [os.path.join(SWEEPS, os.path.basename(a.rstrip("/"))) if i > 0 and args[i - 1] in ("--out", "--merge")
                    else a for i, a in enumerate(args)]
        elif name == "scripts/slurm/submit":  # written and planned, not submitted (test_slurm submits to a real Slurm)
            args = args + ["--dry-run", "--out", os.path.join(work, "sweep")]
            text += "  [--dry-run]"
        elif name == "scripts/run":
            args = args + ["--out", os.path.join(work, "reports")]
            if "--profile" not in args:
                args += ["--profile", "smoke"]
                text += "  [run at --profile smoke]"
        t0 = time.time()
        p = subprocess.run(PROGRAMS[name] + args, cwd=work, capture_output=True, text=True,
                           env=dict(os.environ, **env))
        seconds = time.time() - t0
        errors = [line for line in (p.stdout + "\n" + p.stderr).splitlines() if ERROR_LINE.match(line)]
        ok = p.returncode == 0 and not errors
        print(f"{'ok  ' if ok else 'FAIL'} {seconds:7.1f} s  {text}  ({origin})")
        if not ok:
            failures.append(text)
            print(f"     exit {p.returncode}; " + "; ".join(errors[:5] or p.stderr.strip().splitlines()[-5:]))


def test_every_documented_command_runs():
    readme = readme_commands()
    helps, names = ([], []) if FAST else help_commands()
    commands = readme + helps
    print(f"{len(readme)} commands in {', '.join(documents())}, {len(helps)} in the help texts of attn-lab ({', '.join(names)}), "
          f"attn-bench and scripts/run; seed {SEED}")
    failures = []
    # Every command the help lists has at least one example.
    for name in names:
        if not any(origin == f"attn-lab {name} --help" for origin, _ in helps):
            failures.append(f"attn-lab {name} --help shows no example")
            print(f"FAIL attn-lab {name} --help shows no example")
    seen = set()
    for origin, text in commands:
        key = re.sub(r"^build/\S*/", "", text)  # build/tools/attn-lab ... and attn-lab ... are one command
        if key in seen:
            continue
        seen.add(key)
        if LIST_ONLY:
            print(f"{origin}: {text}")
            continue
        run_command(origin, text, failures)
    print(f"{len(seen)} distinct commands, {len(failures)} failed")
    shutil.rmtree(SWEEPS, ignore_errors=True)
    assert seen, "no command found in the docs"
    assert not failures, f"{len(failures)} commands failed:\n" + "\n".join(failures)
