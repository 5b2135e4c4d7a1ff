"""Hub benchmarks (GLUE, CoNLL-2003, SQuAD v1.1): their specs and the mapping of hub rows onto ours.

They load with ``datasets.load_dataset`` by hub name, or -- through the SAME mapping code -- from local
files in the hub's schema (``data_files``), which is how the tests run and how users point a benchmark
at a local copy. Splits: GLUE and SQuAD test labels are hidden, so ``test`` is the hub's validation
split (the reported numbers, as in the papers) and ``dev`` is a fixed held-out slice of the hub's
train split (``HubSource.dev_size``, drawn with a fixed seed so it is the same for every run): model
selection and probe ranking use ``dev``, never ``test``. CoNLL-2003 has its own validation and test
splits. MNLI is ONE task ``mnli`` (trained once) with two test splits: ``test`` (validation_matched)
and ``test_mm`` (validation_mismatched), reported as ``mnli_m`` and ``mnli_mm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from trainables.tasks.spec import SPLIT_SEED, HubSource, TaskData, TaskError, TaskSpec


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


ROW_MAPPERS: dict[str, Callable[[Any, TaskSpec, str], list[dict]]] = {
    "glue": lambda ds, spec, arg: _glue_rows(ds, spec),
    "conll": _conll_rows,
    "squad": lambda ds, spec, arg: _squad_rows(ds, spec),
}


def _map_rows(ds: Any, spec: TaskSpec) -> list[dict]:
    kind, _, arg = spec.hub.row_fn.partition(":")
    if kind not in ROW_MAPPERS:
        raise TaskError(f"task {spec.name!r}: row mapping {spec.hub.row_fn!r} is not valid; allowed: "
                        f"{', '.join(ROW_MAPPERS)}")
    missing = [c for c in _hub_columns(spec) if c not in ds.column_names]
    if missing:
        raise TaskError(f"task {spec.name!r}: data lacks column(s) {missing}; its hub schema has "
                        f"{list(_hub_columns(spec))}")
    return ROW_MAPPERS[kind](ds, spec, arg)


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
    spec = HUB_TASKS.get(name)
    if spec is None:
        raise TaskError(f"task {name!r} is not a hub benchmark; hub tasks: {', '.join(HUB_TASKS)}")
    if isinstance(data_files, (str, Path)):
        data_files = data_files_from_dir(data_files)
    splits = {ours: _map_rows(_load_hub_split(spec, hub, data_files), spec) for ours, hub in spec.hub.splits.items()}
    if "dev" not in splits:
        splits["train"], splits["dev"] = _carve_dev(splits["train"], spec.hub.dev_size)
    return TaskData(spec, splits)
