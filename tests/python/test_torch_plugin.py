#!/usr/bin/python3
"""torch_plugin: PyTorch's CPU attention (plugins/torch, libtorch 1.13) verified by
`attn-lab verify`, its findings pinned to the torch version.

    test_torch_plugin.py ATTN_LAB LIBATTN_TORCH.so

What is known of PyTorch before 2.5: a fully masked row (every key masked)
gives NaN, where the suite's contract (and PyTorch 2.5's "safe softmax",
pytorch issue 103749) gives output 0. The test runs the verdict at the smoke
profile and requires that
  - both kernels (torch-math, torch-sdpa) load and every claimed
    configuration runs;
  - with torch < 2.5, every failed cell is that finding: its saved
    counterexample, replayed through `attn-lab attend`, has NaN in exactly
    the rows the 50-digit reference backend finds fully masked with no sink
    to absorb them (logsumexp -inf; a finite sink gives the row 0 in torch
    too), and nowhere else; a failure of any other kind fails this test (a
    new finding to look at);
  - with torch >= 2.5, no cell fails (so a fix upstream shows as a change,
    not as silence);
  - the properties that never meet a fully masked row pass (permutation
    equivariance, documents = separate runs), so the verdict is not
    failing everything.
"""
import json
import os
import shlex
import subprocess
import tempfile

import numpy as np

from checklib import Checks
from paths import ATTN_LAB, plugin

PLUGIN = plugin("torch")
CHECKS = Checks()
record = CHECKS.record


def torch_version():
    import torch
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]), torch.__version__


def replay(cmd, work, backend_args, outputs):
    argv = shlex.split(cmd)[1:]
    argv = [a for a in argv if a != "--check"]
    if backend_args:  # the same inputs through another backend (no plugin)
        i = argv.index("--plugin")
        del argv[i:i + 2]
        i = argv.index("--backend")
        argv[i + 1] = backend_args
    p = subprocess.run([ATTN_LAB] + argv + outputs + ["--force"], cwd=work, capture_output=True, text=True)
    return p


def test_torch_plugin_verdict():
    (major, minor), version = torch_version()
    fixed = (major, minor) >= (2, 5)
    print(f"torch {version}: fully masked rows {'give 0 (safe softmax)' if fixed else 'give NaN (before 2.5)'} expected")
    with tempfile.TemporaryDirectory() as work:
        p = subprocess.run([ATTN_LAB, "verify", "--plugin", PLUGIN, "--profile", "smoke", "--out", "v"], cwd=work,
                           capture_output=True, text=True)
        verdict_path = os.path.join(work, "v", "verdict.json")
        record(os.path.exists(verdict_path) and p.returncode in (0, 1),
               f"verify torch: exit {p.returncode}: {p.stderr[-800:]}")
        if not os.path.exists(verdict_path):
            return CHECKS.finish()
        v = json.load(open(verdict_path))
        names = [k["name"] for k in v["kernels"]]
        record(names == ["torch-math", "torch-sdpa"], f"verify torch: kernels {names}")
        for k in v["kernels"]:
            configs = sorted({c["config"] for c in k["cells"]})
            record(configs == ["bf16/storage", "fp32/fp32", "fp64/fp64"], f"{k['name']}: configurations {configs}")
            by = {(c["property"], c["config"]): c for c in k["cells"]}
            for prop in ("permutation_equivariant", "documents_equal_separate_runs"):
                for cfg in configs:
                    c = by.get((prop, cfg), {})
                    record(c.get("status") == "pass" and c.get("cases", 0) > 0,
                           f"{k['name']} {prop} {cfg}: {c.get('status')} ({c.get('cases')} cases)")
            failed = [c for c in k["cells"] if c["status"] not in ("pass", "not supported")]
            if fixed:
                record(not failed, f"{k['name']}: torch {version} should fail nothing: {[c['property'] for c in failed]}")
                continue
            record(failed, f"{k['name']}: torch {version} < 2.5 should show NaN on fully masked rows somewhere")
            for c in failed:
                what = f"{k['name']} {c['property']} {c['config']}"
                ce = c.get("counterexample")
                if not record(c["status"] == "fail" and ce, f"{what}: a failure with a counterexample ({c['status']})"):
                    continue
                got = replay(ce["replay"], work, None, ["--out", "o.npy"])
                ref = replay(ce["replay"], work, "reference", ["--lse", "l.npy"])
                if not record(got.returncode == 0 and ref.returncode == 0,
                              f"{what}: replays run: {got.stderr[-300:]} {ref.stderr[-300:]}"):
                    continue
                o = np.load(os.path.join(work, "o.npy"))
                # fully masked, and no sink to absorb the row: the reference's logsumexp is -inf
                masked_rows = np.isneginf(np.load(os.path.join(work, "l.npy")))
                nan_rows = np.isnan(o).any(axis=-1)
                record(masked_rows.any() and np.array_equal(nan_rows, masked_rows),
                       f"{what}: NaN exactly on the {int(masked_rows.sum())} fully masked rows "
                       f"(NaN rows {int(nan_rows.sum())}, case {ce['case']})")
    CHECKS.finish()

