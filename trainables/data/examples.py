"""Documents -> token ids (cached) -> chunks -> single / NSP / SOP examples -> padded batches.

The pipeline is split so that every variant of one comparison sees the same text in the same order:

* ``tokenize_corpus`` turns sentences into ids once and caches them as Parquet under a key derived
  from the corpus content, the tokenizer and the data config (a second run skips it).
* ``build_chunks`` follows BERT's ``create_instances_from_document``: it fills a chunk with
  consecutive sentences of one document up to the target length and picks the A/B split point.
  Its randomness depends only on ``(data_seed, epoch)``, never on the objective.
* ``make_examples`` turns chunks into inputs: ``single`` ([CLS] A B [SEP], RoBERTa's DOC-SENTENCES
  style: the same text without the pair structure), ``nsp`` (B replaced by a segment of another
  document half of the time) or ``sop`` (A and B swapped half of the time). Pair corruption uses its
  own generator, so NSP and SOP variants share chunks and differ only in what the pair loss asks.
* ``Batcher`` orders an epoch's examples into length-bucketed batches (little compute on padding)
  and indexes them by ``(epoch, batch)`` so a resumed run continues at the exact batch.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from trainables.batching import bucket_batches
from trainables.data.text import CorpusError, Document

log = logging.getLogger(__name__)

PAIR_TASKS = ("single", "nsp", "sop")
IGNORE = -100  # label of positions and pairs that carry no loss


@dataclass(frozen=True)
class TokenizedCorpus:
    """Sentence token ids per document (train and held-out split by document)."""

    train: list[list[np.ndarray]]  # [doc][sentence] -> int32 ids without special tokens
    heldout: list[list[np.ndarray]]
    key: str  # cache key: corpus fingerprint + tokenizer + data config

    @property
    def train_tokens(self) -> int:
        return int(sum(len(s) for d in self.train for s in d))


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


def tokenize_corpus(docs: list[Document], tokenizer, tokenizer_key: str, *, fingerprint: str,
                    heldout_fraction: float, data_seed: int, cache_dir: Path) -> TokenizedCorpus:
    """Token ids of every sentence, cached as Parquet; the held-out documents are drawn with the seed."""
    key = hashlib.sha256(f"{fingerprint}|{tokenizer_key}|{heldout_fraction}|{data_seed}|v1".encode()).hexdigest()[:16]
    path = cache_dir / "tokens" / f"{key}.parquet"
    if path.exists():
        table = pq.read_table(path)
    else:
        doc_index, sent_ids = [], []
        for i, d in enumerate(docs):
            enc = tokenizer.backend_tokenizer.encode_batch(d.sentences, add_special_tokens=False)
            for e in enc:
                if e.ids:
                    doc_index.append(i)
                    sent_ids.append(e.ids)
        table = pa.table({"doc": pa.array(doc_index, pa.int32()), "ids": pa.array(sent_ids, pa.list_(pa.int32()))})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    by_doc: dict[int, list[np.ndarray]] = {}
    ids_col = table.column("ids").combine_chunks()
    offsets, values = ids_col.offsets.to_numpy(), ids_col.values.to_numpy()
    for row, d in enumerate(table.column("doc").to_numpy()):
        by_doc.setdefault(int(d), []).append(values[offsets[row]:offsets[row + 1]])
    doc_ids = sorted(by_doc)
    if len(doc_ids) < 4:
        raise CorpusError(f"corpus has {len(doc_ids)} non-empty document(s); at least 4 are needed "
                          "(pairs need two documents to train on and two held out)")
    order = np.random.default_rng(data_seed).permutation(len(doc_ids))
    n_held = max(2, int(round(heldout_fraction * len(doc_ids))))
    held = sorted(int(i) for i in order[:n_held])
    train = sorted(int(i) for i in order[n_held:])
    return TokenizedCorpus([by_doc[doc_ids[i]] for i in train], [by_doc[doc_ids[i]] for i in held], key)


class Chunk(NamedTuple):
    doc: int
    a: np.ndarray  # ids of segment A (sentences before the split point)
    b: np.ndarray  # ids of segment B (the consecutive sentences after it); may be empty


def build_chunks(docs: list[list[np.ndarray]], seq_len: int, short_seq_prob: float,
                 rng: np.random.Generator) -> list[Chunk]:
    """BERT's instance creation: consecutive sentences up to a target length, split into A and B.

    Sentences longer than the target are cut; a chunk made of one sentence is split inside it so that
    every chunk can serve as a pair of consecutive segments."""
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]
    chunks: list[Chunk] = []
    for d, sentences in enumerate(docs):
        target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
        current: list[np.ndarray] = []
        length = 0
        for i, sent in enumerate(sentences):
            current.append(sent[:max_tokens])
            length += len(current[-1])
            if length >= target or i == len(sentences) - 1:
                if len(current) >= 2:
                    cut = int(rng.integers(1, len(current)))
                    a, b = np.concatenate(current[:cut]), np.concatenate(current[cut:])
                else:
                    whole = current[0]
                    cut = int(rng.integers(1, len(whole))) if len(whole) >= 2 else len(whole)
                    a, b = whole[:cut], whole[cut:]
                a, b = _truncate_pair(a, b, max_tokens, rng)
                chunks.append(Chunk(d, a, b))
                current, length = [], 0
                target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
    return chunks


def _truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: np.random.Generator):
    """BERT's truncate_seq_pair: trim the longer segment, from the front or back at random."""
    while len(a) + len(b) > max_tokens:
        longer = "a" if len(a) > len(b) else "b"
        seg = a if longer == "a" else b
        seg = seg[1:] if rng.random() < 0.5 else seg[:-1]
        a, b = (seg, b) if longer == "a" else (a, seg)
    return a, b


class Example(NamedTuple):
    ids: np.ndarray  # [CLS] A [SEP] (B [SEP]) with special tokens, int32
    len_a: int  # tokens up to and including the first [SEP]; token_type 1 after it
    pair_label: int  # NSP: 0 = B follows A, 1 = B is random; SOP: 0 = in order, 1 = swapped; single: IGNORE


def _random_segment(docs: list[list[np.ndarray]], exclude: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """A segment of about ``length`` tokens from a random document other than ``exclude``."""
    d = int(rng.integers(0, len(docs) - 1))
    d = d + 1 if d >= exclude else d  # never the same document
    sents = docs[d]
    start = int(rng.integers(0, len(sents)))
    out, n = [], 0
    for s in sents[start:]:
        out.append(s)
        n += len(s)
        if n >= length:
            break
    return np.concatenate(out)[:max(length, 1)]


def make_examples(chunks: list[Chunk], docs: list[list[np.ndarray]], task: str, sp: SpecialIds,
                  rng: np.random.Generator) -> list[Example]:
    """Inputs for ``task`` in {'single', 'nsp', 'sop'} from the shared chunks."""
    if task not in PAIR_TASKS:
        raise ValueError(f"pair task {task!r} is not valid; allowed: {', '.join(PAIR_TASKS)}")
    cls, sep = np.array([sp.cls], np.int32), np.array([sp.sep], np.int32)
    out = []
    for c in chunks:
        a, b = c.a.astype(np.int32), c.b.astype(np.int32)
        if task == "single":
            out.append(Example(np.concatenate([cls, a, b, sep]), len(a) + len(b) + 2, IGNORE))
            continue
        label = int(rng.random() < 0.5)
        if label and task == "nsp":
            b = _random_segment(docs, c.doc, max(len(b), 1), rng).astype(np.int32)
            a, b = _truncate_pair(a, b, len(c.a) + max(len(c.b), 1), rng)
        elif label and task == "sop":
            a, b = b, a
        if len(a) == 0 or len(b) == 0:  # a one-token chunk: no pair to judge, so no pair loss on it
            label = IGNORE
        out.append(Example(np.concatenate([cls, a, sep, b, sep]), len(a) + 2, label))
    return out


class PretrainBatch(NamedTuple):
    """One padded batch before masking. Shapes: (B, T) and (B,)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    pair_labels: torch.Tensor
    example_index: torch.Tensor  # position of each example in its epoch (static masking keys on it)


def collate(examples: list[Example], indices: list[int], pad_id: int) -> PretrainBatch:
    """Pad to the longest example in the batch (dynamic padding)."""
    T = max(len(e.ids) for e in examples)
    ids = np.full((len(examples), T), pad_id, np.int64)
    types = np.zeros((len(examples), T), np.int64)
    for i, e in enumerate(examples):
        ids[i, :len(e.ids)] = e.ids
        types[i, e.len_a:len(e.ids)] = 1
    ids_t = torch.from_numpy(ids)
    return PretrainBatch(ids_t, torch.from_numpy(types), (ids_t != pad_id).long(),
                         torch.tensor([e.pair_label for e in examples], dtype=torch.long),
                         torch.tensor(indices, dtype=torch.long))


class Batcher:
    """Deterministic epochs of batches for one pair task: ``batch(epoch, i)`` is the same every time.

    ``static=True`` reuses epoch 0's examples for every epoch (the original BERT's fixed data)."""

    def __init__(self, docs: list[list[np.ndarray]], task: str, sp: SpecialIds, *, seq_len: int,
                 short_seq_prob: float, batch_size: int, data_seed: int, static: bool = False):
        if len(docs) < 2:
            raise CorpusError(f"{len(docs)} training document(s); pair inputs need at least 2")
        self.docs, self.task, self.sp, self.seq_len = docs, task, sp, seq_len
        self.short_seq_prob, self.batch_size, self.data_seed, self.static = short_seq_prob, batch_size, data_seed, static
        self._examples_epoch: int | None = None
        self._order_epoch: int | None = None
        self._examples: list[Example] = []
        self._order: list[np.ndarray] = []

    def _load(self, epoch: int) -> None:
        e = 0 if self.static else epoch
        if self._examples_epoch != e:
            rng_chunks, rng_pairs = (np.random.default_rng([self.data_seed, e, k]) for k in (0, 1))
            chunks = build_chunks(self.docs, self.seq_len, self.short_seq_prob, rng_chunks)
            self._examples = make_examples(chunks, self.docs, self.task, self.sp, rng_pairs)
            self._examples_epoch = e
        if self._order_epoch != epoch:
            lengths = np.array([len(x.ids) for x in self._examples])
            self._order = bucket_batches(lengths, self.batch_size, np.random.default_rng([self.data_seed, epoch, 2]),
                                         drop_last=True)
            if not self._order:
                raise CorpusError(f"the corpus yields {len(self._examples)} examples, fewer than one batch of "
                                  f"{self.batch_size}; use a larger corpus or a smaller optim.batch_size")
            self._order_epoch = epoch

    def batches_in_epoch(self, epoch: int) -> int:
        self._load(epoch)
        return len(self._order)

    def batch(self, epoch: int, i: int) -> PretrainBatch:
        self._load(epoch)
        idx = self._order[i]
        return collate([self._examples[j] for j in idx], [int(j) for j in idx], self.sp.pad)

    def padding_fraction(self, epoch: int = 0) -> float:
        self._load(epoch)
        real = sum(len(self._examples[j].ids) for b in self._order for j in b)
        padded = sum(max(len(self._examples[j].ids) for j in b) * len(b) for b in self._order)
        return 1.0 - real / padded
