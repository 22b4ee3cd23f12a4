"""pip_install: `pip install .` of the checkout into a fresh virtual environment gives a working
`import attention_lab` (the library's extension module and the package, through meson-python and the
meson.build's python_only build, pyproject.toml), used from a folder outside the checkout with nothing of it
on the path: attend and check on NumPy arrays, and verify on a right and a wrong NumPy kernel through the
attn-lab and the Python bridge it installs. Its time is printed (the compiler runs through ccache when the
main build filled it)."""
import os
import subprocess
import tempfile
import time

from checklib import Checks
from paths import SOURCE

CHECKS = Checks()
record = CHECKS.record

USE = """
import numpy as np, attention_lab as al
assert "{source}" not in al.__file__, al.__file__
x = np.random.default_rng(20261202).standard_normal((2, 48, 16))
r = al.attend(x, x, x, backend="streaming", precision="bf16", causal=True)
print(al.__file__, r.out.shape, al.check(r).passed, al.check(x, x, x, x, precision="fp64").passed)
def unscaled(q, k, v, **options):   # attention without 1/sqrt(d): verify must fail it
    s = q @ np.swapaxes(k, -1, -2)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v).astype(q.dtype)
def scaled(q, k, v, *, scale, **options):
    return unscaled(q * scale, k, v)
print("verify", al.verify(scaled, quiet=True).passed, al.verify(unscaled, quiet=True).passed)
"""


def test_pip_install():
    with tempfile.TemporaryDirectory(prefix="attn-pip-") as work:
        venv = os.path.join(work, "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python3")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTN_BUILD", "ATTN_SOURCE")}
        t0 = time.time()
        p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", SOURCE],
                           cwd=work, env=env, capture_output=True, text=True, timeout=1500)
        seconds = time.time() - t0
        print(f"pip install . took {seconds:.1f} s")
        record(p.returncode == 0, f"pip install .: exit {p.returncode} {p.stderr[-800:]}")
        u = subprocess.run([python, "-c", USE.format(source=SOURCE)], cwd=work, env={**env, "TMPDIR": work},
                           capture_output=True,
                           text=True, timeout=300)
        print(u.stdout.strip())
        lines = u.stdout.strip().splitlines() or [""]
        record(u.returncode == 0 and lines[0].endswith("(2, 48, 16) True False"),
               f"import attention_lab from the installed package: exit {u.returncode} {u.stdout[-300:]} "
               f"{u.stderr[-500:]}")
        # verify through the attn-lab and the bridge that pip installed: the scaled kernel passes, the
        # unscaled one fails.
        record(lines[-1] == "verify True False", f"verify from the installed package: {lines[-1]!r} "
               f"{u.stderr[-500:]}")
    CHECKS.finish()
