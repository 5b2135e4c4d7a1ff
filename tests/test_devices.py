"""Which device a trial trains on: the GPU Ray assigned it, the CPU when it holds none (issue: the first
GPU run). There is no GPU here: CUDA's presence and Ray's assignment are monkeypatched, and the Ray
adapters are run against fake Tune / Ray Train sessions that capture the device they hand the core."""

from types import SimpleNamespace

import pytest
import torch

from trainables import tune_adapters
from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.runtime import cuda_index, resolve_device, trial_device


@pytest.fixture
def gpu_node(monkeypatch):
    """A node with 4 GPUs that torch can use (as far as these functions ask)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_no_assigned_gpu_is_the_cpu_even_where_cuda_is_visible(gpu_node):
    assert trial_device([]) == torch.device("cpu")


def test_the_assigned_gpu_is_its_index_when_ray_left_cuda_visible_devices_unset(gpu_node):
    assert trial_device(["1"]) == torch.device("cuda:1")


def test_the_assigned_gpu_is_its_position_in_cuda_visible_devices(gpu_node, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # what Ray sets for a trial holding GPU 1 (or 0.25 of it)
    assert trial_device(["1"]) == torch.device("cuda:0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # Ray Train: the node's workers' GPUs; or the node's own list
    assert trial_device([3]) == torch.device("cuda:1")
    assert cuda_index("GPU-ab12", "GPU-77,GPU-ab12") == 1


def test_an_assigned_gpu_missing_from_cuda_visible_devices_is_one_line(gpu_node, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ConfigError, match=r"GPU '2' but CUDA_VISIBLE_DEVICES='0' does not list it"):
        trial_device(["2"])


def test_run_device_cpu_is_honoured_and_cuda_without_an_assignment_is_an_error(gpu_node):
    assert trial_device(["0"], "cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="no GPU"):
        trial_device([], "cuda")


def test_a_trial_holding_gpus_without_usable_cuda_fails_with_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ConfigError) as e:
        trial_device(["0", "1"])
    msg = str(e.value)
    assert "\n" not in msg
    assert "GPU(s) 0,1" in msg and "torch.cuda.is_available() is False" in msg and "CPU-only wheel" in msg


# ------------------------------------------------------------------ the Ray adapters use it


class Captured(Exception):
    """Raised by a fake core so the adapter stops right after choosing its device."""

    def __init__(self, device):
        super().__init__(str(device))
        self.device = device


def _as_device(device):
    """What the core does with the device argument (trainables.pretrain / finetune.api): None is run.device."""
    return torch.device(device) if device is not None else resolve_device("auto")


@pytest.fixture
def fake_ray(monkeypatch, tmp_path, gpu_node):
    """Fake Tune and Ray Train sessions; ``assign(ids)`` sets what ray.get_gpu_ids() returns."""
    import ray
    import ray.train

    from trainables import pretrain
    from trainables import finetune

    state = {"ids": []}
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: state["ids"])
    ctx = SimpleNamespace(get_trial_dir=lambda: str(tmp_path), get_trial_id=lambda: "t0",
                          get_world_rank=lambda: 0, get_experiment_name=lambda: "e")
    monkeypatch.setattr(tune_adapters.tune, "get_context", lambda: ctx)
    monkeypatch.setattr(tune_adapters.tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(ray.train, "get_context", lambda: ctx)
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: None)

    def fake_pretraining(cfg, out_dir, report, device=None, **kw):
        raise Captured(_as_device(device))

    def fake_finetuning(checkpoint, tasks, seeds, cfg, device=None, **kw):
        raise Captured(_as_device(device))

    monkeypatch.setattr(pretrain, "run_pretraining", fake_pretraining)
    monkeypatch.setattr(finetune, "run_finetuning", fake_finetuning)
    return lambda ids: state.update(ids=ids)


def _config(**extra):
    return {"cfg": build_config("smoke").to_dict(), "run_id": "full-s0", "cpus_per_trial": 1, **extra}


TRAINABLES = {
    "pretrain_trainable": lambda: tune_adapters.pretrain_trainable(_config()),
    "_train_worker": lambda: tune_adapters._train_worker(_config()),
    "finetune_trainable": lambda: tune_adapters.finetune_trainable(
        _config(checkpoint="/unused", finetune_seed=0, tasks=["sentiment"])),
}


@pytest.mark.parametrize("name", list(TRAINABLES))
@pytest.mark.parametrize("ids, expected", [([], "cpu"), (["1"], "cuda:1")])
def test_every_trainable_uses_the_device_ray_assigned(fake_ray, name, ids, expected):
    fake_ray(ids)
    with pytest.raises(Captured) as e:
        TRAINABLES[name]()
    assert e.value.device == torch.device(expected)


@pytest.mark.parametrize("name", list(TRAINABLES))
def test_every_trainable_refuses_gpus_it_cannot_use(fake_ray, monkeypatch, name):
    fake_ray(["0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="torch.cuda.is_available"):
        TRAINABLES[name]()


def test_the_probe_runs_on_the_trials_device():
    cfg = tune_adapters.on_device(build_config("smoke"), torch.device("cuda:2"))
    assert cfg.run.device == "cuda:2" and build_config("smoke").run.device == "auto"
