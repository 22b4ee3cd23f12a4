"""attention-lab's tooling: the runs and their files (io, bench, runs), the
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
