"""A toy objective as a plugin module: everything an objective needs, in one file, nothing else touched.

Segment prediction: from each token's last hidden state, predict which segment (A or B) it is in, with
a linear head of its own. Registered by ``BERT_OBJECTIVES_PLUGINS=toy_objective`` (the tests put this
folder on the path).
"""

import torch
import torch.nn.functional as F

from trainables.objectives import Objective, Variant


def _build(bert, model_cfg, options):
    return torch.nn.Linear(bert.config.hidden_size, 2)


def _forward(head, out, batch, aux, options):
    return {"logits": head(out.hidden)}  # (B, T, 2)


def segment_loss(out, batch, options):
    logits = out.aux["segment"]["logits"].float()
    real = batch.attention_mask.bool()
    return F.cross_entropy(logits[real], batch.token_type_ids[real]) * options["scale"]


TOY = Objective("segment", "toy: predict each token's segment from its hidden state", segment_loss, head="own",
                options={"scale": 1.0}, build=_build, forward=_forward,
                check=lambda o: None if o["scale"] > 0 else f"scale={o['scale']} must be > 0",
                variants={"segment_only": Variant({"segment": 1.0}, "pair", "the toy objective alone")})
REGISTER = (TOY,)
