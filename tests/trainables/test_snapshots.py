"""Snapshots (run.snapshots): the encoder kept mid-run is the run's encoder at that step, bit for bit; keeping it
changes nothing the run trains; a resumed run keeps them; a snapshot is never taken for a finished run."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainables.checkpoint import finished_result, snapshots_of
from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.pretrain import run_pretraining


def _cfg(tmp_path, variant="mlm_only", *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                           "run.tensorboard=false", "optim.max_steps=8", "model.dropout=0.1", *extra])


class _Interrupt(Exception):
    pass


def _weights(path):
    return load_file(path / "model.safetensors")


def _equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("variant", ["mlm_only", "electra"])
def test_a_snapshot_is_the_runs_encoder_at_its_step_and_changes_nothing_it_trains(tmp_path, variant):
    snap = run_pretraining(_cfg(tmp_path, variant, "run.snapshots=0.25,0.5"), tmp_path / "snap")
    kept = snapshots_of(tmp_path / "snap")
    assert [s["steps"] for s in kept] == [2, 4] and all(s["status"] == "snapshot" for s in kept)
    assert kept[0]["tokens_seen"] < kept[1]["tokens_seen"] < snap.tokens_seen
    assert 0 < kept[1]["intrinsic"]["mlm_acc"] <= 1 or variant == "electra"
    # the same run without snapshots, stopped at its step-4 checkpoint: its resume state is the step-4 encoder
    plain_cfg = _cfg(tmp_path, variant, "run.checkpoint_every=4")

    def stop(metrics, checkpoint_dir=None):
        if checkpoint_dir:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        run_pretraining(plain_cfg, tmp_path / "plain", stop)
    assert _equal(_weights(tmp_path / "plain" / "resume"), _weights(Path(kept[1]["path"])))
    plain = run_pretraining(plain_cfg, tmp_path / "plain")  # finish it: the same final weights as with snapshots
    assert _equal(_weights(tmp_path / "plain"), _weights(tmp_path / "snap"))
    assert {k: repr(v) for k, v in plain.metrics.items()} == {k: repr(v) for k, v in snap.metrics.items()}
    assert json.loads((tmp_path / "snap" / "run.json").read_text())["snapshot_steps"] == [2, 4]


def test_a_resumed_run_keeps_its_snapshots_and_writes_the_later_ones(tmp_path):
    cfg = _cfg(tmp_path, "mlm_only", "run.snapshots=0.25,0.75", "run.checkpoint_every=4")

    def stop(metrics, checkpoint_dir=None):
        if checkpoint_dir:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        run_pretraining(cfg, tmp_path / "r", stop)
    first = _weights(tmp_path / "r" / "snapshots" / "step-0000002")
    assert [s["steps"] for s in snapshots_of(tmp_path / "r")] == [2]
    run_pretraining(cfg, tmp_path / "r")
    assert [s["steps"] for s in snapshots_of(tmp_path / "r")] == [2, 6]
    assert _equal(first, _weights(tmp_path / "r" / "snapshots" / "step-0000002"))
    straight = run_pretraining(cfg, tmp_path / "s")
    assert _equal(_weights(tmp_path / "r" / "snapshots" / "step-0000006"),
                  _weights(tmp_path / "s" / "snapshots" / "step-0000006"))
    assert straight.steps == 8


def test_a_snapshot_is_a_loadable_checkpoint_but_never_a_finished_run(tmp_path):
    from trainables.finetune.heads import Checkpoint

    cfg = _cfg(tmp_path, "mlm_only", "run.snapshots=0.5")
    run_pretraining(cfg, tmp_path / "r")
    path = tmp_path / "r" / "snapshots" / "step-0000004"
    ck = Checkpoint.load(path)
    assert ck.pretrain_seed == cfg.run.seed  # paired fine-tuning draws, as for the run's own checkpoint
    assert finished_result(path, cfg) is None


def test_none_keeps_no_snapshot_and_bad_shares_are_one_line_errors(tmp_path):
    run_pretraining(_cfg(tmp_path, "none", "run.snapshots=0.5"), tmp_path / "n")
    assert snapshots_of(tmp_path / "n") == []
    for bad in ("0.5,1.0", "0", "half", "-0.1"):
        with pytest.raises(ConfigError, match="run.snapshots"):
            _cfg(tmp_path, "mlm_only", f"run.snapshots={bad}")
    assert build_config("smoke", "mlm_only", ["run.snapshots=0.0625,0.125,0.25,0.5"]).run.snapshot_steps(1600) == \
        (100, 200, 400, 800)


def test_under_wsd_a_snapshot_is_a_run_that_ends_its_schedule_at_its_budget(tmp_path):
    """optim.schedule=wsd: the snapshot at half of a 20-step run is, bit for bit, a 10-step WSD run with the same
    warmup steps (its decay branch: steps 6-9 at a decaying rate on the batches the long run trains there); the
    long run trains exactly what it trains without the branch."""
    long = ["optim.schedule=wsd", "optim.decay_frac=0.4", "optim.max_steps=20", "optim.warmup_frac=0.1"]
    run_pretraining(_cfg(tmp_path, "mlm_only", *long, "run.snapshots=0.5"), tmp_path / "long")
    (snap,) = snapshots_of(tmp_path / "long")
    assert (snap["steps"], snap["branched_at"]) == (10, 6)
    short = run_pretraining(_cfg(tmp_path, "mlm_only", "optim.schedule=wsd", "optim.decay_frac=0.4",
                                 "optim.max_steps=10", "optim.warmup_frac=0.2"), tmp_path / "short")
    assert _equal(_weights(Path(snap["path"])), _weights(tmp_path / "short"))
    assert snap["tokens_seen"] == short.tokens_seen
    assert repr(snap["intrinsic"]["mlm_acc"]) == repr(short.metrics["mlm_acc"])
    run_pretraining(_cfg(tmp_path, "mlm_only", *long), tmp_path / "plain")
    assert _equal(_weights(tmp_path / "long"), _weights(tmp_path / "plain"))
    # the branch decays: a mid-run state at step 10 (no branch) is another encoder
    run_pretraining(_cfg(tmp_path, "mlm_only", "optim.max_steps=20", "optim.warmup_frac=0.1", "run.snapshots=0.5"),
                    tmp_path / "linear")
    assert not _equal(_weights(tmp_path / "linear" / "snapshots" / "step-0000010"), _weights(Path(snap["path"])))


def test_a_wsd_snapshot_inside_the_warmup_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="inside the warmup"):
        run_pretraining(_cfg(tmp_path, "mlm_only", "optim.schedule=wsd", "optim.max_steps=40", "optim.warmup_frac=0.5",
                             "run.snapshots=0.25"), tmp_path / "r")
