"""The checkpoint being fine-tuned, and the task heads and frozen encoder loaded from it.

Heads are the stock ``transformers`` classes the task type names, loaded with ``from_pretrained`` (the
pretraining heads are dropped; the new head is initialised from the fine-tuning seed). Sequence
classification reads the pooler, which NSP trains and the other variants leave at its random init;
``finetune.head=cls`` draws it afresh (``fresh_pooler``) so a contrast is not "the loss + a trained pooler".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def build_head_model(checkpoint: Path, spec: TaskSpec, seed: int, dropout: float = 0.1, head: str = "pooler"):
    """The task type's transformers head on the checkpoint's encoder; the new head seeded by ``seed``.
    ``dropout`` (``finetune.dropout``) replaces the pretraining dropout stored in the checkpoint's config.
    ``head`` (``finetune.head``, for types that read the pooled state): ``pooler`` keeps the checkpoint's
    pooler, ``cls`` draws it afresh after the classifier, so the classifier's draw is the same under both."""
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
        return model


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


def load_encoder(ck: Checkpoint, device: torch.device):
    """The checkpoint's encoder alone (no pooler), for the linear probe."""
    from transformers import AutoModel

    with _quiet_loading():
        return AutoModel.from_pretrained(str(ck.path), add_pooling_layer=False).to(device)
