"""Python callables as attention-lab backends: the Python side of the bridge plugin
(plugins/python/python_bridge.cpp), which attn-lab, attn-bench and scripts/run load for
`--plugin python:MODULE:FUNCTION`.

A kernel is a function f(q, k, v, **options) -> out, or (out, lse) where it returns the logsumexp,
declared with @kernel (and, where it has one, its backward g(q, k, v, out, lse, d_out, **options) ->
(dq, dk, dv) given the forward's out and logsumexp (None for a kernel without lse): what attn-bench's
backward families time):

    from attention_lab.bridge import kernel

    @kernel(name="mine", description="...", storage={"fp32": "fp32"}, framework="torch",
            masks=("causal",), variants=("gqa",), lse=False, threads=True)
    def mine(q, k, v, *, scale, causal, threads, **options):
        ...

storage: each storage precision it takes and the accumulation it really computes in (fp64, fp32, or
the storage itself); framework: what q, k, v are ("numpy": arrays viewing the caller's buffers;
"torch": tensors viewing them through torch.from_numpy, bf16 through a bit view; no copy either way);
masks: causal, window, keypad, bool, bias (none is always taken); variants: gqa, softcap, sinks, alibi;
lse: it returns (out, lse) when options["need_lse"]; threads: it honours options["threads"] (the
bridge sets torch's thread count for torch kernels); backward: the function g above. The
caller asks only for what is declared.

The options: scale (resolved), causal (bool: the suite's bottom-right alignment, query i is position
i + n_kv - n_q), window (int, causal and the last `window` keys), key_lengths ([B]), allowed ([n_q, n_kv]
bool), bias ([n_q, n_kv] float64, -inf masks), softcap, sinks ([H] or None), alibi_slopes ([H] or None),
threads, need_lse. The shapes: q [B, H, n_q, d_k], k [B, H_kv, n_kv, d_k], v [B, H_kv, n_kv, d_v]; out
[B, H, n_q, d_v] in q's dtype; lse [B, H, n_q].

What the timed call contains: the wrapping of the caller's buffers (views, microseconds), the kernel, and
one copy of its output into the caller's O (B H n_q d_v elements, against the kernel's B H n_q n_kv (d_k +
d_v) multiply-adds); `attn-lab attend --plugin python:attention_lab.bridge:identity` times the bridge alone.
An exception in the kernel is one clear error (attend, bench) or one failed cell (verify), never a crash.
"""
import importlib
import importlib.util
import os
import sys
import warnings

import numpy as np

# include/attn/plugin.h's values (the test `plugins` checks them against the header).
ABI_DTYPES = {0: "fp64", 1: "fp32", 2: "bf16", 3: "fp16"}
ABI_ACCUMULATE = {"fp64": 0, "fp32": 1, "storage": 2}
CAPABILITIES = {"fp64": 1 << 0, "fp32": 1 << 1, "bf16": 1 << 2, "fp16": 1 << 3,
                "acc_fp64": 1 << 4, "acc_fp32": 1 << 5, "acc_storage": 1 << 6,
                "causal": 1 << 8, "window": 1 << 9, "keypad": 1 << 10, "bool": 1 << 11, "bias": 1 << 12,
                "gqa": 1 << 16, "softcap": 1 << 17, "sinks": 1 << 18, "alibi": 1 << 19, "segments": 1 << 20,
                "lse": 1 << 24, "threads": 1 << 25, "backward": 1 << 26}
MASKS = {0: "none", 1: "causal", 2: "window", 3: "keypad", 4: "bool", 5: "bias"}
_NUMPY = {"fp64": np.float64, "fp32": np.float32, "bf16": np.uint16, "fp16": np.float16}
_ITEM = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}


class KernelError(Exception):
    """A kernel's declaration that cannot be used: one line."""


class Unsupported(Exception):
    """Raised by a kernel for a problem its declaration cannot express it lacks (PyTorch's CPU flash kernel
    needs d_k = d_v, say): the call is reported "not supported", never a failure or a pass."""


def kernel(*, name, description, storage, framework="numpy", masks=(), variants=(), lse=False, threads=False,
           backward=None):
    """Declares a Python function an attention-lab kernel (see the module's docstring)."""
    def declare(f):
        f.attn_kernel = {"name": name, "description": description, "storage": dict(storage),
                         "framework": framework, "masks": tuple(masks), "variants": tuple(variants),
                         "lse": bool(lse), "threads": bool(threads), "backward": backward}
        return f
    return declare


@kernel(name="bridge-identity", description="returns v's first n_q rows: the bridge's own cost, no attention",
        storage={"fp64": "fp64", "fp32": "fp32"})
def identity(q, k, v, **options):
    """Not attention: for timing the bridge alone (its verdict fails, as it should)."""
    return v[:, :, :q.shape[2], :]


_KERNELS = []  # (function, declaration), by the id describe() returned


def _import_torch():
    """PyTorch, where installed, imported before any kernel's module and with RTLD_DEEPBIND, so that its
    libraries bind to their own symbols before the host's. Without it libtorch_cpu's calls to sgemm_ (its MKL,
    which it exports) bound to the OpenBLAS that attn-lab and attn-bench link: PyTorch's GEMMs ran on the
    host's BLAS, and at two threads each of PyTorch's OpenMP workers called the two-thread OpenBLAS, which
    serialises concurrent callers (torch-flash, B = 1, H = 8, n = 4096, d = 64, 2 threads: 546 ms against
    240 ms in a plain Python process, measured 2026-12-02). Only PyTorch: with every extension module loaded
    so, OpenVINO's and ONNX Runtime's pybind11 modules fail (std::bad_cast)."""
    if "torch" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
    try:
        import torch  # noqa: F401
    finally:
        sys.setdlopenflags(flags)


def _declaration(spec):
    if spec.count(":") != 1:
        raise KernelError(f"python:{spec}: give MODULE:FUNCTION (e.g. python:attention_lab.peers:torch_math)")
    module, function = spec.split(":")
    _import_torch()
    try:
        f = getattr(importlib.import_module(module), function)
    except ImportError as e:
        raise KernelError(f"python:{spec}: cannot import {module} ({e})")
    except AttributeError:
        raise KernelError(f"python:{spec}: {module} has no {function}")
    d = getattr(f, "attn_kernel", None)
    if not isinstance(d, dict):
        raise KernelError(f"python:{spec}: {function} is not declared a kernel (@attention_lab.bridge.kernel)")
    for words, known in ((list(d["storage"]), _NUMPY), (list(d["storage"].values()), ABI_ACCUMULATE),
                         (d["masks"], CAPABILITIES), (d["variants"], CAPABILITIES)):
        unknown = [w for w in words if w not in known]
        if unknown:
            raise KernelError(f"python:{spec}: unknown {unknown} in its declaration")
    if d["framework"] not in ("numpy", "torch"):
        raise KernelError(f"python:{spec}: framework {d['framework']!r} (numpy or torch)")
    if d.get("backward") is not None and not callable(d["backward"]):
        raise KernelError(f"python:{spec}: backward must be a function g(q, k, v, out, lse, d_out, **options)")
    return f, d


def describe(spec):
    """(id, name, description, capabilities, accumulate_by_dtype) of the kernel `spec` (MODULE:FUNCTION)."""
    f, d = _declaration(spec)
    caps = 0
    by_dtype = [0, 0, 0, 0]
    for store, acc in d["storage"].items():
        caps |= CAPABILITIES[store] | CAPABILITIES["acc_" + acc]
        by_dtype[[k for k, v in ABI_DTYPES.items() if v == store][0]] |= 1 << ABI_ACCUMULATE[acc]
    for w in d["masks"] + d["variants"]:
        caps |= CAPABILITIES[w]
    caps |= (CAPABILITIES["lse"] if d["lse"] else 0) | (CAPABILITIES["threads"] if d["threads"] else 0)
    caps |= CAPABILITIES["backward"] if d.get("backward") is not None else 0
    _KERNELS.append((f, d))
    return len(_KERNELS) - 1, d["name"], d["description"], caps, tuple(by_dtype)


def _array(view, dtype, shape, strides):
    """The caller's strided tensor as a NumPy array on its buffer (no copy)."""
    store = ABI_DTYPES[dtype]
    item = _ITEM[store]
    return np.ndarray(shape, dtype=_NUMPY[store], buffer=view, strides=tuple(s * item for s in strides)), store


def _to_torch(a, store):
    import torch
    t = torch.from_numpy(a)  # a view: no copy (read-only buffers warn; nothing is written through them)
    return t.view(torch.bfloat16) if store == "bf16" else t


def _from_result(x, store):
    """A kernel's result as a NumPy array of the storage's dtype."""
    if hasattr(x, "detach"):  # a torch tensor
        import torch
        x = x.detach().contiguous()
        if store == "bf16":
            if x.dtype != torch.bfloat16:
                raise KernelError(f"the kernel returned {x.dtype} for bf16 storage")
            return x.view(torch.int16).numpy().view(np.uint16)
        x = x.numpy()
    x = np.asarray(x)
    if x.dtype != _NUMPY[store]:
        raise KernelError(f"the kernel returned {x.dtype} for {store} storage")
    return x


def _keywords(options, n_q, n_kv, need_lse):
    """The kernel's keyword arguments from the ABI's options; None where the bridge cannot pass the mask."""
    mask = MASKS[options["mask"]]
    if mask not in ("none", "causal", "window", "bias"):
        return None
    kw = {"scale": options["scale"], "causal": mask == "causal", "threads": options["threads"],
          "need_lse": need_lse, "softcap": options["softcap"] or None,
          "sinks": None if options["sinks"] is None else np.array(options["sinks"]),
          "alibi_slopes": None if options["alibi_slopes"] is None else np.array(options["alibi_slopes"])}
    if mask == "window":
        kw["window"] = options["window"]
    if mask == "bias":
        kw["bias"] = np.array(options["bias"]).reshape(n_q, n_kv)
    return kw


def _framework(d, options, store, arrays):
    """The arrays as the kernel takes them: NumPy views, or torch tensors viewing them (torch's thread count
    set first when the kernel honours threads)."""
    if d["framework"] != "torch":
        return arrays
    import torch
    if d["threads"]:
        torch.set_num_threads(int(options["threads"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only buffer
        return [_to_torch(a, store) for a in arrays]


def call(kid, q, k, v, o, lse, options):
    """One call of kernel `kid` on the caller's buffers ((memoryview, dtype, shape, strides) each); None, or
    a string naming what is not supported."""
    f, d = _KERNELS[kid]
    (qa, store), (ka, _), (va, _) = (_array(*q), _array(*k), _array(*v))
    oa, _ = _array(*o)
    B, H, n_q, _ = qa.shape
    kw = _keywords(options, n_q, ka.shape[2], lse is not None)
    if kw is None:
        return f"mask {MASKS[options['mask']]} through the bridge"
    qa, ka, va = _framework(d, options, store, [qa, ka, va])
    try:
        result = f(qa, ka, va, **kw)
    except Unsupported as e:
        return str(e)
    out, got_lse = result if isinstance(result, tuple) else (result, None)
    out = _from_result(out, store)
    if out.shape != oa.shape:
        raise KernelError(f"the kernel returned shape {tuple(out.shape)}, not {tuple(oa.shape)}")
    np.copyto(oa, out)
    if lse is not None:
        if got_lse is None:
            raise KernelError("the kernel returned no logsumexp though it declares lse")
        got = got_lse.detach().double().numpy() if hasattr(got_lse, "detach") else np.asarray(got_lse, np.float64)
        np.copyto(np.ndarray((B, H, n_q), dtype=np.float64, buffer=lse), got.reshape(B, H, n_q))
    return None


def backward(kid, q, k, v, o, lse, d_out, dq, dk, dv, options):
    """One backward call of kernel `kid`: its declared backward on the caller's q, k, v, the forward's out and
    logsumexp and d_out, the gradients copied into the caller's dq, dk, dv; None, or what is not supported."""
    f, d = _KERNELS[kid]
    if d.get("backward") is None:
        raise KernelError(f"{d['name']} declares no backward")
    (qa, store), (ka, _), (va, _), (oa, _), (ga, _) = (_array(*t) for t in (q, k, v, o, d_out))
    targets = [_array(*t)[0] for t in (dq, dk, dv)]
    B, H, n_q, _ = qa.shape
    kw = _keywords(options, n_q, ka.shape[2], False)
    if kw is None:
        return f"mask {MASKS[options['mask']]} through the bridge"
    la = None if lse is None else np.ndarray((B, H, n_q), dtype=np.float64, buffer=lse)
    qa, ka, va, oa, ga = _framework(d, options, store, [qa, ka, va, oa, ga])
    if d["framework"] == "torch" and la is not None:
        import torch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only buffer
            la = torch.from_numpy(la)
    try:
        grads = d["backward"](qa, ka, va, oa, la, ga, **kw)
    except Unsupported as e:
        return str(e)
    if not isinstance(grads, (tuple, list)) or len(grads) != 3:
        raise KernelError("the kernel's backward returned no (dq, dk, dv)")
    for got, target, name in zip(grads, targets, ("dq", "dk", "dv")):
        got = _from_result(got, store)
        if got.shape != target.shape:
            raise KernelError(f"the kernel's backward returned {name} of shape {tuple(got.shape)}, not "
                              f"{tuple(target.shape)}")
        np.copyto(target, got)
    return None
