"""Multiple comparisons (Holm) and the power of the design that ran (MDE, pretraining seeds needed).

A family of tests is every contrast of one task and mode (the report's choice); Holm's step-down
adjustment holds the family-wise error rate at alpha under any dependence between the contrasts.

Power uses the variance split that ``analysis.bootstrap`` estimates for each interval: se^2 =
seed_var + example_var, where seed_var scales as 1/P with the number of pretraining seeds P and
example_var (test examples) does not. With P' seeds, se'^2 = seed_var P/P' + example_var on the
degrees of freedom ``analysis.bootstrap`` would give (Welch-Satterthwaite, the seed part on P'-1 df
at its upper confidence bound, the example part taken as known).
Power of the two-sided t test at alpha for a true difference d is exact under that model (noncentral
t); the minimal detectable effect (MDE) is the d with power 0.8. ``analysis.validate --power`` checks
the predicted power against the detection rate of simulated designs with a known effect.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats as sps

from analysis.bootstrap import Interval, seed_df_factor

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 10_000


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values in the input order; NaN stays NaN and does not count in the family."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    m = int(ok.sum())
    if m:
        q = p[ok]
        order = np.argsort(q, kind="stable")
        adjusted = np.minimum(np.maximum.accumulate((m - np.arange(m)) * q[order]), 1.0)
        res = np.empty(m)
        res[order] = adjusted
        out[ok] = res
    return out


def power(effect, se, df, alpha: float = ALPHA):
    """Probability that the two-sided t test at ``alpha`` rejects when the true difference is ``effect``."""
    effect, se, df = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (effect, se, df)))
    with np.errstate(invalid="ignore", divide="ignore"):
        nc = np.abs(effect) / se
    crit = sps.t.ppf(1 - alpha / 2, df)
    with np.errstate(invalid="ignore"):  # scipy's nct gives NaN far in its tails
        upper = sps.nct.sf(crit, df, nc)
        lower = np.nan_to_num(sps.nct.cdf(-crit, df, nc), nan=0.0)
    out = np.where(np.isnan(upper), (nc > crit).astype(float), upper) + lower
    return np.where(se > 0, out, np.where(effect != 0, 1.0, alpha))


def mde(se, df, alpha: float = ALPHA, target: float = POWER):
    """The minimal detectable effect: the true difference detected with probability ``target``."""
    se, df = np.broadcast_arrays(np.asarray(se, dtype=np.float64), np.asarray(df, dtype=np.float64))
    lo, hi = np.zeros(se.shape), np.full(se.shape, 60.0)  # in units of se
    for _ in range(50):
        mid = (lo + hi) / 2
        short = power(mid, 1.0, df, alpha) < target
        lo, hi = np.where(short, mid, lo), np.where(short, hi, mid)
    return hi * se


def design_se(seed_var: float, example_var: float, seeds_now: int, seeds_new) -> tuple[np.ndarray, np.ndarray]:
    """(se, df) of the same contrast with ``seeds_new`` pretraining seeds instead of ``seeds_now``."""
    seeds_new = np.asarray(seeds_new, dtype=np.float64)
    seed_part = seed_var * seeds_now / seeds_new
    var = seed_part + example_var
    up = seed_part * seed_df_factor(seeds_new)  # the df rule of analysis.bootstrap
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(up > 0, (var + up - seed_part) ** 2 / (up ** 2 / np.maximum(seeds_new - 1, 1)), 1e6)
    return np.sqrt(var), np.minimum(df, 1e6)


class Power(NamedTuple):
    """What the design that ran can detect, and what would resolve the observed difference."""

    mde: float  # at this design (alpha 0.05 two-sided, power 0.8)
    seeds_needed: int | None  # pretraining seeds for power 0.8 at the observed difference
    verdict: str  # one line: '', 'needs ~N pretraining seeds', 'needs more test examples', ...


def contrast_power(iv: Interval, alpha: float = ALPHA, target: float = POWER) -> Power:
    """MDE of the design behind ``iv`` and the pretraining seeds that would resolve its estimate."""
    if not (np.isfinite(iv.se) and np.isfinite(iv.seed_var) and iv.n_seeds >= 2):
        return Power(float("nan"), None, "no power estimate: too few seeds or no interval")
    now = float(mde(iv.se, iv.df, alpha, target))
    effect = abs(iv.estimate)
    if effect == 0:
        return Power(now, None, "no difference observed to resolve")
    se_inf = np.sqrt(iv.example_var)
    if power(effect, se_inf, 1e6, alpha) < target:
        return Power(now, None, f"more test examples needed: even unlimited pretraining seeds leave an MDE of "
                                f"{float(mde(se_inf, 1e6, alpha, target)):.3g} > |{iv.estimate:.3g}|")
    grid = np.unique(np.geomspace(2, MAX_SEEDS, 400).astype(int))
    se, df = design_se(iv.seed_var, iv.example_var, iv.n_seeds, grid)
    ok = np.nonzero(power(effect, se, df, alpha) >= target)[0]
    if not ok.size:
        return Power(now, None, f"more than {MAX_SEEDS} pretraining seeds needed")
    lo = int(grid[max(ok[0] - 1, 0)])
    fine = np.arange(lo, int(grid[ok[0]]) + 1)
    se, df = design_se(iv.seed_var, iv.example_var, iv.n_seeds, fine)
    n = int(fine[np.nonzero(power(effect, se, df, alpha) >= target)[0][0]])
    return Power(now, n, f"~{n} pretraining seeds for power {target:.0%} at {iv.estimate:+.3g}")
