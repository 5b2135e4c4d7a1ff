"""Per-example sufficient statistics for every downstream metric, so a bootstrap is a weighted sum.

A metric over a resample of test examples equals a function of the *sum* of per-example statistics
over that resample, for every metric in ``trainables.metrics``:

    accuracy, squad_em, squad_f1   [score, 1]            -> s0 / s1          (mean over examples)
    token_accuracy                 [correct tags, tags]  -> s0 / s1          (ratio of sums)
    f1 (binary, positive label)    [tp, fp, fn]          -> 2tp / (2tp+fp+fn)
    entity_f1 (seqeval, micro)     [tp, fp, fn] per sentence, same formula
    macro_f1                       [tp, fp, fn] per class -> mean F1 over classes seen in the resample
    mcc                            one-hot confusion cell (C*C) -> Gorodkin's R_K
    value                          [value, 1]  (a stored eval value when predictions are missing)

``example_stats`` builds the (N, K) array once; ``metric_from_stats`` maps summed statistics of shape
(..., K) to metric values (...), vectorised, so B resamples cost one matrix product. Both agree with
``trainables.metrics.compute_metric`` on any resample (tested).
"""

from __future__ import annotations

import json
from typing import Callable, NamedTuple

import numpy as np

from trainables.metrics import METRICS, choose_positive, compute_metric


class ExampleStats(NamedTuple):
    """Per-example statistics of one metric: ``values`` (N, K); ``labels`` the class names (or ())."""

    values: np.ndarray
    labels: tuple[str, ...]


def _f1_from(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    denom = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def _ratio(s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s[..., 1] > 0, s[..., 0] / np.where(s[..., 1] > 0, s[..., 1], 1), np.nan)


def _binary_f1(s: np.ndarray) -> np.ndarray:
    return _f1_from(s[..., 0], s[..., 1], s[..., 2])


def _macro_f1(s: np.ndarray) -> np.ndarray:
    c = s.reshape(*s.shape[:-1], -1, 3)  # (..., C, 3) tp fp fn per class
    tp, fp, fn = c[..., 0], c[..., 1], c[..., 2]
    seen = (tp + fp + fn) > 0  # classes absent from a resample do not count, as in compute_metric
    n_seen = seen.sum(axis=-1)
    total = np.where(seen, _f1_from(tp, fp, fn), 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_seen > 0, total / np.maximum(n_seen, 1), np.nan)


def _mcc(s: np.ndarray) -> np.ndarray:
    k = int(round(np.sqrt(s.shape[-1])))
    c = s.reshape(*s.shape[:-1], k, k)  # (..., gold, pred)
    t_k, p_k = c.sum(axis=-1), c.sum(axis=-2)
    n = c.sum(axis=(-2, -1))
    correct = np.trace(c, axis1=-2, axis2=-1)
    cov_yp = correct * n - (t_k * p_k).sum(axis=-1)
    cov_pp = n * n - (p_k * p_k).sum(axis=-1)
    cov_yy = n * n - (t_k * t_k).sum(axis=-1)
    denom = np.sqrt(cov_pp * cov_yy)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, cov_yp / np.where(denom > 0, denom, 1), 0.0)


STAT_METRICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "accuracy": _ratio,
    "squad_em": _ratio,
    "squad_f1": _ratio,
    "token_accuracy": _ratio,
    "value": _ratio,
    "f1": _binary_f1,
    "entity_f1": _binary_f1,
    "macro_f1": _macro_f1,
    "mcc": _mcc,
}


def metric_from_stats(metric: str, summed: np.ndarray) -> np.ndarray:
    """Metric values (...) from statistics summed over examples, shape (..., K)."""
    if metric not in STAT_METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(STAT_METRICS)}")
    return STAT_METRICS[metric](np.asarray(summed, dtype=np.float64))


def _class_stats(preds: np.ndarray, golds: np.ndarray, labels: list[str], metric: str) -> np.ndarray:
    index = {lab: i for i, lab in enumerate(labels)}
    p = np.array([index[x] for x in preds])
    g = np.array([index[x] for x in golds])
    k, n = len(labels), len(preds)
    if metric == "mcc":
        out = np.zeros((n, k * k))
        out[np.arange(n), g * k + p] = 1.0
        return out
    out = np.zeros((n, k, 3))
    rows = np.arange(n)
    hit = p == g
    out[rows[hit], p[hit], 0] = 1.0  # tp of the (shared) class
    out[rows[~hit], p[~hit], 1] = 1.0  # fp of the predicted class
    out[rows[~hit], g[~hit], 2] = 1.0  # fn of the gold class
    return out.reshape(n, k * 3)


def _entity_stats(preds: list[str], golds: list[str]) -> np.ndarray:
    from seqeval.metrics.sequence_labeling import get_entities

    out = np.zeros((len(preds), 3))
    for i, (p, g) in enumerate(zip(preds, golds)):
        pe, ge = set(get_entities(json.loads(p))), set(get_entities(json.loads(g)))
        tp = len(pe & ge)
        out[i] = (tp, len(pe) - tp, len(ge) - tp)
    return out


def _token_stats(preds: list[str], golds: list[str]) -> np.ndarray:
    out = np.zeros((len(preds), 2))
    for i, (p, g) in enumerate(zip(preds, golds)):
        pt, gt = json.loads(p), json.loads(g)
        out[i] = (sum(a == b for a, b in zip(pt, gt)), len(gt))
    return out


def _per_example(metric: str, preds: list[str], golds: list[str]) -> np.ndarray:
    cache: dict[tuple[str, str], float] = {}
    scores = np.empty(len(preds))
    for i, pair in enumerate(zip(preds, golds)):
        if pair not in cache:
            cache[pair] = compute_metric(metric, [pair[0]], [pair[1]])
        scores[i] = cache[pair]
    return np.stack([scores, np.ones_like(scores)], axis=1)


def example_stats(metric: str, predictions, golds, labels: list[str] | None = None,
                  positive: str | None = None) -> ExampleStats:
    """Per-example statistics (N, K) of ``metric`` for string predictions and golds.

    ``labels`` fixes the class axis for macro_f1/mcc (so runs of one task share K); ``positive`` the
    positive class for f1 (default: ``trainables.metrics.choose_positive`` on these examples).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
    preds, gold = np.asarray(predictions, dtype=object), np.asarray(golds, dtype=object)
    if len(preds) != len(gold):
        raise ValueError(f"predictions ({len(preds)}) and golds ({len(gold)}) differ in length")
    if metric == "accuracy":
        hit = (preds == gold).astype(np.float64)
        return ExampleStats(np.stack([hit, np.ones_like(hit)], axis=1), ())
    if metric == "f1":
        pos = choose_positive(list(preds), list(gold), positive)
        p, g = preds == pos, gold == pos
        return ExampleStats(np.stack([p & g, p & ~g, ~p & g], axis=1).astype(np.float64), (pos,))
    if metric in ("macro_f1", "mcc"):
        labs = sorted(set(gold) | set(preds)) if labels is None else list(labels)
        return ExampleStats(_class_stats(preds, gold, labs, metric), tuple(labs))
    if metric == "entity_f1":
        return ExampleStats(_entity_stats(list(preds), list(gold)), ())
    if metric == "token_accuracy":
        return ExampleStats(_token_stats(list(preds), list(gold)), ())
    return ExampleStats(_per_example(metric, list(preds), list(gold)), ())  # squad_em, squad_f1
