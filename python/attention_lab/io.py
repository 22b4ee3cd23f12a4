"""Reading and writing a run's files, in one place: the JSON loader (a missing
or broken file is one line naming it) and the atomic writers (a file, a
folder): whatever fails or is interrupted, a reader sees the old contents or
the new, never a part, and nothing the user had is lost."""
import json
import os
import shutil
import tempfile


class RunError(Exception):
    """A run's file that cannot be read: one line, naming the file."""


def load_json(path, error=RunError, label=None):
    """The JSON of a file, or one line (the `error` type) naming it: missing, or not valid JSON."""
    label = label or path
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise error(f"{label}: missing (no such file {path})")
    except json.JSONDecodeError as e:
        raise error(f"{label}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); truncated?")


def write_atomic(path, text):
    """Writes `text` to `path` through a temporary file beside it, renamed over it when complete."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + "-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json(path, obj, **dump_args):
    write_atomic(path, json.dumps(obj, **dump_args) + "\n")


def publish_folder(fill, out, replace=True, error=RunError):
    """Writes a folder atomically: `fill(tmp)` fills a temporary folder beside `out`, which is then renamed to
    `out`. An existing `out` is replaced (moved aside first, removed after) when `replace`, else refused with one
    line; on any failure nothing of the new folder is left."""
    if os.path.exists(out) and not replace:
        raise error(f"{out} exists already; nothing was overwritten")
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".incomplete-{os.path.basename(os.path.abspath(out))}-", dir=parent)
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would stay with the renamed folder
    try:
        fill(tmp)
        if os.path.exists(out):
            old = f"{out}.old.{os.getpid()}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def point_link(link, target):
    """Makes the symbolic link `link` point at `target` (relative to the link's folder), atomically."""
    tmp = f"{link}.tmp.{os.getpid()}"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
