"""The checkpoint being fine-tuned, and the task heads and frozen encoder loaded from it.

Heads are the stock ``transformers`` classes the task type names, loaded with ``from_pretrained`` (the
pretraining heads are dropped; the new head is initialised from the fine-tuning draw, ``finetune_draw``:
derived from the pretraining seed and the fine-tuning seed, so draws are nested in pretraining seeds). Sequence
classification reads the pooler, which NSP trains and the other variants leave at its random init;
``finetune.head=cls`` draws it afresh (``fresh_pooler``) so a contrast is not "the loss + a trained pooler".

Loading is checked (``check_loaded``): every encoder weight the model reads must come from the checkpoint,
or loading fails in one line naming the checkpoint and the keys. ``finetune.init=random`` (the instrument
check's negative switch) replaces the checkpoint's encoder by a fresh draw of its own per (variant,
pretraining seed) (``random_init_seed``), in fine-tuning and in the probe alike.
"""

from __future__ import annotations

import contextlib
import hashlib
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


def reinitialize(model: torch.nn.Module, std: float, generator: torch.Generator) -> None:
    """Every weight of ``model`` drawn afresh as BERT initialises it (normal(0, std) matrices and embeddings,
    zero biases, unit LayerNorms), from ``generator``, in module order: ``finetune.init=random``, the instrument
    check's negative switch. (transformers 5 skips ``_init_weights`` on modules loaded from a checkpoint.)"""
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, 0.0, std, generator=generator)
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                torch.nn.init.zeros_(module.bias)
            if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, torch.nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)


def random_init_seed(path: Path) -> int:
    """The seed of ``finetune.init=random``'s fresh encoder for the checkpoint at ``path``: the first 63 bits
    of the sha256 of its variant (run.json's ``config.objective``: the variant's name and its weights, input
    format and mask ratio, so ``mlm_only`` at two mask ratios differ too) and its pretraining seed
    (``config.run.seed``), as sorted JSON. So every (variant, pretraining seed) draws its own encoder, the same
    in every process and for every fine-tuning seed (as a checkpoint is), in fine-tuning and in the probe:
    a contrast under the switch keeps its seed noise instead of being exactly 0. A checkpoint without
    run.json (not ours) draws from its directory's name."""
    try:
        config = json.loads((path / "run.json").read_text())["config"]
        key: dict[str, Any] = {"objective": config["objective"], "pretrain_seed": int(config["run"]["seed"])}
    except (OSError, ValueError, KeyError, TypeError):
        key = {"checkpoint": path.name}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def random_encoder(model, seed: int) -> None:
    """Replace the encoder (embeddings, layers, and the pooler where the model has one) of ``model`` by a
    fresh draw from ``seed`` alone: the global RNG, which draws the task head, is left as it was."""
    reinitialize(model.base_model, model.config.initializer_range, torch.Generator().manual_seed(seed))


# What counts as an encoder weight: every weight of the embeddings and the transformer layers; the pooler only
# where the model reads it from the checkpoint (sequence classification with finetune.head=pooler). The probe
# and the token-level heads never read it, finetune.head=cls draws it afresh, and a checkpoint saved without
# one (BertForMaskedLM, add_pooling_layer=False) is then as good as any.
ENCODER_PARTS = ("embeddings.", "encoder.")


def check_loaded(path: Path, info: dict, prefix: str, pooler: bool) -> None:
    """Refuse, in one line naming the checkpoint and the keys, a load that left an encoder weight of the model
    at its random init (missing from the checkpoint) or left one of the checkpoint's unread (unexpected: a
    layer the config does not have, a renamed module). ``info``: ``from_pretrained(output_loading_info=True)``'s;
    keys are compared without the base model's ``prefix`` (``bert.``), which only the task models carry."""
    parts = ENCODER_PARTS + (("pooler.",) if pooler else ())

    def encoder(keys) -> list[str]:
        return sorted(k for k in keys if k.removeprefix(f"{prefix}.").startswith(parts))

    missing, unexpected = encoder(info.get("missing_keys", ())), encoder(info.get("unexpected_keys", ()))
    if missing or unexpected:
        show = lambda ks: f"{len(ks)} ({', '.join(ks[:4])}{', ...' if len(ks) > 4 else ''})"  # noqa: E731
        raise TaskError(f"checkpoint {path} does not match its encoder: missing {show(missing) if missing else 0}, "
                        f"unexpected {show(unexpected) if unexpected else 0} encoder weights; re-save it from "
                        "a complete model, or point --checkpoint at the right directory")


def build_head_model(checkpoint: Path, spec: TaskSpec, seed: int, dropout: float = 0.1, head: str = "pooler",
                     init: str = "checkpoint"):
    """The task type's transformers head on the checkpoint's encoder; the new head seeded by ``seed``.
    ``dropout`` (``finetune.dropout``) replaces the pretraining dropout stored in the checkpoint's config.
    ``head`` (``finetune.head``, for types that read the pooled state): ``pooler`` keeps the checkpoint's
    pooler, ``cls`` draws it afresh after the classifier, so the classifier's draw is the same under both.
    ``init`` (``finetune.init``): ``random`` replaces the checkpoint's encoder by its own fresh draw
    (``random_init_seed``); the head (and the ``cls`` pooler) are drawn from ``seed`` as with the checkpoint.
    The load is checked: a missing or unexpected encoder weight fails in one line (``check_loaded``)."""
    import transformers

    if head not in HEADS:
        raise TaskError(f"head={head!r} is not valid; allowed: {', '.join(HEADS)}")
    task_type = get_task_type(spec.type)
    cls = getattr(transformers, task_type.head)
    kwargs: dict[str, Any] = {**task_type.head_kwargs(spec.labels), "hidden_dropout_prob": dropout,
                              "attention_probs_dropout_prob": dropout}
    with torch.random.fork_rng(devices=[]), _quiet_loading():  # new heads are drawn from the global RNG
        torch.manual_seed(seed)
        model, info = cls.from_pretrained(str(checkpoint), output_loading_info=True, **kwargs)
        check_loaded(checkpoint, info, model.base_model_prefix, pooler=head_name(spec, head) == "pooler")
        if init == "random":
            random_encoder(model, random_init_seed(checkpoint))
        if head_name(spec, head) == "cls":
            fresh_pooler(model)
        return model


def finetune_draw(finetune_seed: int, pretrain_seed: int | None) -> int:
    """The seed of fine-tuning draw f of a run: its training subset, head init and data order.

    Nested in the pretraining seed: every variant of pretraining seed p draws the same (the comparison
    stays paired within p), each p draws anew, so the variant x draw interaction is resampled with the
    pretraining seeds by the multibootstrap (``analysis.bootstrap``) instead of being one fixed draw
    shared by every run that the intervals never see. A checkpoint without a pretraining seed (not ours:
    no run.json) draws from f alone."""
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


def load_encoder(ck: Checkpoint, device: torch.device, init: str = "checkpoint"):
    """The checkpoint's encoder alone (no pooler), for the linear probe, its load checked (``check_loaded``);
    ``init=random`` replaces its weights by the fresh draw fine-tuning would use (``random_init_seed``:
    the same embeddings and layers)."""
    from transformers import AutoModel

    with _quiet_loading():
        encoder, info = AutoModel.from_pretrained(str(ck.path), add_pooling_layer=False, output_loading_info=True)
    check_loaded(ck.path, info, encoder.base_model_prefix, pooler=False)
    if init == "random":
        random_encoder(encoder, random_init_seed(ck.path))
    return encoder.to(device)
