"""The accuracy report: each backend's error against the truth and its bounds, forward and gradients."""

import math

import matplotlib.pyplot as plt

from attention_lab import runs
from attention_lab.reports.common import ReportError, require, savefig


def richest_n(points):
    """The largest n among those swept over the most logit scales (the n of the error-against-logit-scale
    panels; a shard of a sweep may hold only part of the scales)."""
    scales = {}
    for q in points:
        scales.setdefault(q["n"], set()).add(q["logit_scale"])
    most = max(len(s) for s in scales.values())
    return max(n for n, s in scales.items() if len(s) == most)


def accuracy_report(acc, folder):
    require(acc, ["points"], "accuracy.json")
    every = acc["points"]
    if not every:
        raise ReportError("accuracy.json: no points")
    # The figures and the medians: one head, d_k = d_v (the problems every profile sweeps over n and the logit
    # scale); the problems of several batches and heads have their own table below, and every point counts in
    # the verdicts' headroom.
    pts = [q for q in every if q.get("batch", 1) == 1 and q.get("heads", 1) == 1 and q.get("d_v", q.get("d")) == q.get("d")]
    multi = [q for q in every if q not in pts]
    if not pts:
        raise ReportError("accuracy.json: no single-head point")
    for p in every:
        require(p, ["backend", "precision", "accumulate", "n", "d", "mask", "logit_scale", "max_abs", "u_store"],
                "accuracy.json point")
    require(acc, ["precisions"], "accuracy.json")  # the registry's precisions and default accumulation
    default_acc = {p["name"]: p["default_accumulate"] for p in acc["precisions"]}
    precisions = [p for p in default_acc if any(q["precision"] == p for q in pts)]
    backends = sorted({q["backend"] for q in pts})

    def pick(**fixed):
        return [q for q in pts if all(q.get(k) == v for k, v in fixed.items())]

    def relative(q):  # max |O - truth| / max |truth|
        return max(q["max_abs_over_u"] * q["u_store"], 1e-300) if "max_abs_over_u" in q else max(q["max_abs"], 1e-300)

    def panels(name, x, xlabel, points=pts, y=relative, ylabel="max |O - truth| / max |truth|", among=precisions,
               **fixed):
        """One panel per precision of `among` (default accumulation), one line per backend, y(point) against x
        (points with y <= 0, an exact result, are left off the log axis)."""
        fig, axes = plt.subplots(1, len(among), figsize=(3.2 * len(among), 3.6), squeeze=False)
        for ax, prec in zip(axes[0], among):
            for b in backends:
                s = sorted((q for q in points if q["backend"] == b and q["precision"] == prec and y(q) > 0
                            and q["accumulate"] == default_acc[prec] and all(q.get(k) == v for k, v in fixed.items())),
                           key=lambda q: q[x])
                if s:
                    ax.loglog([q[x] for q in s], [y(q) for q in s], "o-", label=b, ms=3)
            u = next(q["u_store"] for q in pts if q["precision"] == prec)
            ax.axhline(u, color="k", lw=0.8, ls=":", label=f"u = {u:.2g}")
            ax.set_title(f"{prec} (accumulate {default_acc[prec]})", fontsize=9)
            ax.set_xlabel(xlabel)
        axes[0][0].set_ylabel(ylabel)
        axes[0][0].legend(fontsize=7)
        return savefig(fig, folder, name)

    f1 = panels("accuracy_n.svg", "n", "n", mask="none", logit_scale=1, d=64)
    n_scale = richest_n(pts)
    f2 = panels("accuracy_scale.svg", "logit_scale", "logit scale", mask="none", n=n_scale, d=64)

    lines = ["# Accuracy", "", "Every error here is deterministic (fixed seeds, one evaluation of each point against the "
             "50-digit reference where affordable): it carries no interval, unlike the timings.", "",
             f"![error vs n]({f1})", ""]
    worst = {}
    for prec in precisions:
        s = pick(precision=prec, accumulate=default_acc[prec], mask="none", logit_scale=1, d=64)
        if s:
            w = max(s, key=lambda q: q["max_abs"])
            worst[prec] = w
    lines += ["Max |O - truth| / max |truth| against n (d = 64, no mask, scaled scores of unit variance), each "
              "precision at its default accumulation; the dotted line is the storage format's unit roundoff u. The truth is "
              "verify()'s, code of its own (independent.hpp: no BLAS, no library helper): 50 digits where affordable, "
              "else double-double (fp64 storage) or plain fp64 (fp32 and narrower), its own bound added (each point's `reference` in "
              "data/accuracy.json says which). e4m3 and "
              "e5m2 are emulated: inputs and output quantised (power-of-two scale per tensor) around an fp32 "
              "computation. Largest "
              "errors: " + "; ".join(f"{p}: {w['max_abs']:.2g} ({w['backend']}, n = {w['n']}, "
                                     f"{w['max_abs'] / w['u_store']:.2f} u)" for p, w in worst.items()) + ".", ""]
    lines += [f"![error vs logit scale]({f2})", ""]
    growth = []
    for prec in precisions:
        s1 = pick(precision=prec, accumulate=default_acc[prec], mask="none", n=n_scale, d=64, logit_scale=1)
        s3 = pick(precision=prec, accumulate=default_acc[prec], mask="none", n=n_scale, d=64, logit_scale=1000)
        if s1 and s3:
            a, b = max(q["max_abs"] for q in s1), max(q["max_abs"] for q in s3)
            growth.append(f"{prec} {a:.2g} -> {b:.2g}")
    lines += [f"At n = {n_scale}, error against the logit scale (the standard deviation of the scaled scores), "
              "worst backend at logit scale 1 -> 1000: " + "; ".join(growth) + ".", ""]
    lines += ["Median max-abs error over all problems, by precision and accumulation:", "",
              "| precision | accumulate | median max_abs | median in u_store | points |", "|---|---|---:|---:|---:|"]
    for prec in precisions:
        for a in ("fp64", "fp32", "storage"):
            s = sorted(q["max_abs"] / q["u_store"] for q in pick(precision=prec, accumulate=a))
            t = sorted(q["max_abs"] for q in pick(precision=prec, accumulate=a))
            if s:
                lines.append(f"| {prec} | {a} | {t[len(t) // 2]:.3g} | {s[len(s) // 2]:.3g} | {len(s)} |")
    if multi:
        lines += ["", "## Several batches and heads, d_k != d_v", "",
                  f"B = 2, H = 4, n = {'/'.join(str(n) for n in sorted({q['n'] for q in multi}))}, d_k = 64, d_v = 32, head h's V scaled by 10^h (heads 1e3 apart; fp16 holds 65504), no mask "
                  "and causal, logit scales 1 and 100; the output, the logsumexp and the weights each judged row by "
                  "row (a verdict passes when all three do).", "",
                  "| precision | accumulate | points | passed | uninformative | failed | largest err/tight (output) |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                g = [q for q in multi if q["precision"] == prec and q["accumulate"] == a]
                if g:
                    passed, failed, unin = runs.verdict_counts(g)
                    lines.append(f"| {prec} | {a} | {len(g)} | {passed} | {unin} | {failed} | "
                                 f"{max(runs.tight_ratio(q) for q in g):.3g} |")
    tight = [q for q in every if isinstance(q.get("tight_tolerance"), (int, float)) and q["tight_tolerance"] > 0]
    if tight:
        lines += ["", "## Headroom of each verdict", "",
                  "Actual error over the tight tolerance, row by row (verify(): each query row within the smaller of "
                  "its probabilistic bound, failure probability 1e-9 per check, and (2 beta + 2) f, f the row's unit "
                  "of rounding noise and beta the baseline backend's largest row error in those units; the ratio is "
                  "the deciding row's), and over the worst-case bound, over every backend and problem of the sweep. "
                  "A ratio near 1 means the verdict would flag a small increase of the error; the worst-case bound's "
                  "small ratios are what it lets through. The criterion column says which part can decide in that "
                  "configuration (the baseline is judged by the probabilistic bound alone; where that bound is "
                  "trivial, the baseline rule alone decides). Uninformative: points where some row's tolerance "
                  "reaches the size of the output it judges (a 100% error would pass); they are counted apart, "
                  "never as passes, and left out of the ratios.",
                  "", "| precision | accumulate | criterion | points | passed | uninformative | median err/tight | "
                  "max err/tight | median err/worst-case | failed tight | failed worst-case |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                group = [q for q in tight if q["precision"] == prec and q["accumulate"] == a]
                for crit in sorted({q.get("criterion", "?") for q in group}):
                    g = [q for q in group if q.get("criterion", "?") == crit]
                    passed, _, unin = runs.verdict_counts(g)
                    rt = sorted(runs.tight_ratio(q) for q in g if runs.informative(q))
                    rw = sorted(q["max_abs"] / q["bound"] for q in g if q.get("bound"))
                    med = lambda xs: f"{xs[len(xs) // 2]:.3g}" if xs else "-"
                    lines.append(f"| {prec} | {a} | {crit} | {len(g)} | {passed} | {unin} | {med(rt)} | "
                                 + (f"{rt[-1]:.3g}" if rt else "-") + f" | {med(rw)} | "
                                 f"{sum(1 for q in g if q.get('within_tight') is False)} | "
                                 f"{sum(1 for q in g if q.get('within') is False)} |")
    if tight:
        lines += ["", "## Looseness by logit scale", "",
                  "Tight tolerance over error (1 / err_tight of the deciding row) per precision, accumulation and "
                  "logit scale, over the informative points with a non-zero error: the median and the loosest "
                  "(largest: how much larger an error would still pass), and the tightest; uninformative points "
                  "(a row's tolerance reaches its output) are counted, not included.", "",
                  "| precision | accumulate | logit scale | points | uninformative | median tol/err | loosest | tightest |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for prec in precisions:
            for a in ("fp64", "fp32", "storage"):
                for ls in sorted({q["logit_scale"] for q in tight}):
                    g = [q for q in tight if q["precision"] == prec and q["accumulate"] == a and q["logit_scale"] == ls]
                    if not g:
                        continue
                    r = sorted(1 / runs.tight_ratio(q) for q in g if runs.informative(q) and 0 < runs.tight_ratio(q))
                    unin = sum(1 for q in g if not runs.informative(q))
                    lines.append(f"| {prec} | {a} | {ls:g} | {len(g)} | {unin} | "
                                 + (f"{r[len(r) // 2]:.3g} | {r[-1]:.3g} | {r[0]:.3g} |" if r else "- | - | - |"))
    dist = [q for q in every if isinstance(q.get("distribution"), dict)]
    if dist:
        lines += ["", "## Beneath the output's rounding: the distribution verdict", "",
                  "In bf16, fp16 (and the emulated FP8) storage each element's tolerance is at least one rounding of "
                  "the output; the distribution verdict (docs/DESIGN.md) measures the internal error's mean square "
                  "beneath it, mean (e^2 - r^2) with r the truth's own rounding, in ulps of each row's largest |O|, "
                  "and requires its RMS (at the low end of a 6-sigma interval) within 2x the baseline's + 2 units "
                  "of the model's noise. Ratio: measured / allowed (above 1 fails); every backend but the baseline.", "",
                  "| precision | accumulate | points | failed | median internal RMS (ulps) | median allowed | "
                  "median ratio | largest ratio |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for prec in sorted({q["precision"] for q in dist}):
            for a in ("fp64", "fp32", "storage"):
                g = [q["distribution"] for q in dist if q["precision"] == prec and q["accumulate"] == a]
                if not g:
                    continue
                med = lambda key: sorted(x[key] for x in g)[len(g) // 2]
                lines.append(f"| {prec} | {a} | {len(g)} | {sum(1 for x in g if not x['within'])} | "
                             f"{med('internal_rms'):.3g} | {med('allowed_rms'):.3g} | {med('ratio'):.3g} | "
                             f"{max(x['ratio'] for x in g):.3g} |")
    grads = acc.get("gradient_points", [])
    if grads:
        lines += gradient_section(grads, precisions, panels)
    return "\n".join(lines) + "\n", ["largest error at unit logits (d = 64, no mask): "
                                      + ", ".join(f"{p} {w['max_abs']:.2g}" for p, w in worst.items())]


def gradient_section(grads, precisions, panels):
    """The backward pass's part of the accuracy report: gradient error against n and the logit
    scale (figures), and per precision, policy and gradient the error and each verdict's headroom."""
    # A non-finite gradient's relative error is null in the JSON: infinite here (and its verdicts fail).
    grads = [dict(q, relative=math.inf) if q.get("relative") is None else q for q in grads]
    for q in grads:
        require(q, ["backend", "precision", "accumulate", "n", "d", "mask", "logit_scale", "gradient", "relative",
                    "max_abs", "bound", "tight_tolerance", "within", "within_tight"], "accuracy.json gradient point")
    # One point per (backend, precision, policy, problem): the largest relative error of dQ, dK, dV.
    merged = {}
    for q in grads:
        key = tuple(q[k] for k in ("backend", "precision", "accumulate", "n", "d", "mask", "logit_scale"))
        if key not in merged or q["relative"] > merged[key]["relative"]:
            merged[key] = q
    worst = list(merged.values())
    gprecisions = [p for p in precisions if any(q["precision"] == p for q in grads)]
    ylabel = "max over dQ, dK, dV of max |g - truth| / max |truth|"
    f1 = panels("accuracy_grad_n.svg", "n", "n", points=worst, y=lambda q: q["relative"], ylabel=ylabel,
                among=gprecisions, mask="none", logit_scale=1, d=64)
    n_scale = richest_n(grads)
    f2 = panels("accuracy_grad_scale.svg", "logit_scale", "logit scale", points=worst, y=lambda q: q["relative"],
                ylabel=ylabel, among=gprecisions, mask="none", n=n_scale, d=64)
    lines = ["", "## The backward pass", "",
             f"![gradient error vs n]({f1})", "",
             "The gradients dQ, dK, dV of every backend with a backward pass, dO ~ N(0, 1) (seed 2000 + the "
             "problem's index), against `gradient_truth()`: the independent code's backward in 50 digits where affordable, "
             "else in double-double or fp64 with its bound, never a backend's (each point's `reference` says which). Each point is "
             "the largest of the three relative errors max |g - truth| / max |truth|; d = 64, no mask, unit "
             "logits, each precision at its default accumulation (an exact result, error 0, is left off the log "
             "axis).", "",
             f"![gradient error vs logit scale]({f2})", "",
             f"At n = {n_scale}, against the logit scale. Per precision, policy and gradient over every problem "
             "(err/tight: the deciding row's error over its tight tolerance, verify_backward() judging each row "
             "of dQ and each key's row of dK and dV in its own units, min(probabilistic bound, the baseline's rule); "
             "err/worst: over the worst-case bound of metrics.hpp):", "",
             "| precision | accumulate | gradient | points | passed | uninformative | median relative | max relative | "
             "median err/tight | max err/tight | median err/worst | failed tight | failed worst-case |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for prec in gprecisions:
        for a in ("fp64", "fp32", "storage"):
            for g in ("dq", "dk", "dv"):
                s = [q for q in grads if q["precision"] == prec and q["accumulate"] == a and q["gradient"] == g]
                if not s:
                    continue
                rel = sorted(q["relative"] for q in s)
                # An infinite bound (a non-informative one) is null in the JSON.
                finite = lambda x: isinstance(x, (int, float)) and 0 < x < math.inf
                rt = sorted(runs.tight_ratio(q) for q in s if finite(q["tight_tolerance"]) and runs.informative(q))
                rw = sorted(q["max_abs"] / q["bound"] for q in s if finite(q["bound"]))
                med = lambda xs: f"{xs[len(xs) // 2]:.3g}" if xs else "-"
                passed, _, unin = runs.verdict_counts(s)
                lines.append(f"| {prec} | {a} | {g} | {len(s)} | {passed} | {unin} | {med(rel)} | {rel[-1]:.3g} | {med(rt)} | "
                             + (f"{rt[-1]:.3g}" if rt else "-") + f" | {med(rw)} | "
                             f"{sum(1 for q in s if q['within_tight'] is False)} | "
                             f"{sum(1 for q in s if q['within'] is False)} |")
    top = max(grads, key=lambda q: q["relative"])
    if "max_truth" in top:
        lines += ["", f"The largest relative error, {top['relative']:.3g} ({top['backend']} {top['precision']}, "
                  f"accumulate {top['accumulate']}, {top['gradient']}, n = {top['n']}, {top['mask']}, logit scale "
                  f"{top['logit_scale']:g}), is against a true gradient of max |{top['gradient']}| = "
                  f"{top['max_truth']:.3g}: where the softmax saturates, dS = P o (dP - D) vanishes and the relative "
                  f"error measures rounding against almost nothing. Its absolute error {top['max_abs']:.3g} against "
                  f"the tight tolerance {top['tight_tolerance']:.3g}: "
                  + ("within, and informative." if runs.informative(top) and top.get("within_tight") else
                     "within, but the tolerance reaches the gradient itself: uninformative, not a pass."
                     if top.get("within_tight") else "EXCEEDED.")]
    return lines
