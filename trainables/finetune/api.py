"""Fine-tuning (and probing) of one checkpoint on tasks over seeds: records in the export schema.

Protocol: one recipe (``cfg.finetune``) for every variant, ``none`` included; AdamW with linear warmup
and decay; dynamic padding with length bucketing; the training subset (``max_train_examples``) is drawn
with the fine-tuning draw, the evaluation subset (``max_eval_examples``) with a fixed seed so every run
scores the same examples. No model selection: the final model is evaluated on dev (reported through
``report``) and on test (the records, each with its dev value beside it; the probe's records too), so
nothing is ever chosen on test. The training subset, head init and data order of fine-tuning seed f come from ``heads.finetune_draw(f, pretraining seed)``: the
same for every variant of one pretraining seed, drawn anew per pretraining seed (nested, so the
multibootstrap's resampling of pretraining seeds covers them; ``analysis.bootstrap``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trainables.config import ExperimentConfig
from trainables.finetune.heads import Checkpoint, build_head_model, head_name, load_encoder
from trainables.finetune.inputs import encode_split, score
from trainables.finetune.loop import predict_logits, train_model
from trainables.finetune.probe import probe_splits
from trainables.finetune.selection import select_on_dev
from trainables.runtime import enable_tf32, resolve_device, resolve_precision, set_allocator
from trainables.schema import EvalRecord, PredictionRecord, build_table
from trainables.task_types import TaskError, get_task_type
from trainables.tasks import TaskData, TaskSpec, load_task, load_user_task, subsample, with_labels_from_train

log = logging.getLogger(__name__)
Report = Callable[[dict], None]
MODES = ("finetune", "probe")


@dataclass
class FinetuneResult:
    evals: list[EvalRecord] = field(default_factory=list)
    predictions: list[PredictionRecord] = field(default_factory=list)

    def to_tables(self, code_version: str = "", select: bool = True):
        """(evals, predictions) as pyarrow Tables in the export schema (``trainables.schema``); with
        ``select``, the learning rate chosen on dev is marked and only its predictions kept."""
        evals = build_table("evals", self.evals, code_version=code_version)
        preds = build_table("predictions", self.predictions, code_version=code_version)
        return select_tables(evals, preds) if select else (evals, preds)

    def extend(self, other: "FinetuneResult") -> None:
        self.evals.extend(other.evals)
        self.predictions.extend(other.predictions)


def select_tables(evals, preds):
    """``selection.select_on_dev`` on Arrow tables, keeping their schemas."""
    import pyarrow as pa

    e, p = select_on_dev(evals.to_pandas(), preds.to_pandas())
    return (pa.Table.from_pandas(e, schema=evals.schema, preserve_index=False),
            pa.Table.from_pandas(p, schema=preds.schema, preserve_index=False))


def _records(run_id: str, spec: TaskSpec, seed: int, mode: str, task_name: str, rows: list[dict],
             preds: list[str], golds: list[str], wall: float, lr: float = float("nan"),
             dev: dict[str, float] | None = None, head: str = "") -> FinetuneResult:
    values = score(spec, preds, golds)
    evals = [EvalRecord(run_id, task_name, seed, mode, m, float(v), m == spec.metric, len(rows), wall,
                        spec.name, spec.positive or "", lr, float((dev or {}).get(m, float("nan"))), True, head)
             for m, v in values.items()]
    predictions = [PredictionRecord(run_id, task_name, seed, mode, r["id"], p, g, lr)
                   for r, p, g in zip(rows, preds, golds)]
    return FinetuneResult(evals, predictions)


def finetune_one(ck: Checkpoint, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
                 run_id: str, writer=None) -> tuple[FinetuneResult, dict[str, float]]:
    """Fine-tune one head with one seed at each rate of ``finetune.rates``: test records (with the dev
    metric beside them, which selects the rate) for each reported split; the best rate's dev metrics."""
    result, best = FinetuneResult(), {}
    for lr in cfg.finetune.rates:
        part, dev = _finetune_at(ck, data, seed, cfg, device, run_id, lr, writer)
        result.extend(part)
        if not best or dev[data.spec.metric] > best[data.spec.metric]:
            best = dev
    return result, best


class TrainLog:
    """TensorBoard scalars of one (task, rate) fine-tuning: the training loss (summed on the device, read
    every ``every`` steps), the dev metrics after each epoch, the test metrics at the end."""

    def __init__(self, writer, prefix: str, dev_score: Callable[[], dict[str, float]], every: int = 10):
        self.writer, self.prefix, self.dev_score, self.every = writer, prefix, dev_score, every
        self.loss, self.n, self.last = 0.0, 0, 0

    def step(self, step: int, loss) -> None:
        self.loss, self.n, self.last = self.loss + loss, self.n + 1, step
        if self.n == self.every:
            self._flush()

    def _flush(self) -> None:
        if self.n:
            self.writer.add_scalar(f"{self.prefix}/train_loss", float(self.loss) / self.n, self.last)
            self.loss, self.n = 0.0, 0

    def epoch(self, epoch: float) -> None:
        self._flush()
        for m, v in self.dev_score().items():
            self.writer.add_scalar(f"{self.prefix}/dev_{m}", v, round(epoch * 100))  # x-axis: epoch x 100

    def test(self, values: dict[str, float], split: str) -> None:
        for m, v in values.items():
            self.writer.add_scalar(f"{self.prefix}/{split}_{m}", v, 0)


def _finetune_at(ck: Checkpoint, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
                 run_id: str, lr: float, writer=None) -> tuple[FinetuneResult, dict[str, float]]:
    t0 = time.perf_counter()
    ft, spec, tok = replace(cfg.finetune, lr=lr), data.spec, ck.tokenizer
    draw = ck.draw(seed)  # nested in the pretraining seed (heads.finetune_draw); records keep the seed itself
    rng = np.random.default_rng(draw)  # the same training subset and order at every rate
    train_rows = subsample(data["train"], ft.max_train_examples, rng)
    model = build_head_model(ck.path, spec, draw, ft.dropout, ft.head, ft.init).to(device)

    def evaluate(split: str):
        rows = subsample(data[split], ft.max_eval_examples, None)
        enc = encode_split(data, rows, tok, ft, ck.max_position, False)
        logits = predict_logits(model, enc, 2 * ft.batch_size, device, tok.pad_token_id, cfg.run.precision)
        return rows, *get_task_type(spec.type).decode(spec, rows, enc, logits, ft)

    last_dev = {}  # the logger's dev evaluation after the last epoch is of the final model: not repeated

    def dev_now() -> dict[str, float]:
        last_dev["dev"] = evaluate("dev")
        return score(spec, *last_dev["dev"][1:])

    logger = TrainLog(writer, f"{spec.name}/lr{lr:g}", dev_now) if writer else None
    train_model(model, encode_split(data, train_rows, tok, ft, ck.max_position, True), ft, rng, device,
                tok.pad_token_id, cfg.run.precision, logger)
    result, dev_metrics = FinetuneResult(), {}
    for split, task_name in [("dev", ""), *spec.reported_names().items()]:
        rows, preds, golds = last_dev.pop(split) if split in last_dev else evaluate(split)
        if split == "dev":
            dev_metrics = score(spec, preds, golds)
            continue
        part = _records(run_id, spec, seed, "finetune", task_name, rows, preds, golds, time.perf_counter() - t0,
                        lr, dev_metrics, head_name(spec, ft.head))
        if logger is not None:
            logger.test({e.metric: e.value for e in part.evals}, split)
        result.extend(part)
    return result, dev_metrics


def _device(device: str | torch.device | None, cfg: ExperimentConfig) -> torch.device:
    """The run's device, with TF32 for its fp32 matmuls on CUDA unless the run asks to be deterministic
    (``run.deterministic``, where the config has it)."""
    dev = resolve_device(device if device is not None else cfg.run.device)
    enable_tf32(dev, deterministic=getattr(cfg.run, "deterministic", False))
    return dev


def _load_all(tasks: list[str], task_files: list[tuple[str, str]], cfg: ExperimentConfig) -> list[TaskData]:
    from trainables.data.sources import language_of

    loaded = [load_task(name, cfg.data.cache_dir or None, language=language_of(cfg.data.corpus)) for name in tasks]
    loaded += [load_user_task(path, kind) for path, kind in task_files]
    return [with_labels_from_train(d) for d in loaded]


def run_finetuning(checkpoint: str | Path, tasks: list[str], seeds: list[int], cfg: ExperimentConfig, *,
                   run_id: str = "", mode: str = "finetune", report: Report | None = None, device=None,
                   task_files: list[tuple[str, str]] | tuple = (), datasets: list[TaskData] | None = None,
                   tensorboard_dir: str | None = None) -> FinetuneResult:
    """Fine-tune (or probe) ``checkpoint`` on each task with each seed; records in the export schema.

    ``checkpoint`` is a checkpoint directory; the untrained baseline is one too
    (``trainables.pretrain.none_checkpoint``, resolved where the grid is built).
    ``task_files`` adds user tasks as (path, type); ``datasets`` adds already-loaded TaskData.
    ``run_id`` defaults to the checkpoint directory's name. ``report(metrics)`` is called after each
    (task, seed) with the test metrics, the dev metrics (``dev/...``) and progress counts.
    ``tensorboard_dir``: one event stream with, per task and rate, the training loss, the dev metrics
    after each epoch and the test metrics (scalars ``<task>/lr<rate>/...``).
    """
    if mode not in MODES:
        raise TaskError(f"mode={mode!r} is not valid; allowed: {', '.join(MODES)}")
    path = Path(checkpoint)
    run_id = run_id or path.name
    ck, dev = Checkpoint.load(path), _device(device, cfg)
    all_data = _load_all(list(tasks), list(task_files), cfg) + list(datasets or [])
    precision, allocator = resolve_precision(dev, cfg.run.precision), set_allocator(cfg.run.allocator)
    log.info("%s %s on %s in %s (%s); allocator %s (%s)", mode, run_id, dev, precision.name, precision.why,
             allocator.name, allocator.why)
    encoder = load_encoder(ck, dev, cfg.finetune.init) if mode == "probe" else None
    result, done, total = FinetuneResult(), 0, len(all_data) * len(seeds)
    writer = None
    if tensorboard_dir and mode == "finetune":
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=tensorboard_dir)
    for data in all_data:
        for seed in seeds:
            t0 = time.perf_counter()
            if mode == "finetune":
                part, dev_metrics = finetune_one(ck, data, seed, cfg, dev, run_id, writer)
            else:
                part, dev_metrics = _probe_records(ck, encoder, data, seed, cfg, dev, run_id, t0)
            result.extend(part)
            done += 1
            log.info("%s seed %d (%s): %s in %.1fs", data.spec.name, seed, mode,
                     {r.task + "/" + r.metric: round(r.value, 4) for r in part.evals}, time.perf_counter() - t0)
            if report is not None:
                report({"task": data.spec.name, "finetune_seed": seed, "mode": mode, "done": done, "total": total,
                        **{f"{r.task}/{r.metric}": r.value for r in part.evals},
                        **{f"dev/{data.spec.name}/{m}": v for m, v in dev_metrics.items()},
                        "wall_time_s": time.perf_counter() - t0})
    if writer is not None:
        writer.close()
    return result


def _probe_records(ck, encoder, data: TaskData, seed: int, cfg, device, run_id: str,
                   t0: float) -> tuple[FinetuneResult, dict[str, float]]:
    """The probe's test records, each with its dev value beside it (the classifier fitted once on train, as
    fine-tuning's records carry the final model's dev metric: analysis decides "learned" on it); the dev metrics."""
    reported = data.spec.reported_names()
    predicted = probe_splits(ck, encoder, data, seed, cfg, device, ("dev", *reported))
    dev = score(data.spec, *predicted["dev"][1:])
    result = FinetuneResult()
    for split, task_name in reported.items():
        result.extend(_records(run_id, data.spec, seed, "probe", task_name, *predicted[split],
                               time.perf_counter() - t0, dev=dev))
    return result, dev


def write_tables(result: FinetuneResult, out: str | Path, select: bool = True) -> tuple[Path, Path]:
    """OUT/evals.parquet and OUT/predictions.parquet, each written to a temp file then renamed; with
    ``select`` (not for one trial of a sweep: the sweep chooses across fine-tuning seeds) the learning
    rate chosen on dev is marked and only its predictions kept."""
    import pyarrow.parquet as pq

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in zip(("evals", "predictions"), result.to_tables(select=select)):
        final, tmp = out / f"{name}.parquet", out / f".{name}.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        paths.append(final)
    return paths[0], paths[1]
