"""The tally of the Python tests that record many checks in one pytest test:
each check recorded, failures printed as they happen, one closing line, and
an AssertionError naming every failed check (pytest's failure)."""


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
        assert self.count > 0, "no check ran"
        assert not self.failures, f"{len(self.failures)} of {self.count} checks failed:\n" + "\n".join(self.failures)
