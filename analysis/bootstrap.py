"""The multi-bootstrap (Sellam et al. 2022, MultiBERTs) over pretraining seeds and test examples.

Table contract. One ``Measurement`` per task (and mode) holds the per-example sufficient statistics
of its metric (see ``analysis.stats``) for every cell of the design:

    stats    float (V, P, F, N, K)   V variants x P pretraining seeds x F fine-tuning seeds
                                     x N test examples x K statistics per example
    present  bool  (V, P, F)         False where a cell did not run (its stats are ignored)

Seed p means the same pretraining seed for every variant and example n the same test example, so
resampling is *paired*: one draw of seed indices (B, P) and, per task, one draw of example counts
(B, N) are shared by every variant. Fine-tuning seeds are averaged within a pretraining seed so each
pretraining seed counts once. A contrast is a weight vector over variants, shape (C, V): the
statistic is the contrast of the per-variant means over seeds, averaged over the given measurements.

Intervals. The plain percentile interval of the joint resampling ("raw") undercovers with few
pretraining seeds (it treats the P seeds' spread as known and divides it by P, not P-1) and
overcovers when seed x example noise dominates (resampling both crossed factors counts that term
three times; Owen 2007, the pigeonhole bootstrap). ``validate`` measured both. So each interval is
the percentile interval *rescaled about the estimate* to the method-of-moments variance of a crossed
design, with a Student-t quantile on Welch-Satterthwaite degrees of freedom:

    Vs = var over seed-only resamples,  Ve = over example-only,  Vj = over joint resamples
    V  = Vs P/(P-1) + Ve N/(N-1) - (Vj - Vs - Ve) PN/((P-1)(N-1))     (floored at the larger part)
    [lo, hi] = est -+ c (est - q_lo, q_hi - est),  c = sqrt(V / Vj) t_{df} / z

All three variances come from the same matrix products. The two-sided p-value of a difference is
2 P(T_df > |est| / sqrt(V)). Fewer than 3 pretraining seeds: ``reliable=False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

from analysis.stats import metric_from_stats

MIN_RELIABLE_SEEDS = 3


@dataclass(frozen=True)
class Measurement:
    """One task's per-example statistics over the design (shapes in the module docstring)."""

    metric: str
    stats: np.ndarray  # (V, P, F, N, K)
    present: np.ndarray  # (V, P, F) bool

    def __post_init__(self):
        if self.stats.ndim != 5 or self.present.shape != self.stats.shape[:3]:
            raise ValueError(f"stats {self.stats.shape} must be (V, P, F, N, K) and present "
                             f"{self.present.shape} must be its first three axes")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its multi-bootstrap interval and p-value (against 0)."""

    estimate: float
    lo: float
    hi: float
    p_value: float
    se: float  # sqrt of the corrected variance V
    df: float  # Welch-Satterthwaite degrees of freedom of the t quantile
    n_seeds: int  # pretraining seeds with every variant of the contrast present
    reliable: bool  # n_seeds >= MIN_RELIABLE_SEEDS
    raw_lo: float  # the plain percentile interval of the joint resampling, for reference
    raw_hi: float

    @property
    def excludes_zero(self) -> bool:
        return bool(self.lo > 0 or self.hi < 0)


def _seed_scores(m: Measurement, weights: np.ndarray) -> np.ndarray:
    """Scores (b, V, P) of each variant and pretraining seed under example weights (b, N)."""
    v, p, f, n, k = m.stats.shape
    flat = m.stats.transpose(3, 0, 1, 2, 4).reshape(n, v * p * f * k)
    summed = (weights @ flat).reshape(-1, v, p, f, k)
    score = metric_from_stats(m.metric, summed)  # (b, V, P, F)
    ok = np.broadcast_to(m.present, score.shape) & np.isfinite(score)
    count = ok.sum(axis=-1)
    total = np.where(ok, score, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _contrast_by_seed(ms: Sequence[Measurement], contrasts: np.ndarray, weights: list) -> np.ndarray:
    """Contrast values (b, C, P), averaged over measurements; NaN where a needed cell is missing."""
    out = None
    for m, w in zip(ms, weights):
        s = _seed_scores(m, w)  # (b, V, P)
        used = contrasts != 0  # a zero weight must not let a missing variant poison the contrast
        val = np.einsum("cv,bvp->bcp", contrasts, np.nan_to_num(s))
        missing = np.einsum("cv,bvp->bcp", used.astype(float), np.isnan(s).astype(float)) > 0
        val = np.where(missing, np.nan, val)
        out = val if out is None else out + val
    return out / len(ms)


def _seed_mean(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Mean over resampled seeds: values (b, C, P) or (C, P), idx (b, P) -> (b, C), ignoring NaN."""
    if values.ndim == 2:
        picked = values[:, idx].transpose(1, 0, 2)  # (b, C, P)
    else:
        picked = np.take_along_axis(values, idx[:, None, :], axis=2)
    ok = np.isfinite(picked)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, picked, 0.0).sum(-1) / ok.sum(-1)


def _interval(est, joint, seed_only, ex_only, n_seeds, n_examples, level) -> Interval:
    joint, seed_only, ex_only = (x[np.isfinite(x)] for x in (joint, seed_only, ex_only))
    a = (1 - level) / 2
    if not np.isfinite(est) or joint.size < 2:
        nan = float("nan")
        return Interval(float(est), nan, nan, nan, nan, nan, n_seeds, False, nan, nan)
    q_lo, q_hi = np.quantile(joint, [a, 1 - a])
    vj, vs, ve = np.var(joint), np.var(seed_only), np.var(ex_only)
    ps = n_seeds / (n_seeds - 1) if n_seeds > 1 else 1.0
    ns = n_examples / (n_examples - 1) if n_examples > 1 else 1.0
    inter = max(vj - vs - ve, 0.0) * ps * ns
    parts = (vs * ps, ve * ns)
    var = max(parts[0] + parts[1] - inter, *parts)
    dfs = (max(n_seeds - 1, 1), max(n_examples - 1, 1), max((n_seeds - 1) * (n_examples - 1), 1))
    denom = parts[0] ** 2 / dfs[0] + parts[1] ** 2 / dfs[1] + inter ** 2 / dfs[2]
    df = float(min(var ** 2 / denom, 1e6)) if denom > 0 else 1e6
    if var <= 0 or vj <= 0:
        p = 1.0 if est == 0 else 0.0
        return Interval(float(est), float(est), float(est), p, 0.0, df, n_seeds,
                        n_seeds >= MIN_RELIABLE_SEEDS, float(q_lo), float(q_hi))
    c = np.sqrt(var / vj) * sps.t.ppf(1 - a, df) / sps.norm.ppf(1 - a)
    se = float(np.sqrt(var))
    p = float(2 * sps.t.sf(abs(est) / se, df))
    return Interval(float(est), float(est - c * (est - q_lo)), float(est + c * (q_hi - est)), p, se,
                    df, n_seeds, n_seeds >= MIN_RELIABLE_SEEDS, float(q_lo), float(q_hi))


def multibootstrap(measurements: Sequence[Measurement], contrasts: np.ndarray,
                   rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95,
                   chunk: int = 250) -> list[Interval]:
    """One ``Interval`` per row of ``contrasts`` (C, V) for the mean over ``measurements``.

    Every measurement must share the variant axis V and the pretraining-seed axis P (seed p is the
    same seed in each). Resamples are drawn from ``rng`` in chunks of ``chunk`` to bound memory.
    """
    if not measurements:
        raise ValueError("multibootstrap needs at least one measurement")
    if not 0 < level < 1:
        raise ValueError(f"level={level} must be in (0, 1)")
    if n_boot < 2:
        raise ValueError(f"n_boot={n_boot} must be >= 2")
    contrasts = np.atleast_2d(np.asarray(contrasts, dtype=np.float64))
    v, p = measurements[0].stats.shape[:2]
    for m in measurements:
        if m.stats.shape[:2] != (v, p):
            raise ValueError(f"measurements disagree on (variants, seeds): {m.stats.shape[:2]} vs {(v, p)}")
    if contrasts.shape[1] != v:
        raise ValueError(f"contrasts have {contrasts.shape[1]} columns for {v} variants")
    sizes = [m.stats.shape[3] for m in measurements]
    base = _contrast_by_seed(measurements, contrasts, [np.ones((1, n)) for n in sizes])[0]  # (C, P)
    seed_idx = rng.integers(0, p, size=(n_boot, p))
    joint, ex_only = [], []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        weights = [rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64) for n in sizes]
        by_seed = _contrast_by_seed(measurements, contrasts, weights)  # (b, C, P)
        joint.append(_seed_mean(by_seed, seed_idx[start:start + b]))
        ex_only.append(_seed_mean(by_seed, np.broadcast_to(np.arange(p), (b, p))))
    joint, ex_only = np.concatenate(joint), np.concatenate(ex_only)
    seed_only = _seed_mean(base, seed_idx)
    estimate = _seed_mean(base, np.arange(p)[None, :])[0]
    n_seeds = np.isfinite(base).sum(axis=1)
    return [_interval(estimate[c], joint[:, c], seed_only[:, c], ex_only[:, c], int(n_seeds[c]),
                      min(sizes), level) for c in range(contrasts.shape[0])]
