"""Decontamination: corpus text that is also evaluation text (a task's dev or test split) is removed.

One home for what the built-in build and the preparation of every other corpus share:

* ``norm_key``: the comparison key of a sentence (NFKC, case-folded, letters and digits only), so that
  tokenised and raw text, or text differing only in punctuation and spacing, match.
* ``contamination_keys``: the keys of every dev/test text of some tasks, whole, line by line and sentence by
  sentence (tagging rows joined by spaces; QA contexts and questions).
* ``decontaminate``: the built-in build's in-memory pass (exact sentence match).
* ``Decontaminator``: preparation's streaming pass, per document, in a worker: a sentence is removed when its
  key is an evaluation key (**exact**), or when it overlaps an evaluation text's 13-word n-gram (**ngram**, the
  style of GPT-3's decontamination, Brown et al. 2020, app. C: eval texts of 13 words or more, normalised words;
  an n-gram may run across sentence boundaries, and then every sentence it touches is removed).

What is dropped: the contaminated **sentence**, not its document (the rest of a document that quotes one test
sentence is still clean text); a document left with no sentence is dropped. Which texts: the tasks' dev/test rows,
loaded offline by ``trainables.tasks.eval_texts`` (this module imports no task).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import defaultdict
from typing import Iterable

import numpy as np

from trainables.data.text import Document, split_sentences

log = logging.getLogger(__name__)

DECON_VERSION = 1  # bump when the keys or the matching change: prepared corpora are keyed on it
NGRAM = 13  # words per n-gram (GPT-3's choice)
_P = np.uint64(0x9E3779B97F4A7C15)  # the n-gram hash's multiplier (odd: a bijection per step mod 2**64)
_WORD = re.compile(r"[^\W_]+")


def norm_key(text: str) -> str:
    """Comparison key: NFKC, case-folded, letters and digits only (so tokenised and raw text match)."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", text).casefold())


def norm_words(text: str) -> list[str]:
    """The words of ``norm_key`` (``"".join(norm_words(t)) == norm_key(t)``)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def row_texts(row: dict) -> list[str]:
    """The texts of one task row, whatever its type: tagging tokens joined by spaces, the text fields of
    single/pair rows, a QA row's context and question."""
    if "tokens" in row:
        return [" ".join(row["tokens"])]
    return [row[f] for f in ("text", "text_a", "text_b", "context", "question") if isinstance(row.get(f), str)]


def eval_texts(tasks: dict[str, dict[str, list[dict]]]) -> Iterable[str]:
    """Every text of every split but train (dev, test and extra test splits such as MNLI's test_mm)."""
    for splits in tasks.values():
        for split, rows in splits.items():
            if split != "train":
                for row in rows:
                    yield from row_texts(row)


def contamination_keys(tasks: dict[str, dict[str, list[dict]]]) -> set[str]:
    """Keys of every dev/test text, whole and sentence by sentence (tagging rows joined by spaces)."""
    keys: set[str] = set()
    for text in eval_texts(tasks):
        pieces = [text] + [s for line in text.split("\n") for s in [line, *split_sentences(line)]]
        keys.update(k for k in map(norm_key, pieces) if k)
    return keys


def decontaminate(docs: list[Document], keys: set[str]) -> tuple[list[Document], dict[str, int]]:
    """Drop every sentence whose key is in ``keys`` (and documents left empty); counts per source."""
    out, removed, dropped = [], defaultdict(int), defaultdict(int)
    for d in docs:
        kept = [s for s in d.sentences if norm_key(s) not in keys]
        removed[d.source] += len(d.sentences) - len(kept)
        if kept:
            out.append(Document(d.doc_id, d.source, kept))
        else:
            dropped[d.source] += 1
    return out, {"removed": dict(removed), "dropped": dict(dropped)}


# --- the n-grams ---------------------------------------------------------------------------------


def _gram_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit hash of every window of ``n`` word ids (a polynomial, wrapping mod 2**64: the same in every
    process, unlike ``hash``); a window holding a 0 (a word no evaluation text has) gets 0."""
    m = len(ids) - n + 1
    if m <= 0:
        return np.zeros(0, np.uint64)
    acc = np.zeros(m, np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            acc = acc * _P + ids[k:k + m]
    zeros = np.concatenate([[0], np.cumsum(ids == 0)])
    acc[(zeros[n:] - zeros[:m]) > 0] = 0
    return acc


def build_ngrams(texts: Iterable[str], n: int = NGRAM) -> tuple[list[str], np.ndarray]:
    """(the evaluation vocabulary, the sorted distinct hashes of every n-gram of the texts). The texts' word
    ids are hashed in one pass, a 0 between texts so that no n-gram runs across two."""
    vocab: dict[str, int] = {}
    ids: list[int] = []
    for text in texts:
        words = norm_words(text)
        if len(words) >= n:
            ids += [vocab.setdefault(w, len(vocab) + 1) for w in words]
            ids.append(0)
    hashes = np.unique(_gram_hashes(np.asarray(ids, np.uint64), n))
    return list(vocab), hashes[hashes != 0]


class Decontaminator:
    """The streaming pass of one worker: ``clean(docs)`` yields each document without its contaminated
    sentences (documents left empty are dropped) and counts what it removed. Documents are matched a
    batch at a time (one numpy pass over their word ids, a 0 between documents)."""

    BATCH = 512  # documents per n-gram pass

    def __init__(self, keys: Iterable[str], vocab: list[str], grams: np.ndarray, n: int = NGRAM):
        self.keys = frozenset(keys)
        self.vocab = {w: i for i, w in enumerate(vocab, 1)}
        self.grams, self.n = np.asarray(grams, np.uint64), n
        self.counts = {"sentences_exact": 0, "sentences_ngram": 0, "documents_dropped": 0}

    def _ngram_hits(self, batch: list[list[list[str]]]) -> set[tuple[int, int]]:
        """(document, sentence) of the batch's sentences that an evaluation n-gram touches."""
        if not len(self.grams):
            return set()
        get, ids, where = self.vocab.get, [], []  # where: (document, sentence) of each position
        for d, words in enumerate(batch):
            for s, ws in enumerate(words):
                ids += [get(w, 0) for w in ws]
                where += [(d, s)] * len(ws)
            ids.append(0)
            where.append((d, -1))
        h = _gram_hashes(np.asarray(ids, np.uint64), self.n)
        if not len(h):
            return set()
        pos = np.minimum(np.searchsorted(self.grams, h), len(self.grams) - 1)
        hits = set()
        for i in np.flatnonzero((h != 0) & (self.grams[pos] == h)):
            (d, first), (_, last) = where[i], where[i + self.n - 1]
            hits.update((d, s) for s in range(first, last + 1))
        return hits

    def _clean_batch(self, batch: list[list[str]]) -> Iterable[list[str]]:
        c, keys = self.counts, self.keys
        words = [[norm_words(s) for s in sentences] for sentences in batch]
        ngram = self._ngram_hits(words)
        for d, sentences in enumerate(batch):
            exact = {i for i, ws in enumerate(words[d]) if "".join(ws) in keys}
            by_ngram = {s for dd, s in ngram if dd == d} - exact if ngram else set()
            if exact or by_ngram:
                c["sentences_exact"] += len(exact)
                c["sentences_ngram"] += len(by_ngram)
                sentences = [x for i, x in enumerate(sentences) if i not in exact and i not in by_ngram]
                if not sentences:
                    c["documents_dropped"] += 1
                    continue
            yield sentences

    def clean(self, docs: Iterable[list[str]]) -> Iterable[list[str]]:
        batch: list[list[str]] = []
        for sentences in docs:
            batch.append(sentences)
            if len(batch) >= self.BATCH:
                yield from self._clean_batch(batch)
                batch = []
        if batch:
            yield from self._clean_batch(batch)
