"""One big local file: cut into byte-range units at document boundaries, read the same as whole.

The reference readers below are what ``sources`` did before units had byte ranges (the whole file read
with ``Path.read_text``, then split): every cut must give back exactly their documents, in order."""

import json
import random
import re

import numpy as np
import pytest

import trainables.data.prepare as prepare
import trainables.data.sources as sources
from trainables.data.shards import PreparedCorpus
from trainables.data.sources import Unit, byte_ranges, list_units, read_unit, synthetic_documents, text_to_sentences
from trainables.data.text import CorpusError

from trainables.data.tokenizer import train_wordpiece
from trainables.presets import build_config


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """One tokenizer for the module (trained once: training costs two passes)."""
    out = tmp_path_factory.mktemp("tok")
    train_wordpiece(synthetic_documents(300), 1024).save_pretrained(str(out))
    return str(out)


def _data(tmp_path, corpus, tokenizer_dir):
    return build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                          f"data.tokenizer_dir={tokenizer_dir}"]).data


def _whole_txt(path):
    return [s for s in (text_to_sentences(b) for b in re.split(r"\n\s*\n", path.read_text(encoding="utf-8"))
                        if b.strip()) if s]


def _whole_jsonl(path, column="text", lines=str.splitlines):
    rows = [json.loads(line) for line in lines(path.read_text(encoding="utf-8")) if line.strip()]
    return [s for s in (text_to_sentences(r[column]) for r in rows) if s]


def _by_units(path, unit_bytes, column="text"):
    units = list_units(str(path), text_column=column, unit_bytes=unit_bytes)
    assert [u.id for u in units] == list(range(len(units)))
    assert units[0].start == 0 and units[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in zip(units, units[1:]))  # the ranges cover the file, in order
    return [d for u in units for d in read_unit(u, column)], len(units)


_LINE_ENDS = ("\n", "\r\n", "\r")
_BLANKS = ("\n\n", "\r\n\r\n", "\n \t\n", "\n\n\n\n", "\r\r", "\n\u00a0\n", "\r\n  \r\n\n")


def _messy_text(rng: random.Random, n_docs: int) -> str:
    """Documents of several lines, separated by every kind of blank line the txt parser accepts, with
    mixed line ends, leading blank lines, Unicode text and sometimes no final newline."""
    words = "alpha Beta gamma. Delta! épsilon zeta? ETA theta iota\u2028kappa Mr. Lambda mu".split(" ")
    docs = []
    for _ in range(n_docs):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) + rng.choice(["", ".", " ", "\t"])
                 for _ in range(rng.randint(1, 4))]
        docs.append(rng.choice(_LINE_ENDS).join(lines))
    text = rng.choice(["", "\n", "\n\n\n", "  \r\n"])
    for d in docs:
        text += d + rng.choice(_BLANKS)
    return text.rstrip() if rng.random() < 0.5 else text


@pytest.fixture(params=[(2**20, 2**16), (5, 3), (1, 1)], ids=["default-chunks", "5-byte-chunks", "1-byte-chunks"])
def chunks(request, monkeypatch):
    """Tiny read and cut-search chunks too: a \\r\\n, a UTF-8 character or a separator split between reads."""
    monkeypatch.setattr(sources, "CHUNK_BYTES", request.param[0])
    monkeypatch.setattr(sources, "CUT_WINDOW", request.param[1])


def test_every_cut_of_a_text_file_gives_its_documents_unsplit_and_in_order(tmp_path, chunks):
    for seed in range(6):
        path = tmp_path / f"messy{seed}.txt"
        path.write_bytes(_messy_text(random.Random(seed), 12).encode("utf-8"))
        expected = _whole_txt(path)
        assert len(expected) >= 6
        max_units = 1
        for unit_bytes in range(1, path.stat().st_size + 2):  # every target, so on and next to every separator
            got, n_units = _by_units(path, unit_bytes)
            assert got == expected, (seed, unit_bytes)
            max_units = max(max_units, n_units)
        assert max_units >= len(expected) - 1  # tiny units really did cut at (nearly) every document


@pytest.mark.parametrize("text, expected_units", [
    ("one.\n\ntwo.\n\nthree.", 3),  # the cut lands exactly on a separator
    ("\n\n\nfirst doc.\n\nsecond doc.\n", 3),  # blank lines at the start (a unit of their own: no document)
    ("a b.\r\n\r\nc d.\r\n\r\ne f.\r\n", 3),  # CRLF, cut never between \r and \n
    ("a b.\r\rc d.\r\re f.", 3),  # old Mac line ends
    ("a b.\nstill a.\n\nc d.\nstill c.", 2),  # a single newline is not a boundary
    ("last without newline.\n\nx", 2),
    ("only one document, no newline", 1),
    ("", 1),
])
def test_a_document_is_never_split_across_units(tmp_path, text, expected_units, chunks):
    path = tmp_path / "c.txt"
    path.write_bytes(text.encode())
    expected = _whole_txt(path)
    for unit_bytes in range(1, len(text) + 2):
        assert _by_units(path, unit_bytes)[0] == expected, unit_bytes
    assert len(byte_ranges(path, "txt", 1)) == expected_units
    assert len(byte_ranges(path, "txt", 10**9)) == 1


def _jsonl_text(raw_unicode: bool) -> str:
    rng = random.Random(1)
    rows = [json.dumps({"text": " ".join(rng.choice(["Ab cd.", "Éf gh!", "ij\u2028kl", "Mn."]) for _ in range(4)),
                        "n": i}, ensure_ascii=not (raw_unicode and i % 2)) for i in range(20)]
    return ("\n" + "".join(r + rng.choice(["\n", "\r\n", "\n\n", "\r", "\n  \n"]) for r in rows)).rstrip("\r\n ")


def test_every_cut_of_a_jsonl_file_gives_its_rows_in_order(tmp_path, chunks):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(_jsonl_text(raw_unicode=False).encode())
    expected = _whole_jsonl(path)
    assert len(expected) == 20
    for unit_bytes in range(1, path.stat().st_size + 2, 3):
        assert _by_units(path, unit_bytes)[0] == expected, unit_bytes
    assert len(byte_ranges(path, "jsonl", 1)) >= 20
    # a raw U+2028 inside a JSON string: the old reader (str.splitlines) ended the line there and failed
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(_jsonl_text(raw_unicode=True).encode())
    assert "\u2028" in raw.read_text() and _by_units(raw, 5)[0] == expected


def test_max_documents_stops_in_the_unit_that_holds_the_last_one(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(f"Doc {i} first. Doc {i} second." for i in range(50)))
    whole = _whole_txt(path)
    units = list_units(str(path), max_documents=17, unit_bytes=64)
    assert len(units) < len(byte_ranges(path, "txt", 64)) and units[-1].limit
    assert [d for u in units for d in read_unit(u)] == whole[:17]


def _one_file(tmp_path, kind="txt", n_docs=120):
    docs = synthetic_documents(n_docs, seed=5)
    path = tmp_path / f"big.{kind}"
    if kind == "txt":
        path.write_bytes(("\r\n\r\n".join("\r\n".join(d.sentences) for d in docs) + "\r\n").encode())
    else:
        path.write_text("".join(json.dumps({"text": " ".join(d.sentences)}) + "\n" for d in docs))
    return path


def _prepared_with(tmp_path, monkeypatch, corpus, tokenizer_dir, unit_bytes, **kw):
    monkeypatch.setattr(sources, "UNIT_BYTES", unit_bytes)
    d = _data(tmp_path, corpus, tokenizer_dir)
    return PreparedCorpus(prepare.prepare_corpus(d, 1024, tokenizer_dir=tokenizer_dir, **kw))


def _tokens(pc):
    return np.concatenate([np.asarray(s) for s in pc._shards])


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_many_units_prepare_the_same_corpus_as_one(tmp_path, tokenizer_dir, monkeypatch, kind):
    corpus = _one_file(tmp_path, kind)
    one = _prepared_with(tmp_path / "one", monkeypatch, corpus, tokenizer_dir, 10**9)
    many = _prepared_with(tmp_path / "many", monkeypatch, corpus, tokenizer_dir, 300, workers=2)
    assert len(one.manifest["shards"]) == 1 and len(many.manifest["shards"]) > 20
    assert one.fingerprint == many.fingerprint  # the cut is not part of what the data is
    assert np.array_equal(_tokens(one), _tokens(many))
    assert np.array_equal(one.sentences, many.sentences) and np.array_equal(one.documents, many.documents)
    assert np.array_equal(one.heldout_docs, many.heldout_docs) and one.manifest["documents"] == 120
    assert len(many.manifest["shards"][0]["sources"]) == 1  # the file's checksum, once
    assert not any(s["sources"] for s in many.manifest["shards"][1:])


@pytest.mark.slow
def test_ray_data_prepares_the_units_of_one_file_as_local_processes_do(tmp_path, tokenizer_dir, monkeypatch):
    import ray

    corpus = _one_file(tmp_path)
    local = _prepared_with(tmp_path / "local", monkeypatch, corpus, tokenizer_dir, 400, engine="local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = _prepared_with(tmp_path / "ray", monkeypatch, corpus, tokenizer_dir, 400, engine="ray")
    finally:
        ray.shutdown()
    assert on_ray.manifest["engine"] == "ray" and len(on_ray.manifest["shards"]) > 10
    assert [s["sha256"] for s in on_ray.manifest["shards"]] == [s["sha256"] for s in local.manifest["shards"]]
    assert np.array_equal(on_ray.sentences, local.sentences) and np.array_equal(on_ray.documents, local.documents)


def test_a_resume_redoes_shards_that_were_cut_otherwise(tmp_path, tokenizer_dir, monkeypatch, kill_preparation):
    corpus = _one_file(tmp_path)
    straight = _prepared_with(tmp_path / "a", monkeypatch, corpus, tokenizer_dir, 500)
    kill_preparation.after(3)
    with pytest.raises(KeyboardInterrupt):
        _prepared_with(tmp_path / "b", monkeypatch, corpus, tokenizer_dir, 900, workers=1)
    kill_preparation.revive()
    resumed = _prepared_with(tmp_path / "b", monkeypatch, corpus, tokenizer_dir, 500, workers=1)
    assert np.array_equal(_tokens(resumed), _tokens(straight))
    assert np.array_equal(resumed.sentences, straight.sentences)
    assert np.array_equal(resumed.documents, straight.documents)


def test_reading_a_unit_holds_a_chunk_not_the_file(tmp_path, monkeypatch):
    import tracemalloc

    path = tmp_path / "big.txt"
    doc = "\n".join(f"Sentence {i} of this document. And another one here." for i in range(20))
    with open(path, "w") as f:
        for _ in range(3000):
            f.write(doc + "\n\n")
    assert path.stat().st_size > 3 * 10**6
    monkeypatch.setattr(sources, "CHUNK_BYTES", 2**16)
    (unit,) = list_units(str(path), unit_bytes=10**9)
    tracemalloc.start()
    n = sum(1 for _ in read_unit(unit))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 3000 and peak < 2**20, peak


def test_bad_local_input_is_a_one_line_error_naming_it(tmp_path):
    cases = [(str(tmp_path / "missing.txt"), "does not exist; allowed: builtin, synthetic"),
             (str(tmp_path / "c.csv"), "unsupported file type '.csv'; allowed: .txt, .jsonl, .json, .parquet")]
    (tmp_path / "c.csv").write_text("a,b\n")
    bad = tmp_path / "bad.txt"  # the bad byte lies in a later unit: its offset is still the file's
    bad.write_bytes(b"Good one. Two.\n\n" * 40 + b"caf\xe9 here.\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"row {i}."}) + "\n" for i in range(30)) + '{"text": oops}\n')
    cases += [(str(bad), f"bad.txt: not UTF-8 text (byte {16 * 40 + 3}: b'\\xe9'); re-encode it as UTF-8"),
              (str(rows), "rows.jsonl:31: not valid JSON")]
    for corpus, message in cases:
        with pytest.raises(CorpusError) as err:
            for u in list_units(corpus, unit_bytes=50):
                list(read_unit(u))
        assert message in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)
    with pytest.raises(CorpusError, match=r"rows.jsonl:1: no 'body' field; found \['text'\]"):
        list(read_unit(Unit(0, "jsonl", str(rows), start=0, end=0), "body"))
