"""The prepared corpus on storage: token shards, global offsets and a manifest, memory-mapped by trials.

    <root>/<fingerprint>/
        tokenizer/                   the WordPiece every trial of this corpus uses (written first)
        shard-00000.tokens.bin       flat token ids of the shard's documents (uint16 if the vocabulary fits)
        shard-00000.sentences.npy    int64 (n_sentences + 1): token offsets of the shard's sentences
        shard-00000.documents.npy    int64 (n_documents + 1): sentence offsets of the shard's documents
        shard-00000.done.json        the shard's counts and checksum, written after its data (resume marker)
        index.sentences.npy          int64 (N_sentences + 1): global token offset of every sentence
        index.documents.npy          int64 (N_documents + 1): global sentence offset of every document
        heldout.npy                  int64: the held-out documents (intrinsic evaluation), fixed here
        manifest.json                written last: the directory is complete iff it exists

A document never spans shards, and sentences of a document are consecutive in its shard's token file,
so any span of consecutive sentences is one slice of one memory-mapped array. ``root`` may be a local
path, ``file://``, ``s3://`` or ``gs://`` (pyarrow filesystems); trials read from a local copy.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from trainables.data.text import CorpusError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a file:// / s3:// / gs:// URI."""
    if "://" in uri:
        try:
            return pafs.FileSystem.from_uri(uri)
        except Exception as err:  # pyarrow raises several classes for a bad or unsupported URI
            raise CorpusError(f"storage {uri!r} cannot be opened: {str(err).splitlines()[0]}; allowed: a "
                              "local path, file://, s3:// or gs://") from None
    return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())


def is_local(uri: str) -> bool:
    """A plain path: memory-mapped where it is. URIs (file:// included) are read through their
    filesystem and copied to the node's cache first, as s3:// and gs:// are."""
    return "://" not in uri


HEAD_RESOURCE = "node:__internal_head__"  # the resource Ray gives the head node alone


def check_shared_storage(storage: str, nodes: list[dict]) -> None:
    """Refuse a local ``--storage`` folder on a Ray cluster where work runs on machines other than the
    driver's: more than one node, or a head with no CPUs (the cluster configs' head, which schedules no
    trials). Ray Data would write the prepared shards on a worker's disk and the driver read them from its
    own; Tune's and Train's checkpoints would land on disks no other node sees. ``nodes`` are ``ray.nodes()``;
    a URI (s3://, gs://, or file:// for a filesystem every node mounts at that path) is the user's word
    that every node reaches it."""
    if not is_local(storage):
        return
    alive = [n for n in nodes if n.get("Alive", n.get("alive"))]
    head = next((n for n in alive if HEAD_RESOURCE in n.get("Resources", {})), None)
    if len(alive) > 1:
        why = f"this Ray cluster has {len(alive)} nodes, and every node reads and writes the storage"
    elif head is not None and not head.get("Resources", {}).get("CPU"):
        why = "this Ray cluster's head has no CPUs, so trials and the data preparation run on other nodes"
    else:
        return
    raise CorpusError(f"--storage {storage} is a folder on one machine's disk, but {why}; use "
                      "--storage s3://BUCKET/PATH|gs://BUCKET/PATH (or file:///PATH on a filesystem every node "
                      "mounts at that path)")


def local_path(uri: str) -> Path:
    return Path(filesystem(uri)[1]) if is_local(uri) else Path(uri)


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a whole file: to a temporary name then moved into place on a local filesystem."""
    write_chunks(fs, path, [data])


def write_chunks(fs: pafs.FileSystem, path: str, chunks) -> None:
    """Write a file given as an iterable of byte strings (never all in memory at once): to a temporary
    name then moved into place on a local filesystem, so a reader sees it whole or not at all."""
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:
        fs.create_dir(posixpath.dirname(path), recursive=True)
    tmp = f"{path}.tmp{os.getpid()}" if local else path
    with fs.open_output_stream(tmp) as f:
        for chunk in chunks:
            f.write(chunk)
    if tmp != path:
        fs.move(tmp, path)


def npy_header(n: int, dtype) -> bytes:
    """The header ``np.save`` writes before a 1-d array of ``n`` items of ``dtype``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": (n,)})
    return buf.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read())
    except (FileNotFoundError, OSError):
        return None


@dataclass
class ShardMeta:
    """What a shard holds; written to ``shard-N.done.json`` after its data."""

    shard: int
    n_tokens: int
    n_sentences: int
    n_documents: int
    sha256: str  # of the token file
    sources: dict[str, str] = field(default_factory=dict)  # source file -> content sha256 (local files)
    unit: str = ""  # the source unit it holds (``prepare.unit_key``); a resume redoes a shard of another unit
    # source -> {sentences_exact, sentences_ngram, documents_dropped}: what decontamination removed from it
    decontamination: dict[str, dict[str, int]] = field(default_factory=dict)


def shard_name(i: int, suffix: str) -> str:
    return f"shard-{i:05d}.{suffix}"


def write_shard(dir_uri: str, shard: int, tokens: np.ndarray, sentence_lengths: np.ndarray,
                doc_sentences: np.ndarray, sources: dict[str, str] | None = None, unit: str = "",
                decontamination: dict[str, dict[str, int]] | None = None) -> ShardMeta:
    """Write one shard (flat token ids, the length of each sentence, the number of sentences of each
    document); the done marker is written last, so a half-written shard is redone on resume."""
    fs, base = filesystem(dir_uri)
    sentences = np.zeros(len(sentence_lengths) + 1, np.int64)
    np.cumsum(sentence_lengths, out=sentences[1:])
    documents = np.zeros(len(doc_sentences) + 1, np.int64)
    np.cumsum(doc_sentences, out=documents[1:])
    if int(sentences[-1]) != len(tokens) or int(documents[-1]) != len(sentence_lengths):
        raise ValueError(f"shard {shard}: {len(tokens)} tokens, {len(sentence_lengths)} sentences and "
                         f"{int(documents[-1])} sentences in documents do not add up")
    data = np.ascontiguousarray(tokens).tobytes()
    write_bytes(fs, posixpath.join(base, shard_name(shard, "tokens.bin")), data)
    write_bytes(fs, posixpath.join(base, shard_name(shard, "sentences.npy")), npy_bytes(sentences))
    write_bytes(fs, posixpath.join(base, shard_name(shard, "documents.npy")), npy_bytes(documents))
    meta = ShardMeta(shard, len(tokens), len(sentence_lengths), len(doc_sentences),
                     hashlib.sha256(data).hexdigest(), dict(sources or {}), unit, dict(decontamination or {}))
    write_bytes(fs, posixpath.join(base, shard_name(shard, "done.json")), json.dumps(meta.__dict__).encode())
    return meta


def done_shards(dir_uri: str) -> dict[int, ShardMeta]:
    """The shards whose done marker exists (a resumed preparation skips them)."""
    fs, base = filesystem(dir_uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError:
        return {}
    out = {}
    for info in infos:
        name = posixpath.basename(info.path)
        if name.startswith("shard-") and name.endswith(".done.json"):
            meta = read_json(fs, info.path)
            if meta:
                out[int(meta["shard"])] = ShardMeta(**meta)
    return out


def read_npy(fs: pafs.FileSystem, path: str) -> np.ndarray:
    with fs.open_input_stream(path) as f:
        return np.load(io.BytesIO(f.read()), allow_pickle=False)


def finalize(dir_uri: str, shards: list[ShardMeta], heldout_fraction: float, split_seed: int,
             manifest: dict[str, Any]) -> dict:
    """Global offsets of every sentence and document, the held-out documents, then the manifest. The
    sentence offsets (the largest array) are streamed shard by shard; the document offsets are kept,
    as the held-out split needs them."""
    fs, base = filesystem(dir_uri)
    shards = sorted(shards, key=lambda m: m.shard)
    n_sent, n_doc = sum(m.n_sentences for m in shards), sum(m.n_documents for m in shards)
    documents = np.zeros(n_doc + 1, np.int64)
    sent_base = doc_base = 0
    for m in shards:
        d = read_npy(fs, posixpath.join(base, shard_name(m.shard, "documents.npy")))
        documents[doc_base:doc_base + m.n_documents + 1] = d + sent_base
        sent_base, doc_base = sent_base + m.n_sentences, doc_base + m.n_documents
    usable = np.flatnonzero(np.diff(documents) >= 2)  # a pair needs two sentences: others are skipped for all
    if len(usable) < 4:
        raise CorpusError(f"corpus has {len(usable)} document(s) with two or more sentences; at least 4 are "
                          "needed (pairs need two documents to train on and two held out); documents are "
                          "separated by blank lines")
    order = np.random.default_rng(split_seed).permutation(len(usable))
    heldout = np.sort(usable[order[:max(2, int(round(heldout_fraction * len(usable))))]])
    n_tokens = sum(m.n_tokens for m in shards)

    def sentence_offsets():
        yield npy_header(n_sent + 1, np.int64)
        tok_base = 0
        for m in shards:
            s = read_npy(fs, posixpath.join(base, shard_name(m.shard, "sentences.npy")))
            yield (s[:-1] + tok_base).astype(np.int64).tobytes()  # each shard's end is the next one's start
            tok_base += m.n_tokens
        yield np.array([n_tokens], np.int64).tobytes()

    write_chunks(fs, posixpath.join(base, "index.sentences.npy"), sentence_offsets())
    write_bytes(fs, posixpath.join(base, "index.documents.npy"), npy_bytes(documents))
    write_bytes(fs, posixpath.join(base, "heldout.npy"), npy_bytes(heldout.astype(np.int64)))
    full = {**manifest, "format_version": FORMAT_VERSION, "tokens": int(n_tokens), "sentences": n_sent,
            "documents": n_doc, "usable_documents": int(len(usable)), "skipped_documents": int(n_doc - len(usable)),
            "heldout_documents": int(len(heldout)),
            "shards": [dict(m.__dict__) for m in shards]}
    write_bytes(fs, posixpath.join(base, MANIFEST), json.dumps(full, indent=1, sort_keys=True).encode())
    return full


class PreparedCorpus:
    """A prepared corpus opened for reading: memory-mapped offsets and shards (local files only).

    ``train_docs`` / ``heldout_docs`` are global document indices (documents with two or more
    sentences); ``span(starts, ends)`` gathers token slices by global token offsets."""

    def __init__(self, path: str | os.PathLike, expect: dict[str, Any] | None = None):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if not mpath.exists():
            raise CorpusError(f"{self.path} holds no {MANIFEST}: the preparation did not finish; run "
                              "`python -m trainables.data prepare` (it resumes) or delete the folder")
        try:
            self.manifest = json.loads(mpath.read_text())
        except ValueError:
            raise CorpusError(f"{mpath} is not valid JSON; delete {self.path} and prepare again") from None
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise CorpusError(f"{self.path} has prepared-data format {self.manifest.get('format_version')}, this "
                              f"code reads {FORMAT_VERSION}; delete the folder and prepare again")
        for key, value in (expect or {}).items():
            if self.manifest.get(key) != value:
                raise CorpusError(f"{self.path} was prepared from {key}={self.manifest.get(key)!r}, not {value!r}: "
                                  "it belongs to another corpus or tokenizer; prepare again or point data.prepared "
                                  "at the right folder")
        self.dtype = np.dtype(self.manifest["token_dtype"])
        self.sentences = self._npy("index.sentences.npy")
        self.documents = self._npy("index.documents.npy")
        self.heldout_docs = self._npy("heldout.npy")
        usable = np.flatnonzero(np.diff(self.documents) >= 2)
        self.train_docs = np.setdiff1d(usable, self.heldout_docs)
        metas = self.manifest["shards"]
        self.shard_bases = np.cumsum([0] + [m["n_tokens"] for m in metas])
        self._shards = []
        for m in metas:
            p = self.path / shard_name(m["shard"], "tokens.bin")
            size = p.stat().st_size if p.exists() else -1
            if size != m["n_tokens"] * self.dtype.itemsize:
                raise CorpusError(f"{p} is missing or has {size} bytes, {m['n_tokens'] * self.dtype.itemsize} "
                                  f"expected: the prepared data is damaged; delete {self.path} and prepare again")
            self._shards.append(np.memmap(p, dtype=self.dtype, mode="r") if m["n_tokens"] else
                                np.zeros(0, self.dtype))
        self._tokenizer = None

    def _npy(self, name: str) -> np.ndarray:
        p = self.path / name
        try:
            return np.load(p, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise CorpusError(f"{p} cannot be read ({str(err).splitlines()[0]}); delete {self.path} and prepare "
                              "again") from None

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from trainables.data.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.path / "tokenizer")
        return self._tokenizer

    def doc_sentences(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first sentence, end sentence) of each document."""
        return np.asarray(self.documents[docs]), np.asarray(self.documents[docs + 1])

    def span(self, start: int, end: int) -> np.ndarray:
        """Tokens [start, end) by global token offset; the span lies inside one document."""
        s = int(np.searchsorted(self.shard_bases, start, side="right")) - 1
        base = int(self.shard_bases[s])
        return self._shards[s][start - base:end - base]

    @property
    def train_tokens(self) -> int:
        first, end = self.doc_sentences(self.train_docs)
        return int((self.sentences[end] - self.sentences[first]).sum())
