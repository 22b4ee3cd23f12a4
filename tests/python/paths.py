"""Where the Python tests find the tree and the build: ATTN_SOURCE and
ATTN_BUILD (tests/meson.build sets both; by hand they default to this checkout
and its build/), and the package on sys.path."""
import os
import sys

SOURCE = os.environ.get("ATTN_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("ATTN_BUILD") or os.path.join(SOURCE, "build")
if os.path.join(SOURCE, "python") not in sys.path:
    sys.path.insert(0, os.path.join(SOURCE, "python"))


def build(*parts):
    return os.path.join(BUILD, *parts)


ATTN_LAB = build("tools", "attn-lab")
ATTN_BENCH = build("bench", "attn-bench")
PROPS = build("tests", "cpp", "props")
UNIT_TEST = build("tests", "cpp", "unit_test")
AGREEMENT_TEST = build("tests", "cpp", "agreement_test")
PLUGINS = build("plugins")


def plugin(name):
    """A plugin library of plugins/ (built into build/plugins/libattn_NAME.so)."""
    return build("plugins", f"libattn_{name}.so")
