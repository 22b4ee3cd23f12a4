#!/usr/bin/python3
"""Where a mutation run ran: scripts/mutate records the sources' commit, the CPU and the vector kernels in its
report's summary ("where"); the report's header and the README's mutation line name them in one text
(attention_lab.mutation.where_text), and a report from before the field renders as it did.

    python3 -m pytest tests/python/test_mutation_where.py
"""
import json
import pathlib
import tempfile
import unittest

import paths  # noqa: F401  (the package on sys.path)
from attention_lab.mutation import where_text
from attention_lab.reports import readme

WHERE = {"commit": "0123456789abcdef0123456789abcdef01234567-dirty", "cpu": "AMD EPYC", "cores": 2,
         "simd": "avx512bw (avx512bf16 variant, the widest this CPU executes)"}
SUMMARY = {"mutants": 10, "equivalent": 1, "non_equivalent": 9, "killed": 9, "survived": 0, "not_run": 0,
           "killed_by_default_check": 4, "killed_by_check_matrix": 5, "seconds": 600}


class MutationWhere(unittest.TestCase):
    def test_the_text(self):
        self.assertEqual(where_text(WHERE), "commit 0123456789ab-dirty, AMD EPYC (2 cores, avx512bw (avx512bf16 "
                                            "variant, the widest this CPU executes))")
        clean = dict(WHERE, commit="0123456789abcdef0123456789abcdef01234567")
        self.assertEqual(where_text(clean)[:20], "commit 0123456789ab,")

    def readme_line(self, summary):
        with tempfile.TemporaryDirectory() as tmp:
            run = pathlib.Path(tmp) / "run"
            (run / "data").mkdir(parents=True)
            (run / "data/mutation.json").write_text(json.dumps({"summary": summary, "mutants": []}))
            saved, readme.ROOT = readme.ROOT, pathlib.Path(tmp)
            try:
                return readme.mutation({"run": run})
            finally:
                readme.ROOT = saved

    def test_the_readme_line_names_where_it_ran(self):
        line = self.readme_line(dict(SUMMARY, where=WHERE))
        self.assertIn("(`run/data/mutation.md`, 10 min, on " + where_text(WHERE) + "): 10 mutants", line)
        self.assertIn("**9 of 9**", line)

    def test_a_report_from_before_the_field(self):
        line = self.readme_line(SUMMARY)
        self.assertIn("(`run/data/mutation.md`, 10 min): 10 mutants", line)
        self.assertNotIn(", on commit", line)


if __name__ == "__main__":
    unittest.main()
