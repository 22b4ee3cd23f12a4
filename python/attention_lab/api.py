"""attention_lab from Python: a backend of the library on NumPy arrays or torch tensors, and its verdict.

    >>> import numpy as np, attention_lab as al
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 64, 32)) for _ in range(3))    # [heads, n, d]
    >>> r = al.attend(q, k, v, backend="streaming", precision="bf16", causal=True)
    >>> r.out.shape
    (2, 64, 32)
    >>> al.check(r).passed
    True

The library's own extension module (attention_lab._core, python/ext/core.cpp) does the work: the same
registry, backends and verdict as `attn-lab attend --check`, with the same one-line messages (bad shapes,
options or names raise ValueError; a combination a backend does not claim raises NotImplementedError). The GIL
is released while a backend or the verdict runs. Tensors cross once as float64 (the library's entry point
takes float64 inputs and rounds them to the storage precision itself, as it does the CLI's .npy files);
results come back as NumPy arrays, or as torch tensors when torch tensors came in, with the inputs' rank
(2: [n, d], 3: [heads, n, d], 4: [batch, heads, n, d]; K and V with fewer heads than Q: grouped-query
attention).
"""
import importlib
import os
import sys

import numpy as np

from attention_lab import ROOT


def _core():
    """attention_lab._core: installed beside this package (pip install .), else from the build tree
    (ATTN_BUILD, default build/ in the checkout: meson builds it as python/ext/_core)."""
    try:
        return importlib.import_module("attention_lab._core")
    except ImportError:
        pass
    built = os.path.join(os.environ.get("ATTN_BUILD", os.path.join(ROOT, "build")), "python", "ext")
    package = sys.modules["attention_lab"]
    if built not in package.__path__:
        package.__path__.append(built)
    try:
        return importlib.import_module("attention_lab._core")
    except ImportError as e:
        raise ImportError(f"attention_lab._core is not built ({e}): build the project (scripts/setup.sh) or "
                          "pip install . from the checkout") from None


def backends():
    """Every backend of the registry: name, description, traits, source, whether it has a backward pass."""
    return _core().backends()


def load_plugin(path):
    """A plugin library's kernels (include/attn/plugin.h) as backends of the registry; returns their names."""
    return _core().load_plugin(os.fspath(path))


def precisions():
    """Every storage precision: name, unit roundoff, largest finite value, bytes, default accumulation."""
    return _core().precisions()


def _as_float64(x, name):
    """(a float64 [B, H, n, d] array, rank, framework) of a NumPy array or torch tensor of rank 2 to 4."""
    framework = "numpy"
    if type(x).__module__.startswith("torch"):
        framework = "torch"
        x = x.detach().to("cpu")
        x = x.double().numpy()
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: a float array or tensor, not {a.dtype}")
    if a.ndim not in (2, 3, 4):
        raise ValueError(f"{name}: rank {a.ndim}: give [n, d], [heads, n, d] or [batch, heads, n, d]")
    rank = a.ndim
    while a.ndim < 4:
        a = a[np.newaxis]
    return np.ascontiguousarray(a, dtype=np.float64), rank, framework


def _back(a, rank, framework):
    """A [B, H, ...] result in the inputs' rank and framework."""
    if a is None:
        return None
    keep = rank if a.ndim == 4 else rank - 1  # out, weights [B, H, n_q, .]; lse [B, H, n_q]
    a = a.reshape(a.shape[a.ndim - keep:])
    if framework == "torch":
        import torch
        return torch.from_numpy(a)
    return a


_TENSOR_OPTIONS = ("key_lengths", "allowed", "bias", "sinks", "segments", "alibi")


def _option_arrays(**options):
    """The options as the extension takes them: the tensors (mask tensors, sinks, segments; alibi when not a
    bool) as float64 arrays, the rest as given; None is absent."""
    return {name: np.asarray(x, dtype=np.float64) if name in _TENSOR_OPTIONS and x is not None
            and not isinstance(x, bool) else x for name, x in options.items()}


class Result:
    """One backend call: out (and lse, weights where asked), the backend, precision, accumulation, the cold
    call's seconds and workspace bytes. check(result) judges it."""

    def __init__(self, core_result, rank, framework):
        self._core = core_result
        self.out = _back(core_result.out, rank, framework)
        self.lse = _back(core_result.lse, rank, framework)
        self.weights = _back(core_result.weights, rank, framework)
        self.backend, self.precision, self.accumulate = (core_result.backend, core_result.precision,
                                                         core_result.accumulate)
        self.seconds, self.workspace_bytes = core_result.seconds, core_result.workspace_bytes

    def __repr__(self):
        return (f"<attention_lab.Result {self.backend} {self.precision} (accumulate {self.accumulate}), out "
                f"{tuple(self.out.shape)}, {self.seconds * 1e3:.3g} ms cold, workspace {self.workspace_bytes} B>")


def attend(q, k, v, *, backend="streaming", precision="fp32", accumulate=None, scale=None, causal=False,
           window=None, key_lengths=None, allowed=None, bias=None, softcap=None, sinks=None, alibi=None,
           segments=None, kv_splits=0, threads=1, block_q=0, block_k=0, need_lse=False, need_weights=False):
    """Attention by one backend of the registry, the options of `attn-lab attend`: the mask (causal, aligned
    bottom-right; window: causal and the last `window` keys; key_lengths [B]; allowed [n_q, n_kv] bool; bias
    [n_q, n_kv], -inf masks), scale (default 1/sqrt(d_k)), softcap, sinks [H], alibi (True: the paper's slopes,
    or [H] slopes), segments [B, n] document ids, kv_splits, threads, block sizes, accumulate (fp64, fp32,
    storage; default: the precision's). Returns a Result.

    >>> import numpy as np, attention_lab as al
    >>> x = np.random.default_rng(1).standard_normal((16, 8))
    >>> r = al.attend(x, x, x, backend="math", precision="fp64", need_lse=True)
    >>> r.lse.shape
    (16,)
    """
    (qa, rank, framework), (ka, _, _), (va, _, _) = (_as_float64(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    options = _option_arrays(scale=scale, causal=causal, window=window, key_lengths=key_lengths, allowed=allowed,
                             bias=bias, softcap=softcap, sinks=sinks, alibi=alibi, segments=segments,
                             kv_splits=kv_splits, threads=threads, block_q=block_q, block_k=block_k,
                             need_lse=need_lse, need_weights=need_weights)
    r = _core().attend(qa, ka, va, backend=backend, precision=precision, accumulate=accumulate, **options)
    return Result(r, rank, framework)


class BackwardResult:
    """One backward call (the forward once, untimed, then the backward): dq, dk, dv (and the forward's out) in
    the inputs' rank and kind, the backend, precision, and the backward call's seconds. check() judges it."""

    def __init__(self, core_result, ranks, framework):
        self._core = core_result
        self.dq, self.dk, self.dv = (_back(getattr(core_result, n), r, framework) for n, r in zip(("dq", "dk", "dv"),
                                                                                                 ranks))
        self.out = _back(core_result.out, ranks[0], framework)
        self.backend, self.precision, self.seconds = core_result.backend, core_result.precision, core_result.seconds

    def __repr__(self):
        return (f"<attention_lab.BackwardResult {self.backend} {self.precision}: dq {tuple(self.dq.shape)}, "
                f"{self.seconds * 1e3:.3g} ms cold>")


def backward(q, k, v, d_out, *, backend="streaming", precision="fp32", accumulate=None, **options):
    """The gradients dq, dk, dv of a backend for the upstream gradient d_out (attend()'s options); a
    BackwardResult, which check() judges against the gradients' ground truth.

    >>> import numpy as np, attention_lab as al
    >>> x = np.random.default_rng(3).standard_normal((2, 24, 8))
    >>> g = al.backward(x, x, x, x, backend="streaming", precision="fp32", causal=True)
    >>> g.dq.shape, al.check(g).passed
    ((2, 24, 8), True)
    """
    converted = [_as_float64(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (d_out, "d_out"))]
    r = _core().backward(*(c[0] for c in converted), backend=backend, precision=precision, accumulate=accumulate,
                         **_option_arrays(**options))
    return BackwardResult(r, [c[1] for c in converted[:3]], converted[0][2])


def ground_truth(q, k, v, *, precision=None, **options):
    """The ground truth the verdicts use, of q, k, v rounded to `precision` when given (attend()'s options):
    a dict with out, lse, weights (in the inputs' rank and kind), truth (mp50: 50 digits; double-double; fp64,
    by cost) and out_error (a bound on the truth's own error, the largest row's)."""
    (qa, rank, framework), (ka, _, _), (va, _, _) = (_as_float64(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    t = _core().ground_truth(qa, ka, va, precision=precision, **_option_arrays(**options))
    return {**t, "out": _back(t["out"], rank, framework), "lse": _back(t["lse"], rank, framework),
            "weights": _back(t["weights"], rank, framework)}


class Verdict:
    """verify()'s verdicts on a result, as `attn-lab attend --check --json` prints them: the truth used, the
    largest errors, the tight verdict (per row: the probabilistic bound and twice the baseline's error) and the
    guaranteed one (the worst-case bound); `passed` needs both. `fields` holds every field."""

    def __init__(self, fields):
        self.fields = fields
        self.passed = bool(fields["passed"])
        self.truth = fields["truth"]
        self.gradients = [g for g in ("dq", "dk", "dv", "dbias", "dsinks") if g in fields]  # a backward's verdict
        if self.gradients:
            self.informative = bool(fields["tight_informative"]) and all(fields[g]["informative"]
                                                                         for g in self.gradients)
            return
        self.max_abs = fields["max_abs"]
        self.tight_error, self.tight_tolerance = fields["tight_error"], fields["tight_tolerance"]
        self.bound = fields["bound"]
        self.informative = bool(fields["tight_informative"]) and bool(fields["informative"])

    def __bool__(self):
        return self.passed

    def __repr__(self):
        f = self.fields
        if self.gradients:
            return (f"<attention_lab.Verdict {'PASS' if self.passed else 'FAIL'} (gradients, truth {f['truth']}): "
                    + "; ".join(f"{g} max error {f[g]['max_abs']:.3g}, tight {f[g]['tight_error']:.3g} / "
                                f"{f[g]['tight_tolerance']:.3g}, bound {f[g]['bound']:.3g}: "
                                f"{'within' if f[g]['within'] and f[g]['within_tight'] else 'EXCEEDED'}"
                                for g in self.gradients) + ">")
        tight = "within" if f["within_tight"] else "EXCEEDED"
        worst = "within" if f["within"] else "EXCEEDED"
        return (f"<attention_lab.Verdict {'PASS' if self.passed else 'FAIL'}: max |O - truth| {f['max_abs']:.3g} "
                f"(truth {f['truth']}); tight: row {f['tight_row']} error {f['tight_error']:.3g}, tolerance "
                f"{f['tight_tolerance']:.3g}: {tight}; guaranteed: bound {f['bound']:.3g}: {worst}"
                + ("" if self.informative else "; uninformative") + ">")


def check(result, q=None, k=None, v=None, *, precision="fp32", accumulate=None, scale=None, causal=False,
          window=None, key_lengths=None, allowed=None, bias=None, softcap=None, sinks=None, alibi=None,
          segments=None):
    """The verdict, tight and guaranteed, as `attn-lab attend --check` gives it, against the ground truth of
    the inputs rounded to the storage precision (50 digits where affordable):

    - on a Result of attend(): its output (and lse, weights where returned); on a BackwardResult of
      backward(): its gradients;
    - on an output computed elsewhere (a NumPy array or torch tensor, your kernel's), with the q, k, v it was
      computed from and the problem's options (attend()'s): judged as an outside kernel that stores in
      `precision` and computes under `accumulate` (default: the precision's, fp32 for bf16 and fp16).

    >>> import numpy as np, attention_lab as al
    >>> x = np.random.default_rng(2).standard_normal((32, 16))
    >>> s = x @ x.T / 4.0
    >>> p = np.exp(s - s.max(axis=1, keepdims=True))
    >>> al.check((p / p.sum(axis=1, keepdims=True)) @ x, x, x, x, precision="fp64").passed
    True
    >>> al.check(p @ x, x, x, x, precision="fp64").passed    # not normalised
    False
    """
    if isinstance(result, (Result, BackwardResult)):
        if q is not None or k is not None or v is not None:
            raise TypeError("check: a Result carries its inputs; give q, k, v only with an output array")
        core = _core()
        return Verdict(core.check(result._core) if isinstance(result, Result) else core.check_backward(result._core))
    if q is None or k is None or v is None:
        raise TypeError("check: a Result from attend(), or an output with the q, k, v it was computed from")
    (oa, _, _), (qa, _, _), (ka, _, _), (va, _, _) = (_as_float64(t, n) for t, n in
                                                      ((result, "out"), (q, "q"), (k, "k"), (v, "v")))
    options = _option_arrays(scale=scale, causal=causal, window=window, key_lengths=key_lengths, allowed=allowed,
                             bias=bias, softcap=softcap, sinks=sinks, alibi=alibi, segments=segments)
    return Verdict(_core().check_output(oa, qa, ka, va, precision=precision, accumulate=accumulate, **options))
