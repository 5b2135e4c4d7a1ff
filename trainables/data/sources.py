"""Pretraining text sources -> units of documents: the dispatcher behind ``data.corpus``.

Sources: ``builtin`` (the real offline corpus of ``trainables.data.builtin``), ``synthetic`` (for
unit tests), ``planted[:docs=N]`` (the language with known answers of ``trainables.data.planted``), a local path (``.txt`` with blank-line-separated documents, ``.jsonl``/``.parquet``
with a text column, or a folder of such files; a parquet list-of-strings column is taken as sentences
already split), and ``hub:NAME[:CONFIG]`` (Hugging Face datasets, streamed, only when asked).

A source is read as a list of ``Unit``s (a byte range of a text file, a few parquet row groups, a hub
shard): the units are what preparation maps over in parallel, and each yields its documents as lists of
sentences, in a fixed order, streamed in chunks so that memory does not grow with the file. A ``.txt``
or ``.jsonl`` file is cut into units of about ``UNIT_BYTES`` at document boundaries (``_next_cut``):
reading its units one after another gives the same documents as reading the whole file at once.
``source_identity`` names a source without reading its text (files: names, sizes and mtimes; built-in:
its checksum; hub: name, config, split, revision). Bad input gets a one-line ``CorpusError``.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from trainables.data.text import CorpusError, Document, split_sentences

log = logging.getLogger(__name__)

FILE_KINDS = {".txt": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
UNIT_DOCUMENTS = 512  # parquet row groups are grouped into units of about this many documents
UNIT_BYTES = 16 * 2**20  # .txt/.jsonl files are cut into units of about this many bytes (many shards, bounded memory)
CHUNK_BYTES = 2**20  # a unit's text is read this many bytes at a time
CUT_WINDOW = 2**16  # a cut is looked for this many bytes at a time: planning the units reads little


class Unit(NamedTuple):
    """One piece of a source that one worker reads: documents in a fixed order."""

    id: int
    kind: str  # builtin | parquet | jsonl | txt | hub | synthetic | planted
    path: str  # a file, a hub name, the number of synthetic documents, or the planted language's seed
    groups: tuple[int, ...] = ()  # parquet: the row groups of this unit
    limit: int = 0  # read at most this many documents (0: all); max_documents on the last unit
    config: str = ""  # hub: config name
    split: str = "train"  # hub: split
    shard: int = 0  # hub: this unit's shard of ...
    n_shards: int = 1  # ... the streamed dataset's shards
    start: int = 0  # txt/jsonl: the unit is bytes [start, end) of the file ... (planted: documents)
    end: int = 0  # ... (0: to the end of the file)


def _text_chunks(path: Path, start: int = 0, end: int = 0) -> Iterator[str]:
    """Bytes [start, end) of a UTF-8 file as text, in chunks, newlines translated as ``open()`` does in text
    mode (\\r\\n and \\r become \\n), so a unit reads exactly what ``Path.read_text`` gave for its range."""
    decoder, held = codecs.getincrementaldecoder("utf-8")(), ""
    with open(path, "rb") as f:
        end = end or f.seek(0, 2)
        pos = f.seek(start)
        while pos < end:
            raw = f.read(min(CHUNK_BYTES, end - pos))
            final = not raw or pos + len(raw) >= end
            pending = len(decoder.getstate()[0])
            try:
                text = held + decoder.decode(raw, final=final)
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path}: not UTF-8 text (byte {pos - pending + e.start}: "
                                  f"{e.object[e.start:e.start + 1]!r}); re-encode it as UTF-8") from None
            pos += len(raw)
            held = ""
            if text.endswith("\r") and not final:  # the \n of a \r\n may open the next chunk
                text, held = text[:-1], "\r"
            yield text.replace("\r\n", "\n").replace("\r", "\n")
            if not raw:
                break
        if held:
            yield "\n"


def text_to_sentences(text) -> list[str]:
    """A document's text -> sentences: each line split by the sentence splitter."""
    if not isinstance(text, str):
        return []
    return [s for line in re.split(r"\n\s*\n|\n", text) for s in split_sentences(line)]


_DOC_SEPARATOR = re.compile(r"\n\s*\n")  # documents are separated by blank lines


def _txt_docs(path: Path, start: int = 0, end: int = 0) -> Iterator[list[str]]:
    # Inside a document each line may hold several sentences. The text after the last separator of a
    # chunk may go on in the next one, so it is carried over; cutting inside a separator's run of
    # whitespace changes no document (only blank lines at their edges, which hold no sentence).
    carry = ""
    for text in _text_chunks(path, start, end):
        *blocks, carry = _DOC_SEPARATOR.split(carry + text)
        for block in blocks:
            if block.strip():
                yield text_to_sentences(block)
    if carry.strip():
        yield text_to_sentences(carry)


def _lines(path: Path, start: int = 0, end: int = 0) -> Iterator[str]:
    """The lines of bytes [start, end), ended by \\n, \\r\\n or \\r. Not ``str.splitlines``, which also ends
    a line at \\x85 or \\u2028: JSON may hold those raw inside a string."""
    carry = ""
    for text in _text_chunks(path, start, end):
        *lines, carry = (carry + text).split("\n")
        yield from lines
    if carry:
        yield carry


def _where(path: Path, start: int, n: int) -> str:
    """``path:line`` of a unit's n-th line (error messages only: counts the lines before the unit)."""
    return f"{path}:{n + (sum(1 for _ in _lines(path, 0, start)) if start else 0)}"


def _jsonl_docs(path: Path, text_column: str, start: int = 0, end: int = 0) -> Iterator[list[str]]:
    for n, line in enumerate(_lines(path, start, end), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{_where(path, start, n)}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or text_column not in row:
            found = sorted(row) if isinstance(row, dict) else f"a JSON {type(row).__name__}"
            raise CorpusError(f"{_where(path, start, n)}: no {text_column!r} field; found {found} "
                              "(set data.text_column)")
        yield text_to_sentences(row[text_column])


def _parquet_column(path: str, text_column: str):
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    if text_column not in f.schema_arrow.names:
        raise CorpusError(f"{path}: no {text_column!r} column; found {f.schema_arrow.names} (set data.text_column)")
    return f


def _parquet_docs(unit: Unit, text_column: str) -> Iterator[list[str]]:
    import pyarrow as pa

    f = _parquet_column(unit.path, text_column)
    is_list = pa.types.is_list(f.schema_arrow.field(text_column).type)
    table = f.read_row_groups(list(unit.groups), columns=[text_column]) if unit.groups else \
        f.read(columns=[text_column])
    for value in table.column(text_column).to_pylist():
        yield [s for s in (value or []) if isinstance(s, str) and s.strip()] if is_list else text_to_sentences(value)


def _hub_stream(unit: Unit):
    import datasets

    try:
        ds = datasets.load_dataset(unit.path, unit.config or None, split=unit.split, streaming=True)
    except Exception as e:  # the hub's own errors are long; one line is what the user needs
        raise CorpusError(f"hub dataset {unit.path!r} (config {unit.config or None!r}, split {unit.split!r}) "
                          f"could not be loaded: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
                          "check the name on the hub, or point data.corpus at local files") from None
    return ds


def _hub_docs(unit: Unit, text_column: str) -> Iterator[list[str]]:
    ds = _hub_stream(unit)
    if unit.n_shards > 1:
        ds = ds.shard(num_shards=unit.n_shards, index=unit.shard)
    for row in ds:
        if text_column not in row:
            raise CorpusError(f"hub dataset {unit.path!r}: no {text_column!r} column; found {sorted(row)} "
                              "(set data.text_column)")
        yield text_to_sentences(row[text_column])


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


def read_unit(unit: Unit, text_column: str = "text") -> Iterator[list[str]]:
    """The documents of one unit, as lists of sentences, in order (empty documents dropped)."""
    if unit.kind == "synthetic":
        docs = (d.sentences for d in synthetic_documents(int(unit.path)))
    elif unit.kind == "planted":
        from trainables.data.planted import PlantedLanguage

        docs = PlantedLanguage(seed=int(unit.path)).documents(unit.end - unit.start, unit.start)
    elif unit.kind in ("parquet", "builtin"):
        docs = _parquet_docs(unit, "sentences" if unit.kind == "builtin" else text_column)
    elif unit.kind == "jsonl":
        docs = _jsonl_docs(Path(unit.path), text_column, unit.start, unit.end)
    elif unit.kind == "txt":
        docs = _txt_docs(Path(unit.path), unit.start, unit.end)
    elif unit.kind == "hub":
        docs = _hub_docs(unit, text_column)
    else:
        raise CorpusError(f"unit kind {unit.kind!r} is not valid; allowed: builtin, parquet, jsonl, txt, hub, synthetic, "
                          "planted")
    n = 0
    for sentences in docs:
        if not sentences:
            continue
        yield sentences
        n += 1
        if unit.limit and n >= unit.limit:
            return


def _local_files(corpus: str) -> list[Path]:
    root = Path(corpus).expanduser()
    if not root.exists():
        raise CorpusError(f"corpus path {str(root)!r} does not exist; allowed: builtin, synthetic, "
                          "an existing .txt/.jsonl/.parquet file or folder, or hub:NAME")
    if root.is_file() and root.suffix not in FILE_KINDS:
        raise CorpusError(f"{root}: unsupported file type {root.suffix!r}; allowed: {', '.join(FILE_KINDS)}")
    files = sorted(p for p in root.rglob("*") if p.suffix in FILE_KINDS) if root.is_dir() else [root]
    if not files:
        raise CorpusError(f"corpus folder {str(root)!r} holds no {', '.join(FILE_KINDS)} files")
    return files


def _parquet_units(path: str, kind: str, text_column: str, budget: int, start_id: int) -> tuple[list[Unit], int]:
    """Units of about UNIT_DOCUMENTS rows from whole row groups; ``budget`` > 0 stops after that many
    documents. Returns the units and the rows they hold."""
    meta = _parquet_column(path, "sentences" if kind == "builtin" else text_column).metadata
    units, groups, rows, used = [], [], 0, 0
    for g in range(meta.num_row_groups):
        groups.append(g)
        rows += meta.row_group(g).num_rows
        full = bool(budget) and used + rows >= budget
        if full or rows >= UNIT_DOCUMENTS or g == meta.num_row_groups - 1:
            units.append(Unit(start_id + len(units), kind, path, tuple(groups), budget - used if full else 0))
            used += budget - used if full else rows
            if full:
                break
            groups, rows = [], 0
    return units, used


# Where a unit of a text file may end: just past a line end that is followed by a blank line (txt: the
# cut then falls inside a document separator) or past any line end (jsonl: one document a line). A \r
# that ends the window may be the first half of a \r\n, so a match must not touch the window's end.
_LINE_END = rb"(\r\n|\r(?!\n)|\n)"  # never a \r whose \n follows: that would cut a \r\n in two
_CUTS = {"txt": re.compile(_LINE_END + rb"[ \t\f\v]*[\r\n]"), "jsonl": re.compile(_LINE_END)}
_WHITESPACE = b" \t\f\v\r\n"


def _next_cut(f, pos: int, size: int, kind: str) -> int:
    """The first document boundary at or after byte ``pos`` of the open file (``size`` if none): the
    offset where the next unit starts. Reads forward in chunks, keeping only trailing whitespace."""
    window, base = b"", f.seek(pos)
    while True:
        more = f.read(CUT_WINDOW)
        window += more
        m = _CUTS[kind].search(window)
        if m and (m.end() < len(window) or not more):
            return base + m.end(1)
        if not more:
            return size
        keep = len(window) - len(window.rstrip(_WHITESPACE))  # a boundary may begin in it
        base, window = base + len(window) - keep, window[len(window) - keep:]


def byte_ranges(path: Path, kind: str, unit_bytes: int = 0) -> list[tuple[int, int]]:
    """[start, end) byte ranges of about ``unit_bytes`` (default ``UNIT_BYTES``) that cut a .txt/.jsonl file
    only at document boundaries; together they cover the file. Reads a little at each cut, not the file."""
    unit_bytes = max(int(unit_bytes or UNIT_BYTES), 1)
    size, ranges, start = path.stat().st_size, [], 0
    with open(path, "rb") as f:
        while start < size:
            end = _next_cut(f, start + unit_bytes, size, kind) if start + unit_bytes < size else size
            ranges.append((start, end))
            start = end
    return ranges or [(0, size)]


def _text_units(path: Path, kind: str, text_column: str, budget: int, start_id: int,
                unit_bytes: int) -> tuple[list[Unit], int]:
    """A .txt/.jsonl file's units; ``budget`` > 0 stops after that many documents (counting them means
    reading those units once). Returns the units and the documents they hold (0 without a budget)."""
    units, used = [], 0
    for start, end in byte_ranges(path, kind, unit_bytes):
        unit = Unit(start_id + len(units), kind, str(path), start=start, end=end)
        if budget:
            n = sum(1 for _ in read_unit(unit._replace(limit=budget - used), text_column))
            if used + n >= budget:
                units.append(unit._replace(limit=budget - used))
                return units, budget
            used += n
        units.append(unit)
    return units, used


PLANTED_DOCS = 8000  # the planted corpus's default size: ~0.7 M tokens (trainables.data.planted)
PLANTED_UNIT = 1000  # documents per unit


def planted_options(corpus: str) -> dict[str, int]:
    """``planted[:docs=N][,seed=K]`` -> {"docs": N, "seed": K} (defaults 8000 and 0); one line naming a bad
    option. ``seed`` is the language: its words, its corpus and its planted tasks (``language_of``)."""
    opts = {"docs": PLANTED_DOCS, "seed": 0}
    for part in filter(None, corpus.removeprefix("planted").removeprefix(":").split(",")):
        key, _, value = part.partition("=")
        if key not in opts or not value.isdigit() or (key == "docs" and int(value) < 2):
            raise CorpusError(f"corpus option {part!r} of {corpus!r} is not valid; allowed: docs=N (N >= 2), "
                              "seed=K (K >= 0: the planted language)")
        opts[key] = int(value)
    return opts


def language_of(corpus: str) -> int:
    """The planted language a run's planted tasks come from: its corpus's (``planted:seed=K``), else 0."""
    return planted_options(corpus)["seed"] if corpus == "planted" or corpus.startswith("planted:") else 0


def list_units(corpus: str, *, text_column: str = "text", hub_split: str = "train", max_documents: int = 0,
               cache_dir: str | None = None, unit_bytes: int = 0) -> list[Unit]:
    """The units of a source, in order; with ``max_documents`` only those holding the first N documents.
    ``unit_bytes`` (default ``UNIT_BYTES``) sizes the units of text files."""
    if corpus == "synthetic":
        return [Unit(0, "synthetic", str(max_documents or 200))]
    if corpus == "planted" or corpus.startswith("planted:"):
        opts = planted_options(corpus)
        n = min(opts["docs"], max_documents) if max_documents else opts["docs"]
        return [Unit(i, "planted", str(opts["seed"]), start=a, end=min(a + PLANTED_UNIT, n))
                for i, a in enumerate(range(0, n, PLANTED_UNIT))]
    if corpus == "builtin":
        from trainables.data.builtin import builtin_corpus_path

        return _parquet_units(str(builtin_corpus_path(cache_dir)), "builtin", text_column, max_documents, 0)[0]
    if corpus.startswith("hub:"):
        name, _, config = corpus.removeprefix("hub:").partition(":")
        base = Unit(0, "hub", name, config=config, split=hub_split)
        if max_documents:
            return [base._replace(limit=max_documents)]
        shards = max(int(getattr(_hub_stream(base), "n_shards", 1) or 1), 1)
        return [base._replace(id=i, shard=i, n_shards=shards) for i in range(shards)]
    units: list[Unit] = []
    left = max_documents
    for f in _local_files(corpus):
        kind = FILE_KINDS[f.suffix]
        if kind == "parquet":
            new, used = _parquet_units(str(f), kind, text_column, left, len(units))
        else:
            new, used = _text_units(f, kind, text_column, left, len(units), unit_bytes)
        units += new
        if max_documents:
            left -= used
            if left <= 0:
                break
    return units


def source_identity(corpus: str, *, text_column: str = "text", hub_split: str = "train", hub_revision: str = "",
                    cache_dir: str | None = None) -> dict:
    """What names the source, without reading its text: O(1) in the corpus size."""
    if corpus == "synthetic":
        return {"kind": "synthetic"}
    if corpus == "planted" or corpus.startswith("planted:"):
        from trainables.data.planted import PLANTED_VERSION

        return {"kind": "planted", **planted_options(corpus), "version": PLANTED_VERSION}
    if corpus == "builtin":
        from trainables.data.builtin import builtin_corpus_sha256

        return {"kind": "builtin", "sha256": builtin_corpus_sha256(cache_dir)}
    if corpus.startswith("hub:"):
        import datasets

        name, _, config = corpus.removeprefix("hub:").partition(":")
        return {"kind": "hub", "name": name, "config": config, "split": hub_split, "revision": hub_revision or "main",
                "text_column": text_column, "datasets": datasets.__version__}
    files = _local_files(corpus)
    return {"kind": "files", "text_column": text_column,
            "files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]}


def load_documents(corpus: str, *, text_column: str = "text", hub_split: str = "train",
                   max_documents: int = 0) -> list[Document]:
    """Every document of a source in memory (small corpora, ``describe``); training reads prepared shards."""
    docs = [Document(f"{u.kind}:{u.id}:{i}", Path(u.path).name if u.kind not in ("hub", "synthetic", "planted") else u.kind, s)
            for u in list_units(corpus, text_column=text_column, hub_split=hub_split, max_documents=max_documents)
            for i, s in enumerate(read_unit(u, text_column))]
    if not docs:
        raise CorpusError(f"corpus {corpus!r} has no documents with text; nothing to train on")
    return docs


__all__ = ["CorpusError", "Document", "Unit", "byte_ranges", "language_of", "list_units", "load_documents",
           "planted_options",
           "read_unit", "source_identity", "synthetic_documents", "text_to_sentences"]

