"""Everything a pretraining run writes to disk: resume state, the final checkpoint, run.json, the code version.

    out/                      a stock Hugging Face checkpoint (weights, config, tokenizer) + run.json
    out/resume/               while training: the same, plus trainer_state.pt (optimizer, schedule,
                              RNG, data position); written atomically, removed once run.json exists
    out/snapshots/step-N/     with run.snapshots: the encoder at step N, loadable, its run.json's status
                              ``snapshot``; kept after the run

A run whose run.json says ``completed`` for the same config is finished: running it again returns the
stored result and trains nothing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import BertForPreTraining

from trainables.config import ExperimentConfig, from_dict


class TrainState(NamedTuple):
    """Where a run is: steps done, the data position (phase, epoch, next batch), tokens and time."""

    step: int = 0
    phase: int = 0
    epoch: int = 0
    batch: int = 0  # next batch index inside the epoch
    tokens_seen: int = 0
    wall_time_s: float = 0.0
    flops: float = 0.0  # training FLOPs counted so far (trainables.flops)


class RunResult(NamedTuple):
    out_dir: str
    status: str  # completed
    steps: int
    tokens_seen: int
    epochs: float
    wall_time_s: float
    metrics: dict[str, float]  # intrinsic metrics (trainables.intrinsic)
    train_flops: float = 0.0


def code_version() -> str:
    """``<package version>+<git sha>[.dirty]`` of this checkout, or the package version alone."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg = version("bert-objectives")
    except PackageNotFoundError:
        pkg = "unknown"
    return f"{pkg}+{sha}{'.dirty' if dirty else ''}" if sha else pkg


def device_rng_state(device: torch.device | None) -> torch.Tensor | None:
    """The generator state of the one GPU this process trains on (None off CUDA). Only that one: a Ray Train
    worker sees every GPU of its node, and saving them all (``get_rng_state_all``) would make a resume on a node
    with fewer GPUs (a preempted spot node's trial moved elsewhere) fail in ``set_rng_state_all`` (IndexError)."""
    if device is None or device.type != "cuda":
        return None
    return torch.cuda.get_rng_state(device)


def restore_device_rng(saved, device: torch.device | None) -> None:
    """Put ``device_rng_state``'s state back into ``device``; a list (``get_rng_state_all``, written before)
    gives the entry of this device's index when it has one."""
    if saved is None or device is None or device.type != "cuda" or not torch.cuda.is_available():
        return
    if isinstance(saved, (list, tuple)):
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= len(saved):
            return
        saved = saved[index]
    torch.cuda.set_rng_state(saved, device)


def save_resume_state(out_dir: Path, model, opt, sched, state: TrainState, tokenizer=None,
                      rng_states: list | None = None, device: torch.device | None = None) -> Path:
    """Weights, optimizer, schedule, RNG and data position, written atomically to ``out_dir/resume``.

    ``model`` is a ``PretrainModel``: the encoder and its heads are saved in HF format, so that with
    the tokenizer beside them the directory is also a loadable checkpoint (the sweeps probe it to rank
    trials while they train); the objectives' own modules go into trainer_state.pt. ``rng_states``: every
    rank's (CPU, its own GPU's) generator states under DDP (default: this process's, ``device`` its GPU)."""
    final, tmp = out_dir / "resume", out_dir / f"resume.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.bert.save_pretrained(str(tmp))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(tmp))
    rngs = rng_states or [(torch.get_rng_state(), device_rng_state(device))]
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "state": state._asdict(),
                "extras": model.extras.state_dict(),
                "torch_rng": rngs[0][0], "cuda_rng": rngs[0][1], "rank_rngs": rngs},
               tmp / "trainer_state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def load_resume_state(out_dir: Path, model, opt, sched, rank: int = 0, world: int = 1,
                      device: torch.device | None = None) -> TrainState | None:
    """Restore what ``save_resume_state`` wrote into ``model``, ``opt`` and ``sched``; None if nothing.

    Loaded to the CPU first (a checkpoint written on cuda:0 must not land on this rank's cuda:0); the
    optimizer moves its state to its parameters' device. Each rank gets its own generator states back (the
    CPU's, and ``device``'s where it trains on a GPU);
    resumed on another number of workers, ranks without a saved state are reseeded from rank and step."""
    path = out_dir / "resume" / "trainer_state.pt"
    if not path.exists():
        return None
    saved = BertForPreTraining.from_pretrained(str(out_dir / "resume"))
    model.bert.load_state_dict(saved.state_dict())
    blob = torch.load(path, weights_only=False, map_location="cpu")
    model.extras.load_state_dict(blob.get("extras", {}))
    opt.load_state_dict(blob["optimizer"])
    sched.load_state_dict(blob["scheduler"])
    rngs = blob.get("rank_rngs") or [(blob["torch_rng"], blob.get("cuda_rng"))]
    state = TrainState(**blob["state"])
    if len(rngs) == world:
        cpu_rng, cuda_rng = rngs[rank]
        torch.set_rng_state(cpu_rng)
        restore_device_rng(cuda_rng, device)
    else:
        torch.manual_seed(hash((int(blob["state"]["step"]), rank, len(rngs))) & 0x7FFFFFFF)
    return state


def write_checkpoint(out: Path, model, tokenizer, cfg: ExperimentConfig, result: RunResult, **record) -> None:
    """Stock HF checkpoint (safetensors + config + tokenizer) and run.json; resume/ is then obsolete.

    ``model`` is a ``PretrainModel``: its encoder and heads are the checkpoint; an objective with a
    ``save`` hook writes its own modules beside it (ELECTRA's generator). ``record`` adds fields to
    run.json (data fingerprints, corpus size, parameters; ``masked_per_step`` from ``budget.step_counts``).
    ``tokens_per_step`` is the run's real tokens per step: input formats differ in it (``full_sentences``'
    separators, ``sentence_pairs``' pairs), so a comparison across formats can state what each saw."""
    model.bert.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    for o in model.objectives:
        if o.save is not None:
            o.save(model.extras[o.name] if o.name in model.extras else None, model.bert, tokenizer, out,
                   o.options_of(model.options))
    run = {"status": result.status, "config": cfg.to_dict(), "code_version": code_version(), "steps": result.steps,
           "tokens_seen": result.tokens_seen, "epochs": result.epochs, "wall_time_s": result.wall_time_s,
           "tokens_per_s": result.tokens_seen / result.wall_time_s if result.wall_time_s else 0.0,
           "train_flops": result.train_flops,
           "tokens_per_step": result.tokens_seen / result.steps if result.steps else 0.0,
           "intrinsic": dict(result.metrics), **record}
    tmp = out / "run.json.tmp"
    tmp.write_text(json.dumps(_json_safe(run), indent=2, sort_keys=True, allow_nan=False))
    os.replace(tmp, out / "run.json")
    shutil.rmtree(out / "resume", ignore_errors=True)


SNAPSHOTS = "snapshots"  # <out>/snapshots/step-N: the encoder kept mid-run (run.snapshots)


def snapshot_subpath(step: int) -> str:
    """Where a run's snapshot at ``step`` lives, relative to the run's directory (or checkpoint URI)."""
    return f"{SNAPSHOTS}/step-{step:07d}"


def snapshot_dir(out: Path, step: int) -> Path:
    return Path(out) / snapshot_subpath(step)


def write_snapshot(out: Path, model, tokenizer, cfg: ExperimentConfig, state: TrainState, epochs: float,
                   metrics: dict, planned_steps: int, branched_at: int | None = None) -> Path:
    """The encoder and heads at ``state.step`` as a loadable checkpoint with a run.json whose status is
    ``snapshot`` (never taken for a finished run), its tokens, FLOPs and held-out metrics; written atomically, so
    a run resumed from before it writes the same snapshot again."""
    final = snapshot_dir(out, state.step)
    tmp = final.with_name(f"{final.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.bert.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    run = {"status": "snapshot", "config": cfg.to_dict(), "code_version": code_version(), "steps": state.step,
           "planned_steps": planned_steps, "tokens_seen": state.tokens_seen, "train_flops": state.flops,
           "epochs": epochs, "wall_time_s": state.wall_time_s, "intrinsic": dict(metrics),
           # optim.schedule=wsd: the step the decay branch left the run at (None: the run's own state at ``steps``)
           "branched_at": branched_at}
    (tmp / "run.json").write_text(json.dumps(_json_safe(run), indent=2, sort_keys=True, allow_nan=False))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def snapshots_of(out: str | os.PathLike) -> list[dict]:
    """The snapshots a run kept, by step: each snapshot's run.json with its ``path``."""
    root = Path(out) / SNAPSHOTS
    found = []
    for d in sorted(root.glob("step-*")) if root.is_dir() else []:
        if (d / "run.json").exists() and ".tmp" not in d.name:
            found.append({**json.loads((d / "run.json").read_text()), "path": str(d)})
    return sorted(found, key=lambda r: r["steps"])


def _json_safe(obj):
    """``obj`` with every NaN or infinity as null: run.json is strict JSON (jq, JavaScript, DuckDB read it), and a
    metric an objective does not have (``rtd_acc`` of a run without ELECTRA) is NaN in the run's metrics."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def finished_result(out: Path, cfg: ExperimentConfig) -> RunResult | None:
    """The stored result when ``out`` holds a completed run of exactly ``cfg``."""
    path = out / "run.json"
    if not path.exists():
        return None
    run = json.loads(path.read_text())
    if run.get("status") != "completed" or run.get("config") != _json_safe(cfg.to_dict()):
        return None
    return RunResult(str(out), "completed", run["steps"], run["tokens_seen"], _nan(run["epochs"]),
                     _nan(run["wall_time_s"]), {k: _nan(v) for k, v in run["intrinsic"].items()},
                     _nan(run.get("train_flops", 0.0)))


def _nan(x):
    """run.json's null (a non-finite number when written) back as NaN."""
    return float("nan") if x is None else x


def load_run_config(out_dir: str | os.PathLike) -> ExperimentConfig:
    return from_dict(json.loads((Path(out_dir) / "run.json").read_text())["config"])
