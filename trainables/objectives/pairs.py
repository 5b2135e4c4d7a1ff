"""The pair objectives: next sentence prediction (BERT's NSP) and sentence order prediction (ALBERT's SOP).

Both read one two-way head on the pooled [CLS] and share its loss; they differ only in how the data
builds the pairs (``pairs``): NSP replaces B by a segment of another document half of the time, SOP
swaps A and B half of the time (``trainables.data.examples``). The two cannot train together.
"""

from __future__ import annotations

import torch.nn.functional as F

from trainables.data.examples import IGNORE
from trainables.objectives.base import Objective, Variant


def pair_loss(out, batch, options=None):
    """Two-way cross-entropy of the pair head (NSP: is B next? SOP: are A and B swapped?)."""
    return F.cross_entropy(out.pair_logits.float(), batch.pair_labels, ignore_index=IGNORE)


PAIR_HEAD = ("bert.pooler.", "cls.seq_relationship.")
NSP = Objective(
    "nsp", "next sentence prediction: is segment B the continuation of A, or from another document?", pair_loss,
    head="pair", head_params=PAIR_HEAD, pairs="nsp",
    variants={"nsp_only": Variant({"nsp": 1.0}, "pair", "NSP alone")},
)
SOP = Objective(
    "sop", "sentence order prediction: are segments A and B in their original order?", pair_loss,
    head="pair", head_params=PAIR_HEAD, pairs="sop",
    variants={"sop_only": Variant({"sop": 1.0}, "pair", "SOP alone"),
              "mlm_sop": Variant({"mlm": 1.0, "sop": 1.0}, "pair", "ALBERT: MLM + SOP")},
)
REGISTER = (NSP, SOP)
