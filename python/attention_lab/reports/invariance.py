"""The invariance report: attn-lab invariance's matrix (lib/attn/verify/invariance.hpp): for every backend x
storage x accumulation x pass, whether each invariance holds bit for bit, within the two runs' bounds, or
beyond them."""

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap

from attention_lab.reports.common import require, savefig

PASSES = ("forward", "backward")
# verdict -> (table mark, colour index of the figure)
MARKS = {"bitwise": ("=", 0), "within bounds": ("~", 1), "BEYOND": ("**BEYOND**", 3), "not applicable": ("-", 4)}
COLOURS = ["#2b8a3e", "#f2c94c", "#e8a33d", "#c92a2a", "#dddddd"]


def mark(cell):
    """A cell's mark: = bitwise, ~ within the bounds, ~? within bounds that could not have failed, BEYOND, -; * a
    pair of the invariance left out (its note)."""
    text, colour = MARKS[cell["verdict"]]
    if cell["verdict"] == "within bounds" and cell.get("informative") is False:
        text, colour = "~?", 2
    return text + ("*" if cell.get("note") else ""), colour


def columns(inv):
    return [(i["id"], p) for i in inv["invariances"] for p in PASSES if i[p]]


def holds_everywhere(cells, backend, inv_id):
    """Whether invariance inv_id held bit for bit in every configuration and pass the backend ran."""
    ran = [c for c in cells if c["backend"] == backend and c["invariance"] == inv_id and c["verdict"] != "not applicable"]
    return bool(ran) and all(c["verdict"] == "bitwise" for c in ran)


def invariance_report(inv, folder):
    if inv is None:
        return ("# Invariance\n\nNot in this run: it has no invariance.json (`attn-lab invariance` ran in runs from "
                "2026-12-03 on).\n", [])
    require(inv, ["cells", "invariances", "seed"], "invariance.json")
    cells, names = inv["cells"], {i["id"]: i["name"] for i in inv["invariances"]}
    cols = columns(inv)
    configs = list(dict.fromkeys((c["backend"], c["precision"], c["accumulate"]) for c in cells))
    at = {(c["backend"], c["precision"], c["accumulate"], c["invariance"], c["pass"]): c for c in cells}
    backends = list(dict.fromkeys(c["backend"] for c in cells))

    # The figure: one row per configuration, one column per invariance and pass.
    grid = [[mark(at[(*cfg, i, p)])[1] if (*cfg, i, p) in at else 4 for i, p in cols] for cfg in configs]
    fig, ax = plt.subplots(figsize=(2.0 + 0.55 * len(cols), 2.4 + 0.17 * len(configs)))
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=4, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)), [f"{names[i]} ({p[:3]})" for i, p in cols], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(configs)), [" ".join(cfg) for cfg in configs], fontsize=6)
    ax.set_title("bitwise (green), within bounds (yellow; orange: bounds that could not fail), BEYOND (red), "
                 "not applicable (grey)", fontsize=7)
    fig.tight_layout()
    f1 = savefig(fig, folder, "invariance.svg")

    lines = ["# Invariance: is a row's result the same ...", "",
             "... when the call is repeated, the thread count changes, the row sits in another batch or query "
             "block, the keys are split, or K/V heads are shared? `attn-lab invariance` "
             f"(seed {inv['seed']}; vector kernels {inv.get('simd', '?')}; {inv.get('cores', '?')} hardware threads; "
             f"BLAS {inv.get('blas', '?')}) computes the same rows two or more ways per backend x storage x "
             "accumulation x pass and compares them element by element: **=** every bit the same; **~** some "
             "differ, each within the two runs' probabilistic bounds summed (the output's and logsumexp's per "
             "query row, the gradients' per tensor); **~?** the same, with bounds at or above the values compared "
             "(they could not have failed); **BEYOND** outside them (a defect: the problem is saved beside the "
             "data); **-** not applicable (no backward pass, a plugin's capabilities).", "", f"![invariance]({f1})", "",
             "What each compares:", ""]
    lines += [f"- **{i['name']}** (`{i['id']}`): {i['what']}" for i in inv["invariances"]]
    lines += ["", "## Bit for bit in every configuration", ""]
    readings = []
    for b in backends:
        held = [names[i] for i in names if holds_everywhere(cells, b, i)]
        not_held = [names[i] for i in names if not holds_everywhere(cells, b, i)
                    and any(c["backend"] == b and c["invariance"] == i and c["verdict"] != "not applicable" for c in cells)]
        lines.append(f"- {b}: " + (", ".join(held) if held else "none") +
                     (f"; not: {', '.join(not_held)}" if not_held else ""))
        readings.append(f"invariance: {b} bitwise in every configuration for " + (", ".join(held) or "none"))
    beyond = [c for c in cells if c["verdict"] == "BEYOND"]
    if beyond:
        lines += ["", f"**{len(beyond)} comparison(s) BEYOND the bounds**: "
                  + "; ".join(f"{c['backend']} {c['precision']} {c['accumulate']} {c['pass']} {c['invariance']}"
                              for c in beyond)]
        readings.append(f"invariance: {len(beyond)} comparison(s) BEYOND the bounds")
    lines += ["", "## The matrix", "",
              "| backend | storage | accumulation | " + " | ".join(f"{names[i]} ({p[:3]})" for i, p in cols) + " |",
              "|---|---|---|" + "---:|" * len(cols)]
    for cfg in configs:
        lines.append(f"| {' | '.join(cfg)} | "
                     + " | ".join(mark(at[(*cfg, i, p)])[0] if (*cfg, i, p) in at else "" for i, p in cols) + " |")
    notes = list(dict.fromkeys(f"{c['backend']} {c['invariance']}: {c['note']}" for c in cells if c.get("note")))
    if notes:
        lines += ["", "\\* a pair left out:", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Where they differ: the first element, per backend, invariance and pass", "",
              "| backend | storage | accumulation | pass | invariance | differing / compared | largest difference | "
              "bounds there | first difference |", "|---|---|---|---|---|---:|---:|---:|---|"]
    seen = set()
    for c in cells:
        key = (c["backend"], c["invariance"], c["pass"])
        if c["verdict"] in ("bitwise", "not applicable") or key in seen:
            continue
        seen.add(key)
        lines.append(f"| {c['backend']} | {c['precision']} | {c['accumulate']} | {c['pass']} | {names[c['invariance']]} | "
                     f"{c['differing']} / {c['compared']} | {c['max_diff']:.3g} | {c['tolerance']:.3g} | "
                     f"{c.get('first', '')} |")
    return "\n".join(lines) + "\n", readings
