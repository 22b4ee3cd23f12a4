"""The tally of the Python tests: each check recorded, failures printed as
they happen, one closing line and the exit status."""
import sys


class Checks:
    def __init__(self):
        self.count, self.failures = 0, []

    def record(self, ok, what):
        """Counts one check; prints and keeps `what` when it failed."""
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("FAIL", what)
        return ok

    def finish(self):
        print(f"{self.count} checks, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)
