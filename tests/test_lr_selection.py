"""The fine-tuning learning rate is chosen per (run, task) on dev, never on test, over fine-tuning seeds."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from trainables.presets import build_config
from trainables.finetune import run_finetuning
from trainables.finetune.selection import select_on_dev
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES


def _evals(rows):
    return pd.DataFrame([dict(run_id=r, task=t, finetune_seed=s, mode="finetune", metric="accuracy", value=test,
                              is_primary=True, source_task=src, lr=lr, dev_value=dev)
                         for r, t, s, lr, dev, test, src in rows])


def test_the_rate_best_on_dev_wins_even_when_another_is_best_on_test():
    evals = _evals([("full-s0", "sst", 0, 1e-4, 0.70, 0.90, "sst"), ("full-s0", "sst", 0, 1e-3, 0.80, 0.60, "sst"),
                    ("none-s0", "sst", 0, 1e-4, 0.65, 0.50, "sst"), ("none-s0", "sst", 0, 1e-3, 0.55, 0.70, "sst")])
    preds = pd.DataFrame([dict(run_id=r, task="sst", finetune_seed=0, mode="finetune", example_id="a", prediction="x",
                               gold="x", lr=lr) for r in ("full-s0", "none-s0") for lr in (1e-4, 1e-3)])
    out, kept = select_on_dev(evals, preds)
    chosen = out[out.selected].set_index("run_id")["lr"]
    assert chosen["full-s0"] == 1e-3 and chosen["none-s0"] == 1e-4  # per run: pretrained and random differ
    assert set(zip(kept.run_id, kept.lr)) == {("full-s0", 1e-3), ("none-s0", 1e-4)}


def test_the_choice_averages_fine_tuning_seeds_and_is_shared_by_reported_splits():
    evals = _evals([("r", "mnli_m", s, lr, dev, 0.5, "mnli") for s, lr, dev in
                    ((0, 1e-4, 0.9), (1, 1e-4, 0.1), (0, 1e-3, 0.6), (1, 1e-3, 0.6))]
                   + [("r", "mnli_mm", s, lr, dev, 0.5, "mnli") for s, lr, dev in
                      ((0, 1e-4, 0.9), (1, 1e-4, 0.1), (0, 1e-3, 0.6), (1, 1e-3, 0.6))])
    out, _ = select_on_dev(evals, pd.DataFrame(columns=["run_id", "task", "finetune_seed", "mode", "lr"]))
    assert set(out[out.selected].lr) == {1e-3} and out.selected.sum() == 4  # mean 0.6 beats mean 0.5


def test_a_grid_fine_tunes_at_every_rate_and_exports_the_choice(tiny_checkpoint, tmp_path):
    from trainables.finetune import write_tables

    cfg = build_config("smoke", overrides=["finetune.lr_grid=1e-5,3e-3", "finetune.epochs=2", "run.device=cpu"])
    task = load_hub_task("mrpc", FIXTURES / "glue_mrpc")
    result = run_finetuning(tiny_checkpoint, [], [0, 1], cfg, datasets=[task])
    assert {e.lr for e in result.evals} == {1e-5, 3e-3} and all(np.isfinite(e.dev_value) for e in result.evals)
    write_tables(result, tmp_path)
    evals = pq.read_table(tmp_path / "evals.parquet").to_pandas()
    preds = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    prim = evals[evals.is_primary]
    best = prim.groupby("lr")["dev_value"].mean().idxmax()
    assert set(prim[prim.selected].lr) == {best} and set(preds.lr) == {best}
    assert len(preds) == 2 * len(task["test"])  # one rate's predictions per fine-tuning seed
