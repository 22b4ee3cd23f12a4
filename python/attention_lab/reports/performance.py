"""The performance report: each backend against the measured peak, the targets (bench/targets.json), the backward pass."""

import matplotlib.pyplot as plt

from attention_lab import stats
from attention_lab.reports.common import PEAK_PARTNER, ReportError, Targets, alternated_rows, one_head_rows, peak_fraction, read_fraction, memory_growth, target_bounds, backends_with, backward_series, fit_exponent, heap_reading, fmt_bytes, of_peak, rate_estimate, rate_over, savefig, scaled, time_ratio
from attention_lab.runs import bf16_dots_in_use, precision_peak


DRIFT = 0.05  # a probe that moved more than this between the two readings: the host's speed changed
# what a fraction-of-peak target's name adds (peak_fraction: whether the probe was timed beside each sample)
BESIDE = {True: " (the probe timed before each sample)", False: ""}


def peak_drift(peak):
    """The line saying what the probes read again after the benchmarks (peak.json's "after_bench", written by
    the sweep), flagged when the one-thread FMA peak, SGEMM or the read bandwidth moved by more than DRIFT: every
    fraction of peak in the report then carries that uncertainty. None without a second reading."""
    after = peak.get("after_bench")
    if not after:
        return None
    names = {"fp32_fma_gflops_core": ("fp32 FMA, one thread", "GFLOP/s"), "sgemm_gflops_2048": ("SGEMM", "GFLOP/s"),
             "read_gbs_core": ("read, one thread", "GB/s"), "read_gbs_all": ("read, all threads", "GB/s")}
    moved, parts = [], []
    for k, (what, unit) in names.items():
        if peak.get(k) and after.get(k):
            change = after[k] / peak[k] - 1
            parts.append(f"{what} {peak[k]:.1f} -> {after[k]:.1f} {unit} ({100 * change:+.0f}%)")
            if abs(change) > DRIFT:
                moved.append(what)
    if not parts:
        return None
    text = "Measured again after the benchmarks: " + "; ".join(parts) + "."
    if moved:
        text = (f"**The host's speed changed during the run** ({', '.join(moved)} moved by more than "
                f"{100 * DRIFT:.0f}%): every fraction of peak and every rate here carries that uncertainty; the "
                "fractions use the first reading. " + text)
    return text


def performance_report(rows, peak, bench, folder):
    """The roofline (GFLOP/s of every backend x precision against n, with the
    measured peaks drawn) and the performance targets, each measured in this
    run, PyTorch's math attention (the torch plugin) among them. The targets
    name backends by trait: the fused one runs its own threads with memory
    independent of n; the BLAS ones leave threads to OpenBLAS."""
    fused_all = backends_with(bench, own_threads=True, memory_independent_of_n=True)
    if not fused_all:
        raise ReportError("bench.json: no backend with its own threads and memory independent of n")
    fused = fused_all[0]
    blas = backends_with(bench, uses_blas=True, own_threads=False, exact=False)
    fp32_peak, sgemm = peak["fp32_fma_gflops_core"], peak["sgemm_gflops_2048"]
    att = {d: peak.get(f"sgemm_attention_gflops_d{d}") for d in (64, 128)}
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    curves = {}
    for r in rows:
        if (r["family"] == "attn" and "n" in r and r["causal"] == 0 and r["threads"] == 1 and r["d"] == 64
                and r["backend"] not in backends_with(bench, plugin=True)):
            curves.setdefault((r["backend"], r["precision"]), []).append((r["n"], r["FLOP/s"] / 1e9))
    for (b, p), pts in sorted(curves.items()):
        pts.sort()
        ax.loglog([x for x, _ in pts], [y for _, y in pts], "o-" if p == "fp32" else "s:", ms=4, label=f"{b} {p}")
    ax.axhline(fp32_peak, color="k", lw=1.2, label=f"fp32 FMA peak, 1 thread ({fp32_peak:.0f})")
    ax.axhline(sgemm, color="k", ls="--", lw=0.9, label=f"SGEMM n = 2048, 1 thread ({sgemm:.0f})")
    if att[64]:
        ax.axhline(att[64], color="grey", ls=":", lw=0.9, label=f"attention GEMMs n = 4096, d = 64 ({att[64]:.0f})")
    ax.set_xlabel("n (n_q = n_kv), d = 64, B = H = 1, no mask, 1 thread")
    ax.set_ylabel("GFLOP/s (4 n^2 d)")
    ax.set_title("roofline: each backend x precision against this run's measured peaks")
    ax.legend(fontsize=6, ncol=2)
    f1 = savefig(fig, folder, "roofline_precisions.svg")

    h8 = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in rows if r["family"] == "attn_h8"}
    lines = ["# Performance", "", f"![roofline]({f1})", "",
             f"Peaks measured by `attn-lab peak` in this run: fp32 FMA {fp32_peak:.1f} GFLOP/s on one thread "
             f"({peak['fp32_fma_gflops_all']:.1f} on all), SGEMM {sgemm:.1f} (n = 2048, one thread)"
             + (f", OpenBLAS's two attention GEMMs alone (Q K^T then P V at n = 4096, one thread) {att[64]:.1f} at "
                f"d = 64 and {att[128]:.1f} at d = 128" if att[64] else "") + ". "
             f"Vector kernels of every backend and of the FMA probe: {bench['context'].get('simd', peak.get('simd'))}"
             + (f" ({peak['fma_chains']} independent FMA chains)" if peak.get("fma_chains") else "") + ".", ""]
    drift = peak_drift(peak)
    if drift:
        lines += [drift, ""]
    for e in peak.get("instrument_errors", []):
        lines += [f"**INSTRUMENT ERROR** (attn-lab peak): {e}: the FMA probe under-measures this machine's peak, "
                  "so no fraction of peak in this report can be trusted.", ""]
    target = Targets()
    rate = lambda key: rate_estimate(h8.get(key))  # noqa: E731
    # The ratio targets: from calls that alternated (attn_versus, attn_paired) where the run has them, else from
    # the two attn_h8 points (timed minutes apart); the target's name says which.
    pairs = alternated_rows(rows)

    def ratio_target(what, a, b, need, pass_="forward", points=h8, source=""):
        est, alt = rate_over(pairs, pass_, a, b, points)
        extra = ", ".join(x for x in (source, "calls alternated" if alt else "") if x)
        target(what + (f" ({extra})" if extra else ""), est, f">= {need:.2f}x", ratio, lambda v: v >= need)

    pct = lambda v: f"{100 * v:.0f}%"
    ratio = lambda v: f"{v:.4f}x"
    bound = target_bounds()
    for d in (128, 64):
        need = bound["forward_fraction_of_peak"]["min"][str(d)]
        key = (fused, "fp32", 0, 1, d)
        est, alt = peak_fraction(pairs, "forward", key, h8.get(key), fp32_peak)
        target(f"{fused} fp32, d = {d}, 1 thread: fraction of fp32 FMA peak" + BESIDE[alt], est,
               f">= {pct(need)}", lambda v: of_peak(v * fp32_peak, fp32_peak),
               lambda v, need=need: need <= v <= 1.0)
    peers = backends_with(bench, plugin=True)  # the outside kernels of this run (the peers among them)
    for prec, name in (("fp32", "fp32"), ("bf16", "bf16 (fp32 accumulation)")):
        for d in (64, 128):
            # The fastest outside kernel at this point, by its median rate in this run (none: not measured).
            timed = [p for p in peers if (p, prec, 0, 1, d) in h8]
            fastest = max(timed, key=lambda p: rate((p, prec, 0, 1, d))["value"], default=None)
            label = f"{fused} {name}, d = {d}, 1 thread: rate over the fastest outside CPU kernel of this run"
            if fastest:
                ratio_target(label, (fused, prec, 0, 1, d), (fastest, prec, 0, 1, d),
                             bound["forward_over_fastest_peer"]["min"], source=fastest)
            else:
                target(label, None, f">= {bound['forward_over_fastest_peer']['min']:.2f}x", ratio, None)  # not measured
    for b in blas:
        for d in (64, 128):
            ratio_target(f"{fused} fp32, d = {d}, 1 thread: rate over {b}", (fused, "fp32", 0, 1, d),
                         (b, "fp32", 0, 1, d), bound["forward_over_blas"]["min"])
    for d in (64, 128):
        ratio_target(f"{fused} fp32, d = {d}: 2 threads over 1", (fused, "fp32", 0, 2, d), (fused, "fp32", 0, 1, d),
                     bound["two_threads"]["min"])
    for d in (64, 128):  # the time without the mask over the time with it (rate_over's rates are calls per second)
        ratio_target(f"{fused} fp32, d = {d}: causal speed-up (time ratio)", (fused, "fp32", 1, 1, d),
                     (fused, "fp32", 0, 1, d), bound["causal_speedup"]["min"])
    for p in ("bf16", "fp16"):
        # bf16 where the kernels multiplied it with a bf16 dot product (vdpbf16ps or AMX tiles): the bf16 dot-product target
        key = "bf16_dot_over_fp32" if p == "bf16" and bf16_dots_in_use(peak) else "narrow_over_fp32"
        for d in (64, 128):
            ratio_target(f"{fused} {p} (fp32 accumulation), d = {d}: rate over fp32"
                         + (f" ({peak.get('bf16_dot_instruction') or 'AVX512_BF16'} dot products)"
                            if key == "bf16_dot_over_fp32" else ""),
                         (fused, p, 0, 1, d), (fused, "fp32", 0, 1, d), bound[key]["min"])
    for b in blas:
        for d in (64, 128):
            target(f"{b} fp32, d = {d}: fraction of the two attention GEMMs alone (attn-lab peak)",
                   scaled(rate((b, "fp32", 0, 1, d)), att[d]), f">= {pct(bound['blas_fraction_of_attention_gemms']['min'])}",
                   pct, lambda v: v >= bound["blas_fraction_of_attention_gemms"]["min"])
    mem_rows = sorted((r for r in rows if r["family"] == "attn" and r["backend"] == fused and r["precision"] == "fp32"
                       and r.get("causal") == 0 and r.get("threads") == 1 and r.get("d") == 64 and "n" in r
                       and heap_reading(r.get("peak_extra_heap_bytes"), r.get("workspace_model_bytes")) is not None),
                      key=lambda r: r["n"])
    mem = [(r["n"], r["peak_extra_heap_bytes"]) for r in mem_rows]
    if mem:
        memory_growth(target, fused, mem, bound["memory_independent_of_n"]["max"])
    dec = [r for r in rows if r["family"] == "attn_decode" and r["backend"] == fused and r.get("kv_bytes/s")]
    if dec:
        # Decode steps at the run's longest KV cache: K/V bytes per second against the measured read bandwidth.
        n_kv, need = max(r["n_kv"] for r in dec), bound["decode_fraction_of_read_bandwidth"]["min"]
        for p in ("fp32", "bf16"):
            for t in (1, 2):
                r = next((x for x in dec if (x["n_kv"], x["precision"], x["threads"]) == (n_kv, p, t)), None)
                est, alt = read_fraction(r, peak.get("read_gbs_core" if t == 1 else "read_gbs_all"))
                target(f"decode: {fused} {p}, {t} thread{'s' if t > 1 else ''}, n_kv = {n_kv} (H = 32, H_kv = 8, "
                       "d = 128): K/V GB/s as a fraction of the measured read bandwidth" + BESIDE[alt], est,
                       f">= {pct(need)}", lambda v: pct(v) + (" (above the read probe's figure)" if v > 1 else ""),
                       lambda v, need=need: v >= need)
    # attn_noisy: the same forward points beside a cache-polluting neighbour, each over its quiet attn_h8 twin
    noisy = {(r["backend"], r["d"]): r for r in rows if r["family"] == "attn_noisy"}
    # each over the quiet calls that alternated with it (attn-bench --adaptive), else over its attn_h8 twin
    retained = {k: time_ratio({"samples": r["quiet_samples"]} if r.get("quiet_samples")
                              else h8.get((k[0], "fp32", 0, 1, k[1])), r) for k, r in noisy.items()}
    if noisy:
        need = bound["noisy_neighbour_retained"]["min"]
        for d in (64, 128):
            target(f"{fused} fp32, d = {d}, 1 thread, beside a noisy neighbour: rate over its quiet rate",
                   retained.get((fused, d)), f">= {need:.2f}x", ratio, lambda v, need=need: v >= need)
    bwd_lines = backward_performance(rows, fused, peak, target, peers, ratio_target, pairs)  # its targets join the table below
    counts = sorted({len(r["samples"]) for r in h8.values()})
    sampling = bench["context"].get("adaptive_sampling", "off")
    lines += ["## Performance targets, B = 1, H = 8, n = 4096", "",
              f"Each benchmark took {counts[0] if len(counts) == 1 else f'{counts[0]} to {counts[-1]}' if counts else '?'}"
              " samples, one after the other: "
              + (f"attn-bench's adaptive sampling ({sampling}: it stops when the 95% interval of the median is that "
                 "fraction of the median wide, or at the cap), a sample one call or a batch of calls of at least 5 ms"
                 if sampling != "off" else "Google Benchmark's repetitions, a sample one repetition's median call")
              + ". A rate's interval is the 95% order-statistics interval of the median over the samples "
              "(distribution-free; none with fewer than 6); a ratio's is a 95% percentile bootstrap of the ratio of "
              f"medians ({stats.BOOTSTRAP} resamples, seed {stats.SEED}), or, where the two were timed in alternating "
              "calls (\"calls alternated\"), the order-statistics interval of the median of the pairs' ratios. Verdict: met when the whole interval "
              "meets the requirement, MISSED when none of it does, within noise when it straddles it. Memory "
              "figures are deterministic (one allocation count), without interval.", ""]
    lines += target.table()
    lines += ["", "## Fraction of peak, every attn_h8 run", "",
              "Peak: the fp32 FMA peak, and for bf16 the bf16 dot product's where the kernels multiplied bf16 with "
              "a bf16 dot product"
              + (f" ({peak.get('bf16_dot_instruction') or 'AVX512_BF16'}: {peak['bf16_dot_gflops_core']:.1f} GFLOP/s "
                 "on one thread here)" if bf16_dots_in_use(peak)
                 else f" (not here: {peak['simd']})") + "; threads x the one-thread peak.", "",
              "| backend | precision | causal | threads | d | ms per call (median) | GFLOP/s | 95% interval | of "
              "peak |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (b, p, c, t, d), r in sorted(h8.items()):
        e = rate_estimate(r)
        lines.append(f"| {b} | {p} | {c} | {t} | {d} | {1e3 * stats.median(r['samples']):.1f} | {e['value']:.1f} | "
                     + (f"{e['interval'][0]:.1f} ... {e['interval'][1]:.1f}" if e["interval"] else "none")
                     + f" | {of_peak(e['value'], precision_peak(peak, p, t))} |")
    if backends_with(bench, plugin=True):
        lines += ["", "Kernels loaded from plugins (PyTorch's among them) are timed beside these in the same run: "
                  "their speed beside " + fused + " is in [plugins](plugins.md)."]
    small = [r for r in rows if r["family"] == "attn" and r["precision"] == "fp32" and r.get("causal") == 0
             and r.get("threads") == 1 and "n" in r and ((r["n"] == 256 and r["d"] == 64) or (r["d"] == 32))]
    if small:
        lines += ["", "## Small shapes (B = H = 1, fp32, 1 thread)", "",
                  "| backend | n | d | ms per call | GFLOP/s | of fp32 peak |", "|---|---:|---:|---:|---:|---:|"]
        for r in sorted(small, key=lambda r: (r["backend"], r["n"], r["d"])):
            g = r["FLOP/s"] / 1e9
            lines.append(f"| {r['backend']} | {r['n']} | {r['d']} | {1e3 * r['seconds_per_call']:.3f} | {g:.1f} | "
                         f"{of_peak(g, fp32_peak)} |")
    if noisy:
        lines += ["", "## Beside a noisy neighbour (fp32, 1 thread, B = 1, H = 8, n = 4096)", "",
                  "attn_noisy: each point timed while a thread on the other core sweeps a 256 MiB buffer (reading and "
                  "writing every cache line), against the same calls without it: the quiet calls that alternated "
                  "with the noisy ones (one before each sample), else the attn_h8 point of this run. Retained: the "
                  "rate beside the neighbour over the quiet rate, with the bootstrap interval of the ratio of medians.",
                  "", "| backend | d | quiet GFLOP/s | beside the neighbour | retained | 95% interval | quiet from |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for (b, d), r in sorted(noisy.items()):
            own = bool(r.get("quiet_samples"))
            twin = {"samples": r["quiet_samples"], "flop_per_call": r["flop_per_call"]} if own else h8.get(
                (b, "fp32", 0, 1, d))
            quiet, kept = rate_estimate(twin), retained[(b, d)]
            src = "alternating calls" if own else "attn_h8"
            lines.append(f"| {b} | {d} | {quiet['value']:.1f} | {rate_estimate(r)['value']:.1f} | "
                         + (f"{kept['value']:.3f}x | {kept['interval'][0]:.3f} ... {kept['interval'][1]:.3f}"
                            if kept and kept["interval"] else "- | -") + f" | {src} |" if quiet else
                         f"| {b} | {d} | not measured | {rate_estimate(r)['value']:.1f} | - | - | - |")
    if pairs:
        lines += ["", "## Calls alternated (B = 1, H = 8)", "",
                  "attn_versus (each outside kernel, a call of " + fused + " on the same shape before each of its "
                  "samples), attn_paired and attn_bwd_paired (" + fused + "'s ratio targets: a call of the other side "
                  "before each sample): a host whose speed drifts over minutes moves both calls of a pair alike, "
                  "where the attn_h8 and attn_bwd points are timed minutes apart. The targets above that say "
                  "\"calls alternated\" take their ratio from here: the median over the pairs of the partner's time "
                  "over the point's (the point's calls per second over the partner's), with the order-statistics "
                  "interval of that median. Where the partner is the fp32 FMA probe of `attn-lab peak` (about 10 ms "
                  "before each sample), its time is what the rate it measured would take for the point's FLOPs, so "
                  "the ratio is the point's fraction of the peak measured beside it: the fraction-of-peak targets "
                  "that say \"the probe timed before each sample\" take it from here.", "",
                  "| pass | point | ms per call | partner | ms per call | point over partner | 95% interval | pairs |",
                  "|---|---|---:|---|---:|---:|---:|---:|"]
        show = lambda k: ("the fp32 FMA probe (its time for the point's FLOPs)" if k[0] == PEAK_PARTNER else  # noqa: E731
                          f"{k[0]} {k[1]}, {'causal' if k[2] else 'no mask'}, {k[3]} thread{'s' if k[3] > 1 else ''}, d = {k[4]}")
        for (pass_, a, b), r in sorted(pairs.items()):
            v, _ = rate_over(pairs, pass_, a, b, {})
            lines.append(f"| {pass_} | {show(a)} | {1e3 * stats.median(r['samples']):.1f} | {show(b)} | "
                         f"{1e3 * stats.median(r['partner_samples']):.1f} | {v['value']:.3f}x | "
                         + (f"{v['interval'][0]:.3f} ... {v['interval'][1]:.3f}" if v["interval"] else "-")
                         + f" | {len(r['samples'])} |")
    if mem:
        lines += ["", f"## {fused}'s extra memory against n (fp32, d = 64, 1 thread)", "",
                  "Peak heap of one cold call less the returned output tensor.", "",
                  "| n | peak extra heap |", "|---:|---:|"]
        lines += [f"| {n} | {fmt_bytes(m)} |" for n, m in mem]
    lines += bwd_lines
    missed = [f"{w}: {v} ({k})" for w, v, _, _, k in target.rows if k.startswith("MISSED") or k == "instrument error"]
    noise = [f"{w}: {v} ({i})" for w, v, i, _, k in target.rows if k == "within noise"]
    return "\n".join(lines) + "\n", (["performance targets missed: " + ("; ".join(missed) if missed else "none")]
                                      + (["performance targets within noise: " + "; ".join(noise)] if noise else [])
                                      + [f"INSTRUMENT ERROR (attn-lab peak): {e}" for e in peak.get("instrument_errors", [])])


def backward_performance(rows, fused, peak, target, peers, ratio_target, pairs):
    """The backward pass's targets (appended to the target table through `target`, the ratios through
    `ratio_target`: from calls that alternated where attn_bwd_paired ran) and the table of every
    attn_bwd / attn_fwdbwd run. FLOPs: 2.5x the forward's (FlashAttention-2's count), 3.5x for forward + backward."""
    bwd = [r for r in rows if r["family"] in ("attn_bwd", "attn_fwdbwd")]
    if not bwd:
        return ["", "## The backward pass", "", "not measured in this run (no attn_bwd benchmarks)."]
    n8 = max(r["n"] for r in bwd if r["family"] == "attn_bwd")  # the targets' n (4096 in the quick profile)
    at = {(r["backend"], r["precision"], r["causal"], r["threads"], r["d"]): r for r in bwd
          if r["family"] == "attn_bwd" and r["n"] == n8}
    rate = lambda key: rate_estimate(at.get(key))  # noqa: E731
    pct = lambda v: f"{100 * v:.0f}%"
    ratio = lambda v: f"{v:.4f}x"
    bound = target_bounds()
    fp32_peak = peak["fp32_fma_gflops_core"]
    for d in (128, 64):
        need = bound["backward_fraction_of_peak"]["min"][str(d)]
        key = (fused, "fp32", 0, 1, d)
        est, alt = peak_fraction(pairs, "backward", key, at.get(key), fp32_peak)
        target(f"backward: {fused} fp32, d = {d}, 1 thread: fraction of fp32 FMA peak (2.5x forward FLOPs)"
               + BESIDE[alt], est, f">= {pct(need)}", lambda v: of_peak(v * fp32_peak, fp32_peak),
               lambda v, need=need: need <= v <= 1.0)
    # (peers: the outside kernels of this run, backends_with(bench, plugin=True))
    for prec, name in (("fp32", "fp32"), ("bf16", "bf16 (fp32 accumulation)")):
        for d in (64, 128):
            # The fastest outside backward at this point (PyTorch's CPU flash kernel's among the peers).
            timed = [p for p in peers if (p, prec, 0, 1, d) in at]
            fastest = max(timed, key=lambda p: rate((p, prec, 0, 1, d))["value"], default=None)
            label = f"backward: {fused} {name}, d = {d}, 1 thread: rate over the fastest outside backward of this run"
            if fastest:
                ratio_target(label, (fused, prec, 0, 1, d), (fastest, prec, 0, 1, d),
                             bound["backward_over_fastest_peer"]["min"], "backward", at, fastest)
            else:
                target(label, None, f">= {bound['backward_over_fastest_peer']['min']:.2f}x", ratio, None)  # not measured
    for p in ("bf16", "fp16"):
        for d in (64, 128):
            ratio_target(f"backward: {fused} {p} (fp32 accumulation), d = {d}, 1 thread: rate over fp32"
                         + (f" ({peak.get('bf16_dot_instruction') or 'AVX512_BF16'} dot products)"
                            if p == "bf16" and bf16_dots_in_use(peak) else ""),
                         (fused, p, 0, 1, d), (fused, "fp32", 0, 1, d), bound["backward_narrow_over_fp32"]["min"],
                         "backward", at)
    for d in (64, 128):
        ratio_target(f"backward: {fused} fp32, d = {d}: 2 threads over 1", (fused, "fp32", 0, 2, d),
                     (fused, "fp32", 0, 1, d), bound["two_threads"]["min"], "backward", at)
    # One head: its key blocks in chunks on the two workers (the parallelism inside a head)
    need = bound["two_threads"]["min"]
    for r in one_head_rows(rows):
        v, ci = stats.paired_ratio_ci(r["partner_samples"], r["samples"])
        target(f"backward: {fused} fp32, one head (B = H = 1, n = {r['n']}), d = {r['d']}: 2 threads over 1 "
               "(calls alternated)", {"value": v, "interval": ci}, f">= {need:.2f}x", ratio,
               lambda v, need=need: v >= need)
    for d in (64, 128):
        ratio_target(f"backward: {fused} fp32, d = {d}: causal speed-up (time ratio)", (fused, "fp32", 1, 1, d),
                     (fused, "fp32", 0, 1, d), bound["causal_speedup"]["min"], "backward", at)
    mem = backward_series(rows)
    if fused in mem:
        memory_growth(target, f"backward: {fused}", [(n, r["peak_extra_heap_bytes"]) for n, r in mem[fused]
                                                     if heap_reading(r["peak_extra_heap_bytes"],
                                                                     r["workspace_model_bytes"]) is not None],
                      bound["memory_independent_of_n"]["max"])
    for b, pts in sorted(mem.items()):
        if b == fused or len(pts) < 2:
            continue
        read = [(n, v) for n, r in pts
                if (v := heap_reading(r["peak_extra_heap_bytes"], r["workspace_model_bytes"])) is not None]
        e = fit_exponent([n for n, _ in read], [v for _, v in read])  # (a wrong reading is no point of the fit)
        target(f"backward: {b} peak extra heap, fitted exponent in n over n = {pts[0][0]} ... {pts[-1][0]}", e,
               f"grows as n^2 (>= {bound['backward_gemm_memory_exponent']['min']})", lambda v: f"{v:.2f}",
               lambda v: v >= bound["backward_gemm_memory_exponent"]["min"])
    lines = ["", "## The backward pass: every attn_bwd and attn_fwdbwd run", "",
             "FLOPs counted as the FlashAttention-2 paper counts them: the backward is 2.5x the forward (five matrix "
             "products of 2 n_q n_kv d per head), forward + backward 3.5x; halved for causal. The backward's forward "
             "state (output, logsumexp) is prepared outside its timing.", "",
             "| family | backend | precision | causal | threads | n | d | ms per call | GFLOP/s | of peak (as "
             "above) | peak extra heap |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(bwd, key=lambda r: (r["family"], r["backend"], r["precision"], r["causal"], r["threads"], r["n"],
                                        r["d"])):
        g = r["FLOP/s"] / 1e9
        lines.append(f"| {r['family']} | {r['backend']} | {r['precision']} | {r['causal']} | {r['threads']} | {r['n']} "
                     f"| {r['d']} | {1e3 * r['seconds_per_call']:.1f} | {g:.1f} | {of_peak(g, precision_peak(peak, r['precision'], r['threads']))}"
                     f" | {fmt_bytes(r['peak_extra_heap_bytes'] or 0)} |")
    return lines
