"""The autoscaling path on a local fake multi-node cluster (cluster/local-autoscaling.yaml).

The head advertises 0 CPUs, so nothing runs until the autoscaler starts worker nodes. Three
tests: a two-trial Ray Tune job of our own (shows the autoscaling path and the shared storage
independently of the sweep); the same cluster with token authentication on (workers join with
the token, a wrong token is refused); and the real smoke sweep,
`sweeps/objective_weights.py --address ...`, run as a subprocess against the cluster. Each
starts a fresh cluster and tears it down in a finally block (every process of the head's
session is signalled; none may survive).

RAY_AUTH_MODE=disabled in the other tests is a test-only setting: CI runners hold no token.
The cloud configs keep token authentication on (tests/cluster/test_cluster_configs.py checks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "sweeps" / "objective_weights.py"
TEST_ENV = {"RAY_AUTH_MODE": "disabled"}  # test-only: see the module docstring

pytestmark = pytest.mark.slow


def _load_local_harness():
    """cluster/ is not a package (it holds configs), so load cluster/local.py by path."""
    spec = importlib.util.spec_from_file_location("cluster_local", REPO / "cluster" / "local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


local = _load_local_harness()


def _report(what: str, started: float, workers) -> dict:
    """One line per run with the measured numbers (visible with pytest -s, and in the log)."""
    first = min((w.started_at for w in workers), default=float("nan"))
    line = {"run": what, "worker_nodes_started": len(workers),
            "node_types": sorted({w.node_type for w in workers}),
            "seconds_to_first_worker": round(first - started, 1),
            "seconds_total": round(time.time() - started, 1)}
    print(json.dumps(line))
    return line


def _assert_no_leftovers(cluster) -> None:
    assert local._session_processes(cluster.head_pid) == []
    assert not cluster.temp_dir.exists()


def _build_trainable():
    """A trial that needs one CPU and checkpoints. Built in a function so Ray pickles it by
    value: worker nodes cannot import this test module by name."""

    def trainable(config):
        import ray
        from ray import tune

        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "state.json").write_text(json.dumps({"x": config["x"]}))
            metrics = {"score": 2 * config["x"], "node_id": ray.get_runtime_context().get_node_id()}
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))

    return trainable


@pytest.mark.timeout(300)
def test_tune_trials_make_the_autoscaler_start_workers(tmp_path, monkeypatch):
    import ray
    from ray import tune

    monkeypatch.setenv("RAY_AUTH_MODE", TEST_ENV["RAY_AUTH_MODE"])
    storage = tmp_path / "shared-storage"
    with local.local_autoscaling_cluster(env=TEST_ENV) as cluster:
        ray.init(address=cluster.address, logging_level="WARNING")
        try:
            assert ray.cluster_resources().get("CPU", 0) == 0  # nothing can run yet
            started = time.time()
            tuner = tune.Tuner(
                tune.with_resources(_build_trainable(), {"cpu": 1}),
                param_space={"x": tune.grid_search([1, 2])},
                tune_config=tune.TuneConfig(max_concurrent_trials=2),
                run_config=tune.RunConfig(name="autoscale", storage_path=str(storage)),
            )
            results = tuner.fit()
        finally:
            ray.shutdown()
        workers = local.worker_nodes(cluster.address)
        _report("tune-2-trials", started, workers)
    _assert_no_leftovers(cluster)

    assert not results.errors
    assert len(workers) >= 1 and {w.node_type for w in workers} == {"ray.worker.cpu"}
    assert {r.metrics["node_id"] for r in results} <= {w.node_id for w in workers}
    assert sorted(r.metrics["score"] for r in results) == [2, 4]
    for result in results:  # checkpoints live in the shared storage, not on a node's disk
        checkpoint = Path(result.checkpoint.path)
        assert checkpoint.is_relative_to(storage / "autoscale")
        assert json.loads((checkpoint / "state.json").read_text())["x"] in (1, 2)


TOKEN_PROBE = """
import os, subprocess, sys
import ray
address = sys.argv[1]
connect = f"import ray; ray.init(address={address!r}, logging_level='ERROR')"
wrong = subprocess.run([sys.executable, "-c", connect], capture_output=True, timeout=120,
                       env={**os.environ, "RAY_AUTH_TOKEN": "not-the-cluster-token"})
print("WRONG_TOKEN_EXIT", wrong.returncode)
ray.init(address=address, logging_level="ERROR")
print("TASK_RESULT", ray.get(ray.remote(num_cpus=1)(lambda: 41 + 1).remote()))
"""


@pytest.mark.timeout(300)
def test_token_auth_cluster_scales_and_refuses_a_wrong_token():
    """With RAY_AUTH_MODE=token, autoscaled workers join with the token; a wrong token is refused.

    Run through the harness CLI in a subprocess, with a random token in RAY_AUTH_TOKEN: this
    never writes ~/.ray/auth_token (which would turn auth on for other local Ray sessions).
    """
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    run = subprocess.run([sys.executable, str(REPO / "cluster" / "local.py"), "run", "--",
                          sys.executable, "-c", TOKEN_PROBE, "{address}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines = run.stdout.splitlines()
    wrong_exit = next(int(line.split()[1]) for line in lines if line.startswith("WRONG_TOKEN_EXIT"))
    assert wrong_exit != 0
    assert "TASK_RESULT 42" in lines  # ran on a worker node: the head has no CPUs
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    assert summary["worker_nodes_started"] >= 1


def _stop_the_node_running(trial_dir: Path) -> int:
    """Kill the (fake) node that runs this trial as a preempted spot node goes: its raylet and every
    worker process under it. The trial's pid is in its first result; its raylet is an ancestor."""
    import psutil

    pid = json.loads((trial_dir / "result.json").read_text().splitlines()[0])["pid"]
    raylet = next(p for p in psutil.Process(pid).parents() if "raylet" in p.name())
    for proc in [raylet, *raylet.children(recursive=True)]:  # the node and every process on it, at once
        proc.kill()
    return pid


def _watch_and_stop_a_node(run: subprocess.Popen, experiment: Path, deadline: float) -> Path | None:
    """While the sweep runs: when a measurement trial has its first checkpoint in storage (and is not
    done), stop its node. Returns the trial's directory (None if every trial finished first)."""
    stopped = None
    while run.poll() is None and time.time() < deadline:
        if stopped is None:
            for trial in experiment.glob("measure/*/"):
                results = (trial / "result.json").read_text().splitlines() if (trial / "result.json").exists() else []
                if any(trial.glob("checkpoint_*")) and results and not json.loads(results[-1]).get("final"):
                    _stop_the_node_running(trial)
                    stopped = trial
                    break
        time.sleep(0.05)
    run.wait(timeout=max(1, deadline - time.time()))
    return stopped


@pytest.mark.timeout(900)
def test_smoke_sweep_survives_a_stopped_worker_node(tmp_path):
    """The real smoke sweep on autoscaled workers; one worker node is stopped mid-measurement. Its trial
    finishes elsewhere from its checkpoint (no step trained twice) and the export holds every run once."""
    storage, name = tmp_path / "shared-storage", "smoke-autoscale"
    env = {**os.environ, **TEST_ENV, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with local.local_autoscaling_cluster(env=TEST_ENV) as cluster:
        started = time.time()
        command = [sys.executable, str(SWEEP), "--preset", "smoke",
                   "--address", cluster.address, "--storage", f"file://{storage}", "--name", name,
                   "--cpus-per-trial", "1", "--gpus-per-trial", "0", "--max-concurrent", "2",
                   "--num-samples", "2", "--seeds", "1", "--tasks", "sentiment,pos",
                   "--set", "optim.max_steps=400", "--set", "run.eval_every=40"]
        with open(tmp_path / "sweep.log", "w") as out:
            run = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
            stopped = _watch_and_stop_a_node(run, storage / name, time.time() + 840)
        workers = local.worker_nodes(cluster.address)
        _report("smoke-sweep-node-stopped", started, workers)
    _assert_no_leftovers(cluster)

    log = "\n".join((tmp_path / "sweep.log").read_text().splitlines()[-80:])
    assert run.returncode == 0, log
    assert stopped is not None, "every measurement run finished before a node could be stopped\n" + log
    export = storage / name / "export"
    for table in ("runs", "evals", "predictions"):
        assert (export / f"{table}.parquet").is_file(), f"missing {table}.parquet in {export}"

    import pandas as pd

    runs = pd.read_parquet(export / "runs.parquet")
    measure = runs[runs.phase == "measure"]
    assert runs.run_id.is_unique and (measure.status == "completed").all(), runs[["run_id", "status"]]
    assert stopped.name in set(measure.run_id)
    evals = pd.read_parquet(export / "evals.parquet")
    assert set(evals.run_id) == set(measure.run_id)
    assert not evals.duplicated(["run_id", "task", "finetune_seed", "mode", "metric", "lr"]).any()
    results = [json.loads(line) for line in (stopped / "result.json").read_text().splitlines()]
    steps = [r["step"] for r in results]
    assert steps == sorted(set(steps)) and results[-1].get("final") == 1.0  # resumed, not restarted
    assert len({r["pid"] for r in results}) == 2  # finished by another worker process than it began in
