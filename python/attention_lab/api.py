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
is released while a backend or the verdict runs. Inputs of any real dtype and strides cross with one copy, the
conversion into the library's float64 inputs (its entry point owns float64 inputs and rounds them to the
storage precision itself, as it does the CLI's .npy files; the report keeps them, as the backend saw them,
for the verdict);
results come back as NumPy arrays, or as torch tensors when torch tensors came in, with the inputs' rank
(2: [n, d], 3: [heads, n, d], 4: [batch, heads, n, d]; K and V with fewer heads than Q: grouped-query
attention).
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from attention_lab import ROOT
from attention_lab import bridge

# A NumPy array, a torch tensor, or anything np.asarray takes; a path.
Tensor = Any
PathLike = Union[str, "os.PathLike[str]"]

kernel = bridge.kernel  # attention_lab.kernel: declares a Python function a kernel (see attention_lab.bridge)


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


def backends() -> list[dict]:
    """Every backend of the registry: name, description, traits, source, whether it has a backward pass."""
    return _core().backends()


def load_plugin(path: PathLike) -> list[str]:
    """A plugin library's kernels (include/attn/plugin.h) as backends of the registry; returns their names."""
    return _core().load_plugin(os.fspath(path))


def precisions() -> list[dict]:
    """Every storage precision: name, unit roundoff, largest finite value, bytes, default accumulation."""
    return _core().precisions()


def _as_float64(x, name):
    """(a [B, H, n, d] NumPy view of x, rank, framework) of a NumPy array or torch tensor of rank 2 to 4, not
    copied (a torch tensor is viewed through .numpy(); bf16, which NumPy lacks, widened to fp32, exactly): the
    extension converts it once, into the library's float64 inputs."""
    framework = "numpy"
    if type(x).__module__.startswith("torch"):
        import torch
        framework = "torch"
        x = x.detach().to("cpu")
        x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: a float array or tensor, not {a.dtype}")
    if a.ndim not in (2, 3, 4):
        raise ValueError(f"{name}: rank {a.ndim}: give [n, d], [heads, n, d] or [batch, heads, n, d]")
    return a.reshape((1,) * (4 - a.ndim) + a.shape), a.ndim, framework


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
    """One backend call: out (and lse, weights where asked), the backend, precisions, accumulation, the cold
    call's seconds (the backend alone), call_seconds (the library's whole call as a C++ caller makes it:
    rounding the inputs to the storage precision, the workspace, the backend) and workspace bytes.
    check(result) judges it."""

    def __init__(self, core_result, rank, framework):
        self._core = core_result
        self.out = _back(core_result.out, rank, framework)
        self.lse = _back(core_result.lse, rank, framework)
        self.weights = _back(core_result.weights, rank, framework)
        self.backend, self.precision, self.accumulate = (core_result.backend, core_result.precision,
                                                         core_result.accumulate)
        self.seconds, self.workspace_bytes = core_result.seconds, core_result.workspace_bytes
        self.call_seconds = core_result.call_seconds  # the library's whole call, as a C++ caller makes it

    def __repr__(self):
        return (f"<attention_lab.Result {self.backend} {self.precision} (accumulate {self.accumulate}), out "
                f"{tuple(self.out.shape)}, {self.seconds * 1e3:.3g} ms cold, workspace {self.workspace_bytes} B>")


def attend(q: Tensor, k: Tensor, v: Tensor, *, backend: str = "streaming", precision: str = "fp32",
           accumulate: Optional[str] = None, scale: Optional[float] = None, causal: bool = False,
           window: Optional[int] = None, key_lengths: Optional[Tensor] = None, allowed: Optional[Tensor] = None,
           bias: Optional[Tensor] = None, softcap: Optional[float] = None, sinks: Optional[Tensor] = None,
           alibi: Union[bool, Tensor, None] = None, segments: Optional[Tensor] = None, kv_splits: int = 0,
           threads: int = 1, block_q: int = 0, block_k: int = 0, need_lse: bool = False,
           need_weights: bool = False) -> Result:
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


def backward(q: Tensor, k: Tensor, v: Tensor, d_out: Tensor, *, backend: str = "streaming", precision: str = "fp32",
             accumulate: Optional[str] = None, **options: Any) -> BackwardResult:
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


def ground_truth(q: Tensor, k: Tensor, v: Tensor, *, precision: Optional[str] = None, **options: Any) -> dict:
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


def check(result: Union[Result, BackwardResult, Tensor], q: Optional[Tensor] = None, k: Optional[Tensor] = None,
          v: Optional[Tensor] = None, *, precision: str = "fp32", accumulate: Optional[str] = None,
          scale: Optional[float] = None, causal: bool = False, window: Optional[int] = None,
          key_lengths: Optional[Tensor] = None, allowed: Optional[Tensor] = None, bias: Optional[Tensor] = None,
          softcap: Optional[float] = None, sinks: Optional[Tensor] = None, alibi: Union[bool, Tensor, None] = None,
          segments: Optional[Tensor] = None) -> Verdict:
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


class BenchReport:
    """bench()'s timings: one row per backend (dict: backend, precision, accumulate, threads, samples (warm
    calls' seconds), median_seconds, interval (the median's 95% interval from order statistics, None with
    fewer than 6 repetitions), gflops (at the median), cold_seconds (the first call, fresh workspace),
    ratio (its median time over the first backend's) and ratio_interval (percentile bootstrap, fixed seed));
    the shape, FLOPs per call and the peak when measured. Its repr is the table."""

    def __init__(self, rows, flops, shape, peak):
        self.rows, self.flops, self.shape, self.peak = rows, flops, shape, peak

    def __repr__(self):
        head = (f"<attention_lab.BenchReport {self.shape}, {self.flops / 1e9:.3g} GFLOP per call"
                + (f", peak {self.peak:.1f} GFLOP/s (attn-lab peak, {self.rows[0]['precision']})" if self.peak else "") + ":")
        lines = [head]
        from attention_lab import stats
        for r in self.rows:
            interval = stats.fmt_interval(None if r["interval"] is None else
                                          tuple(x * 1e3 for x in r["interval"]), "{:.4g}")
            ratio = ("" if r is self.rows[0] else f"; {r['ratio']:.3g}x the first's time "
                     f"{stats.fmt_interval(r['ratio_interval'])}")
            lines.append(f"  {r['backend']} {r['precision']}: median {r['median_seconds'] * 1e3:.4g} ms (95% {interval}) "
                         f"over {len(r['samples'])} calls, {r['gflops']:.1f} GFLOP/s"
                         + (f" ({r['gflops'] / self.peak:.0%} of peak)" if self.peak else "") + ratio)
        return "\n".join(lines) + ">"


def bench(q: Tensor, k: Tensor, v: Tensor, *, backends: Union[str, Sequence[str]] = ("streaming",),
          precision: str = "fp32", accumulate: Optional[str] = None, repetitions: int = 21, rounds: int = 3,
          peak: bool = False, **options: Any) -> BenchReport:
    """Times backends on one problem (attend()'s options), in this process: for each of `rounds` rounds, each
    backend in turn makes one cold call (fresh workspace) and repetitions / rounds warm calls reusing it, so
    that a drift of the machine falls on every backend alike; the warm calls are the samples. Returns a
    BenchReport: medians with 95% intervals, GFLOP/s (the FLOPs of Q K^T and P V, halved for causal), each
    backend's time over the first's with a bootstrap interval, and with peak=True the peak `attn-lab peak`
    measures (the fp32 FMA peak; for bf16 the bf16 dot product's where the CPU has one; threads x one
    thread's). For published figures use scripts/run, which
    also records the machine and samples adaptively.

    >>> import numpy as np, attention_lab as al
    >>> x = np.random.default_rng(4).standard_normal((4, 128, 64))
    >>> b = al.bench(x, x, x, backends=("streaming", "math"), repetitions=6, rounds=2)
    >>> [r["backend"] for r in b.rows], len(b.rows[1]["samples"])
    (['streaming', 'math'], 6)
    """
    from attention_lab import stats
    if isinstance(backends, str):
        backends = (backends,)
    if not backends or rounds < 1 or repetitions < rounds:
        raise ValueError("bench: give at least one backend, rounds >= 1 and repetitions >= rounds")
    (qa, _, _), (ka, _, _), (va, _, _) = (_as_float64(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    opts = _option_arrays(**options)
    per_round = [repetitions // rounds + (1 if i < repetitions % rounds else 0) for i in range(rounds)]
    samples, cold, last = {b: [] for b in backends}, {b: [] for b in backends}, {}
    for n in per_round:
        for b in backends:
            r = _core().attend(qa, ka, va, backend=b, precision=precision, accumulate=accumulate, repetitions=n,
                               **opts)
            samples[b] += list(r.warm_seconds)
            cold[b].append(r.seconds)
            last[b] = r
    first = backends[0]
    rows = []
    for b in backends:
        r, xs = last[b], samples[b]
        ratio, ratio_interval = stats.ratio_ci(xs, samples[first])
        ci = stats.median_ci(xs)
        rows.append({"backend": b, "precision": r.precision, "accumulate": r.accumulate,
                     "threads": options.get("threads", 1), "samples": xs, "median_seconds": stats.median(xs),
                     "interval": None if ci is None else ci[:2], "gflops": r.flops / stats.median(xs) / 1e9,
                     "cold_seconds": min(cold[b]), "ratio": ratio, "ratio_interval": ratio_interval})
    return BenchReport(rows, last[first].flops, "x".join(str(n) for n in qa.shape),
                       _peak(precision, options.get("threads", 1)) if peak else None)


def _peak(precision, threads):
    """The peak in GFLOP/s a rate in `precision` on `threads` threads is a fraction of (runs.precision_peak: the
    fp32 FMA peak, the bf16 dot product's for bf16 where the CPU has it), as `attn-lab peak --json` measures it."""
    import json
    import subprocess
    from attention_lab import runs
    out = subprocess.run([_attn_lab("peak"), "peak", "--json"], capture_output=True, text=True, check=True).stdout
    return float(runs.precision_peak(json.loads(out), precision, threads))


def open_run(path: PathLike) -> Any:
    """A run of scripts/run (a run folder, reports/latest, or a Google Benchmark JSON file) as
    attention_lab.runs.Run: its benchmarks' samples, fields and FLOPs, the machine's fingerprint, its measured
    peaks, accuracy and claims. ValueError for a folder that is not a run."""
    from attention_lab import runs
    try:
        return runs.Run(os.fspath(path))
    except runs.RunError as e:
        raise ValueError(str(e)) from None


def compare_runs(a: PathLike, b: PathLike, *, level: float = 0.95, across_machines: bool = False) -> dict:
    """Run b against run a, as `attn-lab compare` judges them (Mann-Whitney U with Holm's correction, bootstrap
    intervals of each benchmark's median ratio; across_machines: fractions of each machine's measured peak),
    without writing files: a dict with `benchmarks` (one row each: benchmark, median_a, median_b, ratio,
    interval, p_holm, verdict), `regressions`, the accuracy and claims that changed, and `markdown` (what
    compare.md holds). ValueError for runs that cannot be compared (different machines, no common benchmark)."""
    from attention_lab import compare, runs
    try:
        _, _, result, md, _ = compare.compare_runs(os.fspath(a), os.fspath(b), level, across_machines)
    except (compare.CompareError, runs.RunError) as e:
        raise ValueError(str(e)) from None
    return {**result, "markdown": md}


def run_history(*, benchmark: str = r"^attn_h8/streaming/fp32/causal:0/", machine: Optional[str] = None,
            db: Optional[PathLike] = None) -> dict:
    """The runs' history store (`attn-lab history`; default reports/history.sqlite, which scripts/run appends
    every run to), read: `series` (per machine fingerprint and benchmark matching the regular expression
    `benchmark`: each run's stamp, commit and repetitions' seconds, in run order) and `changes` (consecutive
    runs of one machine compared: ratio, bootstrap interval, Holm-corrected p, significant). ValueError for a
    missing store or a bad expression."""
    h = importlib.import_module("attention_lab.history")  # not `from attention_lab import`: this is al.history
    try:
        store = h.open_store(os.fspath(db) if db is not None else h.DEFAULT_DB, create=False)
        found = h.series(store, benchmark, machine)
    except h.HistoryError as e:
        raise ValueError(str(e)) from None
    return {"series": [{"fingerprint": fp, "benchmark": name,
                        "runs": [{"stamp": st, "commit": c, "seconds": x} for st, c, x in pts]}
                       for (fp, name), pts in sorted(found.items())],
            "changes": h.changes(found, 0.95)}


def append_history(*run_paths: PathLike, db: Optional[PathLike] = None) -> dict:
    """Adds runs (run folders) to the history store (`attn-lab history append`; one transaction per run, a run
    already there is skipped): {stamp: True if appended, False if it was there}. ValueError for a folder that
    is not a run, before the store is touched."""
    from attention_lab import runs
    h = importlib.import_module("attention_lab.history")
    try:
        loaded = [runs.Run(os.fspath(r)) for r in run_paths]
        store = h.open_store(os.fspath(db) if db is not None else h.DEFAULT_DB, create=True)
        return {r.stamp: bool(h.append(store, r)) for r in loaded}
    except (h.HistoryError, runs.RunError) as e:
        raise ValueError(str(e)) from None


def _attn_lab(what="verify"):
    """attn-lab: the checkout's build (ATTN_BUILD, default build/ in the checkout), else the one `pip install .`
    put beside this interpreter (the environment's bin/)."""
    built = os.path.join(os.environ.get("ATTN_BUILD", os.path.join(ROOT, "build")), "tools", "attn-lab")
    for path in (built, os.path.join(os.path.dirname(sys.executable), "attn-lab")):
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError(f"{what} runs attn-lab, which is neither built at {built} nor installed beside "
                       f"{sys.executable}: build the checkout (scripts/setup.sh) or pip install . from it")


def _bridge_env(env):
    """env with attn-lab's Python bridge where `pip install .` put it (in this package), when it did."""
    installed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libattn_python.so")
    if os.path.isfile(installed) and "ATTN_PYTHON_BRIDGE" not in env:
        env["ATTN_PYTHON_BRIDGE"] = installed
    return env


class Counterexample:
    """A failed cell's smallest case, as RapidCheck shrank it: the inputs q, k, v ([B, H, n, d] float64, already
    in the storage precision's values), the problem's options as attend()/check() take them (`options`), the
    precision and accumulation, the case's one-line description and the folder its .npy files are in;
    `replay` is the shell command that replays it (None for a function of this process).
    check(out) judges an output computed on it."""

    def __init__(self, record, replayable):
        self.case, self.folder = record["case"], record["folder"]
        self.replay = record["replay"] if replayable else None
        kw = dict(record["attend"])
        self.precision, self.accumulate = kw.pop("precision"), kw.pop("accumulate")
        self.q, self.k, self.v = (np.load(os.path.join(self.folder, n + ".npy")) for n in ("q", "k", "v"))
        self.options = {name: np.load(os.path.join(self.folder, x)) if isinstance(x, str) else x
                        for name, x in kw.items()}

    def check(self, out: Tensor) -> Verdict:
        """check() of an output computed on this case (its q, k, v and options)."""
        judged = {n: x for n, x in self.options.items() if n not in ("threads", "block_q", "block_k")}
        return check(out, self.q, self.k, self.v, precision=self.precision, accumulate=self.accumulate, **judged)

    def __repr__(self):
        return f"<attention_lab.Counterexample {self.precision}/{self.accumulate}: {self.case}>"


class VerifyCell:
    """One property in one configuration: status (pass, fail, not supported, crash, hang, error), the cases
    that ran, RapidCheck's description, and the counterexample of a failure; or one invariance (property
    "invariance:ID:PASS") in one configuration and pass: `invariance` says "bitwise" or "within bounds" when it
    passed (None otherwise)."""

    def __init__(self, record, replayable):
        self.kernel, self.property, self.name = record["kernel"], record["property"], record["property_name"]
        self.config, self.status, self.cases = record["config"], record["status"], record["cases"]
        self.description = record.get("description", "")
        self.invariance = record.get("invariance")
        self.counterexample = (Counterexample(record["counterexample"], replayable)
                               if "counterexample" in record else None)

    @property
    def failed(self):
        return self.status not in ("pass", "not supported")

    def __repr__(self):
        return f"<{self.kernel}: {self.name}, {self.config}: {self.status}>"


class VerifyReport:
    """verify()'s verdict: `passed`, `cells` (VerifyCell each), `failures` (the failed ones), `folder` (with
    verdict.md, verdict.json, counterexamples/), `fields` (verdict.json), `bench` (the short benchmark beside
    the built-in backends). Its repr lists the failures; in a notebook it shows as verdict.md."""

    def __init__(self, fields, folder, replayable):
        self.fields, self.folder = fields, folder
        self.passed = fields["verdict"] == "PASS"
        self.cells = [VerifyCell(c, replayable) for k in fields["kernels"] for c in k["cells"]]
        self.failures = [c for c in self.cells if c.failed]
        self.bench = [r for k in fields["kernels"] for r in k.get("bench", [])]

    def __bool__(self):
        return self.passed

    def __repr__(self):
        names = ", ".join(k["name"] for k in self.fields["kernels"])
        counts = {}
        for c in self.cells:
            counts[c.status] = counts.get(c.status, 0) + 1
        lines = [f"<attention_lab.VerifyReport {names}: {'PASS' if self.passed else 'FAIL'} (profile "
                 f"{self.fields['profile']}, seed {self.fields['seed']}; "
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {self.folder})"]
        for c in self.failures:
            lines.append(f"  {c.status}: {c.name}, {c.config}"
                         + (f": {c.counterexample.case}" if c.counterexample else ""))
        return "\n".join(lines) + ">"

    def _repr_markdown_(self):
        with open(os.path.join(self.folder, "verdict.md")) as f:
            return f.read()


def verify(kernel: Union[Callable[..., Any], str], *, profile: str = "smoke", out: Optional[PathLike] = None,
           force: bool = False, quiet: bool = False) -> VerifyReport:
    """The property suite on a kernel, as `attn-lab verify` runs it: every property of the suite in every
    configuration (storage x accumulation) the kernel claims, under RapidCheck with a fixed seed, each failure
    shrunk to its smallest case; then a short benchmark beside the built-in backends. Returns a VerifyReport.

    kernel: a Python function (a notebook's too: it is pickled by value, cloudpickle, and run by the Python
    bridge in attn-lab's child processes, so a crash is the kernel's failure, not the caller's), declared with
    attention_lab.kernel, or undeclared: then an fp32 kernel f(q, k, v, *, scale, **options) on NumPy arrays
    [B, H, n, d] that takes no mask or variant; or a built-in backend's name; or a plugin library's path or a
    "python:MODULE:FUNCTION" spec. profile: smoke, quick or full (10, 30, 100 cases per property and
    configuration). out: the verdict's folder (default: a new temporary one); one holding a verdict is
    replaced only with force=True. Progress goes to stderr unless quiet.

    Runs attn-lab: the checkout's build, or the one `pip install .` installs into the environment's bin/.
    A temporary folder made for a call that fails (bad input: ValueError, TypeError) is removed.
    """
    import tempfile
    if profile not in ("smoke", "quick", "full"):
        raise ValueError(f"profile {profile!r} is not one of smoke, quick, full")
    tool = _attn_lab()
    folder = os.path.abspath(os.fspath(out)) if out is not None else tempfile.mkdtemp(prefix="attn-verify-")
    try:
        return _verify_into(folder, tool, kernel, profile, force, quiet)
    except BaseException:
        if out is None:  # the temporary folder made for this call: nothing in it for the caller to read
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _verify_into(folder, tool, kernel, profile, force, quiet):
    """verify's run of attn-lab verify into `folder`."""
    import subprocess
    env = _bridge_env(dict(os.environ))
    env.setdefault("ATTN_PYTHON", sys.executable)  # the bridge's interpreter in attn-lab's workers: this one
    replayable = True
    if callable(kernel):
        import cloudpickle
        if not isinstance(getattr(kernel, "attn_kernel", None), dict):  # declared on a wrapper, not on the caller's
            name = "".join(c if c.isalnum() or c in "-_" else "-" for c in getattr(kernel, "__name__", "kernel"))
            user = kernel
            kernel = bridge.kernel(name=name if name.strip("-") and name != "-lambda-" else "python-kernel",
                                   description=((user.__doc__ or "").strip().splitlines() or ["a Python function"])[0],
                                   storage={"fp32": "fp32"})(lambda q, k, v, **options: user(q, k, v, **options))
        kernels = os.path.join(folder, "kernel")
        os.makedirs(kernels, exist_ok=True)
        path = os.path.join(kernels, "kernel.pkl")
        with open(path + ".tmp", "wb") as f:
            cloudpickle.dump(kernel, f)
        os.replace(path + ".tmp", path)
        env["ATTN_PICKLED_KERNELS"] = kernels
        # The child imports what this process can.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        target, replayable = ["--plugin", "python:attention_lab.pickled:kernel"], False
    elif isinstance(kernel, str) and (kernel.startswith("python:") or os.sep in kernel or kernel.endswith(".so")):
        target = ["--plugin", kernel]
    elif isinstance(kernel, str):
        target = ["--backend", kernel]
    else:
        raise TypeError(f"verify: a Python function, a backend's name or a plugin, not {type(kernel).__name__}")
    command = [tool, "verify", *target, "--profile", profile, "--out", folder] + (["--force"] if force else [])
    p = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tail = []
    try:
        for line in p.stderr:
            tail = (tail + [line.rstrip("\n")])[-3:]
            if not quiet:
                sys.stderr.write(line)
    finally:  # Ctrl-C, say: the verification stops with the caller
        if p.poll() is None and sys.exc_info()[0] is not None:
            p.kill()
    if p.wait() not in (0, 1) or not os.path.isfile(os.path.join(folder, "verdict.json")):
        raise ValueError(tail[-1].removeprefix("attn-lab: ") if tail else f"attn-lab verify exited {p.returncode}")
    import json
    with open(os.path.join(folder, "verdict.json")) as f:
        return VerifyReport(json.load(f), folder, replayable)
