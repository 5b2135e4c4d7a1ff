"""Samples of one (pretraining seed, epoch) as index arrays: chunks, their pairs, the batch order.

As Megatron's BERT dataset builds its samples mapping, every sample is decided from the prepared
corpus's offsets, never by materialising examples, and BEFORE any objective looks at it:

    chunks   one row per chunk (``CHUNK``): its document; segment A [a0, a1) and B [b0, b1) as global
             token offsets (BERT's create_instances_from_document: consecutive sentences up to a
             target length, a random split point, the longer segment trimmed at random ends to fit);
             NSP's label and random B' [r0, r1) of B's length from another document, placed as B is
             relative to sentence boundaries (``random_spans``); SOP's swap label
    order    the epoch's batches of chunk indices (n_batches, batch_size), length-bucketed on the
             chunk's length, which no objective changes

So every variant of one seed reads the same chunks in the same batches at every step; the input
format only decides how a chunk is laid out (``trainables.data.batches``). All randomness comes from
generators keyed on (data seed, epoch, stream); results are cached beside the prepared corpus.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from trainables.batching import bucket_batches
from trainables.data.shards import PreparedCorpus
from trainables.data.text import CorpusError

log = logging.getLogger(__name__)

IGNORE = -100  # label of positions and pairs that carry no loss
CHUNK = np.dtype([("doc", np.int64), ("a0", np.int64), ("a1", np.int64), ("b0", np.int64), ("b1", np.int64),
                  ("nsp", np.int8), ("r0", np.int64), ("r1", np.int64), ("sop", np.int8)])
SAMPLES_VERSION = 3  # the cache's: 2: NSP's random segments have B's length; 3: and are placed as B is (random_spans)
STREAMS = 2  # seeds the generators (the version the draws were made at): the chunks, labels and order of 2 hold
# RoBERTa's SENTENCE-PAIR: a chunk's content split at its sentence starts into pieces, consecutive pieces
# paired (an odd last piece stands alone, no pair loss); the second piece replaced half of the time by a
# segment of its length from another document (NSP). ``chunk``: the chunk's index in its epoch's chunks.
SENTENCE_PAIR = np.dtype([("chunk", np.int64), ("a0", np.int64), ("a1", np.int64), ("b0", np.int64),
                          ("b1", np.int64), ("nsp", np.int8), ("r0", np.int64), ("r1", np.int64)])


def _rng(seed: int, epoch: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, stream, STREAMS])


def _pick(rng: np.random.Generator, upper: np.ndarray) -> np.ndarray:
    """An integer in [1, upper) per row (upper >= 2), one uniform draw per row."""
    return 1 + np.floor(rng.random(len(upper)) * (upper - 1)).astype(np.int64)


def _trim(a_len: np.ndarray, b_len: np.ndarray, max_tokens: int, rng: np.random.Generator):
    """BERT's truncate_seq_pair in closed form: the longer segment loses a token until they fit (ties:
    B), each token from the front or the back at random; returns tokens cut from the front and back
    of A and of B. The number cut from the front is Binomial(cut, 1/2), as for per-token coin flips."""
    excess = np.maximum(a_len + b_len - max_tokens, 0)
    d = a_len - b_len
    first = np.minimum(excess, np.abs(d))
    rest = excess - first
    cut_a = np.where(d > 0, first, 0) + rest // 2
    cut_b = np.where(d < 0, first, 0) + rest - rest // 2
    front_a, front_b = rng.binomial(cut_a, 0.5), rng.binomial(cut_b, 0.5)
    return front_a, cut_a - front_a, front_b, cut_b - front_b


def build_chunks(corpus: PreparedCorpus, docs: np.ndarray, seq_len: int, short_seq_prob: float,
                 rng: np.random.Generator) -> np.ndarray:
    """Chunks of consecutive sentences of ``docs`` (vectorised over documents, one round per chunk)."""
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]
    offsets = corpus.sentences
    s0, s1 = corpus.doc_sentences(docs)
    cur, active = s0.copy(), np.arange(len(docs))
    parts = []
    while active.size:
        n = active.size
        target = np.where(rng.random(n) < short_seq_prob, rng.integers(2, max_tokens + 1, n), max_tokens)
        start = np.asarray(offsets[cur[active]])
        k = np.searchsorted(offsets, start + target, side="left")  # first sentence start >= start + target
        k = np.clip(k, cur[active] + 1, s1[active])
        parts.append(np.stack([active, cur[active], k]))
        cur[active] = k
        active = active[cur[active] < s1[active]]
    idx, first, end = np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)
    order = np.lexsort((first, idx))  # chunks in document order, then position
    idx, first, end = idx[order], first[order], end[order]
    n_sent = end - first
    tok0, tok1 = np.asarray(offsets[first]), np.asarray(offsets[end])
    multi = n_sent >= 2
    cut_sent = first + _pick(rng, np.where(multi, n_sent, 2))
    one_len = tok1 - tok0
    cut_tok = np.where(one_len >= 2, tok0 + _pick(rng, np.maximum(one_len, 2)), tok1)
    mid = np.where(multi, np.asarray(offsets[np.minimum(cut_sent, len(offsets) - 1)]), cut_tok)
    fa, ba, fb, bb = _trim(mid - tok0, tok1 - mid, max_tokens, rng)
    out = np.zeros(len(idx), CHUNK)
    out["doc"] = docs[idx]
    out["a0"], out["a1"], out["b0"], out["b1"] = tok0 + fa, mid - ba, mid + fb, tok1 - bb
    return out


def _starts_by_room(corpus: PreparedCorpus, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(room, sentence, document) of every sentence start of ``docs``, sorted by room: the tokens from that
    start to its document's end. The starts with room for n tokens are then a suffix, ``searchsorted(room, n)``."""
    s0, s1 = corpus.doc_sentences(docs)
    counts = s1 - s0
    sent = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(s0, counts)
    doc_of = np.repeat(docs, counts)
    room = np.asarray(corpus.sentences[np.repeat(s1, counts)]) - np.asarray(corpus.sentences[sent])
    order = np.argsort(room, kind="stable")
    return room[order], sent[order], doc_of[order]


def _draw_starts(by_room, own: np.ndarray, need: np.ndarray, rng: np.random.Generator, accept=None,
                 rounds: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Per row, a sentence start (index into ``by_room``) of a document other than ``own`` with room for
    ``need`` tokens, uniform over those that ``accept(rows, picks)`` takes (default: all): each round redraws
    the rows not yet accepted. Returns (picks, found); rows found by no round keep their last draw."""
    room = by_room[0]
    first = np.minimum(np.searchsorted(room, need, side="left"), len(room) - 1)  # eligible: [first, n)
    pick, found = np.zeros(len(need), np.int64), np.zeros(len(need), bool)
    todo = np.arange(len(need))
    for _ in range(rounds):
        if not todo.size:
            break
        j = first[todo] + np.floor(rng.random(len(todo)) * (len(room) - first[todo])).astype(np.int64)
        pick[todo] = j
        ok = by_room[2][j] != own[todo]
        if accept is not None:
            ok &= accept(todo, j)
        found[todo[ok]] = True
        todo = todo[~ok]
    return pick, found


def random_segments(corpus: PreparedCorpus, docs: np.ndarray, own: np.ndarray, length: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """Random segments starting at a sentence start: per row, a start token at a sentence start of another of
    ``docs`` with at least ``length`` tokens left in that document, drawn uniformly over the sentence starts
    that have room. (NSP's B' where no run of sentences can place it as B is placed: ``random_spans``.)
    A row longer than every document's room (none in practice) gets the longest room, truncated."""
    by_room = _starts_by_room(corpus, docs)
    pick, found = _draw_starts(by_room, own, length, rng)
    if not found.all():
        raise CorpusError(f"no other document has room for a random segment of {int(length[~found][0])} tokens")
    return np.asarray(corpus.sentences[by_room[1][pick]])


def boundary_offsets(offsets: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(head, tail) of spans [start, end): tokens from the sentence start at or before ``start`` to it, and
    from ``end`` to the first sentence boundary at or after it (0, 0: a run of whole sentences)."""
    before = offsets[np.maximum(np.searchsorted(offsets, start, side="right") - 1, 0)]
    after = offsets[np.minimum(np.searchsorted(offsets, end, side="left"), len(offsets) - 1)]
    return start - before, after - end


def random_spans(corpus: PreparedCorpus, docs: np.ndarray, own: np.ndarray, start: np.ndarray, end: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of NSP's random spans B' for the spans B = [start, end) of documents ``own``: from another
    of ``docs``, exactly B's length, and placed as B is relative to sentence boundaries.

    B's length: a row's length says nothing of its label (cut at the other document's end, negatives would
    be shorter, and lengths alone would predict NSP), and NSP batches are as often unpadded as SOP's.
    Placed as B: B is cut from a run of whole sentences, ``head`` tokens after its first sentence start and
    ``tail`` before its last boundary (``boundary_offsets``; trimming and split points often put B
    mid-sentence). B' is cut at the same head and tail from a run of whole sentences of another
    document exactly as long (head + B + tail), drawn uniformly over the runs whose first sentence is longer
    than head and last longer than tail. So B' starts at a sentence start exactly when B does, ends at a
    boundary exactly when B does, and opens with a ``##`` piece as often as a cut at that offset does: a B'
    that always opened a sentence (and so seldom ended at one) would let a logistic regression on those three
    features read the labels (tests/data/test_nsp_negatives.py checks that it cannot). A row no run can
    place (no other document has a run of its length with room for its head and tail: a few rows of the
    built-in corpus, most rows of a tiny corpus) starts at a sentence start (``random_segments``)."""
    if not len(start):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets = np.asarray(corpus.sentences)
    length = np.maximum(end - start, 1)
    head, tail = boundary_offsets(offsets, start, start + length)
    run = head + length + tail
    by_room = _starts_by_room(corpus, docs)
    sent = by_room[1]

    def placed_as_b(rows: np.ndarray, j: np.ndarray) -> np.ndarray:
        s0 = offsets[sent[j]]
        e = s0 + run[rows]
        inside = by_room[0][j] >= run[rows]  # the run ends in the start's document
        k = np.searchsorted(offsets, e, side="left")
        at_boundary = offsets[np.minimum(k, len(offsets) - 1)] == e
        first_longer = (head[rows] == 0) | (offsets[sent[j] + 1] - s0 > head[rows])
        last_longer = (tail[rows] == 0) | (e - offsets[np.maximum(k - 1, 0)] > tail[rows])
        return inside & at_boundary & first_longer & last_longer

    pick, found = _draw_starts(by_room, own, run, rng, placed_as_b, rounds=1024)  # few draws pass: many rounds
    r0 = offsets[sent[pick]] + head
    if not found.all():
        log.debug("NSP: %d of %d random spans not placed as B (no run of their length): at a sentence start",
                  int((~found).sum()), len(found))
        r0[~found] = random_segments(corpus, docs, own[~found], length[~found], rng)
    doc_end = offsets[corpus.doc_sentences(docs)[1]]  # the other document's end bounds it
    return r0, np.minimum(r0 + length, doc_end[np.searchsorted(doc_end, r0, side="right")])


def add_pairs(corpus: PreparedCorpus, chunks: np.ndarray, docs: np.ndarray, nsp_rng: np.random.Generator,
              sop_rng: np.random.Generator) -> np.ndarray:
    """NSP: B replaced half of the time by a segment of exactly B's length from another document, placed as
    B is relative to sentence boundaries (``random_spans``); SOP: A and B swapped half of the time. A chunk
    with an empty segment has no pair to judge (label IGNORE, and no B')."""
    n = len(chunks)
    replaced = nsp_rng.random(n) < 0.5
    empty = (chunks["a1"] <= chunks["a0"]) | (chunks["b1"] <= chunks["b0"])
    todo = np.flatnonzero(replaced & ~empty)
    chunks["nsp"] = np.where(empty, IGNORE, replaced)
    chunks["r0"], chunks["r1"] = chunks["b0"], chunks["b1"]
    chunks["r0"][todo], chunks["r1"][todo] = random_spans(corpus, docs, chunks["doc"][todo], chunks["b0"][todo],
                                                          chunks["b1"][todo], nsp_rng)
    chunks["sop"] = np.where(empty, IGNORE, sop_rng.random(n) < 0.5)
    return chunks


def _pieces(offsets: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner, piece start, piece end) of the spans [start, end) cut at every sentence start inside them,
    in span order then position (an empty span has no piece)."""
    k0 = np.searchsorted(offsets, start, side="right")
    k1 = np.searchsorted(offsets, end, side="left")
    inner = np.where(end > start, np.maximum(k1 - k0, 0), 0)  # sentence starts strictly inside each span
    n = np.where(end > start, inner + 1, 0)
    owner = np.repeat(np.arange(len(start)), n)
    j = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # piece number within its span
    cut = lambda i: np.where(i == 0, start[owner], offsets[np.minimum(k0[owner] + i - 1, len(offsets) - 1)])  # noqa: E731
    p0 = cut(j)
    p1 = np.where(j == n[owner] - 1, end[owner], offsets[np.minimum(k0[owner] + j, len(offsets) - 1)])
    return owner, p0, p1


def sentence_pairs(corpus: PreparedCorpus, chunks: np.ndarray, docs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RoBERTa's SENTENCE-PAIR samples of an epoch's chunks (``SENTENCE_PAIR`` rows, sorted by chunk): each
    chunk's A and B cut at their sentence starts into pieces, in order; pieces 2j and 2j + 1 form pair j
    (an odd last piece stands alone: no pair loss); NSP replaces the second piece, half of the time, by a
    segment of exactly its length from another document (``random_spans``, as add_pairs' B'). So a chunk's pairs hold
    exactly its content tokens, or as many, and every format of a seed reads the same chunks."""
    offsets = np.asarray(corpus.sentences)
    n = len(chunks)
    ends = np.concatenate([chunks["a0"], chunks["b0"]]), np.concatenate([chunks["a1"], chunks["b1"]])
    owner, p0, p1 = _pieces(offsets, *ends)
    chunk = owner % n if n else owner
    order = np.lexsort((owner, chunk))  # per chunk: A's pieces, then B's (owner < n is A)
    chunk, p0, p1 = chunk[order], p0[order], p1[order]
    count = np.bincount(chunk, minlength=n)
    j = np.arange(len(chunk)) - np.repeat(np.cumsum(count) - count, count)  # piece number within its chunk
    first = j % 2 == 0
    alone = first & (j == np.repeat(count, count) - 1)
    pairs = np.zeros(int(first.sum()), SENTENCE_PAIR)
    pairs["chunk"], pairs["a0"], pairs["a1"] = chunk[first], p0[first], p1[first]
    second = np.flatnonzero(first & ~alone) + 1
    paired = ~alone[first]
    pairs["b0"], pairs["b1"] = pairs["a1"], pairs["a1"]
    pairs["b0"][paired], pairs["b1"][paired] = p0[second], p1[second]
    replaced = (rng.random(len(pairs)) < 0.5) & paired
    todo = np.flatnonzero(replaced)
    r0, r1 = random_spans(corpus, docs, chunks["doc"][pairs["chunk"][todo]], pairs["b0"][todo], pairs["b1"][todo], rng)
    pairs["r0"], pairs["r1"] = pairs["b0"], pairs["b1"]
    pairs["r0"][todo], pairs["r1"][todo] = r0, r1
    pairs["nsp"] = np.where(paired, replaced, IGNORE)
    return pairs


def chunk_lengths(chunks: np.ndarray) -> np.ndarray:
    """Tokens of A and B: what the batch order buckets on, the same for every input format."""
    return (chunks["a1"] - chunks["a0"]) + (chunks["b1"] - chunks["b0"])


def _key(corpus: PreparedCorpus, **params) -> str:
    blob = json.dumps({"fingerprint": corpus.fingerprint, "version": SAMPLES_VERSION, **params}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cached(path: Path, compute) -> np.ndarray:
    """``compute()`` saved as .npy under ``path`` (atomic); later calls memory-map it."""
    if path.exists():
        return np.load(path, mmap_mode="r")
    arr = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


class Samples:
    """The samples of one data seed: chunks and batch order per epoch, computed once and cached.

    ``static``: the original BERT's fixed data: epoch 0's chunks and pairs (and masks, keyed on the
    chunk) for every epoch; the batch order is still drawn per epoch."""

    def __init__(self, corpus: PreparedCorpus, *, seq_len: int, short_seq_prob: float, batch_size: int,
                 data_seed: int, static: bool = False, docs: np.ndarray | None = None, cache: bool = True):
        self.corpus, self.seq_len, self.short_seq_prob = corpus, seq_len, short_seq_prob
        self.batch_size, self.data_seed, self.static = batch_size, data_seed, static
        self.docs = corpus.train_docs if docs is None else docs
        if len(self.docs) < 2:
            raise CorpusError(f"{len(self.docs)} training document(s) with two or more sentences; pairs need "
                              "at least 2")
        self.cache = corpus.path / "samples" if cache else None
        self._memo: dict = {}

    def chunks(self, epoch: int) -> np.ndarray:
        e = 0 if self.static else epoch
        if ("chunks", e) not in self._memo:
            def compute():
                c = build_chunks(self.corpus, self.docs, self.seq_len, self.short_seq_prob, _rng(self.data_seed, e, 0))
                return add_pairs(self.corpus, c, self.docs, _rng(self.data_seed, e, 1), _rng(self.data_seed, e, 2))
            key = _key(self.corpus, kind="chunks", seq_len=self.seq_len, ssp=self.short_seq_prob, seed=self.data_seed,
                       epoch=e, docs=hashlib.sha256(np.asarray(self.docs).tobytes()).hexdigest())
            self._memo[("chunks", e)] = _cached(self.cache / f"{key}.npy", compute) if self.cache else compute()
        return self._memo[("chunks", e)]

    def order(self, epoch: int) -> np.ndarray:
        if ("order", epoch) not in self._memo:
            def compute():
                batches = bucket_batches(chunk_lengths(self.chunks(epoch)), self.batch_size,
                                         _rng(self.data_seed, epoch, 3), drop_last=True)
                if not batches:
                    raise CorpusError(f"the corpus yields {len(self.chunks(epoch))} chunks, fewer than one batch "
                                      f"of {self.batch_size}; use a larger corpus or a smaller optim.batch_size")
                return np.stack(batches).astype(np.int64)
            key = _key(self.corpus, kind="order", seq_len=self.seq_len, ssp=self.short_seq_prob, seed=self.data_seed,
                       epoch=epoch, static=self.static, batch=self.batch_size,
                       docs=hashlib.sha256(np.asarray(self.docs).tobytes()).hexdigest())
            self._memo[("order", epoch)] = _cached(self.cache / f"{key}.npy", compute) if self.cache else compute()
        return self._memo[("order", epoch)]

    def sentence_pairs(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(pairs, first) of an epoch's chunks for RoBERTa's SENTENCE-PAIR (``sentence_pairs``): chunk i's
        pairs are ``pairs[first[i]:first[i + 1]]``. Drawn from their own stream: the chunks, their NSP and
        SOP draws and the batch order are those of every other format."""
        e = 0 if self.static else epoch
        if ("pairs", e) not in self._memo:
            def compute():
                return sentence_pairs(self.corpus, self.chunks(e), self.docs, _rng(self.data_seed, e, 4))
            key = _key(self.corpus, kind="sentence_pairs", seq_len=self.seq_len, ssp=self.short_seq_prob,
                       seed=self.data_seed, epoch=e, docs=hashlib.sha256(np.asarray(self.docs).tobytes()).hexdigest())
            pairs = _cached(self.cache / f"{key}.npy", compute) if self.cache else compute()
            first = np.searchsorted(pairs["chunk"], np.arange(len(self.chunks(e)) + 1), side="left")
            self._memo[("pairs", e)] = (pairs, first)
        return self._memo[("pairs", e)]

    def batch_pairs(self, epoch: int, idx: np.ndarray) -> list[np.ndarray]:
        """The sentence pairs of the chunks ``idx`` of ``epoch``, one array per chunk."""
        pairs, first = self.sentence_pairs(epoch)
        return [np.asarray(pairs[first[i]:first[i + 1]]) for i in np.asarray(idx)]

    def batches_in_epoch(self, epoch: int) -> int:
        return len(self.order(epoch))

    def batch_chunks(self, epoch: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk indices, chunk rows) of batch ``i`` of ``epoch``."""
        idx = np.asarray(self.order(epoch)[i])
        return idx, np.asarray(self.chunks(epoch)[idx])
