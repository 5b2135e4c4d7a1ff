"""Majority / chance baselines from the test golds, and whether any variant learned a task at all.

The baseline of a task is the constant predictor of its most frequent gold label, scored with the
task's own metric on its test golds: accuracy = the majority share; binary F1 of the positive label
(0 unless the positive label is the majority); MCC 0; macro-F1 of one class; tagging: every token the
most frequent tag (entity F1 0 when that tag is O; token accuracy its share); QA: 0. A task on which
no variant, ``none`` included, scores above its baseline was not learned at this budget: its
contrasts compare noise and it is left out of averages.
"""

from __future__ import annotations

import collections
import json
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval
from trainables.metrics import compute_metric

TAGGING = ("entity_f1", "token_accuracy")
QA = ("squad_em", "squad_f1")


def chance_baseline(metric: str, golds: Sequence[str], positive: str | None = None) -> float:
    """The score of the constant most-frequent-label predictor on ``golds`` under ``metric``."""
    golds = [str(g) for g in golds]
    if not golds:
        raise ValueError("chance_baseline needs at least one gold answer")
    if metric in QA:
        return 0.0
    if metric in TAGGING:
        tags = [json.loads(g) for g in golds]
        counts = collections.Counter(t for seq in tags for t in seq)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        return float(compute_metric(metric, [json.dumps([top] * len(seq)) for seq in tags], golds))
    counts = collections.Counter(golds)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    kwargs = {"positive": positive} if metric == "f1" and positive else {}
    return float(compute_metric(metric, [top] * len(golds), golds, **kwargs))


def task_golds(predictions: pd.DataFrame, task: str, mode: str, run_ids) -> list[str]:
    """One gold per test example of (task, mode), from the predictions of ``run_ids``."""
    sel = predictions[(predictions["task"] == task) & (predictions["mode"] == mode)
                      & predictions["run_id"].isin(run_ids)]
    return sel.drop_duplicates("example_id")["gold"].astype(str).tolist()


def above(iv: Interval, baseline: float) -> bool:
    """The mean's interval lies above the baseline (its point estimate when the interval is unreliable)."""
    if iv.reliable and np.isfinite(iv.lo):
        return bool(iv.lo > baseline)
    return bool(np.isfinite(iv.estimate) and iv.estimate > baseline)


def learned(means: dict[str, Interval], baseline: float) -> bool:
    """Whether any variant (``none`` included) scores above the baseline."""
    return any(above(iv, baseline) for iv in means.values())
