"""The pretraining path's GPU options, checked on the CPU: compiled runs see one shape, deterministic
kernels on request."""

import os

import torch

from trainables.data.batches import Position, positions_from
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data


def _cfg(tmp, *extra):
    return build_config("smoke", "full", ["data.corpus=synthetic", "data.max_documents=80",
                                          f"data.cache_dir={tmp}", "run.tensorboard=false", *extra])


def test_a_compiled_run_pads_every_step_to_one_shape(tmp_path):
    """torch.compile specialises on shapes: length-bucketed batches would recompile per length."""
    for compile_, expect_one in (("false", False), ("true", True)):
        data = build_pretraining_data(_cfg(tmp_path, f"model.compile={compile_}", "optim.max_steps=30"))
        shapes, costs = set(), []
        for p in positions_from(data.steps, Position(0, 0, 0, 0), 30):
            step = data.steps.step(p)
            shapes.add((tuple(step.batch.input_ids.shape), tuple(step.batch.mlm_positions.shape)))
            costs.append((step.n_tokens, step.shape))
        assert (len(shapes) == 1) == expect_one, shapes
        if compile_ == "false":
            unpadded_costs = costs
    assert costs == unpadded_costs  # padding for the compiler costs nothing in the budget's count


def test_run_deterministic_switches_torch_to_deterministic_kernels(tmp_path, monkeypatch):
    import trainables.pretrain as pretrain

    seen = []
    real = pretrain.train_step

    def spy(*args):
        seen.append((torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG")))
        return real(*args)
    monkeypatch.setattr(pretrain, "train_step", spy)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        pretrain.run_pretraining(_cfg(tmp_path, "optim.max_steps=2"), tmp_path / "plain")
        pretrain.run_pretraining(_cfg(tmp_path, "optim.max_steps=2", "run.deterministic=true"), tmp_path / "det")
    finally:
        torch.use_deterministic_algorithms(False)
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    assert seen[0] == (False, None) and seen[-1] == (True, ":4096:8")


def test_pretraining_refuses_a_run_that_repeats_its_corpus_past_the_limit(tmp_path):
    import pytest

    from trainables.config import ConfigError
    from trainables.pretrain import run_pretraining

    with pytest.raises(ConfigError, match="data.allow_epochs"):
        run_pretraining(_cfg(tmp_path, "optim.max_steps=400", "data.allow_epochs=1"), tmp_path / "r")
