#!/usr/bin/python3
"""simd_variants: the test suite on every vector-kernel variant this CPU
executes, not only the one it picks by default.

    test_simd_variants.py ATTN_LAB UNIT_TEST AGREEMENT_TEST PROPS RC_PARAMS

The default choice (the widest variant the CPU runs) is what every other
test exercises; here each other executable variant is forced by ATTN_SIMD
and must pass the unit tests, the 50-digit agreement tests and the property
suite (RapidCheck with CI's fixed seed), and streaming's bitwise invariances
(`attn-lab invariance --require-bitwise`) must hold under it. Variants compiled but not
executable here are listed, and forcing one must be a clear error (exit 2,
one line naming what it needs), never an illegal instruction. Also checked:
that ATTN_SIMD really switches the kernels `attn-lab list` reports.
"""
import json
import os
import subprocess
import tempfile

from attention_lab.mutation.catalogue import STREAMING_BITWISE
from checklib import Checks
from paths import AGREEMENT_TEST as AGREEMENT, ATTN_LAB, PROPS, UNIT_TEST as UNIT

# the property cases of each forced variant (meson option rc_variant_params, through tests/meson.build)
RC_PARAMS = os.environ.get("ATTN_RC_VARIANT_PARAMS", "seed=20261129 max_success=12")


def run(cmd, simd, extra_env=None, timeout=1800):
    env = dict(os.environ, ATTN_SIMD=simd, **(extra_env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def test_every_executable_variant_passes_and_the_others_refuse():
    checks = Checks()
    listing = json.loads(subprocess.run([ATTN_LAB, "list", "--json"], capture_output=True, text=True,
                                        check=True).stdout)["simd"]
    default = listing["in_use"]
    print(f"default variant: {listing['summary']}; bf16 dot product over the fp32 FMA, measured at the choice: "
          f"{listing['bf16_dot_over_fma']}")
    # The summary names the machine of a run (runs.py's fingerprint): no measured figure may make two processes
    # differ (the choice's measured ratio in it split one sweep's Slurm shards into two machines).
    again = json.loads(subprocess.run([ATTN_LAB, "list", "--json"], capture_output=True, text=True, check=True).stdout)
    checks.record(again["simd"]["summary"] == listing["summary"],
                  f"the variant's summary differs between two processes: {listing['summary']!r}, {again['simd']['summary']!r}")
    for v in listing["variants"]:
        vid = v["id"]
        if not v["executable"]:
            print(f"{vid} ({v['arch']}): compiled, not executable on this CPU (needs {v['requires']}): not run here")
            r = run([ATTN_LAB, "list"], vid)
            checks.record(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and v["requires"] in r.stderr,
                          f"forcing {vid} here: exit {r.returncode}, stderr {r.stderr.strip()!r}")
            continue
        r = run([ATTN_LAB, "list", "--json"], vid)
        in_use = json.loads(r.stdout)["simd"]["in_use"] if r.returncode == 0 else None
        checks.record(in_use == vid, f"ATTN_SIMD={vid}: attn-lab list reports {in_use}")
        if vid == default:
            print(f"{vid}: the default variant (the rest of the suite runs it)")
            continue
        for name, cmd, env in [("unit_test", [UNIT], None), ("agreement_test", [AGREEMENT], None),
                               ("props", [PROPS], {"RC_PARAMS": RC_PARAMS})]:
            r = run(cmd, vid, env)
            tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
            print(f"{vid}: {name}: exit {r.returncode}; " + " | ".join(tail))
            checks.record(r.returncode == 0, f"{vid}: {name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}")
        # streaming's documented bitwise invariances hold under this variant's own block sizes too (the AVX2
        # variant's B_q = 512 > B_k = 96 once broke the GQA one while the default variant's held)
        with tempfile.TemporaryDirectory() as tmp:
            r = run([ATTN_LAB, "invariance", "--backend", "streaming", "--profile", "smoke", "--only", STREAMING_BITWISE,
                     "--require-bitwise", STREAMING_BITWISE, "--out", os.path.join(tmp, "inv.json")], vid)
        print(f"{vid}: streaming invariance {STREAMING_BITWISE}: exit {r.returncode}")
        checks.record(r.returncode == 0, f"{vid}: streaming's invariances not bitwise:\n{r.stdout[-3000:]}\n"
                                         f"{r.stderr[-2000:]}")

    r = run([ATTN_LAB, "list"], "no-such-isa")
    checks.record(r.returncode == 2 and "no such kernel variant" in r.stderr,
                  f"ATTN_SIMD=no-such-isa: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    checks.finish()
