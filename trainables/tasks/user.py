"""User task files: ``load_user_task(path, type)`` reads CSV / JSONL / Parquet of a declared task type.

A file, or a folder holding ``train.*``, ``dev.*``/``validation.*`` and ``test.*``. A single file is
split 80/10/10 with a fixed seed unless it has a ``split`` column. CSV and JSON must be UTF-8 (the
error names the first bad byte); JSON and Parquet values keep their types (an int label column with a
null is not turned into floats).

Every row must have a value in each of the type's columns (and in ``split`` when the file has one):
an absent key, a null, a NaN or blank text (a CSV's empty cell) is missing; then the task type parses
and checks the row (``trainables.task_types``; a tagging row needs at least one token). Rows are
numbered from 1 in file order, not counting a CSV's header or a JSONL's blank lines. A bad row is an
error, or with ``bad_rows="drop"`` it is dropped and the drops are counted in one warning per file.
The dev/test labels must be among the declared (or train) ones, and the train rows must hold at
least two (one class trains a constant that scores 1.0; QA has no labels). Every error is a
``TaskError`` of one line naming the file and the problem.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np

from trainables.task_types import get_task_type
from trainables.tasks.hub import data_files_from_dir
from trainables.tasks.spec import SPLIT_SEED, SPLITS, TaskData, TaskError, TaskSpec

SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "test": "test"}
BAD_ROWS = ("error", "drop")

log = logging.getLogger(__name__)


def _utf8_text(path: Path) -> str:
    """The file's text; a one-line TaskError at the first byte that is not UTF-8 (a BOM is dropped)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                        "re-encode it as UTF-8") from None
    return text.removeprefix("\ufeff")


def _json_value(path: Path, text: str, line: int = 1):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: line {line + e.lineno - 1} is not valid JSON ({e.msg})") from None


def _json_rows(path: Path) -> list[dict]:
    """JSONL (one object a line, blank lines skipped) or a JSON array of objects, values as written
    (a column-oriented JSON table goes through pandas)."""
    text = _utf8_text(path)
    if path.suffix == ".jsonl":
        rows = [(n, _json_value(path, line, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    elif text.lstrip().startswith("["):
        rows = [(1, row) for row in _json_value(path, text)]
    else:
        import pandas as pd

        return pd.read_json(io.StringIO(text), dtype=False).to_dict(orient="records")
    for n, row in rows:
        if not isinstance(row, dict):
            raise TaskError(f"{path}: line {n} holds a JSON {type(row).__name__}, not an object (one row)")
    return [row for _, row in rows]


def _read_table(path: Path) -> list[dict]:
    """A file's rows as dicts. JSON and Parquet values keep their types (a null stays None, an int column
    with a null stays int); CSV cells are strings, an empty cell \"\"."""
    import pandas as pd
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".csv":
            frame = pd.read_csv(io.StringIO(_utf8_text(path)), dtype=str, keep_default_na=False)
            rows = frame.to_dict(orient="records")
        elif path.suffix in (".jsonl", ".json"):
            rows = _json_rows(path)
        elif path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
        else:
            raise TaskError(f"{path}: unsupported file type {path.suffix!r}; allowed: .csv, .jsonl, .json, .parquet")
    except (pd.errors.EmptyDataError, ValueError) as err:
        if isinstance(err, TaskError):
            raise
        raise TaskError(f"{path}: empty or unreadable ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if not rows:
        raise TaskError(f"{path}: empty file (no rows)")
    return rows


def _missing(raw: dict, column: str) -> str | None:
    """Why a row has no value in ``column`` (absent, null, NaN, blank text), or None when it has one."""
    import pandas as pd

    if column not in raw:
        return "absent"
    value = raw[column]
    if isinstance(value, str):
        return None if value.strip() else "empty"
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "null" if value is None or value is pd.NA else "NaN"
    return None


def _parse_rows(raws: list[dict], task_type, columns: tuple[str, ...], path: Path,
                bad_rows: str) -> list[tuple[str | None, dict]]:
    """Every row checked for a value in each column, then parsed by the task type; a bad row is a
    one-line error (``bad_rows="error"``) or dropped and counted in one warning (``"drop"``)."""
    tagged, dropped = [], []
    for i, raw in enumerate(raws):
        try:
            for col in columns:
                why = _missing(raw, col)
                if why:
                    raise TaskError(f"{path}: row {i + 1} column {col!r} has no value ({why})")
            tagged.append((str(raw["split"]) if "split" in columns else None, task_type.parse_row(raw, path, i)))
        except TaskError as err:
            if bad_rows == "error":
                raise
            dropped.append(str(err).removeprefix(f"{path}: "))
    if dropped:
        log.warning("%s: dropped %d of %d rows (bad_rows=drop); the first: %s", path, len(dropped), len(raws),
                    dropped[0])
    if not tagged:
        raise TaskError(f"{path}: all {len(raws)} rows are bad (the first: {dropped[0]})")
    return tagged


def _read_user_file(path: Path, kind: str, bad_rows: str, with_split: bool) -> list[tuple[str | None, dict]]:
    """(split or None, parsed row) per good row; ``with_split``: a ``split`` column is read (and required
    in every row when the file has one)."""
    task_type = get_task_type(kind)
    raws = _read_table(path)
    present = {key for raw in raws for key in raw}
    missing = [c for c in task_type.columns if c not in present]
    if missing:
        raise TaskError(f"{path}: missing column(s) {missing}; a {kind!r} task needs {list(task_type.columns)}")
    columns = task_type.columns + (("split",) if with_split and "split" in present else ())
    return _parse_rows(raws, task_type, columns, path, bad_rows)


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
    """The label set (declared, or the train rows'), with every row's labels in it and at least two
    labels seen in train: one class trains a constant classifier that scores 1.0 on its own test rows."""
    task_type = get_task_type(kind)
    get = task_type.labels_of
    if get is None:
        return ()
    seen = sorted({x for r in splits["train"] for x in get(r)})
    declared = bool(labels)
    labels = labels or tuple(seen)
    allowed = set(labels)
    for split, rows in splits.items():
        for r in rows:
            bad = [x for x in get(r) if x not in allowed]
            if bad:
                where = "the declared set" if declared else "the train rows' labels"
                raise TaskError(f"{source}: {split} row {r['id']!r} has label {bad[0]!r} not in {where} "
                                f"{sorted(allowed)}")
    if len(seen) < 2:  # the label column is a labelled type's last column (label, tags)
        only = repr(seen[0]) if seen else "none"
        raise TaskError(f"{source}: column {task_type.columns[-1]!r} has one label only ({only}) across the train "
                        f"rows; a {kind!r} task needs at least two")
    return labels


def load_user_task(path: str | Path, kind: str, name: str | None = None,
                   labels: tuple[str, ...] | list[str] = (), bad_rows: str = "error") -> TaskData:
    """A user's task from a CSV/JSONL/Parquet file (or a folder of split files) of a declared type;
    ``bad_rows="drop"`` drops rows with a missing or invalid value (counted in a warning) instead of
    raising on the first."""
    task_type = get_task_type(kind)
    path = Path(path)
    if bad_rows not in BAD_ROWS:
        raise TaskError(f"{path}: bad_rows {bad_rows!r} is not valid; allowed: {', '.join(BAD_ROWS)}")
    if not path.exists():
        raise TaskError(f"{path}: no such file or folder")
    if path.is_dir():
        files = data_files_from_dir(path)
        splits = {s: [] for s in SPLITS}
        for stem, f in files.items():
            if stem not in SPLIT_ALIASES:
                raise TaskError(f"{f}: file name {stem!r} is not a split; allowed: {sorted(SPLIT_ALIASES)}")
            splits[SPLIT_ALIASES[stem]] = [r for _, r in _read_user_file(Path(f), kind, bad_rows, False)]
    else:
        splits = _split_user_rows(_read_user_file(path, kind, bad_rows, True), path)
    for split in SPLITS:
        if not splits[split]:
            raise TaskError(f"{path}: no {split} rows")
    labels = _check_labels(splits, kind, tuple(labels), str(path))
    spec = TaskSpec(name=name or path.stem, type=kind, metrics=task_type.metrics, source=f"file:{path}",
                    labels=labels, description=f"user task from {path}")
    return TaskData(spec, splits)
