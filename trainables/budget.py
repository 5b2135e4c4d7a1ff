"""What a run may spend (``optim.budget``): optimizer steps, real tokens, or training FLOPs.

    steps    every variant trains ``optim.max_steps`` steps (variants then differ in compute: ELECTRA's
             generator, the sparse MLM head, the pair head)
    tokens   every variant stops once it has trained on as many real tokens as ``full`` (BERT's own mix)
             does in ``optim.max_steps`` steps of this seed's batches
    flops    every variant stops once it has spent as many training FLOPs (``trainables.flops``) as
             ``full`` does in ``optim.max_steps`` steps: a comparison at equal compute

The reference is BERT's ``full`` as registered (its weights, input format and mask ratio 0.15), not
``full`` at the variant's own mask ratio: one target per seed for every variant of a comparison, so a
mix searched at ratio 0.34 gets the same compute as BERT rather than 1.31x. Counts are of the global
batch, the same on every rank under DDP.

The target and each variant's planned steps (which set the learning-rate schedule) come from the
seed's batch order before training, the same batches for every variant; the loop then counts the
real cost of every step and stops at the first step that reaches the target, so recorded costs agree
within one step's worth.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from trainables.data.batches import Position, positions_from
from trainables.data.samples import chunk_lengths
from trainables.flops import StepShape, step_flops


class Budget(NamedTuple):
    kind: str  # steps | tokens | flops
    target: float  # steps, tokens or FLOPs a run spends
    planned_steps: int  # the steps the schedule is built for (and at most ~5% more are run)

    @property
    def cap(self) -> int:
        return self.planned_steps if self.kind == "steps" else int(self.planned_steps * 1.05) + 2

    def spent(self, step: int, tokens: int, flops: float) -> bool:
        used = {"steps": step, "tokens": tokens, "flops": flops}[self.kind]
        return used >= self.target or step >= self.cap


def _shapes(steps, objective, fmt: str, n: int, batch_size: int) -> list[tuple[StepShape, int]]:
    """Expected (shape, real tokens) of the first ``n`` steps in input format ``fmt``, from chunk lengths."""
    extra = 2 if fmt == "single" else 3
    out = []
    for p in positions_from(steps, Position(0, 0, 0, 0), n):
        samples = steps.phases[p.phase]
        lengths = chunk_lengths(samples.chunks(p.epoch)[np.asarray(samples.order(p.epoch)[p.batch])]) + extra
        k = np.maximum(np.round((lengths - extra) * objective.mask_ratio), 1)  # masked tokens per row
        out.append((StepShape(batch_size, int(lengths.max()), int(k.max())), int(lengths.sum())))
    return out


def step_cost(kind: str, cfg, objectives, shape: StepShape, tokens: int, vocab: int) -> float:
    if kind == "tokens":
        return float(tokens)
    if kind == "flops":
        return step_flops(cfg.model, objectives, cfg.objective.options, shape, vocab)
    return 1.0


def plan_budget(cfg, steps, vocab: int) -> Budget:
    """The target (``full`` for ``max_steps``) and this variant's planned steps to reach it."""
    from trainables.config import objective_for_variant
    from trainables.objectives import OBJECTIVES, VARIANTS, get_objective

    o, kind, n = cfg.objective, cfg.optim.budget, cfg.optim.max_steps
    if kind == "steps" or n == 0:
        return Budget("steps", float(n), n)
    full = VARIANTS["full"]
    reference = [OBJECTIVES[k] for k, w in full.weights.items() if w > 0]
    bert = objective_for_variant("full")  # BERT's mask ratio, whatever this variant's
    target = sum(step_cost(kind, cfg, reference, s, t, vocab)
                 for s, t in _shapes(steps, bert, full.input_format, n, cfg.optim.batch_size))
    mine = [get_objective(k) for k in o.active]
    spent, planned = 0.0, 0
    horizon = 4 * n + 8
    for s, t in _shapes(steps, o, o.input_format, horizon, cfg.optim.batch_size):
        spent += step_cost(kind, cfg, mine, s, t, vocab)
        planned += 1
        if spent >= target:
            break
    return Budget(kind, target, planned)
