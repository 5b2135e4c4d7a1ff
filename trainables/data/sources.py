"""Pretraining text sources -> documents of sentences: the dispatcher behind ``data.corpus``.

Sources: ``builtin`` (the real offline corpus of ``trainables.data.builtin``), ``synthetic`` (for
unit tests), a local path (``.txt`` with blank-line-separated documents, ``.jsonl``/``.parquet``
with a text column, or a folder of such files), and ``hub:NAME[:CONFIG]`` (Hugging Face datasets,
only when asked). Bad input gets a one-line ``CorpusError``; skipped documents are counted and logged.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import numpy as np

from trainables.data.text import CorpusError, Document, documents_from_texts

log = logging.getLogger(__name__)


def _read_utf8(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                          "re-encode it as UTF-8") from None


def _load_txt(path: Path) -> list[str]:
    # Documents are separated by blank lines; inside one, each line may hold several sentences.
    return [block for block in re.split(r"\n\s*\n", _read_utf8(path)) if block.strip()]


def _load_jsonl(path: Path, text_column: str) -> list[str]:
    texts = []
    for n, line in enumerate(_read_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if text_column not in row:
            raise CorpusError(f"{path}:{n}: no {text_column!r} field; found {sorted(row)} "
                              "(set data.text_column)")
        texts.append(row[text_column])
    return texts


def _load_parquet(path: Path, text_column: str) -> list[str]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if text_column not in table.column_names:
        raise CorpusError(f"{path}: no {text_column!r} column; found {table.column_names} (set data.text_column)")
    return table.column(text_column).to_pylist()


_LOADERS = {".txt": _load_txt, ".jsonl": _load_jsonl, ".json": _load_jsonl, ".parquet": _load_parquet}


def load_local(path: str | os.PathLike, text_column: str = "text") -> list[Document]:
    """Documents from a file or a folder of files (sorted, so the order is deterministic)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise CorpusError(f"corpus path {str(root)!r} does not exist; allowed: builtin, synthetic, "
                          "an existing .txt/.jsonl/.parquet file or folder, or hub:NAME")
    files = sorted(p for p in root.rglob("*") if p.suffix in _LOADERS) if root.is_dir() else [root]
    if root.is_file() and root.suffix not in _LOADERS:
        raise CorpusError(f"{root}: unsupported file type {root.suffix!r}; allowed: {', '.join(_LOADERS)}")
    docs: list[Document] = []
    for f in files:
        loader = _LOADERS[f.suffix]
        texts = loader(f) if f.suffix == ".txt" else loader(f, text_column)
        docs.extend(documents_from_texts(texts, source=f.name, paragraphs_as_sentences=True))
    return docs


def load_hub(spec: str, text_column: str = "text", split: str = "train") -> list[Document]:
    """``hub:NAME[:CONFIG]`` through ``datasets.load_dataset``; also accepts a local dataset path."""
    import datasets

    name, _, config = spec.removeprefix("hub:").partition(":")
    try:
        ds = datasets.load_dataset(name, config or None, split=split)
    except Exception as e:  # the hub's own errors are long; one line is what the user needs
        raise CorpusError(f"hub dataset {name!r} (config {config or None!r}, split {split!r}) could not be "
                          f"loaded: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if text_column not in ds.column_names:
        raise CorpusError(f"hub dataset {name!r}: no {text_column!r} column; found {ds.column_names} "
                          "(set data.text_column)")
    return documents_from_texts(ds[text_column], source=name, paragraphs_as_sentences=True)


_WORDS = ("time year people way day man thing woman life child world school state family student group "
          "country problem hand part place case week company system program question work government "
          "number night point home water room mother area money story fact month lot right study book "
          "eye job word business issue side kind head house service friend father power hour game line").split()
_VERBS = "is was has makes takes gives finds tells asks works seems feels leaves calls keeps".split()


def synthetic_documents(n_docs: int = 200, seed: int = 0, sentences_per_doc: tuple[int, int] = (4, 12)) -> list[Document]:
    """Tiny grammatical-looking English for unit tests; documents have their own topic words."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        topic = rng.choice(_WORDS, size=4, replace=False)
        sents = []
        for _ in range(int(rng.integers(*sentences_per_doc))):
            words = [rng.choice(topic), rng.choice(_VERBS), "the", rng.choice(_WORDS)]
            words += list(rng.choice(_WORDS, size=int(rng.integers(2, 8))))
            sents.append(" ".join(words).capitalize() + ".")
        docs.append(Document(f"synthetic:{d}", "synthetic", sents))
    return docs


def load_documents(corpus: str, *, text_column: str = "text", hub_split: str = "train",
                   max_documents: int = 0) -> list[Document]:
    """Resolve a ``data.corpus`` value to documents; documents with one sentence are kept (they can
    still be single segments) but counted, and an empty result is an error."""
    if corpus == "builtin":
        from trainables.data.builtin import load_builtin_documents

        docs = load_builtin_documents()
    elif corpus == "synthetic":
        docs = synthetic_documents(max_documents or 200)
    elif corpus.startswith("hub:"):
        docs = load_hub(corpus, text_column, hub_split)
    else:
        docs = load_local(corpus, text_column)
    if max_documents:
        docs = docs[:max_documents]
    if not docs:
        raise CorpusError(f"corpus {corpus!r} has no documents with text; nothing to train on")
    single = sum(len(d.sentences) < 2 for d in docs)
    if single:
        log.info("corpus %s: %d of %d documents have one sentence (no pair can be built inside them)",
                 corpus, single, len(docs))
    return docs
