"""Multiple comparisons (Holm within each family) and the power of the design at the level the calls use.

The family rule (``family_calls``, the one function every verdict goes through: contributions and
so the headline and tables, and the domain-adaptation report). The cells the report can call are each
(contrast, task row) of the contributions, the average rows included, and each task row's gain in the
domain report. They form two families, declared before any run (``analysis.contrasts.PRIMARY``): the
*primary* question the tool exists for (MLM's effect over none, ``mlm_only - none``, and NSP's loss
effect, ``full - mlm_pairs``) on every task row, and the *secondary* family of every other contrast
cell. Holm's step-down adjustment within each family holds that family's error rate at alpha under any
dependence between its cells (``analysis.validate`` measures both on null designs). Why not Holm per
task row: the headline quotes the largest resolved contrasts across all tasks, and with R rows each
held at alpha the chance of some false call grows to about 1 - (1 - alpha)^R; a per-row family only
holds if one reads one row. A cell is *called* (positive / negative) only when its interval is
reliable (3+ pretraining seeds), excludes 0 and its family-adjusted p is below alpha (``called``).

Power at the Holm level. Holm's first step compares the smallest p with alpha/m (m = the family
size), so a single true difference is detected by the calls only at that level: the minimal
detectable effect (MDE) here is the difference detected with power 0.8 by the two-sided test at
alpha/m (in se units at large df z_{1-alpha/(2m)} + z_{0.8}: 2.80 for m = 1, 3.68 for m = 11).
Later Holm steps are easier, so this is conservative for all but the first call.

Power uses the variance split that ``analysis.bootstrap`` estimates for each interval: se^2 =
seed_var + example_var, where seed_var scales as 1/P with the number of pretraining seeds P and
example_var (test examples) does not. With P' seeds, se'^2 = seed_var P/P' + example_var on the
degrees of freedom ``analysis.bootstrap`` would give (Welch-Satterthwaite, the seed part on P'-1 df
at its upper confidence bound, the example part taken as known).
Power of the two-sided t test at alpha for a true difference d is exact under that model (noncentral
t). ``analysis.validate --power`` checks the predicted power against the detection rate of simulated
designs with a known effect.

Seeds needed (post hoc). The pretraining seeds that would resolve the *observed* difference use the
observed estimate as if it were the truth, and a seed variance estimated on P-1 degrees of freedom
(2 with 3 seeds): its 90% chi-square interval runs from 0.33x to 19.5x the estimate. So
``seeds_needed`` comes with the range its seed variance's interval gives (``SEED_VAR_LEVEL``), and
the prospective figure ``mde_by_seeds`` (what a design with P' seeds detects with power 0.8 at the
Holm level, whatever was observed) is what to plan with.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats as sps

from analysis.bootstrap import Interval, seed_df_factor

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 10_000
SEED_VAR_LEVEL = 0.9  # two-sided chi-square interval of the seed variance behind the seeds_needed range
PROSPECTIVE_SEEDS = (3, 5, 10, 20)  # designs the prospective MDE is given for


# Equivalence ("a tie"): a margin fixed before any data, in the metric's units. Two one-sided tests (TOST,
# Schuirmann 1987) at alpha: the difference is shown to lie within +-margin. A cell that is neither called nor shown
# equivalent is "not resolved", never a tie. A rule file may restate it, not change it (analysis.rules).
EQUIVALENCE_MARGIN = 0.02


def tost_p(iv: Interval, margin: float = EQUIVALENCE_MARGIN) -> float:
    """The TOST p-value that the true difference lies within +-``margin``: the larger of the two one-sided t
    p-values on the interval's se and df. NaN when the interval has no se."""
    if not (np.isfinite(iv.estimate) and np.isfinite(iv.se) and np.isfinite(iv.df)):
        return float("nan")
    if iv.se <= 0:
        return 0.0 if abs(iv.estimate) < margin else 1.0
    lower = sps.t.sf((iv.estimate + margin) / iv.se, iv.df)  # H0: d <= -margin
    upper = sps.t.cdf((iv.estimate - margin) / iv.se, iv.df)  # H0: d >= +margin
    return float(max(lower, upper))


SENSITIVITY_MARGINS = (0.01, 0.02, 0.03)  # the report's table of ties at margins around the fixed one


def tie_sensitivity(intervals: Sequence[Interval], margins: Sequence[float] = SENSITIVITY_MARGINS,
                    alpha: float = ALPHA) -> np.ndarray:
    """Per interval (rows) and margin (columns): shown a tie at that margin, TOST Holm-adjusted over the
    intervals given (one family). How much a "tie" depends on the margin; only the fixed one is the claim."""
    out = np.zeros((len(intervals), len(margins)), dtype=bool)
    for j, m in enumerate(margins):
        adjusted = holm([tost_p(iv, m) for iv in intervals])
        out[:, j] = [equivalent(iv, q, alpha) for iv, q in zip(intervals, adjusted)]
    return out


def equivalent(iv: Interval, p_adjusted: float, alpha: float = ALPHA) -> bool:
    """A tie within the margin: reliable interval, family-adjusted TOST p below alpha."""
    return bool(iv.reliable and np.isfinite(p_adjusted) and p_adjusted < alpha)


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


def called(iv: Interval, p_adjusted: float, alpha: float = ALPHA) -> bool:
    """A cell is a finding (positive / negative): reliable interval excluding 0, family-adjusted p < alpha."""
    return bool(iv.reliable and iv.excludes_zero and np.isfinite(p_adjusted) and p_adjusted < alpha)


def family_calls(intervals: Sequence[Interval], alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray, int]:
    """The family rule: Holm over every given cell -> (adjusted p, called, family size m).

    Pass *every* cell the report can call (all contrasts of all task rows, or all gains of the domain
    report): the module docstring says why the family is that wide."""
    adjusted = holm([iv.p_value for iv in intervals])
    calls = np.array([called(iv, float(p), alpha) for iv, p in zip(intervals, adjusted)], dtype=bool)
    return adjusted, calls, int(np.isfinite(adjusted).sum())


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


def mde(se, df, alpha: float = ALPHA, target: float = POWER, m: int = 1):
    """The minimal detectable effect: the true difference detected with probability ``target`` by the
    two-sided test at ``alpha / m`` (Holm's first step in a family of ``m``)."""
    alpha = alpha / max(int(m), 1)
    se, df = np.broadcast_arrays(np.asarray(se, dtype=np.float64), np.asarray(df, dtype=np.float64))
    # in units of se; wide enough for Holm's first step in a large family at 2 df (m = 100: 57 se)
    lo, hi = np.zeros(se.shape), np.full(se.shape, 1e4)
    for _ in range(70):
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
    """What the design that ran can detect at the Holm level, and what would resolve the observed difference."""

    mde: float  # first Holm step of a family of m (two-sided at alpha/m), power 0.8
    seeds_needed: int | None  # pretraining seeds for power 0.8 at the observed difference (post hoc)
    verdict: str  # one line: '', '~N pretraining seeds (range ...)', 'more test examples needed', ...
    m: int = 1  # the family size the MDE and seeds are at
    seeds_range: tuple[int | None, int | None] = (None, None)  # from the seed variance's chi-square
    #   interval (SEED_VAR_LEVEL); hi None: more than MAX_SEEDS
    mde_by_seeds: tuple[tuple[int, float], ...] = ()  # prospective: (P', MDE at the Holm level with P' seeds)


def seed_var_interval(seed_var: float, n_seeds: int, level: float = SEED_VAR_LEVEL) -> tuple[float, float]:
    """Chi-square interval of a variance estimated on ``n_seeds - 1`` degrees of freedom."""
    dfs = max(int(n_seeds) - 1, 1)
    tail = (1 - level) / 2
    return (seed_var * dfs / float(sps.chi2.ppf(1 - tail, dfs)), seed_var * dfs / float(sps.chi2.ppf(tail, dfs)))


def seeds_for(effect: float, seed_var: float, example_var: float, n_seeds: int, alpha: float = ALPHA,
              target: float = POWER) -> int | None:
    """The fewest pretraining seeds whose design detects ``effect`` with power ``target`` at ``alpha``
    (None: more than MAX_SEEDS, or example noise alone keeps the power below ``target``)."""
    if power(effect, np.sqrt(example_var), 1e6, alpha) < target:
        return None
    grid = np.unique(np.geomspace(2, MAX_SEEDS, 400).astype(int))
    se, df = design_se(seed_var, example_var, n_seeds, grid)
    ok = np.nonzero(power(effect, se, df, alpha) >= target)[0]
    if not ok.size:
        return None
    lo = int(grid[max(ok[0] - 1, 0)])
    fine = np.arange(lo, int(grid[ok[0]]) + 1)
    se, df = design_se(seed_var, example_var, n_seeds, fine)
    return int(fine[np.nonzero(power(effect, se, df, alpha) >= target)[0][0]])


def _range_text(lo: int | None, hi: int | None) -> str:
    return f"{lo if lo is not None else '?'}-{hi if hi is not None else f'>{MAX_SEEDS}'}"


def contrast_power(iv: Interval, m: int = 1, alpha: float = ALPHA, target: float = POWER) -> Power:
    """MDE at the Holm level (family of ``m``) of the design behind ``iv``, the prospective MDE with
    ``PROSPECTIVE_SEEDS`` seeds, and the pretraining seeds that would resolve its estimate (with range)."""
    m = max(int(m), 1)
    level = alpha / m  # what Holm's first step asks of one p-value
    if not (np.isfinite(iv.se) and np.isfinite(iv.seed_var) and iv.n_seeds >= 2):
        return Power(float("nan"), None, "no power estimate: too few seeds or no interval", m)
    now = float(mde(iv.se, iv.df, alpha, target, m))
    se_p, df_p = design_se(iv.seed_var, iv.example_var, iv.n_seeds, np.array(PROSPECTIVE_SEEDS))
    ahead = tuple((int(n), float(x)) for n, x in zip(PROSPECTIVE_SEEDS, mde(se_p, df_p, alpha, target, m)))
    effect = abs(iv.estimate)
    if effect == 0:
        return Power(now, None, "no difference observed to resolve", m, (None, None), ahead)
    se_inf = np.sqrt(iv.example_var)
    if power(effect, se_inf, 1e6, level) < target:
        return Power(now, None, f"more test examples needed: even unlimited pretraining seeds leave an MDE of "
                                f"{float(mde(se_inf, 1e6, alpha, target, m)):.3g} > |{iv.estimate:.3g}| (m={m})",
                     m, (None, None), ahead)
    n = seeds_for(effect, iv.seed_var, iv.example_var, iv.n_seeds, level, target)
    v_lo, v_hi = seed_var_interval(iv.seed_var, iv.n_seeds)
    rng = (seeds_for(effect, v_lo, iv.example_var, iv.n_seeds, level, target),
           seeds_for(effect, v_hi, iv.example_var, iv.n_seeds, level, target))
    span = (f"range {_range_text(*rng)}: the seed variance has {iv.n_seeds - 1} df, "
            f"{SEED_VAR_LEVEL:.0%} interval")
    if n is None:
        return Power(now, None, f"more than {MAX_SEEDS} pretraining seeds needed ({span})", m, rng, ahead)
    return Power(now, n, f"~{n} pretraining seeds ({span}) for power {target:.0%} at {iv.estimate:+.3g}, "
                         f"Holm level m={m}", m, rng, ahead)
