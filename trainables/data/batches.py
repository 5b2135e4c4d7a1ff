"""Batches from samples: the layout of each input format, masking, and the loader that runs ahead.

    single          [CLS] A B+ [SEP]           one chunk per row, token types 0 (RoBERTa's DOC-SENTENCES); B+ is
                                               B and the document's next token, in the place the pair formats
                                               give their middle [SEP]; where the chunk ends its document, an
                                               attended [SEP] (the filler, never masked) takes that place
    nsp_pairs       [CLS] A [SEP] B' [SEP]     B' is NSP's random segment for label-1 chunks (SEGMENT-PAIR)
    sop_pairs       [CLS] A [SEP] B [SEP]      A and B swapped for label-1 chunks
    full_sentences  [CLS] ...stream... [SEP]   RoBERTa's FULL-SENTENCES: the step's chunks (A B each) in batch
                                               order, a [SEP] between consecutive chunks, cut into the step's
                                               rows of seq_len - 2 stream tokens: every row but the stream's
                                               last is full (it reaches position seq_len - 1) and crosses a
                                               document boundary; rows past the stream's end are [CLS] [SEP]

Every variant of one seed reads the same chunks in the same batches (``trainables.data.samples``); a
format only lays them out. The rule, per step of B chunks with C content tokens (A and B): nsp_pairs
and sop_pairs hold C + 3B real tokens (NSP's B' has B's length), and so does single (the filler counts:
every single row is as long as the pair rows of its chunk, so its batches are unpadded, and take the fused
attention path, exactly where the pair formats' are); full_sentences C + (B - 1) + 2B (the separators, and
each row's [CLS] and [SEP]). sop_pairs and full_sentences hold exactly the same
content tokens (the same (document, offset) multiset), single those and each chunk's next token;
nsp_pairs the same A tokens and, for label-1 chunks, as many tokens of another document in place of B.
Every one-chunk-per-row format masks the same number of positions per row, ``max(1, round(ratio * n))``
of the chunk's n content tokens (single draws them among its n + 1), so the formats differ in layout,
not in how much they see or predict, and every format reaches the last position (seq_len - 1) with a
real token: a full single row is [CLS], seq_len - 2 tokens of one document, [SEP], as in RoBERTa.
``StepData`` turns a training position into its masked global batch (a pure
function of the position, so a resumed run and any number of workers see the same); ``Loader`` builds
the batches of the coming steps in a background thread (or DataLoader worker processes), pinned for a
non-blocking copy on CUDA, so a step never waits on the CPU.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, NamedTuple

import numpy as np
import torch

from trainables.data.masking import MaskedBatch, mask_arrays, mask_counts
from trainables.data.samples import IGNORE, Samples, chunk_lengths
from trainables.data.shards import PreparedCorpus
from trainables.flops import StepShape

INPUT_FORMATS = ("single", "nsp_pairs", "sop_pairs", "full_sentences", "sentence_pairs")
ROW_PER_CHUNK = ("single", "nsp_pairs", "sop_pairs", "sentence_pairs")  # one chunk per row (static masks key on it)
STATIC_KEY = 1 << 40  # static masks key on the chunk: a key space apart from (step, row)


class SpecialIds(NamedTuple):
    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int
    first_regular: int  # ids below this are special tokens; random replacements start here


def special_ids(tokenizer) -> SpecialIds:
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")]
    specials = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens]
    return SpecialIds(*ids, vocab_size=len(tokenizer), first_regular=max(specials) + 1)


def continuation_table(tokenizer) -> np.ndarray:
    """(V,) bool: the ids of ``##`` continuation pieces (whole-word masking keeps words together)."""
    table = np.zeros(len(tokenizer), bool)
    for token, i in tokenizer.get_vocab().items():
        if token.startswith("##") and i < len(table):
            table[i] = True
    return table


class PretrainBatch(NamedTuple):
    """One laid-out batch before masking (host arrays). Shapes: (B, T) and (B,)."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    pair_labels: np.ndarray
    chunk_index: np.ndarray  # the chunks in their epoch's chunk array (static masks key on it)
    doc: np.ndarray  # each row's document (the control tests compare these across variants)
    uncounted: np.ndarray  # content tokens a row holds beyond its chunk (single's next token): not in its mask count
    # sentence_pairs only (None otherwise): each position's pair in its row (-1: padding), its position in
    # its pair, and where each pair's [CLS] is (B, Q); pair_labels is then (B, Q), one label per pair
    blocks: np.ndarray | None = None
    position_ids: np.ndarray | None = None
    pair_positions: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> "PretrainBatch":
        return PretrainBatch(*(None if a is None else a[rows] for a in self))


def check_format(fmt: str) -> None:
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"input format {fmt!r} is not valid; allowed: {', '.join(INPUT_FORMATS)}")


def full_sentence_rows(lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(stream tokens, separators) of each of the B rows of full_sentences for chunks of ``lengths`` content
    tokens: the stream (the chunks in order, a [SEP] between consecutive ones) cut into rows of seq_len - 2.
    It always fits: a chunk has at most seq_len - 3 content tokens, so C + B - 1 <= B (seq_len - 2) - 1."""
    lengths = np.asarray(lengths, np.int64)
    B, width = len(lengths), seq_len - 2
    total = int(lengths.sum()) + max(B - 1, 0)
    tokens = np.clip(total - np.arange(B) * width, 0, width)
    seps = np.bincount((np.cumsum(lengths + 1)[:-1] - 1) // width, minlength=B)[:B]
    return tokens, seps


def full_sentence_counts(lengths: np.ndarray, seq_len: int, ratio: float | None) -> tuple[int, int, np.ndarray]:
    """(real tokens, padded length, masked tokens per row) of a full_sentences step whose chunks have
    ``lengths`` content tokens, as ``layout`` and ``mask_counts`` make them (the budget plans with it)."""
    tokens, seps = full_sentence_rows(lengths, seq_len)
    content = tokens - seps
    masked = np.minimum(np.maximum(np.round(content * ratio).astype(np.int64), 1), content) if ratio else \
        np.zeros(len(content), np.int64)
    return int(tokens.sum()) + 2 * len(tokens), int(tokens.max()) + 2, masked


def _full_sentences(corpus: PreparedCorpus, rows: np.ndarray, sp: SpecialIds, seq_len: int):
    """(ids, attention, sources, first chunk of each row) of full_sentences; sources: each position's global
    token offset in the corpus, -1 for special tokens and padding."""
    ids_parts, src_parts, owner = [], [], []
    for i, c in enumerate(rows):
        if i:
            ids_parts.append(np.array([sp.sep], np.int64))
            src_parts.append(np.array([-1], np.int64))
            owner.append(np.array([-1], np.int64))
        for s0, s1 in ((int(c["a0"]), int(c["a1"])), (int(c["b0"]), int(c["b1"]))):
            ids_parts.append(np.asarray(corpus.span(s0, s1), np.int64))
            src_parts.append(np.arange(s0, s1, dtype=np.int64))
            owner.append(np.full(s1 - s0, i, np.int64))
    stream, sources, chunk_of = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (ids_parts, src_parts, owner))
    B, width = len(rows), seq_len - 2
    if len(stream) > B * width:  # cannot happen for chunks of at most seq_len - 3 tokens
        raise ValueError(f"full_sentences: {len(stream)} stream tokens do not fit {B} rows of {seq_len}")
    n = np.clip(len(stream) - np.arange(B) * width, 0, width)
    T = int(n.max()) + 2 if B else 2
    ids = np.full((B, T), sp.pad, np.int64)
    src = np.full((B, T), -1, np.int64)
    first = np.full(B, -1, np.int64)
    ids[:, 0] = sp.cls
    for r in range(B):
        piece = slice(r * width, r * width + int(n[r]))
        ids[r, 1:1 + n[r]], src[r, 1:1 + n[r]] = stream[piece], sources[piece]
        ids[r, 1 + n[r]] = sp.sep
        owners = chunk_of[piece][chunk_of[piece] >= 0]
        first[r] = owners[0] if len(owners) else -1
    attention = (np.arange(T)[None, :] < (n + 2)[:, None]).astype(np.int64)
    return ids, attention, src, first


def next_token(corpus: PreparedCorpus, rows: np.ndarray) -> np.ndarray:
    """(B,) 1 where a chunk's document has a token after the chunk's B (single appends it), else 0."""
    if not len(rows):
        return np.zeros(0, np.int64)
    end = np.asarray(corpus.sentences[corpus.doc_sentences(np.asarray(rows["doc"]))[1]])
    has_content = (rows["a1"] > rows["a0"]) | (rows["b1"] > rows["b0"])
    return ((rows["b1"] < end) & has_content).astype(np.int64)


def _spans(rows: np.ndarray, fmt: str, corpus: PreparedCorpus) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Per chunk, the global token ranges of its first and second segment in a one-chunk-per-row format:
    (A, B), (A, B') for NSP's label-1 chunks, (B, A) for SOP's, (A, B+) for single (B and the document's
    next token). ``layout`` reads them; ``layout_sources`` reports them."""
    out = []
    more = next_token(corpus, rows) if fmt == "single" else np.zeros(len(rows), np.int64)
    for c, m in zip(rows, more):
        a, b = (int(c["a0"]), int(c["a1"])), (int(c["b0"]), int(c["b1"]) + int(m))
        if fmt == "nsp_pairs" and c["nsp"] == 1:
            b = (int(c["r0"]), int(c["r1"]))
        elif fmt == "sop_pairs" and c["sop"] == 1:
            a, b = b, a
        out.append((a, b))
    return out


def _appended(rows: np.ndarray, spans: list, fmt: str) -> np.ndarray:
    """(B,) 1 where ``_spans`` gave a single row's B its document's next token, else 0 (there single
    lays out an attended [SEP] in its place: the filler, never masked, so every row is A + B + 3 long)."""
    if fmt != "single":
        return np.zeros(len(rows), np.int64)
    return np.array([b[1] for _, b in spans], np.int64) - rows["b1"].astype(np.int64)


def _pair_segments(pairs: list[np.ndarray]) -> list[list[tuple[tuple[int, int], tuple[int, int], int]]]:
    """Per row, its sentence pairs as (first piece, second piece or B', NSP label) token ranges."""
    return [[((int(q["a0"]), int(q["a1"])), (int(q["r0"]), int(q["r1"])), int(q["nsp"])) for q in row]
            for row in pairs]


def _sentence_pairs(corpus: PreparedCorpus, rows: np.ndarray, sp: SpecialIds, chunk_index: np.ndarray,
                    pairs: list[np.ndarray]) -> tuple[PretrainBatch, np.ndarray]:
    """RoBERTa's SENTENCE-PAIR, packed: one row per chunk holding its sentence pairs one after the other,
    [CLS] s [SEP] s' [SEP] each ([CLS] s [SEP] for an odd last piece), each pair attending only to itself
    (``blocks``), its positions from 0 and its own token types, its NSP label read at its [CLS]. So a step
    reads the same chunks' tokens as every format, in as many rows; returns the batch and its sources."""
    segs = _pair_segments(pairs)
    lengths = [sum(2 + (a[1] - a[0]) + ((b[1] - b[0]) + 1 if b[1] > b[0] else 0) for a, b, _ in row) for row in segs]
    B, T, Q = len(rows), max(lengths, default=2), max((len(r) for r in segs), default=1)
    ids = np.full((B, T), sp.pad, np.int64)
    types, src = np.zeros_like(ids), np.full((B, T), -1, np.int64)
    blocks, positions = np.full((B, T), -1, np.int64), np.zeros((B, T), np.int64)
    cls_at, labels = np.zeros((B, max(Q, 1)), np.int64), np.full((B, max(Q, 1)), IGNORE, np.int64)
    for i, row in enumerate(segs):
        n = 0
        for q, (a, b, label) in enumerate(row):
            start = n
            cls_at[i, q], labels[i, q] = n, label
            ids[i, n], n = sp.cls, n + 1
            ids[i, n:n + a[1] - a[0]], src[i, n:n + a[1] - a[0]] = corpus.span(*a), np.arange(*a)
            n += a[1] - a[0]
            ids[i, n], n = sp.sep, n + 1
            if b[1] > b[0]:
                ids[i, n:n + b[1] - b[0]], src[i, n:n + b[1] - b[0]] = corpus.span(*b), np.arange(*b)
                types[i, n:n + b[1] - b[0] + 1] = 1
                n += b[1] - b[0]
                ids[i, n], n = sp.sep, n + 1
            blocks[i, start:n], positions[i, start:n] = q, np.arange(n - start)
    attention = (blocks >= 0).astype(np.int64)
    batch = PretrainBatch(ids, types, attention, labels, np.asarray(chunk_index, np.int64), rows["doc"].copy(),
                          np.zeros(B, np.int64), blocks, positions, cls_at)
    return batch, src


def row_counts(corpus: PreparedCorpus, rows: np.ndarray, fmt: str,
               pairs: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(real tokens, content tokens the mask count is taken on) per row of a one-chunk-per-row format, as
    ``layout`` makes them, from the chunks alone (the budget plans with it)."""
    if fmt == "sentence_pairs":
        return sentence_pair_counts(pairs)
    content = chunk_lengths(rows)
    return content + 3, content  # single: [CLS], B+'s next token or filler, [SEP]


def sentence_pair_counts(pairs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(real tokens, content tokens) per row of sentence_pairs for the chunks' ``pairs``, as laid out."""
    content = np.array([int(((r["a1"] - r["a0"]) + (r["r1"] - r["r0"])).sum()) for r in pairs], np.int64)
    specials = np.array([int((2 + (r["r1"] > r["r0"])).sum()) for r in pairs], np.int64)
    return content + specials, content


def layout(corpus: PreparedCorpus, rows: np.ndarray, fmt: str, sp: SpecialIds, chunk_index: np.ndarray,
           seq_len: int | None = None, pairs: list[np.ndarray] | None = None) -> PretrainBatch:
    """Chunks -> padded model inputs of the input format ``fmt`` (``seq_len``: the row length full_sentences
    cuts its stream into; ``pairs``: sentence_pairs' pairs of each chunk, ``Samples.batch_pairs``)."""
    check_format(fmt)
    if fmt == "sentence_pairs":
        if pairs is None:
            raise ValueError("input format 'sentence_pairs' needs pairs: each chunk's sentence pairs (Samples.batch_pairs)")
        return _sentence_pairs(corpus, rows, sp, chunk_index, pairs)[0]
    if fmt == "full_sentences":
        if seq_len is None:
            raise ValueError("input format 'full_sentences' needs seq_len: the length its rows are cut to")
        ids, attention, _, first = _full_sentences(corpus, rows, sp, seq_len)
        chunk_index = np.asarray(chunk_index, np.int64)
        return PretrainBatch(ids, np.zeros_like(ids), attention, np.full(len(rows), IGNORE, np.int64),
                             np.where(first >= 0, chunk_index[np.maximum(first, 0)], -1),
                             np.where(first >= 0, rows["doc"][np.maximum(first, 0)], -1),
                             np.zeros(len(rows), np.int64))
    spans = _spans(rows, fmt, corpus)
    segments = [(corpus.span(*a), corpus.span(*b)) for a, b in spans]
    more = _appended(rows, spans, fmt)
    if fmt == "single":  # B+: B and the next token, or B and the filler where the chunk ends its document
        segments = [(a, b if m else np.append(b, sp.sep)) for (a, b), m in zip(segments, more)]
    extra = 2 if fmt == "single" else 3  # single: no middle [SEP] (its place holds B+'s last token)
    lengths = np.array([len(a) + len(b) + extra for a, b in segments])
    ids = np.full((len(rows), int(lengths.max())), sp.pad, np.int64)
    types = np.zeros_like(ids)
    for i, (a, b) in enumerate(segments):
        ids[i, 0], n = sp.cls, 1 + len(a)
        ids[i, 1:n] = a
        if fmt != "single":
            ids[i, n], n = sp.sep, n + 1
            types[i, n:n + len(b) + 1] = 1
        ids[i, n:n + len(b)] = b
        ids[i, n + len(b)] = sp.sep
    attention = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int64)
    labels = np.full(len(rows), IGNORE, np.int64) if fmt == "single" else \
        rows["nsp" if fmt == "nsp_pairs" else "sop"].astype(np.int64)
    uncounted = np.zeros(len(rows), np.int64)
    if fmt == "single":  # the next token (the row's last before [SEP]) is out of the mask count where maskable
        uncounted = more * (ids[np.arange(len(rows)), lengths - 2] >= sp.first_regular)
    return PretrainBatch(ids, types, attention, labels, np.asarray(chunk_index, np.int64), rows["doc"].copy(),
                         uncounted)


def layout_sources(corpus: PreparedCorpus, rows: np.ndarray, fmt: str, seq_len: int, sp: SpecialIds,
                   pairs: list[np.ndarray] | None = None) -> np.ndarray:
    """(B, T) the global corpus offset of the token at each position of ``layout``'s ids (-1: special or
    padding): what the controls' tests compare across formats, step by step."""
    check_format(fmt)
    if fmt == "sentence_pairs":
        return _sentence_pairs(corpus, rows, sp, np.zeros(len(rows), np.int64), pairs)[1]
    if fmt == "full_sentences":
        return _full_sentences(corpus, rows, sp, seq_len)[2]
    spans = _spans(rows, fmt, corpus)
    # a row is its segments + 3 long: single's B+ holds B's next token or the filler (source -1) in the [SEP]'s place
    T = max((a[1] - a[0]) + (b[1] - b[0]) - int(m) for (a, b), m in zip(spans, _appended(rows, spans, fmt))) + 3
    src = np.full((len(rows), T), -1, np.int64)
    for i, (a, b) in enumerate(spans):
        n = 1 + a[1] - a[0]
        src[i, 1:n] = np.arange(*a)
        n += 0 if fmt == "single" else 1
        src[i, n:n + b[1] - b[0]] = np.arange(*b)
    return src


def to_masked(batch: PretrainBatch, sp: SpecialIds, *, ratio: float | None, seed: int, keys: np.ndarray,
              mask_token_frac: float = 0.8, random_token_frac: float = 0.1, strategy: str = "token",
              continuation: np.ndarray | None = None, pad_to: tuple[int, int] | None = None,
              stream: int = 0) -> MaskedBatch:
    """Mask a laid-out batch (``ratio=None``: nothing masked) and hand it to torch.

    ``pad_to=(T, P)`` pads the sequence to T and the masked positions to P: one shape for every step
    (``model.compile``), so the compiled graph is not rebuilt for each batch's lengths."""
    ids = batch.input_ids
    if ratio is None:
        masked, positions, labels = ids, np.zeros((len(ids), 1), np.int64), np.full((len(ids), 1), IGNORE, np.int64)
    else:
        masked, positions, labels = mask_arrays(ids, batch.attention_mask, first_regular=sp.first_regular,
                                                vocab_size=sp.vocab_size, mask_id=sp.mask, ratio=ratio, seed=seed,
                                                keys=keys, mask_token_frac=mask_token_frac,
                                                random_token_frac=random_token_frac, strategy=strategy,
                                                continuation=continuation, uncounted=batch.uncounted,
                                                stream=stream)
    types, attention = batch.token_type_ids, batch.attention_mask
    if pad_to is not None:
        T, P = pad_to
        grow = lambda a, width, fill: np.pad(a, ((0, 0), (0, max(width - a.shape[1], 0))), constant_values=fill)  # noqa: E731
        masked, types, attention = grow(masked, T, sp.pad), grow(types, T, 0), grow(attention, T, 0)
        positions, labels = grow(positions, P, 0), grow(labels, P, IGNORE)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    packed = ()
    if batch.blocks is not None:  # packed pairs: block-diagonal attention, never the plain unpadded path
        blocks, position_ids = batch.blocks, batch.position_ids
        if pad_to is not None:
            blocks, position_ids = grow(blocks, pad_to[0], -1), grow(position_ids, pad_to[0], 0)
        packed = (t(blocks), t(position_ids), t(batch.pair_positions))
    return MaskedBatch(t(masked), t(types), t(attention), t(positions), t(labels), t(batch.pair_labels),
                       bool(attention.all()) and batch.blocks is None, *packed)


def rank_rows(batch_size: int, rank: int, world: int, accum: int) -> np.ndarray:
    """The global rows a rank trains on (rank, rank + world, ...), ordered so that micro-batch k of
    ``accum`` (its rows k, k + accum, ..., as a strided slice would pick them) is one contiguous block."""
    mine = np.arange(rank, batch_size, world)
    return np.concatenate([mine[k::accum] for k in range(accum)])


class StepBatch(NamedTuple):
    """One rank's share of a global batch, and what the whole global batch costs.

    ``batch`` holds the global rows ``rows`` (``rank_rows``), contiguous, each micro-batch one block, so
    a micro-batch is a contiguous view of a pinned tensor (a non-blocking copy); ``n_tokens`` and
    ``shape`` describe the GLOBAL batch, so every rank counts the same budget and stops at the same step."""

    batch: MaskedBatch
    rows: np.ndarray
    n_tokens: int  # real tokens of the global batch
    shape: StepShape  # (B, T, P) of the global batch, P the most positions a row of it masks

    def micro(self, k: int, accum: int) -> MaskedBatch:
        m = len(self.rows) // accum
        return self.batch.rows(slice(k * m, (k + 1) * m))

    def pin_memory(self) -> "StepBatch":
        return self._replace(batch=self.batch.pin_memory())


class Position(NamedTuple):
    """Where training is in the data: the step and the next batch (phase, epoch, batch in epoch)."""

    step: int
    phase: int
    epoch: int
    batch: int


class StepData:
    """The global batch of every training position, laid out in ``fmt`` and masked (if ``masking``).

    ``phases`` are the Samples of phase 1 and (BERT's longer phase 2) phase 2; ``phase2_from`` the step
    phase 2 starts at."""

    def __init__(self, corpus: PreparedCorpus, phases: list[Samples], fmt: str, sp: SpecialIds, *, seed: int,
                 masking: dict | None, phase2_from: int = 0, continuation: np.ndarray | None = None,
                 static_shape: bool = False):
        self.corpus, self.phases, self.fmt, self.sp, self.seed = corpus, phases, fmt, sp, seed
        self.masking, self.phase2_from, self.continuation = masking, phase2_from, continuation
        self.static_shape = static_shape
        check_format(fmt)
        if fmt not in ROW_PER_CHUNK and any(s.static for s in phases):
            raise ValueError(f"static masking keys on one chunk per row; input format {fmt!r} packs several")

    def next(self, p: Position) -> Position:
        step, phase, epoch, b = p.step + 1, p.phase, p.epoch, p.batch + 1
        if b >= self.phases[phase].batches_in_epoch(epoch):
            epoch, b = epoch + 1, 0
        if phase == 0 and len(self.phases) > 1 and step >= self.phase2_from:
            phase, epoch, b = 1, 0, 0
        return Position(step, phase, epoch, b)

    def epochs_made(self, p: Position) -> float:
        return p.epoch + p.batch / max(self.phases[p.phase].batches_in_epoch(p.epoch), 1)

    def batch(self, p: Position) -> MaskedBatch:
        """The whole masked global batch of position ``p`` (one worker, no accumulation)."""
        return self.step(p).batch

    def step(self, p: Position, rank: int = 0, world: int = 1, accum: int = 1) -> StepBatch:
        """This rank's rows of position ``p``'s global batch, masked, and the global batch's cost.

        The global batch is laid out (cheap: copies of token spans) for its cost; only the rank's rows
        are masked, each keyed on its row in the global batch, so masks do not depend on ``world``."""
        samples = self.phases[p.phase]
        idx, chunks = samples.batch_chunks(p.epoch, p.batch)
        pairs = samples.batch_pairs(p.epoch, idx) if self.fmt == "sentence_pairs" else None
        laid = layout(self.corpus, chunks, self.fmt, self.sp, idx, seq_len=samples.seq_len, pairs=pairs)
        B, T = laid.input_ids.shape
        ratio = self.masking["ratio"] if self.masking else None
        P = int(mask_counts(laid.input_ids, laid.attention_mask, self.sp.first_regular, ratio,
                            laid.uncounted).max()) if ratio else 1
        cost = (int(laid.attention_mask.sum()), StepShape(B, T, max(P, 1)))
        rows = rank_rows(B, rank, world, accum)
        mine = laid.take(rows)  # fancy indexing: contiguous copies
        # packed sentence pairs can be longer than seq_len (3 specials per pair): a multiple of it, few shapes
        width = samples.seq_len * max(1, -(-T // samples.seq_len)) if self.fmt == "sentence_pairs" else samples.seq_len
        pad_to = (width, max(1, int(np.ceil(width * ratio))) if ratio else 1) if self.static_shape else None
        if self.masking is None:
            masked = to_masked(mine, self.sp, ratio=None, seed=0, keys=np.zeros(0), pad_to=pad_to)
        else:
            keys = (idx[rows] + STATIC_KEY) if samples.static else np.uint64(p.step) * np.uint64(B) + rows.astype(np.uint64)
            masked = to_masked(mine, self.sp, seed=self.seed + 1_000_003 * p.phase, keys=keys,
                               continuation=self.continuation, pad_to=pad_to, **self.masking)
        return StepBatch(masked, rows, *cost)


class _Positions(torch.utils.data.Dataset):
    def __init__(self, data: StepData, positions: list[Position], part: tuple[int, int, int]):
        self.data, self.positions, self.part = data, positions, part

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        return self.data.step(self.positions[i], *self.part)


def _as_is(item):
    """The DataLoader's collate: batches are built whole by the dataset (a module-level function: a
    lambda cannot be pickled for spawn/forkserver worker processes)."""
    return item


def positions_from(data: StepData, start: Position, steps: int) -> Iterator[Position]:
    p = start
    while p.step < steps:
        yield p
        p = data.next(p)


class Loader:
    """The (position, StepBatch) of every step from ``start`` to ``steps``, built ahead of the training
    loop: in a background thread (``workers=0``) or in DataLoader worker processes; this rank's rows
    only (``rank``/``world``, micro-batches of ``accum`` contiguous), pinned when ``pin``."""

    def __init__(self, data: StepData, start: Position, steps: int, *, workers: int = 0, prefetch: int = 4,
                 pin: bool = False, rank: int = 0, world: int = 1, accum: int = 1):
        self.data, self.start, self.steps, self.workers, self.prefetch, self.pin = data, start, steps, workers, prefetch, pin
        self.part = (rank, world, accum)

    def __iter__(self) -> Iterator[tuple[Position, StepBatch]]:
        positions = list(positions_from(self.data, self.start, self.steps))
        if self.workers > 0:
            # the DataLoader's own thread pins (StepBatch.pin_memory), so the training thread never copies a batch
            loader = torch.utils.data.DataLoader(_Positions(self.data, positions, self.part), batch_size=None,
                                                 shuffle=False, num_workers=self.workers, pin_memory=self.pin,
                                                 prefetch_factor=self.prefetch, collate_fn=_as_is)
            yield from zip(positions, loader)
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def work():
            try:
                for p in positions:
                    if stop.is_set():
                        return
                    b = self.data.step(p, *self.part)
                    q.put((p, b.pin_memory() if self.pin else b))
                q.put(None)
            except BaseException as err:  # surfaced in the training thread
                q.put(err)

        thread = threading.Thread(target=work, name="batch-loader", daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # unblock a worker waiting on a full queue
                try:
                    q.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.05)
