"""MLM masking as data: which positions to predict and what the model sees there.

Per sequence ``max(1, round(ratio * n))`` of its ``n`` maskable tokens are chosen (special tokens and
padding never are), as BERT's data creation does; of those, ``mask_token_frac`` become ``[MASK]``,
``random_token_frac`` a random regular token, the rest stay unchanged. Strategies (``MASKING``):
``token`` picks tokens; ``whole_word`` picks whole words (a word is a token and the ``##``
continuation pieces after it), the ratio still counted in tokens.

Every draw is a counter-based hash of (seed, key, position, stream): a mask is a pure function of its
key, never of how many workers share the batch, of gradient accumulation or of padding. A mask stream
(``objective.mask_stream``) other than 0 moves the three draws (which positions, what replaces them, the
random token) to hash streams of their own: other masks on the same rows; stream 0 is the seed's own. Dynamic
masking keys on (seed, step, row of the global batch); static masking keys on the chunk, so a chunk
keeps its whole masked input in every epoch. The result names the masked positions in a fixed-shape
(B, P) array, so the sparse MLM head gathers without a data-dependent shape.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from trainables.data.samples import IGNORE

_M1, _M2, _M3 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
STREAM_STRIDE = 1 << 16  # mask stream m draws on hash streams m * STRIDE + (0, 1, 2): apart from RTD's 3


def hash_uniform(seed: int, key: np.ndarray, positions: np.ndarray, stream: int) -> np.ndarray:
    """Uniform [0, 1) draws, one per (key, position): splitmix64 of the combined counter."""
    with np.errstate(over="ignore"):
        x = (np.uint64(seed & 0xFFFFFFFF) * _M3 + np.asarray(key, np.uint64)[:, None] * np.uint64(0x632BE59BD9B4E019)
             + np.asarray(positions, np.uint64)[None, :] * _M1 + np.uint64(stream) * _M2)
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


class MaskedBatch(NamedTuple):
    """A batch ready for the model. Shapes: ids (B, T); mlm_positions / mlm_labels (B, P): the masked
    positions of each row (padded with 0 / IGNORE), pair_labels (B,) with IGNORE where no pair loss
    applies. ``unpadded`` (host bool): every row is full length, so attention needs no mask.

    Packed sentence pairs (input format sentence_pairs) add ``blocks`` (B, T): each position's pair in its
    row, -1 for padding (a position attends to its own pair only), ``position_ids`` (B, T) from 0 in each
    pair, and ``pair_positions`` (B, Q): each pair's [CLS], whose label is ``pair_labels`` (B, Q)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    mlm_positions: torch.Tensor
    mlm_labels: torch.Tensor
    pair_labels: torch.Tensor
    unpadded: bool = False
    blocks: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    pair_positions: torch.Tensor | None = None

    def _map(self, f) -> "MaskedBatch":
        return MaskedBatch(*(f(t) if isinstance(t, torch.Tensor) else t for t in self))  # unpadded, absent ones as is

    def to(self, device, non_blocking: bool = True) -> "MaskedBatch":
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def rows(self, index) -> "MaskedBatch":
        """The rows ``index`` (a slice or an index array) of this batch."""
        return self._map(lambda t: t[index])

    def pin_memory(self) -> "MaskedBatch":
        return self._map(lambda t: t.pin_memory())

    @property
    def n_tokens(self) -> int:
        """Real tokens (host count; the attention mask is built on the host)."""
        return int(self.attention_mask.sum())


def _top_k_tokens(maskable: np.ndarray, k: np.ndarray, scores: np.ndarray, word_start: np.ndarray) -> np.ndarray:
    """(B, T) bool: per row the k maskable positions with the highest scores."""
    scores = np.where(maskable, scores, -1.0)
    ranks = np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1, kind="stable")
    return (ranks < k[:, None]) & maskable


def _whole_words(maskable: np.ndarray, k: np.ndarray, scores: np.ndarray, word_start: np.ndarray) -> np.ndarray:
    """(B, T) bool: whole words in score order, each taken if it still fits in the row's k tokens
    (BERT's whole-word masking: a word that would overshoot is skipped)."""
    B, T = maskable.shape
    starts = word_start & maskable
    word = np.cumsum(starts, axis=1) - 1  # word number of each position (-1 before the first word)
    word = np.where(maskable & (word >= 0), word, T)  # T: no maskable word
    length = np.zeros((B, T + 1), np.int64)
    np.add.at(length, (np.repeat(np.arange(B), T), word.ravel()), 1)
    length[:, T] = 0
    wscore = np.full((B, T + 1), -1.0)
    rows, cols = np.nonzero(starts)
    wscore[rows, word[rows, cols]] = scores[rows, cols]
    order = np.argsort(-wscore, axis=1, kind="stable")
    budget, chosen, r = k.copy(), np.zeros((B, T + 1), bool), np.arange(B)
    for j in range(int(starts.sum(axis=1).max()) if B else 0):
        w = order[:, j]
        fits = (wscore[r, w] >= 0) & (length[r, w] <= budget)
        chosen[r, w] |= fits
        budget -= np.where(fits, length[r, w], 0)
    chosen[:, T] = False
    return chosen[r[:, None], word] & maskable


MASKING: dict[str, Callable[..., np.ndarray]] = {"token": _top_k_tokens, "whole_word": _whole_words}


def build_masking(name: str) -> Callable[..., np.ndarray]:
    if name not in MASKING:
        raise ValueError(f"masking {name!r} is not valid; allowed: {', '.join(MASKING)}")
    return MASKING[name]


def mask_counts(ids: np.ndarray, attention: np.ndarray, first_regular: int, ratio: float,
                uncounted: np.ndarray | None = None) -> np.ndarray:
    """(B,) the tokens each row masks: ``max(1, round(ratio * n))`` of its ``n`` maskable tokens, less the
    ``uncounted`` of each row (tokens it may mask but that do not raise its count: single's next token)."""
    maskable = ((ids >= first_regular) & (attention > 0)).sum(axis=1)
    n = maskable - (uncounted if uncounted is not None else 0)
    return np.minimum(np.maximum(np.round(n * ratio).astype(np.int64), 1), maskable)


def mask_arrays(ids: np.ndarray, attention: np.ndarray, *, first_regular: int, vocab_size: int, mask_id: int,
                ratio: float, seed: int, keys: np.ndarray, mask_token_frac: float = 0.8,
                random_token_frac: float = 0.1, strategy: str = "token",
                continuation: np.ndarray | None = None, uncounted: np.ndarray | None = None,
                stream: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(masked ids, positions (B, P), labels (B, P)) for ids (B, T); row b's draws are keyed on keys[b] and
    the mask ``stream`` (0: the seed's own masks)."""
    B, T = ids.shape
    pos = np.arange(T)
    maskable = (ids >= first_regular) & (attention > 0)
    k = mask_counts(ids, attention, first_regular, ratio, uncounted)
    word_start = ~continuation[ids] if continuation is not None else np.ones_like(maskable)
    base = int(stream) * STREAM_STRIDE
    chosen = build_masking(strategy)(maskable, k, hash_uniform(seed, keys, pos, base), word_start)
    action = hash_uniform(seed, keys, pos, base + 1)
    rand_ids = first_regular + np.floor(hash_uniform(seed, keys, pos, base + 2)
                                        * (vocab_size - first_regular)).astype(ids.dtype)
    masked = np.where(chosen & (action < mask_token_frac), mask_id, ids)
    to_random = chosen & (action >= mask_token_frac) & (action < mask_token_frac + random_token_frac)
    masked = np.where(to_random, rand_ids, masked)
    count = chosen.sum(axis=1)
    P = max(int(count.max()) if B else 0, 1)
    first = np.argsort(~chosen, axis=1, kind="stable")[:, :P]  # chosen positions first, in order
    valid = np.arange(P)[None, :] < count[:, None]
    labels = np.where(valid, np.take_along_axis(ids, first, axis=1), IGNORE)
    return masked, np.where(valid, first, 0), labels


__all__ = ["IGNORE", "MASKING", "STREAM_STRIDE", "MaskedBatch", "build_masking", "hash_uniform", "mask_arrays",
           "mask_counts"]
