"""The multi-bootstrap (Sellam et al. 2022, MultiBERTs) over pretraining seeds and test examples.

Table contract. One ``Measurement`` per task (and mode) holds the per-example sufficient statistics
of its metric (see ``analysis.stats``) for every cell of the design:

    stats    float (V, P, F, N, K)   V variants x P pretraining seeds x F fine-tuning seeds
                                     x N test examples x K statistics per example
    present  bool  (V, P, F)         False where a cell did not run (its stats are ignored)

Seed p means the same pretraining seed for every variant and example n the same test example, so
resampling is *paired*: one draw of seed indices (B, P) and, per task, one draw of example counts
(B, N) are shared by every variant. Fine-tuning seeds are averaged within a pretraining seed so each
pretraining seed counts once.

Fine-tuning draws: nested, not crossed. A fine-tuning seed f fixes a draw (training subset, head
init, data order). ``trainables.finetune`` derives it from (pretraining seed p, f)
(``heads.finetune_draw``): every variant of seed p shares it (the comparison stays paired within p)
and each p draws anew. Fine-tuning draws are then nested in pretraining seeds, and resampling seeds
p with their draws covers the variant x draw interaction; this bootstrap needs nothing more. The
crossed alternative (draw f the same for every run) would need a two-way resampling of
seeds and draws, and it is worse for the estimate too: its variant x draw interaction averages over
F draws only (variance sd^2/F), the nested one over P x F (sd^2/(PF)); with F = 1 (the cpu-small and
gpu-quick designs) a crossed draw cannot be resampled at all, and its interval would only cover the
truth *conditional on that one draw*. ``analysis.validate --draws crossed`` shows the undercoverage
this bootstrap then has; ``--draws nested`` (the default) the coverage of the design that runs. So the
interval covers the expectation over pretraining seeds, fine-tuning draws (nested, any F >= 1;
their variance is part of the seed part) and test examples from the same distribution. A contrast is a weight vector over variants, shape (C, V): the
statistic is the contrast of the per-variant means over seeds, averaged over the given measurements.

Intervals. The plain percentile interval of the joint resampling ("raw") undercovers with few
pretraining seeds (it treats the P seeds' spread as known and divides it by P, not P-1) and
overcovers when seed x example noise dominates (resampling both crossed factors counts that term
three times; Owen 2007, the pigeonhole bootstrap). ``analysis.validate`` shows both. So each interval is
the percentile interval *rescaled about the estimate* to the method-of-moments variance of a crossed
design, with a Student-t quantile on Welch-Satterthwaite degrees of freedom:

    Vs = var over seed-only resamples,  Ve = over example-only,  Vj = over joint resamples
    V  = Vs P/(P-1) + Ve N/(N-1) - (Vj - Vs - Ve) PN/((P-1)(N-1))     (floored at the larger part)
    [lo, hi] = est -+ c (est - q_lo, q_hi - est),  c = sqrt(V / Vj) t_{df} / z

Degrees of freedom. The seed part is estimated on P-1 df (2 with 3 seeds) and is often small by
chance; plain Welch-Satterthwaite then returns a large df, and the p-value's tail is far too light:
on null designs at 3 seeds tiny p-values come far more often than their level says, and Holm's
family-wise error runs far above alpha (``analysis.validate`` shows it). So the df is computed with the
seed part at its one-sided 90% upper confidence bound, Vs (P-1)/chi2_{P-1}(0.1), the variance V itself
unchanged: the tail and the family-wise error come back to about their levels, at a coverage near 95%
(docs/statistics.md gives validate's figures). The inflation vanishes as P grows.

All three variances come from the same matrix products. The two-sided p-value of a difference is
2 P(T_df > |est| / sqrt(V)). Fewer than 3 pretraining seeds: ``reliable=False``. Each interval keeps
its split se^2 = seed_var + example_var (the part that scales as 1/P and the part that does not), for
``analysis.inference``'s power statements.

Averages over tasks (weights w_k adding up to 1; seeds shared, examples independent per task). The
example and interaction parts are summed per task, each with its own N_k (not the smallest N). The
seed part is the seed-only variance of the weighted mean, floored at sum_k w_k^2 Vs_k: with 3 seeds
a chance negative correlation between tasks otherwise cancels the seeds' spread in the mean, the
seed part looks negligible, Welch-Satterthwaite then gives large df, and the average can come out far
narrower than every task's own interval and be called on noise. The floor assumes tasks' seed effects do
not cancel (non-negative covariance: a better encoder helps every task); ``analysis.validate`` checks the
average's coverage. Without the floor the average's overall coverage looks right, yet the averages that
come out far narrower than their tasks cover far less than their level; with the full floor none come
out that narrow, and the average row covers a little more than its level (docs/statistics.md). It errs
on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats as sps

from analysis.stats import metric_from_stats

MIN_RELIABLE_SEEDS = 3
AVERAGE_SEED_FLOOR = 1.0  # an average's seed part >= this x sum_k w_k^2 Vs_k (trade-off: module docstring)
DF_SEED_QUANTILE = 0.1  # df from the seed part's one-sided 90% upper confidence bound (module docstring)


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
    seed_var: float = float("nan")  # the part of se^2 that scales as 1/P (pretraining seeds)
    example_var: float = float("nan")  # the part that does not (test examples)

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


def _by_seed(m: Measurement, contrasts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Contrast values (b, C, P) of one measurement; NaN where a needed cell is missing."""
    s = _seed_scores(m, weights)  # (b, V, P)
    used = contrasts != 0  # a zero weight must not let a missing variant poison the contrast
    val = np.einsum("cv,bvp->bcp", contrasts, np.nan_to_num(s))
    missing = np.einsum("cv,bvp->bcp", used.astype(float), np.isnan(s).astype(float)) > 0
    return np.where(missing, np.nan, val)


def _seed_mean(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Mean over resampled seeds: values (b, C, P) or (C, P), idx (b, P) -> (b, C), ignoring NaN."""
    if values.ndim == 2:
        picked = values[:, idx].transpose(1, 0, 2)  # (b, C, P)
    else:
        picked = np.take_along_axis(values, idx[:, None, :], axis=2)
    ok = np.isfinite(picked)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, picked, 0.0).sum(-1) / ok.sum(-1)


def _var(x: np.ndarray) -> np.ndarray:
    """Variance over resamples (axis 0) ignoring NaN resamples; NaN where fewer than 2 are finite."""
    ok = np.isfinite(x)
    n = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, x, 0.0).sum(axis=0) / n
        out = np.where(ok, (x - mean) ** 2, 0.0).sum(axis=0) / n
    return np.where(n >= 2, out, np.nan)


class _Parts(NamedTuple):
    """Method-of-moments parts of the variance of each contrast (C,), corrected as in the docstring."""

    seed: np.ndarray  # scales as 1/P
    example: np.ndarray  # does not
    inter: np.ndarray  # seed x example, subtracted once
    denom: np.ndarray  # Welch-Satterthwaite denominator of the example and interaction parts


def _parts(seed_all, seed_k, ex_k, joint_k, w, sizes, n_seeds) -> _Parts:
    """Combine per-task resample variances. The seed part of a weighted mean over tasks is floored at
    sum_k w_k^2 Vs_k: tasks' seed effects are taken never to cancel (non-negative covariance), so a chance
    negative correlation over 3 seeds cannot shrink it."""
    ps = np.where(n_seeds > 1, n_seeds / np.maximum(n_seeds - 1, 1), 1.0)
    floor = AVERAGE_SEED_FLOOR * sum(wk ** 2 * np.nan_to_num(_var(s)) for wk, s in zip(w, seed_k))
    seed = ps * np.fmax(_var(seed_all), floor)
    example, inter, denom_e = np.zeros_like(seed), np.zeros_like(seed), np.zeros_like(seed)
    dfs = np.maximum(n_seeds - 1, 1)
    for wk, s, e, j, n in zip(w, seed_k, ex_k, joint_k, sizes):
        ns, dfe = (n / (n - 1), n - 1) if n > 1 else (1.0, 1)
        vs, ve, vj = (np.nan_to_num(_var(x)) for x in (s, e, j))
        part_e = wk ** 2 * ns * ve
        part_i = wk ** 2 * ps * ns * np.maximum(vj - vs - ve, 0.0)
        example, inter = example + part_e, inter + part_i
        denom_e = denom_e + part_e ** 2 / dfe + part_i ** 2 / (dfs * dfe)
    return _Parts(seed, example, inter, denom_e)


def seed_df_factor(n_seeds):
    """(P-1) / chi2_{P-1}(DF_SEED_QUANTILE): the seed part's upper confidence bound over its estimate."""
    dfs = np.maximum(np.asarray(n_seeds, dtype=np.float64) - 1, 1)
    return dfs / sps.chi2.ppf(DF_SEED_QUANTILE, dfs) if DF_SEED_QUANTILE > 0 else np.ones_like(dfs)


def _df(vs: float, var: float, denom_rest: float, n_seeds: int) -> float:
    """Welch-Satterthwaite df with the seed part at its upper confidence bound (only for the df)."""
    up = vs * float(seed_df_factor(n_seeds))
    var_up = var + up - vs
    denom = up ** 2 / max(n_seeds - 1, 1) + denom_rest
    return float(min(var_up ** 2 / denom, 1e6)) if denom > 0 else 1e6


def _interval(est, joint, parts: _Parts, c: int, n_seeds: int, level: float) -> Interval:
    joint = joint[np.isfinite(joint)]
    a = (1 - level) / 2
    nan = float("nan")
    if not np.isfinite(est) or joint.size < 2 or not np.isfinite(parts.seed[c]):
        return Interval(float(est), nan, nan, nan, nan, nan, n_seeds, False, nan, nan)
    q_lo, q_hi = np.quantile(joint, [a, 1 - a])
    vs, ve, vi = float(parts.seed[c]), float(parts.example[c]), float(parts.inter[c])
    var = max(vs + ve - vi, vs, ve)
    df = _df(vs, var, float(parts.denom[c]), n_seeds)
    reliable = n_seeds >= MIN_RELIABLE_SEEDS
    vj = float(np.var(joint))
    if var <= 0 or vj <= 0:
        return Interval(float(est), float(est), float(est), 1.0 if est == 0 else 0.0, 0.0, df, n_seeds, reliable,
                        float(q_lo), float(q_hi), 0.0, 0.0)
    scale = np.sqrt(var / vj) * sps.t.ppf(1 - a, df) / sps.norm.ppf(1 - a)
    se = float(np.sqrt(var))
    p = float(2 * sps.t.sf(abs(est) / se, df))
    return Interval(float(est), float(est - scale * (est - q_lo)), float(est + scale * (q_hi - est)), p, se, df,
                    n_seeds, reliable, float(q_lo), float(q_hi), vs, max(var - vs, 0.0))


def _check(measurements, contrasts, level, n_boot, task_weights) -> tuple[np.ndarray, np.ndarray]:
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
    w = np.full(len(measurements), 1.0 / len(measurements)) if task_weights is None else np.asarray(
        task_weights, dtype=np.float64)
    if w.shape != (len(measurements),) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"task_weights={[round(float(x), 4) for x in w]} must be {len(measurements)} non-negative "
                         "numbers adding up to 1")
    return contrasts, w


def multibootstrap(measurements: Sequence[Measurement], contrasts: np.ndarray,
                   rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95,
                   chunk: int = 250, task_weights: Sequence[float] | None = None) -> list[Interval]:
    """One ``Interval`` per row of ``contrasts`` (C, V) for the weighted mean over ``measurements``.

    Every measurement must share the variant axis V and the pretraining-seed axis P (seed p is the
    same seed in each); ``task_weights`` (default equal) add up to 1. Resamples are drawn from ``rng``
    in chunks of ``chunk`` to bound memory.
    """
    contrasts, w = _check(measurements, contrasts, level, n_boot, task_weights)
    p = measurements[0].stats.shape[1]
    sizes = [m.stats.shape[3] for m in measurements]
    base_k = [_by_seed(m, contrasts, np.ones((1, n)))[0] for m, n in zip(measurements, sizes)]  # (C, P) each
    base = sum(wk * b for wk, b in zip(w, base_k))
    seed_idx = rng.integers(0, p, size=(n_boot, p))
    every = np.arange(p)
    joint, joint_k, ex_k = [], [[] for _ in sizes], [[] for _ in sizes]
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        vals = [_by_seed(m, contrasts, rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64))
                for m, n in zip(measurements, sizes)]  # (b, C, P) each
        idx = seed_idx[start:start + b]
        joint.append(_seed_mean(sum(wk * x for wk, x in zip(w, vals)), idx))
        for k, x in enumerate(vals):
            joint_k[k].append(_seed_mean(x, idx))
            ex_k[k].append(_seed_mean(x, np.broadcast_to(every, (b, p))))
    joint = np.concatenate(joint)
    n_seeds = np.isfinite(base).sum(axis=1)
    parts = _parts(_seed_mean(base, seed_idx), [_seed_mean(b, seed_idx) for b in base_k],
                   [np.concatenate(x) for x in ex_k], [np.concatenate(x) for x in joint_k], w, sizes, n_seeds)
    estimate = _seed_mean(base, every[None, :])[0]
    return [_interval(estimate[c], joint[:, c], parts, c, int(n_seeds[c]), level) for c in range(contrasts.shape[0])]
