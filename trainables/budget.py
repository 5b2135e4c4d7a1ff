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

BERT's second phase (``optim.phase2_steps`` at ``optim.phase2_seq_len``) takes the same share of every
variant's planned steps, ``phase2_steps / max_steps``: at a FLOP budget ELECTRA plans fewer steps than
``full`` and, with phase 2 at the fixed step ``max_steps - phase2_steps``, skipped it or got a smaller
share of it. Phase 1 and phase 2 are planned from their own batches (each phase's positions do not
depend on where phase 2 starts), so the plan decides the boundary instead of reading it from the
``StepData`` it plans for. ``full`` at any budget, and every variant at ``steps``, keeps
``max_steps - phase2_steps``.
"""

from __future__ import annotations

import math
from typing import Iterator, NamedTuple

import numpy as np

from trainables.data.batches import Position, full_sentence_counts, positions_from, row_counts
from trainables.data.samples import chunk_lengths
from trainables.flops import StepShape, step_flops


class Budget(NamedTuple):
    kind: str  # steps | tokens | flops
    target: float  # steps, tokens or FLOPs a run spends
    planned_steps: int  # the steps the schedule is built for (and at most ~5% more are run)
    phase2_from: int = 0  # the step phase 2 starts at (with optim.phase2_steps; the same share for every variant)

    @property
    def cap(self) -> int:
        return self.planned_steps if self.kind == "steps" else int(self.planned_steps * 1.05) + 2

    def spent(self, step: int, tokens: int, flops: float) -> bool:
        used = {"steps": step, "tokens": tokens, "flops": flops}[self.kind]
        return used >= self.target or step >= self.cap


class StepCounts(NamedTuple):
    """What a run's global batch holds per step on average: the input format sets the first (``single``
    as many as the pair formats but for chunks that end their document, which have no next token to put in
    the middle [SEP]'s place; ``full_sentences`` B - 1 separators and 2B specials beside the content), the
    mask ratio the second (the same masked positions per row, counted on the chunk, in every
    one-chunk-per-row format; full_sentences rounds per row of its stream instead)."""

    tokens_per_step: float  # real (non-padding) tokens
    masked_per_step: float  # masked positions (0 without masking)


def step_counts(steps, n: int) -> StepCounts:
    """Average real tokens and masked positions per step over the first ``n`` steps of ``steps`` (the
    positions a run of ``n`` steps trained, phase 2 where ``steps.phase2_from`` puts it), from chunk
    lengths: each row masks ``max(1, round(ratio * n))`` of its ``n`` content tokens (``mask_counts``)."""
    ratio = steps.masking["ratio"] if steps.masking else None
    tokens = masked = 0
    for p in positions_from(steps, Position(0, 0, 0, 0), n):
        samples = steps.phases[p.phase]
        idx = np.asarray(samples.order(p.epoch)[p.batch])
        rows = samples.chunks(p.epoch)[idx]
        if steps.fmt == "full_sentences":  # rows cut from the step's stream: counted as laid out
            t, _, k = full_sentence_counts(chunk_lengths(rows), samples.seq_len, ratio)
            tokens, masked = tokens + t, masked + int(k.sum())
            continue
        pairs = samples.batch_pairs(p.epoch, idx) if steps.fmt == "sentence_pairs" else None
        real, content = row_counts(samples.corpus, rows, steps.fmt, pairs)
        tokens += int(real.sum())
        if ratio:
            masked += int(np.minimum(np.maximum(np.round(content * ratio), 1), content).sum())
    return StepCounts(tokens / max(n, 1), masked / max(n, 1))


def phase_batches(samples) -> Iterator[tuple[int, int]]:
    """(epoch, batch) of a phase's successive steps from its start, as ``StepData.next`` walks them."""
    epoch, b = 0, 0
    while True:
        yield epoch, b
        b += 1
        if b >= samples.batches_in_epoch(epoch):
            epoch, b = epoch + 1, 0


def _shapes(samples, objective, fmt: str, batch_size: int) -> Iterator[tuple[StepShape, int]]:
    """Expected (shape, real tokens) of a phase's successive steps in input format ``fmt``, from chunk lengths."""
    for epoch, b in phase_batches(samples):
        idx = np.asarray(samples.order(epoch)[b])
        rows = samples.chunks(epoch)[idx]
        if fmt == "full_sentences":
            tokens, T, k = full_sentence_counts(chunk_lengths(rows), samples.seq_len, objective.mask_ratio)
            yield StepShape(batch_size, T, max(int(k.max()), 1)), tokens
            continue
        pairs = samples.batch_pairs(epoch, idx) if fmt == "sentence_pairs" else None
        real, content = row_counts(samples.corpus, rows, fmt, pairs)
        k = np.maximum(np.round(content * objective.mask_ratio), 1)  # masked tokens per row
        yield StepShape(batch_size, int(real.max()), int(k.max())), int(real.sum())


class _Spend:
    """The cumulative cost of a phase's first k steps, walked only as far as asked."""

    def __init__(self, costs: Iterator[float]):
        self.costs, self.sums = costs, [0.0]

    def __call__(self, k: int) -> float:
        while len(self.sums) <= k:
            self.sums.append(self.sums[-1] + next(self.costs))
        return self.sums[k]


def phase2_share(planned: int, max_steps: int, phase2_steps: int) -> int:
    """Phase 2's steps out of ``planned``: the share ``phase2_steps / max_steps`` of them (at least one
    when phase 2 is on, so no variant skips it). It grows by at most one step per planned step, so a
    plan's cost is monotone in ``planned``."""
    if not phase2_steps or not planned:
        return 0
    return min(planned, max(1, math.floor(phase2_steps * planned / max_steps + 0.5)))


def step_cost(kind: str, cfg, objectives, shape: StepShape, tokens: int, vocab: int) -> float:
    if kind == "tokens":
        return float(tokens)
    if kind == "flops":
        return step_flops(cfg.model, objectives, cfg.objective.options, shape, vocab)
    return 1.0


def _spend(kind: str, cfg, steps, objectives, objective, fmt: str, vocab: int) -> list[_Spend]:
    """Per phase of ``steps``, the cumulative cost of its first k steps for this mix and input format."""
    return [_Spend(step_cost(kind, cfg, objectives, s, t, vocab) for s, t in _shapes(p, objective, fmt, cfg.optim.batch_size))
            for p in steps.phases]


def plan_budget(cfg, steps, vocab: int) -> Budget:
    """The target (``full`` for ``max_steps``), this variant's planned steps to reach it and the step its
    phase 2 starts at (``phase2_share``). ``steps``' own ``phase2_from`` is not read: each phase is
    planned from its own batches."""
    from trainables.config import objective_for_variant
    from trainables.objectives import OBJECTIVES, VARIANTS, get_objective

    o, kind, n = cfg.objective, cfg.optim.budget, cfg.optim.max_steps
    p2 = cfg.optim.phase2_steps if len(steps.phases) > 1 else 0
    if kind == "steps" or n == 0:
        return Budget("steps", float(n), n, n - p2)
    full = VARIANTS["full"]
    reference = [OBJECTIVES[k] for k, w in full.weights.items() if w > 0]
    bert = objective_for_variant("full")  # BERT's mask ratio, whatever this variant's
    ref = _spend(kind, cfg, steps, reference, bert, full.input_format, vocab)
    target = ref[0](n - p2) + (ref[1](p2) if p2 else 0.0)
    mine = _spend(kind, cfg, steps, [get_objective(k) for k in o.active], o, o.input_format, vocab)
    planned, q = 0, 0
    horizon = 4 * n + 8
    while planned < horizon:
        planned += 1
        q = phase2_share(planned, n, p2)
        if mine[0](planned - q) + (mine[1](q) if q else 0.0) >= target:
            break
    return Budget(kind, target, planned, planned - q)
