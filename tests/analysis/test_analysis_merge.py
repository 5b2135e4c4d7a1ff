"""Pooling exports of one design run with different pretraining seeds (``--first-seed``)."""

import json

import numpy as np
import pandas as pd
import pytest

from analysis.contributions import estimate_contributions
from analysis.export import ExportError, load_export, main, merge_exports
from tests.analysis.analysis_fixtures import write_export

MEANS = {"full": 0.70, "mlm_only": 0.68, "mlm_pairs": 0.66, "nsp_only": 0.62, "none": 0.60}


def _estimates(export_dir):
    c = estimate_contributions(load_export(export_dir), np.random.default_rng(0), n_boot=200)
    return {(e.contrast.name, e.task): (e.interval.estimate, e.interval.n_seeds) for e in c.contrasts}


def test_pooled_export_estimates_what_one_export_of_all_seeds_does(tmp_path):
    write_export(tmp_path / "a", MEANS, seeds=(0, 1, 2))
    write_export(tmp_path / "b", MEANS, seeds=(3, 4, 5))
    write_export(tmp_path / "all", MEANS, seeds=(0, 1, 2, 3, 4, 5))
    merge_exports([tmp_path / "a", tmp_path / "b"], tmp_path / "pooled")
    pooled, whole = _estimates(tmp_path / "pooled"), _estimates(tmp_path / "all")
    assert pooled.keys() == whole.keys() and pooled
    for key, (est, n) in pooled.items():
        assert n == 6 and est == pytest.approx(whole[key][0])
    assert len(load_export(tmp_path / "pooled").runs) == len(load_export(tmp_path / "all").runs)


def test_every_rate_row_is_kept(tmp_path):
    for name, seeds in (("a", (0, 1)), ("b", (2, 3))):
        write_export(tmp_path / name, {"full": 0.7, "none": 0.6}, seeds=seeds)
        ev = pd.read_parquet(tmp_path / name / "evals.parquet")
        other = ev.assign(lr=3e-3, selected=False, value=0.0)
        pd.concat([ev, other]).to_parquet(tmp_path / name / "evals.parquet")
    merge_exports([tmp_path / "a", tmp_path / "b"], tmp_path / "p")
    ev = pd.read_parquet(tmp_path / "p" / "evals.parquet")
    assert (~ev["selected"]).sum() == (ev["selected"]).sum() > 0


def test_the_same_run_twice_is_refused(tmp_path):
    write_export(tmp_path / "a", MEANS)
    with pytest.raises(ExportError, match="run 'full-s0' is in both"):
        merge_exports([tmp_path / "a", tmp_path / "a"], tmp_path / "p")


def test_another_design_is_refused(tmp_path):
    write_export(tmp_path / "a", {"full": 0.7, "none": 0.6}, seeds=(0, 1))
    write_export(tmp_path / "b", {"full": 0.7, "none": 0.6}, seeds=(2, 3))
    runs = pd.read_parquet(tmp_path / "b" / "runs.parquet")
    runs.loc[runs["variant"] == "full", "config_json"] = json.dumps({"optim": {"max_steps": 99}})
    runs.to_parquet(tmp_path / "b" / "runs.parquet")
    with pytest.raises(ExportError, match=r"variant 'full' differs .*: optim.max_steps None vs 99"):
        merge_exports([tmp_path / "a", tmp_path / "b"], tmp_path / "p")


def test_other_test_sets_and_corpora_are_refused(tmp_path):
    write_export(tmp_path / "a", {"full": 0.7, "none": 0.6}, seeds=(0, 1))
    write_export(tmp_path / "b", {"full": 0.7, "none": 0.6}, seeds=(2, 3), n_examples=100)
    with pytest.raises(ExportError, match="task 'sst' \\(finetune\\) has 100 test examples"):
        merge_exports([tmp_path / "a", tmp_path / "b"], tmp_path / "p")
    write_export(tmp_path / "c", {"full": 0.7, "none": 0.6}, seeds=(2, 3))
    for name, fp in (("a", "x1"), ("c", "x2")):
        (tmp_path / name / "corpus.json").write_text(json.dumps({"fingerprint": fp}))
    with pytest.raises(ExportError, match="different corpora"):
        merge_exports([tmp_path / "a", tmp_path / "c"], tmp_path / "p")


def test_command_line(tmp_path, capsys):
    write_export(tmp_path / "a", {"full": 0.7, "none": 0.6}, seeds=(0, 1))
    write_export(tmp_path / "b", {"full": 0.7, "none": 0.6}, seeds=(2, 3))
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "p")]) == 0
    assert "pretraining seeds [0, 1, 2, 3]" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "a"), "--out", str(tmp_path / "q")]) == 2
    assert "at least two exports" in capsys.readouterr().err
