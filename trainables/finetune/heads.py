"""The checkpoint being fine-tuned, and the task heads and frozen encoder loaded from it.

Heads are the stock ``transformers`` classes the task type names, loaded with ``from_pretrained`` (the
pretraining heads are dropped; the new head is initialised from the fine-tuning draw, ``finetune_draw``:
derived from the pretraining seed and the fine-tuning seed, so draws are nested in pretraining seeds). Sequence
classification reads the pooler, which NSP trains and the other variants leave at its random init;
``finetune.head=cls`` draws it afresh (``fresh_pooler``) so a contrast is not "the loss + a trained pooler".
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainables.task_types import TaskError, get_task_type
from trainables.tasks import TaskSpec


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


HEADS = ("pooler", "cls")  # finetune.head


def head_name(spec: TaskSpec, head: str) -> str:
    """What the evals export records as ``head``: ``head`` for a type whose head reads the pooled [CLS]
    state (sequence classification), '' for one reading token states, where the choice does not apply."""
    return head if get_task_type(spec.type).pooled else ""


def fresh_pooler(model) -> None:
    """Replace the pooler's weights by a fresh draw (BERT's init: N(0, initializer_range), bias 0) from the
    current RNG: a new dense+tanh on [CLS] as RoBERTa's classification head has, so the checkpoint's pooler
    (which NSP trains and the other variants leave at random) is not used at all."""
    dense = model.bert.pooler.dense
    with torch.no_grad():
        dense.weight.normal_(0.0, model.config.initializer_range)
        dense.bias.zero_()


def reinitialize(model: torch.nn.Module, std: float) -> None:
    """Every weight drawn afresh as BERT initialises it (normal(0, std) matrices and embeddings, zero biases,
    unit LayerNorms), from the global RNG: ``finetune.init=random``, the instrument check's negative switch.
    (transformers 5 skips ``_init_weights`` on modules loaded from a checkpoint, so it is done here.)"""
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                torch.nn.init.zeros_(module.bias)
            if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, torch.nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)


def build_head_model(checkpoint: Path, spec: TaskSpec, seed: int, dropout: float = 0.1, head: str = "pooler",
                     init: str = "checkpoint"):
    """The task type's transformers head on the checkpoint's encoder; the new head seeded by ``seed``.
    ``dropout`` (``finetune.dropout``) replaces the pretraining dropout stored in the checkpoint's config.
    ``head`` (``finetune.head``, for types that read the pooled state): ``pooler`` keeps the checkpoint's
    pooler, ``cls`` draws it afresh after the classifier, so the classifier's draw is the same under both.
    ``init`` (``finetune.init``): ``random`` ignores the checkpoint's weights (``reinitialize``)."""
    import transformers

    if head not in HEADS:
        raise TaskError(f"head={head!r} is not valid; allowed: {', '.join(HEADS)}")
    task_type = get_task_type(spec.type)
    cls = getattr(transformers, task_type.head)
    kwargs: dict[str, Any] = {**task_type.head_kwargs(spec.labels), "hidden_dropout_prob": dropout,
                              "attention_probs_dropout_prob": dropout}
    with torch.random.fork_rng(devices=[]), _quiet_loading():  # new heads are drawn from the global RNG
        torch.manual_seed(seed)
        model = cls.from_pretrained(str(checkpoint), **kwargs)
        if head_name(spec, head) == "cls":
            fresh_pooler(model)
        if init == "random":
            reinitialize(model, model.config.initializer_range)
        return model


def finetune_draw(finetune_seed: int, pretrain_seed: int | None) -> int:
    """The seed of fine-tuning draw f of a run: its training subset, head init and data order.

    Nested in the pretraining seed: every variant of pretraining seed p draws the same (the comparison
    stays paired within p), each p draws anew, so the variant x draw interaction is resampled with the
    pretraining seeds by the multibootstrap (``analysis.bootstrap``) instead of being one fixed draw
    shared by every run that the intervals never see. A checkpoint without a pretraining seed (not ours:
    no run.json) draws from f alone, as before."""
    if pretrain_seed is None:
        return int(finetune_seed)
    return int(np.random.SeedSequence([int(pretrain_seed), int(finetune_seed)]).generate_state(1)[0] >> 1)


def pretrain_seed_of(path: Path) -> int | None:
    """``run.seed`` from the checkpoint's run.json (written by every pretraining run, ``none`` included)."""
    try:
        return int(json.loads((path / "run.json").read_text())["config"]["run"]["seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class Checkpoint:
    """A loaded checkpoint directory: its path, tokenizer and pretraining seed; heads are built per task and seed."""

    path: Path
    tokenizer: Any
    max_position: int
    pretrain_seed: int | None = None  # None: not one of ours (no run.json)

    @classmethod
    def load(cls, path: str | Path) -> "Checkpoint":
        from transformers import AutoConfig, AutoTokenizer

        path = Path(path)
        if not (path / "config.json").exists():
            raise TaskError(f"checkpoint {path} has no config.json; expected a Hugging Face checkpoint directory")
        config = AutoConfig.from_pretrained(str(path))
        return cls(path, AutoTokenizer.from_pretrained(str(path)), config.max_position_embeddings,
                   pretrain_seed_of(path))

    def draw(self, finetune_seed: int) -> int:
        return finetune_draw(finetune_seed, self.pretrain_seed)


def load_encoder(ck: Checkpoint, device: torch.device, init: str = "checkpoint", seed: int = 0):
    """The checkpoint's encoder alone (no pooler), for the linear probe; ``init=random`` draws its weights
    afresh from ``seed`` instead (``finetune.init``)."""
    from transformers import AutoModel

    with _quiet_loading():
        encoder = AutoModel.from_pretrained(str(ck.path), add_pooling_layer=False)
    if init == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            reinitialize(encoder, encoder.config.initializer_range)
    return encoder.to(device)
