"""The one reader of attn-bench's JSON (Google Benchmark's format, bench.json).

attn-bench writes what each benchmark is beside it, as "attn" (schema 2,
bench/attn_bench.cpp `fields_of`): family, role, pass, backend, storage,
accumulation, causal, threads, batch, heads, kv_heads, n_q, n_kv, d_k, d_v,
variant, cold, plugin; its context lists every family of its series table
("attn_families"). Tools read those fields, never the names, and a benchmark
of a family the context does not list is an error, not a silent drop.

A row (fields()) keys them as the reports do: precision (the storage), d (d_k),
h and h_kv (heads), causal as 0/1, and n only for square points (n_q == n_kv,
not a decode step), so that `"n" in row` tells the n x n grid from
cross-attention. Runs recorded before the schema (no "attn" on their
benchmarks, committed runs up to 2026-12-02) are read from their names by
legacy_fields, the one name parser left.

A benchmark's samples (samples_of): attn-bench's adaptive samples where it
took them (`attn-bench --adaptive`, what scripts/run does), else one per
repetition (--benchmark_repetitions), that repetition's median call
(`seconds_median`), else Google Benchmark's real time per iteration.
"""
import json

from attention_lab import stats

SCHEMA = 2
# The families of runs recorded before the schema, with their pass (attn-bench's series table then).
LEGACY_FAMILIES = {"attn": "forward", "attn_cold": "forward", "attn_h8": "forward", "attn_bwd": "backward",
                   "attn_bwd_mem": "backward", "attn_fwdbwd": "forward_backward", "attn_var": "forward",
                   "attn_decode": "forward"}
_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class BenchError(Exception):
    """A bench.json that cannot be read: one line, naming the file and the benchmark."""


def check(bench, label="bench.json", error=BenchError):
    """`bench` is Google Benchmark JSON from attn-bench (a dict with benchmarks and context), of a schema this
    reader knows; else one line naming the file."""
    if not isinstance(bench, dict) or "benchmarks" not in bench or "context" not in bench:
        raise error(f"{label}: not Google Benchmark JSON (no 'benchmarks' and 'context')")
    schema = int(bench["context"].get("attn_schema", 1))
    if schema > SCHEMA:
        raise error(f"{label}: benchmark schema {schema} is newer than this reader's ({SCHEMA}); update the tools")


def families(bench):
    """{family: pass} of the attn-bench that wrote `bench` (its context), or the legacy table."""
    listed = bench["context"].get("attn_families")
    return json.loads(listed) if isinstance(listed, str) else dict(LEGACY_FAMILIES)


def legacy_fields(name):
    """attn-bench's fields from a benchmark name of a run recorded before the schema, or None for a name of
    another shape: <family>/<backend>/<precision>/key:value/... (causal, threads, n or n_q and n_kv, d, h,
    h_kv, variant)."""
    parts = name.split("/")
    if len(parts) < 5 or parts[0] not in LEGACY_FAMILIES or any(":" not in p for p in parts[3:]):
        return None
    kv = {k: (int(v) if v.isdigit() else v) for k, v in (p.split(":", 1) for p in parts[3:])}
    decode = parts[0] == "attn_decode"
    n_q = 1 if decode else kv.get("n_q", kv.get("n"))
    n_kv = kv.get("n_kv", kv.get("n"))
    return {"family": parts[0], "role": "", "pass": LEGACY_FAMILIES[parts[0]], "backend": parts[1],
            "storage": parts[2], "accumulation": "", "causal": bool(kv.get("causal", 0)),
            "threads": kv.get("threads", 1), "batch": 1, "heads": kv.get("h", 8 if parts[0] in (
                "attn_h8", "attn_bwd", "attn_fwdbwd") else 1), "kv_heads": kv.get("h_kv", kv.get("h", 1)),
            "n_q": n_q, "n_kv": n_kv, "d_k": kv.get("d"), "d_v": kv.get("d"),
            "variant": "decode" if decode else kv.get("variant", ""), "cold": parts[0] == "attn_cold",
            "plugin": None}


def fields(b, known, label="bench.json", error=BenchError):
    """One benchmark's row of fields (see above), from its "attn" object (or its legacy name); a family
    missing from `known` (families()) is an error."""
    name = b.get("run_name", b.get("name", ""))
    f = b.get("attn") if isinstance(b.get("attn"), dict) else legacy_fields(name)
    if f is None:
        raise error(f"{label}: benchmark {name!r} has no fields (\"attn\") and no attn-bench name")
    if f.get("family") not in known:
        raise error(f"{label}: benchmark {name!r} is of family {f.get('family')!r}, which attn-bench's "
                    f"series table does not list ({', '.join(sorted(known))})")
    row = {"name": name, "family": f["family"], "role": f["role"], "pass": f["pass"], "backend": f["backend"],
           "precision": f["storage"], "accumulation": f["accumulation"], "causal": int(bool(f["causal"])),
           "threads": int(f["threads"]), "batch": f["batch"], "h": f["heads"], "h_kv": f["kv_heads"],
           "n_q": f["n_q"], "n_kv": f["n_kv"], "d": f["d_k"], "d_v": f["d_v"], "variant": f["variant"],
           "cold": f["cold"], "plugin": f["plugin"], "partner": None}
    partner = f.get("partner")  # the call timed before each sample (attn_versus, attn_paired), keyed as a row
    if isinstance(partner, dict):
        row["partner"] = {"backend": partner["backend"], "precision": partner["storage"],
                          "causal": int(bool(partner["causal"])), "threads": int(partner["threads"])}
    if f["n_q"] == f["n_kv"] and f["variant"] != "decode":
        row["n"] = f["n_q"]
    return row


def iterations(bench, label="bench.json", error=BenchError):
    """(fields, row) of every benchmark repetition that ran (no aggregate rows, none that skipped with an
    error), in the file's order."""
    check(bench, label, error)
    known = families(bench)
    for b in bench["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        yield fields(b, known, label, error), b


def samples_of(b, label="bench.json", error=BenchError):
    """The timing samples (seconds per call) of one "iteration" row: its adaptive samples, else its median
    call (else its mean call), else Google Benchmark's real time per iteration."""
    if isinstance(b.get("samples"), list) and b["samples"]:
        if not all(isinstance(x, (int, float)) and x > 0 for x in b["samples"]):
            raise error(f"{label}: benchmark {b.get('name')} has a sample that is not a positive number")
        return [float(x) for x in b["samples"]]
    for k in ("seconds_median", "seconds_per_call"):  # attn-bench's median call, or its mean call
        if isinstance(b.get(k), (int, float)):
            return [float(b[k])]
    if isinstance(b.get("real_time"), (int, float)):
        return [float(b["real_time"]) * _UNIT.get(b.get("time_unit", "ns"), 1e-9)]
    raise error(f"{label}: benchmark {b.get('name')} has no time")


def rows(bench, label="bench.json", error=BenchError):
    """One row per benchmark: its fields and counters. Its `samples` are samples_of over its repetitions;
    its times are the medians over its repetitions. The memory counters are required except of plugins
    (their allocator is their own, attn-bench writes none)."""
    groups = {}
    traits = json.loads(bench["context"]["backend_traits"]) if isinstance(
        bench.get("context", {}).get("backend_traits"), str) else {}
    for f, b in iterations(bench, label, error):
        plugin = f["plugin"] if f["plugin"] is not None else traits.get(f["backend"], {}).get("plugin", False)
        needed = ("seconds_per_call", "FLOP/s") + (() if plugin else ("peak_heap_bytes", "workspace_model_bytes"))
        for k in needed:
            if not isinstance(b.get(k), (int, float)):
                raise error(f"{label}: {f['name']} lacks counter '{k}'")
        groups.setdefault(f["name"], (f, []))[1].append(b)
    out = []
    for name, (row, reps) in groups.items():
        first = reps[0]
        for k in ("peak_heap_bytes", "workspace_model_bytes", "peak_extra_heap_bytes", "kv_bytes/s",
                  "max_abs_error", "error_bound"):
            row[k] = first.get(k)
        row["flop_per_call"] = first["FLOP/s"] * first["seconds_per_call"]
        row["samples"] = [x for b in reps for x in samples_of(b, label, error)]
        # The calls taken just before each sample, one per sample: attn_noisy's quiet ones (none: the family's
        # quiet twin decides), the partner's (row["partner"]: attn_versus, attn_paired, attn_bwd_paired). Runs
        # before 2026-12-03's attn_paired wrote attn_versus's as "fused_samples", without a partner field: the
        # fused backend (by its traits) at the row's own point.
        for field, what in (("quiet_samples", "quiet"), ("partner_samples", "partner's")):
            before = [x for b in reps for x in b.get(field) or (b.get("fused_samples") or []
                                                                 if field == "partner_samples" else [])]
            if not all(isinstance(x, (int, float)) and x > 0 for x in before):
                raise error(f"{label}: benchmark {name} has a {what} sample that is not a positive number")
            if before and len(before) != len(row["samples"]):
                raise error(f"{label}: benchmark {name} has {len(before)} {what} samples for {len(row['samples'])} "
                            "samples (one before each)")
            row[field] = [float(x) for x in before] or None
        if row["partner_samples"] and row["partner"] is None:
            fused = [b for b, t in traits.items() if t.get("own_threads") and t.get("memory_independent_of_n")
                     and not t.get("plugin")]
            if not fused:
                raise error(f"{label}: benchmark {name} has fused_samples but the run lists no fused backend")
            row["partner"] = {"backend": fused[0], "precision": row["precision"], "causal": row["causal"],
                              "threads": row["threads"]}
        row["repetitions"] = len(reps)
        row["seconds_per_call"] = stats.median([b["seconds_per_call"] for b in reps])
        row["FLOP/s"] = row["flop_per_call"] / row["seconds_per_call"]
        for k in ("seconds_median", "seconds_p10", "seconds_p90"):
            vals = [b[k] for b in reps if isinstance(b.get(k), (int, float))]
            row[k] = stats.median(vals) if vals else None
        out.append(row)
    if not out:
        raise error(f"{label}: no benchmark that ran")
    return out
