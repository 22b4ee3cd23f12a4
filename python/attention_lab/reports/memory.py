"""The memory report: measured peak heap against the workspace model."""

import matplotlib.pyplot as plt

from attention_lab.reports.common import backward_series, fit_exponent, fmt_bytes, heap_reading, savefig, series


def cell(measured, model):
    """A table's measured peak: the bytes, or what is wrong with a reading below the model."""
    if heap_reading(measured, model) is not None:
        return fmt_bytes(measured)
    return f"{fmt_bytes(measured or 0)}: below the workspace the call allocates, not a reading (not fitted)"


def memory_report(rows, folder):
    by_n = series(rows, "n", precision="fp32", causal=0, threads=1, d=64)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    fits = {}
    unread = 0
    for b, pts in sorted(by_n.items()):
        ns = [p[0] for p in pts]
        model = [p[1]["workspace_model_bytes"] for p in pts]
        measured = [(n, heap_reading(r["peak_heap_bytes"], r["workspace_model_bytes"])) for n, r in pts]
        unread += sum(v is None for _, v in measured)
        ns_read, peak = [n for n, v in measured if v is not None], [v for _, v in measured if v is not None]
        fits[b] = (fit_exponent(ns_read, peak), fit_exponent(ns, model))
        line, = ax.loglog(ns_read, peak, "o-", label=f"{b} measured (exponent {fits[b][0]:.2f})")
        ax.loglog(ns, model, "--", color=line.get_color(), lw=0.9, label=f"{b} workspace model")
    # EXAMPLES.md E6: an explicit fp16 score matrix, 2 MiB at n = 1024 and 8 MiB at 2048.
    ax.loglog([1024, 2048], [2 * 2**20, 8 * 2**20], "k*", ms=11, label="E6: fp16 n x n scores (2 -> 8 MiB)")
    ax.set_xlabel("n")
    ax.set_ylabel("bytes")
    ax.set_title("peak heap of one call vs n: fp32, d = 64")
    ax.legend(fontsize=7)
    f1 = savefig(fig, folder, "memory_n.svg")
    lines = ["# Memory", "", f"![memory vs n]({f1})", ""]
    lines += ["Measured peak heap of one cold call (counting allocator: workspace, output, everything the call "
              "allocates) against each backend's own workspace model (dashed). Fitted exponents of the measured "
              "peak in n: " + "; ".join(f"{b} {m:.2f} (model {w:.2f})" for b, (m, w) in sorted(fits.items()))
              + ". The stars are EXAMPLES.md E6: an explicit fp16 score matrix of one head grows from 2 MiB at "
              "n = 1024 to 8 MiB at n = 2048 (4x for 2x n)."
              + (f" {unread} reading(s) below the workspace the call allocates are the heap counter's errors: "
                 "shown as such, neither plotted nor fitted." if unread else ""), ""]
    lines += ["| backend | n | measured peak | workspace model |", "|---|---:|---:|---:|"]
    for b, pts in sorted(by_n.items()):
        for n, r in pts:
            lines.append(f"| {b} | {n} | {cell(r['peak_heap_bytes'], r['workspace_model_bytes'])} | "
                         f"{fmt_bytes(r['workspace_model_bytes'])} |")
    bwd = backward_series(rows)
    bwd_fits = {}
    if bwd:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for b, pts in sorted(bwd.items()):
            ns = [n for n, _ in pts]
            extra = [(n, heap_reading(r["peak_extra_heap_bytes"], r["workspace_model_bytes"])) for n, r in pts]
            ns_read, extra = [n for n, v in extra if v is not None], [v for _, v in extra if v is not None]
            bwd_fits[b] = (fit_exponent(ns_read, extra),
                           fit_exponent(ns, [r["workspace_model_bytes"] for _, r in pts]))
            line, = ax.loglog(ns_read, extra, "o-", label=f"{b} backward measured (exponent {bwd_fits[b][0]:.2f})")
            ax.loglog(ns, [r["workspace_model_bytes"] for _, r in pts], "--", color=line.get_color(), lw=0.9,
                      label=f"{b} backward workspace model")
        ax.set_xlabel("n")
        ax.set_ylabel("bytes")
        ax.set_title("backward: peak extra heap of one call vs n (fp32, d = 64)")
        ax.legend(fontsize=7)
        f2 = savefig(fig, folder, "memory_backward_n.svg")
        lines += ["", "## The backward pass", "", f"![backward memory vs n]({f2})", "",
                  "Peak heap of one backward call on a fresh workspace, less the gradients it returns (dQ, dK, dV), "
                  "against the backend's workspace model: the math backward holds P and dS of a head (2 n^2 values), "
                  "the streaming backward its tiles only. Fitted exponents in n: "
                  + "; ".join(f"{b} {m:.2f} (model {w:.2f})" for b, (m, w) in sorted(bwd_fits.items())) + ".", "",
                  "| backend | n | peak extra heap | workspace model |", "|---|---:|---:|---:|"]
        for b, pts in sorted(bwd.items()):
            for n, r in pts:
                lines.append(f"| {b} | {n} | {cell(r['peak_extra_heap_bytes'], r['workspace_model_bytes'])} | "
                             f"{fmt_bytes(r['workspace_model_bytes'])} |")
    return "\n".join(lines) + "\n", ["peak-memory exponent in n: " + ", ".join(f"{b} {m:.2f}" for b, (m, _) in sorted(fits.items()))
                                      + ("; backward: " + ", ".join(f"{b} {m:.2f}" for b, (m, _) in sorted(bwd_fits.items()))
                                         if bwd_fits else "")]
