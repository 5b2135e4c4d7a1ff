"""MLM masking as data: which positions to predict and what the model sees there.

Per sequence exactly ``max(1, round(ratio * n))`` of its ``n`` maskable tokens are chosen (special
tokens and padding never are), as BERT's data creation does; of those, ``mask_token_frac`` become
``[MASK]``, ``random_token_frac`` a random regular token, the rest stay unchanged. Dynamic masking
draws a new mask per batch from a generator seeded by ``(seed, step)``, which makes a resumed run
draw the same masks; static masking keys the generator on the example instead, so an example keeps
its mask for every epoch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from trainables.data.examples import IGNORE, PretrainBatch, SpecialIds


class MaskedBatch(NamedTuple):
    """A batch ready for the model. Shapes: ids (B, T); mlm_mask (B, T) bool; mlm_labels (M,) for the
    M masked positions in row-major order; pair_labels (B,) with ``IGNORE`` where no pair loss applies."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    mlm_mask: torch.Tensor
    mlm_labels: torch.Tensor
    pair_labels: torch.Tensor

    def to(self, device) -> "MaskedBatch":
        return MaskedBatch(*(t.to(device, non_blocking=True) for t in self))


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator for one batch's mask: a pure function of (seed, step)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + 17) % (2**63 - 1))


def choose_mask_positions(maskable: torch.Tensor, ratio: float, scores: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: per row the ``max(1, round(ratio * n))`` maskable positions with the highest scores."""
    n = maskable.sum(dim=1)  # (B,)
    k = torch.clamp(torch.round(n.float() * ratio).long(), min=1)
    k = torch.minimum(k, n)
    scores = scores.masked_fill(~maskable, -1.0)  # scores are in [0, 1): non-maskable sort last
    ranks = scores.argsort(dim=1, descending=True).argsort(dim=1)  # (B, T) rank of each position
    return (ranks < k[:, None]) & maskable


def mask_batch(batch: PretrainBatch, sp: SpecialIds, *, ratio: float, mask_token_frac: float = 0.8,
               random_token_frac: float = 0.1, generator: torch.Generator | None = None,
               static_seed: int | None = None) -> MaskedBatch:
    """Apply BERT masking. With ``static_seed`` each row's draws come from (static_seed, example index)."""
    ids = batch.input_ids
    B, T = ids.shape
    maskable = (ids >= sp.first_regular) & (batch.attention_mask > 0)
    if static_seed is not None:
        gens = [step_generator(static_seed, int(i) + 1_000_000) for i in batch.example_index]
        scores = torch.stack([torch.rand(T, generator=g) for g in gens])
        action = torch.stack([torch.rand(T, generator=g) for g in gens])
        rand_ids = torch.stack([torch.randint(sp.first_regular, sp.vocab_size, (T,), generator=g) for g in gens])
    else:
        scores = torch.rand((B, T), generator=generator)
        action = torch.rand((B, T), generator=generator)
        rand_ids = torch.randint(sp.first_regular, sp.vocab_size, (B, T), generator=generator)
    mlm_mask = choose_mask_positions(maskable, ratio, scores)
    to_mask = mlm_mask & (action < mask_token_frac)
    to_random = mlm_mask & (action >= mask_token_frac) & (action < mask_token_frac + random_token_frac)
    masked = torch.where(to_mask, torch.full_like(ids, sp.mask), ids)
    masked = torch.where(to_random, rand_ids, masked)
    return MaskedBatch(masked, batch.token_type_ids, batch.attention_mask, mlm_mask, ids[mlm_mask],
                       batch.pair_labels)


def unmasked(batch: PretrainBatch) -> MaskedBatch:
    """The batch with nothing masked (pair-only objectives, representation diagnostics)."""
    none = torch.zeros_like(batch.input_ids, dtype=torch.bool)
    return MaskedBatch(batch.input_ids, batch.token_type_ids, batch.attention_mask, none,
                       batch.input_ids[none], batch.pair_labels)


__all__ = ["IGNORE", "MaskedBatch", "choose_mask_positions", "mask_batch", "step_generator", "unmasked"]
