"""A new objective is one module: a toy plugin objective pretrains, resumes, is configured by overrides
and runs in a smoke sweep (slow), with nothing else in the project changed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.objectives import OBJECTIVES, VARIANTS, load_plugins, unregister_objective
from trainables.pretrain import run_pretraining

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture
def toy():
    load_plugins("toy_objective")
    yield OBJECTIVES["segment"]
    unregister_objective("segment")


def _cfg(tmp_path, *extra):
    return build_config("smoke", "segment_only", ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'c'}",
                                                  "run.tensorboard=false", *extra])


def test_the_registry_gains_the_objective_its_variant_and_options(toy):
    assert "segment_only" in VARIANTS and list(OBJECTIVES)[-1] == "segment"
    cfg = build_config("smoke", "segment_only", ["objective.segment.scale=2"])
    assert cfg.objective.options["segment.scale"] == 2.0 and cfg.objective.active == ("segment",)
    with pytest.raises(ConfigError, match="scale=-1.0 must be > 0"):
        build_config("smoke", "segment_only", ["objective.segment.scale=-1"])
    with pytest.raises(ConfigError, match=r"segment.scal.*objective options: .*segment.scale"):
        build_config("smoke", "segment_only", ["objective.segment.scal=1"])


def test_the_toy_objective_pretrains_and_resumes_its_own_head(toy, tmp_path):
    losses = []
    cfg = _cfg(tmp_path, "run.log_every=1", "optim.max_steps=6", "run.checkpoint_every=3")
    run_pretraining(cfg, tmp_path / "straight", lambda m, checkpoint_dir=None: losses.append(m.get("loss/segment")))
    seen = [v for v in losses if v is not None]
    assert len(seen) >= 5 and all(torch.isfinite(torch.tensor(seen)))
    assert seen[-1] < seen[0]  # an easy task: the segment of a token is in its type embedding

    class Stop(Exception):
        pass

    def stop(metrics, checkpoint_dir=None):
        if checkpoint_dir:
            raise Stop

    with pytest.raises(Stop):
        run_pretraining(cfg, tmp_path / "resumed", stop)
    assert "extras" in torch.load(tmp_path / "resumed" / "resume" / "trainer_state.pt", weights_only=False)
    run_pretraining(cfg, tmp_path / "resumed")
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the own head's state came back with the resume


@pytest.mark.slow
def test_a_smoke_sweep_runs_the_toy_objective_from_its_module_alone_beside_electra(tmp_path):
    """One sweep for two claims: a plugin objective needs nothing but its module, and ELECTRA runs in a
    sweep with its generator, at equal FLOPs, into the same export and report."""
    env = {**os.environ, "BERT_OBJECTIVES_PLUGINS": "toy_objective", "RAY_AUTH_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(REPO / "sweeps" / "variants.py"), "--preset", "smoke", "--variants",
           "segment_only,electra,none", "--seeds", "1", "--tasks", "sentiment", "--storage", str(tmp_path),
           "--name", "toy", "--set", "optim.max_steps=4", "--set", "optim.budget=flops"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = pd.read_parquet(tmp_path / "toy" / "export" / "runs.parquet")
    assert (runs.status == "completed").all() and set(runs.variant) == {"segment_only", "electra", "none"}
    by = runs.set_index("variant")
    assert by.loc["segment_only", "segment_weight"] == 1.0 and by.loc["electra", "rtd_weight"] == 1.0
    assert json.loads(by.loc["segment_only", "config_json"])["objective"]["weights"]["segment"] == 1
    assert 0 <= by.loc["electra", "rtd_acc"] <= 1 and (by.loc[["segment_only", "electra"], "budget"] == "flops").all()
    report = (tmp_path / "toy" / "report" / "contributions.md").read_text()  # the terminal keeps the compact table
    assert "segment_only" in report and "electra" in report
    assert "at equal training FLOPs" in done.stdout and "at equal training FLOPs" in report
