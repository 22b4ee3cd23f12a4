"""python3 -m attention_lab.reports --data DIR --out-root reports [--command ...]: a run's report."""
import sys

from attention_lab.reports import main

sys.exit(main())
