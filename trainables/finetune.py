"""Fine-tuning and linear probing of a checkpoint on downstream tasks, over fine-tuning seeds.

    python -m trainables.finetune --checkpoint DIR|none --tasks offline --seeds 3 --preset cpu-small --out OUT
    python -m trainables.finetune --checkpoint DIR --tasks sst2,mrpc --seeds 1 --probe --out OUT
    python -m trainables.finetune --checkpoint DIR --task-file my.csv --task-type pair --seeds 1 --out OUT
    python -m trainables.finetune --list-tasks --json

Heads are the stock ``transformers`` classes loaded from the checkpoint with ``from_pretrained`` (the
pretraining heads are dropped; the new head is initialised from the fine-tuning seed):
``BertForSequenceClassification`` (single and pair), ``BertForTokenClassification`` (label on the
first sub-word of each word, the rest -100) and ``BertForQuestionAnswering`` (document stride via the
fast tokenizer's overflowing windows and offsets; best span with a maximum answer length, mapped back
to the original context text).

Protocol: one recipe (``cfg.finetune``) for every variant, ``none`` included; AdamW with linear warmup
and decay; dynamic padding with length bucketing; the training subset (``max_train_examples``) is drawn
with the fine-tuning seed, the evaluation subset (``max_eval_examples``) with a fixed seed so every run
scores the same examples. No model selection: the final model is evaluated on dev (reported through
``report``) and on test (the records), so nothing is ever chosen on test.

Outputs are typed records whose ``to_tables()`` match the export schema (evals.parquet,
predictions.parquet). ``run_probe`` is the cheap, objective-neutral signal the sweeps rank trials by:
frozen encoder, mean-pooled last hidden states (first sub-word states for tagging), logistic
regression, scored on dev.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainables.config import ExperimentConfig, FinetuneConfig
from trainables.metrics import compute_metric
from trainables.runtime import autocast, build_adamw, resolve_device
from trainables.schema import EvalRecord, PredictionRecord, build_table
from trainables.tasks import (TaskData, TaskError, TaskSpec, load_hub_task, load_task, load_user_task, resolve_tasks, subsample,
                              task_registry, with_labels_from_train)

log = logging.getLogger(__name__)
Report = Callable[[dict], None]
MODES = ("finetune", "probe")
QA_TOP_N = 20  # start/end candidates considered per window when decoding spans


# ---------------------------------------------------------------- records

@dataclass
class FinetuneResult:
    evals: list[EvalRecord] = field(default_factory=list)
    predictions: list[PredictionRecord] = field(default_factory=list)

    def to_tables(self, code_version: str = ""):
        """(evals, predictions) as pyarrow Tables in the export schema (``trainables.schema``)."""
        return (build_table("evals", self.evals, code_version=code_version),
                build_table("predictions", self.predictions, code_version=code_version))

    def extend(self, other: "FinetuneResult") -> None:
        self.evals.extend(other.evals)
        self.predictions.extend(other.predictions)


# ---------------------------------------------------------------- encoding

@dataclass
class Encoded:
    """Model inputs of one split, one entry per feature (QA: per window), plus what decoding needs."""

    inputs: list[dict[str, Any]]  # input_ids, token_type_ids, attention_mask and the label key(s)
    example_of: list[int]  # feature -> index of its example
    meta: list[Any]  # tagging: word_ids; qa: context offsets (None outside the context)

    def lengths(self) -> list[int]:
        return [len(f["input_ids"]) for f in self.inputs]


def _features(enc, i: int) -> dict[str, list[int]]:
    return {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
            "attention_mask": enc["attention_mask"][i]}


def encode_classification(rows: list[dict], tok, label2id: dict[str, int], max_len: int, kind: str) -> Encoded:
    first = [r["text"] if kind == "single" else r["text_a"] for r in rows]
    second = None if kind == "single" else [r["text_b"] for r in rows]
    enc = tok(first, second, truncation=True, max_length=max_len, return_token_type_ids=True)
    inputs = []
    for i, row in enumerate(rows):
        feat = _features(enc, i)
        feat["labels"] = label2id[row["label"]]
        inputs.append(feat)
    return Encoded(inputs, list(range(len(rows))), [None] * len(rows))


def encode_tagging(rows: list[dict], tok, label2id: dict[str, int], max_len: int) -> Encoded:
    enc = tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True, max_length=max_len,
              return_token_type_ids=True)
    inputs, metas = [], []
    for i, row in enumerate(rows):
        word_ids = enc.word_ids(i)
        labels, previous = [], None
        for w in word_ids:  # label the first sub-word of each word; specials and continuations -100
            labels.append(label2id[row["tags"][w]] if w is not None and w != previous else -100)
            previous = w
        feat = _features(enc, i)
        feat["labels"] = labels
        inputs.append(feat)
        metas.append(word_ids)
    return Encoded(inputs, list(range(len(rows))), metas)


def _clip_question(tok, question: str, max_tokens: int) -> str:
    enc = tok(question, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    return question if len(offsets) <= max_tokens else question[:offsets[max_tokens - 1][1]]


def _answer_span(offsets: list, seq_ids: list, answers: dict) -> tuple[int, int]:
    """Token (start, end) of the first answer inside this window, or (0, 0) ([CLS]) when it is not."""
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    ctx = [i for i, s in enumerate(seq_ids) if s == 1]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0
    start = next(i for i in ctx if offsets[i][1] > start_char)
    end = next(i for i in reversed(ctx) if offsets[i][0] < end_char)
    return start, end


def encode_qa(rows: list[dict], tok, max_len: int, stride: int, train: bool) -> Encoded:
    max_q = max(1, max_len - stride - 4)  # the tokenizer needs room for the stride after the question
    questions = [_clip_question(tok, r["question"].lstrip(), max_q) for r in rows]
    enc = tok(questions, [r["context"] for r in rows], truncation="only_second", max_length=max_len, stride=stride,
              return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    inputs, example_of, metas = [], [], []
    for i, ex in enumerate(enc["overflow_to_sample_mapping"]):
        seq_ids, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
        feat = _features(enc, i)
        if train:
            feat["start_positions"], feat["end_positions"] = _answer_span(offsets, seq_ids, rows[ex]["answers"])
        inputs.append(feat)
        example_of.append(ex)
        metas.append([tuple(o) if s == 1 else None for o, s in zip(offsets, seq_ids)])
    return Encoded(inputs, example_of, metas)


def encode_split(data: TaskData, rows: list[dict], tok, ft: FinetuneConfig, max_pos: int, train: bool) -> Encoded:
    spec = data.spec
    label2id = {lab: i for i, lab in enumerate(spec.labels)}
    if spec.type in ("single", "pair"):
        return encode_classification(rows, tok, label2id, min(ft.max_len, max_pos), spec.type)
    if spec.type == "tagging":
        return encode_tagging(rows, tok, label2id, min(ft.max_len, max_pos))
    max_len = min(ft.qa_max_len, max_pos)
    return encode_qa(rows, tok, max_len, min(ft.qa_doc_stride, max_len // 2), train)


# ---------------------------------------------------------------- batching

def bucket_batches(lengths: list[int], batch_size: int, rng: np.random.Generator | None,
                   bucket_factor: int = 50) -> list[np.ndarray]:
    """Batches of indices of similar length. With ``rng``: shuffle, sort within chunks of
    ``batch_size * bucket_factor``, shuffle the batch order; without: sorted by length (evaluation)."""
    lengths_arr = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lengths_arr, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    perm = rng.permutation(len(lengths_arr))
    chunk = batch_size * bucket_factor
    batches = []
    for c in range(0, len(perm), chunk):
        part = perm[c:c + chunk]
        part = part[np.argsort(lengths_arr[part], kind="stable")]
        batches.extend(part[i:i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(features: list[dict[str, Any]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Pad to the longest feature in the batch (dynamic padding); token labels pad with -100."""
    width = max(len(f["input_ids"]) for f in features)
    pad = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0, "labels": -100}
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], list):
            values = [v + [pad[key]] * (width - len(v)) for v in values]
        batch[key] = torch.tensor(values, dtype=torch.long, device=device)
    return batch


# ---------------------------------------------------------------- model, training, prediction

@contextlib.contextmanager
def _quiet_loading():
    """from_pretrained warns that the pretraining heads are unused and the task head is new: expected here."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


HEADS = {"single": "BertForSequenceClassification", "pair": "BertForSequenceClassification",
         "tagging": "BertForTokenClassification", "qa": "BertForQuestionAnswering"}


def build_head_model(checkpoint: Path, spec: TaskSpec, seed: int):
    """The task's transformers head on the checkpoint's encoder; the new head seeded by ``seed``."""
    import transformers

    cls = getattr(transformers, HEADS[spec.type])
    kwargs: dict[str, Any] = {}
    if spec.type != "qa":
        kwargs = dict(num_labels=len(spec.labels), id2label=dict(enumerate(spec.labels)),
                      label2id={lab: i for i, lab in enumerate(spec.labels)})
    with torch.random.fork_rng(devices=[]), _quiet_loading():  # new heads are drawn from the global RNG
        torch.manual_seed(seed)
        return cls.from_pretrained(str(checkpoint), **kwargs)


def build_optimizer(model: torch.nn.Module, ft: FinetuneConfig, total_steps: int):
    return build_adamw(model, lr=ft.lr, weight_decay=ft.weight_decay, warmup_steps=int(ft.warmup_frac * total_steps),
                       total_steps=total_steps)


def train_model(model, enc: Encoded, ft: FinetuneConfig, rng: np.random.Generator, device: torch.device,
                pad_id: int, precision: str = "auto") -> int:
    """Fine-tune in place for ``ft.epochs`` (fractional epochs allowed); returns the optimizer steps."""
    n_batches = math.ceil(len(enc.inputs) / ft.batch_size)
    total = max(1, math.ceil(ft.epochs * n_batches))
    opt, sched = build_optimizer(model, ft, total)
    model.train()
    step = 0
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # dropout draws from torch's RNG: seed it, leave global state
        torch.manual_seed(int(rng.integers(2**31)))
        while step < total:
            for idx in bucket_batches(enc.lengths(), ft.batch_size, rng):
                batch = collate([enc.inputs[i] for i in idx], pad_id, device)
                with autocast(device, precision):
                    loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                if step >= total:
                    break
    return step


@torch.inference_mode()
def predict_logits(model, enc: Encoded, batch_size: int, device: torch.device, pad_id: int,
                   precision: str = "auto") -> list:
    """Per-feature logits in feature order: classification (C,), tagging (T, C), QA ((T,), (T,))."""
    model.eval()
    out: list[Any] = [None] * len(enc.inputs)
    model_keys = ("input_ids", "token_type_ids", "attention_mask")
    for idx in bucket_batches(enc.lengths(), batch_size, None):
        feats = [{k: enc.inputs[i][k] for k in model_keys} for i in idx]
        batch = collate(feats, pad_id, device)
        with autocast(device, precision):
            res = model(**batch)
        if hasattr(res, "start_logits"):
            starts, ends = res.start_logits.float().cpu().numpy(), res.end_logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                n = len(enc.inputs[i]["input_ids"])
                out[i] = (starts[j, :n], ends[j, :n])
        else:
            logits = res.logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = logits[j] if logits.ndim == 2 else logits[j, :len(enc.inputs[i]["input_ids"])]
    return out


# ---------------------------------------------------------------- decoding to strings

def fallback_tag(labels: tuple[str, ...]) -> str:
    """Tag for words the model never saw (truncated away, or no sub-word): 'O' if it exists."""
    return "O" if "O" in labels else labels[0]


def decode_tags(logits: np.ndarray, word_ids: list, n_words: int, labels: tuple[str, ...]) -> list[str]:
    tags = [fallback_tag(labels)] * n_words
    previous = None
    for pos, w in enumerate(word_ids):
        if w is not None and w != previous:
            tags[w] = labels[int(np.argmax(logits[pos]))]
        previous = w
    return tags


def best_span(start: np.ndarray, end: np.ndarray, offsets: list, max_answer_len: int) -> tuple[float, int, int] | None:
    """Highest start+end score over context tokens with start <= end < start + max_answer_len."""
    best = None
    for s in np.argsort(start)[::-1][:QA_TOP_N]:
        if offsets[s] is None:
            continue
        for e in np.argsort(end)[::-1][:QA_TOP_N]:
            if offsets[e] is None or e < s or e - s + 1 > max_answer_len:
                continue
            score = float(start[s] + end[e])
            if best is None or score > best[0]:
                best = (score, int(s), int(e))
    return best


def decode_qa(rows: list[dict], enc: Encoded, logits: list, max_answer_len: int) -> list[str]:
    """Best span over all windows of each example, as text of the original context."""
    best: list[tuple[float, str] | None] = [None] * len(rows)
    for f, ex in enumerate(enc.example_of):
        offsets = enc.meta[f]
        span = best_span(logits[f][0], logits[f][1], offsets, max_answer_len)
        if span is None:
            continue
        score, s, e = span
        if best[ex] is None or score > best[ex][0]:
            best[ex] = (score, rows[ex]["context"][offsets[s][0]:offsets[e][1]])
    return [b[1] if b is not None else "" for b in best]


def predictions_and_golds(spec: TaskSpec, rows: list[dict], enc: Encoded, logits: list,
                          ft: FinetuneConfig) -> tuple[list[str], list[str]]:
    """String predictions and golds in the export schema's encoding."""
    if spec.type in ("single", "pair"):
        return [spec.labels[int(np.argmax(x))] for x in logits], [r["label"] for r in rows]
    if spec.type == "tagging":
        preds = [json.dumps(decode_tags(logits[i], enc.meta[i], len(r["tokens"]), spec.labels))
                 for i, r in enumerate(rows)]
        return preds, [json.dumps(r["tags"]) for r in rows]
    texts = decode_qa(rows, enc, logits, ft.qa_max_answer_len)
    return [json.dumps(t) for t in texts], [json.dumps(r["answers"]["text"]) for r in rows]


def score(spec: TaskSpec, preds: list[str], golds: list[str]) -> dict[str, float]:
    """Every metric of the task (the first is primary)."""
    return {m: compute_metric(m, preds, golds, **({"positive": spec.positive} if m == "f1" and spec.positive else {}))
            for m in spec.metrics}


# ---------------------------------------------------------------- one (task, seed)

@dataclass
class Checkpoint:
    """A loaded checkpoint directory: its path and tokenizer; heads are built per task and seed."""

    path: Path
    tokenizer: Any
    max_position: int

    @classmethod
    def load(cls, path: str | Path) -> "Checkpoint":
        from transformers import AutoConfig, AutoTokenizer

        path = Path(path)
        if not (path / "config.json").exists():
            raise TaskError(f"checkpoint {path} has no config.json; expected a Hugging Face checkpoint directory")
        config = AutoConfig.from_pretrained(str(path))
        return cls(path, AutoTokenizer.from_pretrained(str(path)), config.max_position_embeddings)


def _records(run_id: str, spec: TaskSpec, seed: int, mode: str, task_name: str, rows: list[dict],
             preds: list[str], golds: list[str], wall: float) -> FinetuneResult:
    values = score(spec, preds, golds)
    evals = [EvalRecord(run_id, task_name, seed, mode, m, float(v), m == spec.metric, len(rows), wall,
                        spec.name, spec.positive or "") for m, v in values.items()]
    predictions = [PredictionRecord(run_id, task_name, seed, mode, r["id"], p, g)
                   for r, p, g in zip(rows, preds, golds)]
    return FinetuneResult(evals, predictions)


def finetune_one(ck: Checkpoint, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
                 run_id: str) -> tuple[FinetuneResult, dict[str, float]]:
    """Fine-tune one head with one seed; test records for each reported split, dev metrics for report."""
    t0 = time.perf_counter()
    ft, spec, tok = cfg.finetune, data.spec, ck.tokenizer
    rng = np.random.default_rng(seed)
    train_rows = subsample(data["train"], ft.max_train_examples, rng)
    model = build_head_model(ck.path, spec, seed).to(device)
    train_model(model, encode_split(data, train_rows, tok, ft, ck.max_position, True), ft, rng, device,
                tok.pad_token_id, cfg.run.precision)
    result, dev_metrics = FinetuneResult(), {}
    for split, task_name in [("dev", ""), *spec.reported_names().items()]:
        rows = subsample(data[split], ft.max_eval_examples, None)
        enc = encode_split(data, rows, tok, ft, ck.max_position, False)
        logits = predict_logits(model, enc, 2 * ft.batch_size, device, tok.pad_token_id, cfg.run.precision)
        preds, golds = predictions_and_golds(spec, rows, enc, logits, ft)
        if split == "dev":
            dev_metrics = score(spec, preds, golds)
            continue
        result.extend(_records(run_id, spec, seed, "finetune", task_name, rows, preds, golds,
                               time.perf_counter() - t0))
    return result, dev_metrics


# ---------------------------------------------------------------- linear probe

@torch.inference_mode()
def probe_features(encoder, enc: Encoded, spec: TaskSpec, batch_size: int, device: torch.device,
                   pad_id: int) -> list[np.ndarray]:
    """Per example: mean-pooled last hidden state (C,); tagging: (first-sub-word states (W, C), word indices)."""
    encoder.eval()
    out: list[Any] = [None] * len(enc.inputs)
    keys = ("input_ids", "token_type_ids", "attention_mask")
    for idx in bucket_batches(enc.lengths(), batch_size, None):
        batch = collate([{k: enc.inputs[i][k] for k in keys} for i in idx], pad_id, device)
        hidden = encoder(**batch).last_hidden_state.float()  # (B, T, C)
        if spec.type == "tagging":
            states = hidden.cpu().numpy()
            for j, i in enumerate(idx):
                firsts = [p for p, w in enumerate(enc.meta[i]) if w is not None and (p == 0 or enc.meta[i][p - 1] != w)]
                out[i] = (states[j, firsts], [enc.meta[i][p] for p in firsts])
        else:
            mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, T, 1): padding does not count
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            for j, i in enumerate(idx):
                out[i] = pooled[j].cpu().numpy()
    return out


def _probe_xy(data: TaskData, rows: list[dict], feats: list) -> tuple[np.ndarray, list[str]]:
    if data.spec.type == "tagging":
        xs = [states for states, _ in feats]
        ys = [r["tags"][w] for r, (_, words) in zip(rows, feats) for w in words]
        return np.concatenate(xs), ys
    return np.stack(feats), [r["label"] for r in rows]


def _probe_tags(clf, row: dict, feat: tuple[np.ndarray, list[int]], fallback: str) -> list[str]:
    tags = [fallback] * len(row["tokens"])
    states, words = feat
    if len(words):
        for w, t in zip(words, clf.predict(states)):
            tags[w] = str(t)
    return tags


def probe_one(ck: Checkpoint, encoder, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
              split: str) -> tuple[list[dict], list[str], list[str]]:
    """Fit a logistic regression on frozen features of train; predict ``split``. Returns rows, preds, golds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    spec, ft, tok = data.spec, cfg.finetune, ck.tokenizer
    if spec.type == "qa":
        raise TaskError(f"the linear probe does not support qa task {spec.name!r}; probe single, pair or tagging tasks")
    train_rows = subsample(data["train"], ft.probe_max_train, np.random.default_rng(seed))
    eval_rows = subsample(data[split], ft.max_eval_examples, None)
    feats = {}
    for name, rows in (("train", train_rows), ("eval", eval_rows)):
        enc = encode_split(data, rows, tok, ft, ck.max_position, False)
        feats[name] = (enc, probe_features(encoder, enc, spec, 2 * ft.batch_size, device, tok.pad_token_id))
    x_train, y_train = _probe_xy(data, train_rows, feats["train"][1])
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, random_state=seed))
    if len(set(y_train)) < 2:
        raise TaskError(f"task {spec.name!r}: the probe's train subset has a single class {y_train[:1]}")
    clf.fit(x_train, y_train)
    enc, eval_feats = feats["eval"]
    if spec.type == "tagging":
        fallback = fallback_tag(spec.labels)
        preds = [json.dumps(_probe_tags(clf, r, f, fallback)) for r, f in zip(eval_rows, eval_feats)]
        golds = [json.dumps(r["tags"]) for r in eval_rows]
    else:
        preds, golds = [str(p) for p in clf.predict(np.stack(eval_feats))], [r["label"] for r in eval_rows]
    return eval_rows, preds, golds


def _load_encoder(ck: Checkpoint, device: torch.device):
    from transformers import AutoModel

    with _quiet_loading():
        return AutoModel.from_pretrained(str(ck.path), add_pooling_layer=False).to(device)


def run_probe(checkpoint_dir: str | Path, tasks: list[str], cfg: ExperimentConfig, seed: int = 0,
              split: str = "dev") -> dict[str, float]:
    """Linear-probe primary metric per task on ``split`` (dev by default: the sweeps rank on it).

    ``tasks`` are registry names (an already-loaded ``TaskData`` is accepted too, e.g. a user task).
    """
    if split == "test":
        log.warning("run_probe on test: use it for reporting only, never to rank or select")
    ck = Checkpoint.load(checkpoint_dir)
    device = _device(None, cfg)
    encoder = _load_encoder(ck, device)
    scores = {}
    for task in tasks:
        data = task if isinstance(task, TaskData) else load_task(task, cfg.data.cache_dir or None)
        data = with_labels_from_train(data)
        rows, preds, golds = probe_one(ck, encoder, data, seed, cfg, device, split)
        scores[data.spec.name] = score(data.spec, preds, golds)[data.spec.metric]
    return scores


# ---------------------------------------------------------------- the main API

def _device(device: str | torch.device | None, cfg: ExperimentConfig) -> torch.device:
    return resolve_device(device if device is not None else cfg.run.device)


def _load_all(tasks: list[str], task_files: list[tuple[str, str]], cfg: ExperimentConfig) -> list[TaskData]:
    loaded = [load_task(name, cfg.data.cache_dir or None) for name in tasks]
    loaded += [load_user_task(path, kind) for path, kind in task_files]
    return [with_labels_from_train(d) for d in loaded]


def _checkpoint_path(checkpoint: str | Path, cfg: ExperimentConfig) -> Path:
    if str(checkpoint) == "none":
        from trainables.pretrain import none_checkpoint

        return Path(none_checkpoint(cfg))
    return Path(checkpoint)


def run_finetuning(checkpoint: str | Path, tasks: list[str], seeds: list[int], cfg: ExperimentConfig, *,
                   run_id: str = "", mode: str = "finetune", report: Report | None = None, device=None,
                   task_files: list[tuple[str, str]] | tuple = (), datasets: list[TaskData] | None = None
                   ) -> FinetuneResult:
    """Fine-tune (or probe) ``checkpoint`` on each task with each seed; records in the export schema.

    ``checkpoint='none'`` uses the untrained baseline of ``cfg`` (``pretrain.none_checkpoint``).
    ``task_files`` adds user tasks as (path, type); ``datasets`` adds already-loaded TaskData.
    ``run_id`` defaults to the checkpoint directory's name. ``report(metrics)`` is called after each
    (task, seed) with the test metrics, the dev metrics (``dev/...``) and progress counts.
    """
    if mode not in MODES:
        raise TaskError(f"mode={mode!r} is not valid; allowed: {', '.join(MODES)}")
    path = _checkpoint_path(checkpoint, cfg)
    run_id = run_id or ("none" if str(checkpoint) == "none" else path.name)
    ck, dev = Checkpoint.load(path), _device(device, cfg)
    all_data = _load_all(list(tasks), list(task_files), cfg) + list(datasets or [])
    encoder = _load_encoder(ck, dev) if mode == "probe" else None
    result, done, total = FinetuneResult(), 0, len(all_data) * len(seeds)
    for data in all_data:
        for seed in seeds:
            t0 = time.perf_counter()
            if mode == "finetune":
                part, dev_metrics = finetune_one(ck, data, seed, cfg, dev, run_id)
            else:
                part, dev_metrics = _probe_records(ck, encoder, data, seed, cfg, dev, run_id, t0), {}
            result.extend(part)
            done += 1
            log.info("%s seed %d (%s): %s in %.1fs", data.spec.name, seed, mode,
                     {r.task + "/" + r.metric: round(r.value, 4) for r in part.evals}, time.perf_counter() - t0)
            if report is not None:
                report({"task": data.spec.name, "finetune_seed": seed, "mode": mode, "done": done, "total": total,
                        **{f"{r.task}/{r.metric}": r.value for r in part.evals},
                        **{f"dev/{data.spec.name}/{m}": v for m, v in dev_metrics.items()},
                        "wall_time_s": time.perf_counter() - t0})
    return result


def _probe_records(ck, encoder, data: TaskData, seed: int, cfg, device, run_id: str, t0: float) -> FinetuneResult:
    result = FinetuneResult()
    for split, task_name in data.spec.reported_names().items():
        rows, preds, golds = probe_one(ck, encoder, data, seed, cfg, device, split)
        result.extend(_records(run_id, data.spec, seed, "probe", task_name, rows, preds, golds,
                               time.perf_counter() - t0))
    return result


# ---------------------------------------------------------------- command line

def write_tables(result: FinetuneResult, out: str | Path) -> tuple[Path, Path]:
    """OUT/evals.parquet and OUT/predictions.parquet, each written to a temp file then renamed."""
    import pyarrow.parquet as pq

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in zip(("evals", "predictions"), result.to_tables()):
        final, tmp = out / f"{name}.parquet", out / f".{name}.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        paths.append(final)
    return paths[0], paths[1]


def _list_tasks(as_json: bool) -> None:
    for spec in task_registry().values():
        entry = {"name": spec.name, "type": spec.type, "metric": spec.metric, "source": spec.source,
                 "metrics": list(spec.metrics), "reported_as": sorted(set(spec.reported_names().values())),
                 "description": spec.description}
        print(json.dumps(entry) if as_json else f"{spec.name:18s} {spec.type:8s} {spec.metric:15s} {spec.source}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainables.finetune", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="a checkpoint directory, or 'none' for the untrained baseline")
    p.add_argument("--tasks", default=None, help="offline | glue | benchmarks | all | comma-separated names "
                   "(default: cfg.finetune.tasks, or none when --task-file is given)")
    p.add_argument("--seeds", type=int, default=1, help="number of fine-tuning seeds (0..N-1)")
    p.add_argument("--preset", default="cpu-small", help="config preset whose finetune recipe is used")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. finetune.epochs=3 (repeatable)")
    p.add_argument("--out", help="output directory for evals.parquet and predictions.parquet")
    p.add_argument("--probe", action="store_true", help="linear probe instead of fine-tuning")
    p.add_argument("--run-id", default="", help="run_id in the records (default: the checkpoint's name)")
    p.add_argument("--task-file", action="append", default=[], help="a user task file (CSV/JSONL/Parquet) or folder")
    p.add_argument("--task-type", action="append", default=[], help="single | pair | tagging | qa, per --task-file")
    p.add_argument("--task-name", action="append", default=[], help="name of each --task-file task (default: stem)")
    p.add_argument("--task-data", action="append", default=[], metavar="NAME=DIR",
                   help="run benchmark NAME from local files in the hub's schema (DIR holds train.*, validation.*, ...)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cfg.run.device)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    p.add_argument("--list-tasks", action="store_true", help="print the task registry and exit")
    p.add_argument("--json", action="store_true", help="with --list-tasks: one JSON object per line")
    return p


def _user_tasks(args) -> list[TaskData]:
    if len(args.task_type) != len(args.task_file):
        raise TaskError(f"give one --task-type per --task-file ({len(args.task_file)} files, "
                        f"{len(args.task_type)} types)")
    names = args.task_name + [None] * (len(args.task_file) - len(args.task_name))
    loaded = [load_user_task(f, t, n) for f, t, n in zip(args.task_file, args.task_type, names)]
    for item in args.task_data:
        name, sep, folder = item.partition("=")
        if not sep:
            raise TaskError(f"--task-data {item!r} is not of the form NAME=DIR")
        loaded.append(load_hub_task(name.strip(), folder.strip()))
    return [with_labels_from_train(d) for d in loaded]


def main(argv: list[str] | None = None) -> int:
    from trainables.config import ConfigError, build_config

    args = _parser().parse_args(argv)
    if args.list_tasks:
        _list_tasks(args.json)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if not args.checkpoint or not args.out:
            raise TaskError("--checkpoint and --out are required (or use --list-tasks)")
        cfg = build_config(args.preset, overrides=args.overrides)
        spec = args.tasks if args.tasks is not None else ("" if args.task_file or args.task_data else cfg.finetune.tasks)
        user = _user_tasks(args)
        tasks = [t for t in (resolve_tasks(spec) if spec else []) if t not in {d.spec.name for d in user}]
        t0 = time.perf_counter()
        result = run_finetuning(args.checkpoint, tasks, list(range(args.seeds)), cfg, run_id=args.run_id,
                                mode="probe" if args.probe else "finetune", device=args.device, datasets=user,
                                report=lambda m: print(f"[{m['done']}/{m['total']}] {m['task']} seed "
                                                       f"{m['finetune_seed']}: " + ", ".join(
                                                           f"{k}={v:.4f}" for k, v in m.items()
                                                           if "/" in k and isinstance(v, float)), flush=True))
        evals_path, preds_path = write_tables(result, args.out)
    except (TaskError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {evals_path} ({len(result.evals)} rows) and {preds_path} ({len(result.predictions)} rows) "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
