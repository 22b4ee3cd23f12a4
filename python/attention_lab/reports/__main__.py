"""python3 -m attention_lab.reports --data DIR --out-root reports [--command ...]: a run's report.
python3 -m attention_lab.reports collect --attn-lab PATH --data DIR: the page's heatmaps and explorer points
(html_page; a subcommand here, since running the submodule with -m after the package imported it warns)."""
import sys

from attention_lab.reports import html_page, main

sys.exit(html_page.main(sys.argv[1:]) if sys.argv[1:2] == ["collect"] else main())
