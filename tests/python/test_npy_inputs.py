#!/usr/bin/python3
"""npy_inputs: every input path of every attn-lab command, end to end from
files written by NumPy itself, at every rank and dtype the help promises.

    test_npy_inputs.py ATTN_LAB

A path is right when the same values reach the backend whatever the file's
rank, dtype or mask encoding: each variant's output must equal, bit for bit,
the output of a canonical file (float64, rank 4 or 3), and the written
outputs must have the inputs' rank. Values are chosen exactly representable
in float16, so every dtype carries the same numbers. Wrong ranks and
mismatched files must be one clear error line and exit status 2.
"""
import json
import os
import subprocess
import tempfile

import numpy as np

from checklib import Checks
from paths import ATTN_LAB

SEED = 20261130
BASELINE = next(b["name"] for b in json.loads(subprocess.run([ATTN_LAB, "list", "--json"], capture_output=True,
                                                             text=True, check=True).stdout)["backends"]
                if b["traits"]["baseline"])


CHECKS = Checks()
record = CHECKS.record


def run(args, cwd, status=0):
    p = subprocess.run([ATTN_LAB] + args, cwd=cwd, capture_output=True, text=True)
    ok = p.returncode == status
    if status == 2:
        lines = p.stderr.strip().splitlines()
        ok = ok and len(lines) == 1 and lines[0].startswith("attn-lab: ")
    record(ok, f"attn-lab {' '.join(args)}: exit {p.returncode} (want {status}): {p.stderr.strip()}")
    return p


def halves(rng, shape):
    """Normal values rounded to float16, so f8, f4 and f2 files hold the same numbers."""
    return rng.normal(size=shape).astype(np.float16).astype(np.float64)


def check_attend(work, rng):
    B, H, NQ, NKV, DK, DV = 1, 1, 6, 9, 4, 3
    q, k, v = halves(rng, (B, H, NQ, DK)), halves(rng, (B, H, NKV, DK)), halves(rng, (B, H, NKV, DV))
    common = ["--backend", BASELINE, "--precision", "fp64", "--force"]

    def attend(files, *extra):
        run(["attend", "--q", files[0], "--k", files[1], "--v", files[2], "--out", "o.npy", "--weights", "w.npy",
             "--lse", "l.npy"] + common + list(extra), work)
        return [np.load(os.path.join(work, f)) for f in ("o.npy", "w.npy", "l.npy")]

    for nm, t in (("q", q), ("k", k), ("v", v)):
        np.save(os.path.join(work, nm + "4.npy"), t)
    canonical = attend(["q4.npy", "k4.npy", "v4.npy"])
    for rank in (2, 3, 4):
        for dtype in (np.float64, np.float32, np.float16):
            names = []
            for nm, t in (("q", q), ("k", k), ("v", v)):
                f = f"{nm}_{rank}_{np.dtype(dtype).str[1:]}.npy"
                np.save(os.path.join(work, f), t.reshape(t.shape[4 - rank:]).astype(dtype))
                names.append(f)
            o, w, lse = attend(names)
            label = f"attend rank {rank} {np.dtype(dtype).name}"
            record(o.ndim == rank and w.ndim == rank and lse.ndim == rank - 1,
                   f"{label}: outputs of rank {o.ndim}, {w.ndim}, {lse.ndim}")
            record(all(np.array_equal(a.reshape(c.shape), c) for a, c in zip((o, w, lse), canonical)),
                   f"{label}: results differ from the float64 rank-4 files")
    # Ranks that differ, and a rank the help does not promise.
    np.save(os.path.join(work, "k3.npy"), k[0])
    run(["attend", "--q", "q4.npy", "--k", "k3.npy", "--v", "v4.npy"], work, status=2)
    np.save(os.path.join(work, "q1.npy"), q.reshape(-1))
    run(["attend", "--q", "q1.npy", "--k", "q1.npy", "--v", "q1.npy"], work, status=2)

    # Masks: one visibility pattern in every encoding and dtype the help names.
    lengths = 5
    allowed = np.zeros((NQ, NKV), dtype=bool)
    allowed[:, :lengths] = True
    encodings = {
        "keypad int64": ("keypad", np.array([lengths], dtype=np.int64)),
        "keypad int32": ("keypad", np.array([lengths], dtype=np.int32)),
        "keypad float64": ("keypad", np.array([lengths], dtype=np.float64)),
        "bool bool": ("bool", allowed),
        "bool uint8": ("bool", allowed.astype(np.uint8)),
        "bool float64": ("bool", allowed.astype(np.float64)),
        "bias float64": ("bias", np.where(allowed, 0.0, -np.inf)),
        "bias float32": ("bias", np.where(allowed, 0.0, -np.inf).astype(np.float32)),
    }
    results = {}
    for label, (kind, array) in encodings.items():
        f = label.replace(" ", "_") + ".npy"
        np.save(os.path.join(work, f), array)
        results[label] = attend(["q4.npy", "k4.npy", "v4.npy"], "--mask", f"{kind}:{f}")
    first = results["keypad int64"]
    record(not np.array_equal(first[0], canonical[0]), "masks: the key-padding mask changed nothing")
    record(bool((first[1][..., lengths:] == 0).all()), "masks: padded keys have nonzero weight")
    for label, r in results.items():
        record(all(np.array_equal(a, b) for a, b in zip(r, first)), f"mask {label}: differs from keypad int64")
    # A bias of another shape, a keypad of the wrong length.
    np.save(os.path.join(work, "bias_wrong.npy"), np.zeros((NQ + 1, NKV)))
    run(["attend", "--q", "q4.npy", "--k", "k4.npy", "--v", "v4.npy", "--mask", "bias:bias_wrong.npy"], work, 2)
    np.save(os.path.join(work, "keypad_wrong.npy"), np.array([1, 2]))
    run(["attend", "--q", "q4.npy", "--k", "k4.npy", "--v", "v4.npy", "--mask", "keypad:keypad_wrong.npy"], work, 2)


def check_layer(work, rng):
    L, S, E, KD, heads = 7, 5, 8, 6, 2
    x, kv = halves(rng, (1, L, E)), halves(rng, (1, S, KD))
    wdir = os.path.join(work, "in_proj")
    sdir = os.path.join(work, "separate")
    os.mkdir(wdir)
    os.mkdir(sdir)
    w_in, b_in = halves(rng, (3 * E, E)), halves(rng, (3 * E,))
    w_o, b_o = halves(rng, (E, E)), halves(rng, (E,))
    for d in (wdir, sdir):
        np.save(os.path.join(d, "out_proj.weight.npy"), w_o)
        np.save(os.path.join(d, "out_proj.bias.npy"), b_o)
        np.save(os.path.join(d, "in_proj_bias.npy"), b_in)
    np.save(os.path.join(wdir, "in_proj_weight.npy"), w_in)
    for i, nm in enumerate("qkv"):
        np.save(os.path.join(sdir, f"{nm}_proj_weight.npy"), w_in[i * E:(i + 1) * E])
    common = ["--heads", str(heads), "--backend", BASELINE, "--precision", "fp64", "--out", "o.npy", "--force"]

    def layer(xf, weights, *extra):
        run(["layer", "--x", xf, "--weights", weights] + common + list(extra), work)
        return np.load(os.path.join(work, "o.npy"))

    np.save(os.path.join(work, "x3.npy"), x)
    canonical = layer("x3.npy", "in_proj")
    record(canonical.shape == (1, L, E), f"layer: output shape {canonical.shape}")
    record(np.array_equal(layer("x3.npy", "separate"), canonical), "layer: separate q/k/v weights differ from in_proj")
    for dtype in (np.float64, np.float32, np.float16):
        f = f"x2_{np.dtype(dtype).str[1:]}.npy"
        np.save(os.path.join(work, f), x[0].astype(dtype))
        o = layer(f, "in_proj")
        record(o.shape == (1, L, E) and np.array_equal(o, canonical), f"layer --x rank 2 {np.dtype(dtype).name}")
    # Cross-attention with kdim = vdim != E: separate weights of [E, kdim].
    cdir = os.path.join(work, "cross")
    os.mkdir(cdir)
    for nm in ("out_proj.weight", "out_proj.bias", "in_proj_bias"):
        np.save(os.path.join(cdir, nm + ".npy"), np.load(os.path.join(wdir, nm + ".npy")))
    np.save(os.path.join(cdir, "q_proj_weight.npy"), w_in[:E])
    np.save(os.path.join(cdir, "k_proj_weight.npy"), halves(rng, (E, KD)))
    np.save(os.path.join(cdir, "v_proj_weight.npy"), halves(rng, (E, KD)))
    np.save(os.path.join(work, "kv3.npy"), kv)
    np.save(os.path.join(work, "kv2.npy"), kv[0].astype(np.float32))
    c3 = layer("x3.npy", "cross", "--kv", "kv3.npy")
    c2 = layer("x2_f2.npy", "cross", "--kv", "kv2.npy")
    record(c3.shape == (1, L, E) and np.array_equal(c2, c3), "layer --kv rank 2 float32 differs from rank 3 float64")
    record(not np.array_equal(c3, canonical), "layer --kv changed nothing")
    # Ranks the help does not promise; weights of the wrong shape.
    np.save(os.path.join(work, "x4.npy"), x[None])
    run(["layer", "--x", "x4.npy", "--weights", "in_proj"] + common, work, status=2)
    np.save(os.path.join(work, "x1.npy"), x.reshape(-1))
    run(["layer", "--x", "x1.npy", "--weights", "in_proj"] + common, work, status=2)
    run(["layer", "--x", "x3.npy", "--weights", "cross"] + common, work, status=2)  # self-attention, kdim != E
    run(["layer", "--x", "x3.npy", "--weights", "missing_dir"] + common, work, status=2)


def test_every_input_path_from_numpy_files():
    with tempfile.TemporaryDirectory() as work:
        rng = np.random.default_rng(SEED)
        print(f"numpy {np.__version__}, seed {SEED}")
        check_attend(work, rng)
        check_layer(work, rng)
    CHECKS.finish()
