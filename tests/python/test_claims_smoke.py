#!/usr/bin/python3
"""Every claim in its smallest configuration through `attn-lab claims
--profile smoke --json`: the JSON parses, each claim has its pre-registered
fields, a verdict from the allowed three, and finite figures; a retired
entry is listed with its date and reason and not run. Whether a
claim holds is the ledger's business, not this test's."""
import json
import math
import subprocess


from paths import ATTN_LAB

FIELDS = ["id", "source", "quote", "statement", "experiment", "criterion", "verdict", "why", "command", "figures"]


def test_every_claim_at_the_smoke_profile():
    out = subprocess.run([ATTN_LAB, "claims", "--profile", "smoke", "--json"], check=True,
                         capture_output=True, text=True).stdout
    data = json.loads(out)
    failures = []
    if len(data["claims"]) < 5:
        failures.append(f"only {len(data['claims'])} claims")
    for c in data["claims"]:
        for f in FIELDS:
            if not c.get(f) and f != "figures":
                failures.append(f"{c.get('id')}: empty field {f}")
        if c["verdict"] not in ("holds", "does not hold", "inconclusive"):
            failures.append(f"{c['id']}: verdict {c['verdict']!r}")
        if not c["figures"]:
            failures.append(f"{c['id']}: no figures")
        for k, v in c["figures"].items():
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                failures.append(f"{c['id']}: figure {k} = {v!r}")
        print(f"{c['id']:14s} {c['verdict']:14s} {len(c['figures'])} figures")
    ran = {c["id"] for c in data["claims"]}
    for r in data.get("retired", []):
        if not r.get("reason") or not r.get("date"):
            failures.append(f"{r.get('id')}: retired without a date and a reason")
        if r.get("id") in ran:
            failures.append(f"{r['id']}: retired but run")
        print(f"{r.get('id', '?'):14s} retired {r.get('date')}")
    for f in failures:
        print("FAIL", f)
    assert not failures, "; ".join(failures)

