"""The claims report: each ledger entry's verdict with its figures."""

import matplotlib.pyplot as plt

from attention_lab.reports.common import ReportError, require, savefig


def claim_plot(plot, folder, name):
    require(plot, ["title", "xlabel", "ylabel", "x", "series"], "claims.json plot")
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for label, ys in plot["series"].items():
        if len(ys) != len(plot["x"]):
            raise ReportError(f"claims.json: plot '{plot['title']}' series '{label}' has {len(ys)} values "
                              f"for {len(plot['x'])} x")
        ax.plot(plot["x"], [y if y is not None else float("nan") for y in ys], "o-", label=label)
    if plot.get("logx"):
        ax.set_xscale("log")
    if plot.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(plot["xlabel"])
    ax.set_ylabel(plot["ylabel"])
    ax.set_title(plot["title"], fontsize=10)
    ax.legend(fontsize=8)
    return savefig(fig, folder, name)


def claims_report(claims, folder):
    require(claims, ["claims", "profile"], "claims.json")
    if not claims["claims"]:
        raise ReportError("claims.json: no claims")
    lines = ["# Claims ledger", "",
             f"Each claim was run as an experiment against a criterion fixed before it ran (profile "
             f"`{claims['profile']}`; `--profile full` uses paper-sized samples). A claim that does not hold on "
             "these measurements is reported as such, with the numbers.", "",
             "| id | verdict | measured | source |", "|---|---|---|---|"]
    for c in claims["claims"]:
        require(c, ["id", "verdict", "why", "source", "statement", "criterion", "command", "figures"], "claims.json claim")
        lines.append(f"| {c['id']} | **{c['verdict']}** | {c['why']} | {c['source']} |")
    lines.append("")
    for c in claims["claims"]:
        lines += [f"## {c['id']}: {c['verdict']}", "", f"- Source: {c['source']}", f"- Quote: \"{c['quote']}\"",
                  f"- Statement tested: {c['statement']}", f"- Experiment: {c['experiment']}",
                  f"- Criterion (fixed before running): {c['criterion']}", f"- Measured: {c['why']}",
                  f"- Reproduce: `{c['command']}`", "", "| figure | value |", "|---|---:|"]
        lines += [f"| {k} | {v:.6g} |" if isinstance(v, (int, float)) else f"| {k} | {v} |"
                  for k, v in c["figures"].items()]
        lines.append("")
        for k, plot in enumerate(c.get("plots", [])):
            name = claim_plot(plot, folder, f"claim_{c['id']}_{k}.svg")
            lines += [f"![{plot['title']}]({name})", ""]
    retired = claims.get("retired", [])
    if retired:
        lines += ["## Retired claims", "", "Entries whose criterion could not fail: their experiments were removed; "
                  "the ledger keeps each with the reason.", "", "| id | retired | statement | reason |", "|---|---|---|---|"]
        for r in retired:
            require(r, ["id", "date", "statement", "reason"], "claims.json retired claim")
            lines.append(f"| {r['id']} | {r['date']} | {r['statement']} | {r['reason']} |")
        lines.append("")
    return "\n".join(lines) + "\n", ["claims: " + "; ".join(f"{c['id']} {c['verdict']}" for c in claims["claims"])]
