#!/usr/bin/env python3
"""The cost of a call through Python: al.attend's wall time against the same library call made from C++
(Result.call_seconds: attn::BackendInfo::run, timed inside the extension: rounding to the storage precision,
the workspace, the backend) and the backend alone (Result.seconds). Streaming fp32, B = 1, H = 8, d = 64,
one thread, float64 NumPy inputs.

    PYTHONPATH=python .venv/bin/python3 bench/python_overhead.py
"""
import time
import numpy as np
import attention_lab as al
from attention_lab import stats
for n, reps in ((256, 31), (4096, 11)):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 8, n, 64)) for _ in range(3))
    al.attend(q, k, v)  # warm-up
    walls, calls, backend = [], [], []
    for _ in range(reps):
        t = time.perf_counter()
        r = al.attend(q, k, v, backend="streaming", precision="fp32")
        walls.append(time.perf_counter() - t)
        calls.append(r.call_seconds)
        backend.append(r.seconds)
    over = [w - c for w, c in zip(walls, calls)]
    ci = stats.median_ci(over)
    ms = lambda x: f"{stats.median(x) * 1e3:.3f} ms"
    print(f"n = {n}: Python call {ms(walls)}, the C++ call {ms(calls)} (backend alone {ms(backend)}); "
          f"Python's overhead {ms(over)} (95% {stats.fmt_interval(None if ci is None else (ci[0] * 1e3, ci[1] * 1e3))}"
          f" ms, {stats.median(over) / stats.median(calls):.1%} of the C++ call), {reps} calls")
