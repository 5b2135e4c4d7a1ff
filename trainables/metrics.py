"""Downstream metrics over string predictions and golds, recomputable on any resample of examples.

Every metric takes two equal-length lists of strings, exactly as they are stored in
``predictions.parquet`` (see the export schema): class labels as plain strings; tagging (NER/POS)
as JSON lists of tags; QA predictions as a JSON string and QA golds as a JSON list of answer texts.
Nothing here imports torch, so the analysis side can bootstrap metrics cheaply.

    compute_metric("mcc", ["1", "0", "1"], ["1", "1", "1"])
    compute_metric("f1", preds, golds, positive="equivalent")

``f1`` is the binary F1 of one positive class. The positive label is chosen, in order: the
``positive`` argument (tasks pass theirs, e.g. MRPC's hub label name ``equivalent``); otherwise the
first of ``DEFAULT_POSITIVE_LABELS`` that occurs among the golds or predictions ('1', 'equivalent',
'positive', ...); otherwise an error naming the labels seen, since guessing would be silent.
"""

from __future__ import annotations

import collections
import json
import re
import string
from typing import Callable

import numpy as np


class MetricError(ValueError):
    """Bad metric input (unknown name, length mismatch, undecidable positive label, malformed JSON)."""


DEFAULT_POSITIVE_LABELS = ("1", "equivalent", "positive", "pos", "true", "yes", "acceptable", "match")


def _check(predictions: list[str], golds: list[str]) -> None:
    if len(predictions) != len(golds):
        raise MetricError(f"predictions ({len(predictions)}) and golds ({len(golds)}) differ in length")
    if not golds:
        raise MetricError("no examples to score (empty predictions and golds)")


def accuracy(predictions: list[str], golds: list[str]) -> float:
    _check(predictions, golds)
    return float(np.mean([p == g for p, g in zip(predictions, golds)]))


def choose_positive(predictions: list[str], golds: list[str], positive: str | None = None) -> str:
    """The positive label for binary F1 (see the module docstring for the order of choice)."""
    if positive is not None:
        return positive
    seen = set(golds) | set(predictions)
    for label in DEFAULT_POSITIVE_LABELS:
        if label in seen:
            return label
    raise MetricError(f"cannot tell the positive label for f1 among {sorted(seen)}; pass positive=LABEL")


def _prf(tp: int, fp: int, fn: int) -> float:
    denom = 2 * tp + fp + fn
    return 0.0 if denom == 0 else 2 * tp / denom


def f1(predictions: list[str], golds: list[str], positive: str | None = None) -> float:
    """Binary F1 of the positive class (MRPC's F1)."""
    _check(predictions, golds)
    pos = choose_positive(predictions, golds, positive)
    tp = sum(p == pos and g == pos for p, g in zip(predictions, golds))
    fp = sum(p == pos and g != pos for p, g in zip(predictions, golds))
    fn = sum(p != pos and g == pos for p, g in zip(predictions, golds))
    return float(_prf(tp, fp, fn))


def macro_f1(predictions: list[str], golds: list[str]) -> float:
    """Unweighted mean of per-class F1 over the classes in the golds (predicted-only classes add 0-F1)."""
    _check(predictions, golds)
    labels = sorted(set(golds) | set(predictions))
    scores = []
    for lab in labels:
        tp = sum(p == lab and g == lab for p, g in zip(predictions, golds))
        fp = sum(p == lab and g != lab for p, g in zip(predictions, golds))
        fn = sum(p != lab and g == lab for p, g in zip(predictions, golds))
        scores.append(_prf(tp, fp, fn))
    return float(np.mean(scores))


def mcc(predictions: list[str], golds: list[str]) -> float:
    """Matthews correlation (multi-class R_K of Gorodkin 2004; equals the binary MCC for 2 classes).

    0.0 when it is undefined (a constant prediction or a constant gold), as sklearn and GLUE report.
    """
    _check(predictions, golds)
    labels = sorted(set(golds) | set(predictions))
    index = {lab: i for i, lab in enumerate(labels)}
    c = np.zeros((len(labels), len(labels)), dtype=np.float64)
    for p, g in zip(predictions, golds):
        c[index[g], index[p]] += 1
    t_k, p_k = c.sum(axis=1), c.sum(axis=0)
    n, correct = c.sum(), np.trace(c)
    cov_yp = correct * n - t_k @ p_k
    cov_pp = n * n - p_k @ p_k
    cov_yy = n * n - t_k @ t_k
    denom = np.sqrt(cov_pp * cov_yy)
    return 0.0 if denom == 0 else float(cov_yp / denom)


def _json_value(text: str, what: str, kind: type):
    """``text`` parsed as JSON, which must be a ``kind`` (list or str); a one-line MetricError otherwise."""
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError):
        value = None
    if not isinstance(value, kind):
        raise MetricError(f"{what} {text!r:.60} is not a JSON {'list' if kind is list else 'string'}")
    return value


def _json_list(text: str, what: str) -> list:
    return _json_value(text, what, list)


def _tag_lists(predictions: list[str], golds: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    _check(predictions, golds)
    pred = [_json_list(p, "tagging prediction") for p in predictions]
    gold = [_json_list(g, "tagging gold") for g in golds]
    for i, (p, g) in enumerate(zip(pred, gold)):
        if len(p) != len(g):
            raise MetricError(f"example {i}: {len(p)} predicted tags for {len(g)} gold tags")
    return pred, gold


def entity_f1(predictions: list[str], golds: list[str]) -> float:
    """Entity-level micro F1 (seqeval, CoNLL-style chunking of BIO/IOB2 tags)."""
    from seqeval.metrics import f1_score

    pred, gold = _tag_lists(predictions, golds)
    return float(f1_score(gold, pred))


def token_accuracy(predictions: list[str], golds: list[str]) -> float:
    """Correct tags over all tokens (a ratio of sums, not a mean of per-sentence ratios)."""
    pred, gold = _tag_lists(predictions, golds)
    total = sum(len(g) for g in gold)
    if total == 0:
        raise MetricError("no tokens to score")
    return sum(a == b for p, g in zip(pred, gold) for a, b in zip(p, g)) / total


_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD v1.1 normalisation: lower, drop punctuation, articles, extra whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _squad_f1_one(prediction: str, gold: str) -> float:
    pred_toks, gold_toks = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def _qa_pairs(predictions: list[str], golds: list[str]) -> list[tuple[str, list[str]]]:
    _check(predictions, golds)
    pairs = []
    for p, g in zip(predictions, golds):
        pred = _json_value(p, "QA prediction", str)
        answers = [str(a) for a in _json_list(g, "QA gold")]
        if not answers:
            raise MetricError(f"QA gold {g!r:.60} has no answers")
        pairs.append((pred, answers))
    return pairs


def squad_em(predictions: list[str], golds: list[str]) -> float:
    """Exact match after normalisation, max over gold answers, averaged over examples (0..1)."""
    pairs = _qa_pairs(predictions, golds)
    return float(np.mean([max(normalize_answer(p) == normalize_answer(a) for a in gs) for p, gs in pairs]))


def squad_f1(predictions: list[str], golds: list[str]) -> float:
    """Token-overlap F1 after normalisation, max over gold answers, averaged over examples (0..1)."""
    pairs = _qa_pairs(predictions, golds)
    return float(np.mean([max(_squad_f1_one(p, a) for a in gs) for p, gs in pairs]))


METRICS: dict[str, Callable[..., float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "macro_f1": macro_f1,
    "mcc": mcc,
    "entity_f1": entity_f1,
    "token_accuracy": token_accuracy,
    "squad_em": squad_em,
    "squad_f1": squad_f1,
}

# Valid range of each metric (the acceptance checks and analysis plots use it).
METRIC_RANGES: dict[str, tuple[float, float]] = {name: (0.0, 1.0) for name in METRICS}
METRIC_RANGES["mcc"] = (-1.0, 1.0)


def compute_metric(metric: str, predictions: list[str], golds: list[str], **kwargs) -> float:
    """Score string predictions against string golds with a registered metric (0..1; mcc -1..1).

    ``kwargs`` go to the metric: only ``f1`` takes one (``positive``).
    """
    if metric not in METRICS:
        raise MetricError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
    return METRICS[metric](list(predictions), list(golds), **kwargs)
