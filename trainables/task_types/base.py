"""What every task type shares: the ``TaskType`` entry, encoded features, the probe hooks, ``TaskError``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


class TaskError(ValueError):
    """A task name, file or row is invalid; the message is one line naming it and the problem."""


@dataclass
class Encoded:
    """Model inputs of one split, one entry per feature (QA: per window), plus what decoding needs."""

    inputs: list[dict[str, Any]]  # input_ids, token_type_ids, attention_mask and the label key(s)
    example_of: list[int]  # feature -> index of its example
    meta: list[Any]  # tagging: word_ids; qa: context offsets (None outside the context)

    def lengths(self) -> list[int]:
        return [len(f["input_ids"]) for f in self.inputs]


def features(enc, i: int) -> dict[str, list[int]]:
    """The model inputs of feature ``i`` of a tokenizer's batch encoding."""
    return {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
            "attention_mask": enc["attention_mask"][i]}


@dataclass(frozen=True)
class Probe:
    """The linear probe's hooks: per-example features from the frozen encoder, the (X, y) to fit, and
    string predictions and golds from a fitted classifier.

    Features come in two steps so that the device is read once per group of batches, not per batch or
    example: ``reduce`` runs on the device, ``features`` on the host copy of what it returned."""

    reduce: Callable  # (hidden (B, T, C) device tensor, attention_mask (B, T) device tensor) -> device (B, ...)
    features: Callable  # (reduced (B, ...) host array, enc, idx) -> [feature per example]
    xy: Callable  # (rows, feats) -> (X (n, C) array, y list of labels)
    predict: Callable  # (clf, rows, feats, spec) -> (predictions, golds)


@dataclass(frozen=True)
class TaskType:
    """One task type: everything that differs between single, pair, tagging and qa."""

    name: str
    columns: tuple[str, ...]  # the fields of a row (user files must have them)
    metrics: tuple[str, ...]  # default metrics; the first is the headline
    head: str  # the transformers head class, loaded with from_pretrained on the checkpoint
    parse_row: Callable[[dict, Path, int], dict]  # a user file's raw row -> a row in the type's schema
    labels_of: Callable[[dict], list[str]] | None  # the labels a row carries; None: no label set (QA)
    encode: Callable  # (rows, tokenizer, label2id, ft, max_position, train) -> Encoded
    decode: Callable  # (spec, rows, enc, logits, ft) -> (predictions, golds) as export strings
    probe: Probe | None = None  # None: the linear probe does not support this type
    pooled: bool = False  # the head reads the pooled [CLS] state, so finetune.head (pooler | cls) applies
    # the eval mode of its non-neural baseline (finetune.text_baselines: trainables.finetune.baselines); "" none
    baseline: str = ""

    def head_kwargs(self, labels: tuple[str, ...]) -> dict[str, Any]:
        """``from_pretrained`` arguments of the head: the label set for labelled types."""
        if self.labels_of is None:
            return {}
        return dict(num_labels=len(labels), id2label=dict(enumerate(labels)),
                    label2id={lab: i for i, lab in enumerate(labels)})
