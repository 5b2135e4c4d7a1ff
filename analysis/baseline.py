"""Majority / chance baselines from the test golds, and whether any variant learned a task at all.

The baseline of a task is the constant predictor of its most frequent gold label, scored with the
task's own metric on its test golds: accuracy = the majority share; binary F1 of the positive label
(0 unless the positive label is the majority); MCC 0; macro-F1 of one class; tagging: every token the
most frequent tag (entity F1 0 when that tag is O; token accuracy its share); QA: 0. A task on which
no variant, ``none`` included, scores above its baseline was not learned at this budget: its
contrasts compare noise and are not shown (it stays in the averages, whose task set the design fixes).

Decided on dev, not test (``learned_on_dev``). Dropping a task removes its contrasts from the family
the calls are made in, so deciding it on the test scores would select on the very values the calls
use (and a variant's test mean above chance by luck would keep a task in, one at chance by luck drop
it). The dev values (``evals.dev_value`` of the headline metric, the split the learning rate is chosen
on) decide instead: a variant is above chance when the lower end of the 95% t interval of its mean
over pretraining seeds (each the mean over fine-tuning seeds) exceeds the baseline, on the point
estimate with fewer than 3 seeds (said in a message). Any of the V variants suffices: on dev that
keeps a task in the family, which only costs power. The chance level is the test golds' (dev golds
are not exported): dev and test are taken to share the label distribution. Exports without dev
values fall back to the test intervals (``learned``), with a message.
"""

from __future__ import annotations

import collections
import json
from typing import Sequence

import numpy as np
import pandas as pd

from scipy import stats as sps

from analysis.bootstrap import MIN_RELIABLE_SEEDS, Interval
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


def dev_seed_values(evals: pd.DataFrame, runs: pd.DataFrame, task: str, mode: str,
                    metric: str) -> dict[str, np.ndarray] | None:
    """Per variant, the dev value of ``metric`` per pretraining seed (mean over fine-tuning seeds);
    None when the export has no dev values for (task, mode)."""
    if "dev_value" not in evals.columns:
        return None
    sel = evals[(evals["task"] == task) & (evals["mode"] == mode) & (evals["metric"] == metric)
                & np.isfinite(evals["dev_value"].astype(float))]
    if sel.empty:
        return None
    merged = sel.merge(runs[["run_id", "variant", "pretrain_seed"]], on="run_id")
    by = merged.groupby(["variant", "pretrain_seed"])["dev_value"].mean()
    return {str(v): by[v].to_numpy(float) for v in by.index.get_level_values(0).unique()}


def above_on_dev(values: np.ndarray, baseline: float, level: float = 0.95) -> bool:
    """The mean of per-seed dev values lies above ``baseline``: its t interval's lower end with 3+
    seeds, its point estimate with fewer."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not values.size:
        return False
    mean = float(values.mean())
    if values.size < MIN_RELIABLE_SEEDS:
        return mean > baseline
    half = float(sps.t.ppf(1 - (1 - level) / 2, values.size - 1)) * float(values.std(ddof=1)) / np.sqrt(values.size)
    return mean - half > baseline


def learned_on_dev(dev: dict[str, np.ndarray], baseline: float) -> bool:
    """Whether any variant (``none`` included) scores above the baseline on dev."""
    return any(above_on_dev(v, baseline) for v in dev.values())
