"""Per-example statistics reproduce trainables.metrics.compute_metric on any resample."""

import json

import numpy as np
import pytest

from analysis.stats import example_stats, metric_from_stats
from trainables.metrics import compute_metric


def _cases(rng):
    labels = np.array(["0", "1", "2"])
    g, p = rng.choice(labels, 60), rng.choice(labels, 60)
    bg, bp = rng.choice(["0", "1"], 60), rng.choice(["0", "1"], 60)
    tags = ["O", "B-PER", "I-PER", "B-LOC"]
    tg = [json.dumps(list(rng.choice(tags, rng.integers(1, 6)))) for _ in range(60)]
    tp = [json.dumps(list(rng.choice(tags, len(json.loads(t))))) for t in tg]
    words = ["the cat", "a dog", "cat", "big dog", "red cat sat"]
    qg = [json.dumps(list(rng.choice(words, 2))) for _ in range(60)]
    qp = [json.dumps(str(rng.choice(words))) for _ in range(60)]
    return {"accuracy": (p, g), "macro_f1": (p, g), "mcc": (p, g), "f1": (bp, bg),
            "entity_f1": (tp, tg), "token_accuracy": (tp, tg), "squad_em": (qp, qg), "squad_f1": (qp, qg)}


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1", "mcc", "f1", "entity_f1", "token_accuracy",
                                    "squad_em", "squad_f1"])
def test_summed_statistics_match_compute_metric_on_resamples(metric):
    rng = np.random.default_rng(1)
    preds, golds = _cases(rng)[metric]
    preds, golds = np.asarray(preds, dtype=object), np.asarray(golds, dtype=object)
    st = example_stats(metric, preds, golds, positive="1" if metric == "f1" else None)
    for _ in range(5):
        idx = rng.integers(0, len(golds), len(golds))
        counts = np.bincount(idx, minlength=len(golds)).astype(float)
        got = metric_from_stats(metric, counts @ st.values)
        kw = {"positive": "1"} if metric == "f1" else {}
        assert got == pytest.approx(compute_metric(metric, list(preds[idx]), list(golds[idx]), **kw), abs=1e-12)


def test_vectorised_over_leading_axes():
    st = example_stats("accuracy", ["a", "b", "a"], ["a", "a", "a"]).values
    w = np.array([[1, 1, 1], [0, 0, 3], [0, 3, 0]], dtype=float)
    assert metric_from_stats("accuracy", w @ st).tolist() == pytest.approx([2 / 3, 1.0, 0.0])


def test_unknown_metric_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: .*accuracy"):
        metric_from_stats("bleu", np.zeros((1, 2)))
