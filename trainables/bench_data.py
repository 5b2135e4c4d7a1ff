"""Data-path benchmark: ``python -m trainables.bench data --copies 1,4,16`` (see ``trainables.bench``).

For each k it builds a corpus of k copies of the built-in corpus (the sentences of every document
shuffled per copy, so no two copies tokenize alike) as parquet, then measures, each in a fresh process:

    cold_1w_s, cold_2w_s   preparation (tokenizer on its bounded sample, tokenizing, shards, index)
                           with 1 and with 2 local worker processes, pinned to as many cores;
                           tokens_per_s_per_core (on one core)
    warm_start_s           a trial's start when everything is cached: open the prepared corpus, this
                           seed's samples and the held-out sets, and build the first batch
    warm_peak_rss_gb       that trial process's peak resident memory
    pipeline_tokens_per_s  the input pipeline alone (layout + masking in the background loader, no
                           model) at batch 256 x sequence 128, what an accelerator would consume

Times are wall clock of whole processes on this machine; quote ratios measured side by side.

``python -m trainables.bench_data --one-file --copies 1,4,16`` measures instead what a user's own corpus
costs the preparing process: the same k copies written as ONE large text file (documents separated by a
blank line, one sentence per line) and as one parquet file, each prepared cold with one worker in a
fresh process (the tokenizing runs in that process), reporting its peak resident memory:

    txt_peak_rss_gb, parquet_peak_rss_gb    should stay flat in k: preparation streams byte-range units
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np


def write_copies(k: int, out: Path, cache_dir: str | None = None) -> Path:
    """k copies of the built-in corpus as one parquet file (row groups of 256 documents)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainables.data.builtin import builtin_corpus_path

    table = pq.read_table(builtin_corpus_path(cache_dir), columns=["sentences"])
    docs = table.column("sentences").to_pylist()
    path = out / f"copies{k}.parquet"
    writer = None
    for c in range(k):
        rng = np.random.default_rng(c)
        rows = [list(np.asarray(d, dtype=object)[rng.permutation(len(d))]) if c else list(d) for d in docs]
        part = pa.table({"sentences": pa.array(rows, pa.list_(pa.string()))})
        writer = writer or pq.ParquetWriter(path, part.schema)
        writer.write_table(part, row_group_size=256)
    writer.close()
    return path


def _copy_documents(k: int, cache_dir: str | None = None) -> Iterator[list[str]]:
    """The documents of k copies of the built-in corpus, sentences shuffled per copy after the first."""
    import pyarrow.parquet as pq

    from trainables.data.builtin import builtin_corpus_path

    docs = pq.read_table(builtin_corpus_path(cache_dir), columns=["sentences"]).column("sentences").to_pylist()
    for c in range(k):
        rng = np.random.default_rng(c)
        for d in docs:
            yield [d[i] for i in rng.permutation(len(d))] if c else list(d)


def write_one_text_file(k: int, out: Path, cache_dir: str | None = None) -> Path:
    """k copies of the built-in corpus as one .txt file: a sentence per line, a blank line between documents
    (the same shuffles as ``write_copies``), written as it goes."""
    path = out / f"copies{k}.txt"
    with open(path, "w", encoding="utf-8") as f:
        for sentences in _copy_documents(k, cache_dir):
            f.write("\n".join(s.replace("\n", " ") for s in sentences) + "\n\n")
    return path


def _child(args: list[str]) -> dict:
    """Run one measurement in a fresh process; returns its JSON line plus its wall time and peak RSS."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainables.bench_data", *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "child failed")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {**out, "process_s": time.perf_counter() - t0}


def _cfg(corpus: str, root: str, batch: int = 32):
    from trainables.presets import build_config

    return build_config("cpu-small", "mlm_only", [f"data.corpus={corpus}", "data.text_column=sentences",
                                                  f"data.prepared_root={root}", f"optim.batch_size={batch}"])


def cold(corpus: str, root: str, workers: int) -> dict:
    """Preparation on ``workers`` cores: the process (and the threads and processes it starts: the
    tokenizer's Rayon pool, the worker processes) is pinned to that many CPUs."""
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:workers]))
    os.environ["RAYON_NUM_THREADS"] = str(workers)
    from trainables.data.prepare import prepare_run
    from trainables.data.shards import PreparedCorpus

    cfg = _cfg(corpus, root)
    t0 = time.perf_counter()
    uri = prepare_run(cfg, engine="local", workers=workers)
    seconds = time.perf_counter() - t0
    m = PreparedCorpus(uri).manifest
    return {"seconds": seconds, "tokens": m["tokens"], "documents": m["documents"],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "workers_peak_rss_gb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20}


def warm(corpus: str, root: str) -> dict:
    from trainables.data.batches import Position
    from trainables.pretrain import build_pretraining_data

    t0 = time.perf_counter()
    data = build_pretraining_data(_cfg(corpus, root))
    data.steps.batch(Position(0, 0, 0, 0))
    return {"seconds": time.perf_counter() - t0,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def pipeline(corpus: str, root: str, steps: int = 60) -> dict:
    from trainables.data.batches import Loader, Position
    from trainables.pretrain import build_pretraining_data

    data = build_pretraining_data(_cfg(corpus, root, batch=256))
    loader = iter(Loader(data.steps, Position(0, 0, 0, 0), steps + 5))
    for _ in range(5):  # warm-up: the first epoch's samples are computed (or read from the cache)
        next(loader)
    tokens, t0 = 0, time.perf_counter()
    for _, batch in loader:
        tokens += batch.n_tokens
    return {"tokens_per_s": tokens / (time.perf_counter() - t0)}


def run(copies: list[int], workdir: str | None = None) -> list[dict]:
    """The table of the module docstring, one row per k."""
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for k in copies:
            corpus = str(write_copies(k, Path(tmp)))
            one = _child(["cold", corpus, f"{tmp}/p1-{k}", "1"])
            two = _child(["cold", corpus, f"{tmp}/p2-{k}", "2"])
            _child(["warm", corpus, f"{tmp}/p2-{k}"])  # computes this seed's samples once: the cache
            w = _child(["warm", corpus, f"{tmp}/p2-{k}"])
            p = _child(["pipeline", corpus, f"{tmp}/p2-{k}"])
            rows.append({"copies": k, "documents": one["documents"], "tokens": one["tokens"],
                         "cold_1w_s": round(one["seconds"], 1), "cold_2w_s": round(two["seconds"], 1),
                         "speedup_2w": round(one["seconds"] / two["seconds"], 2),
                         "tokens_per_s_per_core": round(one["tokens"] / one["seconds"]),
                         "warm_start_s": round(w["seconds"], 2), "warm_process_s": round(w["process_s"], 2),
                         "warm_peak_rss_gb": round(w["peak_rss_gb"], 3),
                         "pipeline_tokens_per_s": round(p["tokens_per_s"])})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def run_one_file(copies: list[int], workdir: str | None = None) -> list[dict]:
    """Peak RSS of a cold, one-worker preparation of one large text file and of one parquet file, per k."""
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for k in copies:
            row: dict = {"copies": k}
            for fmt, write in (("txt", write_one_text_file), ("parquet", write_copies)):
                corpus = write(k, Path(tmp))
                out = _child(["cold", str(corpus), f"{tmp}/{fmt}-{k}", "1"])
                row.update({f"{fmt}_mb": round(corpus.stat().st_size / 2**20, 1), f"{fmt}_documents": out["documents"],
                            f"{fmt}_tokens": out["tokens"], f"{fmt}_cold_1w_s": round(out["seconds"], 1),
                            f"{fmt}_peak_rss_gb": round(out["peak_rss_gb"], 3)})
                corpus.unlink()  # the next k's files need the disk more
                shutil.rmtree(f"{tmp}/{fmt}-{k}", ignore_errors=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _main(argv: list[str]) -> int:
    if argv[:1] and argv[0].startswith("--"):  # the benchmark itself (a child's first argument is its kind)
        import argparse

        p = argparse.ArgumentParser(prog="python -m trainables.bench_data")
        p.add_argument("--one-file", action="store_true", help="peak RSS of preparing one large txt / parquet file")
        p.add_argument("--copies", default="1,4,16")
        p.add_argument("--workdir", default=None)
        args = p.parse_args(argv)
        copies = [int(c) for c in args.copies.split(",") if c.strip()]
        (run_one_file if args.one_file else run)(copies, args.workdir)
        return 0
    kind, corpus, root, *rest = argv
    out = {"cold": lambda: cold(corpus, root, int(rest[0])), "warm": lambda: warm(corpus, root),
           "pipeline": lambda: pipeline(corpus, root)}[kind]()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
