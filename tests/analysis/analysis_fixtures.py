"""Fixture exports with known values: runs / evals / predictions Parquet files in the export schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trainables.schema import COLLAPSE_CLS_COSINE, COLLAPSE_TOKEN_COSINE

OBJECTIVES = ("mlm", "nsp", "sop", "rtd")
# name -> (objectives on, input format), as the trainables side records them (schema 2)
VARIANTS = {"full": ({"mlm": 1, "nsp": 1}, "nsp_pairs"), "mlm_only": ({"mlm": 1}, "single"),
            "mlm_pairs": ({"mlm": 1}, "nsp_pairs"), "nsp_only": ({"nsp": 1}, "nsp_pairs"),
            "sop_only": ({"sop": 1}, "sop_pairs"), "mlm_sop": ({"mlm": 1, "sop": 1}, "sop_pairs"),
            "electra": ({"rtd": 1}, "single"), "electra_nsp": ({"rtd": 1, "nsp": 1}, "nsp_pairs"),
            "none": ({}, "single"), "best_mix": ({"mlm": 1, "nsp": 0.5}, "nsp_pairs")}


def _run_row(run_id, variant, seed, phase="measure", status="completed", collapsed=False, mask_ratio=0.15,
             weights=None, probe_score=float("nan"), steps=100, objectives=OBJECTIVES, legacy_format=False,
             cosines=(0.5, 0.5), variants=None):
    on, fmt = {**VARIANTS, **(variants or {})}.get(variant, ({"mlm": 1, "nsp": 1}, "nsp_pairs"))
    if weights is not None:  # (mlm, nsp, sop) of a search trial or a custom run
        on = {o: w for o, w in zip(("mlm", "nsp", "sop"), weights) if w}
    if legacy_format:  # schema-1 exports recorded 'pair' for both kinds of pairs
        fmt = "pair" if fmt.endswith("_pairs") else fmt
    weight = {f"{o}_weight": float(on.get(o, 0.0)) for o in objectives}
    return dict(run_id=run_id, phase=phase, variant=variant, **weight,
                mask_ratio=mask_ratio, input_format=fmt, pretrain_seed=seed, status=status,
                stop_reason="" if status == "completed" else "x", steps=steps, tokens_seen=steps * 1000,
                epochs=0.0 if variant == "none" else 1.5, wall_time_s=1.0, mlm_acc=0.1, mlm_ppl=100.0,
                pair_acc_nsp=0.5, pair_acc_sop=0.5, token_cosine=cosines[0], cls_cosine=cosines[1],
                collapsed=collapsed, probe_score=probe_score, checkpoint="", config_json="{}")


def _task_rows(run_id, task, fs, acc, n_examples, source="", dev=None, constant=False):
    """Eval rows and predictions of one fine-tuning; ``dev``: the dev accuracy (None: no dev column values);
    ``constant``: every prediction is 'a' (fine-tuning stuck at one class: accuracy 0.5)."""
    k = n_examples // 2 if constant else int(round(acc * n_examples))
    dev_value = float("nan") if dev is None else round(dev * n_examples) / n_examples
    common = dict(n_examples=n_examples, wall_time_s=1.0, source_task=source or task, positive_label="", lr=1e-4,
                  selected=True)
    ev = [dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune", metric="accuracy", value=k / n_examples,
               is_primary=True, dev_value=dev_value, **common),
          dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune", metric="macro_f1", value=0.0,
               is_primary=False, dev_value=float("nan"), **common)]
    gold = np.array(["a", "b"] * (n_examples // 2))
    pred = np.where(np.arange(n_examples) < k, gold, np.where(gold == "a", "b", "a"))
    if constant:
        pred = np.full(n_examples, "a")
    preds = [dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune", example_id=f"{task}-{j}",
                  prediction=str(p), gold=str(g)) for j, (p, g) in enumerate(zip(pred, gold))]
    return ev, preds


def write_export(root: Path, means: dict[str, float], tasks=("sst", "topic"), seeds=(0, 1, 2),
                 finetune_seeds=(0, 1), n_examples=200, jitter=(-0.03, 0.0, 0.03), collapsed=(),
                 extra_runs=(), search=None, with_predictions=True, task_means=None, sources=None,
                 objectives=OBJECTIVES, legacy_format=False, variants=None, variant_jitter=None, with_dev=True,
                 dev_means=None, cosines=None, majority=()) -> Path:
    """An export where variant v scores exactly ``means[v]`` (accuracy) on every task, averaged over seeds.

    Pretraining seed i shifts the accuracy by ``jitter[i]`` (symmetric, so the mean is exact); each
    task's test set has ``n_examples`` examples (golds alternate a, b: chance is 0.5) and the first
    round(acc * n) of them are correct. ``task_means``: {task: {variant: mean}} overrides per task.
    ``sources``: {task: source_task}. ``extra_runs``: (variant, seed, status) of measure runs that
    must not count (no evals written). ``search``: list of (mlm_weight, nsp_weight, mask_ratio,
    probe_score, status, steps) trials. ``legacy_format``: input_format 'pair' as schema 1 wrote it.
    ``variants``: {name: (objectives on, input format)} beyond ``VARIANTS``; ``variant_jitter``:
    {variant: per-seed shifts} in place of ``jitter`` (a variant-specific seed effect).

    Dev: each primary eval row's ``dev_value`` is its test accuracy (``with_dev=False``: NaN, as exports
    before dev selection), or ``dev_means`` {task: {variant: mean}} plus the same seed shift.
    Collapse: ``collapsed`` variants are the pilot's collapse (token and [CLS] cosine 1.000, fine-tuning
    predicting one class, so accuracy 0.5, runs.collapsed true); ``cosines`` {variant: (token, cls)}
    sets cosines with runs.collapsed as trainables.intrinsic sets it (absolute thresholds); ``majority``
    variants predict one class without collapsed cosines. Otherwise cosines are 0.5.
    """
    root.mkdir(parents=True, exist_ok=True)
    runs, evals, preds = [], [], []
    kw = dict(objectives=objectives, legacy_format=legacy_format, variants=variants)
    for variant, mean in means.items():
        for i, seed in enumerate(seeds):
            run_id = f"{variant}-s{seed}"
            cos = (1.0, 1.0) if variant in collapsed else (cosines or {}).get(variant, (0.5, 0.5))
            raw = bool(cos[0] > COLLAPSE_TOKEN_COSINE or cos[1] > COLLAPSE_CLS_COSINE)
            runs.append(_run_row(run_id, variant, seed, collapsed=raw, cosines=cos, **kw))
            for task in tasks:
                shift = (variant_jitter or {}).get(variant, jitter)
                acc = (task_means or {}).get(task, {}).get(variant, mean) + shift[i % len(shift)]
                stuck = variant in collapsed or variant in majority
                dev = ((dev_means or {}).get(task, {}).get(variant, mean) + shift[i % len(shift)] if dev_means
                       else 0.5 if stuck else acc) if with_dev else None
                for fs in finetune_seeds:
                    ev, pr = _task_rows(run_id, task, fs, acc, n_examples, (sources or {}).get(task, ""), dev, stuck)
                    evals += ev
                    preds += pr
    for j, (variant, seed, status) in enumerate(extra_runs):
        runs.append(_run_row(f"extra-{j}", variant, seed, status=status, **kw))
    for j, (mw, nw, mr, score, status, steps) in enumerate(search or []):
        runs.append(_run_row(f"trial-{j}", "custom", 0, phase="search", status=status, mask_ratio=mr,
                             weights=(mw, nw, 0.0), probe_score=score, steps=steps, **kw))
    pd.DataFrame(runs).to_parquet(root / "runs.parquet")
    pd.DataFrame(evals).to_parquet(root / "evals.parquet")
    if with_predictions:
        pd.DataFrame(preds).to_parquet(root / "predictions.parquet")
    return root


def with_modes(root: Path, parts: dict[str, Path]) -> Path:
    """One export of the same runs whose rows of each mode are those of ``parts[mode]`` (exports ``write_export``
    wrote for the same variants and seeds), its runs table the first part's."""
    root.mkdir(parents=True, exist_ok=True)
    pd.read_parquet(next(iter(parts.values())) / "runs.parquet").to_parquet(root / "runs.parquet")
    for name in ("evals", "predictions"):
        pd.concat([pd.read_parquet(d / f"{name}.parquet").assign(mode=m) for m, d in parts.items()]
                  ).to_parquet(root / f"{name}.parquet")
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


# The MLM x NSP design with inputs held fixed: full - mlm_pairs = NSP loss effect 0.05, mlm_pairs - mlm_only
# = input-format effect 0.05 (they add up to the seed's NSP contribution 0.1); MLM contribution 0.2.
SEED_MEANS = {"full": 0.8, "mlm_only": 0.7, "mlm_pairs": 0.75, "nsp_only": 0.6, "none": 0.5}
