"""What a downstream task is (``TaskSpec``) and holds (``TaskData``), and the helpers every loader shares.

Every task, wherever it comes from, loads into ``TaskData``: a ``TaskSpec`` (name, type, label set,
metrics) and ``train``/``dev``/``test`` lists of rows in its task type's row schema (labels as strings,
see ``trainables.task_types``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from trainables.task_types import TaskError, get_task_type  # noqa: F401 (re-exported)

SPLITS = ("train", "dev", "test")
SPLIT_SEED = 0  # fixed: dev slices and user-file splits are the same for every run and variant


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark lives on the hub and how its splits map onto train/dev/test."""

    path: str
    config: str | None = None
    revision: str | None = None
    splits: dict[str, str] = field(default_factory=dict)  # our split -> hub split
    dev_size: int = 0  # >0: dev is carved from hub train (min(dev_size, 10% of train))
    row_fn: str = "glue"  # key into ROW_MAPPERS


@dataclass(frozen=True)
class TaskSpec:
    """What a task is: its type, labels, metrics (the first is primary) and where it comes from."""

    name: str
    type: str
    metrics: tuple[str, ...]
    source: str  # "hub:PATH[/CONFIG]" | "builtin" | "file:PATH"
    labels: tuple[str, ...] = ()  # class labels / tag set; () = taken from the train split
    positive: str | None = None  # positive class of binary F1
    report_as: dict[str, str] = field(default_factory=lambda: {"test": ""})  # test split -> task name ("" = name)
    description: str = ""
    hub: HubSource | None = None

    @property
    def metric(self) -> str:
        return self.metrics[0]

    @property
    def selection_metric(self) -> str:
        """What the rate, the epoch and the probe's C are chosen on, on dev. For a task type with one label per
        example (its metrics include macro-F1): macro-F1, which a constant prediction cannot win (one label of K
        scores at most 1/K; a two-way task's majority label at share p scores p / (1 + p) < 0.5), where accuracy,
        or F1 of a majority positive class, rewards the majority label when a task is learned only a few points
        above it. Otherwise the headline metric: tagging's and QA's already score a constant prediction low.
        The estimates keep reporting the headline metric."""
        return "macro_f1" if "macro_f1" in get_task_type(self.type).metrics else self.metric

    @property
    def scored_metrics(self) -> tuple[str, ...]:
        """Every metric recorded for the task: its own, then the selection metric if it is not among them."""
        return self.metrics + tuple(m for m in (self.selection_metric,) if m not in self.metrics)

    def reported_names(self) -> dict[str, str]:
        """Test split -> the task name written in the records."""
        return {split: (name or self.name) for split, name in self.report_as.items()}


@dataclass
class TaskData:
    spec: TaskSpec
    splits: dict[str, list[dict]]  # train, dev, test (+ extra test splits such as test_mm)

    def __getitem__(self, split: str) -> list[dict]:
        return self.splits[split]


def subsample(rows: list[dict], limit: int, rng: np.random.Generator | None) -> list[dict]:
    """At most ``limit`` rows (0 = all), in their original order; ``rng=None`` uses the fixed split seed."""
    if not limit or len(rows) <= limit:
        return rows
    rng = rng if rng is not None else np.random.default_rng(SPLIT_SEED)
    keep = np.sort(rng.choice(len(rows), size=limit, replace=False))
    return [rows[i] for i in keep]


def with_labels_from_train(data: TaskData) -> TaskData:
    """Fill an empty label set from the train split (sorted labels or tags); QA has none."""
    labels_of = get_task_type(data.spec.type).labels_of
    if data.spec.labels or labels_of is None:
        return data
    labels = tuple(sorted({x for r in data["train"] for x in labels_of(r)}))
    return TaskData(replace(data.spec, labels=labels), data.splits)
