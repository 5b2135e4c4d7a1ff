"""The fine-tuning learning rate, chosen on dev per (pretraining run, task), never on test.

With ``finetune.lr_grid`` every (run, task, fine-tuning seed) is fine-tuned at every rate; the rate whose
mean dev headline metric over the fine-tuning seeds is highest is the run's choice for that task (a
pretrained and a random encoder prefer different rates, so one fixed rate would make "variant - none"
a property of that rate). Every rate's rows stay in evals.parquet with ``selected``; only the chosen
rate's predictions are exported, and the estimates use only selected rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def chosen_rates(evals: pd.DataFrame) -> pd.DataFrame:
    """(run_id, task key, lr) chosen per (run, source task, mode): mean dev headline metric over seeds."""
    key = evals["source_task"].where(evals["source_task"].astype(bool), evals["task"]) \
        if "source_task" in evals.columns else evals["task"]
    prim = evals.assign(key=key)[evals["is_primary"] & np.isfinite(evals["lr"].astype(float))]
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
