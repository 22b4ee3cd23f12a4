#!/usr/bin/python3
"""Build step: tools/claims/ledger.json -> a header holding it as one string
(C++20 has no #embed), so attn-lab carries the ledger it was built with.
Fails, naming the problem, when the ledger is not valid JSON."""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
text = open(src, encoding="utf-8").read()
try:
    json.loads(text)
except ValueError as e:
    sys.exit(f"{src}: not valid JSON: {e}")
delim = "ATTN_LEDGER"
if f'){delim}"' in text:
    sys.exit(f"{src}: holds the raw-string delimiter ){delim}\"")
with open(dst, "w", encoding="utf-8") as f:
    f.write("// Generated from tools/claims/ledger.json by tools/claims/embed_ledger.py; do not edit.\n#pragma once\n"
            "#include <string_view>\nnamespace attn::claims {\n"
            f'inline constexpr std::string_view ledger_json = R"{delim}({text}){delim}";\n}}\n')
