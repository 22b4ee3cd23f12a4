#!/usr/bin/python3
"""Smoke test of attn-bench: every family at its smallest size, one iteration
each, written as Google Benchmark JSON; checks that the JSON parses, that no
benchmark skipped with an error, that every name has the stable shape, and
that every counter is present and finite. Asserts no timing.

Then adaptive sampling (--adaptive) on the attn family: every benchmark has
its samples in the JSON (as many as its `sample_count` counter, at least six), its
`interval_relative_width` equals the width of the 95% interval that
python/attention_lab/stats.py (median_ci, written apart from attn-bench's C++ rule)
computes from those samples, and the stopping rule held: a benchmark that
stopped below the sample cap reached the width, and one sample fewer did not
(unless it had fewer than six).

And the families that alternate a second call with their samples, adaptively:
attn_versus with a plugin (the example one), each sample of the outside kernel
after a call of the fused backend, attn_paired and attn_bwd_paired, each sample
after a call of the ratio target's other side (`partner_samples`, the partner
named in the fields: the fused backend at the same point for attn_versus, the
same backend differing in exactly one of storage, mask, threads for the paired
families), and attn_noisy, each sample after a quiet call (`quiet_samples`):
one such call per sample, as the report's ratios read them."""
import json
import math
import os
import subprocess
import tempfile

from paths import ATTN_BENCH, plugin

from attention_lab import bench_json, stats

WIDTH, MAX_SAMPLES = 0.5, 12  # wide enough that most smoke benchmarks stop early, so the rule is exercised

COUNTERS = ["seconds_per_call", "FLOP/s", "qkvo_bytes/s", "kv_bytes/s", "workspace_model_bytes", "peak_heap_bytes",
            "peak_extra_heap_bytes", "max_abs_error", "error_bound", "error_ref_digits", "blas_threads"]
KEYS = {"causal", "threads", "n", "n_q", "n_kv", "d", "h", "h_kv", "variant"}  # a stable name's key:value parts


def name_disagrees(name, f):
    """Why a stable name <family>/<backend>/<precision>/key:value/... does not say what its fields say, or None."""
    parts = name.split("/")
    if len(parts) < 5 or any(":" not in p for p in parts[3:]):
        return "not <family>/<backend>/<precision>/key:value/..."
    kv = dict(p.split(":", 1) for p in parts[3:])
    if set(kv) - KEYS:
        return f"unknown keys {sorted(set(kv) - KEYS)}"
    said = {"family": parts[0], "backend": parts[1], "precision": parts[2], "threads": int(kv["threads"]),
            "causal": int(kv.get("causal", 0)), "n_q": int(kv.get("n_q", kv.get("n", 1))),
            "n_kv": int(kv.get("n_kv", kv.get("n", 0))), "d": int(kv["d"]),
            "h": int(kv.get("h", f["h"])), "h_kv": int(kv.get("h_kv", f["h_kv"])),
            "variant": kv.get("variant", f["variant"])}
    wrong = {k: (v, f[k]) for k, v in said.items() if f[k] != v}
    return f"name says / fields say {wrong}" if wrong else None


def test_every_family_at_its_smallest_size():
    exe = ATTN_BENCH
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "smoke.json")
        subprocess.run([exe, "--profile", "smoke", "--benchmark_min_time=0", "--benchmark_out=" + out,
                        "--benchmark_out_format=json"], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            data = json.load(f)
    runs = data["benchmarks"]
    failures = []
    if not runs:
        failures.append("no benchmark ran")
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        failures.append("duplicate benchmark names")
    for r in runs:
        if r.get("error_occurred"):
            failures.append(f"{r['name']}: skipped: {r.get('error_message')}")
            continue
        for c in COUNTERS:
            v = r.get(c)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                failures.append(f"{r['name']}: counter {c} missing or not finite ({v!r})")
        if r.get("max_abs_error", 1) > r.get("error_bound", 0):
            failures.append(f"{r['name']}: error above its bound")
    # The schema: every benchmark's fields (what tools read instead of the name) agree with its stable name,
    # and every family of attn-bench's series table ran.
    families = bench_json.families(data)
    for f, r in bench_json.iterations(data):
        why = name_disagrees(r["name"], f)
        if why:
            failures.append(f"{r['name']}: its stable name and its fields {r.get('attn')} disagree: {why}")
    for family in families:  # (attn_versus times plugins only: alternated() runs it with one)
        if family != "attn_versus" and not any(n.split("/")[0] == family for n in names):
            failures.append(f"family {family} ran no benchmark")
    failures += adaptive(exe)
    failures += alternated(exe)
    backends = sorted({n.split("/")[1] for n in names})
    print(f"{len(runs)} benchmarks, backends {', '.join(backends)}; context: {data['context'].get('blas')}")
    for f in failures:
        print("FAIL", f)
    assert not failures, f"{len(failures)} failures: " + "; ".join(failures[:20])


def adaptive(exe):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "adaptive.json")
        subprocess.run([exe, "--profile", "smoke", f"--adaptive={WIDTH}", f"--max-samples={MAX_SAMPLES}",
                        "--benchmark_filter=^attn/", "--benchmark_out=" + out, "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            data = json.load(f)
    failures, early = [], 0
    width = lambda xs: (lambda ci: (ci[1] - ci[0]) / stats.median(xs) if ci else None)(stats.median_ci(xs))  # noqa
    for r in data["benchmarks"]:
        name, xs = r["name"], r.get("samples")
        if not isinstance(xs, list) or len(xs) < 6 or len(xs) != r.get("sample_count"):
            failures.append(f"adaptive {name}: samples {str(xs)[:60]} against the counter {r.get('sample_count')!r}")
            continue
        w = width(xs)
        if w is None or abs(w - r["interval_relative_width"]) > 1e-9 * max(1.0, w):
            failures.append(f"adaptive {name}: interval width {r['interval_relative_width']} against stats.py's {w}")
        if len(xs) < MAX_SAMPLES:
            early += 1
            before = width(xs[:-1]) if len(xs) > 6 else None
            # (a benchmark whose sampling ran out of time, about 4 s, may stop wider: a slow one on a busy machine)
            if (w > WIDTH and not r.get("sampling_out_of_time")) or (before is not None and before <= WIDTH):
                failures.append(f"adaptive {name}: stopped at {len(xs)} samples with width {w} (one fewer: {before}; "
                                f"out of time: {r.get('sampling_out_of_time')})")
    if early == 0:
        failures.append("adaptive: no benchmark stopped before the cap: the stopping rule was not exercised")
    print(f"adaptive sampling: {len(data['benchmarks'])} benchmarks, {early} stopped below {MAX_SAMPLES} samples; "
          f"widths checked against python/attention_lab/stats.py")
    return failures



def alternated(exe):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "versus.json")
        subprocess.run([exe, "--profile", "smoke", "--plugin", plugin("example"), "--adaptive=0.5", "--max-samples=8",
                        "--benchmark_filter=^attn_(versus|noisy|paired|bwd_paired|decode/streaming/bf16)/",
                        "--benchmark_out=" + out,
                        "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            data = json.load(f)
    failures = [f"{r['name']}: skipped: {r.get('error_message')}" for r in data["benchmarks"] if r.get("error_occurred")]
    rows = bench_json.rows(data)
    differing = lambda r: [k for k in ("backend", "precision", "causal", "threads") if r["partner"][k] != r[k]]  # noqa
    for family, field in (("attn_versus", "partner_samples"), ("attn_paired", "partner_samples"),
                          ("attn_bwd_paired", "partner_samples"), ("attn_noisy", "quiet_samples"),
                          ("attn_decode", "partner_samples")):
        ran = [r for r in rows if r["family"] == family]
        if not ran:
            failures.append(f"{family}: no benchmark ran")
        for r in ran:
            xs, before = r["samples"], r.get(field) or []
            if len(xs) < 6 or len(before) != len(xs):
                failures.append(f"{r['name']}: {len(xs)} samples, {len(before)} {field}")
            peak = r["partner"] and r["partner"]["backend"] == "fp32-fma-peak"
            if peak and len(before) == len(xs):
                # the FMA probe's time for the point's FLOPs: the pairs' ratio is a fraction of the peak, in (0, 1]
                frac = stats.paired_ratio_ci(before, xs)[0]
                if not 0 < frac <= 1:
                    failures.append(f"{r['name']}: fraction of the FMA peak beside each sample {frac!r}, not in (0, 1]")
            read = r["partner"] and r["partner"]["backend"] == "read-probe"
            if family == "attn_decode" and len(before) == len(xs):
                # the read probe's time for K and V's bytes (the smoke profile's one KV cache, its longest): the
                # pairs' ratio is a fraction of the read bandwidth, positive (above 1 where K/V sit in cache)
                if not read or not stats.paired_ratio_ci(before, xs)[0] > 0:
                    failures.append(f"{r['name']}: partner {r['partner']}, fraction of the read probe "
                                    f"{stats.paired_ratio_ci(before, xs)[0]!r}")
            if field == "partner_samples":
                want = (["backend"] if family in ("attn_versus", "attn_decode") or peak else ["threads"] if r["threads"] == 2
                        else ["causal"] if r["causal"] else ["precision"])
                if not r["partner"] or differing(r) != want:
                    failures.append(f"{r['name']}: partner {r['partner']}: differs in {r['partner'] and differing(r)}, "
                                    f"not in {want}")
        print(f"{family}: {len(ran)} benchmarks, each sample after its {field[:-8]} call")
    return failures
