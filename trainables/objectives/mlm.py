"""Masked language modelling (BERT): predict the masked tokens from their context.

The loss is the cross-entropy over the masked positions only: the model computes the MLM logits
there and nowhere else (a sparse head over a fixed-shape gather; ``trainables.model``). Masking is
data (``trainables.data.masking``): the ratio, the strategy and the 80/10/10 split are ``objective.*``
settings. Intrinsic metrics: accuracy and perplexity at the fixed 15% evaluation mask, on pair inputs
and on single inputs, for every variant.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainables.data.samples import IGNORE
from trainables.forward import forward_pretraining
from trainables.objectives.base import Objective, Variant
from trainables.readback import to_host


def mlm_loss(out, batch, options=None):
    """Cross-entropy over the masked positions only (the logits are already sparse: (B * P, V))."""
    return F.cross_entropy(out.mlm_logits.float(), batch.mlm_labels.reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def mlm_metrics(model, sets, device) -> dict[str, float]:
    """Accuracy and perplexity at the fixed evaluation mask. The sums stay on the device and are read back
    once per input format (``to_host``); which positions count is host data, so no batch waits on the device."""
    out = {}
    for fmt, suffix in (("nsp_pairs", ""), ("single", "_single")):
        sums, count = [], 0
        for batch in sets.masked[fmt]:
            count += int((batch.mlm_labels != IGNORE).sum())  # the host copy: no device read
            batch = batch.to(device)
            logits = forward_pretraining(model.bert, batch, need_pair=False).mlm_logits.float()  # (B * P, V)
            labels = batch.mlm_labels.reshape(-1)
            nll = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")
            correct = ((logits.argmax(-1) == labels) & (labels != IGNORE)).sum()
            sums.append(torch.stack([nll, correct.float()]))
        nll, correct = to_host([torch.stack(sums).sum(0)])[0].tolist() if sums else (0.0, 0.0)
        out[f"mlm_acc{suffix}"] = correct / max(count, 1)
        out[f"mlm_ppl{suffix}"] = math.exp(min(nll / max(count, 1), 50.0))
    return out


MLM = Objective(
    "mlm", "masked language modelling: predict the masked tokens", mlm_loss, head="mlm",
    head_params=("cls.predictions.",), masked=True, search=(0.1, 2.0), intrinsic=mlm_metrics,
    flops=lambda m, o, s, V: 2.0 * s.batch * s.predictions * (m.hidden_size ** 2 + m.hidden_size * V),
    metrics=(("mlm_acc", "held-out MLM accuracy at the fixed 15% evaluation mask, on pair inputs"),
             ("mlm_ppl", "held-out MLM perplexity at the fixed 15% evaluation mask, on pair inputs"),
             ("mlm_acc_single", "held-out MLM accuracy at the fixed 15% evaluation mask, on single segments"),
             ("mlm_ppl_single", "held-out MLM perplexity at the fixed 15% evaluation mask, on single segments")),
    variants={"full": Variant({"mlm": 1.0, "nsp": 1.0}, "nsp_pairs", "BERT: MLM + NSP"),
              "mlm_only": Variant({"mlm": 1.0}, "single", "MLM alone on single segments (the seed's mlm_only)"),
              "mlm_pairs": Variant({"mlm": 1.0}, "nsp_pairs", "MLM alone on exactly full's inputs (same pairs, "
                                   "same random negatives, same token types): full - mlm_pairs is the NSP loss"),
              "full_sentences": Variant({"mlm": 1.0}, "full_sentences", "RoBERTa's FULL-SENTENCES: MLM alone on the "
                                        "step's chunks packed into full rows across document boundaries, a [SEP] "
                                        "between them (full_sentences - mlm_only is the packing)")},
)
REGISTER = (MLM,)
