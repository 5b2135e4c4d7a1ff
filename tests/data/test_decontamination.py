"""Decontamination at preparation: a user corpus holding dev/test sentences of evaluation tasks is prepared
without them, the manifest counts exactly what was planted, clean text is untouched, and the prepared folder
is keyed on the task set."""

import json

import pytest

import trainables.data.prepare as prepare
from trainables.data.shards import PreparedCorpus
from trainables.data.sources import synthetic_documents
from trainables.data.text import CorpusError
from trainables.data.tokenizer import train_wordpiece
from trainables.presets import build_config
from trainables.tasks import load_task

TASKS = ["planted_lexical", "planted_order"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_wordpiece(synthetic_documents(300), 1024).save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="module")
def eval_sentences():
    """Dev and test sentences of the two tasks, and a 13-word test text to quote inside a longer sentence."""
    lex, order = load_task("planted_lexical"), load_task("planted_order")
    exact = [r["text"] for r in lex["dev"][:4]] + [r["text_a"] for r in order["test"][:5]]
    quoted = order["dev"][7]["text_b"].rstrip(".")
    return exact, quoted


def _corpus(tmp_path, eval_sentences):
    """(folder, the sentences each clean document must keep, in order, the contaminated count planted).
    A .txt and a .jsonl file; contaminated sentences sit between clean ones, one document is nothing but
    contaminated sentences (it must be dropped), one sentence quotes a 13-word test text inside itself."""
    exact, quoted = eval_sentences
    docs = [d.sentences for d in synthetic_documents(40, seed=5)]
    folder = tmp_path / "corpus"
    folder.mkdir()
    dirty, clean = [list(d) for d in docs], [list(d) for d in docs]
    for i, s in enumerate(exact[:6]):
        dirty[2 * i].insert(1, s)
    dirty[20] = dirty[20][:2] + [f"Reporters said that {quoted} and went home."] + dirty[20][2:]
    dirty.insert(30, [s.upper() for s in exact[6:]])  # case and spacing do not hide a sentence
    (folder / "a.txt").write_text("\n\n".join("\n".join(d) for d in dirty[:25]) + "\n")
    (folder / "b.jsonl").write_text("".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in dirty[25:]))
    return folder, clean, {"sentences_exact": len(exact), "sentences_ngram": 1, "documents_dropped": 1}


def _prepare(tmp_path, corpus, tokenizer_dir, tasks, **kw):
    d = build_config("smoke", "full", [f"data.corpus={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                                       f"data.tokenizer_dir={tokenizer_dir}"]).data
    return PreparedCorpus(prepare.prepare_corpus(d, 1024, tokenizer_dir=tokenizer_dir, decontaminate=tasks, **kw))


def _prepared_sentences(pc: PreparedCorpus) -> list[list[int]]:
    return [pc.span(int(pc.sentences[i]), int(pc.sentences[i + 1])).tolist() for i in range(len(pc.sentences) - 1)]


def test_dev_and_test_sentences_are_removed_counted_and_clean_text_is_untouched(tmp_path, tokenizer_dir,
                                                                                eval_sentences):
    corpus, clean, planted = _corpus(tmp_path, eval_sentences)
    pc = _prepare(tmp_path, corpus, tokenizer_dir, TASKS)
    enc = lambda s: pc.tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    got = _prepared_sentences(pc)
    exact, quoted = eval_sentences
    for s in exact + [f"Reporters said that {quoted} and went home."]:
        assert enc(s) not in got and enc(s.upper()) not in got
    assert got == [enc(s) for d in clean for s in d]  # every clean sentence, in order, nothing else
    assert pc.manifest["documents"] == len(clean)
    decon = pc.manifest["decontamination"]
    assert decon["totals"] == planted and decon["tasks_checked"] == TASKS and not decon["tasks_unavailable"]
    per = decon["sources"]
    assert sum(c["sentences_exact"] for c in per.values()) == planted["sentences_exact"]
    assert {k.rsplit("/", 1)[-1]: v["documents_dropped"] for k, v in per.items()} == {"a.txt": 0, "b.jsonl": 1}
    line = prepare.decontamination_line(decon)
    assert line.startswith(f"decontamination: {len(exact) + 1} corpus sentences matching dev/test text of 2 task(s)")


def test_the_task_set_keys_the_prepared_folder(tmp_path, tokenizer_dir, eval_sentences):
    corpus, clean, _ = _corpus(tmp_path, eval_sentences)
    both = _prepare(tmp_path, corpus, tokenizer_dir, TASKS)
    one = _prepare(tmp_path, corpus, tokenizer_dir, TASKS[:1])
    none = _prepare(tmp_path, corpus, tokenizer_dir, [])
    assert len({both.path, one.path, none.path}) == 3
    assert one.manifest["decontamination"]["totals"]["sentences_exact"] == 4  # only planted_lexical's
    assert none.manifest["sentences"] > one.manifest["sentences"] > both.manifest["sentences"]
    assert _prepare(tmp_path, corpus, tokenizer_dir, list(reversed(TASKS))).path == both.path  # a set


def test_a_resumed_preparation_keeps_the_counts(tmp_path, tokenizer_dir, eval_sentences, kill_preparation):
    corpus, _, planted = _corpus(tmp_path, eval_sentences)
    from trainables.data import sources

    sources.UNIT_BYTES, old = 256, sources.UNIT_BYTES
    try:
        kill_preparation.after(2)
        with pytest.raises(KeyboardInterrupt):
            _prepare(tmp_path, corpus, tokenizer_dir, TASKS, workers=1)
        kill_preparation.revive()
        pc = _prepare(tmp_path, corpus, tokenizer_dir, TASKS, workers=1)
    finally:
        sources.UNIT_BYTES = old
    assert len(pc.manifest["shards"]) > 3 and pc.manifest["decontamination"]["totals"] == planted


def test_tasks_not_loadable_offline_are_reported_not_fatal(tmp_path, tokenizer_dir, eval_sentences):
    corpus, _, _ = _corpus(tmp_path, eval_sentences)
    pc = _prepare(tmp_path, corpus, tokenizer_dir, ["sentiment", "planted_lexical"])  # built-in: not fetched here
    decon = pc.manifest["decontamination"]
    assert decon["tasks_checked"] == ["planted_lexical"] and list(decon["tasks_unavailable"]) == ["sentiment"]
    assert "not checked (not loadable offline): sentiment" in prepare.decontamination_line(decon)


def test_the_run_decontaminates_against_its_finetune_tasks_and_bad_names_are_one_line():
    assert prepare.decontamination_tasks(build_config("smoke", "full", ["finetune.tasks=planted_null,topic"])) == \
        ["planted_null", "topic"]
    assert prepare.decontamination_tasks(build_config("smoke", "full", ["data.decontaminate=none"])) == []
    assert prepare.decontamination_tasks(build_config("smoke", "full", ["data.decontaminate=planted"])) == \
        ["planted_lexical", "planted_discourse", "planted_order", "planted_null"]
    bad = build_config("smoke", "full", ["data.decontaminate=planted_lexical,nope"])
    with pytest.raises(CorpusError) as e:
        prepare.decontamination_tasks(bad)
    msg = str(e.value)
    assert "\n" not in msg and "'nope'" in msg and "planted_lexical" in msg and "finetune" in msg and "none" in msg
