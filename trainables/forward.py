"""The encoder's sparse forward pass: what the model (``trainables.model``) and the objectives' metrics and
hooks (``trainables.objectives``) both run, below both, so that neither imports the other.

    forward_pretraining(bert, batch)  the encoder, the MLM head at the masked positions, the pair head
    key_padding_mask(config, mask)    the (B, 1, 1, T) attention mask, without a host sync
    block_mask(config, blocks)        the (B, 1, T, T) mask of packed pairs: each attends to itself only
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:
    from transformers import BertForPreTraining

    from trainables.data.masking import MaskedBatch


class PretrainOutputs(NamedTuple):
    mlm_logits: torch.Tensor | None  # (B * P, V) at the masked positions only (P per row, padded)
    pair_logits: torch.Tensor | None  # (B, 2); (B, Q, 2) for packed sentence pairs
    hidden: torch.Tensor  # (B, T, H) last layer
    aux: dict | None = None  # objective name -> what its corrupt/forward hooks produced


def key_padding_mask(config, attention_mask: torch.Tensor) -> torch.Tensor:
    """The (B, 1, 1, T) mask the attention takes as it is: a 2D mask would make transformers ask the
    device whether any position is padded (``mask.all()``), a host sync on every padded batch."""
    mask = attention_mask[:, None, None, :].bool()
    if config._attn_implementation == "sdpa":
        return mask  # True: attend
    return (~mask).to(torch.float32) * torch.finfo(torch.float32).min  # additive, for eager attention


def block_mask(config, blocks: torch.Tensor) -> torch.Tensor:
    """The (B, 1, T, T) mask of packed sentence pairs: position i attends to j when both lie in the same pair
    (padding, block -1, attends to padding only, so no row of the mask is empty)."""
    mask = (blocks[:, :, None] == blocks[:, None, :])[:, None]
    if config._attn_implementation == "sdpa":
        return mask
    return (~mask).to(torch.float32) * torch.finfo(torch.float32).min


def pooled_pairs(model: BertForPreTraining, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """BERT's pooler on the [CLS] of each packed pair: (B, Q, H) for positions (B, Q). HF's pooler reads
    position 0, so each pair's [CLS] vector is handed to it as a sequence of one."""
    B, Q, H = *positions.shape, hidden.shape[-1]
    picked = hidden.gather(1, positions.unsqueeze(-1).expand(B, Q, H))
    return model.bert.pooler(picked.reshape(B * Q, 1, H)).reshape(B, Q, H)


def forward_pretraining(model: BertForPreTraining, batch: MaskedBatch, *, need_mlm: bool = True,
                        need_pair: bool = True) -> PretrainOutputs:
    """The encoder, then the MLM head at the masked positions only and the pair head on the pooled [CLS].

    Nothing here waits on the device: the attention path was decided when the batch was built (length
    bucketing makes most batches unpadded, and without a mask SDPA takes its fused kernel), and the
    masked positions are a fixed-shape (B, P) gather, not a boolean index of data-dependent size."""
    packed = batch.blocks is not None
    attention_mask = block_mask(model.config, batch.blocks) if packed else \
        None if batch.unpadded else key_padding_mask(model.config, batch.attention_mask)
    out = model.bert(input_ids=batch.input_ids, attention_mask=attention_mask, token_type_ids=batch.token_type_ids,
                     position_ids=batch.position_ids)
    hidden = out.last_hidden_state  # (B, T, H)
    mlm_logits = None
    if need_mlm:
        B, P = batch.mlm_positions.shape
        picked = hidden.gather(1, batch.mlm_positions.unsqueeze(-1).expand(B, P, hidden.shape[-1]))  # (B, P, H)
        mlm_logits = model.cls.predictions(picked.reshape(B * P, -1))  # (B * P, V)
    pooled = pooled_pairs(model, hidden, batch.pair_positions) if packed else out.pooler_output
    pair_logits = model.cls.seq_relationship(pooled) if need_pair else None  # (B, 2), or (B, Q, 2) when packed
    return PretrainOutputs(mlm_logits, pair_logits, hidden)
