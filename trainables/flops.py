"""Training FLOPs of a pretraining step, from the architecture and the batch's shape: the one formula the
loop counts with (``optim.budget=flops``), the planner estimates with and the benchmark divides by.

Counted as matrix multiplications at 2 FLOPs per multiply-add; embedding lookups, layer norms,
softmaxes and activations are not counted (they are not matmuls and are a few percent at most).
For a batch of B sequences padded to T tokens (what the step computes), an encoder of L layers, width
H and FFN width I costs, forward:

    encoder      B T L (8 H^2 + 4 H I + 4 T H)       Q, K, V, O projections; the FFN; QK^T and AV
    pooler       2 B H^2                             computed by BERT's forward for every objective
    heads        each active objective's own (``Objective.flops``): the MLM head at the B P gathered
                 positions only, 2 B P (H^2 + H V); the pair head 4 B H; ELECTRA's generator (its own
                 encoder at width G plus its head at the masked positions) and its per-token
                 discriminator head

and training is 3x forward (the backward pass costs twice the forward) for everything that is trained;
the pooler, when no objective reads it, is forward only.
"""

from __future__ import annotations

from typing import NamedTuple


class StepShape(NamedTuple):
    batch: int  # sequences B
    length: int  # padded length T
    predictions: int  # gathered MLM positions per sequence P


def encoder_forward(B: int, T: int, layers: int, hidden: int, intermediate: int) -> float:
    return float(B * T * layers * (8 * hidden**2 + 4 * hidden * intermediate + 4 * T * hidden))


def step_flops(model_cfg, objectives, options: dict, shape: StepShape, vocab_size: int) -> float:
    """Training FLOPs of one optimizer step of ``objectives`` (the active ones) on ``shape``."""
    H, B, T = model_cfg.hidden_size, shape.batch, shape.length
    encoder = encoder_forward(B, T, model_cfg.num_layers, H, model_cfg.intermediate_size)
    pooler = 2.0 * B * H * H
    heads = sum(o.flops(model_cfg, o.options_of(options), shape, vocab_size) for o in objectives if o.flops)
    pooler_trained = any(o.head == "pair" for o in objectives)
    return 3.0 * (encoder + heads) + (3.0 if pooler_trained else 1.0) * pooler


def shape_of(batch) -> StepShape:
    """The shape of a ``MaskedBatch`` (host metadata: no device read)."""
    B, T = batch.input_ids.shape
    return StepShape(int(B), int(T), int(batch.mlm_positions.shape[1]))
