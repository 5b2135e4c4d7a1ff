"""Faults as users meet them (slow): a pretraining trial whose worker process is killed after its first
checkpoint resumes from that checkpoint and ends with the same final weights, bit for bit on the CPU,
as a run that was never interrupted."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from sweeps import phases
from trainables.presets import build_config
from trainables.pretrain import run_pretraining
from trainables.tune_adapters import pretrain_trainable

pytestmark = pytest.mark.slow
OVERRIDES = ["optim.max_steps=60", "run.eval_every=20", "run.checkpoint_every=20", "run.log_every=5",
             "run.threads=1", "data.corpus=synthetic", "model.hidden_size=64", "model.intermediate_size=256"]


def _trial_processes() -> list[psutil.Process]:
    """This test's Ray worker processes running a Tune function trial (their title is ray::ImplicitFunc...):
    descendants of this process only (the local Ray it started), never another session's trials."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any("ImplicitFunc" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _failures(experiment: Path) -> int:
    """How often the experiment's trials failed, from Tune's saved experiment state."""
    state = json.loads(sorted(experiment.glob("experiment_state-*.json"))[-1].read_text())
    return sum(int(json.loads(runtime).get("num_failures", 0)) for _, runtime in state["trial_data"])


def test_a_killed_trial_worker_resumes_from_its_checkpoint_to_the_same_weights(ray_local, tmp_path):
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    cache = tmp_path / "cache"
    cfg = build_config("smoke", "full", [*OVERRIDES, f"data.cache_dir={cache}"])
    run_pretraining(cfg, tmp_path / "straight")  # the uninterrupted reference, same threads and seed

    spec = {"run_id": "full-s0", "variant": "full", "pretrain_seed": 0, "phase": "measure", "cfg": cfg.to_dict()}
    tuner = tune.Tuner(
        tune.with_resources(phases.flatten(pretrain_trainable), {"CPU": 1}),
        param_space={"spec": tune.grid_search([spec]), "probe_tasks": [], "cpus_per_trial": 1,
                     "storage_path": str(tmp_path / "exp")},
        run_config=tune.RunConfig(name="faults", storage_path=str(tmp_path / "exp"), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=2),
                                  # result.json, read below: Tune's automatic loggers are off in a process
                                  # where a sweep's init_ray ran before (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS)
                                  callbacks=[JsonLoggerCallback()]))
    results = {}
    thread = threading.Thread(target=lambda: results.update(grid=tuner.fit()), daemon=True)
    thread.start()
    killed, deadline = None, time.time() + 300
    while time.time() < deadline and thread.is_alive() and killed is None:
        if list((tmp_path / "exp" / "faults").glob("*/checkpoint_000000")):  # the first checkpoint is in storage
            for p in _trial_processes():
                os.kill(p.pid, signal.SIGKILL)
                killed = p.pid
        time.sleep(0.05)
    thread.join(timeout=600)
    assert killed is not None, "the trial finished before its worker could be killed"
    (result,) = list(results["grid"])
    assert result.error is None and result.metrics.get("final") == 1.0, result.error
    trial_dir = Path(result.path)
    resumed = trial_dir / "run"
    assert _failures(tmp_path / "exp" / "faults") >= 1  # Tune saw the worker die and retried the trial
    steps = [json.loads(line)["step"] for line in (trial_dir / "result.json").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 60  # resumed from its checkpoint: no step trained twice
    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit for bit
    restored = (trial_dir / "run" / "run.json").read_text()
    assert '"steps": 60' in restored
