"""Fixture exports with known values: runs / evals / predictions Parquet files in the export schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

WEIGHTS = {"full": (1, 1, 0), "mlm_only": (1, 0, 0), "nsp_only": (0, 1, 0), "sop_only": (0, 0, 1),
           "mlm_sop": (1, 0, 1), "none": (0, 0, 0), "best_mix": (1, 0.5, 0)}


def _run_row(run_id, variant, seed, phase="measure", status="completed", collapsed=False,
             mask_ratio=0.15, weights=None, probe_score=float("nan"), steps=100):
    w = weights or WEIGHTS.get(variant, (1, 1, 0))
    return dict(run_id=run_id, phase=phase, variant=variant, mlm_weight=float(w[0]), nsp_weight=float(w[1]),
                sop_weight=float(w[2]), mask_ratio=mask_ratio, input_format="pair", pretrain_seed=seed,
                status=status, stop_reason="" if status == "completed" else "x", steps=steps,
                tokens_seen=steps * 1000, epochs=0.0 if variant == "none" else 1.5, wall_time_s=1.0,
                mlm_acc=0.1, mlm_ppl=100.0, pair_acc_nsp=0.5, pair_acc_sop=0.5, cls_cosine=0.5,
                token_cosine=0.5, collapsed=collapsed, probe_score=probe_score, checkpoint="",
                config_json="{}")


def write_export(root: Path, means: dict[str, float], tasks=("sst", "topic"), seeds=(0, 1, 2),
                 finetune_seeds=(0, 1), n_examples=200, jitter=(-0.03, 0.0, 0.03), collapsed=(),
                 extra_runs=(), search=None, with_predictions=True) -> Path:
    """An export where variant v scores exactly ``means[v]`` (accuracy) on every task, averaged over seeds.

    Pretraining seed i shifts the accuracy by ``jitter[i]`` (symmetric, so the mean is exact); each
    task's test set has ``n_examples`` examples and the first round(acc * n) of them are correct.
    ``extra_runs``: (variant, seed, status) of measure runs that must not count (no evals written).
    ``search``: list of (mlm_weight, nsp_weight, mask_ratio, probe_score, status, steps) trials.
    """
    root.mkdir(parents=True, exist_ok=True)
    runs, evals, preds = [], [], []
    for variant, mean in means.items():
        for i, seed in enumerate(seeds):
            run_id = f"{variant}-s{seed}"
            runs.append(_run_row(run_id, variant, seed, collapsed=variant in collapsed))
            acc = mean + jitter[i % len(jitter)]
            k = int(round(acc * n_examples))
            for task in tasks:
                for fs in finetune_seeds:
                    evals.append(dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune",
                                      metric="accuracy", value=k / n_examples, is_primary=True,
                                      n_examples=n_examples, wall_time_s=1.0))
                    evals.append(dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune",
                                      metric="macro_f1", value=0.0, is_primary=False,
                                      n_examples=n_examples, wall_time_s=1.0))
                    gold = np.array(["a", "b"] * (n_examples // 2))
                    pred = np.where(np.arange(n_examples) < k, gold, np.where(gold == "a", "b", "a"))
                    preds += [dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune",
                                   example_id=f"{task}-{j}", prediction=str(p), gold=str(g))
                              for j, (p, g) in enumerate(zip(pred, gold))]
    for j, (variant, seed, status) in enumerate(extra_runs):
        runs.append(_run_row(f"extra-{j}", variant, seed, status=status))
    for j, (mw, nw, mr, score, status, steps) in enumerate(search or []):
        runs.append(_run_row(f"trial-{j}", "custom", 0, phase="search", status=status, mask_ratio=mr,
                             weights=(mw, nw, 0.0), probe_score=score, steps=steps))
    pd.DataFrame(runs).to_parquet(root / "runs.parquet")
    pd.DataFrame(evals).to_parquet(root / "evals.parquet")
    if with_predictions:
        pd.DataFrame(preds).to_parquet(root / "predictions.parquet")
    return root


def search_trials(n=16, seed=0):
    """Trials whose probe score rises with the MLM weight and falls with the mask ratio."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        mw, nw, mr = rng.uniform(0.1, 2), rng.uniform(0, 1), rng.uniform(0.1, 0.4)
        out.append((mw, nw, mr, 0.5 + 0.1 * mw - 0.3 * mr + rng.normal(0, 0.005), "completed", 100))
    out.append((1.0, 1.0, 0.15, 0.99, "stopped_early", 30))  # must not count
    return out


SEED_MEANS = {"full": 0.8, "mlm_only": 0.7, "nsp_only": 0.6, "none": 0.5}

