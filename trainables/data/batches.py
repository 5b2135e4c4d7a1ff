"""Batches from samples: the layout of each input format, masking, and the loader that runs ahead.

    single      [CLS] A B [SEP]               token types 0 (RoBERTa's FULL-SENTENCES: no pair structure)
    nsp_pairs   [CLS] A [SEP] B' [SEP]         B' is NSP's random segment for label-1 chunks
    sop_pairs   [CLS] A [SEP] B [SEP]          A and B swapped for label-1 chunks

Every variant of one seed reads the same chunks in the same batches (``trainables.data.samples``); a
format only lays them out. ``StepData`` turns a training position into its masked global batch (a pure
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

from trainables.data.masking import MaskedBatch, mask_arrays
from trainables.data.samples import IGNORE, Samples
from trainables.data.shards import PreparedCorpus

INPUT_FORMATS = ("single", "nsp_pairs", "sop_pairs")
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


def layout(corpus: PreparedCorpus, rows: np.ndarray, fmt: str, sp: SpecialIds, chunk_index: np.ndarray) -> PretrainBatch:
    """Chunks -> padded model inputs of the input format ``fmt``."""
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"input format {fmt!r} is not valid; allowed: {', '.join(INPUT_FORMATS)}")
    segments = []
    for c in rows:
        a, b = corpus.span(int(c["a0"]), int(c["a1"])), corpus.span(int(c["b0"]), int(c["b1"]))
        if fmt == "nsp_pairs" and c["nsp"] == 1:
            b = corpus.span(int(c["r0"]), int(c["r1"]))
        elif fmt == "sop_pairs" and c["sop"] == 1:
            a, b = b, a
        segments.append((a, b))
    extra = 2 if fmt == "single" else 3
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
    return PretrainBatch(ids, types, attention, labels, np.asarray(chunk_index, np.int64), rows["doc"].copy())


def to_masked(batch: PretrainBatch, sp: SpecialIds, *, ratio: float | None, seed: int, keys: np.ndarray,
              mask_token_frac: float = 0.8, random_token_frac: float = 0.1, strategy: str = "token",
              continuation: np.ndarray | None = None) -> MaskedBatch:
    """Mask a laid-out batch (``ratio=None``: nothing masked) and hand it to torch."""
    ids = batch.input_ids
    if ratio is None:
        masked, positions, labels = ids, np.zeros((len(ids), 1), np.int64), np.full((len(ids), 1), IGNORE, np.int64)
    else:
        masked, positions, labels = mask_arrays(ids, batch.attention_mask, first_regular=sp.first_regular,
                                                vocab_size=sp.vocab_size, mask_id=sp.mask, ratio=ratio, seed=seed,
                                                keys=keys, mask_token_frac=mask_token_frac,
                                                random_token_frac=random_token_frac, strategy=strategy,
                                                continuation=continuation)
    t = torch.from_numpy
    return MaskedBatch(t(np.ascontiguousarray(masked)), t(batch.token_type_ids), t(batch.attention_mask),
                       t(np.ascontiguousarray(positions)), t(np.ascontiguousarray(labels)), t(batch.pair_labels),
                       bool(batch.attention_mask.all()))


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
                 masking: dict | None, phase2_from: int = 0, continuation: np.ndarray | None = None):
        self.corpus, self.phases, self.fmt, self.sp, self.seed = corpus, phases, fmt, sp, seed
        self.masking, self.phase2_from, self.continuation = masking, phase2_from, continuation

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
        samples = self.phases[p.phase]
        idx, rows = samples.batch_chunks(p.epoch, p.batch)
        laid = layout(self.corpus, rows, self.fmt, self.sp, idx)
        if self.masking is None:
            return to_masked(laid, self.sp, ratio=None, seed=0, keys=np.zeros(0))
        static = samples.static
        keys = (idx + STATIC_KEY) if static else (np.uint64(p.step) * np.uint64(len(idx)) + np.arange(len(idx), dtype=np.uint64))
        return to_masked(laid, self.sp, seed=self.seed + 1_000_003 * p.phase, keys=keys,
                         continuation=self.continuation, **self.masking)


class _Positions(torch.utils.data.Dataset):
    def __init__(self, data: StepData, positions: list[Position]):
        self.data, self.positions = data, positions

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        return self.data.batch(self.positions[i])


def positions_from(data: StepData, start: Position, steps: int) -> Iterator[Position]:
    p = start
    while p.step < steps:
        yield p
        p = data.next(p)


class Loader:
    """The (position, batch) of every step from ``start`` to ``steps``, built ahead of the training loop:
    in a background thread (``workers=0``) or in DataLoader worker processes; pinned when ``pin``."""

    def __init__(self, data: StepData, start: Position, steps: int, *, workers: int = 0, prefetch: int = 4,
                 pin: bool = False):
        self.data, self.start, self.steps, self.workers, self.prefetch, self.pin = data, start, steps, workers, prefetch, pin

    def __iter__(self) -> Iterator[tuple[Position, MaskedBatch]]:
        positions = list(positions_from(self.data, self.start, self.steps))
        if self.workers > 0:
            loader = torch.utils.data.DataLoader(_Positions(self.data, positions), batch_size=None, shuffle=False,
                                                 num_workers=self.workers, prefetch_factor=self.prefetch,
                                                 pin_memory=self.pin, collate_fn=lambda b: b)
            yield from zip(positions, loader)
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def work():
            try:
                for p in positions:
                    if stop.is_set():
                        return
                    b = self.data.batch(p)
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
