"""The scaling report: time against n and d, the fitted exponents."""

import matplotlib.pyplot as plt

from attention_lab.reports.common import backward_series, fit_exponent, loglog_fits, of_peak, savefig, series, widest


def scaling_report(rows, peak, folder):
    fixed = dict(precision="fp32", causal=0, threads=1)
    d_of_n, n_of_d = widest(rows, "n", "d", **fixed), widest(rows, "d", "n", **fixed)
    if d_of_n is None:
        return "# Scaling\n\nThis run measured no fp32 single-thread attn points.\n", []
    by_n = series(rows, "n", d=d_of_n, **fixed)
    f1, fits = loglog_fits(folder, "scaling_n.svg", {b: [(n, r["seconds_per_call"]) for n, r in pts]
                                                     for b, pts in by_n.items()},
                           "n (n_q = n_kv)", "seconds per call", f"time vs n: fp32, d = {d_of_n}, no mask, 1 thread")
    fits = {b: (e, [n for n, _ in by_n[b]]) for b, e in fits.items()}
    by_d = series(rows, "d", n=n_of_d, **fixed)
    f2, dfits = loglog_fits(folder, "scaling_d.svg", {b: [(d, r["seconds_per_call"]) for d, r in pts]
                                                      for b, pts in by_d.items()},
                            "d_k = d_v", "seconds per call", f"time vs d: fp32, n = {n_of_d}, no mask, 1 thread")

    fp32_peak = peak["fp32_fma_gflops_core"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    roof = {}
    for b, pts in sorted(by_n.items()):
        fr = [p[1]["FLOP/s"] / 1e9 / fp32_peak for p in pts]
        roof[b] = max(fr)
        ax.semilogx([p[0] for p in pts], fr, "o-", label=b)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("n")
    ax.set_ylabel("fraction of measured fp32 FMA peak (one thread)")
    ax.set_title(f"roofline: peak {fp32_peak:.1f} GFLOP/s measured in this run")
    ax.legend(fontsize=8)
    f3 = savefig(fig, folder, "roofline.svg")

    lines = ["# Scaling", "", f"![time vs n]({f1})", ""]
    desc = "; ".join(f"{b}'s time grows with exponent {e:.2f} over n = {min(ns)} ... {max(ns)}"
                     for b, (e, ns) in sorted(fits.items()))
    lines += [f"Fitted on a log-log least-squares line: {desc}. Work quadratic in n would give 2.0.", ""]
    lines += [f"![time vs d]({f2})", ""]
    lines += [f"At n = {n_of_d}, time against d: " + "; ".join(f"{b} exponent {e:.2f}" for b, e in sorted(dfits.items()))
              + ". The products grow linearly in d (exponent 1); the n^2 exponentials do not grow with d, so "
              "an exponent below 1 measures how much of the time they take.", ""]
    lines += [f"![roofline]({f3})", ""]
    best = max(roof.items(), key=lambda t: t[1])
    lines += [f"GFLOP/s (4 n^2 d per head) as a fraction of this machine's fp32 FMA peak of {fp32_peak:.1f} "
              f"GFLOP/s for one thread, measured by `attn-lab peak` in the same run. The best is {best[0]} at "
              f"{of_peak(best[1] * fp32_peak, fp32_peak)}: "
              + ", ".join(f"{b} {of_peak(v * fp32_peak, fp32_peak)}" for b, v in sorted(roof.items())) + ".", ""]
    lines += ["| backend | n | d | ms per call | GFLOP/s |", "|---|---:|---:|---:|---:|"]
    for b, pts in sorted(by_n.items()):
        for n, r in pts:
            lines.append(f"| {b} | {n} | {d_of_n} | {1e3 * r['seconds_per_call']:.2f} | {r['FLOP/s'] / 1e9:.1f} |")
    bwd = backward_series(rows)
    bwd_fits = {b: fit_exponent([n for n, _ in pts], [r["seconds_per_call"] for _, r in pts]) for b, pts in bwd.items()}
    if bwd:
        lines += ["", "## The backward pass", "",
                  "Time of the backward alone (attn_bwd_mem: B = H = 1, fp32, d = 64, 1 thread) against n; fitted "
                  "exponents: " + "; ".join(f"{b} {e:.2f} over n = {bwd[b][0][0]} ... {bwd[b][-1][0]}"
                                            for b, e in sorted(bwd_fits.items())) + ".", "",
                  "| backend | n | ms per backward | GFLOP/s (2.5x the forward's FLOPs) |", "|---|---:|---:|---:|"]
        for b, pts in sorted(bwd.items()):
            for n, r in pts:
                lines.append(f"| {b} | {n} | {1e3 * r['seconds_per_call']:.2f} | {r['FLOP/s'] / 1e9:.1f} |")
    return "\n".join(lines) + "\n", ["time exponent in n: " + ", ".join(f"{b} {e:.2f}" for b, (e, _) in sorted(fits.items()))
                                      + ("; backward: " + ", ".join(f"{b} {e:.2f}" for b, e in sorted(bwd_fits.items()))
                                         if bwd else "")]
