"""The plugins report: each plugin kernel's verdicts, speed and accuracy beside the built-in backends."""

from attention_lab import runs
from attention_lab.reports.common import backends_with, median_seconds, spread_ms


def plugins_report(rows, bench, acc, verdicts, folder):
    """Kernels loaded from plugin libraries (trait `plugin`): attn-lab verify's verdict per property x
    configuration, their speed beside the fused backend on the same benchmarks of this run, their accuracy."""
    plugins = backends_with(bench, plugin=True)
    lines = ["# Plugins: kernels written elsewhere", ""]
    readings = []
    if not plugins and not verdicts:
        lines += ["No plugin was loaded in this run (`scripts/run --plugin PATH`; the PyTorch plugin joins "
                  "when libtorch-dev is installed)."]
        return "\n".join(lines) + "\n", readings
    for v in verdicts or []:
        lines += [f"## attn-lab verify --plugin {v['plugin']} --profile {v['profile']}: {v['verdict']}", "",
                  f"RapidCheck seed {v['seed']}, {3 * v['cases_per_cell']} generated cases per property and "
                  "configuration (a cell counts those that applied to the property and the kernel's claims).", ""]
        for k in v["kernels"]:
            configs = sorted({c["config"] for c in k["cells"]})
            names = list(dict.fromkeys(c["property_name"] for c in k["cells"] if "property_name" in c))
            lines += [f"### {k['name']}", "", k["description"], "",
                      "| property | " + " | ".join(configs) + " |", "|---|" + "---|" * len(configs)]
            for name in names:
                cell = {c["config"]: c for c in k["cells"] if c.get("property_name") == name}
                lines.append(f"| {name} | " + " | ".join(
                    (cell[c]["invariance"] if "invariance" in cell[c] else
                     f"pass ({cell[c]['cases']})" if cell[c]["status"] == "pass" else cell[c]["status"])
                    if c in cell else "" for c in configs) + " |")
            failed = [c for c in k["cells"] if c["status"] not in ("pass", "not supported")]
            lines.append("")
            for c in failed:
                ce = c.get("counterexample", {})
                lines.append(f"- {c['status']}: {c.get('property_name', c['property'])}, {c['config']}: smallest case "
                             f"`{ce.get('case', c.get('case', '?'))}`")
            readings.append(f"verify {k['name']}: {sum(c['status'] == 'pass' for c in k['cells'])} cells pass, "
                            f"{len(failed)} fail, {sum(c['status'] == 'not supported' for c in k['cells'])} not supported")
            lines.append("")
    fused = backends_with(bench, own_threads=True, memory_independent_of_n=True)
    same = [r for r in rows if r["family"] in ("attn", "attn_h8") and "n" in r]
    if plugins and fused and same:
        lines += ["## Speed beside the fused backend (the same benchmarks of this run)", "",
                  "attn: B = H = 1; attn_h8: B = 1, H = 8; n_q = n_kv = n. A plugin runs inside attn-bench's process, "
                  "timed as every backend is (warm calls into buffers the caller allocated once); a plugin's own "
                  "BLAS calls reach the process's BLAS (" + str(bench["context"].get("blas", "?")) + ") with the "
                  "benchmark's thread count. Speed-up: the plugin's median call over " + fused[0] + "'s.", "",
                  "| plugin | family | precision | n | d | causal | threads | plugin ms, median (p10 to p90) | " + fused[0] +
                  " ms | " + fused[0] + " speed-up |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        key = lambda r: (r["family"], r["precision"], r["n"], r["d"], r["causal"], r["threads"])  # noqa: E731
        ours = {key(r): r for r in same if r["backend"] == fused[0]}
        for r in sorted((r for r in same if r["backend"] in plugins), key=lambda r: (r["backend"],) + key(r)):
            o = ours.get(key(r))
            if not o:
                continue
            ratio = median_seconds(r) / median_seconds(o)
            lines.append(f"| {r['backend']} | {r['family']} | {r['precision']} | {r['n']} | {r['d']} | {r['causal']} | "
                         f"{r['threads']} | {spread_ms(r)} | {spread_ms(o)} | {ratio:.2f}x |")
            if r["family"] == "attn_h8" and r["precision"] == "fp32" and r["causal"] == 0:
                readings.append(f"{fused[0]} over {r['backend']} (attn_h8 fp32 n = {r['n']} d = {r['d']} "
                                f"threads {r['threads']}): {ratio:.2f}x")
        lines.append("")
    pts = [q for q in acc.get("points", []) if q["backend"] in plugins]
    if pts:
        lines += ["## Accuracy (attn-lab accuracy, this run)", "", "| plugin | precision | accumulate | points | passed | "
                  "uninformative | largest error / tight tolerance |", "|---|---|---|---:|---:|---:|---:|"]
        groups = {}
        for q in pts:
            groups.setdefault((q["backend"], q["precision"], q["accumulate"]), []).append(q)
        for (b, p, a), qs in sorted(groups.items()):
            worst = max(runs.tight_ratio(q) for q in qs)
            passed, _, unin = runs.verdict_counts(qs)
            lines.append(f"| {b} | {p} | {a} | {len(qs)} | {passed} | {unin} | {worst:.3g} |")
        ns = [q for q in acc.get("not_supported", []) if q["backend"] in plugins]
        lines += ["", f"{len(ns)} (problem, precision, accumulation) combinations were not supported by the plugins "
                      "(listed in data/accuracy.json, `not_supported`)."]
    return "\n".join(lines) + "\n", readings
