"""Downstream task registry and loaders: hub benchmarks, built-in offline tasks, user task files.

Every task, wherever it comes from, loads into ``TaskData``: a ``TaskSpec`` and ``train``/``dev``/
``test`` rows in its task type's row schema (``trainables.task_types``, labels as strings):

    single:  {"id", "text", "label"}            pair: {"id", "text_a", "text_b", "label"}
    tagging: {"id", "tokens": [...], "tags": [...]}
    qa:      {"id", "context", "question", "answers": {"text": [...], "answer_start": [...]}}

    spec.py   TaskSpec, TaskData, HubSource, subsample, with_labels_from_train
    hub.py    the eight hub benchmarks (GLUE, CoNLL-2003, SQuAD) by name or from local hub-schema files
    user.py   user task files (CSV / JSONL / Parquet, a file or a folder of splits)
    here      the registry (hub + built-in + planted), groups (offline, planted, glue, benchmarks, all)
              and ``load_task``; the planted tasks (``trainables.data.planted``) have known answers
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainables.task_types import TASK_TYPES, get_task_type  # noqa: F401 (TASK_TYPES re-exported)
from trainables.tasks.hub import (BENCHMARK_TASKS, GLUE_TASKS, HUB_TASKS, data_files_from_dir,  # noqa: F401
                                  load_hub_task)
from trainables.tasks.spec import (SPLIT_SEED, SPLITS, HubSource, TaskData, TaskError, TaskSpec,  # noqa: F401
                                   subsample, with_labels_from_train)
from trainables.tasks.user import load_user_task  # noqa: F401

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- built-in offline tasks

def builtin_specs() -> dict[str, TaskSpec]:
    """The built-in offline tasks as TaskSpecs."""
    from trainables.data.builtin_build import BUILTIN_TASKS

    specs = {}
    for name, task in BUILTIN_TASKS.items():
        defaults = get_task_type(task.type).metrics
        metrics = (task.metric,) + tuple(m for m in defaults if m != task.metric)
        if task.metric == "entity_f1" and "token_accuracy" not in metrics:
            metrics += ("token_accuracy",)
        specs[name] = TaskSpec(name=name, type=task.type, metrics=metrics, source="builtin",
                               labels=tuple(task.labels), description=task.description)
    return specs


def load_builtin(name: str, cache_dir: str | Path | None = None) -> TaskData:
    from trainables.data.builtin import load_builtin_task

    spec = builtin_specs()[name]
    splits = load_builtin_task(name, cache_dir=cache_dir)
    return TaskData(spec, {s: splits[s] for s in SPLITS})


def planted_specs() -> dict[str, TaskSpec]:
    """The planted language's tasks (known answers: the instrument check, ``sweeps/known_answer.py``)."""
    from trainables.data.planted import TASK_INFO

    return {name: TaskSpec(name=name, type=kind, metrics=get_task_type(kind).metrics, source="planted",
                           labels=("0", "1"), description=what) for name, (kind, what) in TASK_INFO.items()}


def load_planted(name: str, language: int = 0) -> TaskData:
    """A planted task of language ``language`` (``trainables.data.sources.language_of(cfg.data.corpus)``)."""
    from trainables.data.planted import planted_language

    return TaskData(planted_specs()[name], planted_language(language).task(name))


# ---------------------------------------------------------------- registry and resolution

def task_registry() -> dict[str, TaskSpec]:
    """Every named task: the hub benchmarks, the built-in offline tasks, the planted ones."""
    return {**HUB_TASKS, **builtin_specs(), **planted_specs()}


def get_task_spec(name: str) -> TaskSpec:
    registry = task_registry()
    if name not in registry:
        raise TaskError(f"unknown task {name!r}; valid: {', '.join(registry)}, or the groups offline, planted, "
                        "glue, benchmarks, all")
    return registry[name]


def resolve_tasks(spec: str) -> list[str]:
    """'offline' | 'glue' | 'benchmarks' / 'all' | comma-separated names -> task names (checked)."""
    groups = {"offline": list(builtin_specs()), "planted": list(planted_specs()), "glue": list(GLUE_TASKS),
              "benchmarks": list(BENCHMARK_TASKS), "all": list(BENCHMARK_TASKS)}
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        for name in groups.get(part, [part]):
            get_task_spec(name)
            if name not in names:
                names.append(name)
    if not names:
        raise TaskError(f"no tasks in {spec!r}; valid: offline, glue, benchmarks, all, or names from "
                        f"{', '.join(task_registry())}")
    return names


def load_task(name: str, cache_dir: str | Path | None = None,
              data_files: dict[str, str] | str | None = None, language: int = 0) -> TaskData:
    """Load a registered task by name (hub benchmark, built-in, or planted from language ``language``);
    ``data_files`` = local hub-schema copy."""
    spec = get_task_spec(name)
    if spec.source == "planted":
        return load_planted(name, language)
    return load_hub_task(name, data_files) if spec.hub is not None else load_builtin(name, cache_dir)
