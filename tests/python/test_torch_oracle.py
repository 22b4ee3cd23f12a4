#!/usr/bin/python3
"""torch_oracle: attn-lab against PyTorch (Debian's python3-torch), an
implementation this project did not write, so a misunderstanding shared by
our backends and our reference (weight layout [out, in], bias layout, mask
polarity, kdim/vdim, head splitting, causal alignment) shows up here.

    test_torch_oracle.py ATTN_LAB

Every attn-lab run reads .npy files written by NumPy and is compared with
  - torch in float64: `torch.softmax(q @ k^T * scale + mask) @ v` for
    `attn-lab attend`, `torch.nn.MultiheadAttention(...).double()` with the
    same state_dict for `attn-lab layer`;
  - a truth T computed by NumPy in extended precision (np.longdouble, 64-bit
    significand: 2^11 times finer than float64) from the same inputs.
Inputs are made exactly representable in the storage precision under test,
so attn-lab's rounding of them is the identity and T is their exact result
up to 2^-64.

Criteria (each derived, none tuned; the mutations at the end show each can
fail):
  worst case: |ours - torch64| <= B_ours + B_torch, the first-order
      rounding-error bounds derived below for the storage and accumulation
      precision each side computed in (Higham, Accuracy and Stability,
      gamma_k = k u / (1 - k u)). Every backend, every precision.
  2x baseline (FlashAttention's rule): |ours - T| <= 2 |baseline - T| + floor,
      the baseline naive attn-lab in the same precision (for naive itself,
      torch64 in fp64; the worst-case bound otherwise), floor = u_store max|T|
      (one half-ulp rounding of each of two outputs).
The backward pass (check_backward): for each attend case, precision and
backend with a backward pass, `attn-lab attend --grad-out dO.npy --dq --dk
--dv (--dbias) --check --json` against torch autograd in float64 through
the same softmax expression (and, unmasked, through
torch.nn.functional.scaled_dot_product_attention with the math backend
pinned, the attention core nn.MultiheadAttention calls), and against gradients computed
by NumPy in long double from the explicit formulas:
  worst case: |ours - torch64| <= our derived worst-case gradient bound
      (attn-lab's --check, metrics.hpp) + |torch64 - T| (torch's own error);
  2x baseline: |ours - T| <= 2 |naive - T| + floor, floor = u_store max|T|
      + 2 u_acc G (G: one rounding of dP, D and O, which cancel in dP - D,
      carried to the gradient with the problem's own magnitudes, c = P o
      (|dP| + |D| + |dO|.|O|): |scale| max c|K| for dQ, |scale| max c^T|Q|
      for dK, max of c summed over batch and heads for d(bias), 0 for dV;
      metrics.hpp's GradientScales), and for a backward that rebuilds P as
      exp(S - lse) from the forward's rounded logsumexp (streaming's, as
      FlashAttention-2's) + u_acc L: the logsumexp rounded once to u_acc
      (its last operation) makes each row's weights err together by up to
      u_acc |lse_i| relatively (the rest of exp(S - lse)'s error is the
      scores', which naive's exp(S - m) has too), which moves dQ_i by |lse_i| |dQ_i|
      and dV_j, dK_j by the root-sum-square over the rows of |lse_i| P_ij
      |dO_i| and |scale| |lse_i| |dS_ij| |q_i| (independent roundings, as
      GradientScales' lse_*). Found
      missing on an Intel Xeon whose OpenBLAS ran its Prescott kernel: the
      streaming fp64 dV of "key padding, one batch fully masked" erred by
      9.99e-16 against the rule's 9.43e-16 (2.2 units of its largest value's
      last place where naive's erred by 0.75).
The variants (check_variants): grouped K/V heads (torch.repeat_interleave of
the K/V heads), soft-capping, sinks (a sink column in the softmax, dropped
after it), ALiBi and documents written out in torch float64 and in long
double, every backend and precision, forward (the two criteria above, with
attn-lab's own derived bound from --check) and backward (dQ, dK, dV,
d(sinks) by torch autograd, within attn-lab's derived gradient bound plus
that of an fp64 evaluation); check_variants_power shows each convention
(head mapping, soft-cap, sinks, ALiBi's head) changed fails it.
Torch's fully masked rows are NaN and poison every gradient; torch is given
the same problem with those rows unmasked and their dO zeroed, which has
the same exact gradients (a row with dO_i = 0 contributes nothing).
Semantic differences from PyTorch, stated and checked (re-checked on the
pinned 2.x; they were found on 1.13): a fully masked row is NaN through
torch.softmax (still, in 2.x) and exactly 0 in attn-lab, and 0 through
scaled_dot_product_attention since 2.5's safe softmax (checked); torch's `tril()` causal mask
is aligned top-left, attn-lab's causal mask bottom-right (query i sees key
j iff j <= i + n_kv - n_q), so for n_q != n_kv the torch side is given
`tril(diagonal=n_kv - n_q)`.
"""
import json
import os
import subprocess
import tempfile

import numpy as np

from checklib import Checks
from paths import ATTN_LAB
import torch

SEED = 20261130
LD = np.longdouble
U64 = 2.0 ** -53


def gamma(k, u):
    return k * u / (1 - k * u) if k * u < 1 else np.inf


def run(args, cwd):
    p = subprocess.run([ATTN_LAB] + args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"attn-lab {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


REGISTRY = json.loads(run(["list", "--json"], "."))
BACKENDS = [b["name"] for b in REGISTRY["backends"]]
# The same-precision baseline of the 2x rule, and the fused (online-softmax) backend, by trait.
BASELINE = next(b["name"] for b in REGISTRY["backends"] if b["traits"]["baseline"])
FUSED = next(b["name"] for b in REGISTRY["backends"] if b["traits"]["own_threads"]
             and b["traits"]["memory_independent_of_n"])
PRECISIONS = {p["name"]: p for p in REGISTRY["precisions"]}
# The vector kernels in use compute the fused backend's bf16 tiles with bf16 dot products (the avx512bf16
# variant): its weights are rounded to bf16 before P V (docs/verification.md, "Error bounds").
BF16_DOT = any(v["id"] == REGISTRY["simd"]["in_use"] and v.get("bf16_dot") for v in REGISTRY["simd"]["variants"])


def representable(x, precision):
    """x rounded to the storage precision (round to nearest even), as float64."""
    if precision == "fp64":
        return x
    if precision == "fp32":
        return x.astype(np.float32).astype(np.float64)
    if precision == "fp16":
        return x.astype(np.float16).astype(np.float64)
    if precision == "bf16":
        return torch.from_numpy(x).to(torch.bfloat16).double().numpy()
    raise ValueError(precision)


def softmax_ld(s):
    """Row softmax in long double; rows with no finite score give NaN (checked apart)."""
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def attention_ld(q, k, v, scale, bias):
    with np.errstate(invalid="ignore"):
        s = LD(scale) * (q.astype(LD) @ np.swapaxes(k.astype(LD), -1, -2)) + bias.astype(LD)
        return softmax_ld(s) @ v.astype(LD)


def attention_bound(q, k, v, scale, bias, eq, ek, ev, u_acc, u_out, u_weights=0.0):
    """First-order worst-case bound on |computed - exact| of each output
    element, given elementwise bounds eq, ek, ev on the inputs' errors, for
    an evaluation in unit roundoff u_acc rounded to u_out at the end:
      scores  |dS| <= |scale| (eq|K|^T + |Q|ek^T + eq ek^T) + gamma_{d_k+2}(u_acc) (|scale||Q||K|^T + |bias|)
      weights |dp_ij| <= p_ij (expm1(2 max_j |dS_ij|) + gamma_{n_kv+8}(u_acc))   (max shift, exp, sum, divide)
      output  |dO| <= |dp||V| + p ev + (gamma_{n_kv}(u_acc) + u_weights) p|V| + u_out |O|
    (u_weights: the weights rounded to that unit roundoff before P V, by a kernel that does so)."""
    a = abs(scale)
    ds = a * (eq @ np.swapaxes(abs(k), -1, -2) + abs(q) @ np.swapaxes(ek, -1, -2) + eq @ np.swapaxes(ek, -1, -2))
    finite = np.isfinite(bias)
    mag = a * (abs(q) @ np.swapaxes(abs(k), -1, -2)) + np.where(finite, abs(bias), 0)
    ds = np.where(finite, ds + gamma(q.shape[-1] + 2, u_acc) * mag, 0)
    n = k.shape[-2]
    with np.errstate(invalid="ignore"):
        p = softmax_ld(scale * (q @ np.swapaxes(k, -1, -2)) + bias).astype(np.float64)
    p = np.nan_to_num(p)
    dp = p * (np.expm1(2 * np.max(ds, axis=-1, keepdims=True)) + gamma(n + 8, u_acc))
    out = p @ v
    return dp @ abs(v) + p @ ev + (gamma(n, u_acc) + u_weights) * (p @ abs(v)) + u_out * abs(out)


CHECKS = Checks()
record = CHECKS.record


def verdicts(label, ours, torch64, truth, bound_ours, bound_torch, baseline_err, u_store, valid):
    """The two criteria of the module docstring on the rows in `valid`."""
    o, t, T = ours[valid], torch64[valid], truth[valid]
    worst = float(np.max(abs(o - t) - (bound_ours + bound_torch)[valid])) if o.size else -1
    err = float(np.max(abs(o - T))) if o.size else 0.0
    allowed = 2 * baseline_err + u_store * float(np.max(abs(T))) if o.size else 0.0
    record(worst <= 0, f"{label}: |ours - torch64| exceeds the worst-case bound by {worst:.3g}")
    record(err <= allowed, f"{label}: error {err:.3g} > 2x baseline {baseline_err:.3g} + floor = {allowed:.3g}")
    if allowed > 0:
        precision = label.split()[-1]
        HEADROOM[precision] = max(HEADROOM.get(precision, 0.0), err / allowed)
    return err, allowed


def save(path, a):
    np.save(path, np.ascontiguousarray(a))


# --- attend -------------------------------------------------------------------

def attend_cases(rng):
    """(name, shape (B,H,NQ,NKV,DK,DV), rank of the files, mask kind)."""
    return [
        ("self, no mask, rank 4", (2, 2, 16, 16, 8, 8), 4, "none"),
        ("cross, d_k != d_v, rank 3", (1, 3, 12, 20, 8, 5), 3, "none"),
        ("causal n_q < n_kv (bottom-right)", (1, 2, 7, 19, 6, 6), 4, "causal"),
        ("boolean mask file, rank 2", (1, 1, 10, 14, 4, 3), 2, "bool"),
        ("additive bias with -inf", (2, 1, 9, 9, 5, 7), 4, "bias"),
        ("key padding, one batch fully masked", (3, 2, 6, 11, 4, 4), 4, "keypad"),
    ]


def mask_for(kind, B, NQ, NKV, rng, work):
    """(attn-lab --mask argument or None, additive mask [B, 1, NQ, NKV] for torch)."""
    add = np.zeros((B, 1, NQ, NKV))
    if kind == "none":
        return None, add
    if kind == "causal":
        allowed = np.tril(np.ones((NQ, NKV), dtype=bool), k=NKV - NQ)
        return "causal", np.where(allowed, 0.0, -np.inf) + add
    if kind == "bool":
        allowed = rng.random((NQ, NKV)) < 0.6
        allowed[:, 0] = True
        save(os.path.join(work, "allowed.npy"), allowed)
        return "bool:allowed.npy", np.where(allowed, 0.0, -np.inf) + add
    if kind == "bias":
        bias = rng.normal(size=(NQ, NKV))
        bias[rng.random((NQ, NKV)) < 0.2] = -np.inf
        bias[:, 1] = 0.5
        save(os.path.join(work, "bias.npy"), bias)
        return "bias:bias.npy", bias + add
    if kind == "keypad":
        lengths = np.array([NKV, 0, 3][:B], dtype=np.int64)
        save(os.path.join(work, "lengths.npy"), lengths)
        for b in range(B):
            add[b, :, :, lengths[b]:] = -np.inf
        return "keypad:lengths.npy", add
    raise ValueError(kind)


def written_inputs(rng, work, shape, rank, precision, grad=False):
    """Q, K, V (and dO as g.npy when grad) drawn N(0, 1) in that order, representable in `precision`, saved
    into work/ at the case's rank (leading unit dimensions dropped); returns them at rank 4."""
    B, H, NQ, NKV, DK, DV = shape
    shapes = [("q", (B, H, NQ, DK)), ("k", (B, H, NKV, DK)), ("v", (B, H, NKV, DV))] + ([("g", (B, H, NQ, DV))]
                                                                                   if grad else [])
    tensors = [representable(rng.normal(size=sh), precision) for _, sh in shapes]
    for (nm, _), t in zip(shapes, tensors):
        save(os.path.join(work, nm + ".npy"), t.reshape(t.shape[4 - rank:]) if rank < 4 else t)
    return tensors


def check_attend():
    rng = np.random.default_rng(SEED)
    for name, (B, H, NQ, NKV, DK, DV), rank, kind in attend_cases(rng):
        for precision, info in PRECISIONS.items():
            u_s = info["unit_roundoff"]
            u_acc = PRECISIONS[info["default_accumulate"]]["unit_roundoff"]
            with tempfile.TemporaryDirectory() as work:
                q, k, v = written_inputs(rng, work, (B, H, NQ, NKV, DK, DV), rank, precision)
                lead = (B, H)[4 - rank:] if rank < 4 else (B, H)
                if rank < 4 and (B, H)[: 4 - rank] != (1,) * (4 - rank):
                    raise ValueError("a lower-rank case needs unit leading dimensions")
                mask_arg, add = mask_for(kind, B, NQ, NKV, rng, work)
                scale = 1 / np.sqrt(DK)
                tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
                torch64 = (torch.softmax(tq @ tk.transpose(-1, -2) * scale + torch.from_numpy(add), dim=-1) @ tv).numpy()
                truth = attention_ld(q, k, v, scale, add).astype(np.float64)
                dead = ~np.isfinite(add).any(axis=-1)  # [B, 1, NQ]: fully masked rows
                dead = np.broadcast_to(dead[..., None], (B, H, NQ, DV))
                valid = ~dead
                zero = np.zeros_like
                b_torch = attention_bound(q, k, v, scale, add, zero(q), zero(k), zero(v), U64, 0.0)
                b_ours = attention_bound(q, k, v, scale, add, zero(q), zero(k), zero(v), u_acc, u_s)
                outs = {}
                for backend in BACKENDS:
                    args = ["attend", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--backend", backend,
                            "--precision", precision, "--out", "o.npy", "--force"]
                    if mask_arg:
                        args += ["--mask", mask_arg]
                    run(args, work)
                    o = np.load(os.path.join(work, "o.npy"))
                    record(o.ndim == rank, f"attend {name} {backend} {precision}: output rank {o.ndim}, inputs {rank}")
                    outs[backend] = o.reshape(B, H, NQ, DV)
                if dead.any():
                    record(bool(np.isnan(torch64[dead]).all()), f"attend {name}: torch.softmax no longer NaN on masked rows")
                    from torch.nn.attention import SDPBackend, sdpa_kernel
                    with sdpa_kernel(SDPBackend.MATH):  # SDPA's safe softmax (torch >= 2.5): 0, as attn-lab
                        sdpa = torch.nn.functional.scaled_dot_product_attention(
                            *(torch.from_numpy(x.astype(np.float64)) for x in (q, k, v)),
                            attn_mask=torch.from_numpy(np.broadcast_to(add, (B, H, NQ, NKV)).copy()),
                            scale=scale).numpy()
                    record(bool((sdpa[dead] == 0).all()), f"attend {name}: SDPA (math) not 0 on fully masked rows")
                    for backend, o in outs.items():
                        record(bool((o[dead] == 0).all()), f"attend {name} {backend} {precision}: masked row not 0")
                naive_err = float(np.max(abs(outs[BASELINE][valid] - truth[valid])))
                torch_err = float(np.max(abs(torch64[valid] - truth[valid])))
                for backend, o in outs.items():
                    baseline = torch_err if backend == BASELINE and precision == "fp64" else naive_err
                    if backend == BASELINE and precision != "fp64":
                        baseline = float(np.max(b_ours[valid]))  # no same-precision baseline of its own
                    bound = b_ours
                    if BF16_DOT and backend == FUSED and precision == "bf16":
                        bound = attention_bound(q, k, v, scale, add, zero(q), zero(k), zero(v), u_acc, u_s, u_weights=u_s)
                    verdicts(f"attend {name} {backend} {precision}", o, torch64, truth, bound, b_torch, baseline,
                             u_s, valid)
                ATTEND_LOG.append((name, precision, naive_err, torch_err))


# --- backward -------------------------------------------------------------------

def gradients_ld(q, k, v, scale, add, d_out):
    """dQ, dK, dV, d(add) (summed over broadcast axes later) by the explicit formulas in long double; P = 0 on fully
    masked rows."""
    with np.errstate(invalid="ignore"):
        s = LD(scale) * (q.astype(LD) @ np.swapaxes(k.astype(LD), -1, -2)) + add.astype(LD)
        p = np.nan_to_num(softmax_ld(s))
    g = d_out.astype(LD)
    dp = g @ np.swapaxes(v.astype(LD), -1, -2)
    d = np.sum(p * dp, axis=-1, keepdims=True)
    ds = p * (dp - d)
    return (LD(scale) * ds @ k.astype(LD), LD(scale) * np.swapaxes(ds, -1, -2) @ q.astype(LD),
            np.swapaxes(p, -1, -2) @ g, ds, p)


def torch_gradients(q, k, v, scale, add, d_out, dead):
    """torch autograd in float64; fully masked rows unmasked with dO_i = 0 (same exact gradients, no NaN)."""
    add = np.where(dead[..., None], 0.0, add)
    g = np.where(dead[..., None], 0.0, d_out)
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    tb = torch.from_numpy(add.copy()).requires_grad_()
    out = torch.softmax(tq @ tk.transpose(-1, -2) * scale + tb, dim=-1) @ tv
    out.backward(torch.from_numpy(g))
    return tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy(), tb.grad.numpy()


def core_gradients(q, k, v, d_out):
    """The same through PyTorch's attention core, scaled_dot_product_attention with its math backend pinned
    (torch.nn.attention.sdpa_kernel), unmasked, at its default scale 1/sqrt(d_k)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
    out.backward(torch.from_numpy(d_out))
    return tuple(t.grad.numpy() for t in (tq, tk, tv))


def cancellation_scales(q, k, v, scale, p, d_out, add):
    """(G, L) of the module docstring for dq, dk, dv, dbias (as metrics.hpp's GradientScales): G the
    cancellation in dP - D (worst-case sums); L what a relative error of each row's weights as a whole, per
    unit of |lse_i| (a backward that rebuilds P as exp(S - lse) from a rounded logsumexp), moves each gradient
    by: |lse_i| |dQ_i| for dQ (row i takes its factor whole), root-sum-squares over the rows (independent
    roundings, as lse_* of GradientScales) for dK, dV and d(bias)."""
    p = p.astype(np.float64)
    dp = d_out @ np.swapaxes(v, -1, -2)
    d = np.sum(p * dp, axis=-1, keepdims=True)
    o = p @ v
    e = np.sum(abs(d_out * o), axis=-1, keepdims=True)
    c = p * (abs(dp) + abs(d) + e)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = scale * (q @ np.swapaxes(k, -1, -2)) + add
        m = np.max(s, axis=-1, keepdims=True)
        lse = np.where(np.isfinite(m), m + np.log(np.sum(np.exp(s - np.where(np.isfinite(m), m, 0)), axis=-1,
                                                           keepdims=True)), 0.0)
    lse = abs(np.nan_to_num(lse))
    ds = p * (dp - d)
    a2 = (lse * ds) ** 2  # (|lse_i| dS_ij)^2
    G = {"dq": abs(scale) * float(np.max(c @ abs(k))), "dk": abs(scale) * float(np.max(np.swapaxes(c, -1, -2) @ abs(q))),
         "dv": 0.0, "dbias": float(np.max(np.sum(c, axis=(0, 1))))}
    L = {"dq": abs(scale) * float(np.max(lse * abs(ds @ k))),
         "dk": abs(scale) * float(np.sqrt(np.max(np.swapaxes(a2, -1, -2) @ (q * q)))),
         "dv": float(np.sqrt(np.max(np.swapaxes((lse * p) ** 2, -1, -2) @ (d_out * d_out)))),
         "dbias": float(np.sqrt(np.max(np.sum(a2, axis=(0, 1)))))}
    return G, L


BACKWARD = [b["name"] for b in REGISTRY["backends"] if b["backward"]]
# backends whose backward rebuilds P as exp(S - lse) from the forward's logsumexp (streaming, as FlashAttention-2)
FROM_LSE = {b["name"] for b in REGISTRY["backends"] if b["traits"].get("weights_from_lse")}


def check_backward():
    rng = np.random.default_rng(SEED + 5)
    for name, (B, H, NQ, NKV, DK, DV), rank, kind in attend_cases(rng):
        for precision, info in PRECISIONS.items():
            u_s = info["unit_roundoff"]
            u_acc = PRECISIONS[info["default_accumulate"]]["unit_roundoff"]
            with tempfile.TemporaryDirectory() as work:
                q, k, v, g = written_inputs(rng, work, (B, H, NQ, NKV, DK, DV), rank, precision, grad=True)
                mask_arg, add = mask_for(kind, B, NQ, NKV, rng, work)
                scale = 1 / np.sqrt(DK)
                dead = ~np.isfinite(add).any(axis=-1)  # [B, 1, NQ]
                dead_h = np.broadcast_to(dead, (B, H, NQ))
                truth = gradients_ld(q, k, v, scale, add, g)
                T = {"dq": truth[0], "dk": truth[1], "dv": truth[2]}
                if kind == "bias":
                    T["dbias"] = np.sum(truth[3], axis=(0, 1))
                T = {key: t.astype(np.float64) for key, t in T.items()}
                t64 = dict(zip(("dq", "dk", "dv", "dbias"), torch_gradients(q, k, v, scale, add, g, dead_h)))
                t64["dbias"] = np.sum(t64["dbias"], axis=(0, 1)) if kind == "bias" else None
                torch_err = {key: float(np.max(abs(t64[key] - T[key]))) for key in T}
                if kind == "none":
                    core = dict(zip(("dq", "dk", "dv"), core_gradients(q, k, v, g)))
                    for key in ("dq", "dk", "dv"):
                        e = float(np.max(abs(core[key] - T[key])))
                        record(e <= 1e-12 * max(1.0, float(np.max(abs(T[key])))),
                               f"backward {name}: torch's attention core {key} {e:.3g} from the long-double truth")
                G, L = cancellation_scales(q, k, v, scale, truth[4], g, add)
                ours = {}
                for backend in BACKWARD:
                    args = ["attend", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--grad-out", "g.npy",
                            "--backend", backend, "--precision", precision, "--dq", "dq.npy", "--dk", "dk.npy",
                            "--dv", "dv.npy", "--check", "--json", "--force"]
                    if mask_arg:
                        args += ["--mask", mask_arg]
                    if kind == "bias":
                        args += ["--dbias", "db.npy"]
                    summary = json.loads(run(args, work))["backward"]
                    got = {key: np.load(os.path.join(work, f)).reshape(T[key].shape)
                           for key, f in (("dq", "dq.npy"), ("dk", "dk.npy"), ("dv", "dv.npy"), ("dbias", "db.npy"))
                           if key in T}
                    ours[backend] = got
                    for key in T:
                        label = f"backward {name} {backend} {precision} {key}"
                        dev = float(np.max(abs(got[key] - t64[key])))
                        allowed = summary[key]["bound"] + torch_err[key]
                        record(dev <= allowed, f"{label}: |ours - torch64| {dev:.3g} > bound {allowed:.3g}")
                        if key in ("dq",):
                            record(bool((got[key][dead_h] == 0).all()), f"{label}: fully masked rows not 0")
                for backend, got in ours.items():
                    for key in T:
                        err = float(np.max(abs(got[key] - T[key])))
                        base = float(np.max(abs(ours[BASELINE][key] - T[key])))
                        if backend == BASELINE:
                            continue  # its own baseline; held to the worst-case bound above
                        floor = u_s * float(np.max(abs(T[key]))) + 2 * u_acc * G[key]
                        if backend in FROM_LSE:  # its weights rebuilt from the rounded logsumexp: L's term
                            floor += u_acc * L[key]
                            unit = u_s * float(np.max(abs(T[key])))
                            if unit > 0:
                                LSE_SHARE[precision] = max(LSE_SHARE.get(precision, 0.0), u_acc * L[key] / unit)
                        allowed = 2 * base + floor
                        record(err <= allowed, f"backward {name} {backend} {precision} {key}: error {err:.3g} > "
                                               f"2x baseline {base:.3g} + floor = {allowed:.3g}")
                        if backend in FROM_LSE and err >= base:  # the rule's power where we err more than naive
                            record(10 * err > allowed, f"backward {name} {backend} {precision} {key}: an error 10x "
                                                       f"ours ({10 * err:.3g}) passes the 2x rule ({allowed:.3g}: base {base:.3g}, "
                                                       f"u_s max|T| {u_s * float(np.max(abs(T[key]))):.3g}, 2uG {2 * u_acc * G[key]:.3g}, "
                                                       f"uL {u_acc * L[key]:.3g})")
                        if allowed > 0:
                            GRAD_HEADROOM[precision] = max(GRAD_HEADROOM.get(precision, 0.0), err / allowed)
                BACKWARD_LOG.append((name, precision, max(torch_err.values())))


def check_backward_power():
    """A gradient convention a reimplementation could get wrong (dK from dS untransposed, i.e. dS Q instead of
    dS^T Q; the scale left out of dQ) and a 10x error must each fail a criterion that passes unmutated."""
    rng = np.random.default_rng(SEED + 6)
    B, H, N, D = 1, 2, 10, 6
    q, k, v, g = (rng.normal(size=(B, H, N, D)) for _ in range(4))
    scale = 1 / np.sqrt(D)
    add = np.zeros((B, 1, N, N))
    dq, dk, dv, ds, p = gradients_ld(q, k, v, scale, add, g)
    T = dk.astype(np.float64)
    with tempfile.TemporaryDirectory() as work:
        for nm, t in (("q", q), ("k", k), ("v", v), ("g", g)):
            save(os.path.join(work, nm + ".npy"), t)
        summary = json.loads(run(["attend", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--grad-out", "g.npy",
                                  "--backend", FUSED, "--precision", "fp64", "--dq", "dq.npy", "--dk", "dk.npy",
                                  "--check", "--json"], work))["backward"]
        ours_dk, ours_dq = np.load(os.path.join(work, "dk.npy")), np.load(os.path.join(work, "dq.npy"))
        record(float(np.max(abs(ours_dk - T))) <= summary["dk"]["bound"], "power: the unmutated dK fails its bound")
        untransposed = (LD(scale) * ds @ q.astype(LD)).astype(np.float64)
        record(float(np.max(abs(untransposed - T))) > summary["dk"]["bound"],
               "power: dK = scale dS Q (untransposed) passes the bound")
        unscaled = (ds @ k.astype(LD)).astype(np.float64)
        record(float(np.max(abs(unscaled - dq.astype(np.float64)))) > summary["dq"]["bound"],
               "power: dQ without the scale passes the bound")
        err = float(np.max(abs(ours_dq - dq.astype(np.float64))))
        moved = dq.astype(np.float64) + 10 * max(err, 2.0 ** -53 * float(np.max(abs(dq)))) * np.sign(rng.normal(size=dq.shape))
        floor = 2.0 ** -53 * float(np.max(abs(dq)))
        record(float(np.max(abs(moved - dq.astype(np.float64)))) > 2 * err + floor,
               "power: a dQ error 10x the measured one passes the 2x rule")


# --- layer ----------------------------------------------------------------------

def layer_cases():
    """(name, B, L, S, E, heads, kdim, bias, causal)."""
    return [
        ("self, 1 head, biases", 2, 9, 9, 16, 1, None, True, False),
        ("self, 4 heads, no biases, causal", 1, 12, 12, 16, 4, None, False, True),
        ("self, 8 heads, rank 2 input", 1, 10, 10, 32, 8, None, True, False),
        ("cross, kdim = vdim = 12 != 16, 2 heads, biases", 2, 7, 13, 16, 2, 12, True, False),
        ("cross, kdim = vdim = 6, 4 heads, no biases", 1, 5, 9, 16, 4, 6, False, False),
    ]


def projections(sd, E):
    """W_Q, W_K, W_V and their biases from a state_dict, either layout."""
    if "in_proj_weight" in sd:
        wq, wk, wv = np.split(sd["in_proj_weight"], 3)
    else:
        wq, wk, wv = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    bq, bk, bv = np.split(sd["in_proj_bias"], 3) if "in_proj_bias" in sd else (np.zeros(E),) * 3
    return wq, wk, wv, bq, bk, bv


def causal_bias(L, S):
    """0 where query i sees key j (j <= i + S - L, bottom-right), -inf elsewhere."""
    return np.where(np.tril(np.ones((L, S), dtype=bool), k=S - L), 0.0, -np.inf)


def mha_ld(x, kv, sd, heads, causal):
    """nn.MultiheadAttention's forward in long double from the state_dict."""
    E = x.shape[-1]
    wq, wk, wv, bq, bk, bv = projections(sd, E)
    lin = lambda a, w, b: a.astype(LD) @ w.T.astype(LD) + b.astype(LD)
    q, k, v = lin(x, wq, bq), lin(kv, wk, bk), lin(kv, wv, bv)
    B, L, S, d = x.shape[0], x.shape[1], kv.shape[1], E // heads
    split = lambda t, n: np.swapaxes(t.reshape(B, n, heads, d), 1, 2)
    add = causal_bias(L, S) if causal else np.zeros((L, S))
    o = attention_ld(split(q, L), split(k, S), split(v, S), 1 / np.sqrt(d), add)
    o = np.swapaxes(o, 1, 2).reshape(B, L, E)
    bo = sd.get("out_proj.bias", np.zeros(E))
    return lin(o, sd["out_proj.weight"], bo).astype(np.float64), (q, k, v, add, d)


def layer_bound(x, kv, sd, heads, causal, u_s, u_acc):
    """The worst-case bound carried through the layer: projections in fp64
    (gamma_{in+1}(u64) (|x||W|^T + |b|)), the core's inputs rounded to
    storage (u_s |q|), the core (attention_bound), the output projection."""
    E = x.shape[-1]
    wq, wk, wv, bq, bk, bv = projections(sd, E)
    B, L, S, d = x.shape[0], x.shape[1], kv.shape[1], E // heads
    split = lambda t, n: np.swapaxes(t.reshape(B, n, heads, d), 1, 2)
    proj = lambda a, w, b: (a @ w.T + b, gamma(a.shape[-1] + 1, U64) * (abs(a) @ abs(w).T + abs(b)))
    (q, eq), (k, ek), (v, ev) = proj(x, wq, bq), proj(kv, wk, bk), proj(kv, wv, bv)
    eq, ek, ev = (e + u_s * (abs(t) + e) for e, t in ((eq, q), (ek, k), (ev, v)))
    add = causal_bias(L, S) if causal else np.zeros((L, S))
    qs, ks, vs = split(q, L), split(k, S), split(v, S)
    eo = attention_bound(qs, ks, vs, 1 / np.sqrt(d), add, split(eq, L), split(ek, S), split(ev, S), u_acc, u_s)
    with np.errstate(invalid="ignore"):
        o = attention_ld(qs, ks, vs, 1 / np.sqrt(d), add).astype(np.float64)
    o, eo = (np.swapaxes(t, 1, 2).reshape(B, L, E) for t in (o, eo))
    wo = sd["out_proj.weight"]
    bo = sd.get("out_proj.bias", np.zeros(E))
    return eo @ abs(wo).T + gamma(E + 1, U64) * (abs(o) @ abs(wo).T + abs(bo))


def check_layer():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED + 1)
    for name, B, L, S, E, heads, kdim, bias, causal in layer_cases():
        mha = torch.nn.MultiheadAttention(E, heads, bias=bias, batch_first=True, kdim=kdim, vdim=kdim).double()
        sd = {key: t.detach().numpy().copy() for key, t in mha.state_dict().items()}
        x = rng.normal(size=(B, L, E))
        kv = rng.normal(size=(B, S, kdim)) if kdim else x
        rank2 = "rank 2" in name
        mask = torch.from_numpy(~np.tril(np.ones((L, S), dtype=bool), k=S - L)) if causal else None
        with torch.no_grad():
            t_out = mha(torch.from_numpy(x), torch.from_numpy(kv), torch.from_numpy(kv), attn_mask=mask,
                        need_weights=False)[0].numpy()
        truth, _ = mha_ld(x, kv, sd, heads, causal)
        torch_err = float(np.max(abs(t_out - truth)))
        b_torch = layer_bound(x, kv, sd, heads, causal, 0.0, U64)
        with tempfile.TemporaryDirectory() as work:
            os.mkdir(os.path.join(work, "torch_mha"))
            for key, t in sd.items():
                save(os.path.join(work, "torch_mha", key + ".npy"), t)
            save(os.path.join(work, "x.npy"), x[0] if rank2 else x)
            if kdim:
                save(os.path.join(work, "kv.npy"), kv)
            for precision, info in PRECISIONS.items():
                u_s = info["unit_roundoff"]
                u_acc = PRECISIONS[info["default_accumulate"]]["unit_roundoff"]
                b_ours = layer_bound(x, kv, sd, heads, causal, 0.0 if precision == "fp64" else u_s, u_acc)
                outs = {}
                for backend in BACKENDS:
                    args = ["layer", "--x", "x.npy", "--heads", str(heads), "--weights", "torch_mha", "--backend",
                            backend, "--precision", precision, "--out", "o.npy", "--force"]
                    args += ["--kv", "kv.npy"] if kdim else []
                    args += ["--causal"] if causal else []
                    run(args, work)
                    outs[backend] = np.load(os.path.join(work, "o.npy")).reshape(B, L, E)
                naive_err = float(np.max(abs(outs[BASELINE] - truth)))
                valid = np.ones_like(truth, dtype=bool)
                for backend, o in outs.items():
                    baseline = naive_err
                    if backend == BASELINE:
                        baseline = torch_err if precision == "fp64" else float(np.max(b_ours))
                    verdicts(f"layer {name} {backend} {precision}", o, t_out, truth, b_ours, b_torch, baseline, u_s,
                             valid)
                LAYER_LOG.append((name, precision, naive_err, torch_err))


# --- The criteria can fail: each mutation below must be flagged ------------------

def check_power():
    """Conventions a reimplementation could get wrong, and a perturbation of
    10x the typical error: each must fail a criterion that passes unmutated."""
    rng = np.random.default_rng(SEED + 2)
    B, H, NQ, NKV, D = 1, 2, 12, 12, 8
    q, k, v = (rng.normal(size=(B, H, n, D)) for n in (NQ, NKV, NKV))
    allowed = rng.random((NQ, NKV)) < 0.6
    allowed[:, 0] = True
    add = np.where(allowed, 0.0, -np.inf)
    scale = 1 / np.sqrt(D)
    truth = attention_ld(q, k, v, scale, add).astype(np.float64)
    zero = np.zeros_like
    bound = attention_bound(q, k, v, scale, add, zero(q), zero(k), zero(v), U64, 0.0)
    with tempfile.TemporaryDirectory() as work:
        for nm, t in (("q", q), ("k", k), ("v", v)):
            save(os.path.join(work, nm + ".npy"), t)
        save(os.path.join(work, "allowed.npy"), allowed)
        save(os.path.join(work, "flipped.npy"), ~allowed)

        def ours(*extra, precision="fp64", backend=BASELINE):
            run(["attend", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--precision", precision, "--backend",
                 backend, "--out", "o.npy", "--force"] + list(extra), work)
            return np.load(os.path.join(work, "o.npy"))

        right = ours("--mask", "bool:allowed.npy")
        record(bool(np.all(abs(right - truth) <= bound)), "power: the unmutated fp64 run fails its bound")
        mutants = {
            "mask polarity flipped": ours("--mask", "bool:flipped.npy"),
            "scale 1 instead of 1/sqrt(d)": ours("--mask", "bool:allowed.npy", "--scale", "1"),
            "K and Q swapped": None,
        }
        save(os.path.join(work, "q.npy"), k)
        save(os.path.join(work, "k.npy"), q)
        mutants["K and Q swapped"] = ours("--mask", "bool:allowed.npy")
        for what, o in mutants.items():
            record(bool(np.any(abs(o - truth) > bound)), f"power: '{what}' passes the worst-case bound")
        save(os.path.join(work, "q.npy"), q)
        save(os.path.join(work, "k.npy"), k)
        # The 2x rule: a streaming fp32 result moved by k times naive's error.
        fq, fk, fv = (representable(t, "fp32") for t in (q, k, v))
        for nm, t in (("q", fq), ("k", fk), ("v", fv)):
            save(os.path.join(work, nm + ".npy"), t)
        T = attention_ld(fq, fk, fv, scale, add).astype(np.float64)
        naive_err = float(np.max(abs(ours("--mask", "bool:allowed.npy", precision="fp32") - T)))
        stream = ours("--mask", "bool:allowed.npy", precision="fp32", backend=FUSED)
        floor = 2.0 ** -24 * float(np.max(abs(T)))
        sign = np.where(rng.random(T.shape) < 0.5, -1.0, 1.0)
        for factor, flagged in ((1, False), (10, True)):
            moved = T + factor * naive_err * sign
            err = float(np.max(abs(moved - T)))
            record((err > 2 * naive_err + floor) == flagged,
                   f"power: an error of {factor}x naive's is {'not ' if flagged else ''}flagged by the 2x rule")
        record(float(np.max(abs(stream - T))) <= 2 * naive_err + floor, "power: unperturbed streaming fails the 2x rule")
    # The layer: transposed projection weights must be caught.
    torch.manual_seed(SEED)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).double()
    sd = {key: t.detach().numpy().copy() for key, t in mha.state_dict().items()}
    x = rng.normal(size=(1, 6, 16))
    truth, _ = mha_ld(x, x, sd, 4, False)
    bound = layer_bound(x, x, sd, 4, False, 0.0, U64)
    with tempfile.TemporaryDirectory() as work:
        os.mkdir(os.path.join(work, "w"))
        for key, t in sd.items():
            save(os.path.join(work, "w", key + ".npy"), t.T if key == "out_proj.weight" else t)
        save(os.path.join(work, "x.npy"), x)
        run(["layer", "--x", "x.npy", "--heads", "4", "--weights", "w", "--backend", BASELINE, "--precision", "fp64",
             "--out", "o.npy"], work)
        o = np.load(os.path.join(work, "o.npy"))
        record(bool(np.any(abs(o - truth) > bound)), "power: a transposed out_proj.weight passes the layer bound")


# --- variants (grouped heads, soft-capping, sinks, ALiBi, documents) ------------

def alibi_slopes(heads):
    """The ALiBi paper's geometric slopes (its code's rule for head counts that are not powers of two)."""
    n = 1
    while n * 2 <= heads:
        n *= 2
    slopes = [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    slopes += [2.0 ** (-8.0 * (2 * x + 1) / (2 * n)) for x in range(heads - n)]
    return np.array(slopes)


def variant_cases():
    """(name, (B, H, H_kv, NQ, NKV, DK, DV), causal, softcap, sinks, alibi, documents)."""
    return [
        ("GQA g = 2, causal", (1, 4, 2, 9, 9, 8, 8), True, None, False, False, 0),
        ("MQA, soft-cap 2, logits x 3", (2, 3, 1, 7, 12, 6, 5), False, 2.0, False, False, 0),
        ("sinks (one -inf), causal cross", (1, 3, 3, 6, 11, 4, 4), True, None, True, False, 0),
        ("ALiBi and 3 documents, causal", (1, 2, 2, 12, 12, 4, 6), True, None, False, True, 3),
        ("every variant, GQA g = 2", (2, 4, 2, 10, 10, 8, 8), True, 5.0, True, True, 2),
    ]


def variant_scores(q, k, scale, causal, softcap, slopes, segments, xp):
    """The scores of problem.hpp's definition for [B, H, NQ, DK] q and K/V heads repeated g times
    (repeat_interleave), in the array module xp (torch or numpy): s = scale q.k; c tanh(s / c);
    + slope_h (j - i - (NKV - NQ)); -inf where causal or another document hides the key."""
    B, H, NQ = q.shape[:3]
    NKV = k.shape[2]
    s = scale * (q @ k.transpose(-1, -2) if xp is torch else q @ np.swapaxes(k, -1, -2))
    if softcap is not None:
        s = softcap * xp.tanh(s / softcap)
    rel = np.arange(NKV)[None, :] - np.arange(NQ)[:, None] - (NKV - NQ)  # j - i - (n_kv - n_q)
    add = np.zeros((B, H, NQ, NKV))
    if slopes is not None:
        add = add + slopes[None, :, None, None] * rel[None, None]
    hidden = np.zeros((B, 1, NQ, NKV), dtype=bool)
    if causal:
        hidden |= (rel > 0)[None, None]
    if segments is not None:
        tok = np.arange(NQ) + NKV - NQ
        hidden |= (segments[:, tok][:, :, None] != segments[:, None, :])[:, None]
    add = np.where(hidden, -np.inf, add)
    return s + (torch.from_numpy(add) if xp is torch else add.astype(s.dtype))


def variant_attention(q, k, v, scale, causal, softcap, slopes, segments, sinks, xp):
    """Output of problem.hpp's definition: softmax over the scores and a sink column per head (weight without
    a value); rows with neither a visible key nor a sink give 0."""
    s = variant_scores(q, k, scale, causal, softcap, slopes, segments, xp)
    B, H, NQ, NKV = s.shape
    sink = np.full(H, -np.inf) if sinks is None else sinks
    col = np.broadcast_to(sink[None, :, None, None], (B, H, NQ, 1)).copy()
    if xp is torch:
        full = torch.cat([s, torch.from_numpy(col)], dim=-1)
        p = torch.nan_to_num(torch.softmax(full, dim=-1))[..., :NKV]
        return p @ v
    full = np.concatenate([s, col.astype(s.dtype)], axis=-1)
    with np.errstate(invalid="ignore"):
        p = np.nan_to_num(softmax_ld(full))[..., :NKV]
    return p @ v


def check_variants():
    """Every backend, every precision, every variant against torch float64 (K/V heads by repeat_interleave, the
    soft-cap, sinks and ALiBi written out in torch) and a long-double truth: the worst-case criterion with
    attn-lab's own derived bound (--check's tolerance) plus torch64's distance from the truth, and the 2x rule
    against the naive backend. Then the backward pass: dQ, dK, dV and d(sinks) against torch autograd through
    the same expression, within attn-lab's derived gradient bound plus torch64's own error."""
    rng = np.random.default_rng(SEED + 9)
    for name, (B, H, HKV, NQ, NKV, DK, DV), causal, softcap, sinks_on, alibi, docs in variant_cases():
        g = H // HKV
        for precision, info in PRECISIONS.items():
            u_s = info["unit_roundoff"]
            with tempfile.TemporaryDirectory() as work:
                q = representable(rng.normal(size=(B, H, NQ, DK)) * (3.0 if softcap else 1.0), precision)
                k = representable(rng.normal(size=(B, HKV, NKV, DK)), precision)
                v = representable(rng.normal(size=(B, HKV, NKV, DV)), precision)
                d_out = representable(rng.normal(size=(B, H, NQ, DV)), precision)
                for nm, t in (("q", q), ("k", k), ("v", v), ("g", d_out)):
                    save(os.path.join(work, nm + ".npy"), t)
                args = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--precision", precision]
                if causal:
                    args += ["--mask", "causal"]
                if softcap:
                    args += ["--softcap", repr(softcap)]
                sinks = None
                if sinks_on:
                    sinks = rng.normal(size=H) * 2
                    sinks[0] = -np.inf
                    save(os.path.join(work, "sinks.npy"), sinks)
                    args += ["--sinks", "sinks.npy"]
                slopes = alibi_slopes(H) if alibi else None
                if alibi:
                    args += ["--alibi"]
                segments = None
                if docs:
                    segments = (np.arange(NKV)[None, :] * docs // NKV).repeat(B, axis=0).astype(np.int64)
                    save(os.path.join(work, "seg.npy"), segments)
                    args += ["--segments", "seg.npy"]
                scale = 1 / np.sqrt(DK)
                rk, rv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # = torch.repeat_interleave(dim=1)
                tq, tk, tv = torch.from_numpy(q), torch.repeat_interleave(torch.from_numpy(k), g, dim=1), \
                    torch.repeat_interleave(torch.from_numpy(v), g, dim=1)
                torch64 = variant_attention(tq, tk, tv, scale, causal, softcap, slopes, segments, sinks, torch).numpy()
                truth = variant_attention(q.astype(LD), rk.astype(LD), rv.astype(LD), LD(scale), causal,
                                          None if softcap is None else LD(softcap), slopes, segments, sinks,
                                          np).astype(np.float64)
                torch_err = float(np.max(abs(torch64 - truth)))
                outs, tol = {}, {}
                for backend in BACKENDS:
                    summary = json.loads(run(["attend"] + args + ["--backend", backend, "--out", "o.npy", "--check",
                                                                  "--json", "--force"], work))
                    outs[backend] = np.load(os.path.join(work, "o.npy"))
                    tol[backend] = summary["bound_global"]
                    record(summary["shape"]["kv_heads"] == HKV, f"variants {name}: H_kv not inferred from K")
                naive_err = float(np.max(abs(outs[BASELINE] - truth)))
                for backend, o in outs.items():
                    label = f"variants {name} {backend} {precision}"
                    dev = float(np.max(abs(o - torch64)))
                    record(dev <= tol[backend] + torch_err,
                           f"{label}: |ours - torch64| {dev:.3g} > derived bound {tol[backend]:.3g} + torch's {torch_err:.3g}")
                    if backend != BASELINE:
                        err = float(np.max(abs(o - truth)))
                        allowed = 2 * naive_err + u_s * float(np.max(abs(truth)))
                        record(err <= allowed, f"{label}: error {err:.3g} > 2x baseline {naive_err:.3g} + floor")
                VARIANT_LOG.append((name, precision, naive_err, torch_err))
                # The backward pass against torch autograd (fp64 and fp32 storage: the narrow formats' derived
                # gradient bounds are checked by the suite's own tests).
                if precision not in ("fp64", "fp32"):
                    continue
                tq = torch.from_numpy(q.copy()).requires_grad_()
                tk0 = torch.from_numpy(k.copy()).requires_grad_()
                tv0 = torch.from_numpy(v.copy()).requires_grad_()
                ts = torch.from_numpy(np.where(np.isfinite(sinks), sinks, 0.0)).requires_grad_() if sinks_on else None
                sink_t = None
                if sinks_on:  # -inf sinks stay -inf (no gradient), finite ones carry the gradient
                    sink_t = torch.where(torch.from_numpy(np.isfinite(sinks)), ts, torch.full((H,), -np.inf, dtype=torch.float64))
                s = variant_scores(tq, torch.repeat_interleave(tk0, g, dim=1), scale, causal, softcap, slopes, segments, torch)
                col = (sink_t if sinks_on else torch.full((H,), -np.inf, dtype=torch.float64))[None, :, None, None].expand(B, H, NQ, 1)
                p = torch.nan_to_num(torch.softmax(torch.cat([s, col], dim=-1), dim=-1))[..., :NKV]
                (p @ torch.repeat_interleave(tv0, g, dim=1)).backward(torch.from_numpy(d_out))
                t64 = {"dq": tq.grad.numpy(), "dk": tk0.grad.numpy(), "dv": tv0.grad.numpy()}
                if sinks_on:
                    t64["dsinks"] = np.where(np.isfinite(sinks), ts.grad.numpy(), 0.0)
                outs_grad = ["--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"] + (["--dsinks", "ds.npy"] if sinks_on else [])
                grad_args = ["--grad-out", "g.npy"] + outs_grad + ["--check", "--json", "--force"]
                # torch64's own bound: the derived worst-case gradient bound of an fp64 evaluation of the same
                # formulas on the same (representable) inputs, as attn-lab's --check reports it for fp64 storage
                fp64_args = [a if a != precision else "fp64" for a in args]
                torch_bound = json.loads(run(["attend"] + fp64_args + ["--backend", BASELINE] + grad_args, work))["backward"]
                for backend in BACKWARD:
                    summary = json.loads(run(["attend"] + args + ["--backend", backend] + grad_args, work))["backward"]
                    for key, f in (("dq", "dq.npy"), ("dk", "dk.npy"), ("dv", "dv.npy"), ("dsinks", "ds.npy")):
                        if key not in t64:
                            continue
                        got = np.load(os.path.join(work, f))
                        dev = float(np.max(abs(got - t64[key])))
                        allowed = summary[key]["bound"] + torch_bound[key]["bound"]
                        record(dev <= allowed, f"variants backward {name} {backend} {precision} {key}: "
                                               f"|ours - torch64| {dev:.3g} > bound {allowed:.3g}")
                        VARIANT_GRAD_LOG.append(dev / allowed)


def check_variants_power():
    """Each variant's criterion can fail: torch64 computed with one convention changed (K/V heads h % H_kv,
    np.tile, instead of h / g; no soft-cap; no sinks; the next head's ALiBi slope) must leave the criterion
    that the unchanged torch64 passes (attn-lab fp64, its derived bound)."""
    rng = np.random.default_rng(SEED + 10)
    B, H, HKV, N, D = 1, 4, 2, 10, 8
    q = rng.normal(size=(B, H, N, D)) * 3
    k, v = rng.normal(size=(B, HKV, N, D)), rng.normal(size=(B, HKV, N, D))
    sinks, slopes, scale = rng.normal(size=H), alibi_slopes(H), 1 / np.sqrt(D)
    with tempfile.TemporaryDirectory() as work:
        for nm, t in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
            save(os.path.join(work, nm + ".npy"), t)
        summary = json.loads(run(["attend", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--precision", "fp64",
                                  "--mask", "causal", "--softcap", "2", "--sinks", "sinks.npy", "--alibi",
                                  "--backend", FUSED, "--out", "o.npy", "--check", "--json"], work))
        ours, tol = np.load(os.path.join(work, "o.npy")), summary["bound_global"]
    t = lambda x: torch.from_numpy(x)

    def torch64(kv_heads=lambda x: np.repeat(x, H // HKV, axis=1), cap=2.0, sink=sinks, slope=slopes):
        return variant_attention(t(q), t(kv_heads(k)), t(kv_heads(v)), scale, True, cap, slope, None, sink,
                                 torch).numpy()
    record(float(np.max(abs(ours - torch64()))) <= tol, "variants power: the unchanged torch64 fails the bound")
    for what, changed in (("K/V head h % H_kv", torch64(kv_heads=lambda x: np.tile(x, (1, H // HKV, 1, 1)))),
                          ("no soft-cap", torch64(cap=None)), ("no sinks", torch64(sink=None)),
                          ("the next head's ALiBi slope", torch64(slope=np.roll(slopes, -1)))):
        record(float(np.max(abs(ours - changed))) > tol, f"variants power: torch64 with {what} passes the bound")


def check_layer_variants():
    """`attn-lab layer` with grouped-query heads (k_proj_weight and v_proj_weight with H_kv x d rows), soft-cap,
    sinks and ALiBi, causal, against the same layer written out in torch float64 (projections, repeat_interleave,
    variant_attention, out_proj) and in long double: the fp64 naive layer within twice torch64's distance from
    the long-double truth (plus one fp64 ulp of the output's size), every other backend and precision within
    twice the naive layer's error at that precision (the suite's 2x rule; the core's derived bounds are checked
    by check_variants). torch64 with K/V heads mapped h % H_kv instead of h / g must fail the first criterion."""
    rng = np.random.default_rng(SEED + 11)
    B, L, E, H, HKV = 2, 11, 32, 8, 2
    d, g = E // H, H // HKV
    sd = {"q_proj_weight": rng.normal(size=(E, E)) / np.sqrt(E),
          "k_proj_weight": rng.normal(size=(HKV * d, E)) / np.sqrt(E),
          "v_proj_weight": rng.normal(size=(HKV * d, E)) / np.sqrt(E),
          "in_proj_bias": rng.normal(size=E + 2 * HKV * d) * 0.1,
          "out_proj.weight": rng.normal(size=(E, E)) / np.sqrt(E), "out_proj.bias": rng.normal(size=E) * 0.1}
    x = rng.normal(size=(B, L, E)) * 2
    sinks, slopes, cap = rng.normal(size=H), alibi_slopes(H), 3.0

    def layer(xp, dtype, kv_map=lambda t: np.repeat(t, g, axis=1)):
        lin = lambda a, w, b: a.astype(dtype) @ w.T.astype(dtype) + b.astype(dtype)
        b = sd["in_proj_bias"]
        q = lin(x, sd["q_proj_weight"], b[:E])
        k = lin(x, sd["k_proj_weight"], b[E:E + HKV * d])
        v = lin(x, sd["v_proj_weight"], b[E + HKV * d:])
        split = lambda t, n: np.swapaxes(t.reshape(B, L, n, d), 1, 2)
        q, k, v = split(q, H), kv_map(split(k, HKV)), kv_map(split(v, HKV))
        if xp is torch:
            o = variant_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), 1 / np.sqrt(d), True,
                                  cap, slopes, None, sinks, torch).numpy()
        else:
            o = variant_attention(q, k, v, dtype(1 / np.sqrt(d)), True, dtype(cap), slopes, None, sinks, np)
        return lin(np.swapaxes(o, 1, 2).reshape(B, L, E), sd["out_proj.weight"], sd["out_proj.bias"]).astype(np.float64)

    truth, torch64 = layer(np, LD), layer(torch, np.float64)
    torch_err = float(np.max(abs(torch64 - truth)))
    floor = U64 * float(np.max(abs(truth)))
    wrong = layer(torch, np.float64, kv_map=lambda t: np.tile(t, (1, g, 1, 1)))
    with tempfile.TemporaryDirectory() as work:
        os.mkdir(os.path.join(work, "w"))
        for key, t in sd.items():
            save(os.path.join(work, "w", key + ".npy"), t)
        save(os.path.join(work, "x.npy"), x)
        save(os.path.join(work, "sinks.npy"), sinks)
        base = ["layer", "--x", "x.npy", "--heads", str(H), "--weights", "w", "--causal", "--softcap", repr(cap),
                "--sinks", "sinks.npy", "--alibi", "--out", "o.npy", "--force"]
        for precision in PRECISIONS:
            outs = {}
            for backend in BACKENDS:
                summary = json.loads(run(base + ["--backend", backend, "--precision", precision, "--json"], work))
                record(summary["kv_heads"] == HKV,
                       f"layer variants: H_kv {summary['kv_heads']} not inferred from k_proj_weight")
                outs[backend] = np.load(os.path.join(work, "o.npy"))
            naive_err = float(np.max(abs(outs[BASELINE] - truth)))
            if precision == "fp64":
                record(naive_err <= 2 * torch_err + floor,
                       f"layer variants fp64 {BASELINE}: error {naive_err:.3g} > 2x torch64's {torch_err:.3g} + ulp")
                record(float(np.max(abs(wrong - truth))) > 2 * torch_err + floor,
                       "layer variants power: torch64 with K/V heads h % H_kv passes the criterion")
            for backend, o in ((b, o) for b, o in outs.items() if b != BASELINE):
                err = float(np.max(abs(o - truth)))
                record(err <= 2 * naive_err + floor, f"layer variants {backend} {precision}: error {err:.3g} > 2x "
                                                     f"{BASELINE}'s {naive_err:.3g} + ulp")
            LAYER_LOG.append(("GQA g = 4, soft-cap, sinks, ALiBi, causal", precision, naive_err, torch_err))


ATTEND_LOG, LAYER_LOG, HEADROOM, BACKWARD_LOG, GRAD_HEADROOM, LSE_SHARE = [], [], {}, [], {}, {}
VARIANT_LOG, VARIANT_GRAD_LOG = [], []

def test_attn_lab_against_torch_and_long_double():
    print(f"torch {torch.__version__}, numpy {np.__version__}, seed {SEED}, backends {BACKENDS}, "
          f"precisions {list(PRECISIONS)}")
    check_attend()
    check_layer()
    check_power()
    check_backward()
    check_backward_power()
    check_variants()
    check_variants_power()
    check_layer_variants()
    print("largest errors against the long-double truth (naive attn-lab / torch float64):")
    for kind, log in (("attend", ATTEND_LOG), ("layer", LAYER_LOG)):
        for precision in PRECISIONS:
            rows = [r for r in log if r[1] == precision]
            print(f"  {kind:6s} {precision}: naive {max(r[2] for r in rows):.3g}, torch64 {max(r[3] for r in rows):.3g}"
                  f" over {len(rows)} cases")
    print("largest error / allowed of the 2x rule: " + ", ".join(f"{p} {r:.2f}" for p, r in HEADROOM.items()))
    print("backward: torch64's largest gradient error against the long-double formulas: "
          f"{max(r[2] for r in BACKWARD_LOG):.3g} over {len(BACKWARD_LOG)} cases; largest error / allowed of the 2x rule: "
          + ", ".join(f"{p} {r:.2f}" for p, r in GRAD_HEADROOM.items())
          + "; the logsumexp term u_acc L of a backward from the lse, largest, in units of u_store max|T|: "
          + ", ".join(f"{p} {r:.1f}" for p, r in LSE_SHARE.items()))
    print(f"variants: torch64's largest error against the long-double truth {max(r[3] for r in VARIANT_LOG):.3g} over "
          f"{len(VARIANT_LOG)} cases; gradients: largest |ours - torch64| / allowed {max(VARIANT_GRAD_LOG):.2f}")
    CHECKS.finish()
