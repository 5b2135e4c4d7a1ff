"""Sweep pieces without a Ray cluster: CLI validation, specs, the export row schema."""

import pytest

from sweeps import export as sweep_export
from sweeps import phases
from sweeps.mask_ratio import parse_ratios
from sweeps.objective_weights import main as objective_weights_main
from sweeps.variants import parse_variants
from trainables.config import ConfigError
from trainables.presets import build_config


def test_bad_cli_values_fail_fast_with_one_line(tmp_path, capsys):
    rc = objective_weights_main(["--preset", "smoke", "--set", "objective.mask_ratio=1.5", "--storage", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "mask_ratio" in err and len(err.splitlines()) == 1
    rc = objective_weights_main(["--preset", "smoke", "--set", "objective.typo=1", "--storage", str(tmp_path)])
    assert rc == 2 and "objective.typo" in capsys.readouterr().err
    rc = objective_weights_main(["--preset", "smoke", "--tasks", "mnli,nosuch", "--storage", str(tmp_path)])
    assert rc == 2 and "nosuch" in capsys.readouterr().err
    rc = objective_weights_main(["--preset", "smoke", "--resume", "--storage", str(tmp_path)])
    assert rc == 2 and "--name" in capsys.readouterr().err


def test_variant_and_ratio_lists_are_validated():
    assert parse_variants("full, none") == ["full", "none"]
    with pytest.raises(ConfigError, match="allowed: full"):
        parse_variants("full,mlm")
    assert parse_ratios("0.4,0.1") == [0.1, 0.4]
    with pytest.raises(ConfigError, match="ratios"):
        parse_ratios("0.1,1.5")


def test_measurement_specs_share_data_order_and_seed_weights_across_variants():
    cfg = build_config("smoke")
    specs = phases.measurement_specs([(v, phases.variant_config(cfg, v)) for v in ("full", "none")], seeds=2)
    assert [s["run_id"] for s in specs] == ["full-s0", "full-s1", "none-s0", "none-s1"]
    by_id = {s["run_id"]: s["cfg"] for s in specs}
    assert by_id["full-s1"]["run"]["seed"] == by_id["none-s1"]["run"]["seed"] == 1
    assert by_id["full-s0"]["data"] == by_id["none-s1"]["data"]  # same documents, same order
    assert by_id["full-s0"]["optim"] == by_id["none-s0"]["optim"]


def test_variant_config_keeps_the_masking_recipe():
    cfg = build_config("smoke", overrides=["objective.mask_ratio=0.3", "objective.mask_stream=2",
                                           "objective.masking=whole_word", "objective.rtd.generator_fraction=0.5"])
    assert phases.variant_config(cfg, "mlm_only").objective.mask_ratio == 0.3
    assert phases.variant_config(cfg, "mlm_pairs").objective.mask_stream == 2
    assert phases.variant_config(cfg, "full").objective.masking == "whole_word"  # was dropped: token
    assert phases.variant_config(cfg, "electra").objective.options["rtd.generator_fraction"] == 0.5
    assert phases.variant_config(cfg, "nsp_only").objective.weights["mlm"] == 0


def test_export_writes_the_one_schema_that_the_analysis_reads(tmp_path):
    """The sweep's export and the analysis share trainables.schema: an empty export written by the
    sweep code opens in the analysis, with the schema and code versions in every file."""
    import pyarrow.parquet as pq

    from analysis.export import load_export
    from trainables import schema

    root = str(tmp_path / "exp")
    sweep_export.export(root)
    for name in schema.TABLES:
        meta = pq.read_schema(tmp_path / "exp" / "export" / f"{name}.parquet").metadata
        assert schema.version_of(meta) == schema.SCHEMA_VERSION and meta[schema.META_CODE]
    export = load_export(tmp_path / "exp" / "export")
    from trainables.objectives import OBJECTIVES

    assert export.objectives == tuple(OBJECTIVES)
    from trainables.intrinsic import metric_columns

    expected = [c.name for c in schema.columns("runs", tuple(OBJECTIVES), metric_columns())]
    assert list(export.runs.columns) == expected and {"mlm_acc", "pair_acc_sop", "cls_cosine"} <= set(expected)


def test_export_writes_the_data_dictionary_and_an_hparams_row_per_run(tmp_path):
    """export/README.md names every column of the three tables; the HParams view gets one row per run
    with its downstream scores, on local storage and on a storage URI (here file://) alike."""
    import pandas as pd
    import pyarrow.parquet as pq

    from trainables import schema

    root = str(tmp_path / "exp")
    sweep_export.export(root)
    text = (tmp_path / "exp" / "export" / "README.md").read_text()
    for name in schema.TABLES:
        cols = pq.read_schema(tmp_path / "exp" / "export" / f"{name}.parquet").names
        assert all(f"`{c}`" in text for c in cols), name
    runs = pd.DataFrame([{"run_id": "full-s0", "variant": "full", "phase": "measure", "mlm_weight": 1.0,
                          "mask_ratio": 0.15, "pretrain_seed": 0, "status": "completed", "mlm_acc": 0.2}])
    evals = pd.DataFrame([{"run_id": "full-s0", "task": t, "is_primary": True, "mode": "finetune", "value": v,
                           "lr": lr, "selected": sel}  # the rate not chosen on dev (0.1 on topic) is not shown
                          for t, v, lr, sel in (("topic", 0.8, 1e-3, True), ("topic", 0.7, 1e-3, True),
                                                ("topic", 0.1, 3e-3, False), ("pos", 0.5, 3e-4, True))])
    for logdir in (tmp_path / "local", f"file://{tmp_path / 'remote'}"):
        sweep_export.write_hparams(runs, evals, str(logdir))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for where in ("local", "remote"):
        acc = EventAccumulator(str(tmp_path / where / "full-s0"))
        acc.Reload()
        values = {t: acc.Scalars(t)[0].value for t in acc.Tags()["scalars"]}
        assert values == pytest.approx({"run/mlm_acc": 0.2, "task/topic": 0.75, "task/pos": 0.5, "task/mean": 0.625,
                                        "lr/topic": 1e-3, "lr/pos": 3e-4})
        assert acc.PluginTagToContent("hparams")


def test_search_trials_and_measurement_runs_use_disjoint_pretraining_seeds():
    """The searched mix is chosen on its search trial's dev probe score; if that trial's seed were one of the
    measurement seeds, best_mix's measurement at that seed would repeat the chosen run (a winner's curse on
    best_mix - full). The search runs at a reserved seed, recorded in its runs rows; every measured variant,
    best_mix included, runs at the same seeds 0..P-1."""
    import argparse
    from types import SimpleNamespace

    from sweeps.objective_weights import _search_config

    cfg = build_config("smoke")
    args = argparse.Namespace(num_samples=4, pair="nsp", objectives=None)
    search_cfg, _, start = _search_config(cfg, args)
    specs = phases.measurement_specs([(v, phases.variant_config(cfg, v)) for v in ("full", "none")], seeds=5)
    measured = {s["cfg"]["run"]["seed"] for s in specs}
    assert measured == set(range(5))
    assert search_cfg.run.seed not in measured
    result = SimpleNamespace(config={"cfg": search_cfg.to_dict(), "phase": "search", **start}, metrics={"step": 3},
                             error=None, path="/x/trial_1", checkpoint=None)
    row = sweep_export.run_row(result, "search")
    assert row["phase"] == "search" and row["pretrain_seed"] == search_cfg.run.seed


def _pair_choices() -> tuple[str, ...]:
    import argparse

    from sweeps.objective_weights import _extra_args

    parser = argparse.ArgumentParser()
    _extra_args(parser)
    return next(a.choices for a in parser._actions if a.dest == "pair")


@pytest.mark.parametrize("pair", _pair_choices())
def test_each_pair_builds_its_search_on_the_pair_format_it_trains(pair):
    """--pair sop crashed building its search (input_format='nsp_pairs' cannot train the SOP loss): the
    search's base config, its space and the measured best mix are built on the searched pair's own format."""
    import argparse

    from sweeps.objective_weights import _mix, _search_config

    cfg = build_config("smoke")
    args = argparse.Namespace(num_samples=4, pair=pair, objectives=None)
    search_cfg, space, start = _search_config(cfg, args)
    assert search_cfg.objective.input_format == f"{pair}_pairs"
    on = {k: v for k, v in search_cfg.objective.weights.items() if v}
    assert on == {"mlm": 1.0, pair: 1.0} and set(space) == set(start) == {"mlm_weight", f"{pair}_weight", "mask_ratio"}
    mix = _mix(cfg, "best_mix", {**start, f"{pair}_weight": 0.3, "mask_ratio": 0.2})
    assert mix.input_format == f"{pair}_pairs" and mix.weights[pair] == 0.3 and mix.mask_ratio == 0.2
    only_mlm = _search_config(cfg, argparse.Namespace(num_samples=4, pair=pair, objectives="mlm"))[0]
    assert only_mlm.objective.input_format == "nsp_pairs"  # BERT's format when no pair loss is searched


def test_snapshot_rows_are_read_from_a_storage_uri_as_from_a_directory(tmp_path):
    """A run's snapshots travel inside its final checkpoint (``<checkpoint>/snapshots/step-N``): the export reads
    their records from a storage URI (here file://, through pyarrow as s3:// and gs://) as from a local path."""
    import json

    from trainables.checkpoint import snapshot_subpath

    run = tmp_path / "bucket" / "measure" / "mlm_only-s0" / "checkpoint"
    (run / snapshot_subpath(500)).mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "completed", "snapshot_steps": [500]}))
    (run / snapshot_subpath(500) / "run.json").write_text(json.dumps(
        {"status": "snapshot", "steps": 500, "tokens_seen": 1_900_000, "train_flops": 3.0e14, "epochs": 0.3,
         "wall_time_s": 61.0, "intrinsic": {"mlm_acc": 0.08}}))
    row = {"run_id": "mlm_only-s0", "phase": "measure", "status": "completed", "variant": "mlm_only"}
    local = sweep_export.snapshot_rows({**row, "checkpoint": str(run)})
    remote = sweep_export.snapshot_rows({**row, "checkpoint": f"file://{run}"})
    assert len(local) == len(remote) == 1
    assert remote[0]["checkpoint"] == f"file://{run}/{snapshot_subpath(500)}"
    same = ("run_id", "phase", "steps", "tokens_seen", "train_flops", "mlm_acc", "snapshot_of")
    assert {k: remote[0][k] for k in same} == {k: local[0][k] for k in same} == {
        "run_id": "mlm_only-s0@500", "phase": "snapshot", "steps": 500, "tokens_seen": 1_900_000,
        "train_flops": 3.0e14, "mlm_acc": 0.08, "snapshot_of": "mlm_only-s0"}
