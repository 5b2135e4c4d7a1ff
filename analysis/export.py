"""Reading a sweep export (runs / evals / predictions Parquet) and checking it against the schema.

The schema is ``trainables.schema``, the one definition the sweeps write with: one row per
pretraining run, one per (run, task, fine-tuning seed, metric), one per predicted test example.
``predictions.parquet`` may be absent (estimates then fall back to the stored eval values, with
intervals over pretraining seeds only). A file whose schema version is newer than this code's is
refused with one line; older versions are read (renamed columns are renamed on reading). Eval rows of
fine-tuning learning rates that were not chosen on dev (``selected`` false) are left out here.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow.parquet as pq

from trainables import schema


class ExportError(ValueError):
    """An export that does not follow the schema (missing file or column, unknown value, newer version)."""


class Export(NamedTuple):
    runs: pd.DataFrame
    evals: pd.DataFrame
    predictions: pd.DataFrame  # empty (with the schema's columns) when the file is absent

    @property
    def objectives(self) -> tuple[str, ...]:
        """The objectives with a weight column in runs (``<name>_weight``)."""
        return schema.objectives_in(self.runs.columns)


def required_columns(table: str) -> tuple[str, ...]:
    return tuple(c.name for c in schema.columns(table) if c.required)


def _check_columns(df: pd.DataFrame, required: tuple[str, ...], name: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ExportError(f"{name} lacks columns {missing}; required: {list(required)}")


def check_export(export: Export) -> Export:
    """Raise ExportError on a schema violation; return the export with normalised dtypes."""
    _check_columns(export.runs, required_columns("runs"), "runs.parquet")
    if not export.objectives:
        raise ExportError("runs.parquet has no <objective>_weight column; at least one is required")
    _check_columns(export.evals, required_columns("evals"), "evals.parquet")
    _check_columns(export.predictions, required_columns("predictions"), "predictions.parquet")
    for col, allowed in (("phase", schema.PHASES), ("status", schema.STATUSES)):
        bad = sorted(set(export.runs[col]) - set(allowed))
        if bad:
            raise ExportError(f"runs.parquet column {col!r} has {bad}; allowed: {list(allowed)}")
    runs = export.runs.assign(collapsed=export.runs["collapsed"].fillna(False).astype(bool))
    evals = export.evals.assign(is_primary=export.evals["is_primary"].fillna(False).astype(bool))
    if "selected" in evals.columns:  # fine-tuning rates not chosen on dev: in the file, not in the estimates
        evals = evals[evals["selected"].fillna(True).astype(bool)]
    return Export(runs, evals, export.predictions)


def _read(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several classes for a damaged file
        raise ExportError(f"{path} is not a readable Parquet file: {str(err).splitlines()[0]}") from None
    version = schema.version_of(table.schema.metadata)
    try:
        schema.check_version(version, str(path))
    except schema.SchemaError as err:
        raise ExportError(str(err)) from None
    return table.to_pandas().rename(columns=schema.upgrade_columns(table.column_names, version))


def load_export(export_dir: str | Path) -> Export:
    """The three tables of an export directory, checked against the schema."""
    root = Path(export_dir)
    if not root.is_dir():
        raise ExportError(f"export directory {str(root)!r} does not exist")
    tables = {}
    for name in schema.TABLES:
        path = root / f"{name}.parquet"
        if path.exists():
            tables[name] = _read(path)
        elif name == "predictions":
            tables[name] = pd.DataFrame({c: pd.Series(dtype=object) for c in required_columns(name)})
        else:
            raise ExportError(f"{path} is missing; an export holds runs.parquet and evals.parquet "
                              "(and predictions.parquet)")
    return check_export(Export(**tables))
