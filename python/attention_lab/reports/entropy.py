"""The entropy report: attention entropy against d and the logit scale."""

import math

import matplotlib.pyplot as plt

from attention_lab.reports.common import ReportError, require, savefig


def entropy_report(ent, folder):
    require(ent, ["rows", "draws", "keys"], "entropy.json")
    rows = ent["rows"]
    if not rows:
        raise ReportError("entropy.json: no rows")
    ds = [r["d"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.errorbar(ds, [r["raw_mean"] for r in rows], yerr=[5 * r["raw_se"] for r in rows], fmt="o-",
                label="softmax(q.k)")
    ax.errorbar(ds, [r["scaled_mean"] for r in rows], yerr=[5 * r["scaled_se"] for r in rows], fmt="s-",
                label="softmax(q.k / sqrt(d_k))")
    ax.axhline(math.log(ent["keys"]), color="k", lw=0.8, ls=":", label=f"uniform: log {ent['keys']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_k")
    ax.set_ylabel("mean entropy (nats), bars: 5 standard errors")
    ax.set_title(f"E7: {ent['draws']} draws over {ent['keys']} keys")
    ax.legend(fontsize=8)
    f1 = savefig(fig, folder, "entropy.svg")
    raw, sc = [r["raw_mean"] for r in rows], [r["scaled_mean"] for r in rows]
    lines = ["# Entropy (EXAMPLES.md E7)", "", f"![entropy]({f1})", ""]
    lines += [f"Without the scale the mean entropy falls from {raw[0]:.3f} nats at d_k = {ds[0]} to {raw[-1]:.3f} "
              f"at d_k = {ds[-1]}; with it, it stays between {min(sc):.3f} and {max(sc):.3f} (a spread of "
              f"{max(sc) - min(sc):.3f}, {100 * (max(sc) - min(sc)) / (raw[0] - raw[-1]):.1f}% of the unscaled "
              "fall). The variance of q.k grows like d_k; divided by sqrt(d_k) it stays near 1:", ""]
    lines += ["| d_k | entropy | se | entropy scaled | se | var(q.k) | var(q.k/sqrt(d_k)) |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['d']} | {r['raw_mean']:.4f} | {r['raw_se']:.4f} | {r['scaled_mean']:.4f} | "
                     f"{r['scaled_se']:.4f} | {r['var_qk']:.2f} | {r['var_qk_scaled']:.3f} |")
    return "\n".join(lines) + "\n", []
