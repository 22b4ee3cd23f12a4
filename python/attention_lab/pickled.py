"""Python kernels handed by attention_lab.verify to the attn-lab process that verifies them: a function of the
caller's process (a notebook's, a closure, a lambda) pickled by value with cloudpickle into
$ATTN_PICKLED_KERNELS/NAME.pkl and reached by the bridge as `python:attention_lab.pickled:NAME` (this module's
attributes are those files)."""
import os
import pickle


def __getattr__(name):
    folder = os.environ.get("ATTN_PICKLED_KERNELS")
    if not folder or name.startswith("__"):
        raise AttributeError(name)
    path = os.path.join(folder, name + ".pkl")
    if not os.path.isfile(path):
        raise AttributeError(f"no pickled kernel {name!r} in {folder}")
    with open(path, "rb") as f:
        return pickle.load(f)
