"""python_kernels: Python callables as backends (`--plugin python:MODULE:FUNCTION`, attention_lab.bridge and
plugins/python/python_bridge.cpp), end to end through attn-lab and attn-bench:

  - the bridge's capability bits are include/attn/plugin.h's (read from the header);
  - the peers (attention_lab.peers: PyTorch SDPA math and CPU flash) load as registry rows with what they
    declare, and pass `attend --check` on a causal cross-attention with grouped K/V heads in fp32, through
    the suite's bottom-right causal alignment (a top-left kernel would fail it: shown by a kernel that passes
    is_causal alone, which must exceed its bound);
  - a kernel that raises, returns the wrong shape or dtype, is not declared, or names no module is one clear
    error line (exit 2), never a crash; a kernel's Unsupported is "not supported";
  - the inference runtimes (openvino-sdpa, onnxruntime-attention) pass the same check in fp32, and in their
    narrow storage (bf16, fp16) with the storage accumulation they declare;
  - PyTorch's libraries bind to their own BLAS inside attn-lab (the dynamic linker's bindings, LD_DEBUG);
  - attn-bench times a Python kernel beside the built-in backends, its schema fields marking it a plugin; a
    kernel that raises is its benchmark's error and the others run;
  - JAX's dot_product_attention (jax-xla, XLA on the CPU): causal cross-attention with grouped heads in fp32,
    forward and backward (jax.vjp), within the suite's bounds;
  - a declared backward (ABI 2): torch-flash's and torch-math's (autograd) gradients pass `attend --backward
    --check` (causal, grouped K/V heads, fp32 and bf16) and attn-bench times its backward alone; a backward that ignores the causal mask
    must exceed its gradient bounds; a backward that raises, or one declared that is not a function, is one
    clear error.
"""
import json
import os
import re
import subprocess
import tempfile

from checklib import Checks
from paths import ATTN_BENCH, ATTN_LAB, SOURCE

CHECKS = Checks()
record = CHECKS.record

BROKEN = '''
import numpy as np
from attention_lab.bridge import Unsupported, kernel

@kernel(name="raises", description="raises", storage={"fp64": "fp64"})
def raises(q, k, v, **_):
    raise ValueError("a deliberate failure")

@kernel(name="wrong-shape", description="wrong shape", storage={"fp64": "fp64"})
def wrong_shape(q, k, v, **_):
    return np.zeros((1, 1, 1, 1))

@kernel(name="wrong-dtype", description="wrong dtype", storage={"fp64": "fp64"})
def wrong_dtype(q, k, v, **_):
    return np.zeros(q.shape[:3] + (v.shape[3],), dtype=np.float32)

@kernel(name="unsupported", description="unsupported", storage={"fp64": "fp64"})
def unsupported(q, k, v, **_):
    raise Unsupported("never, on purpose")

@kernel(name="top-left", description="SDPA is_causal alone: top-left causal alignment", storage={"fp64": "fp64"},
        framework="torch", masks=("causal",))
def top_left(q, k, v, *, scale, causal, **_):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

def undeclared(q, k, v, **_):
    return v

from attention_lab import peers

def _unmasked_backward(q, k, v, out, lse, d_out, *, scale, causal, **_):
    return peers._torch_flash_backward(q, k, v, out, lse, d_out, scale=scale, causal=False)

@kernel(name="unmasked-backward", description="torch-flash, backward without the causal mask",
        storage={"fp64": "fp64"}, framework="torch", masks=("causal",), lse=True, backward=_unmasked_backward)
def unmasked_backward(q, k, v, **kw):
    return peers.torch_flash(q, k, v, **kw)

def _raising_backward(*_, **__):
    raise RuntimeError("a deliberate backward failure")

@kernel(name="raising-backward", description="torch-flash, backward raising", storage={"fp64": "fp64"},
        framework="torch", lse=True, backward=_raising_backward)
def raising_backward(q, k, v, **kw):
    return peers.torch_flash(q, k, v, **kw)

@kernel(name="not-a-function", description="a backward that is not a function", storage={"fp64": "fp64"},
        backward="autograd")
def not_a_function(q, k, v, **_):
    return v
'''


def lab(args, env=None, cwd=None):
    return subprocess.run([ATTN_LAB] + args, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def one_error(p, *words):
    lines = p.stderr.strip().splitlines()
    return p.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words)


def test_python_kernels():
    # The ABI's bits, from the header.
    header = open(os.path.join(SOURCE, "include", "attn", "plugin.h")).read()
    bits = {m[0]: int(m[1]) for m in re.findall(r"#define ATTN_CAP_(\w+) \(1ull << (\d+)\)", header)}
    from attention_lab.bridge import CAPABILITIES
    names = {"F64": "fp64", "F32": "fp32", "BF16": "bf16", "F16": "fp16", "ACC_FP64": "acc_fp64",
             "ACC_FP32": "acc_fp32", "ACC_STORAGE": "acc_storage", "CAUSAL": "causal", "WINDOW": "window",
             "KEY_PADDING": "keypad", "BOOLEAN": "bool", "BIAS": "bias", "GQA": "gqa", "SOFTCAP": "softcap",
             "SINKS": "sinks", "ALIBI": "alibi", "SEGMENTS": "segments", "LSE": "lse", "THREADS": "threads",
             "BACKWARD": "backward"}
    record(bits and all(CAPABILITIES[names[k]] == 1 << v for k, v in bits.items()),
           f"bridge capability bits = plugin.h's: {bits}")

    # The peers as rows, verified on a causal cross-attention with grouped heads.
    for spec, name in (("python:attention_lab.peers:torch_math", "torch-math"),
                       ("python:attention_lab.peers:torch_flash", "torch-flash"),
                       ("python:attention_lab.peers:openvino_sdpa", "openvino-sdpa"),
                       ("python:attention_lab.peers:onnxruntime_attention", "onnxruntime-attention")):
        p = lab(["list", "--json", "--plugin", spec])
        rows = {b["name"]: b for b in json.loads(p.stdout)["backends"]} if p.returncode == 0 else {}
        record(name in rows and rows[name]["source"] == spec, f"list {spec}: {p.stderr.strip()[-300:]}")
        p = lab(["attend", "--random", "2,4,37,53,16,16,2", "--mask", "causal", "--plugin", spec, "--backend", name,
                 "--precision", "fp32", "--check"])
        record(p.returncode == 0 and "within" in p.stdout, f"attend --check {name}: exit {p.returncode} "
                                                           f"{p.stdout[-400:]} {p.stderr[-300:]}")
    # The runtimes' narrow storage, with the storage accumulation they declare (intermediates rounded to the
    # storage: each exceeds the fp32-accumulation bound at n_kv = 253, d = 64, measured 2026-12-02).
    for spec, name, precision in (("python:attention_lab.peers:openvino_sdpa", "openvino-sdpa", "bf16"),
                                  ("python:attention_lab.peers:onnxruntime_attention", "onnxruntime-attention",
                                   "fp16")):
        p = lab(["attend", "--random", "2,4,137,253,64,64,2", "--mask", "causal", "--plugin", spec, "--backend", name,
                 "--precision", precision, "--accumulate", "storage", "--check"])
        record(p.returncode == 0 and "within" in p.stdout, f"attend --check {name} {precision}: exit {p.returncode} "
                                                           f"{p.stdout[-400:]} {p.stderr[-300:]}")
    # PyTorch binds to its own BLAS inside our programs (attention_lab.bridge._import_torch): libtorch's sgemm_
    # once bound to the OpenBLAS attn-lab links. The dynamic linker's own account of the bindings decides.
    with tempfile.TemporaryDirectory() as work:
        trace = os.path.join(work, "ld")
        p = lab(["attend", "--random", "1,2,256,256,64,64", "--plugin", "python:attention_lab.peers:torch_flash",
                 "--backend", "torch-flash", "--precision", "fp32"],
                env=dict(os.environ, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=trace))
        bindings = [line for f in os.listdir(work) for line in open(os.path.join(work, f), errors="replace")
                    if "libtorch_cpu.so" in line.split(" to ")[0] and "`sgemm_'" in line]
        record(p.returncode == 0 and bindings and all("libopenblas" not in b for b in bindings),
               f"libtorch's sgemm_ binds to its own: exit {p.returncode}, {len(bindings)} bindings "
               f"{[b.strip()[-160:] for b in bindings[:2]]}")
    # JAX (XLA on the CPU): the suite's bottom-right causal alignment through its boolean mask.
    p = lab(["attend", "--random", "2,4,37,53,16,16,2", "--mask", "causal", "--plugin", "python:attention_lab.peers:jax_xla",
             "--backend", "jax-xla", "--precision", "fp32", "--backward", "--check"])
    record(p.returncode == 0 and "dk " in p.stdout and "EXCEEDED" not in p.stdout,
           f"attend --backward --check jax-xla: exit {p.returncode} {p.stdout[-600:]} {p.stderr[-400:]}")
    # torch-flash's backward (its aten kernel) and torch-math's (autograd) against the suite's gradient bounds.
    for name in ("torch_flash", "torch_math"):
        for precision, acc in (("fp32", "fp32"), ("bf16", "storage")):  # (bf16: the weights rounded, peers.py)
            p = lab(["attend", "--random", "2,4,37,53,16,16,2", "--mask", "causal", "--plugin",
                     f"python:attention_lab.peers:{name}", "--backend", name.replace("_", "-"), "--precision",
                     precision, "--accumulate", acc, "--backward", "--check"])
            record(p.returncode == 0 and "dk " in p.stdout and "EXCEEDED" not in p.stdout,
                   f"attend --backward --check {name} {precision}: exit {p.returncode} {p.stdout[-600:]} "
                   f"{p.stderr[-300:]}")

    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "broken_kernels.py"), "w") as f:
            f.write(BROKEN)
        env = dict(os.environ, PYTHONPATH=work)
        base = ["attend", "--random", "1,2,8,8,4,4", "--precision", "fp64"]
        for fn, words in (("raises", ["ValueError", "a deliberate failure"]), ("wrong_shape", ["shape"]),
                          ("wrong_dtype", ["float32"]), ("unsupported", ["never, on purpose"])):
            name = fn.replace("_", "-")
            p = lab(base + ["--plugin", f"python:broken_kernels:{fn}", "--backend", name], env=env)
            record(one_error(p, *words), f"kernel {fn}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        for spec, words in (("python:broken_kernels:undeclared", ["not declared"]),
                            ("python:no_such_module:f", ["cannot import"]),
                            ("python:broken_kernels", ["MODULE:FUNCTION"])):
            p = lab(base + ["--plugin", spec], env=env)
            record(one_error(p, *words), f"{spec}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        # The alignment: SDPA's is_causal alone aligns top-left; on n_q != n_kv the verdict must see it.
        p = lab(["attend", "--random", "1,2,16,40,8,8", "--mask", "causal", "--precision", "fp64", "--plugin",
                 "python:broken_kernels:top_left", "--backend", "top-left", "--check"], env=env)
        record(p.returncode == 1 and "EXCEEDED" in p.stdout, f"top-left causal caught: exit {p.returncode}")
        p = lab(["attend", "--random", "1,2,40,40,8,8", "--mask", "causal", "--precision", "fp64", "--plugin",
                 "python:broken_kernels:top_left", "--backend", "top-left", "--check"], env=env)
        record(p.returncode == 0, f"top-left causal agrees on n_q = n_kv: exit {p.returncode}")
        # Backward: a kernel whose gradients ignore the causal mask is caught; one that raises, or declares a
        # backward without the logsumexp, is one error.
        p = lab(["attend", "--random", "1,2,24,24,8,8", "--mask", "causal", "--precision", "fp64", "--plugin",
                 "python:broken_kernels:unmasked_backward", "--backend", "unmasked-backward", "--backward", "--check"],
                env=env)
        record(p.returncode == 1 and "EXCEEDED" in p.stdout, f"unmasked backward caught: exit {p.returncode} "
                                                             f"{p.stdout[-500:]} {p.stderr[-300:]}")
        p = lab(["attend", "--random", "1,2,24,24,8,8", "--precision", "fp64", "--plugin",
                 "python:broken_kernels:unmasked_backward", "--backend", "unmasked-backward", "--backward", "--check"],
                env=env)
        record(p.returncode == 0, f"the same backward without a mask passes: exit {p.returncode} {p.stderr[-300:]}")
        p = lab(base + ["--plugin", "python:broken_kernels:raising_backward", "--backend", "raising-backward",
                        "--backward"], env=env)
        record(one_error(p, "RuntimeError", "a deliberate backward failure"),
               f"raising backward: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        p = lab(base + ["--plugin", "python:broken_kernels:not_a_function"], env=env)
        record(one_error(p, "backward must be a function"),
               f"backward not a function: exit {p.returncode}, stderr {p.stderr.strip()!r}")

        # attn-bench: a Python kernel timed beside ours, marked a plugin in the schema.
        out = os.path.join(work, "b.json")
        p = subprocess.run([ATTN_BENCH, "--profile", "smoke", "--benchmark_min_time=0", "--plugin",
                            "python:attention_lab.peers:torch_flash", "--benchmark_filter=^attn_h8/(streaming|torch-flash)/fp32/causal:0/threads:1/",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"], capture_output=True, text=True,
                           timeout=600)
        runs = json.load(open(out))["benchmarks"] if os.path.exists(out) else []
        timed = {r["attn"]["backend"]: r["attn"]["plugin"] for r in runs if not r.get("error_occurred")}
        record(timed == {"streaming": False, "torch-flash": True}, f"attn-bench: {timed} {p.stderr[-300:]}")
        # A kernel that raises is that benchmark's error, named; attn-bench goes on (it terminated before).
        p = subprocess.run([ATTN_BENCH, "--profile", "smoke", "--benchmark_min_time=0", "--plugin",
                            "python:broken_kernels:raises", "--benchmark_filter=^attn/(streaming|raises)/fp64/causal:0/",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"], capture_output=True, text=True,
                           timeout=600, env=env)
        runs = json.load(open(out))["benchmarks"] if os.path.exists(out) else []
        failed = [r["error_message"] for r in runs if r["attn"]["backend"] == "raises" and r.get("error_occurred")]
        ran = [r for r in runs if r["attn"]["backend"] == "streaming" and not r.get("error_occurred")]
        record(p.returncode == 0 and failed and all("a deliberate failure" in m for m in failed) and ran,
               f"attn-bench: a raising kernel is its benchmark's error: exit {p.returncode} {failed[:1]} "
               f"{len(ran)} streaming rows {p.stderr[-300:]}")
        p = subprocess.run([ATTN_BENCH, "--profile", "smoke", "--benchmark_min_time=0", "--plugin",
                            "python:attention_lab.peers:torch_flash", "--benchmark_filter=^attn_bwd/(streaming|torch-flash)/(fp32|bf16)/causal:0/threads:1/",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"], capture_output=True, text=True,
                           timeout=600)
        runs = json.load(open(out))["benchmarks"] if os.path.exists(out) else []
        timed = {(r["attn"]["backend"], r["attn"]["storage"], r["attn"]["accumulation"]) for r in runs
                 if not r.get("error_occurred") and r["attn"]["pass"] == "backward"}
        # (bf16: torch-flash runs its declared storage accumulation, as its forward does; it crashed attn-bench
        # with fp32's before)
        record(p.returncode == 0 and {("torch-flash", "fp32", "fp32"), ("torch-flash", "bf16", "storage"),
                                      ("streaming", "fp32", "fp32")} <= timed,
               f"attn-bench times torch-flash's backward: exit {p.returncode} {sorted(timed)} {p.stderr[-300:]}")
    CHECKS.finish()
