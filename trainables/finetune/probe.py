"""The linear probe: frozen encoder features, logistic regression (its C chosen on dev), scored on a split.

It is the cheap, objective-neutral signal the sweeps rank trials by. Features come from the task type
(``TaskType.probe``: mean-pooled last hidden states for classification, first-sub-word states for
tagging); a task type without probe hooks (QA) is refused with one line.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np
import torch

from trainables.batching import bucket_batches
from trainables.config import EMBEDDING_PROBE, ExperimentConfig
from trainables.finetune.heads import Checkpoint, load_encoder
from trainables.finetune.inputs import encode_split, score
from trainables.finetune.loop import MODEL_KEYS, model_batch, read_back
from trainables.runtime import autocast, enable_tf32, resolve_device
from trainables.task_types import Encoded, TaskError, TaskType, get_task_type
from trainables.data.sources import language_of
from trainables.tasks import TaskData, load_task, subsample, with_labels_from_train

log = logging.getLogger(__name__)


LAYERS = ("last", "embeddings")  # what a probe reads: the encoder's output, or its embedding layer's


def _reduced_batches(encoder, enc: Encoded, task_type: TaskType, batch_size: int, device: torch.device,
                     pad_id: int, precision: str, layers: tuple[str, ...] = ("last",)
                     ) -> Iterator[tuple[np.ndarray, list[torch.Tensor]]]:
    """(example indices, [the task type's reduction of each of ``layers``' states, on the device]) per batch."""
    for idx in bucket_batches(enc.lengths(), batch_size, None):
        batch, inputs = model_batch([{k: enc.inputs[i][k] for k in MODEL_KEYS} for i in idx], pad_id, device,
                                    encoder.config)
        with autocast(device, precision):
            out = encoder(**inputs, output_hidden_states="embeddings" in layers)
        states = {"last": out.last_hidden_state, "embeddings": out.hidden_states[0] if out.hidden_states else None}
        yield idx, [task_type.probe.reduce(states[layer].float(), batch["attention_mask"]) for layer in layers]


@torch.inference_mode()
def probe_features(encoder, enc: Encoded, task_type: TaskType, batch_size: int, device: torch.device,
                   pad_id: int, precision: str = "auto") -> list[Any]:
    """Per example, in example order: the task type's probe features of the frozen encoder's states."""
    return probe_layer_features(encoder, enc, task_type, batch_size, device, pad_id, precision)["last"]


def probe_layer_features(encoder, enc: Encoded, task_type: TaskType, batch_size: int, device: torch.device,
                         pad_id: int, precision: str = "auto", layers: tuple[str, ...] = ("last",)
                         ) -> dict[str, list[Any]]:
    """{layer: per example, in example order, the task type's probe features of that layer's states}, from one
    pass of the frozen encoder."""
    encoder.eval()
    out: dict[str, list[Any]] = {layer: [None] * len(enc.inputs) for layer in layers}
    for idx, reduced in read_back(_reduced_batches(encoder, enc, task_type, batch_size, device, pad_id, precision,
                                                   layers)):
        for layer, r in zip(layers, reduced):
            for i, feat in zip(idx, task_type.probe.features(r, enc, idx)):
                out[layer][i] = feat
    return out


class ProbeFit(NamedTuple):
    """The classifier a budget kept: its C (chosen on dev) and the iterations its solver took."""

    c: float
    iters: int
    converged: bool


def probe_splits(ck: Checkpoint, encoder, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
                 splits: tuple[str, ...]) -> dict[str, tuple[list[dict], list[str], list[str]]]:
    """Fit a logistic regression on frozen features of train (its C chosen on dev); predict each of ``splits``.
    Returns {split: (rows, preds, golds)}."""
    return probe_budget_splits(ck, encoder, data, seed, cfg, device, splits, main_only=True)[0]["probe"]


def fit_on_dev(make, x_train, y_train, dev_score, cs: tuple[float, ...]):
    """The classifier of the C in ``cs`` (ascending) whose ``dev_score(clf)`` is best; ties keep the smaller C.
    ``make(c)`` builds an unfitted pipeline whose last step is the classifier. Each C's fit starts from the previous
    C's solution (``warm_start``): the same convex problem, solved to the same tolerance in fewer
    iterations (the POS probe's grid, side by side: docs/results.md). Returns (classifier, ProbeFit)."""
    import copy

    best = None
    clf = make(cs[0])
    if hasattr(clf[-1], "warm_start"):
        clf[-1].set_params(warm_start=True)
    for c in cs:
        clf[-1].set_params(C=c)
        clf.fit(x_train, y_train)
        value = dev_score(clf)
        if best is None or value > best[0]:
            best = (value, c, copy.deepcopy(clf))
    _, c, clf = best
    iters = int(np.max(clf[-1].n_iter_))
    return clf, ProbeFit(c, iters, iters < clf[-1].max_iter)


def probe_rows(ck: Checkpoint, data: TaskData, seed: int, ft, splits: tuple[str, ...]
               ) -> tuple[list[dict], dict[str, list[dict]]]:
    """The probe's training subset (at most ``probe_max_train`` rows, drawn with the fine-tuning draw) and the rows
    it scores of dev and each of ``splits`` (at most ``max_eval_examples``, the fixed split seed): what the probe
    and the non-neural baselines (``trainables.finetune.baselines``) of one (run, seed) share."""
    draw = ck.draw(seed)  # nested in the pretraining seed, as fine-tuning's draw (heads.finetune_draw)
    train_rows = subsample(data["train"], ft.probe_max_train, np.random.default_rng(draw))
    return train_rows, {split: subsample(data[split], ft.max_eval_examples, None)
                        for split in dict.fromkeys(("dev", *splits))}


def probe_budget_splits(ck: Checkpoint, encoder, data: TaskData, seed: int, cfg: ExperimentConfig,
                        device: torch.device, splits: tuple[str, ...], main_only: bool = False
                        ) -> tuple[dict[str, dict[str, tuple[list[dict], list[str], list[str]]]], dict[str, ProbeFit]]:
    """One classifier per label budget (``FinetuneConfig.probe_modes``), each predicting every split of ``splits``:
    ({mode: {split: (rows, preds, golds)}}, {mode: ProbeFit}). Each budget's C is chosen on dev from
    ``finetune.probe_c_grid`` (fine-tuning chooses its rate there too), so every encoder is read at its own best
    regularisation. The encoder reads each example once; a smaller budget's train rows are a subset of the
    largest's, drawn with the same nested seed. ``main_only``: the ``probe`` mode alone."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    spec, ft, tok = data.spec, cfg.finetune, ck.tokenizer
    task_type = get_task_type(spec.type)
    if task_type.probe is None:
        raise TaskError(f"the linear probe does not support {spec.type} task {spec.name!r}; probe a task of type "
                        + ", ".join(n for n, t in _probed_types().items()))
    draw = ck.draw(seed)  # the draw probe_rows subsampled with: the smaller budgets' subsets and the solver's seed
    train_rows, eval_rows = probe_rows(ck, data, seed, ft, splits)

    modes = {m: b for m, b in ft.probe_modes.items() if not main_only or m == "probe"}
    layers = ("last",) + (("embeddings",) if EMBEDDING_PROBE in modes else ())

    def features(rows):
        enc = encode_split(data, rows, tok, ft, ck.max_position, False)
        return probe_layer_features(encoder, enc, task_type, 2 * ft.batch_size, device, tok.pad_token_id,
                                    cfg.run.precision, layers)

    train_feats = features(train_rows)
    evaluated = {split: (rows, features(rows)) for split, rows in eval_rows.items()}
    dev_rows, dev_feats = evaluated["dev"]

    def make(c: float):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=ft.probe_max_iter, random_state=draw))

    out, fits = {}, {}
    for mode, budget in modes.items():
        layer = "embeddings" if mode == EMBEDDING_PROBE else "last"
        keep = (range(len(train_rows)) if budget >= len(train_rows) or mode in ("probe", EMBEDDING_PROBE)
                else np.sort(np.random.default_rng([draw, budget]).choice(len(train_rows), budget, replace=False)))
        x_train, y_train = task_type.probe.xy([train_rows[i] for i in keep], [train_feats[layer][i] for i in keep])

        def dev_score(clf, layer=layer) -> float:
            return score(spec, *task_type.probe.predict(clf, dev_rows, dev_feats[layer], spec))[spec.selection_metric]

        if len(set(y_train)) < 2:
            raise TaskError(f"task {spec.name!r}: the probe's train subset of {len(keep)} examples has a single class "
                            f"{y_train[:1]}; raise finetune.probe_budgets / probe_max_train")
        with warnings.catch_warnings():  # an unconverged fit is recorded (ProbeFit, evals.probe_iters), not printed
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf, fits[mode] = fit_on_dev(make, x_train, y_train, dev_score, ft.probe_cs)
        out[mode] = {split: (rows, *task_type.probe.predict(clf, rows, feats[layer], spec))
                     for split, (rows, feats) in evaluated.items() if split in splits}
    return out, fits


def probe_one(ck: Checkpoint, encoder, data: TaskData, seed: int, cfg: ExperimentConfig, device: torch.device,
              split: str) -> tuple[list[dict], list[str], list[str]]:
    """Fit a logistic regression on frozen features of train; predict ``split``. Returns rows, preds, golds."""
    return probe_splits(ck, encoder, data, seed, cfg, device, (split,))[split]


def _probed_types() -> dict[str, TaskType]:
    from trainables.task_types import TASK_TYPES

    return {n: t for n, t in TASK_TYPES.items() if t.probe is not None}


def run_probe(checkpoint_dir: str | Path, tasks: list, cfg: ExperimentConfig, seed: int = 0,
              split: str = "dev") -> dict[str, float]:
    """Linear-probe primary metric per task on ``split`` (dev by default: the sweeps rank on it).

    ``tasks`` are registry names (an already-loaded ``TaskData`` is accepted too, e.g. a user task).
    """
    if split == "test":
        log.warning("run_probe on test: use it for reporting only, never to rank or select")
    ck = Checkpoint.load(checkpoint_dir)
    device = resolve_device(cfg.run.device)
    enable_tf32(device, deterministic=getattr(cfg.run, "deterministic", False))
    encoder = load_encoder(ck, device, cfg.finetune.init)
    scores = {}
    for task in tasks:
        data = task if isinstance(task, TaskData) else load_task(task, cfg.data.cache_dir or None,
                                                                 language=language_of(cfg.data.corpus))
        data = with_labels_from_train(data)
        rows, preds, golds = probe_one(ck, encoder, data, seed, cfg, device, split)
        scores[data.spec.name] = score(data.spec, preds, golds)[data.spec.metric]
    return scores
