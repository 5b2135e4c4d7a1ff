"""Pretraining losses as small functions in a registry; the total is their weighted sum.

NSP and SOP share one loss (and one head): they differ only in how ``trainables.data.examples``
builds the pairs. A variant is a set of weights (``ObjectiveConfig.weights``), never a code path.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from trainables.data.examples import IGNORE
from trainables.data.masking import MaskedBatch
from trainables.model import PretrainOutputs


def mlm_loss(out: PretrainOutputs, batch: MaskedBatch) -> torch.Tensor:
    """Cross-entropy over the masked positions only (the logits are already sparse)."""
    return F.cross_entropy(out.mlm_logits.float(), batch.mlm_labels)


def pair_loss(out: PretrainOutputs, batch: MaskedBatch) -> torch.Tensor:
    """Two-way cross-entropy of the pair head (NSP: is B next? SOP: are A and B swapped?)."""
    return F.cross_entropy(out.pair_logits.float(), batch.pair_labels, ignore_index=IGNORE)


OBJECTIVES: dict[str, Callable[[PretrainOutputs, MaskedBatch], torch.Tensor]] = {
    "mlm": mlm_loss,
    "nsp": pair_loss,
    "sop": pair_loss,
}


def build_objective(name: str) -> Callable[[PretrainOutputs, MaskedBatch], torch.Tensor]:
    if name not in OBJECTIVES:
        raise ValueError(f"objective {name!r} is not valid; allowed: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def total_loss(out: PretrainOutputs, batch: MaskedBatch, weights: dict[str, float]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the active objectives, and each active loss on its own (for logging)."""
    parts = {name: build_objective(name)(out, batch) for name, w in weights.items() if w > 0}
    total = sum(weights[name] * loss for name, loss in parts.items())
    return total, parts
