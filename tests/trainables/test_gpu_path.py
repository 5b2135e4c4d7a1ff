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


class _FakeGpuNode:
    """torch.cuda's generator calls on a node with ``gpus`` GPUs (each GPU's state a one-byte tag, its index
    + 10), as real torch behaves there: ``set_rng_state_all`` with more states than GPUs raises IndexError."""

    def __init__(self, monkeypatch, gpus: int):
        self.gpus, self.restored = gpus, []
        state = lambda i: torch.tensor([10 + i], dtype=torch.uint8)  # noqa: E731
        index = lambda device: torch.device(device).index or 0  # noqa: E731
        for name, fn in {"is_available": lambda: True, "device_count": lambda: self.gpus, "current_device": lambda: 0,
                         "get_rng_state": lambda device="cuda": state(index(device)),
                         "get_rng_state_all": lambda: [state(i) for i in range(self.gpus)],
                         "set_rng_state": lambda s, device="cuda": self.restored.append((index(device), int(s[0]))),
                         "set_rng_state_all": self._set_all}.items():
            monkeypatch.setattr(torch.cuda, name, fn)

    def _set_all(self, states):
        for i, s in enumerate(states):
            if i >= self.gpus:
                raise IndexError("list index out of range")
            self.restored.append((i, int(s[0])))


def test_a_resume_restores_its_own_gpus_generator_on_a_node_with_fewer_gpus(tmp_path, monkeypatch):
    """A Ray Train worker sees every GPU of its node. The checkpoint holds only the generator of the GPU it
    trains on (cuda:1 of two), and a resume on a one-GPU node (the spot-preemption case) puts that state into
    its own GPU instead of failing on the GPU the node lacks."""
    import trainables.pretrain as pretrain
    from trainables.checkpoint import TrainState, load_resume_state, save_resume_state

    cfg = _cfg(tmp_path, "optim.max_steps=2")
    data = build_pretraining_data(cfg)
    model = pretrain.pretrain_model(cfg, pretrain.initial_model(cfg, data))
    opt, sched = pretrain.build_optimizer(model, cfg)
    _FakeGpuNode(monkeypatch, gpus=2)
    rngs = pretrain._rng_states(1, torch.device("cuda:1"))
    save_resume_state(tmp_path, model, opt, sched, TrainState(step=1), data.tokenizer, rng_states=rngs)
    blob = torch.load(tmp_path / "resume" / "trainer_state.pt", weights_only=False)
    assert int(blob["cuda_rng"][0]) == 11  # cuda:1's state alone, not the node's list
    one = _FakeGpuNode(monkeypatch, gpus=1)
    state = load_resume_state(tmp_path, model, opt, sched, device=torch.device("cuda:0"))
    assert state.step == 1 and one.restored == [(0, 11)]
