"""Preparation, once per corpus + tokenizer fingerprint: source -> sentences -> WordPiece -> shards.

    prepare_corpus(cfg.data, vocab_size=8192, engine="ray")   # the sweep driver, on every CPU of the cluster
    open_prepared(cfg)                                        # a trial: prepares with local processes if needed

1. The fingerprint names the preparation from the source's identity (``sources.source_identity``: file
   names, sizes and mtimes, the built-in checksum, a hub name and revision) and the tokenizer settings,
   so a warm start reads no text at all.
2. The tokenizer is trained on a bounded, deterministic sample (the first ``data.tokenizer_sample``
   sentences in source order), or loaded from ``data.tokenizer_dir``, and written first.
3. Each unit of the source (a byte range of a text file cut at document boundaries, parquet row
   groups, a hub shard) is streamed, split into sentences and tokenized a batch at a time by one
   worker -- a Ray Data task (``engine="ray"``), a local process, or this process -- and written as one
   shard with its done marker, so no process holds more than one unit's tokens, whatever the corpus
   size. A killed preparation resumes: finished shards are kept (if the marker names the same unit),
   half-written ones are redone.
   Before tokenizing, each unit is decontaminated (``trainables.data.decontam``): sentences that are, or
   share a 13-word n-gram with, dev/test text of the evaluation tasks (``data.decontaminate``; by default
   the run's ``finetune.tasks``) are removed, documents left empty dropped, and counted in the shard's marker.
   The evaluation keys are built once, written into the folder beside the tokenizer (a resume reuses them),
   and read by every worker. The requested tasks are part of the fingerprint (a preparation against other
   tasks is another folder); which of them could be loaded offline, and so were checked, is in the manifest.
4. The global offsets, the held-out documents and the manifest are written last.

The prepared folder is ``<data.prepared_root or cache>/prepared/<fingerprint>/`` (local, file://,
s3:// or gs://); trials on other nodes copy it to their local cache once and memory-map it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import posixpath
import shutil
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from trainables.data import shards
from trainables.data.sources import Unit, language_of, list_units, read_unit, source_identity
from trainables.data.text import CorpusError

log = logging.getLogger(__name__)

SPLIT_SEED = 0  # the held-out documents are fixed by the corpus, the same for every seed and variant
ENGINES = ("auto", "ray", "local")


def prepared_root(data, cache_dir: str | None = None) -> str:
    """Where prepared corpora live: ``data.prepared_root``, else ``<cache>/prepared``."""
    from trainables.data.tokenizer import cache_root

    return data.prepared_root or str(cache_root(cache_dir or data.cache_dir) / "prepared")


def tokenizer_spec(data, vocab_size: int, tokenizer_dir: str = "") -> dict:
    """The tokenizer part of the fingerprint: a given tokenizer by its content, or how one is trained."""
    if tokenizer_dir:
        p = Path(tokenizer_dir).expanduser() / "tokenizer.json"
        if not p.exists():
            raise CorpusError(f"tokenizer directory {str(p.parent)!r} has no tokenizer.json; it needs the files "
                              "written by tokenizer.save_pretrained (tokenizer.json, tokenizer_config.json)")
        return {"given": hashlib.sha256(p.read_bytes()).hexdigest()}
    from trainables.data.tokenizer import TOKENIZER_VERSION

    return {"wordpiece": vocab_size, "lowercase": data.lowercase, "sample": data.tokenizer_sample,
            "version": TOKENIZER_VERSION}


def decontamination_tasks(cfg) -> list[str]:
    """The evaluation tasks a run's corpus is decontaminated against: ``data.decontaminate`` = finetune (the
    run's ``finetune.tasks``), none, or task names/groups as ``finetune.tasks`` takes them."""
    from trainables.tasks import TaskError, resolve_tasks

    spec = cfg.data.decontaminate.strip()
    if spec == "none":
        return []
    try:
        return resolve_tasks(cfg.finetune.tasks if spec == "finetune" else spec)
    except TaskError as e:
        what = f"finetune.tasks={cfg.finetune.tasks!r}" if spec == "finetune" else f"data.decontaminate={spec!r}"
        raise CorpusError(f"{what}: {e}; data.decontaminate also allows finetune (the default) and none") from None


def _decontaminates(data, tasks: Sequence[str]) -> bool:
    """Preparation decontaminates every corpus but the built-in one (cleaned when it is built, against the
    six built-in tasks: its preparation and fingerprint stay as they were)."""
    return bool(tasks) and data.corpus != "builtin"


def fingerprint_of(data, vocab_size: int, tokenizer_dir: str = "", decontaminate: Sequence[str] = ()
                   ) -> tuple[str, dict]:
    """(fingerprint, what it hashes): the source's identity, the subset, the tokenizer, the split, and the
    evaluation tasks it is decontaminated against (by name and version: O(1), the same on every node)."""
    what = {"source": source_identity(data.corpus, text_column=data.text_column, hub_split=data.hub_split,
                                      hub_revision=data.hub_revision, cache_dir=data.cache_dir or None),
            "max_documents": data.max_documents, "tokenizer": tokenizer_spec(data, vocab_size, tokenizer_dir),
            "heldout_fraction": data.heldout_fraction, "split_seed": SPLIT_SEED, "format": shards.FORMAT_VERSION}
    if _decontaminates(data, decontaminate):
        from trainables.data.decontam import DECON_VERSION, NGRAM
        from trainables.tasks.eval_texts import task_identity

        what["decontamination"] = {"version": DECON_VERSION, "ngram": NGRAM,
                                   "tasks": [task_identity(t, language_of(data.corpus))
                                             for t in sorted(set(decontaminate))]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16], what


def _sample_sentences(units: list[Unit], text_column: str, limit: int) -> Iterator[str]:
    n = 0
    for unit in units:
        for doc in read_unit(unit, text_column):
            for s in doc:
                yield s
                n += 1
                if n >= limit:
                    return


def _write_tokenizer(dir_uri: str, units: list[Unit], data, vocab_size: int, tokenizer_dir: str) -> str:
    """The tokenizer's JSON, written into the folder first (reused as it is when resuming)."""
    from trainables.data.tokenizer import load_tokenizer, train_wordpiece_on

    fs, base = shards.filesystem(dir_uri)
    existing = posixpath.join(base, "tokenizer", "tokenizer.json")
    if fs.get_file_info(existing).type == shards.pafs.FileType.File:
        with fs.open_input_stream(existing) as f:
            return f.read().decode()
    if tokenizer_dir:
        tok = load_tokenizer(tokenizer_dir)
    else:
        log.info("training WordPiece (vocab %d) on the corpus's sentences (at most %d)", vocab_size,
                 data.tokenizer_sample)
        tok = train_wordpiece_on(lambda: _sample_sentences(units, data.text_column, data.tokenizer_sample),
                                 vocab_size, data.lowercase)
    tmp = Path(shards.local_path(dir_uri).parent if shards.is_local(dir_uri) else "/tmp") / f".tok{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tok.save_pretrained(str(tmp))
    for f in sorted(tmp.iterdir()):  # tokenizer.json last: its presence means the tokenizer is whole
        if f.name != "tokenizer.json":
            shards.write_bytes(fs, posixpath.join(base, "tokenizer", f.name), f.read_bytes())
    text = (tmp / "tokenizer.json").read_text()
    shards.write_bytes(fs, existing, text.encode())
    shutil.rmtree(tmp, ignore_errors=True)
    return text


DECON_FILE, DECON_GRAMS = "decontamination.json", "decontamination.grams.npy"


def _write_decontamination(dir_uri: str, tasks: Sequence[str], cache_dir: str | None, language: int = 0) -> dict:
    """The evaluation keys (sentences and n-grams of the tasks' dev/test text), written into the folder
    once (the JSON last: its presence means the keys are whole; a resume reuses them). Returns what was
    checked: tasks loaded, tasks that could not be loaded offline, and the key counts."""
    from trainables.data import decontam
    from trainables.tasks.eval_texts import load_eval_texts

    fs, base = shards.filesystem(dir_uri)
    path = posixpath.join(base, DECON_FILE)
    existing = shards.read_json(fs, path)
    if existing:
        return {k: v for k, v in existing.items() if k not in ("keys", "vocab")}
    loaded, missing = load_eval_texts(sorted(set(tasks)), cache_dir, language)
    for name, why in missing.items():
        log.warning("decontamination: task %s is not checked: %s", name, why)
    keys = sorted(decontam.contamination_keys(loaded))
    vocab, grams = decontam.build_ngrams(decontam.eval_texts(loaded))
    shards.write_bytes(fs, posixpath.join(base, DECON_GRAMS), shards.npy_bytes(grams))
    meta = {"version": decontam.DECON_VERSION, "method": f"exact normalised sentence + {decontam.NGRAM}-gram overlap",
            "ngram": decontam.NGRAM, "tasks_requested": sorted(set(tasks)), "tasks_checked": sorted(loaded),
            "tasks_unavailable": missing, "eval_sentence_keys": len(keys), "eval_ngrams": int(len(grams))}
    shards.write_bytes(fs, path, json.dumps({**meta, "keys": keys, "vocab": vocab}).encode())
    return meta


_DECONTAMINATORS: dict[str, object] = {}  # per worker process: the keys are read once per folder


def _decontaminator(dir_uri: str):
    from trainables.data.decontam import Decontaminator

    if dir_uri not in _DECONTAMINATORS:
        fs, base = shards.filesystem(dir_uri)
        meta = shards.read_json(fs, posixpath.join(base, DECON_FILE))
        if meta is None:
            raise CorpusError(f"{dir_uri}: {DECON_FILE} is missing; delete the folder and prepare again")
        grams = shards.read_npy(fs, posixpath.join(base, DECON_GRAMS))
        _DECONTAMINATORS.clear()
        _DECONTAMINATORS[dir_uri] = (meta["keys"], meta["vocab"], grams, meta["ngram"])
    keys, vocab, grams, n = _DECONTAMINATORS[dir_uri]
    return Decontaminator(keys, vocab, grams, n)


def source_name(unit: Unit) -> str:
    """What the manifest counts decontamination per: the file, the hub dataset, or the generator."""
    return unit.path if unit.kind in ("txt", "jsonl", "parquet") else \
        f"hub:{unit.path}" + (f":{unit.config}" if unit.config else "") if unit.kind == "hub" else unit.kind


ENCODE_BATCH = 4096  # sentences encoded at a time: a unit's Encoding objects never all exist at once


def unit_key(unit: Unit) -> str:
    """What a shard was made from, kept in its done marker: a resume reuses it only for the same unit."""
    return json.dumps([unit.kind, unit.path, list(unit.groups), unit.start, unit.end, unit.limit, unit.config,
                       unit.split, unit.shard, unit.n_shards])


def _encode(tok, docs: Iterator[list[str]], dtype: np.dtype) -> tuple[np.ndarray, list[int], list[int]]:
    """(flat token ids, tokens per kept sentence, kept sentences per kept document) of a stream of
    documents, encoded in batches of whole documents; empty sentences and documents are dropped."""
    parts, lengths, doc_sentences, batch = [], [], [], []

    def flush():
        encoded = tok.encode_batch([s for d in batch for s in d], add_special_tokens=False)
        ids, k = [], 0
        for d in batch:
            kept = [e.ids for e in encoded[k:k + len(d)] if e.ids]
            k += len(d)
            if kept:
                ids += kept
                doc_sentences.append(len(kept))
        lengths.extend(len(i) for i in ids)
        parts.append(np.fromiter((t for i in ids for t in i), dtype=dtype, count=sum(len(i) for i in ids)))
        batch.clear()

    n = 0
    for d in docs:
        batch.append(d)
        n += len(d)
        if n >= ENCODE_BATCH:
            flush()
            n = 0
    if batch:
        flush()
    return (np.concatenate(parts) if parts else np.zeros(0, dtype)), lengths, doc_sentences


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):  # in blocks: the file may be far larger than memory
            h.update(block)
    return h.hexdigest()


def tokenize_unit(unit: dict, dir_uri: str, tokenizer_json: str, vocab_size: int, text_column: str,
                  decontaminate: bool = False) -> dict:
    """One worker's job: stream a unit, decontaminate it (with the keys in the folder), tokenize its
    sentences, write its shard; returns the shard's meta. Imports nothing heavy (a Ray Data task or a local
    process runs it)."""
    from tokenizers import Tokenizer

    groups = unit.get("groups")
    unit = Unit(**{**unit, "groups": tuple(int(g) for g in groups) if groups is not None else ()})
    tok = Tokenizer.from_str(tokenizer_json)
    docs, cleaner = read_unit(unit, text_column), None
    if decontaminate:
        cleaner = _decontaminator(dir_uri)
        docs = cleaner.clean(docs)
    tokens, lengths, doc_sentences = _encode(tok, docs, shards.token_dtype(vocab_size))
    sources = {}
    if unit.kind in ("txt", "jsonl", "parquet") and unit.groups[:1] in ((), (0,)) and unit.start == 0:
        sources[unit.path] = _file_sha256(unit.path)  # once per file: by the unit that starts it
    meta = shards.write_shard(dir_uri, unit.id, tokens, np.asarray(lengths, np.int64),
                              np.asarray(doc_sentences, np.int64), sources, unit=unit_key(unit),
                              decontamination={source_name(unit): cleaner.counts} if cleaner else None)
    return dict(meta.__dict__)


def _run_units(todo: list[Unit], dir_uri: str, tok_json: str, vocab_size: int, text_column: str, engine: str,
               workers: int, decontaminate: bool = False) -> list[dict]:
    args = (dir_uri, tok_json, vocab_size, text_column, decontaminate)
    if engine == "ray":
        import ray

        with _quiet_ray_data(ray.data.DataContext.get_current()):
            ds = ray.data.from_items([{"unit": json.dumps(u._asdict())} for u in todo],
                                     override_num_blocks=max(len(todo), 1))
            rows = ds.map(lambda row: {"meta": json.dumps(tokenize_unit(json.loads(row["unit"]), *args))},
                          num_cpus=1).take_all()
        return [json.loads(r["meta"]) for r in rows]
    if workers <= 1 or len(todo) <= 1:
        return [tokenize_unit(u._asdict(), *args) for u in todo]
    import concurrent.futures
    import multiprocessing

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the processes are the parallelism
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(pool.map(tokenize_unit, [u._asdict() for u in todo], *[[a] * len(todo) for a in args]))


@contextlib.contextmanager
def _logger_level(name: str, level: int):
    """``logging.getLogger(name)`` at ``level`` for the duration, then back to its own level."""
    logger = logging.getLogger(name)
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


@contextlib.contextmanager
def _quiet_ray_data(ctx, interactive: bool | None = None):
    """Ray Data's progress reports off while ``ctx`` (a ``ray.data.DataContext``) runs, unless stdout is a
    terminal. Where it is not (a log file, a CI job), Ray Data logs a "Running Dataset ... Total Progress ...
    Active & requested resources" block every 10 s and the execution plan at the start; the preparation's own
    lines ("preparing ...", "prepared ...") say what happens. On a terminal its progress bars stay."""
    interactive = sys.stdout.isatty() if interactive is None else interactive
    with contextlib.ExitStack() as stack:
        # "Dataset ... execution finished in N seconds": Ray Data's own handler prints it even on a terminal;
        # the preparation's "prepared ..." line (in the run's log) says the same
        stack.enter_context(_logger_level("ray.data._internal.execution.streaming_executor", logging.WARNING))
        if not interactive:
            saved = ctx.enable_progress_bars, ctx.print_on_execution_start
            ctx.enable_progress_bars, ctx.print_on_execution_start = False, False
            stack.callback(lambda: setattr(ctx, "enable_progress_bars", saved[0]))
            stack.callback(lambda: setattr(ctx, "print_on_execution_start", saved[1]))
            # and not its "Progress bars disabled. To enable, set ..." warning: they were turned off on purpose
            stack.enter_context(_logger_level("ray.data._internal.progress", logging.ERROR))
        yield


@contextlib.contextmanager
def _lock(root: str, fp: str):
    """One preparation of a fingerprint at a time on this machine (local roots); others wait for it."""
    if not shards.is_local(root):
        yield
        return
    path = shards.local_path(root) / f".{fp}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check_writable(root: str) -> None:
    fs, base = shards.filesystem(root)
    probe = posixpath.join(base, f".write-probe-{os.getpid()}")
    try:
        fs.create_dir(base, recursive=True)
        shards.write_bytes(fs, probe, b"ok")
        fs.delete_file(probe)
    except OSError as err:
        raise CorpusError(f"storage {root!r} is not writable ({str(err).splitlines()[0]}); choose another "
                          "--storage or data.prepared_root, or fix its permissions") from None


def prepare_corpus(data, vocab_size: int, *, tokenizer_dir: str = "", engine: str = "auto", workers: int = 0,
                   cache_dir: str | None = None, decontaminate: Sequence[str] = ()) -> str:
    """Prepare (or find prepared) ``data.corpus``, decontaminated against the dev/test text of the tasks
    ``decontaminate`` (names; ``decontamination_tasks(cfg)`` gives a run's); returns the prepared folder's URI."""
    if engine not in ENGINES:
        raise CorpusError(f"engine={engine!r} is not valid; allowed: {', '.join(ENGINES)}")
    root = prepared_root(data, cache_dir)
    fp, what = fingerprint_of(data, vocab_size, tokenizer_dir, decontaminate)
    dir_uri = f"{root.rstrip('/')}/{fp}"
    fs, base = shards.filesystem(dir_uri)
    if shards.read_json(fs, posixpath.join(base, shards.MANIFEST)):
        return dir_uri
    _check_writable(root)
    with _lock(root, fp):
        if shards.read_json(fs, posixpath.join(base, shards.MANIFEST)):  # another process finished it
            return dir_uri
        t0 = time.perf_counter()
        units = list_units(data.corpus, text_column=data.text_column, hub_split=data.hub_split,
                           max_documents=data.max_documents, cache_dir=data.cache_dir or None)
        if not units:
            raise CorpusError(f"corpus {data.corpus!r} has no documents with text; nothing to train on")
        fs.create_dir(base, recursive=True)
        tok_json = _write_tokenizer(dir_uri, units, data, vocab_size, tokenizer_dir)
        decon = _write_decontamination(dir_uri, decontaminate, data.cache_dir or None, language_of(data.corpus)) \
            if _decontaminates(data, decontaminate) else None
        # a marker of another unit (a preparation begun by code that cut the source otherwise) is redone
        markers = shards.done_shards(dir_uri)
        done = {u.id: markers[u.id] for u in units if u.id in markers and markers[u.id].unit == unit_key(u)}
        todo = [u for u in units if u.id not in done]
        if engine == "auto":
            engine = "ray" if _ray_running() else "local"
        n = workers or os.cpu_count() or 1
        log.info("preparing %s: %d units (%d already done) on %s with %s", data.corpus, len(units), len(done),
                 engine, "the cluster" if engine == "ray" else f"{n} process(es)")
        metas = _run_units(todo, dir_uri, tok_json, vocab_size, data.text_column, engine, n, decon is not None)
        done.update({m["shard"]: shards.ShardMeta(**m) for m in metas})
        if not sum(done[u.id].n_documents for u in units):
            raise CorpusError(f"corpus {data.corpus!r} has no documents with text; nothing to train on")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(tok_json)
        manifest = {"fingerprint": fp, "identity": what, "corpus": data.corpus, "vocab_size": tok.get_vocab_size(),
                    "token_dtype": shards.token_dtype(vocab_size).name,
                    "tokenizer_sha256": hashlib.sha256(tok_json.encode()).hexdigest(), "engine": engine,
                    "prepare_seconds": round(time.perf_counter() - t0, 2),
                    "decontamination": _decontamination_summary(data, decon, [done[u.id] for u in units])}
        full = shards.finalize(dir_uri, [done[u.id] for u in units], data.heldout_fraction, SPLIT_SEED, manifest)
        log.info("%s", decontamination_line(manifest["decontamination"]))
        log.info("prepared %s: %d documents, %d sentences, %d tokens in %.1f s -> %s", data.corpus,
                 full["documents"], full["sentences"], full["tokens"], full["prepare_seconds"], dir_uri)
    return dir_uri


def _decontamination_summary(data, decon: dict | None, metas: list[shards.ShardMeta]) -> dict:
    """The manifest's record: what was checked, and per source and in total what was removed."""
    if data.corpus == "builtin":
        from trainables.data.builtin import describe_builtin
        from trainables.data.builtin_build import BUILTIN_TASKS

        stats = describe_builtin(data.cache_dir or None)
        return {"applied": "when the built-in corpus was built (trainables.data.builtin)",
                "method": "exact normalised sentence", "tasks_checked": sorted(BUILTIN_TASKS),
                "totals": {"sentences_exact": stats.get("decontaminated_sentences_removed", 0), "sentences_ngram": 0,
                           "documents_dropped": stats.get("decontaminated_documents_dropped", 0)}}
    if decon is None:
        return {"applied": "no evaluation tasks to check against: data.decontaminate=none", "tasks_checked": []}
    per: dict[str, dict[str, int]] = {}
    for m in metas:
        for src, counts in (m.decontamination or {}).items():
            acc = per.setdefault(src, dict.fromkeys(counts, 0))
            for k, v in counts.items():
                acc[k] = acc.get(k, 0) + v
    totals = {k: sum(c.get(k, 0) for c in per.values()) for k in ("sentences_exact", "sentences_ngram",
                                                                  "documents_dropped")}
    return {"applied": "at preparation", **decon, "totals": totals, "sources": per}


def decontamination_line(d: dict | None) -> str:
    """One line for logs and reports: what was removed, checked against how many tasks."""
    if not d:
        return "decontamination: not recorded (prepared by an older version)"
    tasks = d.get("tasks_checked", [])
    if not tasks and "totals" not in d:
        return f"decontamination: none ({d.get('applied', '')})"
    t = d.get("totals", {})
    removed = t.get("sentences_exact", 0) + t.get("sentences_ngram", 0)
    line = (f"decontamination: {removed} corpus sentences matching dev/test text of {len(tasks)} task(s) removed "
            f"({t.get('sentences_exact', 0)} exact, {t.get('sentences_ngram', 0)} by n-gram; "
            f"{t.get('documents_dropped', 0)} documents left empty dropped)")
    missing = d.get("tasks_unavailable") or {}
    if missing:
        line += f"; not checked (not loadable offline): {', '.join(sorted(missing))}"
    return line


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def local_copy(dir_uri: str, cache_dir: str | None = None) -> Path:
    """A local folder holding the prepared data: the folder itself, or this node's copy of a remote one."""
    if shards.is_local(dir_uri):
        return shards.local_path(dir_uri)
    import pyarrow.fs as pafs

    from trainables.data.tokenizer import cache_root

    target = cache_root(cache_dir) / "prepared-mirror" / dir_uri.rstrip("/").rsplit("/", 1)[-1]
    if (target / shards.MANIFEST).exists():
        return target
    with _lock(str(target.parent), target.name):
        if not (target / shards.MANIFEST).exists():
            fs, base = shards.filesystem(dir_uri)
            tmp = target.with_name(target.name + f".copy{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            pafs.copy_files(base, str(tmp), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
    return target


def run_tokenizer_dir(cfg) -> str:
    """The tokenizer a run's corpus is prepared with: ``data.tokenizer_dir``, else the checkpoint it continues
    from (continued pretraining keeps the model's vocabulary), else a new one (empty)."""
    return cfg.data.tokenizer_dir or cfg.run.init_checkpoint


def prepare_run(cfg, data=None, *, engine: str = "auto", workers: int = 0) -> str:
    """``prepare_corpus`` as a run of ``cfg`` needs it (its tokenizer, decontaminated against its evaluation
    tasks); ``data`` replaces ``cfg.data`` (e.g. another prepared_root). The one way the sweeps, the
    ``prepare`` command, the benchmarks and the trials prepare, so they all find the same folder."""
    d = data if data is not None else cfg.data
    return prepare_corpus(d, cfg.model.vocab_size, tokenizer_dir=run_tokenizer_dir(cfg), engine=engine,
                          workers=workers, decontaminate=decontamination_tasks(cfg))


def open_prepared(cfg, *, engine: str = "auto", workers: int = 0) -> shards.PreparedCorpus:
    """The prepared corpus of ``cfg`` (preparing it first if needed), opened from a local folder."""
    d = cfg.data
    if d.prepared:
        fp, _ = fingerprint_of(d, cfg.model.vocab_size, run_tokenizer_dir(cfg), decontamination_tasks(cfg))
        return shards.PreparedCorpus(local_copy(d.prepared, d.cache_dir or None), expect={"fingerprint": fp})
    return shards.PreparedCorpus(local_copy(prepare_run(cfg, engine=engine, workers=workers), d.cache_dir or None))
