"""Masked language modelling (BERT): predict the masked tokens from their context.

The loss is the cross-entropy over the masked positions only: the model computes the MLM logits
there and nowhere else (a sparse head; ``trainables.model``). Masking is data
(``trainables.data.masking``): the ratio and the 80/10/10 split are ``objective.*`` settings.
"""

from __future__ import annotations

import torch.nn.functional as F

from trainables.objectives.base import Objective, Variant


def mlm_loss(out, batch, options=None):
    """Cross-entropy over the masked positions only (the logits are already sparse)."""
    return F.cross_entropy(out.mlm_logits.float(), batch.mlm_labels)


MLM = Objective(
    "mlm", "masked language modelling: predict the masked tokens", mlm_loss, head="mlm",
    head_params=("cls.predictions.",), masked=True, search=(0.1, 2.0),
    variants={"full": Variant({"mlm": 1.0, "nsp": 1.0}, "pair", "BERT: MLM + NSP"),
              "mlm_only": Variant({"mlm": 1.0}, "single", "MLM alone on single segments (the seed's mlm_only)")},
)
REGISTER = (MLM,)
