"""Sequence classification of one text (``single``) or a text pair (``pair``).

Rows: single ``{"id", "text", "label"}``, pair ``{"id", "text_a", "text_b", "label"}``; labels are
strings. Head: ``BertForSequenceClassification`` on [CLS]; predictions are label strings. The head
reads the pooler (``pooled=True``), so ``finetune.head`` applies: ``pooler`` (BERT's, the checkpoint's
weights) or ``cls`` (a fresh dense+tanh on [CLS], ``trainables.finetune.heads``). The probe fits on
mean-pooled last hidden states (padding excluded). The non-neural baseline (``finetune.text_baselines``) is a
TF-IDF logistic regression (``trainables.finetune.baselines``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainables.config import TFIDF_BASELINE
from trainables.task_types.base import Encoded, Probe, TaskType, features


def _parse(columns: tuple[str, ...]):
    def parse(raw: dict, path: Path, i: int) -> dict:
        row = {"id": str(raw.get("id", i))}
        for col in columns:
            row[col] = str(raw[col])
        return row
    return parse


def _encoder(kind: str):
    def encode(rows: list[dict], tok, label2id: dict[str, int], ft, max_pos: int, train: bool) -> Encoded:
        first = [r["text"] if kind == "single" else r["text_a"] for r in rows]
        second = None if kind == "single" else [r["text_b"] for r in rows]
        enc = tok(first, second, truncation=True, max_length=min(ft.max_len, max_pos), return_token_type_ids=True)
        inputs = []
        for i, row in enumerate(rows):
            feat = features(enc, i)
            feat["labels"] = label2id[row["label"]]
            inputs.append(feat)
        return Encoded(inputs, list(range(len(rows))), [None] * len(rows))
    return encode


def decode(spec, rows: list[dict], enc: Encoded, logits: list, ft) -> tuple[list[str], list[str]]:
    return [spec.labels[int(np.argmax(x))] for x in logits], [r["label"] for r in rows]


def mean_pool(hidden, attention_mask):
    """Mean of the last hidden states over real tokens, on the device: (B, T, C) -> (B, C)."""
    mask = attention_mask.unsqueeze(-1).float()  # (B, T, 1): padding does not count
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, C)


def pooled_features(pooled: np.ndarray, enc: Encoded, idx) -> list[np.ndarray]:
    """Per example, its pooled state (C,) from the host copy of ``mean_pool``'s (B, C)."""
    return [pooled[j] for j in range(len(idx))]


def _xy(rows: list[dict], feats: list) -> tuple[np.ndarray, list[str]]:
    return np.stack(feats), [r["label"] for r in rows]


def _predict(clf, rows: list[dict], feats: list, spec) -> tuple[list[str], list[str]]:
    return [str(p) for p in clf.predict(np.stack(feats))], [r["label"] for r in rows]


PROBE = Probe(mean_pool, pooled_features, _xy, _predict)
SINGLE = TaskType("single", ("text", "label"), ("accuracy", "macro_f1"), "BertForSequenceClassification",
                  _parse(("text", "label")), lambda r: [r["label"]], _encoder("single"), decode, PROBE, pooled=True,
                  baseline=TFIDF_BASELINE)
PAIR = TaskType("pair", ("text_a", "text_b", "label"), ("accuracy", "macro_f1"), "BertForSequenceClassification",
                _parse(("text_a", "text_b", "label")), lambda r: [r["label"]], _encoder("pair"), decode, PROBE,
                pooled=True, baseline=TFIDF_BASELINE)
