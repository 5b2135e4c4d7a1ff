"""Pretraining of one variant: ``run_pretraining(cfg, out_dir, report)``, a plain function (no Ray).

    python -m trainables.pretrain --preset smoke --variant full --out runs/full
    python -m trainables.pretrain --preset cpu-small --variant mlm_only --corpus builtin \\
        --set objective.mask_ratio=0.3 --out runs/mlm30

The driver reads as four calls: build the data, build the model, build the optimizer, step. The data
is the prepared corpus, memory-mapped (``trainables.data.prepare``), and its samples for this
pretraining seed (``trainables.data.samples``): every variant of one seed gets the same chunks in the
same batches, and the loader builds and masks the coming batches ahead of the step. Under
``torch.distributed`` (Ray Train workers) every rank reads the same global batch and trains on its
rows, so neither the data nor the masks depend on the number of workers. Losses stay on the device
and are read every ``run.log_every`` steps (the NaN check with them): nothing in a step waits on the
device. Metrics go through ``report(metrics, checkpoint_dir)``; messages through ``logging``. The
output is a stock Hugging Face checkpoint plus ``run.json`` (``trainables.checkpoint``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.distributed as dist
from transformers import BertForPreTraining
from transformers.utils import logging as hf_logging

from trainables.budget import Budget, plan_budget, step_cost, step_counts
from trainables.checkpoint import (RunResult, TrainState, device_rng_state, finished_result, load_resume_state,
                                   save_resume_state, write_checkpoint, write_snapshot)
from trainables.config import ConfigError, ExperimentConfig, RunConfig, data_seed, objective_for_variant
from trainables.data.batches import Loader, Position, SpecialIds, StepBatch, StepData, continuation_table, special_ids
from trainables.data.prepare import open_prepared
from trainables.data.samples import Samples
from trainables.data.shards import PreparedCorpus
from trainables.data.text import CorpusError
from trainables.data.tokenizer import cache_root
from trainables.intrinsic import EvalSets, as_report, build_eval_sets, evaluate_intrinsic
from trainables.model import PretrainModel, build_model, count_parameters, freeze_unused
from trainables.objectives import OBJECTIVES, VARIANTS, get_objective, total_loss
from trainables.presets import PRESETS, build_config, check_epochs
from trainables.runtime import autocast as build_autocast
from trainables.runtime import (build_adamw, current_allocator, enable_tf32, resolve_device, resolve_precision,
                                set_allocator, use_deterministic_kernels, wsd_lambda)

log = logging.getLogger(__name__)
hf_logging.disable_progress_bar()  # "Writing model shards" bars would drown the run's own progress

Report = Callable[..., None]  # report(metrics: dict, checkpoint_dir: str | None = None)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the run stops and is recorded as failed with this reason."""


@dataclass
class PretrainingData:
    corpus: PreparedCorpus
    tokenizer: object
    sp: SpecialIds
    steps: StepData  # the masked global batch of every training position
    eval_sets: EvalSets
    data_seed: int

    @property
    def fingerprint(self) -> str:
        return self.corpus.fingerprint


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def build_pretraining_data(cfg: ExperimentConfig) -> PretrainingData:
    """The prepared corpus (prepared first if needed), this seed's samples and the held-out sets."""
    d, o, opt = cfg.data, cfg.objective, cfg.optim
    corpus = open_prepared(cfg)
    tokenizer = corpus.tokenizer
    sp = special_ids(tokenizer)
    seed = data_seed(cfg)
    lengths = [d.seq_len] + ([opt.phase2_seq_len] if opt.phase2_steps else [])
    phases = [Samples(corpus, seq_len=L, short_seq_prob=d.short_seq_prob, batch_size=opt.batch_size, data_seed=seed,
                      static=o.static_masking) for L in lengths]
    masked = any(get_objective(n).masked for n in o.active)
    masking = dict(ratio=o.mask_ratio, mask_token_frac=o.mask_token_frac, random_token_frac=o.random_token_frac,
                   strategy=o.masking, stream=o.mask_stream) if masked else None
    steps = StepData(corpus, phases, o.input_format, sp, seed=cfg.run.seed, masking=masking,
                     phase2_from=opt.max_steps - opt.phase2_steps, static_shape=cfg.model.compile,
                     continuation=continuation_table(tokenizer) if o.masking == "whole_word" else None)
    eval_sets = build_eval_sets(corpus, sp, seq_len=d.seq_len, batch_size=min(opt.batch_size, 32),
                                n_batches=cfg.run.eval_batches, eval_mask_ratio=o.eval_mask_ratio)
    log.info("data: %d train / %d held-out documents (%d skipped: one sentence), input %s, data seed %d",
             len(corpus.train_docs), len(corpus.heldout_docs), corpus.manifest["skipped_documents"],
             o.input_format, seed)
    return PretrainingData(corpus, tokenizer, sp, steps, eval_sets, seed)


def initial_model(cfg: ExperimentConfig, data: PretrainingData) -> BertForPreTraining:
    """Seeded fresh weights, or an existing checkpoint for continued (domain-adaptive) pretraining."""
    if not cfg.run.init_checkpoint:
        return build_model(cfg.model, data.sp.vocab_size, data.sp.pad, cfg.run.seed)
    try:
        model = BertForPreTraining.from_pretrained(cfg.run.init_checkpoint)
    except (OSError, ValueError) as e:
        raise ConfigError(f"run.init_checkpoint={cfg.run.init_checkpoint!r} could not be loaded as a BERT "
                          f"checkpoint: {str(e).splitlines()[0]}") from None
    if model.config.vocab_size < data.sp.vocab_size or model.config.max_position_embeddings < cfg.data.seq_len:
        raise ConfigError(f"run.init_checkpoint={cfg.run.init_checkpoint!r}: vocabulary {model.config.vocab_size} / "
                          f"positions {model.config.max_position_embeddings} do not fit its tokenizer "
                          f"({data.sp.vocab_size}) and data.seq_len={cfg.data.seq_len}")
    return model


def build_optimizer(model: torch.nn.Module, cfg: ExperimentConfig, total_steps: int | None = None):
    """AdamW with warmup and linear decay over ``total_steps`` (default ``optim.max_steps``; a token or
    FLOP budget plans its own)."""
    o = cfg.optim
    total = o.max_steps if total_steps is None else total_steps
    return build_adamw(model, lr=o.lr, weight_decay=o.weight_decay, warmup_steps=int(o.warmup_frac * total),
                       total_steps=total, betas=(o.beta1, o.beta2), eps=o.eps, decay_steps=o.decay_steps(total))


def _tensorboard(out_dir: Path, cfg: ExperimentConfig, rank: int, logdir: str | None):
    if rank != 0 or not cfg.run.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=logdir or str(out_dir / "tensorboard"))


def train_step(module, opt, sched, cfg: ExperimentConfig, batch: StepBatch, meter: dict, device, autocast) -> None:
    """One optimizer step on this rank's rows of a global batch (``StepBatch``), over ``grad_accum``
    micro-batches; under DDP all but the last micro-batch skip the gradient all-reduce (``no_sync``).
    Losses are added to ``meter`` on the device."""
    o, accum = cfg.objective, cfg.optim.grad_accum
    ddp = getattr(module, "_orig_mod", module)  # torch.compile wraps the DDP module
    for k in range(accum):
        mb = batch.micro(k, accum).to(device)
        sync = ddp.no_sync() if k < accum - 1 and hasattr(ddp, "no_sync") else contextlib.nullcontext()
        with sync:
            with autocast():
                out = module(mb)
                loss, parts = total_loss(out, mb, o.weights, o.options)
            (loss / accum).backward()
        for name, v in (("total", loss), *parts.items()):
            key = f"loss/{name}"
            meter[key] = meter.get(key, 0.0) + v.detach().float() / accum
    if cfg.optim.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.optim.grad_clip)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


def run_pretraining(cfg: ExperimentConfig, out_dir: str | os.PathLike, report: Report | None = None,
                    device: str | torch.device | None = None, *, tensorboard_dir: str | None = None,
                    resume: bool = True) -> RunResult:
    """Pretrain ``cfg.objective``'s mix for ``cfg.optim.max_steps`` steps (0 for ``none``) into ``out_dir``."""
    out = Path(out_dir)
    done = finished_result(out, cfg)
    if done is not None and resume:
        log.info("%s already finished; nothing to do", out)
        return done
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    allocator = set_allocator(cfg.run.allocator)  # before the first step's allocations
    rank, world = _world()
    dev = _training_device(cfg, device)
    if cfg.optim.batch_size % (world * cfg.optim.grad_accum):
        raise ConfigError(f"optim.batch_size={cfg.optim.batch_size} must be divisible by workers ({world}) x "
                          f"optim.grad_accum ({cfg.optim.grad_accum})")
    out.mkdir(parents=True, exist_ok=True)
    data = build_pretraining_data(cfg)
    check_epochs(cfg, data.corpus.train_tokens)  # a bert-* preset on the built-in corpus is refused, not run
    budget = plan_budget(cfg, data.steps, data.sp.vocab_size) if cfg.objective.variant != "none" else Budget("steps", 0, 0)
    # Phase 2 at the same share of this variant's planned steps as full's (max_steps - phase2_steps at a steps budget)
    data.steps.phase2_from = budget.phase2_from
    model = pretrain_model(cfg, initial_model(cfg, data)).to(dev)
    opt, sched = build_optimizer(model, cfg, budget.planned_steps)
    # Dropout and ELECTRA's samples draw from torch's generator: one stream per rank (rank 0's is the one-worker
    # run's), saved and restored per rank on resume. Masks are counter-based data and do not use it.
    torch.manual_seed(cfg.run.seed + rank)
    resumed = load_resume_state(out, model, opt, sched, rank=rank, world=world, device=dev) if resume else None
    state = resumed or TrainState()
    if state.step:
        log.info("resuming %s at step %d", out, state.step)
    run = _Run(cfg, out, model, opt, sched, data, _tensorboard(out, cfg, rank, tensorboard_dir),
               report or (lambda metrics, checkpoint_dir=None: None), rank, dev, budget.planned_steps, budget, world,
               snapshot_points(cfg, budget.planned_steps) if cfg.objective.variant != "none" else ())
    run.module, run.autocast = _training_module(model, cfg, world), lambda: build_autocast(dev, cfg.run.precision)
    module, autocast = run.module, run.autocast
    model.train()
    precision = resolve_precision(dev, cfg.run.precision)
    log.info("pretraining %s: %d parameters, %d steps on %s in %s (%s; rank %d of %d)%s; allocator %s (%s)",
             cfg.objective.variant, count_parameters(model.bert), run.steps, dev, precision.name, precision.why,
             rank, world, f", budget {budget.target:.3g} {budget.kind}" if budget.kind != "steps" else "",
             allocator.name, allocator.why)
    start = Position(state.step, state.phase, state.epoch, state.batch)
    active = [get_objective(n) for n in cfg.objective.active]
    if state.step < budget.cap and not budget.spent(state.step, state.tokens_seen, state.flops):
        # wall-clock time: the waits on the loader, logging and evaluation count too (run.json's tokens/s)
        last_end = time.perf_counter()
        for pos, batch in Loader(data.steps, start, budget.cap, workers=cfg.data.loader_workers,
                                 pin=dev.type == "cuda", rank=rank, world=world, accum=cfg.optim.grad_accum):
            # the global batch's cost, the same on every rank (host metadata: no sync)
            flops = step_cost("flops", cfg, active, batch.shape, batch.n_tokens, data.sp.vocab_size)
            tokens = batch.n_tokens
            train_step(module, opt, sched, cfg, batch, run.meter, dev, autocast)
            nxt, now = data.steps.next(pos), time.perf_counter()
            state = TrainState(nxt.step, nxt.phase, nxt.epoch, nxt.batch, state.tokens_seen + tokens,
                               state.wall_time_s + now - last_end, state.flops + flops)
            last_end = now
            done = budget.spent(state.step, state.tokens_seen, state.flops)
            run.end_of_step(state, tokens, last=done)
            if done:
                break
    return _finish(run, state)


def _training_device(cfg: ExperimentConfig, device: str | torch.device | None) -> torch.device:
    """The device (the trial's, or ``run.device``), bound as CUDA's current one, with the run's kernel settings."""
    dev = torch.device(device) if device is not None else resolve_device(cfg.run.device)
    if dev.type == "cuda" and dev.index is not None:
        torch.cuda.set_device(dev)  # else a CUDA call that names no device opens a context on GPU 0 too
    use_deterministic_kernels(cfg.run.deterministic)
    enable_tf32(dev, deterministic=cfg.run.deterministic)  # fp32 matmuls outside autocast (CUDA only)
    return dev


def pretrain_model(cfg: ExperimentConfig, bert: BertForPreTraining) -> PretrainModel:
    """The encoder and heads with the active objectives' own modules; heads no objective reads are
    frozen, so DDP needs no search for parameters without gradients."""
    active = [get_objective(n) for n in cfg.objective.active]
    heads = {o.head for o in active}
    freeze_unused(bert, tuple(p for o in OBJECTIVES.values() if o.head not in heads for p in o.head_params))
    return PretrainModel(bert, active, cfg.objective.options, cfg.model, cfg.run.seed)


def _training_module(model: PretrainModel, cfg: ExperimentConfig, world: int) -> torch.nn.Module:
    """The pretraining forward: DDP-wrapped under several workers, compiled if asked."""
    module = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    return torch.compile(module) if cfg.model.compile else module


class StepEnd(NamedTuple):
    """What happens after an optimizer step: the one place the cadence of a run is decided."""

    log: bool  # losses (read from the device here, NaN-checked), learning rate and throughput
    evaluate: bool  # intrinsic metrics on the held-out sets
    checkpoint: bool  # resume state written (rank 0)
    snapshot: bool = False  # the encoder kept at this step (run.snapshots), after an evaluation


def step_end(step: int, last: bool, run: RunConfig, snapshots: tuple[int, ...] = ()) -> StepEnd:
    """Log every ``log_every`` steps and at the last; evaluate and checkpoint on their cadence except
    at the last step (the budget is spent), which ``_finish`` evaluates and checkpoints in full; at a
    snapshot step (``run.snapshot_steps``), evaluate and keep the encoder."""
    snap = step in snapshots and not last
    return StepEnd(log=step % run.log_every == 0 or last,
                   evaluate=(bool(run.eval_every) and step % run.eval_every == 0 or snap) and not last,
                   checkpoint=bool(run.checkpoint_every) and step % run.checkpoint_every == 0 and not last,
                   snapshot=snap)


@dataclass
class _Run:
    """The pieces of one run that the step end and the finish share."""

    cfg: ExperimentConfig
    out: Path
    model: PretrainModel
    opt: torch.optim.Optimizer
    sched: object
    data: PretrainingData
    tb: object
    report: Report
    rank: int
    device: torch.device
    steps: int
    budget: Budget
    world: int = 1
    snapshot_points: tuple["SnapshotPoint", ...] = ()
    module: object = None  # the training forward (DDP / compiled wrapper of model)
    autocast: object = None
    meter: dict = dataclasses.field(default_factory=dict)  # losses summed on the device since the last log
    window: list = dataclasses.field(default_factory=lambda: [0, 0, time.perf_counter()])  # tokens, steps, t0

    def read_losses(self, step: int) -> dict[str, float]:
        """The mean losses since the last log: the one read-back from the device, and the NaN check."""
        n = max(self.window[1], 1)
        keys = sorted(self.meter)
        values = torch.stack([torch.as_tensor(self.meter[k]) for k in keys]) if keys else torch.zeros(0)
        if self.world > 1 and keys:  # every rank sees the same mean losses, so a NaN stops every rank at this step
            dist.all_reduce(values)
            values = values / self.world
        losses = dict(zip(keys, (v / n for v in values.tolist())))  # a single sync for the whole window
        self.meter.clear()
        if losses and not math.isfinite(losses["loss/total"]):
            raise NonFiniteLossError(f"loss became {losses['loss/total']} by step {step} "
                                     f"({', '.join(f'{k}={v:.4g}' for k, v in losses.items())})")
        return losses

    def _branch(self, state: TrainState, point: "SnapshotPoint") -> None:
        """optim.schedule=wsd: from this step, the decay of a run of ``point.budget`` steps on the batches that run
        trains (the same ones this run trains next), kept as the snapshot; then the weights, the optimizer and the
        generators are put back, so this run trains on as if no branch had been made."""
        cfg, o = self.cfg, self.cfg.optim
        weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        optimizer = copy.deepcopy(self.opt.state_dict())
        decay = wsd_lambda(int(o.warmup_frac * self.steps), point.budget, point.budget - point.at)
        sched = torch.optim.lr_scheduler.LambdaLR(self.opt, decay, last_epoch=point.at - 1)
        active = [get_objective(n) for n in cfg.objective.active]
        tokens, flops, pos = state.tokens_seen, state.flops, state_position(state)
        with self._rng_kept(True):
            for at, batch in Loader(self.data.steps, pos, point.budget, workers=cfg.data.loader_workers,
                                    pin=self.device.type == "cuda", rank=self.rank, world=self.world, accum=o.grad_accum):
                flops += step_cost("flops", cfg, active, batch.shape, batch.n_tokens, self.data.sp.vocab_size)
                tokens += batch.n_tokens
                train_step(self.module, self.opt, sched, cfg, batch, {}, self.device, self.autocast)
                pos = self.data.steps.next(at)
            raw = evaluate_intrinsic(self.model, self.data.eval_sets, self.device)
        if self.rank == 0:
            end = TrainState(pos.step, pos.phase, pos.epoch, pos.batch, tokens, state.wall_time_s, flops)
            write_snapshot(self.out, self.model, self.data.tokenizer, cfg, end, self.data.steps.epochs_made(pos), raw,
                           self.steps, branched_at=point.at)
        self.model.load_state_dict(weights)
        self.opt.load_state_dict(optimizer)
        self.opt.zero_grad(set_to_none=True)

    def _rng_kept(self, keep: bool):
        """An evaluation made only for a snapshot leaves the generators as it found them (ELECTRA's metrics
        sample), so a run with snapshots trains the same bits as one without."""
        if not keep:
            return contextlib.nullcontext()
        return torch.random.fork_rng(devices=[self.device.index or 0] if self.device.type == "cuda" else [])

    def end_of_step(self, state: TrainState, tokens: int, last: bool) -> None:
        points = {p.at: p for p in self.snapshot_points}
        todo = step_end(state.step, last, self.cfg.run, tuple(points))
        point = points.get(state.step)
        self.window[0] += tokens
        self.window[1] += 1
        metrics: dict = {"step": state.step}
        if todo.log:
            now = time.perf_counter()
            metrics.update(lr=self.sched.get_last_lr()[0], tokens_seen=state.tokens_seen,
                           tokens_per_s=self.window[0] / max(now - self.window[2], 1e-9),
                           epoch=self.data.steps.epochs_made(state_position(state)), **self.read_losses(state.step))
            self.window = [0, 0, now]
            _log_scalars(self.tb, metrics, state.step)
        if todo.evaluate:
            with self._rng_kept(todo.snapshot and not step_end(state.step, last, self.cfg.run).evaluate):
                raw = evaluate_intrinsic(self.model, self.data.eval_sets, self.device)
            intrinsic = as_report(raw)
            _log_scalars(self.tb, intrinsic, state.step)
            epochs = self.data.steps.epochs_made(state_position(state))
            metrics.update(tokens_seen=state.tokens_seen, epoch=epochs, wall_time_s=state.wall_time_s, **intrinsic)
            if todo.snapshot and point.budget == point.at and self.rank == 0:
                write_snapshot(self.out, self.model, self.data.tokenizer, self.cfg, state, epochs, raw, self.steps)
        if todo.snapshot and point.budget != point.at:
            self._branch(state, point)
        ckpt = None
        if todo.checkpoint:
            rngs = _rng_states(self.world, self.device)  # a collective: every rank checkpoints at the same step
            if self.rank == 0:
                ckpt = str(save_resume_state(self.out, self.model, self.opt, self.sched, state, self.data.tokenizer,
                                             rng_states=rngs))
        if todo.evaluate or ckpt or (todo.log and not last):
            self.report(metrics, ckpt)


class SnapshotPoint(NamedTuple):
    """A snapshot (run.snapshots): taken at step ``at`` of the run, standing for a run of ``budget`` steps (the same
    with optim.schedule=linear, a mid-run state; with wsd, ``at`` is where that run's decay starts, and the
    snapshot is its end)."""

    at: int
    budget: int


def snapshot_points(cfg: ExperimentConfig, planned_steps: int) -> tuple[SnapshotPoint, ...]:
    """The run's snapshots: at each share of ``run.snapshots`` of its planned steps; with optim.schedule=wsd, each
    a decay branch that starts where a WSD run of that many steps starts its decay."""
    budgets = cfg.run.snapshot_steps(planned_steps)
    if cfg.optim.schedule != "wsd":
        return tuple(SnapshotPoint(k, k) for k in budgets)
    warmup = int(cfg.optim.warmup_frac * planned_steps)
    points = tuple(SnapshotPoint(k - cfg.optim.decay_steps(k), k) for k in budgets)
    for p in points:
        if p.at < max(warmup, 1) or p.at >= p.budget:
            raise ConfigError(f"run.snapshots={cfg.run.snapshots!r}: the snapshot of {p.budget} steps would start its "
                              f"decay at step {p.at}, inside the warmup ({warmup} steps) or with no decay step; "
                              "allowed: later shares, or a larger optim.decay_frac")
    return points


def _rng_states(world: int, device: torch.device) -> list:
    """Every rank's torch generator states (CPU, and its own GPU's), gathered for rank 0's checkpoint."""
    mine = (torch.get_rng_state(), device_rng_state(device))
    if world == 1:
        return [mine]
    states = [None] * world
    dist.all_gather_object(states, mine)
    return states


def state_position(state: TrainState) -> Position:
    return Position(state.step, state.phase, state.epoch, state.batch)


def _finish(run: _Run, state: TrainState) -> RunResult:
    """Final intrinsic evaluation, the checkpoint and run.json (rank 0), and the final report."""
    metrics = evaluate_intrinsic(run.model, run.data.eval_sets, run.device)
    result = RunResult(str(run.out), "completed", state.step, state.tokens_seen,
                       run.data.steps.epochs_made(state_position(state)), state.wall_time_s, metrics, state.flops)
    if run.rank == 0:
        _log_scalars(run.tb, as_report(metrics), state.step)
        d, precision = run.data, resolve_precision(run.device, run.cfg.run.precision)
        allocator = current_allocator(run.cfg.run.allocator)  # what the start set (read, not set again)
        write_checkpoint(run.out, run.model, d.tokenizer, run.cfg, result, data_fingerprint=d.fingerprint,
                         tokenizer_sha256=d.corpus.manifest["tokenizer_sha256"], data_seed=d.data_seed,
                         train_tokens=d.corpus.train_tokens, parameters=count_parameters(run.model.bert),
                         budget=run.budget.kind, budget_target=run.budget.target,
                         planned_steps=run.budget.planned_steps,
                         masked_per_step=step_counts(d.steps, state.step).masked_per_step,
                         precision=precision.name, precision_why=precision.why,
                         snapshot_steps=[p.budget for p in run.snapshot_points],
                         allocator=allocator.name, allocator_why=allocator.why)
    if run.tb is not None:
        run.tb.close()
    # "final", not "done": Tune reserves "done" and sets it on the last result of a stopped trial too.
    run.report({"step": state.step, "tokens_seen": state.tokens_seen, "epoch": result.epochs, "final": 1,
                "wall_time_s": result.wall_time_s, "train_flops": state.flops, **as_report(metrics)},
               str(run.out) if run.rank == 0 else None)
    return result


def _log_scalars(tb, metrics: dict, step: int) -> None:
    if tb is None:
        return
    for k, v in metrics.items():
        if k != "step" and isinstance(v, (int, float)) and math.isfinite(float(v)):
            tb.add_scalar(k, float(v), step)


def none_checkpoint(cfg: ExperimentConfig) -> Path:
    """The untrained baseline for ``cfg`` (seeded initial weights + tokenizer), cached by config."""
    none_cfg = cfg.replace(objective=objective_for_variant("none"))
    key = hashlib.sha256(json.dumps({"model": none_cfg.to_dict()["model"], "data": none_cfg.to_dict()["data"],
                                     "seed": cfg.run.seed}, sort_keys=True).encode()).hexdigest()[:16]
    out = cache_root(cfg.data.cache_dir) / "none" / key
    if finished_result(out, none_cfg) is None:  # cached: skip loading the corpus again
        run_pretraining(none_cfg, out)
    return out


# --- the command line: one variant of a preset, with --corpus, --seed and --set overrides, into --out;
# resumes what --out holds

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.pretrain", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu-small", help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--variant", default="full", help=f"one of: {', '.join(VARIANTS)}")
    p.add_argument("--corpus", help="builtin | synthetic | PATH | hub:NAME[:CONFIG] (sets data.corpus)")
    p.add_argument("--seed", type=int, help="pretraining seed (sets run.seed)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override, e.g. objective.mask_ratio=0.3 (repeatable)")
    p.add_argument("--out", required=True, help="output directory (a Hugging Face checkpoint + run.json)")
    p.add_argument("--no-resume", action="store_true", help="start over even if OUT holds a resumable state")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    overrides = list(args.overrides)
    if args.corpus:
        overrides.insert(0, f"data.corpus={args.corpus}")
    if args.seed is not None:
        overrides.insert(0, f"run.seed={args.seed}")
    try:
        cfg = build_config(args.preset, args.variant, overrides)

        def report(metrics, checkpoint_dir=None):
            shown = {k: v for k, v in metrics.items() if k in ("step", "tokens_per_s", "eval/mlm_acc", "eval/pair_acc_nsp")
                     or k.startswith("loss/")}
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()), flush=True)

        result = run_pretraining(cfg, args.out, report, resume=not args.no_resume)
    except (ConfigError, CorpusError, NonFiniteLossError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": result.out_dir, "steps": result.steps, "tokens_seen": result.tokens_seen,
                      "wall_time_s": round(result.wall_time_s, 2), **result.metrics}))
    return 0



if __name__ == "__main__":
    sys.exit(main())
