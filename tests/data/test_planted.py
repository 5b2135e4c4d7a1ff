"""The planted language: deterministic, its tasks' held-out words unseen in train, loaded as any corpus/task."""

import re

import pytest

from trainables.data.planted import TASKS, PlantedLanguage
from trainables.data.sources import CorpusError, list_units, load_documents, planted_options
from trainables.tasks import get_task_spec, load_task, resolve_tasks


def _words(rows, *cols):
    return {w for r in rows for c in cols for w in re.findall(r"[a-z]+", r[c])}


def test_the_generator_is_deterministic_per_seed_and_a_prefix_is_a_shorter_corpus():
    a, b, other = PlantedLanguage(seed=0), PlantedLanguage(seed=0), PlantedLanguage(seed=1)
    assert a.documents(50) == b.documents(50) and a.task("planted_order") == b.task("planted_order")
    assert a.documents(50) != other.documents(50)
    assert a.documents(50)[20:] == a.documents(30, start=20)  # units read any range of one stream
    words = [w for role in ("content", "frame", "topic", "stage") for w in a.words(role).ravel()]
    assert len(words) == len(set(words))  # every word has one role


def test_lexical_and_order_test_words_never_occur_in_the_train_split():
    lang = PlantedLanguage()
    lex = lang.task("planted_lexical")
    held = set(lang.lexical_split_words("test").ravel()) | set(lang.lexical_split_words("dev").ravel())
    assert held and not held & _words(lex["train"], "text")
    assert _words(lex["test"], "text") <= set(lang.lexical_split_words("test").ravel())
    order = lang.task("planted_order")
    markers = set(lang.words("stage").ravel())
    train_markers = _words(order["train"], "text_a", "text_b") & markers
    test_markers = _words(order["test"], "text_a", "text_b") & markers
    assert train_markers and test_markers and not train_markers & test_markers
    corpus = {w for d in lang.documents(300) for s in d for w in re.findall(r"[a-z]+", s)}
    assert held <= corpus and test_markers <= corpus  # ... but pretraining has them


def test_discourse_train_and_test_topics_are_disjoint():
    lang = PlantedLanguage()
    disc = lang.task("planted_discourse")
    topic_of = {w: t for t, ws in enumerate(lang.words("topic")) for w in ws}
    topics = {s: {topic_of[w] for w in _words(disc[s], "text_a", "text_b") if w in topic_of} for s in ("train", "test")}
    assert topics["train"] and topics["test"] and not topics["train"] & topics["test"]


def test_labels_are_balanced_and_the_null_task_is_label_independent():
    lang = PlantedLanguage()
    for name in TASKS:
        labels = [r["label"] for r in lang.task(name)["train"]]
        assert 0.4 < labels.count("1") / len(labels) < 0.6, name


def test_planted_tasks_load_through_the_task_registry_and_the_corpus_through_sources():
    assert resolve_tasks("planted") == list(TASKS)
    data = load_task("planted_lexical")
    assert data.spec.type == get_task_spec("planted_lexical").type == "single"
    assert {len(data.splits[s]) for s in ("train", "dev", "test")} == {2000, 500}
    units = list_units("planted:docs=2500")
    assert [(u.start, u.end) for u in units] == [(0, 1000), (1000, 2000), (2000, 2500)]
    docs = load_documents("planted:docs=2500")
    assert [d.sentences for d in docs] == PlantedLanguage().documents(2500)
    with pytest.raises(CorpusError, match="docs=N"):
        planted_options("planted:documents=3")
