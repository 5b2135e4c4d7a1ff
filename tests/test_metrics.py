"""Each downstream metric against values computed by hand (worked out in the comments)."""

import json

import pytest

from trainables.metrics import METRICS, MetricError, compute_metric, normalize_answer


def test_accuracy():
    assert compute_metric("accuracy", ["a", "b", "a", "c"], ["a", "b", "b", "c"]) == pytest.approx(0.75)


def test_f1_positive_class_default_and_named():
    # tp=2 (idx 0, 4), fp=1 (idx 1), fn=1 (idx 3): F1 = 2*2 / (2*2 + 1 + 1) = 4/6
    preds, golds = ["1", "1", "0", "0", "1"], ["1", "0", "0", "1", "1"]
    assert compute_metric("f1", preds, golds) == pytest.approx(4 / 6)
    names = {"1": "equivalent", "0": "not_equivalent"}
    p2, g2 = [names[x] for x in preds], [names[x] for x in golds]
    assert compute_metric("f1", p2, g2) == pytest.approx(4 / 6)
    # the other class as positive: tp=1 (idx 2), fp=1 (idx 3), fn=1 (idx 1): 2/4
    assert compute_metric("f1", p2, g2, positive="not_equivalent") == pytest.approx(0.5)


def test_f1_undecidable_positive_label_is_an_error():
    with pytest.raises(MetricError, match="positive"):
        compute_metric("f1", ["x", "y"], ["y", "x"])


def test_macro_f1():
    # a: tp1 fp1 fn0 -> 2/3; b: tp1 fp0 fn1 -> 2/3; c: 1 -> mean 7/9
    assert compute_metric("macro_f1", ["a", "a", "b", "c"], ["a", "b", "b", "c"]) == pytest.approx(7 / 9)


def test_mcc_binary_and_degenerate():
    # tp=2 fp=1 fn=1 tn=1: (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    assert compute_metric("mcc", ["1", "1", "0", "0", "1"], ["1", "0", "0", "1", "1"]) == pytest.approx(1 / 6)
    assert compute_metric("mcc", ["1", "1", "1"], ["1", "0", "1"]) == 0.0  # constant prediction
    assert compute_metric("mcc", ["1", "0"], ["1", "0"]) == pytest.approx(1.0)
    assert compute_metric("mcc", ["0", "1"], ["1", "0"]) == pytest.approx(-1.0)


def test_entity_f1_seqeval():
    # gold entities: PER(0-1), LOC(3), MISC(s2); predicted: PER(0-1), ORG(3). tp=1, P=1/2, R=1/3 -> F=0.4
    gold = [json.dumps(["B-PER", "I-PER", "O", "B-LOC"]), json.dumps(["B-MISC"])]
    pred = [json.dumps(["B-PER", "I-PER", "O", "B-ORG"]), json.dumps(["O"])]
    assert compute_metric("entity_f1", pred, gold) == pytest.approx(0.4)


def test_token_accuracy_is_ratio_of_sums():
    # 2/3 and 1/1 -> 3/4 over tokens (a mean of per-sentence ratios would be 5/6)
    gold = [json.dumps(["A", "B", "C"]), json.dumps(["D"])]
    pred = [json.dumps(["A", "B", "X"]), json.dumps(["D"])]
    assert compute_metric("token_accuracy", pred, gold) == pytest.approx(0.75)


def test_tagging_length_mismatch_is_an_error():
    with pytest.raises(MetricError, match="tags"):
        compute_metric("token_accuracy", [json.dumps(["A"])], [json.dumps(["A", "B"])])


def test_squad_normalisation():
    assert normalize_answer("An  apple, the END.") == "apple end"
    assert normalize_answer("Theatre") == "theatre"  # 'the' only as a whole word


def test_squad_em_and_f1():
    # ex1: "The Eiffel Tower!" == "eiffel tower" after normalisation: EM 1, F1 1
    # ex2: "in Paris" vs ["Lyon", "Paris"]: EM 0; F1 max(0, P=1/2 R=1 -> 2/3)
    preds = [json.dumps("The Eiffel Tower!"), json.dumps("in Paris")]
    golds = [json.dumps(["eiffel tower", "Paris"]), json.dumps(["Lyon", "Paris"])]
    assert compute_metric("squad_em", preds, golds) == pytest.approx(0.5)
    assert compute_metric("squad_f1", preds, golds) == pytest.approx((1 + 2 / 3) / 2)


def test_registry_and_errors():
    assert set(METRICS) == {"accuracy", "f1", "macro_f1", "mcc", "entity_f1", "token_accuracy",
                            "squad_em", "squad_f1"}
    with pytest.raises(MetricError, match="unknown metric 'bleu'; valid: accuracy"):
        compute_metric("bleu", ["a"], ["a"])
    with pytest.raises(MetricError, match="differ in length"):
        compute_metric("accuracy", ["a"], ["a", "b"])
    with pytest.raises(MetricError, match="not a JSON string"):
        compute_metric("squad_em", ["Paris"], [json.dumps(["Paris"])])
