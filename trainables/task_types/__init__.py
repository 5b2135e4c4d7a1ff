"""Task types as a registry: single, pair, tagging, qa. One entry per type holds all that differs.

    get_task_type("pair").encode(rows, tokenizer, label2id, ft, max_position, train)

An entry (``TaskType``) declares its row columns and default metrics, parses and checks a user file's
row, names the labels a row carries, encodes rows for the model, names the ``transformers`` head,
decodes model outputs to the export's string predictions, gives the linear probe its features, and names
its non-neural baseline (``trainables.finetune.baselines``; QA has none).
A new task type is one ``register_task_type(TaskType(...))`` plus its tests; nothing else branches on
the type's name.
"""

from __future__ import annotations

from trainables.task_types.base import Encoded, Probe, TaskError, TaskType
from trainables.task_types.classification import PAIR, SINGLE
from trainables.task_types.qa import QA
from trainables.task_types.tagging import TAGGING

TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (SINGLE, PAIR, TAGGING, QA)}


def register_task_type(task_type: TaskType) -> TaskType:
    """Add a task type (e.g. from a plugin or a test); its name must be new."""
    if task_type.name in TASK_TYPES:
        raise TaskError(f"task type {task_type.name!r} is already registered")
    TASK_TYPES[task_type.name] = task_type
    return task_type


def get_task_type(name: str) -> TaskType:
    if name not in TASK_TYPES:
        raise TaskError(f"task type {name!r} is not valid; allowed: {', '.join(TASK_TYPES)}")
    return TASK_TYPES[name]


__all__ = ["Encoded", "Probe", "TASK_TYPES", "TaskError", "TaskType", "get_task_type", "register_task_type"]
