"""User task files: ``load_user_task(path, type)`` reads CSV / JSONL / Parquet of a declared task type.

A file, or a folder holding ``train.*``, ``dev.*``/``validation.*`` and ``test.*``. A single file is
split 80/10/10 with a fixed seed unless it has a ``split`` column. Rows are parsed and checked by the
task type (``trainables.task_types``); bad files raise ``TaskError`` with one line naming the file and
the problem.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from trainables.task_types import get_task_type
from trainables.tasks.hub import data_files_from_dir
from trainables.tasks.spec import SPLIT_SEED, SPLITS, TaskData, TaskError, TaskSpec

SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "test": "test"}


def _utf8_text(path: Path) -> str:
    """The file's text; a one-line TaskError at the first byte that is not UTF-8 (a BOM is dropped)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                        "re-encode it as UTF-8") from None
    return text.removeprefix("\ufeff")


def _read_table(path: Path) -> list[dict]:
    import pandas as pd

    try:
        if path.suffix == ".csv":
            frame = pd.read_csv(io.StringIO(_utf8_text(path)), dtype=str, keep_default_na=False)
        elif path.suffix in (".jsonl", ".json"):
            frame = pd.read_json(io.StringIO(_utf8_text(path)), lines=path.suffix == ".jsonl", dtype=False)
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


def _read_user_file(path: Path, kind: str) -> list[tuple[str | None, dict]]:
    task_type = get_task_type(kind)
    raws = _read_table(path)
    missing = [c for c in task_type.columns if c not in raws[0]]
    if missing:
        raise TaskError(f"{path}: missing column(s) {missing}; a {kind!r} task needs {list(task_type.columns)}")
    return [(str(r["split"]) if "split" in r else None, task_type.parse_row(r, path, i)) for i, r in enumerate(raws)]


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
    get = get_task_type(kind).labels_of
    if get is None:
        return ()
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
    task_type = get_task_type(kind)
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
    spec = TaskSpec(name=name or path.stem, type=kind, metrics=task_type.metrics, source=f"file:{path}",
                    labels=labels, description=f"user task from {path}")
    return TaskData(spec, splits)
