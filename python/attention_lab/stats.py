"""The statistics every comparison of timings uses, in one place: the
performance report's intervals and verdicts, `attn-lab compare` and
`attn-lab history` all call these.

- median_ci: a distribution-free confidence interval for the median of
  repeated measurements from order statistics (the binomial argument: the
  k-th smallest and k-th largest of n samples bracket the median with
  probability 1 - 2 P(Binomial(n, 1/2) < k)); exact, deterministic, no
  resampling. It needs n >= 6 for 95%: with fewer it says so.
- ratio_ci: the ratio of two medians with a percentile bootstrap interval
  (each sample resampled independently, fixed seed, so a report rendered
  twice prints the same interval).
- verdict: met / missed / within noise, by where the interval lies against
  the target.
- mann_whitney: SciPy's Mann-Whitney U test, two-sided (what Google
  Benchmark's compare.py runs over repetitions).
- holm: Holm's step-down correction of many p-values at once (controls the
  family-wise error rate without assuming independence). Hand-written
  because SciPy 1.10 has no multiple-testing correction and statsmodels
  is a large dependency for six lines.
"""
import math

import numpy as np
from scipy import stats as _scipy_stats

LEVEL = 0.95           # every interval of the reports and of compare
BOOTSTRAP = 10_000     # resamples of ratio_ci
SEED = 20261201        # ratio_ci's generator, fixed so that a report is reproducible


def median(xs):
    return float(np.median(np.asarray(xs, dtype=float)))


def median_ci(xs, level=LEVEL):
    """(low, high, coverage) for the median of xs from order statistics, or
    None when len(xs) is too small for the level (coverage of (min, max) below it)."""
    x = sorted(float(v) for v in xs)
    n = len(x)
    best = None
    for k in range(1, n // 2 + 1):  # the k-th smallest and k-th largest
        coverage = 1.0 - 2.0 * _scipy_stats.binom.cdf(k - 1, n, 0.5)
        if coverage >= level:
            best = (x[k - 1], x[n - k], coverage)
        else:
            break
    return best


def ratio_ci(a, b, level=LEVEL, resamples=BOOTSTRAP, seed=SEED):
    """median(a) / median(b) and its percentile-bootstrap interval (low, high);
    None for the interval when either side has fewer than 2 samples."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    r = float(np.median(a) / np.median(b))
    if len(a) < 2 or len(b) < 2:
        return r, None
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    q = (1 - level) / 2
    lo, hi = np.quantile(ma / mb, [q, 1 - q])
    return r, (float(lo), float(hi))


def paired_ratio_ci(a, b, level=LEVEL):
    """The median of the ratios a[i] / b[i] of samples taken in pairs (b[i] just before a[i]: calls that
    alternated) and its order-statistics interval (median_ci: distribution-free), None with too few pairs. A
    host whose speed drifts between pairs moves both sides of each alike, so the drift leaves the ratios
    alone, where ratio_ci's independent resampling would count it twice."""
    if len(a) != len(b):
        raise ValueError(f"paired_ratio_ci: {len(a)} samples against {len(b)}: not pairs")
    ratios = [float(x) / float(y) for x, y in zip(a, b)]
    ci = median_ci(ratios, level)
    return median(ratios), ci and (ci[0], ci[1])


def verdict(interval, target, higher_is_better=True):
    """'met' when the whole interval is on the good side of the target,
    'missed' when it is wholly on the bad side, 'within noise' when it
    straddles it; None interval: no verdict can be drawn."""
    if interval is None:
        return "too few repetitions"
    lo, hi = interval
    good_lo, good_hi = (lo >= target, hi >= target) if higher_is_better else (hi <= target, lo <= target)
    if good_lo and good_hi:
        return "met"
    if not good_lo and not good_hi:
        return "missed"
    return "within noise"


def mann_whitney(a, b):
    """Two-sided p-value of the Mann-Whitney U test of a against b (SciPy;
    exact for small samples without ties)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(_scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def smallest_p(n_a, n_b):
    """The smallest two-sided p-value the exact U test can give with these sample sizes
    (every a below every b): 2 / C(n_a + n_b, n_a)."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def holm(pvalues):
    """Holm-adjusted p-values, in the order given (NaN stays NaN and does not count)."""
    idx = sorted((i for i, p in enumerate(pvalues) if not math.isnan(p)), key=lambda i: pvalues[i])
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def fmt_interval(interval, fmt="{:.3g}"):
    if interval is None:
        return "no interval (too few repetitions)"
    return "[" + fmt.format(interval[0]) + ", " + fmt.format(interval[1]) + "]"
