"""Pretraining of one variant: ``run_pretraining(cfg, out_dir, report)``, a plain function (no Ray).

    python -m trainables.pretrain --preset smoke --variant full --out runs/full
    python -m trainables.pretrain --preset cpu-small --variant mlm_only --corpus builtin \\
        --set objective.mask_ratio=0.3 --out runs/mlm30

The driver reads as four calls: build the data, build the model, build the optimizer, step. Metrics
go through ``report(metrics, checkpoint_dir)`` (Ray's reporting is one such callback, added by the
sweeps); messages through ``logging``. Under ``torch.distributed`` (Ray Train workers) the model is
wrapped in DDP and each rank takes its share of every global batch, so the data order does not
depend on the number of workers. The output directory is a stock Hugging Face checkpoint (weights,
config, tokenizer) plus ``run.json``; ``resume/`` holds the exact state for resuming.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from trainables.checkpoint import (RunResult, TrainState, finished_result, load_resume_state, save_resume_state,
                                   write_checkpoint)
from trainables.config import ConfigError, ExperimentConfig, RunConfig, build_config, objective_for_variant
from trainables.data.sources import load_documents
from trainables.data.text import CorpusError
from trainables.data.examples import Batcher, SpecialIds, TokenizedCorpus, special_ids, tokenize_corpus
from trainables.data.masking import mask_batch, step_generator, unmasked
from trainables.data.tokenizer import build_tokenizer, cache_root, corpus_fingerprint
from trainables.intrinsic import EvalSets, build_eval_sets, evaluate_intrinsic
from trainables.model import PretrainModel, build_model, count_parameters, freeze_unused
from trainables.objectives import OBJECTIVES, VARIANTS, get_objective, total_loss
from trainables.runtime import autocast as build_autocast
from trainables.runtime import build_adamw, resolve_device

log = logging.getLogger(__name__)
hf_logging.disable_progress_bar()  # "Writing model shards" bars would drown the run's own progress

Report = Callable[..., None]  # report(metrics: dict, checkpoint_dir: str | None = None)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the run stops and is recorded as failed with this reason."""


@dataclass
class PretrainingData:
    tokenizer: object
    sp: SpecialIds
    corpus: TokenizedCorpus
    fingerprint: str  # corpus content
    batchers: list[Batcher]  # phase 1, and phase 2 at the longer length when configured
    eval_sets: EvalSets


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def build_pretraining_data(cfg: ExperimentConfig) -> PretrainingData:
    d, o = cfg.data, cfg.objective
    docs = load_documents(d.corpus, text_column=d.text_column, hub_split=d.hub_split, max_documents=d.max_documents)
    fingerprint = corpus_fingerprint(docs)
    cache = cache_root(d.cache_dir)
    tokenizer_dir = d.tokenizer_dir or cfg.run.init_checkpoint  # continued pretraining keeps the model's vocabulary
    tokenizer, tok_key = build_tokenizer(docs, cfg.model.vocab_size, d.lowercase, tokenizer_dir=tokenizer_dir,
                                         cache_dir=cache, fingerprint=fingerprint)
    sp = special_ids(tokenizer)
    corpus = tokenize_corpus(docs, tokenizer, tok_key, fingerprint=fingerprint, heldout_fraction=d.heldout_fraction,
                             data_seed=d.data_seed, cache_dir=cache)
    corpus = _drop_single_sentence_documents(corpus, d.corpus)
    task = "single" if o.input_format == "single" else (o.pair_task or "nsp")
    phases = [(d.seq_len, cfg.optim.batch_size)]
    if cfg.optim.phase2_steps:
        phases.append((cfg.optim.phase2_seq_len, cfg.optim.batch_size))
    batchers = [Batcher(corpus.train, task, sp, seq_len=L, short_seq_prob=d.short_seq_prob, batch_size=B,
                        data_seed=d.data_seed, static=o.static_masking) for L, B in phases]
    eval_sets = build_eval_sets(corpus.heldout, sp, seq_len=d.seq_len, batch_size=min(cfg.optim.batch_size, 32),
                                n_batches=cfg.run.eval_batches, eval_mask_ratio=o.eval_mask_ratio, data_seed=d.data_seed)
    log.info("data: %d train / %d held-out documents, %d train tokens, input %s", len(corpus.train),
             len(corpus.heldout), corpus.train_tokens, task)
    return PretrainingData(tokenizer, sp, corpus, fingerprint, batchers, eval_sets)


def _drop_single_sentence_documents(corpus: TokenizedCorpus, name: str) -> TokenizedCorpus:
    """Every variant trains on the same documents, so one-sentence documents (no pair possible) are
    skipped for all of them, counted and logged."""
    train = [doc for doc in corpus.train if len(doc) >= 2]
    heldout = [doc for doc in corpus.heldout if len(doc) >= 2]
    skipped = len(corpus.train) + len(corpus.heldout) - len(train) - len(heldout)
    if len(train) < 2 or len(heldout) < 2:
        raise CorpusError(f"corpus {name!r}: too few documents with two or more sentences ({len(train)} train, "
                          f"{len(heldout)} held out; {skipped} one-sentence documents skipped), so no sentence "
                          "pairs can be built; documents are separated by blank lines")
    if skipped:
        log.warning("corpus %s: skipped %d one-sentence documents (no sentence pair possible)", name, skipped)
    return dataclasses.replace(corpus, train=train, heldout=heldout)


def _initial_model(cfg: ExperimentConfig, data: PretrainingData) -> BertForPreTraining:
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


def build_optimizer(model: torch.nn.Module, cfg: ExperimentConfig):
    o = cfg.optim
    return build_adamw(model, lr=o.lr, weight_decay=o.weight_decay, warmup_steps=int(o.warmup_frac * o.max_steps),
                       total_steps=o.max_steps, betas=(o.beta1, o.beta2), eps=o.eps)


def _tensorboard(out_dir: Path, cfg: ExperimentConfig, rank: int, logdir: str | None):
    if rank != 0 or not cfg.run.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=logdir or str(out_dir / "tensorboard"))


def _shard(batch, rank: int, world: int):
    """This rank's rows of a global batch (rows rank, rank+world, ...)."""
    return type(batch)(*(t[rank::world] for t in batch)) if world > 1 else batch


def train_step(module, opt, sched, cfg: ExperimentConfig, data: PretrainingData, batcher: Batcher,
               state: TrainState, rank: int, world: int, device, autocast) -> tuple[dict[str, float], int]:
    """One optimizer step over ``grad_accum`` micro-batches; returns the logged losses and real tokens."""
    o = cfg.objective
    weights = o.weights
    losses: dict[str, float] = {}
    tokens = 0
    batch = _shard(batcher.batch(state.epoch, state.batch), rank, world)
    micro = [type(batch)(*(t[i::cfg.optim.grad_accum] for t in batch)) for i in range(cfg.optim.grad_accum)]
    for k, mb in enumerate(micro):
        if any(get_objective(n).masked for n in o.active):
            gen = step_generator(cfg.run.seed, state.step * 64 + k * world + rank)
            masked = mask_batch(mb, data.sp, ratio=o.mask_ratio, mask_token_frac=o.mask_token_frac,
                                random_token_frac=o.random_token_frac, generator=gen,
                                static_seed=cfg.run.seed if o.static_masking else None)
        else:
            masked = unmasked(mb)
        masked = masked.to(device)
        with autocast():
            out = module(masked)
            loss, parts = total_loss(out, masked, weights, o.options)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"loss became {float(loss)} at step {state.step} "
                                     f"({', '.join(f'{k}={float(v):.4g}' for k, v in parts.items())})")
        (loss / cfg.optim.grad_accum).backward()
        for name, v in parts.items():
            losses[f"loss/{name}"] = losses.get(f"loss/{name}", 0.0) + float(v.detach()) / cfg.optim.grad_accum
        losses["loss/total"] = losses.get("loss/total", 0.0) + float(loss.detach()) / cfg.optim.grad_accum
        tokens += int(mb.attention_mask.sum())
    if cfg.optim.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.optim.grad_clip)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return losses, tokens * world


def _advance(state: TrainState, batchers: list[Batcher], cfg: ExperimentConfig, tokens: int, dt: float) -> TrainState:
    step = state.step + 1
    phase, epoch, b = state.phase, state.epoch, state.batch + 1
    if b >= batchers[phase].batches_in_epoch(epoch):
        epoch, b = epoch + 1, 0
    if phase == 0 and len(batchers) > 1 and step >= cfg.optim.max_steps - cfg.optim.phase2_steps:
        phase, epoch, b = 1, 0, 0
    return TrainState(step, phase, epoch, b, state.tokens_seen + tokens, state.wall_time_s + dt)


def epochs_made(state: TrainState, batchers: list[Batcher]) -> float:
    return state.epoch + state.batch / max(batchers[state.phase].batches_in_epoch(state.epoch), 1)


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
    rank, world = _world()
    dev = torch.device(device) if device is not None else resolve_device(cfg.run.device)
    if cfg.optim.batch_size % (world * cfg.optim.grad_accum):
        raise ConfigError(f"optim.batch_size={cfg.optim.batch_size} must be divisible by workers ({world}) x "
                          f"optim.grad_accum ({cfg.optim.grad_accum})")
    out.mkdir(parents=True, exist_ok=True)
    data = build_pretraining_data(cfg)
    model = _pretrain_model(cfg, _initial_model(cfg, data)).to(dev)
    opt, sched = build_optimizer(model, cfg)
    torch.manual_seed(cfg.run.seed)  # dropout draws from torch's generator; saved and restored on resume
    state = (load_resume_state(out, model, opt, sched) if resume else None) or TrainState()
    if state.step:
        log.info("resuming %s at step %d", out, state.step)
    run = _Run(cfg, out, model, opt, sched, data, _tensorboard(out, cfg, rank, tensorboard_dir),
               report or (lambda metrics, checkpoint_dir=None: None), rank, dev,
               0 if cfg.objective.variant == "none" else cfg.optim.max_steps)
    module = _training_module(model, cfg, world)
    autocast = lambda: build_autocast(dev, cfg.run.precision)  # noqa: E731
    model.train()
    log.info("pretraining %s: %d parameters, %d steps on %s (rank %d of %d)", cfg.objective.variant,
             count_parameters(model.bert), run.steps, dev, rank, world)
    while state.step < run.steps:
        t0 = time.perf_counter()
        losses, tokens = train_step(module, opt, sched, cfg, data, data.batchers[state.phase], state, rank, world,
                                    dev, autocast)
        state = _advance(state, data.batchers, cfg, tokens, time.perf_counter() - t0)
        run.end_of_step(state, losses, tokens)
    return _finish(run, state)


def _pretrain_model(cfg: ExperimentConfig, bert: BertForPreTraining) -> PretrainModel:
    """The encoder and heads with the active objectives' own modules; heads no objective reads are
    frozen, so DDP needs no search for parameters without gradients."""
    active = [get_objective(n) for n in cfg.objective.active]
    heads = {o.head for o in active}
    freeze_unused(bert, tuple(p for o in OBJECTIVES.values() if o.head not in heads for p in o.head_params))
    return PretrainModel(bert, active, cfg.objective.options, cfg.model, cfg.run.seed)


def _training_module(model: PretrainModel, cfg: ExperimentConfig, world: int) -> torch.nn.Module:
    """The pretraining forward: DDP-wrapped under several workers, compiled if asked."""
    module = model
    if world > 1:
        module = torch.nn.parallel.DistributedDataParallel(module)
    return torch.compile(module) if cfg.model.compile else module


class StepEnd(NamedTuple):
    """What happens after an optimizer step: the one place the cadence of a run is decided."""

    log: bool  # losses, learning rate and throughput to TensorBoard and report
    evaluate: bool  # intrinsic metrics on the held-out sets
    checkpoint: bool  # resume state written (rank 0)


def step_end(step: int, steps: int, run: RunConfig) -> StepEnd:
    """Log every ``log_every`` steps and at the last; evaluate and checkpoint on their cadence except
    at the last step, which ``_finish`` evaluates and checkpoints in full."""
    last = step == steps
    return StepEnd(log=step % run.log_every == 0 or last,
                   evaluate=bool(run.eval_every) and step % run.eval_every == 0 and not last,
                   checkpoint=bool(run.checkpoint_every) and step % run.checkpoint_every == 0 and not last)


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
    window_tokens: int = 0
    window_t0: float = dataclasses.field(default_factory=time.perf_counter)

    def end_of_step(self, state: TrainState, losses: dict[str, float], tokens: int) -> None:
        todo = step_end(state.step, self.steps, self.cfg.run)
        self.window_tokens += tokens
        metrics: dict = {"step": state.step}
        if todo.log:
            now = time.perf_counter()
            metrics.update(lr=self.sched.get_last_lr()[0], tokens_seen=state.tokens_seen,
                           tokens_per_s=self.window_tokens / max(now - self.window_t0, 1e-9),
                           epoch=epochs_made(state, self.data.batchers), **losses)
            self.window_tokens, self.window_t0 = 0, now
            _log_scalars(self.tb, metrics, state.step)
        if todo.evaluate:
            intrinsic = evaluate_intrinsic(self.model.bert, self.data.eval_sets, self.device).as_dict()
            _log_scalars(self.tb, intrinsic, state.step)
            metrics.update(tokens_seen=state.tokens_seen, epoch=epochs_made(state, self.data.batchers),
                           wall_time_s=state.wall_time_s, **losses, **intrinsic)
        ckpt = None
        if todo.checkpoint and self.rank == 0:
            ckpt = str(save_resume_state(self.out, self.model, self.opt, self.sched, state, self.data.tokenizer))
            metrics.update(losses)
        if todo.evaluate or ckpt or (todo.log and state.step != self.steps):
            self.report(metrics, ckpt)


def _finish(run: _Run, state: TrainState) -> RunResult:
    """Final intrinsic evaluation, the checkpoint and run.json (rank 0), and the final report."""
    metrics = evaluate_intrinsic(run.model.bert, run.data.eval_sets, run.device)
    result = RunResult(str(run.out), "completed", state.step, state.tokens_seen,
                       epochs_made(state, run.data.batchers), state.wall_time_s, metrics)
    if run.rank == 0:
        _log_scalars(run.tb, metrics.as_dict(), state.step)
        d = run.data
        write_checkpoint(run.out, run.model, d.tokenizer, run.cfg, result, data_fingerprint=d.fingerprint,
                         tokens_cache_key=d.corpus.key, train_tokens=d.corpus.train_tokens,
                         parameters=count_parameters(run.model.bert))
    if run.tb is not None:
        run.tb.close()
    # "final", not "done": Tune reserves "done" and sets it on the last result of a stopped trial too.
    run.report({"step": state.step, "tokens_seen": state.tokens_seen, "epoch": result.epochs, "final": 1,
                "wall_time_s": result.wall_time_s, **metrics.as_dict()}, str(run.out) if run.rank == 0 else None)
    return result


def _log_scalars(tb, metrics: dict, step: int) -> None:
    if tb is None:
        return
    for k, v in metrics.items():
        if k != "step" and isinstance(v, (int, float)) and math.isfinite(float(v)):
            tb.add_scalar(k, float(v), step)


def none_checkpoint(cfg: ExperimentConfig) -> Path:
    """The untrained baseline for ``cfg`` (seeded initial weights + tokenizer), cached by config."""
    import hashlib

    none_cfg = cfg.replace(objective=objective_for_variant("none"))
    key = hashlib.sha256(json.dumps({"model": none_cfg.to_dict()["model"], "data": none_cfg.to_dict()["data"],
                                     "seed": cfg.run.seed}, sort_keys=True).encode()).hexdigest()[:16]
    out = cache_root(cfg.data.cache_dir) / "none" / key
    if finished_result(out, none_cfg) is None:  # cached: skip loading the corpus again
        run_pretraining(none_cfg, out)
    return out


def _cli(argv: list[str] | None = None) -> int:
    from trainables.config import PRESETS

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
                      "wall_time_s": round(result.wall_time_s, 2), **result.metrics._asdict()}))
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
