#!/usr/bin/python3
"""The claims ledger (tools/claims/ledger.json) keeps its promises:

- every claim's experiment (ATTN_CLAIM in tools/claims/*.cpp) has an entry
  with every field, and every entry names the file of its experiment (or is
  pre-registered ahead of it);
- a pre-registered entry was committed before its experiment's code: the
  commit that added the entry is a strict ancestor of the commit that added
  the code, and the criterion of that first commit is the first criterion
  of the entry's revision record;
- a retired entry (its criterion could not fail) has a date and a reason,
  and its experiment is gone;
- no criterion changed silently: every criterion an entry ever had in the
  git history of ledger.json (and in the working copy) is its current one
  or appears in its revisions, which chain old -> new up to the current.

Each check is shown to fail on a doctored copy of the ledger first.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

from checklib import Checks
from paths import SOURCE

ROOT = Path(SOURCE)
LEDGER = "tools/claims/ledger.json"
FIELDS = ["id", "code", "source", "quote", "statement", "experiment", "criterion", "registered"]


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def history():
    """[(commit, ledger dict)] of every committed version of the ledger, oldest first."""
    out = []
    for commit in git("log", "--reverse", "--format=%H", "--", LEDGER).split():
        try:
            out.append((commit, json.loads(git("show", f"{commit}:{LEDGER}"))))
        except (subprocess.CalledProcessError, ValueError):
            pass  # deleted or not JSON in that commit
    return out


def experiments():
    """{id: file} of every ATTN_CLAIM in tools/claims/*.cpp."""
    found = {}
    for f in sorted((ROOT / "tools/claims").glob("*.cpp")):
        for cid in re.findall(r'ATTN_CLAIM\(\s*\.id\s*=\s*"([^"]+)"', f.read_text()):
            found[cid] = str(f.relative_to(ROOT))
    return found


def problems(ledger, past, code):
    """Every broken promise of `ledger` given its `past` versions and the experiments `code`, as sentences."""
    bad = []
    entries = ledger.get("claims", [])
    ids = [e.get("id") for e in entries]
    if len(set(ids)) != len(ids):
        bad.append("duplicate ids in the ledger")
    by_id = {e.get("id"): e for e in entries}
    for cid, f in code.items():
        if cid not in by_id:
            bad.append(f"{cid}: experiment {f} has no ledger entry")
    for e in entries:
        cid = e.get("id")
        for k in FIELDS:
            if not isinstance(e.get(k), str) or not e[k]:
                bad.append(f"{cid}: field {k} missing or empty")
        if e.get("code") and cid in code and code[cid] != e["code"]:
            bad.append(f"{cid}: code says {e['code']}, the experiment is in {code[cid]}")
        retired = e.get("retired")
        if retired is not None:
            if not isinstance(retired, dict) or not all(isinstance(retired.get(k), str) and retired[k]
                                                        for k in ("date", "reason")):
                bad.append(f"{cid}: retired without a date and a reason")
            if cid in code:
                bad.append(f"{cid}: retired, but its experiment {code[cid]} is still registered")
        elif cid not in code and not e.get("preregistered"):
            bad.append(f"{cid}: no experiment and not marked pre-registered (nor retired)")
        revs = e.get("revisions", [])
        for a, b in zip(revs, revs[1:]):
            if a.get("new_criterion") != b.get("old_criterion"):
                bad.append(f"{cid}: revisions do not chain")
        if revs and revs[-1].get("new_criterion") != e.get("criterion"):
            bad.append(f"{cid}: the last revision's new criterion is not the current criterion")
        known = {e.get("criterion")} | {r.get("old_criterion") for r in revs} | {r.get("new_criterion") for r in revs}
        for commit, old in past:
            for o in old.get("claims", []):
                if o.get("id") == cid and o.get("criterion") not in known:
                    bad.append(f"{cid}: criterion of {commit[:10]} changed without a revision record")
    return bad


def preregistration(ledger, code):
    """Pre-registered entries whose code came first (or together), as sentences."""
    bad = []
    for e in ledger.get("claims", []):
        cid = e.get("id")
        if not e.get("preregistered") or cid not in code:
            continue
        first_entry = next((c for c, old in history() if any(o.get("id") == cid for o in old.get("claims", []))), None)
        added = git("log", "--diff-filter=A", "--format=%H", "--", code[cid]).split()
        if not first_entry or not added:
            bad.append(f"{cid}: pre-registered but its entry or its code is not committed")
            continue
        first_code = added[-1]
        ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", first_entry, first_code], cwd=ROOT).returncode == 0
        if first_entry == first_code or not ancestor:
            bad.append(f"{cid}: the ledger entry ({first_entry[:10]}) was not committed before the code ({first_code[:10]})")
    return bad


def test_claims_ledger():
    checks = Checks()
    ledger = json.loads((ROOT / LEDGER).read_text())
    code = experiments()
    shallow = git("rev-parse", "--is-shallow-repository").strip() == "true"
    if shallow:
        # Without the history half the checks cannot run; passing them anyway would count a test that
        # did not run. Exit status 77: meson reports the test as skipped, not passed.
        print("SKIP: shallow clone: the ledger's git history is not available (git fetch --unshallow, then rerun)")
        sys.exit(77)
    past = history()
    print(f"{len(ledger['claims'])} ledger entries, {len(code)} experiments, {len(past)} committed versions of the ledger")

    # The checks can fail: doctored copies, each of an entry with its experiment
    # committed and its pre-registration not claimed (entries registered ahead
    # of their code have neither).
    first = next(i for i, e in enumerate(ledger["claims"]) if e["id"] in code and not e.get("preregistered"))
    doctored = json.loads(json.dumps(ledger))
    doctored["claims"][first]["criterion"] += " (quietly loosened)"
    checks.record(any("without a revision" in p or "last revision" in p
                      for p in problems(doctored, past + [("HEAD", ledger)], code)),
                  "a criterion changed without a revision is caught")
    doctored = json.loads(json.dumps(ledger))
    del doctored["claims"][first]
    checks.record(any("has no ledger entry" in p for p in problems(doctored, [], code)),
                  "an experiment without an entry is caught")
    doctored = json.loads(json.dumps(ledger))
    doctored["claims"][first]["preregistered"] = True
    checks.record(preregistration(doctored, code) != [],
                  f"an entry committed with its code ({doctored['claims'][first]['id']}) does not pass as pre-registered")

    retired_ids = [e["id"] for e in ledger["claims"] if "retired" in e]
    if retired_ids:
        doctored = json.loads(json.dumps(ledger))
        r = next(e for e in doctored["claims"] if "retired" in e)
        r["retired"] = {"date": r["retired"]["date"]}
        checks.record(any("without a date and a reason" in p for p in problems(doctored, [], code)),
                      f"a retirement without a reason ({r['id']}) is caught")
        checks.record(any("still registered" in p for p in problems(ledger, [], {**code, r["id"]: "tools/claims/x.cpp"})),
                      f"a retired entry whose experiment still runs ({r['id']}) is caught")
        del r["retired"]
        checks.record(any("no experiment" in p for p in problems(doctored, [], code)),
                      f"an entry without an experiment, neither retired nor pre-registered ({r['id']}), is caught")

    # The ledger itself.
    for p in problems(ledger, past, code):
        checks.record(False, p)
    for p in preregistration(ledger, code):
        checks.record(False, p)
    pre = [e["id"] for e in ledger["claims"] if e.get("preregistered")]
    revised = [e["id"] for e in ledger["claims"] if e.get("revisions")]
    print(f"pre-registered: {', '.join(pre) or 'none'}; revised criteria: {', '.join(revised) or 'none'}; "
          f"retired: {', '.join(retired_ids) or 'none'}")
    checks.finish()

