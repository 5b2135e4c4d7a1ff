"""The recipe search: every trial trains on the same token slots whatever its batch, the export records each
trial's own recipe, the table compares each recipe with the baseline at the same seed, and the sweep runs end to
end (slow)."""

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sweeps.recipe_search import SPACE, baseline_point, best_recipes, recipe_config, recipe_name, recipe_table, space
from trainables.presets import build_config
from trainables.tune_adapters import trial_config

REPO = Path(__file__).resolve().parents[2]


def test_a_trial_trains_on_the_same_token_slots_whatever_its_batch():
    base = build_config("cpu-small", "mlm_only")
    tokens = 1600 * 32 * 128
    for batch in (8, 16, 32, 64):
        cfg = trial_config({"cfg": base.to_dict(), "optim.batch_size": batch, "optim.lr": 2e-3,
                            "objective.mask_ratio": 0.3, "tokens_per_run": tokens, "tokens_per_eval": tokens / 4})
        assert cfg.optim.batch_size == batch and cfg.optim.lr == 2e-3 and cfg.objective.mask_ratio == 0.3
        assert cfg.optim.max_steps * batch * cfg.data.seq_len == tokens
        assert cfg.run.eval_every * 4 == cfg.optim.max_steps
    assert trial_config({"cfg": base.to_dict()}) == base  # the main job's trials are untouched
    with pytest.raises(Exception, match="optim.bogus"):
        trial_config({"cfg": base.to_dict(), "optim.bogus": 1})


def test_the_search_space_holds_the_presets_own_recipe():
    for preset in ("smoke", "cpu-small", "gpu-quick"):
        cfg = build_config(preset, "mlm_only")
        point, sp = baseline_point(cfg), space(baseline_point(cfg))
        assert set(sp) == set(SPACE) == set(point)
        assert point["optim.batch_size"] in sp["optim.batch_size"].categories
        for key in ("optim.lr", "objective.mask_ratio", "optim.warmup_frac"):
            assert sp[key].lower <= point[key] <= sp[key].upper


def _result(lr, acc, final=True, error=None):
    point = {"optim.lr": lr, "optim.batch_size": 16, "objective.mask_ratio": 0.2, "optim.warmup_frac": 0.1}
    return SimpleNamespace(config={**point, "cfg": {}}, metrics={"eval/mlm_acc": acc, "final": 1 if final else 0},
                           error=error)


def test_only_trials_that_finished_the_budget_are_confirmed_best_first():
    grid = [_result(1e-3, 0.10), _result(2e-3, 0.30, final=False), _result(3e-3, 0.20), _result(4e-3, 0.25),
            _result(5e-3, 0.9, error=RuntimeError("died"))]
    assert [p["optim.lr"] for p in best_recipes(grid, 2)] == [4e-3, 3e-3]


def test_a_recipe_config_spends_the_budget_at_its_own_batch():
    cfg = build_config("cpu-small", "mlm_only")
    point = {"optim.lr": 2e-3, "optim.batch_size": 16, "objective.mask_ratio": 0.3, "optim.warmup_frac": 0.05}
    r = recipe_config(cfg, point, 1600 * 32 * 128)
    assert (r.optim.max_steps, r.optim.batch_size, r.optim.lr, r.objective.mask_ratio) == (3200, 16, 2e-3, 0.3)
    assert recipe_name(point) == "lr2e-03_b16_m0.30_w0.05"


def test_the_table_gives_each_recipe_against_the_baseline_at_the_same_seed():
    rows = [("baseline", 0, 0.110), ("baseline", 1, 0.108), ("r1", 0, 0.124), ("r1", 1, 0.121),
            ("r2", 0, 0.100), ("r2", 1, math.nan)]
    runs = pd.DataFrame([{"phase": "measure", "status": "completed", "variant": v, "pretrain_seed": s, "mlm_acc": a,
                          "steps": 1600, "wall_time_s": 120.0} for v, s, a in rows if a == a]
                        + [{"phase": "search", "status": "completed", "variant": "x", "pretrain_seed": 10000,
                            "mlm_acc": 0.99, "steps": 1, "wall_time_s": 1.0}])
    text = recipe_table(runs)
    line = {ln.split()[0]: ln for ln in text.splitlines()[1:] if ln.split()}
    assert "11.0%" in line["baseline"] and "(" not in line["baseline"]
    assert "12.4% (+1.4)" in line["r1"] and "12.1% (+1.3)" in line["r1"]
    assert "10.0% (-1.0)" in line["r2"] and "99" not in text  # search trials are not confirmations


@pytest.mark.slow
def test_the_recipe_search_runs_end_to_end(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "sweeps" / "recipe_search.py"), "--preset", "smoke",
                          "--num-samples", "2", "--top", "1", "--seeds", "1", "--storage", str(tmp_path),
                          "--name", "r"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = pd.read_parquet(tmp_path / "r" / "export" / "runs.parquet")
    search, measure = runs[runs.phase == "search"], runs[runs.phase == "measure"]
    assert len(search) == 2 and set(measure.pretrain_seed) == {0} and "baseline" in set(measure.variant)
    assert (search.pretrain_seed >= 10_000).all()  # the search's seed is not a confirmation seed
    import json

    batches = {json.loads(c)["optim"]["batch_size"] for c in search.config_json}
    slots = {json.loads(c)["optim"]["max_steps"] * json.loads(c)["optim"]["batch_size"] for c in search.config_json}
    assert len(slots) == 1, (batches, slots)  # every trial's recipe recorded, at the same token slots
    assert "baseline" in (tmp_path / "r" / "report" / "recipes.md").read_text()
