"""The variants report: soft-cap, sinks, ALiBi, documents, GQA against plain attention; decode steps against the read bandwidth."""

import matplotlib.pyplot as plt

from attention_lab.reports.common import fmt_or_nan, median_seconds, read_fraction, savefig, spread_ms


def variants_report(rows, peak, folder, caches=None):
    """The attention variants (attn_var: soft-cap, sinks, ALiBi, documents against plain causal attention at
    H = 8; GQA H_kv = 8 against MHA at H = 32) with each one's cost and error against its bound, and the decode
    step (attn_decode: one query over a KV cache of n_kv, H = 32, H_kv = 8, d = 128) as K/V bytes per second
    against this run's measured read bandwidth (`attn-lab peak`). caches: bench.json's context "caches" (Google
    Benchmark's list of the CPU's caches, sizes in bytes), which say whether a step's K/V fit in the last level."""
    var = [r for r in rows if r["family"] == "attn_var"]
    dec = [r for r in rows if r["family"] == "attn_decode"]
    lines, readings = ["# Variants and decoding", ""], []
    if not var and not dec:
        return "\n".join(lines + ["This run measured no attn_var or attn_decode benchmark.", ""]), readings
    lines += ["Every time below is the median call of one benchmark with the 10th to 90th percentile of its calls "
              "(`seconds_median`, `seconds_p10`, `seconds_p90` of attn-bench), so a ratio of two rows compares "
              "medians measured minutes apart in one run on a shared machine.", ""]
    if var:
        lines += ["## The variants", "",
                  "Causal self-attention, B = 1. `time / base`: the variant's median over plain attention's (H = 8) "
                  "or, for GQA (H = 32, H_kv = 8), over MHA's (H = 32, H_kv = 32) at the same backend, precision, "
                  "n and d. `error`: max |O - truth| on the benchmark's own small check problem "
                  "(`verify_small`), `bound` its tight tolerance.", "",
                  "| backend | precision | n | d | variant | ms median (p10 to p90) | time / base | error | bound |",
                  "|---|---|---:|---:|---|---:|---:|---:|---:|"]
        key = lambda r: (r["backend"], r["precision"], r["n"], r["d"])
        table = {(key(r), r["variant"]): r for r in var}
        worst = {}
        for r in sorted(var, key=lambda r: (key(r), ["plain", "softcap", "sinks", "alibi", "documents", "mha",
                                                     "gqa"].index(r["variant"]) if r["variant"] in
                                            ("plain", "softcap", "sinks", "alibi", "documents", "mha", "gqa") else 9)):
            base = {"gqa": "mha", "softcap": "plain", "sinks": "plain", "alibi": "plain", "documents": "plain"}.get(r["variant"])
            base = table.get((key(r), base))
            ratio = median_seconds(r) / median_seconds(base) if base else None
            if ratio is not None and r["variant"] != "gqa":
                worst[r["variant"]] = max(worst.get(r["variant"], 0), ratio)
            lines.append(f"| {r['backend']} | {r['precision']} | {r['n']} | {r['d']} | {r['variant']} | "
                         f"{spread_ms(r)} | {'' if ratio is None else f'{ratio:.2f}'} | "
                         f"{fmt_or_nan(r.get('max_abs_error'))} | {fmt_or_nan(r.get('error_bound'))} |")
        over = [r for r in var if (r.get("max_abs_error") or 0) > (r.get("error_bound") or float("inf"))]
        lines += ["", f"{len(over)} of {len(var)} variant benchmarks exceed their bound" +
                  (": " + ", ".join(f"{r['backend']} {r['precision']} {r['variant']}" for r in over) if over else "") + ".", ""]
        gqa = [(r, table.get((key(r), "mha"))) for r in var if r["variant"] == "gqa"]
        gqa = [(g, m) for g, m in gqa if m]
        if worst:
            readings.append("variants: largest time over plain per variant: " +
                            ", ".join(f"{v} {x:.2f}x" for v, x in sorted(worst.items())))
        if gqa:
            readings.append("GQA (H_kv = 8) over MHA (H_kv = 32) time, H = 32: " + ", ".join(
                f"{g['backend']} {g['precision']} n = {g['n']} {median_seconds(g) / median_seconds(m):.2f}" for g, m in gqa))
    if dec:
        read_core, read_all = peak.get("read_gbs_core"), peak.get("read_gbs_all")
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        curves = {}
        for r in dec:
            kv_bytes = r["kv_bytes/s"] * r["seconds_per_call"] if r.get("kv_bytes/s") else None
            r["_kv_bytes"] = kv_bytes
            r["_kv_gbs"] = kv_bytes / median_seconds(r) / 1e9 if kv_bytes else float("nan")
            curves.setdefault((r["backend"], r["precision"], r["threads"]), []).append((r["n_kv"], r["_kv_gbs"]))
        for (b, p, t), pts in sorted(curves.items()):
            pts.sort()
            ax.semilogx([x for x, _ in pts], [y for _, y in pts], "o-" if t == 1 else "s--", ms=4,
                        label=f"{b} {p} {t} thread{'s' if t > 1 else ''}")
        for bw, what, ls in ((read_core, "one thread", "-"), (read_all, "all threads", "--")):
            if bw:
                ax.axhline(bw, color="k", ls=ls, lw=0.9, label=f"measured read bandwidth, {what} ({bw:.1f} GB/s)")
        ax.set_xlabel("n_kv (KV cache length; one query, H = 32, H_kv = 8, d = 128)")
        ax.set_ylabel("K/V bytes read per second (GB/s, median call)")
        ax.set_title("decode step: K/V bandwidth against this run's read peak")
        ax.legend(fontsize=6)
        f = savefig(fig, folder, "decode_bandwidth.svg")
        lines += ["## Decoding: one query over a KV cache", "", f"![decode bandwidth]({f})", "",
                  "A decode step reads every K and V element once; its floor is the K/V bytes over the machine's "
                  "read bandwidth, measured in this run by `attn-lab peak` (" +
                  (f"{read_core:.1f} GB/s one thread, {read_all:.1f} GB/s all" if read_core and read_all
                   else "not recorded in this run's peak.json") + "). `of read peak`: the one-thread figure for "
                  "1 thread, the all-threads one otherwise; at the longest KV cache also the median fraction of the "
                  "probe timed again before each sample (attn-bench's read-probe partner).", "",
                  "| backend | precision | threads | n_kv | ms median (p10 to p90) | K/V GB/s | of read peak |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        best = None
        for r in sorted(dec, key=lambda r: (r["backend"], r["precision"], r["threads"], r["n_kv"])):
            bw = read_core if r["threads"] == 1 else read_all
            frac = f"{100 * r['_kv_gbs'] / bw:.0f}%" if bw else ""
            if bw and r["_kv_gbs"] > bw:
                frac += above_read_peak(r["_kv_bytes"], caches)
            beside, alternated = read_fraction(r, bw)
            if alternated:  # the probe timed before each sample too (the longest KV cache)
                frac += f"; {100 * beside['value']:.0f}% of the probe beside each sample"
            lines.append(f"| {r['backend']} | {r['precision']} | {r['threads']} | {r['n_kv']} | {spread_ms(r)} | "
                         f"{r['_kv_gbs']:.2f} | {frac} |")
            f = beside["value"] if beside else None
            if f and r["n_kv"] == max(x["n_kv"] for x in dec) and (best is None or f > best[1]):
                best = (r, f, alternated)
        lines.append("")
        if best:
            r, f, alternated = best
            readings.append(f"decode, n_kv = {r['n_kv']}: best {r['backend']} {r['precision']} {r['threads']} "
                            f"thread(s) {r['_kv_gbs']:.2f} GB/s of K/V = {100 * f:.0f}% of the "
                            + ("read bandwidth measured before each sample" if alternated
                               else "measured read bandwidth"))
    return "\n".join(lines) + "\n", readings


def above_read_peak(kv_bytes, caches):
    """Why a decode step read its K/V faster than peak.json's read figure: K/V that fit in the last-level cache
    (the figure is DRAM's), or, where they do not, a read bandwidth other than that of the process and the
    moment `attn-lab peak` measured it in (on a shared host one core's reads differed by up to 1.4x from one
    process to the next: docs/performance.md, section 72; the probe timed beside each sample, at the longest
    cache, is then the yardstick); no cause where the run did not record its caches."""
    sizes = [c["size"] for c in caches or [] if c.get("type") != "Instruction" and c.get("size")]
    if not sizes or not kv_bytes:
        return " (above the DRAM read peak)"
    mib = lambda b: f"{b / 2**20:.3g} MiB"  # noqa: E731
    llc = max(sizes)
    if kv_bytes <= llc:
        return f" (above the DRAM read peak: the {mib(kv_bytes)} of K/V fit in the {mib(llc)} last-level cache)"
    return (" (above the read figure of `attn-lab peak`, measured in another process at another moment of the run; "
            f"the {mib(kv_bytes)} of K/V exceed the {mib(llc)} last-level cache)")
