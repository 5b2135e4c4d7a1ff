"""Preparation: shards + offsets + manifest, resume after a kill, bad input and storage, engines agree."""

import json
import os

import numpy as np
import pytest

import trainables.data.prepare as prepare
from trainables.presets import build_config
from trainables.data.shards import PreparedCorpus
from trainables.data.sources import list_units
from trainables.data.text import CorpusError
from trainables.data.tokenizer import train_wordpiece
from trainables.data.sources import synthetic_documents


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """One tokenizer for the module (trained once: training costs two passes)."""
    out = tmp_path_factory.mktemp("tok")
    train_wordpiece(synthetic_documents(300), 1024).save_pretrained(str(out))
    return str(out)


def _corpus(tmp_path, n_files=6, docs_per_file=30):
    folder = tmp_path / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    docs = synthetic_documents(n_files * docs_per_file, seed=3)
    for f in range(n_files):
        part = docs[f * docs_per_file:(f + 1) * docs_per_file]
        (folder / f"part{f}.txt").write_text("\n\n".join(" ".join(d.sentences) for d in part))
    return folder


def _data(tmp_path, corpus, tokenizer_dir, *extra):
    return build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                          f"data.tokenizer_dir={tokenizer_dir}", *extra]).data


def _prepare(tmp_path, corpus, tokenizer_dir, *extra, **kw):
    d = _data(tmp_path, corpus, tokenizer_dir, *extra)
    return prepare.prepare_corpus(d, 1024, tokenizer_dir=tokenizer_dir, **kw)


def test_shards_hold_every_sentence_once_in_order(tmp_path, tokenizer_dir):
    corpus = _corpus(tmp_path)
    pc = PreparedCorpus(_prepare(tmp_path, corpus, tokenizer_dir))
    m = pc.manifest
    assert len(m["shards"]) == 6 and m["documents"] == 180 and m["token_dtype"] == "uint16"
    assert m["identity"]["source"]["kind"] == "files" and len(m["shards"][0]["sources"]) == 1
    assert len(pc.sentences) == m["sentences"] + 1 and pc.sentences[-1] == m["tokens"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(pc.path / "tokenizer"))
    first_doc = (corpus / "part0.txt").read_text().split("\n\n")[0]
    s0, s1 = pc.documents[0], pc.documents[1]
    ids = pc.span(int(pc.sentences[s0]), int(pc.sentences[s1]))
    assert tok.decode(ids) == tok.decode(tok(first_doc, add_special_tokens=False)["input_ids"])
    assert len(pc.heldout_docs) == round(0.05 * m["usable_documents"]) and not np.isin(pc.heldout_docs, pc.train_docs).any()


def test_a_killed_preparation_resumes_and_matches_an_uninterrupted_one(tmp_path, tokenizer_dir, kill_preparation):
    corpus = _corpus(tmp_path)
    straight = PreparedCorpus(_prepare(tmp_path / "a", corpus, tokenizer_dir))
    kill_preparation.after(3)
    with pytest.raises(KeyboardInterrupt):
        _prepare(tmp_path / "b", corpus, tokenizer_dir, workers=1)
    d = _data(tmp_path / "b", corpus, tokenizer_dir)
    root = prepare.prepared_root(d)
    fp, _ = prepare.fingerprint_of(d, 1024, tokenizer_dir)
    half = f"{root}/{fp}"
    with pytest.raises(CorpusError, match="did not finish"):
        PreparedCorpus(half)  # a trial never reads a half-written preparation
    done = {p: os.stat(p).st_mtime_ns for p in sorted(os.listdir(half)) for p in [os.path.join(half, p)]
            if p.endswith(".done.json")}
    assert len(done) == 3
    kill_preparation.revive()
    resumed = PreparedCorpus(_prepare(tmp_path / "b", corpus, tokenizer_dir, workers=1))
    assert {p: os.stat(p).st_mtime_ns for p in done} == done  # finished shards were kept, not redone
    assert [s["sha256"] for s in resumed.manifest["shards"]] == [s["sha256"] for s in straight.manifest["shards"]]
    assert np.array_equal(resumed.sentences, straight.sentences)


def test_two_local_workers_write_the_same_shards_as_one(tmp_path, tokenizer_dir):
    corpus = _corpus(tmp_path)
    one = PreparedCorpus(_prepare(tmp_path / "one", corpus, tokenizer_dir, workers=1)).manifest
    two = PreparedCorpus(_prepare(tmp_path / "two", corpus, tokenizer_dir, workers=2)).manifest
    assert [s["sha256"] for s in one["shards"]] == [s["sha256"] for s in two["shards"]]


def test_a_remote_root_is_written_through_its_filesystem_and_copied_for_trials(tmp_path, tokenizer_dir):
    corpus = _corpus(tmp_path, n_files=2)
    d = _data(tmp_path, corpus, tokenizer_dir, f"data.prepared_root=file://{tmp_path / 'bucket'}")
    uri = prepare.prepare_corpus(d, 1024, tokenizer_dir=tokenizer_dir)
    assert uri.startswith("file://") and (tmp_path / "bucket" / uri.rsplit("/", 1)[-1] / "manifest.json").exists()
    cfg = build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                         f"data.tokenizer_dir={tokenizer_dir}", f"data.prepared_root={d.prepared_root}"])
    opened = prepare.open_prepared(cfg)  # what a trial on another node does: copy once, then memory-map
    assert "prepared-mirror" in str(opened.path) and opened.manifest["tokens"] > 0
    assert prepare.open_prepared(cfg).path == opened.path  # the copy is reused


def test_bad_storage_source_and_manifest_are_one_line_errors(tmp_path, tokenizer_dir):
    corpus = _corpus(tmp_path, n_files=2)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CorpusError, match="is not writable") as err:
        _prepare(tmp_path, corpus, tokenizer_dir, f"data.prepared_root={tmp_path / 'afile' / 'sub'}")
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(CorpusError, match="could not be loaded") as err:
        list_units("hub:no-such-user/no-such-dataset")
    assert len(str(err.value).splitlines()) == 1
    other = _prepare(tmp_path, _corpus(tmp_path / "x", n_files=2), tokenizer_dir)
    cfg = build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                         f"data.tokenizer_dir={tokenizer_dir}", f"data.prepared={other}"])
    with pytest.raises(CorpusError, match="belongs to another corpus"):
        prepare.open_prepared(cfg)


def test_a_damaged_shard_is_refused_with_what_to_do(tmp_path, tokenizer_dir):
    path = _prepare(tmp_path, _corpus(tmp_path, n_files=2), tokenizer_dir)
    shard = os.path.join(path, "shard-00001.tokens.bin")
    with open(shard, "r+b") as f:
        f.truncate(10)
    with pytest.raises(CorpusError, match="damaged; delete") as err:
        PreparedCorpus(path)
    assert len(str(err.value).splitlines()) == 1
    manifest = json.loads(open(os.path.join(path, "manifest.json")).read())
    manifest["format_version"] = 99
    open(os.path.join(path, "manifest.json"), "w").write(json.dumps(manifest))
    with pytest.raises(CorpusError, match="format 99"):
        PreparedCorpus(path)


@pytest.mark.slow
def test_ray_data_writes_the_same_shards_as_local_processes(tmp_path, tokenizer_dir):
    import ray

    corpus = _corpus(tmp_path)
    local = PreparedCorpus(_prepare(tmp_path / "local", corpus, tokenizer_dir, engine="local")).manifest
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = PreparedCorpus(_prepare(tmp_path / "ray", corpus, tokenizer_dir, engine="ray")).manifest
    finally:
        ray.shutdown()
    assert on_ray["engine"] == "ray"
    assert [s["sha256"] for s in on_ray["shards"]] == [s["sha256"] for s in local["shards"]]


def test_the_prepare_command_writes_where_a_sweep_with_the_same_storage_reads(tmp_path, tokenizer_dir, capsys):
    """`python -m trainables.data prepare --storage S` prepares once; a sweep run with `--storage S` then finds
    that folder (same fingerprint) and prepares nothing."""
    from sweeps.frame import with_shared_data
    from trainables.data.__main__ import main

    corpus, storage = _corpus(tmp_path), tmp_path / "runs"
    sets = ["--set", f"data.tokenizer_dir={tokenizer_dir}", "--set", "model.vocab_size=1024"]
    assert main(["prepare", "--preset", "smoke", "--corpus", str(corpus), "--storage", str(storage),
                 "--cache-dir", str(tmp_path / "cache"), "--workers", "1", *sets]) == 0
    out = capsys.readouterr().out
    assert "180 documents" in out and "uint16" in out
    (folder,) = [p for p in (storage / "data").iterdir() if p.is_dir()]
    manifest = (folder / "manifest.json").stat().st_mtime_ns
    cfg = with_shared_data(build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                                          f"data.tokenizer_dir={tokenizer_dir}", "model.vocab_size=1024"]),
                           str(storage / "some-sweep"))
    assert prepare.prepare_run(cfg) == str(folder)  # as the sweep and its trials prepare
    assert (folder / "manifest.json").stat().st_mtime_ns == manifest  # found, not rebuilt

    assert main(["prepare", "--preset", "nope"]) == 1
    assert main(["prepare", "--preset", "smoke", "--corpus", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "'nope'" in err[0] and "smoke" in err[0] and "missing" in err[1], err


_TIES_CORPUS = '''
import random, sys
from pathlib import Path
rng = random.Random(0)
alpha = "abcdefghijklmnopqrstuvwxyz\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8\u03b9\u03ba\u03bb\u03bc\u03bd\u03be\u03bf\u03c0"
words = ["".join(rng.choice(alpha) for _ in range(rng.randint(2, 9))) for _ in range(600)]
out = Path(sys.argv[1]); out.mkdir(parents=True)
for f in range(3):
    docs = [" ".join(" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(8))
            for _ in range(120)]
    (out / f"part{f}.txt").write_text("\\n\\n".join(docs))
'''

_PREPARE = '''
import sys
from trainables.presets import build_config
from trainables.data.prepare import prepare_corpus
corpus, cache = sys.argv[1], sys.argv[2]
d = build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={cache}"]).data
print(prepare_corpus(d, 1024, workers=2))
'''


def test_two_preparations_in_two_processes_write_byte_identical_folders(tmp_path):
    """A tokenizer trained in another process used to number its pieces otherwise (and on a corpus with many
    count ties, as this one, learn other pieces), and with them every shard; now every file is the same."""
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, "-c", _TIES_CORPUS, str(corpus)], check=True)
    folders = []
    for name in ("a", "b"):
        out = subprocess.run([sys.executable, "-c", _PREPARE, str(corpus), str(tmp_path / name)], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
        folders.append(prepare.shards.local_path(out))
    assert folders[0] != folders[1] and folders[0].name == folders[1].name  # two caches, one fingerprint

    def contents(folder):
        files = {}
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                data = p.read_bytes()
                if p.name == "manifest.json":  # everything but the time it took
                    m = json.loads(data)
                    m.pop("prepare_seconds")
                    data = json.dumps(m, sort_keys=True).encode()
                files[str(p.relative_to(folder))] = data
        return files

    a, b = contents(folders[0]), contents(folders[1])
    assert sorted(a) == sorted(b) and any(k.endswith(".npy") for k in a)
    assert [k for k in a if a[k] != b[k]] == []
