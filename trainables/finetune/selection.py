"""The fine-tuning learning rate, chosen on dev per (pretraining run, task), never on test.

With ``finetune.lr_grid`` every (run, task, fine-tuning seed) is fine-tuned at every rate; the rate whose
mean dev value of the selecting metric (``TaskSpec.selection_metric``: macro-F1 for label tasks, which a
constant prediction cannot win) over the fine-tuning seeds is highest is the run's choice for that task (a
pretrained and a random encoder prefer different rates, so one fixed rate would make "variant - none"
a property of that rate). Every rate's rows stay in evals.parquet with ``selected``; only the chosen
rate's predictions are exported, and the estimates use only selected rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def selecting_rows(evals: pd.DataFrame) -> pd.DataFrame:
    """The rows whose dev value chooses: those marked ``selects`` (``TaskSpec.selection_metric``) per (run, task,
    mode) where the export recorded it, else the headline metric's (exports written before ``selects``)."""
    flag = evals["selects"].fillna(False).astype(bool) if "selects" in evals.columns else \
        pd.Series(False, index=evals.index)
    group = [evals["run_id"], evals["task"], evals["mode"]]
    marked = flag.groupby(group).transform("any")
    return evals[flag | (~marked & evals["is_primary"].astype(bool))]


def chosen_rates(evals: pd.DataFrame) -> pd.DataFrame:
    """(run_id, task key, lr) chosen per (run, source task, mode): mean dev value of the selecting metric over
    seeds (``selecting_rows``). Only rates every fine-tuning seed of the (run, task, mode) tried compete: a rate one
    seed added at the grid's edge (``finetune.extend_edges``) is compared over that seed alone otherwise."""
    chooser = selecting_rows(evals)
    key = chooser["source_task"].where(chooser["source_task"].astype(bool), chooser["task"]) \
        if "source_task" in chooser.columns else chooser["task"]
    prim = chooser.assign(key=key)[np.isfinite(chooser["lr"].astype(float))]
    seeds = prim.groupby(["run_id", "key", "mode"])["finetune_seed"].transform("nunique")
    per_rate = prim.groupby(["run_id", "key", "mode", "lr"])["finetune_seed"].transform("nunique")
    prim = prim[per_rate == seeds]
    mean = prim.groupby(["run_id", "key", "mode", "lr"], as_index=False)["dev_value"].mean()
    mean = mean.sort_values(["run_id", "key", "mode", "dev_value", "lr"], ascending=[True, True, True, False, True],
                            na_position="last")
    return mean.drop_duplicates(["run_id", "key", "mode"])[["run_id", "key", "mode", "lr"]]


def select_on_dev(evals: pd.DataFrame, predictions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mark each eval row ``selected`` when its rate is the run's choice for its task (rows without a
    rate, the probe's, are selected); keep only the chosen rate's predictions."""
    if evals.empty or "lr" not in evals.columns:
        return evals.assign(selected=True), predictions
    key = evals["source_task"].where(evals["source_task"].astype(bool), evals["task"])
    chosen = chosen_rates(evals).rename(columns={"lr": "chosen"})
    merged = evals.assign(key=key).merge(chosen, on=["run_id", "key", "mode"], how="left")
    no_rate = ~np.isfinite(merged["lr"].astype(float))
    selected = no_rate | np.isclose(merged["lr"].astype(float), merged["chosen"].astype(float))
    out = evals.assign(selected=selected.to_numpy())
    keep = out.loc[out["selected"], ["run_id", "task", "finetune_seed", "mode", "lr"]].drop_duplicates()
    if predictions.empty or "lr" not in predictions.columns:
        return out, predictions
    both = predictions.merge(keep.assign(_keep=True), on=["run_id", "task", "finetune_seed", "mode", "lr"], how="left")
    finite = np.isfinite(predictions["lr"].astype(float)).to_numpy()
    mask = both["_keep"].fillna(False).to_numpy().astype(bool) | ~finite
    return out, predictions[mask]
