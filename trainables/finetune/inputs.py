"""A task's rows as model inputs, and predictions as the task's metrics: what fine-tuning
(``trainables.finetune.api``) and the linear probe (``trainables.finetune.probe``) share, below both."""

from __future__ import annotations

from trainables.config import FinetuneConfig
from trainables.metrics import compute_metric
from trainables.task_types import Encoded, get_task_type
from trainables.tasks import TaskData, TaskSpec


def encode_split(data: TaskData, rows: list[dict], tok, ft: FinetuneConfig, max_pos: int, train: bool) -> Encoded:
    """Model inputs of ``rows`` by the task's type (``TaskType.encode``)."""
    label2id = {lab: i for i, lab in enumerate(data.spec.labels)}
    return get_task_type(data.spec.type).encode(rows, tok, label2id, ft, max_pos, train)


def score(spec: TaskSpec, preds: list[str], golds: list[str]) -> dict[str, float]:
    """Every metric of the task (the first is primary), and the one the rate, epoch and C are chosen on
    (``TaskSpec.selection_metric``) where the task's own metrics do not include it."""
    return {m: compute_metric(m, preds, golds, **({"positive": spec.positive} if m == "f1" and spec.positive else {}))
            for m in spec.scored_metrics}
