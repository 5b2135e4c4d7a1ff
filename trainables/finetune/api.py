"""Fine-tuning (and probing) of one checkpoint on tasks over seeds: records in the export schema.

Protocol: one recipe (``cfg.finetune``) for every variant, ``none`` included; AdamW with linear warmup
and decay; dynamic padding with length bucketing; the training subset (``max_train_examples``) is drawn
with the fine-tuning draw, the evaluation subset (``max_eval_examples``) with a fixed seed so every run
scores the same examples. Selection only on dev: the rate (``finetune.lr_grid``: ``selection``) and, with
``finetune.keep_best``, the epoch whose state is kept; the kept model is scored on dev and test (the records,
each with its dev value, rate and epoch beside it; the probe's records too), so nothing is chosen on test, and
every number reported for a fine-tuning is the chosen rate's unless labelled with its own rate. The training subset, head init and data order of fine-tuning seed f come from ``heads.finetune_draw(f, pretraining seed)``: the
same for every variant of one pretraining seed, drawn anew per pretraining seed (nested, so the
multibootstrap's resampling of pretraining seeds covers them; ``analysis.bootstrap``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch

from trainables.config import ExperimentConfig
from trainables.finetune.baselines import baseline_splits
from trainables.finetune.heads import Checkpoint, build_head_model, head_name, load_encoder
from trainables.finetune.inputs import encode_split, score
from trainables.finetune.loop import predict_logits, train_model
from trainables.finetune.probe import probe_budget_splits
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

    def selected_evals(self) -> list[EvalRecord]:
        """The records of the rate chosen on dev per (run, task, mode), as the export marks them
        (``selection.select_on_dev``: mean dev value of the selecting metric over the fine-tuning seeds)."""
        if not self.evals:
            return []
        evals, _ = self.to_tables(select=True)
        return [r for r, keep in zip(self.evals, evals.column("selected").to_pylist()) if keep]


def select_tables(evals, preds):
    """``selection.select_on_dev`` on Arrow tables, keeping their schemas."""
    import pyarrow as pa

    e, p = select_on_dev(evals.to_pandas(), preds.to_pandas())
    return (pa.Table.from_pandas(e, schema=evals.schema, preserve_index=False),
            pa.Table.from_pandas(p, schema=preds.schema, preserve_index=False))


def _records(run_id: str, spec: TaskSpec, seed: int, mode: str, task_name: str, rows: list[dict],
             preds: list[str], golds: list[str], wall: float, lr: float = float("nan"),
             dev: dict[str, float] | None = None, head: str = "", epoch: float = float("nan")) -> FinetuneResult:
    values = score(spec, preds, golds)
    evals = [EvalRecord(run_id, task_name, seed, mode, m, float(v), m == spec.metric, len(rows), wall,
                        spec.name, spec.positive or "", lr, float((dev or {}).get(m, float("nan"))), True, head,
                        epoch, selects=m == spec.selection_metric)
             for m, v in values.items()]
    predictions = [PredictionRecord(run_id, task_name, seed, mode, r["id"], p, g, lr)
                   for r, p, g in zip(rows, preds, golds)]
    return FinetuneResult(evals, predictions)


class Fit(NamedTuple):
    """One (task, seed) fine-tuned at every rate of the grid: every rate's records, and the rate best on
    this seed's dev (ties: the lower rate, as ``selection.chosen_rates``) with its dev metrics."""

    result: FinetuneResult
    lr: float
    dev: dict[str, float]


def finetune_one(ck: Checkpoint, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
                 run_id: str, writer=None) -> Fit:
    """Fine-tune one head with one seed at each rate of ``finetune.rates``, then beyond the grid's edge while the
    best rate sits on it (``finetune.extend_edges``): test records (with the dev metric beside them, which selects
    the rate) for each reported split; the best rate and its dev metrics."""
    result, tried, metric = FinetuneResult(), {}, data.spec.selection_metric

    def fit(lr: float) -> None:
        part, dev = _finetune_at(ck, data, seed, cfg, device, run_id, lr, writer)
        result.extend(part)
        tried[lr] = dev

    for lr in cfg.finetune.rates:
        fit(lr)
    for lr in edge_rates(cfg.finetune, lambda: best_rate(tried, metric)):
        fit(lr)
    best = best_rate(tried, metric)
    return Fit(result, best, tried[best])


def best_rate(tried: dict[float, dict[str, float]], metric: str) -> float:
    """The rate whose dev ``metric`` is best; ties (and NaN, which never wins) go to the lower rate, as
    ``selection.chosen_rates`` breaks them."""
    best = None
    for lr in sorted(tried):
        if best is None or _better(tried[lr][metric], tried[best][metric]):
            best = lr
    return best


def edge_rates(ft, best: Callable[[], float]):
    """The rates beyond the grid to try, one at a time: while ``best()`` (re-read after each) is the highest rate
    tried, the next one a grid step above it; while it is the lowest, a step below; at most
    ``ft.extend_edges`` per side. The step at an edge is the ratio of the grid's two outermost rates there (to three
    significant figures, so every seed and run writes the same rate)."""
    grid = ft.rates
    if not ft.extend_edges or len(grid) < 2:
        return
    low, high = list(grid[:2]), list(grid[-2:])
    up = down = 0
    while True:
        lr = best()
        if lr == high[-1] and up < ft.extend_edges:
            high.append(float(f"{high[-1] * high[-1] / high[-2]:.3g}"))
            up += 1
            yield high[-1]
        elif lr == low[0] and down < ft.extend_edges:
            low.insert(0, float(f"{low[0] * low[0] / low[1]:.3g}"))
            down += 1
            yield low[0]
        else:
            return


def _better(value: float, than: float) -> bool:
    """A dev score beats another; NaN never does, and anything beats NaN."""
    return (value == value) and not (than >= value)


class TrainLog:
    """TensorBoard scalars of one (task, rate) fine-tuning: the training loss (summed on the device, read
    every ``every`` steps), the dev metrics after each epoch, the test metrics of the kept state."""

    def __init__(self, writer, prefix: str, every: int = 10):
        self.writer, self.prefix, self.every = writer, prefix, every
        self.loss, self.n, self.last = 0.0, 0, 0

    def step(self, step: int, loss) -> None:
        self.loss, self.n, self.last = self.loss + loss, self.n + 1, step
        if self.n == self.every:
            self._flush()

    def _flush(self) -> None:
        if self.n:
            self.writer.add_scalar(f"{self.prefix}/train_loss", float(self.loss) / self.n, self.last)
            self.loss, self.n = 0.0, 0

    def epoch(self, epoch: float, dev: dict[str, float]) -> None:
        self._flush()
        for m, v in dev.items():
            self.writer.add_scalar(f"{self.prefix}/dev_{m}", v, round(epoch * 100))  # x-axis: epoch x 100

    def test(self, values: dict[str, float], split: str) -> None:
        for m, v in values.items():
            self.writer.add_scalar(f"{self.prefix}/{split}_{m}", v, 0)


class BestOnDev:
    """``finetune.keep_best``: the weights (copied to the host) and dev predictions of the epoch best on dev
    so far (ties: the earlier); ``update`` says when ``patience`` epochs have passed without a new best."""

    def __init__(self, model: torch.nn.Module, metric: str, patience: int):
        self.model, self.metric, self.patience = model, metric, patience
        self.best, self.epoch, self.dev, self.state, self.since = float("nan"), float("nan"), None, None, 0

    def update(self, epoch: float, dev, metrics: dict[str, float]) -> bool:
        value = float(metrics[self.metric])
        if self.state is None or _better(value, self.best):
            self.best, self.epoch, self.dev, self.since = value, epoch, dev, 0
            self.state = {k: t.detach().to("cpu", copy=True) for k, t in self.model.state_dict().items()}
        else:
            self.since += 1
        return 0 < self.patience <= self.since

    def restore(self) -> None:
        self.model.load_state_dict(self.state)


def majority_share(preds: list) -> float:
    """The share of predictions that are the commonest one, for label predictions; NaN for tag lists and answers
    (JSON), whose one-label check does not apply (``analysis.flags.did_not_learn``)."""
    text = [str(p) for p in preds]
    if not text or any(t.startswith(("[", '"')) for t in text):
        return float("nan")
    values, counts = np.unique(text, return_counts=True)
    return float(counts.max() / len(text))


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

    logger = TrainLog(writer, f"{spec.name}/lr{lr:g}") if writer else None
    keeper = BestOnDev(model, spec.selection_metric, ft.patience) if ft.keep_best else None
    latest: dict = {}  # the dev evaluation after the last epoch, of the final model: not repeated

    def on_epoch(epoch: float) -> bool:
        latest["dev"] = evaluate("dev")
        metrics = score(spec, *latest["dev"][1:])
        if logger is not None:
            logger.epoch(epoch, metrics)
        return keeper.update(epoch, latest["dev"], metrics) if keeper is not None else False

    enc = encode_split(data, train_rows, tok, ft, ck.max_position, True)
    steps = train_model(model, enc, ft, rng, device, tok.pad_token_id, cfg.run.precision, logger,
                        on_epoch if logger is not None or keeper is not None else None)
    epoch = steps / math.ceil(len(enc.inputs) / ft.batch_size)
    if keeper is not None:
        keeper.restore()
        epoch, latest["dev"] = keeper.epoch, keeper.dev
    result, dev_metrics, share = FinetuneResult(), {}, float("nan")
    for split, task_name in [("dev", ""), *spec.reported_names().items()]:
        rows, preds, golds = latest.pop(split) if split in latest else evaluate(split)
        if split == "dev":
            dev_metrics, share = score(spec, preds, golds), majority_share(preds)
            continue
        part = _records(run_id, spec, seed, "finetune", task_name, rows, preds, golds, time.perf_counter() - t0,
                        lr, dev_metrics, head_name(spec, ft.head), epoch)
        part.evals[:] = [e._replace(dev_majority_share=share) for e in part.evals]
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
                part, lr, dev_metrics = finetune_one(ck, data, seed, cfg, dev, run_id, writer)
            else:
                (part, dev_metrics), lr = _probe_records(ck, encoder, data, seed, cfg, dev, run_id, t0), float("nan")
            result.extend(part)
            done += 1
            metrics = seed_metrics(part, lr, data.spec.name, dev_metrics)
            log.info("%s seed %d (%s): %s in %.1fs", data.spec.name, seed, mode,
                     {k: round(v, 4) for k, v in metrics.items()}, time.perf_counter() - t0)
            if report is not None:
                report({"task": data.spec.name, "finetune_seed": seed, "mode": mode, "done": done, "total": total,
                        **metrics, "wall_time_s": time.perf_counter() - t0})
    if writer is not None:
        writer.close()
    return result


def seed_metrics(part: FinetuneResult, lr: float, task: str, dev: dict[str, float]) -> dict[str, float]:
    """What one (task, seed) reports: the test metrics of the rate best on its dev (``task/metric``) with that
    rate (``lr/task``) and epoch (``epoch/task``), its dev metrics (``dev/task/metric``), and every other
    rate's test metrics labelled with their rate (``lr<rate>/task/metric``). The probe has no rate; its smaller
    label budgets are labelled with their mode (``probe@N/task/metric``)."""
    def is_chosen(e: EvalRecord) -> bool:
        return e.lr == lr or (lr != lr and e.lr != e.lr)

    chosen = [e for e in part.evals if is_chosen(e)]
    out = {("" if e.mode in MODES else f"{e.mode}/") + f"{e.task}/{e.metric}": e.value for e in chosen}
    if lr == lr:
        out[f"lr/{task}"] = lr
        out.update({f"epoch/{task}": e.epoch for e in chosen[:1]})
    out.update({f"dev/{task}/{m}": v for m, v in dev.items()})
    out.update({f"lr{e.lr:g}/{e.task}/{e.metric}": e.value for e in part.evals if not is_chosen(e)})
    return out


def _probe_records(ck, encoder, data: TaskData, seed: int, cfg, device, run_id: str,
                   t0: float) -> tuple[FinetuneResult, dict[str, float]]:
    """The probe's test records at each label budget (mode ``probe``, ``probe@N``; ``probe-emb`` and a non-neural
    baseline's mode where switched on), each with its dev value beside it (the classifier fitted once on train, as
    fine-tuning's records carry the final model's dev metric: analysis decides "learned" on it); the dev metrics,
    those of another mode labelled ``<mode>/metric``."""
    reported = data.spec.reported_names()
    by_mode, fits = probe_budget_splits(ck, encoder, data, seed, cfg, device, ("dev", *reported))
    baseline = baseline_splits(ck, data, seed, cfg.finetune, tuple(reported)) if cfg.finetune.text_baselines else None
    if baseline is not None:
        mode, by_mode[mode], fits[mode] = baseline
    result, dev_out = FinetuneResult(), {}
    for mode, predicted in by_mode.items():
        dev = score(data.spec, *predicted["dev"][1:])
        dev_out.update({(m if mode == "probe" else f"{mode}/{m}"): v for m, v in dev.items()})
        fit = fits[mode]
        for split, task_name in reported.items():
            part = _records(run_id, data.spec, seed, mode, task_name, *predicted[split], time.perf_counter() - t0,
                            dev=dev)
            if fit is not None:  # the most-frequent-tag baseline chooses nothing on dev: its C and iterations NaN
                part.evals[:] = [e._replace(probe_c=fit.c, probe_iters=float(fit.iters)) for e in part.evals]
            result.extend(part)
    return result, dev_out


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
