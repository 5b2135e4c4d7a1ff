"""Contribution estimates on fixture exports with known values."""

import numpy as np
import pandas as pd
import pytest
from analysis_fixtures import SEED_MEANS, write_export

from analysis.contributions import estimate_contributions
from analysis.export import ExportError, load_export


def _estimate(root, n_boot=100):
    return estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=n_boot)


def _contrast(c, task, name):
    return next(e for e in c.contrasts if e.task == task and e.contrast.name == name)


def test_known_values_give_the_known_estimates(seed_export):
    c = _estimate(seed_export)
    assert c.variants == ("full", "mlm_only", "nsp_only", "none")
    assert c.tasks == ("sst", "topic", "average (finetune)")
    for t in c.tasks:
        for v, m in SEED_MEANS.items():
            assert c.means[(t, v)].estimate == pytest.approx(m, abs=1e-12)
        mlm = _contrast(c, t, "MLM contribution (full - nsp_only)").interval
        assert mlm.estimate == pytest.approx(0.2) and mlm.reliable and mlm.lo > 0
        assert _contrast(c, t, "NSP contribution (full - mlm_only)").interval.estimate == pytest.approx(0.1)
        shap = [_contrast(c, t, f"{o} main effect = Shapley share").interval.estimate for o in ("MLM", "NSP")]
        assert shap == pytest.approx([0.2, 0.1]) and sum(shap) == pytest.approx(0.3)
        assert sum(shap) == pytest.approx(_contrast(c, t, "full - none").interval.estimate)
        inter = _contrast(c, t, "MLM x NSP interaction").interval
        assert inter.estimate == pytest.approx(0.0, abs=1e-12) and inter.lo < 0 < inter.hi
    assert c.flags == [] and c.messages == []


def test_failed_and_stopped_runs_are_excluded_and_counted(seed_export):
    c = _estimate(seed_export)
    assert c.excluded == {"failed": 2, "stopped_early": 1}
    assert c.pretrain_seeds == (0, 1, 2)  # seeds 3 and 4 only had failed/stopped runs


def test_missing_variant_gives_a_message_naming_what_cannot_be_computed(tmp_path):
    means = {k: v for k, v in SEED_MEANS.items() if k != "nsp_only"}
    c = _estimate(write_export(tmp_path / "e", means))
    assert len(c.messages) == 1
    msg = c.messages[0]
    assert "'nsp_only'" in msg and "MLM contribution (full - nsp_only)" in msg and "interaction" in msg
    names = {e.contrast.name for e in c.contrasts}
    assert "NSP contribution (full - mlm_only)" in names and "mlm_only - none" in names
    assert not any("nsp_only" in n for n in names)


def test_collapsed_variant_is_flagged_and_contrast_against_it_not_credited(tmp_path):
    # the pilot's pattern: nsp_only collapsed; full beats nsp_only only because nsp_only is damaged
    means = {"full": 0.70, "mlm_only": 0.72, "nsp_only": 0.55, "none": 0.74}
    c = _estimate(write_export(tmp_path / "e", means, collapsed=("nsp_only",)))
    assert any(f.variant == "nsp_only" and f.task == "" and "collapse" in f.reason for f in c.flags)
    assert {(f.variant, f.task) for f in c.flags if f.task == "sst"} == {
        ("full", "sst"), ("mlm_only", "sst"), ("nsp_only", "sst")}  # all worse than none
    mlm = _contrast(c, "sst", "MLM contribution (full - nsp_only)")
    assert "contrast against nsp_only (collapsed, worse than none on this task): not credited to MLM" in mlm.notes
    assert _contrast(c, "sst", "full - none").interval.estimate == pytest.approx(-0.04)


def test_sop_and_best_mix_contrasts_when_present(tmp_path):
    means = {**SEED_MEANS, "sop_only": 0.65, "mlm_sop": 0.85, "best_mix": 0.9}
    c = _estimate(write_export(tmp_path / "e", means))
    assert _contrast(c, "sst", "SOP vs NSP with MLM (mlm_sop - full)").interval.estimate == pytest.approx(0.05)
    assert _contrast(c, "sst", "SOP vs NSP alone (sop_only - nsp_only)").interval.estimate == pytest.approx(0.05)
    assert _contrast(c, "sst", "best_mix - full").interval.estimate == pytest.approx(0.1)


def test_without_predictions_falls_back_to_eval_values(tmp_path):
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, with_predictions=False))
    assert _contrast(c, "sst", "full - none").interval.estimate == pytest.approx(0.3)


def test_two_seeds_are_reported_unreliable(tmp_path):
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, seeds=(0, 1), jitter=(-0.02, 0.02)))
    assert not _contrast(c, "sst", "full - none").interval.reliable


def test_schema_violation_is_one_line(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    pd.read_parquet(root / "runs.parquet").drop(columns=["collapsed"]).to_parquet(root / "runs.parquet")
    with pytest.raises(ExportError, match=r"runs.parquet lacks columns \['collapsed'\]"):
        load_export(root)
