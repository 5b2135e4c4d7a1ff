"""What fine-tuning chose on dev: the report says which rate and epoch each variant kept and when a variant's
choice sits at an edge of what was tried (a contrast against it then partly measures the grid)."""

import json

import numpy as np
import pandas as pd

from analysis.choices import choices_section, fine_tuning_choices

GRID = (3e-4, 1e-3, 3e-3)


def _tables(chosen: dict[str, list[tuple[float, float]]], grid=GRID, epochs=6.0):
    """chosen: variant -> per pretraining run (rate chosen, epoch of the state kept); every rate of the grid has
    rows for two fine-tuning seeds, only the chosen one selected."""
    runs, evals = [], []
    for variant, picks in chosen.items():
        for seed, (lr, epoch) in enumerate(picks):
            run_id = f"{variant}-s{seed}"
            runs.append(dict(run_id=run_id, phase="measure", variant=variant,
                             config_json=json.dumps({"finetune": {"epochs": epochs}})))
            for rate in grid:
                for fs in (0, 1):
                    evals.append(dict(run_id=run_id, task="pos", source_task="pos", finetune_seed=fs, mode="finetune",
                                      is_primary=True, lr=rate, selected=np.isclose(rate, lr),
                                      epoch=epoch if np.isclose(rate, lr) else 2.0))
            evals.append(dict(run_id=run_id, task="pos", source_task="pos", finetune_seed=0, mode="probe",
                              is_primary=True, lr=np.nan, selected=True, epoch=np.nan))
    return pd.DataFrame(evals), pd.DataFrame(runs)


def test_a_variant_whose_choice_sits_at_the_grids_edge_is_named_with_the_advice_to_widen():
    evals, runs = _tables({"none": [(3e-3, 6.0), (3e-3, 6.0), (3e-3, 5.0), (1e-3, 6.0)],
                           "mlm_only": [(1e-3, 3.0), (3e-4, 2.0), (1e-3, 3.0), (1e-3, 4.0)]})
    got = {c.variant: c for c in fine_tuning_choices(evals, runs)}
    none, mlm = got["none"], got["mlm_only"]
    assert none.rates == {1e-3: 1, 3e-3: 3} and none.grid == GRID and none.runs == 4
    assert none.edges == ["highest rate 0.003", "last epoch 6"] and mlm.edges == [] and mlm.epoch == 3.0
    text = "\n".join(choices_section(list(got.values())))
    assert "| none | pos | 0.001 x1, 0.003 x3 (of 0.0003, 0.001, 0.003) | 6 of 6 | highest rate 0.003; last epoch 6 |" in text
    assert "`none` sits at an edge on pos (highest rate 0.003; last epoch 6): widen `finetune.lr_grid`" in text


def test_a_one_rate_grid_has_no_rate_edge_and_the_probe_is_not_a_choice():
    evals, runs = _tables({"none": [(1e-3, 2.0), (1e-3, 2.0)]}, grid=(1e-3,))
    (c,) = fine_tuning_choices(evals, runs)
    assert np.isnan(c.top_rate) and c.edges == [] and c.rates == {1e-3: 2}
    assert "widen" not in "\n".join(choices_section([c]))
