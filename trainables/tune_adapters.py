"""Ray adapters around the Ray-free core: Tune function trainables for pretraining and fine-tuning.

* ``pretrain_trainable``: one pretraining run per trial. Single-process trials run the core in this
  process (Ray Train's start-up is a cost a one-process trial need not pay), on a fraction of a GPU when
  Tune gave it one; trials with several workers start a Ray Train V2
  ``TorchTrainer`` (DDP; gloo on CPU, NCCL on GPU) with a run name unique to the trial and a
  ``TuneReportCallback`` that forwards its reports to Tune. At each evaluation the checkpoint is
  probed on the dev split of a few tasks (``probe_score``): the objective-neutral signal that ASHA
  and Optuna rank on. A NaN/inf loss ends the trial as failed, with the reason, and the sweep goes on.
  A retried trial (a worker died) resumes from its last reported checkpoint.
* ``finetune_trainable``: fine-tunes one checkpoint on the task suite with one seed and returns the
  export rows as a checkpoint holding ``evals.parquet`` and ``predictions.parquet``.

Every trial and Ray Train worker trains on the device Ray assigned it (``trial_device``): the GPU of its
``ray.get_gpu_ids()``, the CPU when it holds none, though the node's GPUs are visible to it.

``config`` is Ray's dict; ``cfg`` the typed tree, converted on the first line.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from ray import tune

from trainables.config import ExperimentConfig, from_dict
from trainables.overrides import apply_overrides
from trainables.intrinsic import as_report

log = logging.getLogger(__name__)

def searched_keys() -> tuple[str, ...]:
    """The values a search trial may set: each registered objective's weight and the mask ratio."""
    from trainables.objectives import OBJECTIVES

    return tuple(f"{n}_weight" for n in OBJECTIVES) + ("mask_ratio",)


SECTIONS = ("model", "objective", "data", "optim", "finetune", "run")


def trial_config(config: dict[str, Any]) -> ExperimentConfig:
    """Ray's dict -> the typed tree: the base config plus the searched values, validated.

    A loss weight or the mask ratio is searched as ``<objective>_weight`` / ``mask_ratio``; any other field as
    its dotted name (``optim.lr``: ``sweeps/recipe_search.py``). With ``tokens_per_run`` the run's steps (and,
    with ``tokens_per_eval``, its evaluation cadence) follow the trial's batch, so that recipes with different
    batches train on the same number of token slots."""
    searched = {f"objective.{k}": float(config[k]) for k in searched_keys() if k in config}
    searched.update({k: v for k, v in config.items() if k.partition(".")[0] in SECTIONS and "." in k})
    cfg = from_dict(config["cfg"])
    cfg = apply_overrides(cfg, searched) if searched else cfg
    return at_tokens(cfg, config["tokens_per_run"], config.get("tokens_per_eval")) if config.get("tokens_per_run") \
        else cfg


def at_tokens(cfg: ExperimentConfig, tokens: float, tokens_per_eval: float | None = None) -> ExperimentConfig:
    """``cfg`` with ``optim.max_steps`` (and ``run.eval_every``) set so that a run of its batch and sequence
    length trains on ``tokens`` token slots (evaluating every ``tokens_per_eval``)."""
    per_step = cfg.optim.batch_size * cfg.data.seq_len
    optim = replace(cfg.optim, max_steps=max(round(tokens / per_step), 1))
    run = replace(cfg.run, eval_every=max(round(tokens_per_eval / per_step), 1)) if tokens_per_eval else cfg.run
    return cfg.replace(optim=optim, run=run)


def trial_device(cfg: ExperimentConfig) -> torch.device:
    """The device Ray assigned to this trial or worker (``trainables.runtime.trial_device``)."""
    import ray

    from trainables.runtime import trial_device as decide

    return decide(ray.get_gpu_ids(), cfg.run.device)


def on_device(cfg: ExperimentConfig, device: torch.device) -> ExperimentConfig:
    """``cfg`` with ``run.device`` pinned to ``device``: the probe resolves its device from the config."""
    return cfg.replace(run=replace(cfg.run, device=str(device)))


def _probe_score(checkpoint_dir: str, cfg: ExperimentConfig, tasks: list[str]) -> dict[str, float]:
    from trainables.finetune import run_probe

    scores = run_probe(checkpoint_dir, tasks, cfg, seed=0, split="dev")
    return {"probe_score": sum(scores.values()) / len(scores), **{f"probe/{k}": v for k, v in scores.items()}}


def tensorboard_dir(config: dict[str, Any], name: str) -> str:
    """Where a trial's one event stream goes: ``<experiment>/tensorboard/<phase>/<run>`` beside the
    phases (not inside a checkpoint, so Tune's checkpoint copies do not repeat it), or the trial's own
    folder when the experiment is on remote storage."""
    root = config.get("storage_path") or ""
    phase = config.get("phase") or "finetune"
    if root and "://" not in root:
        return f"{root}/tensorboard/{phase}/{name}"
    return str(Path(tune.get_context().get_trial_dir()) / "tensorboard")


def _restore_into(out_dir: Path) -> None:
    """Copy Tune's last checkpoint of this trial (if any) where the core resumes from."""
    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return
    with ckpt.as_directory() as d:
        d = Path(d)
        target = out_dir / "resume" if (d / "trainer_state.pt").exists() else out_dir
        shutil.copytree(d, target, dirs_exist_ok=True)
    log.info("restored trial state from %s", ckpt.path)


def _make_report(cfg: ExperimentConfig, probe_tasks: list[str], report_fn, checkpoint_cls, rank: int = 0):
    """The core's ``report(metrics, checkpoint_dir)`` -> Ray's report, with the probe at evaluations.

    Only evaluations and the final result go to Ray: they carry ``probe_score``, which ASHA needs."""

    def report(metrics: dict, checkpoint_dir: str | None = None) -> None:
        is_eval = any(k.startswith("eval/") for k in metrics)
        if not is_eval:
            return
        report.final_sent = report.final_sent or bool(metrics.get("final"))
        metrics = {k: (float(v) if isinstance(v, (bool, int, float)) else v) for k, v in metrics.items()}
        if checkpoint_dir and probe_tasks and rank == 0:
            metrics.update(_probe_score(checkpoint_dir, cfg, probe_tasks))
        ckpt = checkpoint_cls.from_directory(checkpoint_dir) if checkpoint_dir and rank == 0 else None
        report_fn(metrics, checkpoint=ckpt)

    report.final_sent = False
    return report


def pretrain_trainable(config: dict[str, Any]) -> None:
    cfg = trial_config(config)
    cpus = int(config.get("cpus_per_trial", 1))
    torch.set_num_threads(max(cpus, 1))
    if int(config.get("workers", 1)) > 1:
        return _pretrain_with_ray_train(cfg, config)
    from trainables.pretrain import NonFiniteLossError, run_pretraining

    device = trial_device(cfg)
    out_dir = Path(tune.get_context().get_trial_dir()) / "run"
    out_dir.mkdir(parents=True, exist_ok=True)
    _restore_into(out_dir)
    report = _make_report(on_device(cfg, device), list(config.get("probe_tasks", [])), tune.report, tune.Checkpoint)
    name = config.get("run_id") or f"search-{tune.get_context().get_trial_id()}"
    try:
        result = run_pretraining(cfg, out_dir, report, device=device, tensorboard_dir=tensorboard_dir(config, name))
    except NonFiniteLossError as e:
        tune.report({"failed": 1.0, "stop_reason": str(e)})
        return
    if not report.final_sent:
        _report_finished(report, result, out_dir)


def _train_worker(config: dict[str, Any]) -> None:
    """Ray Train worker: the same core; torch.distributed is already set up by the TorchTrainer.

    Each attempt starts from a fresh local directory and Ray Train's last checkpoint (restored on every
    rank, so all ranks resume from the same state)."""
    import ray.train

    from trainables.pretrain import NonFiniteLossError, run_pretraining

    cfg = trial_config(config)
    device = trial_device(cfg)  # a worker is a Ray actor: its ray.get_gpu_ids() are its own GPUs
    rank = ray.train.get_context().get_world_rank()
    torch.set_num_threads(max(int(config.get("cpus_per_worker", 1)), 1))
    out_dir = Path(tempfile.mkdtemp(prefix=f"bert-objectives-{config['run_id']}-rank{rank}-"))
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            target = out_dir / "resume" if (Path(d) / "trainer_state.pt").exists() else out_dir
            shutil.copytree(d, target, dirs_exist_ok=True)
    report = _make_report(on_device(cfg, device), list(config.get("probe_tasks", [])), ray.train.report,
                          ray.train.Checkpoint, rank=rank)
    try:
        result = run_pretraining(cfg, out_dir, report, device=device)
    except NonFiniteLossError as e:
        ray.train.report({"failed": 1.0, "stop_reason": str(e)})
        return
    if not report.final_sent:
        _report_finished(report, result, out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)


def _report_finished(report, result, out_dir: Path) -> None:
    """A restored, already finished run: report its result once more so the trial ends completed."""
    report({"step": result.steps, "tokens_seen": result.tokens_seen, "epoch": result.epochs, "final": 1,
            "train_flops": result.train_flops,
            "wall_time_s": result.wall_time_s, **as_report(result.metrics)}, str(out_dir))


def _pretrain_with_ray_train(cfg: ExperimentConfig, config: dict[str, Any]) -> None:
    """Ray Train V2 pattern: a TorchTrainer per trial, its name unique to the trial (a reused name
    would silently resume another run), its reports forwarded to Tune by TuneReportCallback."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    ctx = tune.get_context()
    gpus = float(config.get("gpus_per_trial", 0))
    workers = int(config.get("workers", 1))
    trainer = TorchTrainer(
        _train_worker,
        train_loop_config={**config, "cfg": cfg.to_dict(), "cpus_per_worker": int(config.get("cpus_per_trial", 1))},
        torch_config=TorchConfig(backend="nccl" if gpus > 0 else "gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0,
                                     resources_per_worker={"CPU": int(config.get("cpus_per_trial", 1)),
                                                           **({"GPU": gpus / workers} if gpus else {})}),
        run_config=RunConfig(name=f"{ctx.get_experiment_name()}-{ctx.get_trial_id()}-train",
                             storage_path=config.get("storage_path") or None,
                             callbacks=[TuneReportCallback()],
                             failure_config=FailureConfig(max_failures=2),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
    )
    trainer.fit()


def finetune_trainable(config: dict[str, Any]) -> None:
    """Fine-tune (or probe) one checkpoint with one seed; the rows come back as a checkpoint."""
    from trainables.finetune import run_finetuning, write_tables

    cfg = trial_config(config)
    torch.set_num_threads(max(int(config.get("cpus_per_trial", 1)), 1))
    device = trial_device(cfg)
    checkpoint = config["checkpoint"]
    with tempfile.TemporaryDirectory() as tmp:
        if "://" in checkpoint:
            local = Path(tmp) / "checkpoint"
            tune.Checkpoint(checkpoint).to_directory(str(local))
            checkpoint = str(local)
        seed = int(config["finetune_seed"])

        def progress(metrics: dict) -> None:
            log.info("%s", {k: v for k, v in metrics.items() if isinstance(v, (int, float))})

        result = run_finetuning(checkpoint, list(config["tasks"]), [seed], cfg, run_id=config["run_id"],
                                mode=config.get("mode", "finetune"), report=progress, device=device,
                                tensorboard_dir=tensorboard_dir(config, f"{config['run_id']}-ft{seed}")
                                if cfg.run.tensorboard else None)
        out = Path(tmp) / "rows"
        write_tables(result, out, select=False)  # the sweep's export chooses the rate across fine-tuning seeds
        # the rate chosen on dev only: with one fine-tuning seed per trial, the export's choice too
        primary = [e.value for e in result.selected_evals() if e.is_primary and math.isfinite(e.value)]
        tune.report({"mean_primary": sum(primary) / max(len(primary), 1), "n_evals": float(len(result.evals)),
                     "final": 1.0}, checkpoint=tune.Checkpoint.from_directory(str(out)))


def checkpoint_uri(ckpt) -> str:
    """A string that ``tune.Checkpoint(uri)`` opens on any node: a local path or ``s3://``/``gs://`` URI."""
    if ckpt is None:
        return ""
    fs = getattr(ckpt, "filesystem", None)
    scheme = {"s3": "s3", "gcs": "gs"}.get(getattr(fs, "type_name", "local"), "")
    return f"{scheme}://{ckpt.path}" if scheme else os.fspath(ckpt.path)
