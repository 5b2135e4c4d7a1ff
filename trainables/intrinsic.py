"""Intrinsic evaluation on held-out documents, identical for every variant of a comparison.

The held-out documents are fixed at preparation; their chunks, pairs and masks come from a fixed
seed, so every variant and seed is measured on exactly the same inputs, in every input format:

* each registered objective measures itself (``Objective.intrinsic``) on every variant -- MLM accuracy
  and perplexity at the fixed 15% mask (``objective.eval_mask_ratio``) on pair inputs and on single
  inputs, the pair head's NSP and SOP accuracy (chance for a variant that never trained it: the point
  of the measurement), ELECTRA's replaced-token detection;
* a representation-collapse diagnostic: mean pairwise cosine similarity of token vectors and of
  [CLS] vectors on single-segment held-out text; ``collapsed`` when either is near 1 (a collapsed
  encoder gives every input the same vector).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from trainables.data.batches import layout, to_masked
from trainables.data.masking import MaskedBatch
from trainables.data.samples import Samples
from trainables.data.shards import PreparedCorpus
from trainables.forward import forward_pretraining
from trainables.readback import to_host
from trainables.schema import COLLAPSE_CLS_COSINE, COLLAPSE_TOKEN_COSINE

EVAL_SEED = 99  # the held-out chunks, pairs and masks: the same for every seed and variant
EVAL_FORMATS = ("single", "nsp_pairs", "sop_pairs")  # the held-out sets: one per format a metric reads
DIAGNOSTICS = (("token_cosine", "mean pairwise cosine of held-out token vectors (1.0 = collapsed)"),
               ("cls_cosine", "mean pairwise cosine of held-out [CLS] vectors (1.0 = collapsed)"),
               ("collapsed", "token or [CLS] vectors near-identical"))


class EvalSets(NamedTuple):
    masked: dict[str, list[MaskedBatch]]  # input format -> held-out batches masked at the evaluation ratio
    plain: dict[str, list[MaskedBatch]]  # the same batches unmasked
    first_regular: int  # ids below are special tokens: excluded from the token-vector diagnostic


def build_eval_sets(corpus: PreparedCorpus, sp, *, seq_len: int, batch_size: int, n_batches: int,
                    eval_mask_ratio: float) -> EvalSets:
    """Fixed held-out batches: the same chunks, pairs and masks for every variant of a comparison."""
    samples = Samples(corpus, seq_len=seq_len, short_seq_prob=0.0, batch_size=batch_size, data_seed=EVAL_SEED,
                      docs=corpus.heldout_docs, cache=False)
    chunks = samples.chunks(0)[:batch_size * n_batches]
    # what the objectives' metrics read (the packed formats add nothing they measure)
    masked: dict[str, list[MaskedBatch]] = {f: [] for f in EVAL_FORMATS}
    plain: dict[str, list[MaskedBatch]] = {f: [] for f in EVAL_FORMATS}
    for start in range(0, len(chunks), batch_size):
        idx = np.arange(start, min(start + batch_size, len(chunks)))
        for fmt in EVAL_FORMATS:
            laid = layout(corpus, chunks[idx], fmt, sp, idx)
            masked[fmt].append(to_masked(laid, sp, ratio=eval_mask_ratio, seed=EVAL_SEED, keys=idx))
            plain[fmt].append(to_masked(laid, sp, ratio=None, seed=0, keys=idx))
    return EvalSets(masked, plain, sp.first_regular)


def mean_pairwise_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity over distinct pairs of rows of ``x`` (N, H)."""
    if len(x) < 2:
        return float("nan")
    x = torch.nn.functional.normalize(x.float(), dim=-1)
    sim = x @ x.T
    n = len(x)
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


@torch.no_grad()
def collapse_diagnostics(bert, sets: EvalSets, device: torch.device, max_vectors: int = 1024) -> dict[str, float]:
    """Token and [CLS] cosines. Which positions are regular tokens is read from the host batches, so the
    vectors are gathered on the device with host indices (no data-dependent shape) and read back once."""
    tokens, cls = [], []
    for batch in sets.plain["single"]:
        regular = (batch.attention_mask > 0) & (batch.input_ids >= sets.first_regular)  # host
        at = torch.nonzero(regular.reshape(-1)).squeeze(1)  # host indices into (B * T)
        # the prepared attention mask: a 2D one made transformers ask the device whether it is all ones
        hidden = forward_pretraining(bert, batch.to(device), need_mlm=False, need_pair=False).hidden  # (B, T, H)
        tokens.append(hidden.reshape(-1, hidden.shape[-1]).index_select(0, at.to(device, non_blocking=True)))
        cls.append(hidden[:, 0])
    host = to_host(tokens + cls)  # one transfer
    tok, cls_ = torch.from_numpy(np.concatenate(host[:len(tokens)])), torch.from_numpy(np.concatenate(host[len(tokens):]))
    tok = tok[torch.randperm(len(tok), generator=torch.Generator().manual_seed(0))[:max_vectors]]
    token_cos, cls_cos = mean_pairwise_cosine(tok), mean_pairwise_cosine(cls_[:max_vectors])
    return {"token_cosine": token_cos, "cls_cosine": cls_cos,
            "collapsed": float(token_cos > COLLAPSE_TOKEN_COSINE or cls_cos > COLLAPSE_CLS_COSINE)}


def metric_columns() -> tuple[tuple[str, str], ...]:
    """(name, meaning) of every intrinsic metric: each objective's, then the collapse diagnostics."""
    from trainables.objectives import OBJECTIVES

    return tuple(m for o in OBJECTIVES.values() for m in o.metrics) + DIAGNOSTICS


@torch.no_grad()
def evaluate_intrinsic(model, sets: EvalSets, device: torch.device) -> dict[str, float]:
    """Every objective's intrinsic metrics and the collapse diagnostics of a ``PretrainModel``."""
    from trainables.objectives import OBJECTIVES

    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    for o in OBJECTIVES.values():
        if o.intrinsic is not None:
            metrics.update(o.intrinsic(model, sets, device))
    metrics.update(collapse_diagnostics(model.bert, sets, device))
    model.train(was_training)
    return metrics


def as_report(metrics: dict[str, float], prefix: str = "eval/") -> dict[str, float]:
    return {prefix + k: float(v) for k, v in metrics.items()}
