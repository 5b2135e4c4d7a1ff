"""Base types of the pretraining text: ``Document``, ``CorpusError`` and sentence splitting.

A ``Document`` is one unit whose sentences are consecutive (NSP/SOP pairs are built inside it). Every
source (``trainables.data.sources``) and the built-in corpus (``trainables.data.builtin``) produce
documents with these helpers; nothing here imports another module of the package.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple


class CorpusError(ValueError):
    """The corpus cannot be used; the message is one line saying which input and why."""


class Document(NamedTuple):
    doc_id: str
    source: str
    sentences: list[str]


# A deliberately simple, dependency-free splitter: end punctuation (optionally followed by closing
# quotes/brackets), then whitespace, then an upper-case letter, digit or opening quote. Common
# abbreviations are protected so "Mr. Smith" and "U.S. officials" stay in one sentence.
_ABBREV = r"(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|Inc|Ltd|Co|Corp|Gov|Gen|Rep|Sen|No|Mt|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|U\.S|U\.K|e\.g|i\.e)"
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_ABBREV_END = re.compile(_ABBREV + r"\.$")
_INITIAL_END = re.compile(r"(?:^|\s)[A-Z]\.$")


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences; whitespace is normalised, empty pieces dropped."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return []
    pieces, start = [], 0
    for m in _BOUNDARY.finditer(text):
        candidate = text[start:m.end(1)]
        if _ABBREV_END.search(candidate) or _INITIAL_END.search(candidate):
            continue
        pieces.append(candidate.strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def documents_from_texts(texts: Iterable[str], source: str, *, paragraphs_as_sentences: bool = False) -> list[Document]:
    """Each text becomes one document; sentences come from the splitter (per paragraph line)."""
    docs = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            continue
        sentences = []
        for para in re.split(r"\n\s*\n|\n", text) if paragraphs_as_sentences else [text]:
            sentences.extend(split_sentences(para))
        if sentences:
            docs.append(Document(f"{source}:{i}", source, sentences))
    return docs
