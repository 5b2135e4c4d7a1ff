"""Downstream task registry and loaders: hub benchmarks, built-in offline tasks, user task files.

Every task, wherever it comes from, loads into ``TaskData``: a ``TaskSpec`` (name, type, label set,
metrics) and ``train``/``dev``/``test`` lists of rows in the shared row schemas (labels as strings):

    single:  {"id", "text", "label"}            pair: {"id", "text_a", "text_b", "label"}
    tagging: {"id", "tokens": [...], "tags": [...]}
    qa:      {"id", "context", "question", "answers": {"text": [...], "answer_start": [...]}}

Hub benchmarks (``HUB_TASKS``) load with ``datasets.load_dataset`` by hub name, or -- through the
SAME mapping code -- from local files in the hub's schema (``data_files``), which is how the tests run
and how users point a benchmark at a local copy. Splits: GLUE and SQuAD test labels are hidden, so
``test`` is the hub's validation split (the reported numbers, as in the papers) and ``dev`` is a fixed
held-out slice of the hub's train split (``HubSource.dev_size``, drawn with a fixed seed so it is the
same for every run): model selection and probe ranking use ``dev``, never ``test``. CoNLL-2003 has
its own validation and test splits.

MNLI is ONE task ``mnli`` (trained once) with two test splits: ``test`` (validation_matched) and
``test_mm`` (validation_mismatched). ``TaskSpec.report_as`` maps them to the reported task names
``mnli_m`` and ``mnli_mm``, which are what evals.parquet / predictions.parquet contain.

User files: ``load_user_task(path, type)`` reads CSV / JSONL / Parquet (a file, or a folder holding
``train.*``, ``dev.*``/``validation.*`` and ``test.*``). A single file is split 80/10/10 with a fixed
seed unless it has a ``split`` column. Bad files raise ``TaskError`` with one line naming the file and
the problem.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

log = logging.getLogger(__name__)

TASK_TYPES = ("single", "pair", "tagging", "qa")
SPLITS = ("train", "dev", "test")
SPLIT_SEED = 0  # fixed: dev slices and user-file splits are the same for every run and variant


class TaskError(ValueError):
    """A task name, file or row is invalid; the message is one line naming it and the problem."""


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

    def reported_names(self) -> dict[str, str]:
        """Test split -> the task name written in the records."""
        return {split: (name or self.name) for split, name in self.report_as.items()}


@dataclass
class TaskData:
    spec: TaskSpec
    splits: dict[str, list[dict]]  # train, dev, test (+ extra test splits such as test_mm)

    def __getitem__(self, split: str) -> list[dict]:
        return self.splits[split]


# ---------------------------------------------------------------- hub benchmarks

GLUE_COLUMNS: dict[str, tuple[str, ...]] = {
    "mnli": ("premise", "hypothesis"), "qnli": ("question", "sentence"),
    "mrpc": ("sentence1", "sentence2"), "sst2": ("sentence",), "cola": ("sentence",),
}
# The hub's ClassLabel names, used when a local copy stores labels as bare integers.
GLUE_LABELS: dict[str, tuple[str, ...]] = {
    "mnli": ("entailment", "neutral", "contradiction"), "qnli": ("entailment", "not_entailment"),
    "mrpc": ("not_equivalent", "equivalent"), "sst2": ("negative", "positive"),
    "cola": ("unacceptable", "acceptable"),
}
CONLL_NER = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
CONLL_POS = ('"', "''", "#", "$", "(", ")", ",", ".", ":", "``", "CC", "CD", "DT", "EX", "FW", "IN", "JJ",
             "JJR", "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "NN|SYM", "PDT", "POS", "PRP", "PRP$", "RB",
             "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$",
             "WRB")


def _glue(config: str, metrics: tuple[str, ...], description: str, positive: str | None = None,
          test: str = "validation", **extra: Any) -> TaskSpec:
    kind = "pair" if len(GLUE_COLUMNS[config]) == 2 else "single"
    splits = {"train": "train", "test": test, **extra.pop("splits", {})}
    return TaskSpec(name=config, type=kind, metrics=metrics, source=f"hub:nyu-mll/glue/{config}",
                    labels=GLUE_LABELS[config], positive=positive, description=description,
                    hub=HubSource("nyu-mll/glue", config, splits=splits, dev_size=2000, row_fn="glue"), **extra)


def _conll(name: str, column: str, labels: tuple[str, ...], metrics: tuple[str, ...], description: str) -> TaskSpec:
    return TaskSpec(name=name, type="tagging", metrics=metrics, source="hub:eriktks/conll2003",
                    labels=labels, description=description,
                    hub=HubSource("eriktks/conll2003", None, revision="refs/convert/parquet",
                                  splits={"train": "train", "dev": "validation", "test": "test"},
                                  row_fn=f"conll:{column}"))


HUB_TASKS: dict[str, TaskSpec] = {
    "mnli": _glue("mnli", ("accuracy", "macro_f1"), "MNLI entailment (3-way); test = matched and mismatched dev",
                  splits={"test_mm": "validation_mismatched"}, test="validation_matched",
                  report_as={"test": "mnli_m", "test_mm": "mnli_mm"}),
    "qnli": _glue("qnli", ("accuracy", "macro_f1"), "QNLI: does the sentence answer the question"),
    "mrpc": _glue("mrpc", ("f1", "accuracy"), "MRPC paraphrase; F1 of the 'equivalent' class",
                  positive="equivalent"),
    "sst2": _glue("sst2", ("accuracy", "macro_f1"), "SST-2 binary sentiment"),
    "cola": _glue("cola", ("mcc", "accuracy"), "CoLA acceptability; Matthews correlation"),
    "conll2003_ner": _conll("conll2003_ner", "ner_tags", CONLL_NER, ("entity_f1", "token_accuracy"),
                            "CoNLL-2003 named entities (BIO), entity-level F1"),
    "conll2003_pos": _conll("conll2003_pos", "pos_tags", CONLL_POS, ("token_accuracy",),
                            "CoNLL-2003 Penn Treebank POS tags, token accuracy"),
    "squad": TaskSpec(name="squad", type="qa", metrics=("squad_f1", "squad_em"), source="hub:rajpurkar/squad",
                      description="SQuAD v1.1 extractive QA; test = the hub's validation split",
                      hub=HubSource("rajpurkar/squad", None, splits={"train": "train", "test": "validation"},
                                    dev_size=2000, row_fn="squad")),
}
GLUE_TASKS = ("mnli", "qnli", "mrpc", "sst2", "cola")
BENCHMARK_TASKS = tuple(HUB_TASKS)

DEFAULT_METRICS: dict[str, tuple[str, ...]] = {
    "single": ("accuracy", "macro_f1"), "pair": ("accuracy", "macro_f1"),
    "tagging": ("token_accuracy",), "qa": ("squad_f1", "squad_em"),
}


def _class_names(feature: Any, fallback: tuple[str, ...]) -> Callable[[Any], str]:
    """int -> label name via the dataset's ClassLabel if it has one, else the known hub names."""
    names = list(getattr(feature, "names", None) or fallback)

    def name(value: Any) -> str:
        if isinstance(value, str):
            return value
        if not 0 <= int(value) < len(names):
            raise TaskError(f"label id {value} outside the {len(names)} known labels {names}")
        return names[int(value)]
    return name


def _glue_rows(ds: Any, spec: TaskSpec) -> list[dict]:
    cols = GLUE_COLUMNS[spec.hub.config]
    name = _class_names(ds.features.get("label"), spec.labels)
    rows = []
    for i, ex in enumerate(ds):
        if isinstance(ex["label"], int) and ex["label"] < 0:  # hidden test labels
            continue
        row = {"id": str(ex.get("idx", i)), "label": name(ex["label"])}
        if len(cols) == 2:
            row.update(text_a=ex[cols[0]], text_b=ex[cols[1]])
        else:
            row["text"] = ex[cols[0]]
        rows.append(row)
    return rows


def _conll_rows(ds: Any, spec: TaskSpec, column: str) -> list[dict]:
    feature = ds.features.get(column)
    name = _class_names(getattr(feature, "feature", feature), spec.labels)
    return [{"id": str(ex.get("id", i)), "tokens": list(ex["tokens"]), "tags": [name(t) for t in ex[column]]}
            for i, ex in enumerate(ds) if len(ex["tokens"])]


def _squad_rows(ds: Any, spec: TaskSpec) -> list[dict]:
    return [{"id": str(ex["id"]), "context": ex["context"], "question": ex["question"],
             "answers": {"text": list(ex["answers"]["text"]),
                         "answer_start": [int(s) for s in ex["answers"]["answer_start"]]}} for ex in ds]


def _hub_columns(spec: TaskSpec) -> tuple[str, ...]:
    kind, _, arg = spec.hub.row_fn.partition(":")
    if kind == "glue":
        return GLUE_COLUMNS[spec.hub.config] + ("label",)
    return ("tokens", arg) if kind == "conll" else ("id", "context", "question", "answers")


def _map_rows(ds: Any, spec: TaskSpec) -> list[dict]:
    kind, _, arg = spec.hub.row_fn.partition(":")
    missing = [c for c in _hub_columns(spec) if c not in ds.column_names]
    if missing:
        raise TaskError(f"task {spec.name!r}: data lacks column(s) {missing}; its hub schema has "
                        f"{list(_hub_columns(spec))}")
    if kind == "glue":
        return _glue_rows(ds, spec)
    if kind == "conll":
        return _conll_rows(ds, spec, arg)
    return _squad_rows(ds, spec)


def data_files_from_dir(folder: str | Path) -> dict[str, str]:
    """A folder of split files (``train.parquet``, ``validation_matched.jsonl``...) -> data_files."""
    files = {p.name.split(".")[0]: str(p) for p in sorted(Path(folder).iterdir())
             if p.suffix in (".parquet", ".csv", ".json", ".jsonl")}
    if not files:
        raise TaskError(f"{folder}: no .parquet/.csv/.json/.jsonl split files")
    return files


def _builder_for(files: dict[str, str]) -> str:
    suffix = Path(next(iter(files.values()))).suffix
    return {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}[suffix]


def _load_hub_split(spec: TaskSpec, hub_split: str, data_files: dict[str, str] | None) -> Any:
    import datasets

    src = spec.hub
    if data_files is not None:
        if hub_split not in data_files:
            raise TaskError(f"task {spec.name!r}: local data has no {hub_split!r} split; has {sorted(data_files)}")
        return datasets.load_dataset(_builder_for(data_files), data_files={hub_split: data_files[hub_split]},
                                     split=hub_split)
    return datasets.load_dataset(src.path, src.config, revision=src.revision, split=hub_split)


def _carve_dev(rows: list[dict], size: int) -> tuple[list[dict], list[dict]]:
    n_dev = min(size, max(1, len(rows) // 10))
    order = np.random.default_rng(SPLIT_SEED).permutation(len(rows))
    dev = set(order[:n_dev].tolist())
    return [r for i, r in enumerate(rows) if i not in dev], [rows[i] for i in sorted(dev)]


def load_hub_task(name: str, data_files: dict[str, str] | str | None = None) -> TaskData:
    """A benchmark by hub name, or from local files in the hub schema (a dict split->file or a folder)."""
    spec = get_task_spec(name)
    if spec.hub is None:
        raise TaskError(f"task {name!r} is not a hub benchmark; hub tasks: {', '.join(HUB_TASKS)}")
    if isinstance(data_files, (str, Path)):
        data_files = data_files_from_dir(data_files)
    splits = {ours: _map_rows(_load_hub_split(spec, hub, data_files), spec) for ours, hub in spec.hub.splits.items()}
    if "dev" not in splits:
        splits["train"], splits["dev"] = _carve_dev(splits["train"], spec.hub.dev_size)
    return TaskData(spec, splits)


# ---------------------------------------------------------------- built-in offline tasks

def builtin_specs() -> dict[str, TaskSpec]:
    """The built-in offline tasks as TaskSpecs ({} if trainables.data.builtin is not importable)."""
    try:
        from trainables.data.builtin import BUILTIN_TASKS
    except ImportError as err:  # written by another helper; absent in an early checkout
        log.warning("built-in offline tasks unavailable: %s", err)
        return {}
    specs = {}
    for name, task in BUILTIN_TASKS.items():
        metrics = (task.metric,) + tuple(m for m in DEFAULT_METRICS[task.type] if m != task.metric)
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


# ---------------------------------------------------------------- user task files

REQUIRED_COLUMNS = {
    "single": ("text", "label"), "pair": ("text_a", "text_b", "label"),
    "tagging": ("tokens", "tags"), "qa": ("context", "question", "answers"),
}
SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "test": "test"}


def _read_table(path: Path) -> list[dict]:
    import pandas as pd

    try:
        if path.suffix == ".csv":
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        elif path.suffix in (".jsonl", ".json"):
            frame = pd.read_json(path, lines=path.suffix == ".jsonl", dtype=False)
        elif path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            raise TaskError(f"{path}: unsupported file type {path.suffix!r}; allowed: .csv, .jsonl, .json, .parquet")
    except (pd.errors.EmptyDataError, ValueError) as err:
        if isinstance(err, TaskError):
            raise
        raise TaskError(f"{path}: empty or unreadable ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if len(frame) == 0:
        raise TaskError(f"{path}: empty file (no rows)")
    return frame.to_dict(orient="records")


def _as_list(value: Any, path: Path, column: str, i: int) -> list:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise TaskError(f"{path}: row {i} column {column!r} is not a valid JSON list") from None
        else:
            value = text.split()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list):
        raise TaskError(f"{path}: row {i} column {column!r} must be a list (JSON list or space-separated)")
    return [str(v) for v in value]


def _answers(value: Any, path: Path, i: int) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(f"{path}: row {i} column 'answers' is not JSON") from None
    if not isinstance(value, dict) or "text" not in value or "answer_start" not in value:
        raise TaskError(f"{path}: row {i} column 'answers' must be {{'text': [...], 'answer_start': [...]}}")
    texts = [str(t) for t in list(value["text"])]
    starts = [int(s) for s in list(value["answer_start"])]
    if not texts or len(texts) != len(starts):
        raise TaskError(f"{path}: row {i} 'answers' needs as many texts as answer_start values (at least one)")
    return {"text": texts, "answer_start": starts}


def _user_row(raw: dict, kind: str, path: Path, i: int) -> dict:
    row: dict[str, Any] = {"id": str(raw.get("id", i))}
    if kind in ("single", "pair"):
        for col in REQUIRED_COLUMNS[kind]:
            row[col] = str(raw[col])
    elif kind == "tagging":
        row["tokens"] = _as_list(raw["tokens"], path, "tokens", i)
        row["tags"] = _as_list(raw["tags"], path, "tags", i)
        if len(row["tokens"]) != len(row["tags"]):
            raise TaskError(f"{path}: row {i} has {len(row['tokens'])} tokens but {len(row['tags'])} tags")
    else:
        row.update(context=str(raw["context"]), question=str(raw["question"]), answers=_answers(raw["answers"], path, i))
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            if row["context"][start:start + len(text)] != text:
                raise TaskError(f"{path}: row {i} answer {text!r} is not at answer_start={start} in the context")
    return row


def _read_user_file(path: Path, kind: str) -> list[tuple[str | None, dict]]:
    raws = _read_table(path)
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in raws[0]]
    if missing:
        raise TaskError(f"{path}: missing column(s) {missing}; a {kind!r} task needs {list(REQUIRED_COLUMNS[kind])}")
    return [(str(r["split"]) if "split" in r else None, _user_row(r, kind, path, i)) for i, r in enumerate(raws)]


def _split_user_rows(tagged: list[tuple[str | None, dict]], path: Path) -> dict[str, list[dict]]:
    if tagged[0][0] is not None:
        splits: dict[str, list[dict]] = {s: [] for s in SPLITS}
        for split, row in tagged:
            if split not in SPLIT_ALIASES:
                raise TaskError(f"{path}: split {split!r} is not one of {sorted(SPLIT_ALIASES)}")
            splits[SPLIT_ALIASES[split]].append(row)
        return splits
    rows = [r for _, r in tagged]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(rows))
    n_eval = max(1, len(rows) // 10)
    if len(rows) < 3:
        raise TaskError(f"{path}: {len(rows)} rows cannot be split into train/dev/test; give at least 3")
    pick = lambda idx: [rows[i] for i in sorted(idx)]  # noqa: E731
    return {"test": pick(order[:n_eval]), "dev": pick(order[n_eval:2 * n_eval]), "train": pick(order[2 * n_eval:])}


def _check_labels(splits: dict[str, list[dict]], kind: str, labels: tuple[str, ...], source: str) -> tuple[str, ...]:
    if kind == "qa":
        return ()
    get = (lambda r: [r["label"]]) if kind in ("single", "pair") else (lambda r: r["tags"])
    if not labels:
        labels = tuple(sorted({x for r in splits["train"] for x in get(r)}))
    allowed = set(labels)
    for split, rows in splits.items():
        for r in rows:
            bad = [x for x in get(r) if x not in allowed]
            if bad:
                raise TaskError(f"{source}: {split} row {r['id']!r} has label {bad[0]!r} not in the declared set "
                                f"{sorted(allowed)}")
    return labels


def load_user_task(path: str | Path, kind: str, name: str | None = None,
                   labels: tuple[str, ...] | list[str] = ()) -> TaskData:
    """A user's task from a CSV/JSONL/Parquet file (or a folder of split files) of a declared type."""
    if kind not in TASK_TYPES:
        raise TaskError(f"task type {kind!r} is not valid; allowed: {', '.join(TASK_TYPES)}")
    path = Path(path)
    if not path.exists():
        raise TaskError(f"{path}: no such file or folder")
    if path.is_dir():
        files = data_files_from_dir(path)
        splits = {s: [] for s in SPLITS}
        for stem, f in files.items():
            if stem not in SPLIT_ALIASES:
                raise TaskError(f"{f}: file name {stem!r} is not a split; allowed: {sorted(SPLIT_ALIASES)}")
            splits[SPLIT_ALIASES[stem]] = [r for _, r in _read_user_file(Path(f), kind)]
    else:
        splits = _split_user_rows(_read_user_file(path, kind), path)
    for split in SPLITS:
        if not splits[split]:
            raise TaskError(f"{path}: no {split} rows")
    labels = _check_labels(splits, kind, tuple(labels), str(path))
    spec = TaskSpec(name=name or path.stem, type=kind, metrics=DEFAULT_METRICS[kind], source=f"file:{path}",
                    labels=labels, description=f"user task from {path}")
    return TaskData(spec, splits)


# ---------------------------------------------------------------- registry and resolution

def task_registry() -> dict[str, TaskSpec]:
    """Every named task: the hub benchmarks, then the built-in offline tasks."""
    return {**HUB_TASKS, **builtin_specs()}


def get_task_spec(name: str) -> TaskSpec:
    registry = task_registry()
    if name not in registry:
        raise TaskError(f"unknown task {name!r}; valid: {', '.join(registry)}, or the groups offline, glue, "
                        "benchmarks, all")
    return registry[name]


def resolve_tasks(spec: str) -> list[str]:
    """'offline' | 'glue' | 'benchmarks' / 'all' | comma-separated names -> task names (checked)."""
    groups = {"offline": list(builtin_specs()), "glue": list(GLUE_TASKS),
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
              data_files: dict[str, str] | str | None = None) -> TaskData:
    """Load a registered task by name (hub benchmark or built-in); ``data_files`` = local hub-schema copy."""
    spec = get_task_spec(name)
    return load_hub_task(name, data_files) if spec.hub is not None else load_builtin(name, cache_dir)


def subsample(rows: list[dict], limit: int, rng: np.random.Generator | None) -> list[dict]:
    """At most ``limit`` rows (0 = all), in their original order; ``rng=None`` uses the fixed split seed."""
    if not limit or len(rows) <= limit:
        return rows
    rng = rng if rng is not None else np.random.default_rng(SPLIT_SEED)
    keep = np.sort(rng.choice(len(rows), size=limit, replace=False))
    return [rows[i] for i in keep]


def with_labels_from_train(data: TaskData) -> TaskData:
    """Fill an empty label set from the train split (tagging: sorted tags; classes: sorted labels)."""
    if data.spec.labels or data.spec.type == "qa":
        return data
    key = (lambda r: [r["label"]]) if data.spec.type in ("single", "pair") else (lambda r: r["tags"])
    labels = tuple(sorted({x for r in data["train"] for x in key(r)}))
    return TaskData(replace(data.spec, labels=labels), data.splits)
