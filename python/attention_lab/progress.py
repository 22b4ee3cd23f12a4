"""Progress of long work, in one place (scripts/run's sweep, scripts/mutate): what is running, k of N, the
elapsed time and an estimate of the time left from the cost model's estimates (python/attention_lab/cost_model.json).

On a terminal the progress is one line, rewritten in place (other output printed through `log` goes above it);
elsewhere (a log file, CI, a Slurm task's .err) each step is one plain line. The estimate of the time left is
the remaining estimated seconds scaled by how the finished work compared with its estimate (so a model that is
2x optimistic on this machine is corrected as the run goes; shrunk towards the bare estimate while little has
finished).
"""
import sys
import time

PRIOR = 120.0  # seconds: how much finished work the estimate's correction needs before it trusts its ratio


def clock(seconds):
    seconds = max(0, int(round(seconds)))
    h, m, s = seconds // 3600, seconds % 3600 // 60, seconds % 60
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Progress(estimates, what): `estimates` the estimated seconds of each of the N items, in the order they
    run. start(k, label) before item k (from 0), finish(k) after it; log(text) prints a line of other output;
    close(final) ends the display with a last line."""

    def __init__(self, estimates, what, stream=None, started=None):
        self.estimates = [max(0.0, float(e)) for e in estimates]
        self.what = what
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = started if started is not None else time.monotonic()
        self.done_estimate = 0.0      # estimated seconds of the finished items
        self.done_seconds = 0.0       # their measured seconds
        self.item_t0 = None
        self.current = None
        self.shown = False

    def _left(self):
        remaining = sum(self.estimates[self.current if self.current is not None else 0:])
        if self.current is not None and self.item_t0 is not None:  # the running item is partly done
            remaining = max(0.0, remaining - (time.monotonic() - self.item_t0))
        # The finished items' measured / estimated seconds, shrunk towards 1 while little is finished (PRIOR
        # estimated seconds of pseudo-work at ratio 1), so one short item's luck does not swing the estimate.
        scale = (self.done_seconds + PRIOR) / (self.done_estimate + PRIOR)
        return remaining * scale

    def _line(self, label):
        n = len(self.estimates)
        k = (self.current or 0) + 1
        return (f"[{self.what} {k}/{n}] {label} (elapsed {clock(time.monotonic() - self.t0)}, "
                f"about {clock(self._left())} left)")

    def start(self, k, label):
        self.current, self.item_t0 = k, time.monotonic()
        self.label = label
        self._show(self._line(label))

    def finish(self, k):
        if self.item_t0 is not None:
            self.done_seconds += time.monotonic() - self.item_t0
            self.done_estimate += self.estimates[k]
        self.item_t0 = None

    def _show(self, text):
        if self.tty:
            width = 200
            self.stream.write("\r\033[K" + text[:width])
            self.shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def log(self, text):
        """A line of other output (a step's log): above the progress line on a terminal."""
        if self.tty and self.shown:
            self.stream.write("\r\033[K" + text.rstrip("\n") + "\n")
            self.stream.write(self._line(self.label) if self.current is not None else "")
        else:
            self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()

    def close(self, final=None):
        if self.tty and self.shown:
            self.stream.write("\r\033[K")
        if final:
            self.stream.write(final + "\n")
        self.stream.flush()
