"""Length bucketing, the one batching rule of pretraining and fine-tuning: little compute on padding.

    bucket_batches(lengths, 32, rng)                  # training: shuffled buckets, shuffled batch order
    bucket_batches(lengths, 32, rng, drop_last=True)  # pretraining: every step the same size
    bucket_batches(lengths, 64, None)                 # evaluation: sorted by length, no randomness
"""

from __future__ import annotations

import numpy as np


def bucket_batches(lengths, batch_size: int, rng: np.random.Generator | None, window: int = 50,
                   drop_last: bool = False) -> list[np.ndarray]:
    """Batches of indices of similar length.

    With ``rng``: shuffle, sort by length inside windows of ``batch_size * window`` items, cut into
    batches, (``drop_last``: keep only full batches,) shuffle the batch order. Without: sorted by
    length. Every index appears once (but for the dropped ragged ones)."""
    lengths = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    perm = rng.permutation(len(lengths))
    span = batch_size * window
    batches = []
    for start in range(0, len(perm), span):
        part = perm[start:start + span]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches.extend(part[i:i + batch_size] for i in range(0, len(part), batch_size))
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]  # a ragged batch would change the step size
    return [batches[i] for i in rng.permutation(len(batches))]
