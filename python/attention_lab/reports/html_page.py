"""The run's index.html: one self-contained page (styles and scripts inline,
figures as the SVG files beside it; nothing from the network) with every
report of the run, sortable tables, attention-weight heatmaps and the
score -> softmax explorer.

    python3 -m attention_lab.reports collect --attn-lab build/tools/attn-lab --data DIR

writes DIR/heatmaps.json and DIR/explorer.json, both computed by attn-lab
itself (`attn-lab attend --weights/--out` on small problems); report.py then
renders them into the page. The explorer recomputes softmax in the browser
as a slider moves; the page also ships the reference points attn-lab
computed for the same inputs, and tests/python/test_browser.py checks the page
against them in headless Chromium.
"""
import argparse
import html
import json
import math
import os
import subprocess
import sys
import tempfile

import markdown
import numpy as np

from attention_lab import bench_json, io
from attention_lab.reports.common import heap_reading

# E1/E2 of EXAMPLES.md: V of E1; the scores of row C are [2, 1, 3] at d_k = 2.
E1_V = [[1.0, 0.0], [1.0, 2.0], [2.0, 2.0]]
E2_SCORES = [2.0, 1.0, 3.0]
DK_CHOICES = [1, 2, 4, 16, 64, 256, 1024]
SCORE_RANGE = (-8.0, 8.0, 0.1)  # slider min, max, step
# Reference points: the scores (on the slider grid), d_k, causal (E4: key C masked).
POINTS = [(s, dk, causal) for s in ([2.0, 1.0, 3.0], [0.0, 0.0, 0.0], [8.0, 0.0, 0.0], [-3.0, 1.5, 0.5],
                                    [5.0, -5.0, 2.0], [7.9, 7.9, -8.0])
          for dk in (1, 2, 64) for causal in (False, True)]
HEATMAP_PROBLEMS = {
    "self": {"title": "self-attention, 8 queries x 8 keys, causal mask", "random": "1,1,8,8,16,16",
             "mask": "causal"},
    "cross": {"title": "cross-attention, 8 queries x 24 keys, key padding (19 valid keys)",
              "random": "1,1,8,24,16,16", "mask": "keypad", "valid": 19},
}


class PageError(Exception):
    """attn-lab failed while computing the page's data: one line."""


def attend(attn_lab, args, work):
    """Runs `attn-lab attend ARGS --weights W --out O --force`; returns (weights, out) as lists."""
    w, o = os.path.join(work, "w.npy"), os.path.join(work, "o.npy")
    cmd = [attn_lab, "attend", *args, "--weights", w, "--out", o, "--force"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PageError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return np.load(w), np.load(o)


def collect(attn_lab, data_dir):
    registry = json.loads(subprocess.run([attn_lab, "list", "--json"], capture_output=True, text=True,
                                         check=True).stdout)
    backends = [b["name"] for b in registry["backends"]]
    exact = next(b["name"] for b in registry["backends"] if b["traits"]["exact"])
    with tempfile.TemporaryDirectory() as work:
        np.save(os.path.join(work, "q.npy"), np.array([[1.0]]))
        np.save(os.path.join(work, "v.npy"), np.array(E1_V))
        np.save(os.path.join(work, "causal.npy"), np.array([[True, True, False]]))
        points = []
        for scores, dk, causal in POINTS:
            np.save(os.path.join(work, "k.npy"), np.array([[s] for s in scores]))
            args = ["--q", os.path.join(work, "q.npy"), "--k", os.path.join(work, "k.npy"), "--v",
                    os.path.join(work, "v.npy"), "--backend", exact, "--precision", "fp64",
                    "--scale", repr(1.0 / math.sqrt(dk))]
            if causal:
                args += ["--mask", "bool:" + os.path.join(work, "causal.npy")]
            w, o = attend(attn_lab, args, work)
            points.append({"scores": scores, "dk": dk, "causal": causal, "weights": w.reshape(-1).tolist(),
                           "output": o.reshape(-1).tolist()})
        explorer = {"command": "attn-lab attend --q [[1]] --k [[s_A], [s_B], [s_C]] --v V(E1) --scale 1/sqrt(d_k) "
                               "[--mask bool:[[1, 1, 0]]] --backend reference --precision fp64",
                    "v": E1_V, "points": points}

        heatmaps = {}
        for key, p in HEATMAP_PROBLEMS.items():
            mask = p["mask"]
            if mask == "keypad":
                np.save(os.path.join(work, "valid.npy"), np.array([p["valid"]], dtype=np.int64))
                mask = "keypad:" + os.path.join(work, "valid.npy")
            base = ["--random", p["random"], "--seed", "7", "--mask", mask, "--precision", "fp32"]
            ref, _ = attend(attn_lab, base + ["--backend", exact], work)
            entry = {"title": p["title"], "command": "attn-lab attend " + " ".join(base).replace(work + "/", "")
                     + " --backend B --weights W.npy", "reference": ref[0, 0].tolist(), "weights": {}}
            for b in backends:
                if b == exact:
                    continue
                w, _ = attend(attn_lab, base + ["--backend", b], work)
                entry["weights"][b] = w[0, 0].tolist()
            heatmaps[key] = entry
    for name, obj in (("explorer.json", explorer), ("heatmaps.json", heatmaps)):
        io.write_json(os.path.join(data_dir, name), obj)


# --- Rendering -------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1em; line-height: 1.45;
       color: #111; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }
th { background: #eee; }
th button { font: inherit; border: none; background: none; cursor: pointer; padding: 0; text-decoration: underline; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
img { max-width: 100%; height: auto; }
.heat td { width: 3.4em; font-size: 0.75em; font-variant-numeric: tabular-nums; }
.heat td.zero { background: repeating-linear-gradient(45deg, #fff, #fff 3px, #ddd 3px, #ddd 5px); font-weight: bold; }
.explorer { border: 1px solid #888; padding: 1em; }
.explorer label { display: inline-block; min-width: 12em; }
.bar { display: inline-block; height: 0.9em; background: #247; vertical-align: middle; }
code { background: #f4f4f4; }
"""

SCRIPT = r"""
// Sortable tables: a button in each header; numbers sort as numbers.
function cellValue(td) {
  const t = td.textContent.trim().replace(/,/g, '');
  const x = parseFloat(t);
  return isNaN(x) ? t.toLowerCase() : x;
}
function sortTable(table, col, th) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const asc = th.getAttribute('aria-sort') !== 'ascending';
  rows.sort((a, b) => {
    const x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
    if (typeof x === typeof y) return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
    return (typeof x === 'number' ? -1 : 1) * (asc ? 1 : -1);
  });
  for (const h of table.tHead.rows[0].cells) h.removeAttribute('aria-sort');
  th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
  for (const r of rows) body.appendChild(r);
}
function makeSortable(table) {
  if (!table.tHead || !table.tBodies.length) return;
  Array.from(table.tHead.rows[0].cells).forEach((th, col) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = th.textContent;
    b.setAttribute('aria-label', 'sort by ' + th.textContent);
    th.textContent = '';
    th.appendChild(b);
    b.addEventListener('click', () => sortTable(table, col, th));
  });
  table.classList.add('sortable');
}

// The explorer: softmax of the three scaled scores, the output sum_j w_j v_j.
function explorerUpdate() {
  const ex = document.getElementById('explorer');
  if (!ex) return;
  const V = JSON.parse(ex.dataset.v);
  const s = [0, 1, 2].map(j => parseFloat(document.getElementById('score' + j).value));
  const dk = parseFloat(document.getElementById('dk').value);
  const causal = document.getElementById('causal').checked;
  const scale = 1 / Math.sqrt(dk);
  const scaled = s.map((x, j) => (causal && j === 2) ? -Infinity : x * scale);
  const softmax = (z) => {
    const m = Math.max(...z);
    const e = z.map(x => x === -Infinity ? 0 : Math.exp(x - m));  // max-shifted: no overflow
    const l = e.reduce((a, b) => a + b, 0);
    return [e.map(x => x / l), z.map(x => Math.exp(x)), z.reduce((a, x) => a + Math.exp(x), 0)];
  };
  const [w, e, l] = softmax(scaled);
  const [wRaw] = softmax(s.map((x, j) => (causal && j === 2) ? -Infinity : x));
  const out = [0, 1].map(c => w.reduce((acc, wj, j) => acc + wj * V[j][c], 0));
  for (let j = 0; j < 3; ++j) {
    document.getElementById('sval' + j).textContent = s[j].toFixed(1);
    document.getElementById('scaled' + j).textContent = scaled[j] === -Infinity ? '-inf (masked)' : scaled[j].toFixed(3);
    document.getElementById('exp' + j).textContent = e[j].toFixed(3);
    document.getElementById('w' + j).textContent = w[j].toFixed(3);
    document.getElementById('bar' + j).style.width = (w[j] * 12) + 'em';
    document.getElementById('wraw' + j).textContent = wRaw[j].toFixed(3);
  }
  document.getElementById('expsum').textContent = l.toFixed(3);
  document.getElementById('scale').textContent = scale.toFixed(4);
  document.getElementById('out0').textContent = out[0].toFixed(3);
  document.getElementById('out1').textContent = out[1].toFixed(3);
  const p = Math.max(...w), pRaw = Math.max(...wRaw);
  document.getElementById('slope').textContent =
    'largest weight ' + p.toFixed(4) + ' (local slope p(1-p) = ' + (p * (1 - p)).toFixed(4) + '); without the scale ' +
    pRaw.toFixed(4) + ' (slope ' + (pRaw * (1 - pRaw)).toFixed(4) + ')';
}
document.addEventListener('DOMContentLoaded', () => {
  document.querySelectorAll('main table:not(.heat):not(#explorer-table)').forEach(makeSortable);
  const ex = document.getElementById('explorer');
  if (ex) {
    ex.querySelectorAll('input, select').forEach(el => el.addEventListener('input', explorerUpdate));
    ex.querySelectorAll('input[type=checkbox], select').forEach(el => el.addEventListener('change', explorerUpdate));
    explorerUpdate();
  }
});
"""


def md_to_html(text):
    return markdown.markdown(text, extensions=["tables"], output_format="html")


def table(headers, rows):
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def bench_table(bench, peak):
    fp32_peak = peak["fp32_fma_gflops_core"]
    rows = []
    for f, b in bench_json.iterations(bench):
        if b.get("repetition_index", 0):
            continue  # one row per benchmark: its first repetition (the reports have the medians and intervals)
        n = f["n"] if "n" in f else f"{f['n_q']}x{f['n_kv']}"
        g = b.get("FLOP/s", 0) / 1e9
        err = b.get("max_abs_error")
        heap = heap_reading(b.get("peak_heap_bytes"), b.get("workspace_model_bytes"))  # none for a plugin
        rows.append([f["family"], f["backend"], f["precision"], n, f["d"], f["causal"], f["threads"],
                     f"{g:.2f}", f"{g / (f['threads'] * fp32_peak):.3f}", "" if heap is None else int(heap),
                     "" if err is None else f"{err:.3g}"])
    return table(["family", "backend", "precision", "n", "d", "causal", "threads", "GFLOP/s",
                  "fraction of peak (threads x 1-thread fp32 FMA)", "peak heap bytes", "max abs error"], rows)


def heat_cell(x, diff=False):
    if x == 0.0:
        return '<td class="zero" title="exactly 0">0</td>'
    if diff:
        return f'<td title="{x!r}">{x:.1e}</td>'
    return f'<td style="background: rgba(34, 68, 119, {min(1.0, abs(x)) * 0.6:.3f})" title="{x!r}">{x:.3f}</td>'


def heatmap(matrix, diff=False, caption=""):
    n_kv = len(matrix[0])
    head = "<tr><th>query \\ key</th>" + "".join(f"<th>{j}</th>" for j in range(n_kv)) + "</tr>"
    rows = "".join(f"<tr><th>{i}</th>" + "".join(heat_cell(x, diff) for x in row) + "</tr>"
                   for i, row in enumerate(matrix))
    return (f'<table class="heat"><caption>{html.escape(caption)}</caption><thead>{head}</thead>'
            f"<tbody>{rows}</tbody></table>")


def heatmaps_section(heat):
    parts = ["<h2 id=\"heatmaps\">Attention-weight heatmaps</h2>",
             "<p>Weights of each backend (fp32; streaming's rebuilt from its logsumexp), and their difference to the "
             "50-digit reference on the same fp32-rounded inputs. Cells print their values; masked keys are "
             "<strong>exact zeros</strong>, shown as a bold 0 on a hatched background.</p>"]
    for key, p in heat.items():
        parts.append(f"<h3>{html.escape(p['title'])}</h3><p><code>{html.escape(p['command'])}</code></p>")
        parts.append(heatmap(p["reference"], caption="reference (50 digits)"))
        for b, w in p["weights"].items():
            diff = [[x - r for x, r in zip(row, rrow)] for row, rrow in zip(w, p["reference"])]
            parts.append(f"<details><summary>{html.escape(b)}: weights and difference to the reference "
                         f"(largest |difference| {max(abs(x) for row in diff for x in row):.2e})</summary>"
                         + heatmap(w, caption=f"{b} weights") + heatmap(diff, True, f"{b} - reference")
                         + "</details>")
    return "\n".join(parts)


def explorer_section(ex):
    lo, hi, step = SCORE_RANGE
    sliders = "".join(
        f'<p><label for="score{j}">score of key {name} (q &middot; k<sub>{name}</sub>)</label> '
        f'<input type="range" id="score{j}" min="{lo}" max="{hi}" step="{step}" value="{E2_SCORES[j]}" '
        f'aria-describedby="sval{j}"> <output id="sval{j}" for="score{j}"></output></p>'
        for j, name in enumerate("ABC"))
    dk = "".join(f'<option value="{d}"{" selected" if d == 2 else ""}>{d}</option>' for d in DK_CHOICES)
    rows = "".join(f"<tr><th>{name}</th><td id=\"scaled{j}\"></td><td id=\"exp{j}\"></td><td id=\"w{j}\"></td>"
                   f"<td style=\"text-align:left\"><span class=\"bar\" id=\"bar{j}\"></span></td>"
                   f"<td id=\"wraw{j}\"></td></tr>" for j, name in enumerate("ABC"))
    ref_rows = [[", ".join(f"{s:g}" for s in p["scores"]), p["dk"], "yes" if p["causal"] else "no",
                 ", ".join(f"{w:.6f}" for w in p["weights"]), ", ".join(f"{o:.6f}" for o in p["output"])]
                for p in ex["points"]]
    return f"""<h2 id="explorer-title">Explorer: scores -> softmax -> output (EXAMPLES.md E1-E4)</h2>
<div class="explorer" id="explorer" data-v='{json.dumps(ex["v"])}' data-points='{html.escape(json.dumps(ex["points"]))}'>
<p>One query over the keys A, B, C of E1 with their values V = [[1, 0], [1, 2], [2, 2]]. Move a score (mouse, or
focus a slider and use the arrow keys); the page recomputes the scaled scores, softmax weights and the output. The
start is E2: scores [2, 1, 3] at d<sub>k</sub> = 2.</p>
{sliders}
<p><label for="dk">d<sub>k</sub> (scale 1/&radic;d<sub>k</sub> = <span id="scale"></span>)</label>
<select id="dk">{dk}</select></p>
<p><label for="causal">causal mask (E4: the query is row B, key C is in its future)</label>
<input type="checkbox" id="causal"></p>
<table id="explorer-table"><thead><tr><th>key</th><th>scaled score</th><th>exp(scaled score)</th><th>weight</th>
<th>weight (bar)</th><th>weight without the scale</th></tr></thead><tbody>{rows}</tbody></table>
<p>sum of exp: <span id="expsum"></span>; output = &sum; w<sub>j</sub> v<sub>j</sub> =
[<span id="out0"></span>, <span id="out1"></span>]</p>
<p id="slope" aria-live="polite"></p>
</div>
<h3 id="reference-points">Reference points computed by attn-lab</h3>
<p><code>{html.escape(ex["command"])}</code>; the browser test sets the controls to each row and checks the displayed
weights against it to 3 decimals.</p>
{table(["scores A, B, C", "d_k", "causal", "weights", "output"], ref_rows)}"""


def render(folder, stamp, command, md_pages, bench, peak, heat=None, explorer=None):
    """Writes folder/index.html. md_pages: [(anchor, title, markdown text)]."""
    nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t, _ in md_pages)
    nav += '<a href="#benchmarks">benchmarks</a>'
    if heat:
        nav += '<a href="#heatmaps">heatmaps</a>'
    if explorer:
        nav += '<a href="#explorer-title">explorer</a>'
    body = [f"<header><h1>attention-lab run {html.escape(stamp)}</h1><p>Command: <code>{html.escape(command)}</code>"
            f"</p><nav aria-label=\"sections\">{nav}</nav></header><main>"]
    for anchor, _title, text in md_pages:
        if anchor == "index":  # its title and command are the page header already
            text = text.split("## Machine", 1)[-1]
            text = "## Machine" + text
        body.append(f'<section id="{anchor}">{md_to_html(text)}</section>')
    body.append('<section id="benchmarks"><h2>Every benchmark of the run</h2><p>Click a column header (or focus it '
                'and press Enter) to sort.</p>' + bench_table(bench, peak) + "</section>")
    if heat:
        body.append(f"<section>{heatmaps_section(heat)}</section>")
    if explorer:
        body.append(f"<section>{explorer_section(explorer)}</section>")
    body.append("</main>")
    page = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>attention-lab run "
            f"{html.escape(stamp)}</title><meta name=\"viewport\" content=\"width=device-width\">"
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>" + "\n".join(body) + "</body></html>\n")
    # Links between the Markdown pages become anchors within this page.
    for anchor, _t, _x in md_pages:
        page = page.replace(f'href="{anchor}.md"', f'href="#{anchor}"')
    with open(os.path.join(folder, "index.html"), "w") as f:
        f.write(page)


def standalone(folder, name, title, markdown_text):
    """Writes folder/name: one self-contained page (the run page's style) of a Markdown text whose
    figures are SVG files beside it (attn-lab compare and attn-lab history)."""
    page = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style><script>{SCRIPT}</script>"
            f"</head><body><main><section>{md_to_html(markdown_text)}</section></main></body></html>\n")
    with open(os.path.join(folder, name), "w") as f:
        f.write(page)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="compute heatmaps.json and explorer.json with attn-lab")
    c.add_argument("--attn-lab", required=True)
    c.add_argument("--data", required=True)
    a = ap.parse_args(argv)
    try:
        collect(a.attn_lab, a.data)
    except (PageError, OSError, subprocess.CalledProcessError) as e:
        print(f"attention_lab.reports collect: {e}", file=sys.stderr)
        return 2
    return 0

