"""The planted language: deterministic, its tasks' held-out words unseen in train, no task solvable by surface
cues, loaded as any corpus/task, one language per seed (``planted:seed=K``)."""

import re

import numpy as np
import pytest

from trainables.data.cues import cue_check
from trainables.data.planted import TASKS, PlantedLanguage
from trainables.data.sources import CorpusError, language_of, list_units, load_documents, planted_options
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
    with pytest.raises(CorpusError, match="docs=N") as err:
        planted_options("planted:documents=3")
    assert "seed=K" in str(err.value) and len(str(err.value).splitlines()) == 1


def test_planted_seed_k_is_one_language_for_the_corpus_and_its_tasks(tmp_path):
    assert planted_options("planted:docs=10,seed=7") == {"docs": 10, "seed": 7}
    assert language_of("planted:seed=7") == 7 and language_of("planted") == 0 and language_of("builtin") == 0
    docs = load_documents("planted:docs=20,seed=7")
    assert [d.sentences for d in docs] == PlantedLanguage(seed=7).documents(20)
    seven = load_task("planted_order", language=7).splits["test"]
    assert seven == PlantedLanguage(seed=7).task("planted_order")["test"] != load_task("planted_order").splits["test"]
    words = {w for d in docs for s in d.sentences for w in re.findall(r"[a-z]+", s)}
    assert _words(seven, "text_a", "text_b") <= set(PlantedLanguage(seed=7).roles()) and words
    with pytest.raises(CorpusError, match="seed=K"):
        planted_options("planted:seed=-1")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", TASKS)
def test_no_planted_task_is_solved_by_a_surface_baseline(name, seed):
    """A bag-of-words + overlap + length regression fitted on train, and the best overlap rule chosen on
    test, stay within chance + 0.05 on test: what decides each task was learned in pretraining or not at all."""
    lang = PlantedLanguage(seed=seed)
    check = cue_check(lang.task(name), lang.roles())
    assert check.passes(), (name, check.line())


def _old_discourse(lang, rng, split, n):
    """The discourse task before version 7: B' from another document of another topic (and class)."""
    topics, pool = lang._topic_split(split), lang.split_markers(split)
    rows = []
    for i in range(n):
        t = int(rng.choice(topics))
        doc = lang._document(rng, t, stage_pool=pool)
        j, label = int(rng.integers(len(doc) - 1)), int(rng.integers(2))
        other = lang._document(rng, int(rng.choice(topics[topics != t])), stage_pool=pool)
        b = doc[j + 1] if label else other[int(rng.integers(len(other)))]
        rows.append({"id": f"{split}-{i}", "text_a": doc[j], "text_b": b, "label": str(label)})
    return rows


def test_the_cue_check_finds_the_old_discourse_tasks_word_overlap():
    lang = PlantedLanguage()
    splits = {s: _old_discourse(lang, np.random.default_rng(i), s, n)
              for i, (s, n) in enumerate([("train", 2000), ("dev", 500), ("test", 500)])}
    check = cue_check(splits, lang.roles())
    assert not check.passes() and check.rule > check.chance + 0.3 and check.regression > check.chance + 0.3, \
        check.line()


def test_discourse_positives_and_negatives_differ_only_in_b_s_topic():
    """Same class, B one stage after A, A and B never share a topic word: only B's topic differs by label."""
    lang = PlantedLanguage()
    roles, topic_of = lang.roles(), {w: t for t, ws in enumerate(lang.words("topic")) for w in ws}
    stage_of = {w: s for s, ws in enumerate(lang.words("stage")) for w in ws}
    class_of = {w: c for role in ("frame", "content") for c, ws in enumerate(lang.words(role)) for w in ws}
    for row in lang.task("planted_discourse")["test"]:
        a, b = (re.findall(r"[a-z]+", row[k]) for k in ("text_a", "text_b"))
        assert {class_of[w] for w in a if w in class_of} == {class_of[w] for w in b if w in class_of}
        assert {stage_of[w] for w in b if roles[w] == "stage"} == {stage_of[w] + 1 for w in a if roles[w] == "stage"}
        ta, tb = ({w for w in x if roles[w] == "topic"} for x in (a, b))
        assert not ta & tb
        same = {topic_of[w] for w in ta} == {topic_of[w] for w in tb}
        assert same == (row["label"] == "1")
