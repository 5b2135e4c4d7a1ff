"""The non-neural baselines of a probe trial (finetune.text_baselines): on hand-made tasks whose answers are known,
and end to end on the tiny checkpoint."""

import json

import numpy as np
import pytest

from trainables.config import FinetuneConfig
from trainables.finetune.baselines import Reading, tag_baseline, text_baseline, tfidf_baseline
from trainables.finetune.inputs import score
from trainables.tasks import TaskSpec

FT = FinetuneConfig()


def _tagged(*pairs: str) -> dict:
    words, tags = zip(*(p.split("/") for p in pairs))
    return {"id": "x", "tokens": list(words), "tags": list(tags)}


TAG_SPEC = TaskSpec("toy_pos", "tagging", ("token_accuracy",), "builtin", labels=("ADJ", "ADV", "DET", "NOUN", "VERB"))
TAG_TRAIN = [_tagged("the/DET", "cat/NOUN", "runs/VERB"), _tagged("the/DET", "dog/NOUN", "runs/VERB"),
             _tagged("runs/NOUN", "are/VERB", "fun/ADJ"), _tagged("cats/NOUN", "dogs/NOUN", "birds/NOUN")]
# Counted by hand: NOUN is the commonest tag overall (6 of 12; not the tag set's first), 'runs' is VERB 2 to NOUN 1.
# The -> DET (the, lower-cased) right; runs -> VERB wrong; zebra (unseen) -> NOUN right; fun -> ADJ right;
# cat -> NOUN wrong; quickly (unseen) -> NOUN wrong: 3 of 6.
TAG_TEST = [_tagged("The/DET", "runs/NOUN", "zebra/NOUN"), _tagged("fun/ADJ", "cat/VERB", "quickly/ADV")]


def test_the_tag_baseline_scores_what_a_hand_count_gives_and_tags_an_unseen_word_with_the_commonest_tag():
    predicted, fit = tag_baseline(TAG_TRAIN, {"test": TAG_TEST}, TAG_SPEC, FT, 0, Reading(lowercase=True))
    rows, preds, golds = predicted["test"]
    assert rows == TAG_TEST and fit is None
    assert [json.loads(p) for p in preds] == [["DET", "VERB", "NOUN"], ["ADJ", "NOUN", "NOUN"]]
    assert score(TAG_SPEC, preds, golds)["token_accuracy"] == pytest.approx(3 / 6)
    # a tokenizer that keeps case: 'The' was never seen in train, so it gets the commonest tag, NOUN: 2 of 6
    cased, _ = tag_baseline(TAG_TRAIN, {"test": TAG_TEST}, TAG_SPEC, FT, 0, Reading(lowercase=False))
    assert json.loads(cased["test"][1][0])[0] == "NOUN"
    assert score(TAG_SPEC, *cased["test"][1:])["token_accuracy"] == pytest.approx(2 / 6)


CUE = {"p": ["good", "great", "fine", "lovely"], "n": ["bad", "awful", "poor", "grim"]}
FILLER = ["the", "film", "was", "a", "plot", "and", "cast", "of", "it", "so"]
SINGLE = TaskSpec("toy_sentiment", "single", ("accuracy", "macro_f1"), "builtin", labels=("n", "p"))
PAIR = TaskSpec("toy_pair", "pair", ("accuracy",), "builtin", labels=("a", "b"))


def _review(rng, i: int, label: str, cue: bool = True) -> dict:
    words = list(rng.choice(FILLER, 6)) + ([str(rng.choice(CUE[label]))] if cue else [])
    rng.shuffle(words)
    return {"id": str(i), "text": " ".join(words), "label": label}


def _reviews(rng, n: int, share_p: float = 0.5) -> list[dict]:
    return [_review(rng, i, "p" if rng.random() < share_p else "n") for i in range(n)]


def _accuracy(predicted, split: str) -> float:
    return score(SINGLE, *predicted[split][1:])["accuracy"]


def test_the_tfidf_baseline_learns_a_separable_task_and_stays_at_chance_on_shuffled_labels():
    rng = np.random.default_rng(0)
    train, dev, test = _reviews(rng, 400, 0.6), _reviews(rng, 200, 0.6), _reviews(rng, 400, 0.6)
    learned, fit = tfidf_baseline(train, {"dev": dev, "test": test}, SINGLE, FT, 0)
    majority = max(np.mean([r["label"] == "p" for r in test]), np.mean([r["label"] == "n" for r in test]))
    assert _accuracy(learned, "test") >= 0.95 > majority + 0.3 and fit.c in FT.probe_cs and fit.converged

    def shuffled(rows):  # labels drawn apart from the text: nothing in the words predicts them
        return [{**r, "label": str(rng.choice(["n", "p"]))} for r in rows]

    noise, _ = tfidf_baseline(shuffled(train), {"dev": shuffled(dev), "test": shuffled(test)}, SINGLE, FT, 0)
    assert abs(_accuracy(noise, "test") - 0.5) < 0.08


def test_a_pair_cue_word_counts_by_its_side():
    """The label is which side the word 'not' is on, the words otherwise alike: features of each side apart see it
    (one vocabulary over the two texts joined would not), as the encoders see a word's segment."""
    rng = np.random.default_rng(1)

    def pair(i):
        label = str(rng.choice(["a", "b"]))
        a, b = list(rng.choice(FILLER, 5)), list(rng.choice(FILLER, 5))
        (a if label == "a" else b).insert(int(rng.integers(0, 5)), "not")
        return {"id": str(i), "text_a": " ".join(a), "text_b": " ".join(b), "label": label}

    train, dev, test = ([pair(i) for i in range(n)] for n in (300, 100, 300))
    predicted, _ = tfidf_baseline(train, {"dev": dev, "test": test}, PAIR, FT, 0)
    assert score(PAIR, *predicted["test"][1:])["accuracy"] >= 0.95


def test_the_tfidf_baselines_c_is_chosen_on_dev_never_on_test():
    """The test split is dev with its labels swapped, so the C best on dev is the worst on test. The words are weak
    cues of the label (a cue word in 40% of the examples) and the labels 70/30, so C matters: the strongest penalty
    predicts the commoner label everywhere. The returned classifier must be the C best on dev, and its test score
    must be below the best test score (a baseline choosing on test would reach it)."""
    rng = np.random.default_rng(2)

    def rows(n):
        return [_review(rng, i, lab, cue=rng.random() < 0.4) for i in range(n)
                for lab in ["p" if rng.random() < 0.7 else "n"]]

    train, dev = rows(300), rows(300)
    swapped = [{**r, "label": "n" if r["label"] == "p" else "p"} for r in dev]
    evaluated = {"dev": dev, "test": swapped}
    dev_by_c, test_by_c = {}, {}
    for c in FT.probe_cs:  # each C alone: the grid of one
        one = FinetuneConfig(probe_c_grid=f"{c:g}")
        predicted, _ = tfidf_baseline(train, evaluated, SINGLE, one, 0)
        dev_by_c[c], test_by_c[c] = _accuracy(predicted, "dev"), _accuracy(predicted, "test")
    assert max(dev_by_c.values()) - min(dev_by_c.values()) > 0.05  # the grid matters on this task
    predicted, fit = tfidf_baseline(train, evaluated, SINGLE, FT, 0)
    assert _accuracy(predicted, "dev") == pytest.approx(max(dev_by_c.values()), abs=0.01)
    assert fit.c == min(c for c, v in dev_by_c.items() if v >= max(dev_by_c.values()) - 0.01)
    assert _accuracy(predicted, "test") < max(test_by_c.values()) - 0.05


def test_the_baselines_read_only_the_words_in_the_encoders_window(tiny_checkpoint):
    """A cue past the encoder's window (finetune.max_len tokens) is one the probe never reads, so the baseline must
    not read it either: read whole, the TF-IDF baseline learns it; read through the window, it is at chance. A tagged
    word past the window gets the probe's fallback tag and teaches the tag table nothing."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    rng = np.random.default_rng(3)

    def late_cue(i):
        label = str(rng.choice(["n", "p"]))
        return {"id": str(i), "text": " ".join([*rng.choice(FILLER, 30), str(rng.choice(CUE[label]))]), "label": label}

    train, dev, test = ([late_cue(i) for i in range(n)] for n in (300, 100, 300))
    for max_len, low, high in ((128, 0.95, 1.0), (16, 0.35, 0.65)):
        predicted, _ = tfidf_baseline(train, {"dev": dev, "test": test}, SINGLE, FT, 0, Reading(True, tok, max_len))
        assert low <= _accuracy(predicted, "test") <= high, max_len

    spec = TaskSpec("toy_ner", "tagging", ("token_accuracy",), "builtin", labels=("B-X", "I-X", "O"))
    row = {"id": "0", "tokens": ["the", "cat", "sat", "on", "the", "mat", "by", "the", "door", "zebra"],
           "tags": ["I-X"] * 9 + ["B-X"]}
    window = Reading(True, tok, 8)
    later = {**row, "tokens": ["zebra"] + row["tokens"], "tags": ["B-X"] + row["tags"]}
    (n,), (m,) = window.words([row]), window.words([later])
    assert 0 < n < 9 and 0 < m < 11  # [CLS] and [SEP] take 2 of the 8 positions: 'zebra' is past the window
    predicted, _ = tag_baseline([row], {"test": [later]}, spec, FT, 0, window)
    # zebra, read now, was never read in train: the commonest tag read, I-X; the words past the window: 'O'
    assert json.loads(predicted["test"][1][0]) == ["I-X"] * m + ["O"] * (11 - m)


def test_qa_has_no_text_baseline():
    spec = TaskSpec("toy_qa", "qa", ("squad_f1",), "builtin")
    assert text_baseline(spec, [], {"dev": []}, FT, 0) is None


def test_the_switch_adds_one_baseline_mode_per_task_type_and_leaves_the_probe_unchanged(tiny_checkpoint):
    """finetune.text_baselines adds baseline-tfidf rows to a classification task and baseline-tag rows to a tagging
    task, each with its dev value beside it (the TF-IDF's C too) and its predictions for every test example; the
    probe's own rows stay bit for bit, and with the switch off there is no baseline row at all."""
    from test_finetune import FIXTURES

    from trainables.finetune import run_finetuning
    from trainables.presets import build_config
    from trainables.tasks import load_hub_task

    cfg = build_config("smoke", overrides=["run.device=cpu"])
    assert not cfg.finetune.text_baselines
    tasks = [load_hub_task("mrpc", FIXTURES / "glue_mrpc"), load_hub_task("conll2003_pos", FIXTURES / "conll2003")]
    off = run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", datasets=tasks).to_tables()
    on_cfg = build_config("smoke", overrides=["run.device=cpu", "finetune.text_baselines=true"])
    reports = []
    on = run_finetuning(tiny_checkpoint, [], [0], on_cfg, mode="probe", datasets=tasks, report=reports.append)
    ev, pred = (t.to_pandas() for t in on.to_tables())
    ev_off, pred_off = (t.to_pandas() for t in off)
    assert set(ev_off["mode"]) == {"probe"} and set(pred_off["mode"]) == {"probe"}
    assert set(zip(ev["task"], ev["mode"])) == {("mrpc", "probe"), ("mrpc", "baseline-tfidf"),
                                                ("conll2003_pos", "probe"), ("conll2003_pos", "baseline-tag")}
    assert np.isfinite(ev["dev_value"]).all()
    tfidf, tag = ev[ev["mode"] == "baseline-tfidf"], ev[ev["mode"] == "baseline-tag"]
    assert tfidf["probe_c"].isin(on_cfg.finetune.probe_cs).all() and tag["probe_c"].isna().all()
    for mode in ("baseline-tfidf", "baseline-tag"):
        sel = pred[pred["mode"] == mode]
        probe = pred[(pred["mode"] == "probe") & pred["task"].isin(sel["task"])]
        assert sorted(sel["example_id"]) == sorted(probe["example_id"])  # the examples the probe scores
    main = pred[pred["mode"] == "probe"].reset_index(drop=True)
    assert main.equals(pred_off.reset_index(drop=True))
    assert any("baseline-tfidf/mrpc/accuracy" in r for r in reports)
