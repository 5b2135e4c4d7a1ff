"""The first GPU run and the first cluster run: every sweep script requests GPUs at the GPU presets, DDP
workers get whole GPUs, presets are sized to their corpus, and trials sharing a GPU are told about MPS.
All of it on the CPU: the arguments, the resources Tune would get, and the checks before any trial."""

import argparse
import io
import json

import pytest

from sweeps import cli, domain_adapt, mask_ratio, objective_weights, phases, runner, variants
from sweeps.frame import check_prepared_epochs, default_parse
from trainables.config import ConfigError
from trainables.presets import PRESETS, build_config, check_epochs, run_epochs

GPU_PRESETS = ("gpu-quick", "bert-mini", "bert-small", "bert-base")
SCRIPTS = {"objective_weights": objective_weights, "variants": variants, "mask_ratio": mask_ratio,
           "domain_adapt": domain_adapt}


@pytest.fixture
def checkpoint(tmp_path):
    """A directory domain_adapt accepts as --checkpoint (a BERT config.json, no run.json: --preset decides)."""
    from transformers import BertConfig

    d = tmp_path / "base"
    BertConfig(vocab_size=1024, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64).save_pretrained(d)
    (tmp_path / "corpus.txt").write_text("one. two.\n\nthree. four.\n")
    return d


def _parse(script: str, preset: str, checkpoint, *more: str) -> argparse.Namespace:
    argv = ["--preset", preset, "--storage", "unused", *more]
    if script == "domain_adapt":
        return domain_adapt.parse_args(argv + ["--checkpoint", str(checkpoint),
                                               "--corpus", str(checkpoint.parent / "corpus.txt")])[0]
    return default_parse(SCRIPTS[script].SWEEP, argv)


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_every_sweep_script_requests_gpus_at_the_gpu_presets(script, preset, checkpoint):
    args = _parse(script, preset, checkpoint)
    assert args.gpus_per_trial > 0
    for resources in (phases.pretrain_resources(args), phases.finetune_resources(args)):
        assert resources["GPU"] == args.gpus_per_trial and resources["CPU"] >= 1
    cli.check_gpus_per_worker(args.gpus_per_trial, args.workers_per_trial)  # the defaults pass their own rule


@pytest.mark.parametrize("gpus, workers, expected", [(8, 8, 1.0), (2, 1, 1.0), (0.25, 1, 0.25), (0, 4, None)])
def test_a_fine_tuning_trial_holds_at_most_one_gpu(gpus, workers, expected):
    """Fine-tuning is one process on one device, whatever a DDP pretraining trial asked for."""
    args = argparse.Namespace(gpus_per_trial=gpus, workers_per_trial=workers, cpus_per_trial=4)
    assert phases.finetune_resources(args).get("GPU") == expected


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_cpu_presets_defaults_are_unchanged(script, checkpoint):
    """The default main job's numbers must not move: cpu-small's (and smoke's) defaults as they were."""
    before = {"objective_weights": {"smoke": dict(num_samples=4, seeds=2, finetune_seeds=1),
                                    # redesigned to answer in 20 minutes (docs/rules/cpu-small.toml)
                                    "cpu-small": dict(num_samples=2, seeds=4, finetune_seeds=1,
                                                      measure_best_mix=False, variants="mlm_only,none",
                                                      search_steps=160)},
              "variants": {"smoke": dict(seeds=2, finetune_seeds=1), "cpu-small": dict(seeds=3, finetune_seeds=1)},
              "mask_ratio": {"smoke": dict(seeds=2, finetune_seeds=1), "cpu-small": dict(seeds=2, finetune_seeds=1)},
              "domain_adapt": {"smoke": dict(seeds=2, finetune_seeds=1),
                               "cpu-small": dict(seeds=3, finetune_seeds=1)}}[script]
    for preset, expected in before.items():
        args = _parse(script, preset, checkpoint)
        assert {k: getattr(args, k) for k in expected} == expected
        assert args.gpus_per_trial == 0 and args.cpus_per_trial == 1


def test_every_preset_has_sweep_defaults_of_its_own():
    assert set(cli.PRESET_DEFAULTS) == set(PRESETS)


def test_the_gpu_quick_main_job_keeps_its_defaults(checkpoint):
    args = _parse("objective_weights", "gpu-quick", checkpoint)
    assert (args.num_samples, args.seeds, args.finetune_seeds, args.gpus_per_trial, args.cpus_per_trial) == \
        (8, 5, 1, 0.25, 4)


@pytest.mark.parametrize("gpus, workers", [(1, 2), (0.5, 2), (3, 2), (2.5, 1 + 1), (1, 4)])
def test_ddp_workers_need_whole_gpus_each(gpus, workers, capsys, tmp_path):
    with pytest.raises(ConfigError) as e:
        cli.check_gpus_per_worker(gpus, workers)
    msg = str(e.value)
    assert "\n" not in msg and f"--gpus-per-trial={gpus:g}" in msg and f"--workers-per-trial={workers}" in msg
    assert f"0 or a multiple of {workers}" in msg
    rc = objective_weights.main(["--preset", "smoke", "--gpus-per-trial", str(gpus), "--workers-per-trial",
                                 str(workers), "--storage", str(tmp_path), "--plan", "--hardware", "h200"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "whole GPUs" in err


@pytest.mark.parametrize("gpus, workers", [(0, 4), (2, 2), (4, 2), (0.25, 1), (1, 1), (8, 4)])
def test_whole_gpus_per_worker_and_one_worker_fractions_are_allowed(gpus, workers):
    cli.check_gpus_per_worker(gpus, workers)


# ------------------------------------------------------------------ presets sized to their data

BUILTIN = 5.9e6  # training tokens of the built-in corpus (sweeps.plan.BUILTIN_TRAIN_TOKENS)


@pytest.mark.parametrize("preset", ["smoke", "cpu-small", "gpu-quick"])
def test_the_small_presets_stay_allowed_on_the_builtin_corpus(preset):
    check_epochs(build_config(preset), BUILTIN)


@pytest.mark.parametrize("preset, epochs", [("bert-mini", 111), ("bert-small", 278), ("bert-base", 555)])
def test_the_bert_presets_refuse_to_repeat_the_builtin_corpus(preset, epochs):
    cfg = build_config(preset)
    assert run_epochs(cfg, BUILTIN) == pytest.approx(epochs, abs=1)
    with pytest.raises(ConfigError) as e:
        check_epochs(cfg, BUILTIN)
    msg = str(e.value)
    assert "\n" not in msg and f"{epochs} epochs" in msg and "hub:wikimedia/wikipedia:20231101.en" in msg
    assert "data.allow_epochs=16" in msg
    check_epochs(build_config(preset, overrides=[f"data.allow_epochs={epochs + 1}"]), BUILTIN)  # the way out
    check_epochs(cfg, 4e9)  # a Wikipedia-sized corpus


def test_epochs_count_the_second_phase_at_its_length_and_none_trains_nothing():
    cfg = build_config("bert-base", overrides=["optim.phase2_steps=10000", "optim.phase2_seq_len=512"])
    o = cfg.optim
    assert run_epochs(cfg, 1e9) == pytest.approx((90_000 * 128 + 10_000 * 512) * o.batch_size / 1e9)
    check_epochs(build_config("bert-base", "none"), 1.0)


def test_the_frame_refuses_before_any_trial_from_the_prepared_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"tokens": 6_000_000}))
    check_prepared_epochs(build_config("gpu-quick"), str(tmp_path))
    with pytest.raises(ConfigError, match="111 epochs"):
        check_prepared_epochs(build_config("bert-mini"), str(tmp_path))  # 6.0 M less 2% held out: 5.88 M
    check_prepared_epochs(build_config("bert-mini"), str(tmp_path / "not-prepared"))  # nothing to read: no check


def test_the_plan_refuses_a_bert_preset_on_the_builtin_corpus(tmp_path, capsys):
    argv = ["--preset", "bert-mini", "--plan", "--hardware", "h200", "--storage", str(tmp_path)]
    assert objective_weights.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "epochs" in err[0] and "--corpus hub:" in err[0]
    assert objective_weights.main(argv + ["--set", "data.allow_epochs=200"]) == 0


# ------------------------------------------------------------------ CUDA MPS for trials sharing a GPU


def _mps_args(gpus: float, mps: bool = False) -> argparse.Namespace:
    return argparse.Namespace(gpus_per_trial=gpus, mps=mps)


def test_fractional_gpus_get_one_line_of_mps_advice_and_nothing_is_started(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))  # no daemon listening there
    started = []
    out = io.StringIO()
    line = runner.mps_advice(_mps_args(0.25), build_config("gpu-quick"), out=out,
                             which=lambda name: f"/usr/bin/{name}", run=started.append)
    assert started == [] and out.getvalue() == line + "\n" and "\n" not in line
    assert "4 trials share each GPU" in line and "nvidia-cuda-mps-control -d" in line and "--mps" in line
    assert "4.5 ms of kernel launches" in line  # the step floor, stated where MPS is


def test_mps_starts_only_under_the_flag(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    started = []
    line = runner.mps_advice(_mps_args(0.5, mps=True), None, out=io.StringIO(), which=lambda name: "/x/" + name,
                             run=lambda cmd, check: started.append(cmd))
    assert started == [["/x/nvidia-cuda-mps-control", "-d"]] and "started" in line
    (tmp_path / "control").write_text("")  # a daemon is listening: not started twice
    started.clear()
    assert "running" in runner.mps_advice(_mps_args(0.5, mps=True), None, out=io.StringIO(),
                                          which=lambda name: "/x/" + name, run=lambda cmd, check: started.append(cmd))
    assert started == []


def test_no_mps_advice_for_whole_gpus_or_where_mps_is_absent():
    assert runner.mps_advice(_mps_args(1), which=lambda n: "/x") is None
    assert runner.mps_advice(_mps_args(0), which=lambda n: "/x") is None
    assert runner.mps_advice(_mps_args(0.25), which=lambda n: None) is None
    with pytest.raises(ConfigError, match="--mps but nvidia-cuda-mps-control is not on PATH"):
        runner.mps_advice(_mps_args(0.25, mps=True), which=lambda n: None)


def _node(cpus: float, head: bool = False) -> dict:
    return {"Alive": True, "Resources": {"CPU": cpus, **({"node:__internal_head__": 1.0} if head else {})}}


@pytest.mark.parametrize("nodes, refused", [
    ([_node(8, head=True)], None),  # one machine: its disk is every node's
    ([_node(0, head=True)], "head has no CPUs"),  # the cluster configs' head: trials run elsewhere
    ([_node(4, head=True), _node(8)], "has 2 nodes"),
    ([_node(4, head=True), {**_node(8), "Alive": False}], None),  # a dead node does not count
])
def test_local_storage_is_refused_where_other_machines_do_the_work(nodes, refused, tmp_path):
    from trainables.data.shards import check_shared_storage
    from trainables.data.text import CorpusError

    for uri in ("s3://bucket/x", "gs://bucket/x", f"file://{tmp_path}"):
        check_shared_storage(uri, nodes)  # the user's word that every node reaches it
    if refused is None:
        check_shared_storage(str(tmp_path), nodes)
        return
    with pytest.raises(CorpusError) as e:
        check_shared_storage(str(tmp_path), nodes)
    message = str(e.value)
    assert refused in message and "--storage s3://BUCKET/PATH|gs://BUCKET/PATH" in message and "\n" not in message


def test_a_sweep_on_a_cluster_refuses_local_storage_before_preparing_anything(tmp_path, monkeypatch, capsys):
    """On the cluster configs' shape (a head without CPUs and GPU workers) the sweep stops after connecting,
    with one line, instead of preparing shards on a worker's disk that the driver then cannot read."""
    import ray

    from sweeps import frame

    monkeypatch.setattr(ray, "init", lambda *a, **k: None)
    monkeypatch.setattr(ray, "nodes", lambda: [_node(0, head=True), _node(8)])

    def prepared(*a, **k):
        raise AssertionError("the data was prepared on a cluster with local storage")
    monkeypatch.setattr(frame, "prepare_data", prepared)
    rc = objective_weights.main(["--preset", "smoke", "--address", "auto", "--storage", str(tmp_path),
                                 "--name", "n", "--hardware", "h200"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "has 2 nodes" in err[0] and "s3://" in err[0]
