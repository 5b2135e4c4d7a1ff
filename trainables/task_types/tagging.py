"""Token tagging (NER, POS): rows ``{"id", "tokens": [...], "tags": [...]}``, one tag per word.

Head: ``BertForTokenClassification``; the label sits on the first sub-word of each word (the rest
-100). Predictions and golds are JSON lists of tags, one per word; a word the model never saw
(truncated away) gets the fallback tag ('O' when the tag set has it). The probe fits on the
first-sub-word states of every word; the non-neural baseline (``finetune.text_baselines``) is the most frequent
tag per word (``trainables.finetune.baselines``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from trainables.config import TAG_BASELINE
from trainables.task_types.base import Encoded, Probe, TaskError, TaskType, features


def _no_value(item: Any) -> bool:
    return item is None or (isinstance(item, float) and math.isnan(item)) or not str(item).strip()


def as_list(value: Any, path: Path, column: str, i: int) -> list[str]:
    """A JSON list, a space-separated string or an array -> list of strings (one-line TaskError naming
    the 1-based row; ``i`` is the 0-based index). A null or blank item is an error, not the text 'None'."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise TaskError(f"{path}: row {i + 1} column {column!r} is not a valid JSON list") from None
        else:
            value = text.split()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list):
        raise TaskError(f"{path}: row {i + 1} column {column!r} must be a list (JSON list or space-separated)")
    blank = [k for k, v in enumerate(value) if _no_value(v)]
    if blank:
        raise TaskError(f"{path}: row {i + 1} column {column!r} has no value at position {blank[0] + 1} "
                        f"(item {value[blank[0]]!r})")
    return [str(v) for v in value]


def parse_row(raw: dict, path: Path, i: int) -> dict:
    row = {"id": str(raw.get("id", i)), "tokens": as_list(raw["tokens"], path, "tokens", i),
           "tags": as_list(raw["tags"], path, "tags", i)}
    if not row["tokens"]:
        raise TaskError(f"{path}: row {i + 1} column 'tokens' has no value (an empty list)")
    if len(row["tokens"]) != len(row["tags"]):
        raise TaskError(f"{path}: row {i + 1} has {len(row['tokens'])} tokens but {len(row['tags'])} tags")
    return row


def encode(rows: list[dict], tok, label2id: dict[str, int], ft, max_pos: int, train: bool) -> Encoded:
    enc = tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True,
              max_length=min(ft.max_len, max_pos), return_token_type_ids=True)
    inputs, metas = [], []
    for i, row in enumerate(rows):
        word_ids = enc.word_ids(i)
        labels, previous = [], None
        for w in word_ids:  # label the first sub-word of each word; specials and continuations -100
            labels.append(label2id[row["tags"][w]] if w is not None and w != previous else -100)
            previous = w
        feat = features(enc, i)
        feat["labels"] = labels
        inputs.append(feat)
        metas.append(word_ids)
    return Encoded(inputs, list(range(len(rows))), metas)


def fallback_tag(labels: tuple[str, ...]) -> str:
    """Tag for words the model never saw (truncated away, or no sub-word): 'O' if it exists."""
    return "O" if "O" in labels else labels[0]


def decode_tags(logits: np.ndarray, word_ids: list, n_words: int, labels: tuple[str, ...]) -> list[str]:
    tags = [fallback_tag(labels)] * n_words
    previous = None
    for pos, w in enumerate(word_ids):
        if w is not None and w != previous:
            tags[w] = labels[int(np.argmax(logits[pos]))]
        previous = w
    return tags


def decode(spec, rows: list[dict], enc: Encoded, logits: list, ft) -> tuple[list[str], list[str]]:
    preds = [json.dumps(decode_tags(logits[i], enc.meta[i], len(r["tokens"]), spec.labels))
             for i, r in enumerate(rows)]
    return preds, [json.dumps(r["tags"]) for r in rows]


def last_states(hidden, attention_mask):
    """The states as they are, (B, T, C): which positions are first sub-words is host metadata."""
    return hidden


def first_subword_features(states: np.ndarray, enc: Encoded, idx) -> list[tuple[np.ndarray, list[int]]]:
    """Per example: the states of each word's first sub-word (W, C) and the words they belong to, from
    the host copy of the batch's (B, T, C) states."""
    out = []
    for j, i in enumerate(idx):
        meta = enc.meta[i]
        firsts = [p for p, w in enumerate(meta) if w is not None and (p == 0 or meta[p - 1] != w)]
        out.append((states[j, firsts], [meta[p] for p in firsts]))
    return out


def _xy(rows: list[dict], feats: list) -> tuple[np.ndarray, list[str]]:
    ys = [r["tags"][w] for r, (_, words) in zip(rows, feats) for w in words]
    return np.concatenate([states for states, _ in feats]), ys


def _predict(clf, rows: list[dict], feats: list, spec) -> tuple[list[str], list[str]]:
    fallback = fallback_tag(spec.labels)
    preds = []
    for row, (states, words) in zip(rows, feats):
        tags = [fallback] * len(row["tokens"])
        if len(words):
            for w, t in zip(words, clf.predict(states)):
                tags[w] = str(t)
        preds.append(json.dumps(tags))
    return preds, [json.dumps(r["tags"]) for r in rows]


TAGGING = TaskType("tagging", ("tokens", "tags"), ("token_accuracy",), "BertForTokenClassification", parse_row,
                   lambda r: r["tags"], encode, decode, Probe(last_states, first_subword_features, _xy, _predict),
                   baseline=TAG_BASELINE)
