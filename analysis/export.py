"""Reading a sweep export (runs / evals / predictions Parquet) and checking it against the schema.

The schema is the contract between sweeps and analysis (see the project notes): one row per
pretraining run, one per (run, task, fine-tuning seed, metric), one per predicted test example.
``predictions.parquet`` may be absent (estimates then fall back to the stored eval values, with
intervals over pretraining seeds only).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

RUN_COLUMNS = ("run_id", "phase", "variant", "mlm_weight", "nsp_weight", "sop_weight", "mask_ratio",
               "pretrain_seed", "status", "collapsed", "probe_score")
EVAL_COLUMNS = ("run_id", "task", "finetune_seed", "mode", "metric", "value", "primary")
PREDICTION_COLUMNS = ("run_id", "task", "finetune_seed", "mode", "example_id", "prediction", "gold")
PHASES = ("search", "measure")
STATUSES = ("completed", "stopped_early", "failed")


class ExportError(ValueError):
    """An export that does not follow the schema (missing file or column, unknown value)."""


class Export(NamedTuple):
    runs: pd.DataFrame
    evals: pd.DataFrame
    predictions: pd.DataFrame  # empty (with the schema's columns) when the file is absent


def _check_columns(df: pd.DataFrame, required: tuple[str, ...], name: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ExportError(f"{name} lacks columns {missing}; required: {list(required)}")


def check_export(export: Export) -> Export:
    """Raise ExportError on a schema violation; return the export with normalised dtypes."""
    _check_columns(export.runs, RUN_COLUMNS, "runs.parquet")
    _check_columns(export.evals, EVAL_COLUMNS, "evals.parquet")
    _check_columns(export.predictions, PREDICTION_COLUMNS, "predictions.parquet")
    for col, allowed in (("phase", PHASES), ("status", STATUSES)):
        bad = sorted(set(export.runs[col]) - set(allowed))
        if bad:
            raise ExportError(f"runs.parquet column {col!r} has {bad}; allowed: {list(allowed)}")
    runs = export.runs.assign(collapsed=export.runs["collapsed"].fillna(False).astype(bool))
    evals = export.evals.assign(primary=export.evals["primary"].fillna(False).astype(bool))
    return Export(runs, evals, export.predictions)


def load_export(export_dir: str | Path) -> Export:
    """The three tables of an export directory, checked against the schema."""
    root = Path(export_dir)
    if not root.is_dir():
        raise ExportError(f"export directory {str(root)!r} does not exist")
    tables = {}
    for name in ("runs", "evals", "predictions"):
        path = root / f"{name}.parquet"
        if path.exists():
            tables[name] = pd.read_parquet(path)
        elif name == "predictions":
            tables[name] = pd.DataFrame({c: pd.Series(dtype=object) for c in PREDICTION_COLUMNS})
        else:
            raise ExportError(f"{path} is missing; an export holds runs.parquet and evals.parquet "
                              "(and predictions.parquet)")
    return check_export(Export(**tables))
