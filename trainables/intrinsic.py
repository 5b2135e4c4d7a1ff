"""Intrinsic evaluation on held-out documents, identical for every variant.

* MLM accuracy and perplexity at a fixed 15% mask (``objective.eval_mask_ratio``) with masks drawn
  once from a fixed generator, on single-segment inputs: independent of the training mask ratio.
* NSP and SOP accuracy of the pair head on fixed held-out pairs, for every variant (for one that never
  trained the head, chance is the expected answer and the point of the measurement).
* A representation-collapse diagnostic: mean pairwise cosine similarity of token vectors and of
  [CLS] vectors (a pilot saw ``nsp_only`` collapse to 1.000: every vector the same).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from trainables.data.examples import IGNORE, SpecialIds, build_chunks, collate, make_examples
from trainables.data.masking import MaskedBatch, mask_batch, step_generator, unmasked
from trainables.model import forward_pretraining

COLLAPSE_TOKEN_COSINE = 0.95  # above this, token vectors are near-identical: the encoder has collapsed


class IntrinsicMetrics(NamedTuple):
    mlm_acc: float
    mlm_ppl: float
    pair_acc_nsp: float
    pair_acc_sop: float
    token_cosine: float
    cls_cosine: float
    collapsed: bool

    def as_dict(self, prefix: str = "eval/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in self._asdict().items()}


class EvalSets(NamedTuple):
    mlm: list[MaskedBatch]
    nsp: list[MaskedBatch]
    sop: list[MaskedBatch]
    first_regular: int  # ids below are special tokens: excluded from the token-vector diagnostic


def build_eval_sets(heldout: list[list[np.ndarray]], sp: SpecialIds, *, seq_len: int, batch_size: int,
                    n_batches: int, eval_mask_ratio: float, data_seed: int) -> EvalSets:
    """Fixed held-out batches: the same chunks, masks and pairs for every variant of a comparison."""
    chunks = build_chunks(heldout, seq_len, 0.0, np.random.default_rng([data_seed, 99, 0]))
    chunks = chunks[:batch_size * n_batches]
    sets = {}
    for task in ("single", "nsp", "sop"):
        examples = make_examples(chunks, heldout, task, sp, np.random.default_rng([data_seed, 99, 1]))
        batches = []
        for b, start in enumerate(range(0, len(examples), batch_size)):
            raw = collate(examples[start:start + batch_size], list(range(start, start + batch_size)), sp.pad)
            batches.append(mask_batch(raw, sp, ratio=eval_mask_ratio, generator=step_generator(data_seed + 99, b))
                           if task == "single" else unmasked(raw))
        sets[task] = batches
    return EvalSets(sets["single"], sets["nsp"], sets["sop"], sp.first_regular)


def _mean_pairwise_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity over distinct pairs of rows of ``x`` (N, H)."""
    if len(x) < 2:
        return float("nan")
    x = torch.nn.functional.normalize(x.float(), dim=-1)
    sim = x @ x.T
    n = len(x)
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


@torch.no_grad()
def evaluate_intrinsic(model, sets: EvalSets, device: torch.device, max_vectors: int = 1024) -> IntrinsicMetrics:
    was_training = model.training
    model.eval()
    nll, correct, count = 0.0, 0, 0
    tokens, cls = [], []
    for batch in sets.mlm:
        batch = batch.to(device)
        out = forward_pretraining(model, batch, need_pair=False)
        logits = out.mlm_logits.float()
        nll += float(torch.nn.functional.cross_entropy(logits, batch.mlm_labels, reduction="sum"))
        correct += int((logits.argmax(-1) == batch.mlm_labels).sum())
        count += len(batch.mlm_labels)
        regular = (batch.attention_mask > 0) & (batch.input_ids >= sets.first_regular)
        tokens.append(out.hidden[regular].cpu())
        cls.append(out.hidden[:, 0].cpu())
    pair_acc = {}
    for name, batches in (("nsp", sets.nsp), ("sop", sets.sop)):
        right, total = 0, 0
        for batch in batches:
            batch = batch.to(device)
            logits = forward_pretraining(model, batch, need_mlm=False).pair_logits
            keep = batch.pair_labels != IGNORE
            right += int((logits.argmax(-1)[keep] == batch.pair_labels[keep]).sum())
            total += int(keep.sum())
        pair_acc[name] = right / max(total, 1)
    gen = torch.Generator().manual_seed(0)
    tok = torch.cat(tokens)
    tok = tok[torch.randperm(len(tok), generator=gen)[:max_vectors]]
    token_cos = _mean_pairwise_cosine(tok)
    cls_cos = _mean_pairwise_cosine(torch.cat(cls)[:max_vectors])
    model.train(was_training)
    return IntrinsicMetrics(correct / max(count, 1), math.exp(min(nll / max(count, 1), 50.0)), pair_acc["nsp"],
                            pair_acc["sop"], token_cos, cls_cos, bool(token_cos > COLLAPSE_TOKEN_COSINE))
