"""attention-lab in Python: the library itself (attention_lab.api, on its extension module _core: attend,
check, backends, precisions, reachable as attention_lab.attend etc.), and the tooling: the runs and their files (io, bench_json, runs), the
statistics (stats), the reports (reports: one module per report, the run's
page, the README's figures), comparing runs (compare), their history
(history), sweeps in shards (sweep, progress) and the mutation catalogue
(mutation). Entry points: scripts/run, scripts/mutate and
`python3 -m attention_lab.<module>` (attn-lab compare and history run
those); scripts/ sets PYTHONPATH to python/."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the source tree
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/: this package's parent


def module_command(module, *args):
    """The command that runs `python3 -m module args...` with this package importable (child processes of a
    tool: attention_lab.reports collect, the reports)."""
    return [sys.executable, "-m", module, *args]


def module_env(env=None):
    """`env` (default os.environ) with python/ first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


# None of them may be a submodule's name (history is one; bench_json was once called bench): importing the
# submodule would replace the function on the package (test_api checks).
_API = ("attend", "backward", "check", "ground_truth", "bench", "verify", "open_run", "compare_runs", "run_history",
        "append_history", "backends", "precisions", "load_plugin", "kernel", "Result", "BackwardResult", "Verdict",
        "VerifyReport", "BenchReport", "Counterexample")


def __getattr__(name):
    """attention_lab.attend and the rest of the API (attention_lab.api), imported when first used, so that the
    tooling imports without the extension module."""
    if name in _API:
        from attention_lab import api
        return getattr(api, name)
    raise AttributeError(f"module 'attention_lab' has no attribute {name!r}")
