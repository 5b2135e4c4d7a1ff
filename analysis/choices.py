"""What fine-tuning chose on dev, per variant and task: the rate (of ``finetune.lr_grid``) and the epoch (of
``finetune.epochs``), and whether a variant's choice sits at an edge of what was tried.

A contrast against ``none`` is only fair if ``none`` was fine-tuned as well as it can be: when its best rate is
the grid's highest, or its best epoch the last one allowed, a wider grid might have helped it, and the
contrast partly measures the grid. The report shows the choices and says where to widen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

EDGE_SHARE = 0.5  # a variant "sits at an edge" when at least this share of its runs chose it


@dataclass(frozen=True)
class Choice:
    variant: str
    task: str
    runs: int
    rates: dict[float, int]  # rate chosen -> how many runs chose it
    grid: tuple[float, ...]  # the rates tried
    epoch: float  # median epoch at the chosen state (NaN when not recorded)
    max_epochs: float  # finetune.epochs (NaN when not recorded)
    top_rate: float  # share of runs that chose the grid's highest rate (NaN with a one-rate grid)
    bottom_rate: float  # ... its lowest
    last_epoch: float  # share of runs whose chosen state was at the last epoch allowed

    @property
    def edges(self) -> list[str]:
        out = []
        if np.isfinite(self.top_rate) and self.top_rate >= EDGE_SHARE:
            out.append(f"highest rate {self.grid[-1]:g}")
        if np.isfinite(self.bottom_rate) and self.bottom_rate >= EDGE_SHARE:
            out.append(f"lowest rate {self.grid[0]:g}")
        if np.isfinite(self.last_epoch) and self.last_epoch >= EDGE_SHARE:
            out.append(f"last epoch {self.max_epochs:g}")
        return out


def _max_epochs(runs: pd.DataFrame) -> dict[str, float]:
    out = {}
    for run_id, text in zip(runs["run_id"], runs.get("config_json", pd.Series([""] * len(runs)))):
        try:
            out[run_id] = float(json.loads(text)["finetune"]["epochs"])
        except (TypeError, ValueError, KeyError):
            out[run_id] = float("nan")
    return out


def fine_tuning_choices(evals: pd.DataFrame, runs: pd.DataFrame) -> list[Choice]:
    """``evals``: every rate's rows (evals.parquet as written, ``selected`` marking the chosen rate);
    ``runs``: the measure runs. One Choice per (variant, source task) that fine-tuned over a grid or epochs."""
    if evals.empty or "lr" not in evals.columns or "selected" not in evals.columns:
        return []
    measure = runs[runs["phase"] == "measure"]
    variant_of = dict(zip(measure["run_id"], measure["variant"]))
    ft = evals[(evals["mode"] == "finetune") & evals["is_primary"].astype(bool) & evals["run_id"].isin(variant_of)
               & np.isfinite(evals["lr"].astype(float))]
    if ft.empty:
        return []
    key = ft["source_task"].where(ft["source_task"].astype(bool), ft["task"])
    ft = ft.assign(key=key, variant=ft["run_id"].map(variant_of))
    if "epoch" not in ft.columns:  # an export that does not record the epoch
        ft = ft.assign(epoch=float("nan"))
    max_epochs = _max_epochs(measure)
    out = []
    for (variant, task), g in ft.groupby(["variant", "key"], sort=False):
        grid = tuple(sorted(set(g["lr"].astype(float))))
        chosen = g[g["selected"].fillna(True).astype(bool)]
        per_run = chosen.groupby("run_id").agg(lr=("lr", "first"), epoch=("epoch", "mean"))
        if per_run.empty:
            continue
        rates = per_run["lr"].value_counts().sort_index()
        tops = (per_run["lr"] == grid[-1]).mean() if len(grid) > 1 else float("nan")
        bottoms = (per_run["lr"] == grid[0]).mean() if len(grid) > 1 else float("nan")
        cap = pd.Series([max_epochs.get(r, float("nan")) for r in per_run.index], index=per_run.index)
        epochs = per_run["epoch"].astype(float)
        last = float((epochs >= cap - 1e-9).mean()) if epochs.notna().any() and cap.notna().all() else float("nan")
        out.append(Choice(variant, task, len(per_run), {float(k): int(v) for k, v in rates.items()}, grid,
                          float(epochs.median()) if epochs.notna().any() else float("nan"),
                          float(cap.max()) if cap.notna().any() else float("nan"), float(tops), float(bottoms), last))
    return out


def choices_section(choices: list[Choice]) -> list[str]:
    """The report's section: per variant and task, the rates and the epoch chosen on dev, and the edges."""
    if not choices:
        return []
    rows = []
    for c in choices:
        rates = ", ".join(f"{r:g} x{n}" for r, n in c.rates.items())
        epoch = "" if not np.isfinite(c.epoch) else f"{c.epoch:g}" + (
            f" of {c.max_epochs:g}" if np.isfinite(c.max_epochs) else "")
        rows.append(f"| {c.variant} | {c.task} | {rates} (of {', '.join(f'{g:g}' for g in c.grid)}) | {epoch} | "
                    f"{'; '.join(c.edges) or '-'} |")
    lines = ["## What fine-tuning chose on dev", "",
             "Per variant and task, the rates chosen on dev (how many pretraining runs chose each, of the rates "
             "tried, a step past the grid's edge included where finetune.extend_edges took one) and the median epoch of the state kept. A variant whose choice sits at an edge for at least "
             f"half its runs might have done better past it, and its contrasts then partly measure the grid.", "",
             "| variant | task | rates chosen | epoch chosen | at an edge |", "|---|---|---|---|---|", *rows, ""]
    none_edges = [c for c in choices if c.variant == "none" and c.edges]
    if none_edges:
        lines += ["`none` sits at an edge on " + ", ".join(f"{c.task} ({'; '.join(c.edges)})" for c in none_edges)
                  + ": widen `finetune.lr_grid` (or raise `finetune.extend_edges`, which grows it past an edge on dev) "
                  "or `finetune.epochs` there before reading its contrasts as fair.", ""]
    return lines


def read_choices(export_dir: str | Path) -> list[Choice]:
    """From an export directory: evals.parquet with every rate's rows (``analysis.export`` keeps only the chosen)."""
    from analysis.export import _read

    root = Path(export_dir)
    try:
        evals, runs = _read(root / "evals.parquet"), _read(root / "runs.parquet")
    except Exception:  # an export without the files: the report has said so already
        return []
    return fine_tuning_choices(evals, runs)
