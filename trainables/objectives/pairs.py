"""The pair objectives: next sentence prediction (BERT's NSP) and sentence order prediction (ALBERT's SOP).

Both read one two-way head on the pooled [CLS] and share its loss; they differ only in how the data
builds the pairs (``pairs``): NSP replaces B by a segment of another document half of the time, SOP
swaps A and B half of the time (``trainables.data.samples``). The two cannot train together.
Intrinsic metric: the pair head's accuracy on held-out pairs, for every variant (chance 0.5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.data.samples import IGNORE
from trainables.forward import forward_pretraining
from trainables.objectives.base import Objective, Variant
from trainables.readback import to_host


def pair_loss(out, batch, options=None):
    """Two-way cross-entropy of the pair head (NSP: is B next? SOP: are A and B swapped?)."""
    logits = out.pair_logits.float()  # (B, 2), or (B, Q, 2): one per packed sentence pair
    return F.cross_entropy(logits.reshape(-1, 2), batch.pair_labels.reshape(-1), ignore_index=IGNORE)


def _accuracy(fmt: str, name: str):
    @torch.no_grad()
    def metric(model, sets, device) -> dict[str, float]:
        """The pair head's accuracy; the hits stay on the device, read back once (``to_host``)."""
        hits, total = [], 0
        for batch in sets.plain[fmt]:
            total += int((batch.pair_labels != IGNORE).sum())  # the host copy: no device read
            batch = batch.to(device)
            logits = forward_pretraining(model.bert, batch, need_mlm=False).pair_logits
            hits.append(((logits.argmax(-1) == batch.pair_labels) & (batch.pair_labels != IGNORE)).sum().float())
        right = float(to_host([torch.stack(hits).sum()])[0]) if hits else 0.0
        return {name: right / max(total, 1)}
    return metric


PAIR_HEAD = ("bert.pooler.", "cls.seq_relationship.")


def _pair_flops(model_cfg, options, shape, vocab) -> float:
    return 4.0 * shape.batch * model_cfg.hidden_size  # the two-way head on the pooled [CLS]
NSP = Objective(
    "nsp", "next sentence prediction: is segment B the continuation of A, or from another document?", pair_loss,
    head="pair", head_params=PAIR_HEAD, pairs="nsp", intrinsic=_accuracy("nsp_pairs", "pair_acc_nsp"), flops=_pair_flops,
    metrics=(("pair_acc_nsp", "held-out NSP accuracy of the pair head (chance 0.5)"),),
    variants={"nsp_only": Variant({"nsp": 1.0}, "nsp_pairs", "NSP alone"),
              "sentence_pair": Variant({"mlm": 1.0, "nsp": 1.0}, "sentence_pairs",
                                       "RoBERTa's SENTENCE-PAIR+NSP: MLM + NSP on pairs of single sentences, packed "
                                       "per chunk, each pair attending to itself only")},
)
SOP = Objective(
    "sop", "sentence order prediction: are segments A and B in their original order?", pair_loss,
    head="pair", head_params=PAIR_HEAD, pairs="sop", intrinsic=_accuracy("sop_pairs", "pair_acc_sop"), flops=_pair_flops,
    metrics=(("pair_acc_sop", "held-out SOP accuracy of the pair head (chance 0.5)"),),
    variants={"sop_only": Variant({"sop": 1.0}, "sop_pairs", "SOP alone"),
              "mlm_sop": Variant({"mlm": 1.0, "sop": 1.0}, "sop_pairs", "ALBERT: MLM + SOP")},
)
REGISTER = (NSP, SOP)
