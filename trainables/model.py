"""The encoder and its pretraining heads: stock ``transformers.BertForPreTraining``, run sparsely.

We keep HF's module tree (``bert``, ``cls.predictions``, ``cls.seq_relationship``) so checkpoints load
with the Auto classes and ``pipeline("fill-mask")``, but call the pieces ourselves: MLM logits are
computed only at masked positions (full-vocabulary logits at every position cost far more, for positions no
loss reads), the pair head only when a pair loss is on, and the model returns outputs, never losses
(``trainables.objectives`` does).
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING

import torch
from transformers import BertConfig, BertForPreTraining

from trainables.forward import PretrainOutputs, forward_pretraining, key_padding_mask  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from trainables.config import ModelConfig
    from trainables.data.masking import MaskedBatch


def bert_config(cfg: ModelConfig, vocab_size: int, pad_id: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                      num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
                      max_position_embeddings=cfg.max_position, hidden_dropout_prob=cfg.dropout,
                      attention_probs_dropout_prob=cfg.dropout, pad_token_id=pad_id,
                      attn_implementation="sdpa")


def build_model(cfg: ModelConfig, vocab_size: int, pad_id: int, seed: int) -> BertForPreTraining:
    """Seeded initial weights: the same for every variant that shares ``seed`` (``none`` included).

    HF initialises from torch's global generator, so we fork it: the caller's RNG state is untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForPreTraining(bert_config(cfg, vocab_size, pad_id))
    table = model.bert.embeddings.position_embeddings.weight
    with torch.no_grad():
        if cfg.position_init == "sinusoidal":
            table.copy_(sinusoidal_positions(*table.shape, std=model.config.initializer_range * cfg.position_scale))
        elif cfg.position_scale != 1.0:
            table.mul_(cfg.position_scale)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model


def sinusoidal_positions(positions: int, dim: int, std: float) -> torch.Tensor:
    """Vaswani et al. (2017)'s position table (sin on even, cos on odd dimensions), scaled so each entry's
    std over the table is ``std`` (BERT's initializer range), like the token embeddings it is added to."""
    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return (table * (std / table.std())).float()


def _seed_of(base: int, name: str) -> int:
    """A seed for an objective's own modules: a function of the run seed and the objective's name only,
    so registering another objective never changes it."""
    return (base * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)) % (2**63 - 1)


class PretrainModel(torch.nn.Module):
    """The encoder with HF's pretraining heads (``bert``, a ``BertForPreTraining``: what the checkpoint
    holds) and the active objectives' own modules (``extras``), as one module so that
    DistributedDataParallel sees (and syncs) every call.

    The forward pass: each objective's ``corrupt`` hook (ELECTRA's generator), the encoder and the HF
    heads the objectives read (``mlm``, ``pair``), then each objective's ``forward`` hook."""

    def __init__(self, bert: BertForPreTraining, objectives, options: dict | None = None, model_cfg=None,
                 seed: int = 0):
        super().__init__()
        self.bert = bert
        self.objectives = tuple(objectives)
        self.options = dict(options or {})
        self.heads = frozenset(o.head for o in self.objectives)
        extras = {}
        for o in self.objectives:
            if o.build is not None:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(_seed_of(seed, o.name))
                    extras[o.name] = o.build(bert, model_cfg, o.options_of(self.options))
        self.extras = torch.nn.ModuleDict(extras)

    def forward(self, batch: MaskedBatch) -> PretrainOutputs:
        aux: dict = {}
        for o in self.objectives:
            if o.corrupt is not None:
                batch, aux[o.name] = o.corrupt(self.extras[o.name], self.bert, batch, o.options_of(self.options))
        out = forward_pretraining(self.bert, batch, need_mlm="mlm" in self.heads, need_pair="pair" in self.heads)
        for o in self.objectives:
            if o.forward is not None:
                aux[o.name] = o.forward(self.extras[o.name] if o.name in self.extras else None, out, batch,
                                        aux.get(o.name, {}), o.options_of(self.options))
        return out._replace(aux=aux)


def freeze_unused(model: torch.nn.Module, frozen_prefixes: tuple[str, ...]) -> list[str]:
    """Stop gradients to the parameters of heads no active objective reads; returns their names.

    ``named_parameters`` lists a tied parameter once, under its first name, so the MLM decoder tied
    to the word embeddings is never frozen through the head's prefix."""
    names = [n for n, p in model.named_parameters() if n.startswith(frozen_prefixes)]
    for n, p in model.named_parameters():
        if n in names:
            p.requires_grad_(False)
    return names


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
