"""Variant descriptions and order; chance baselines of each metric."""

import json

import pytest

from analysis.baseline import chance_baseline
from analysis.variants import normalise_format, sort_variants
from trainables.metrics import compute_metric


def test_unknown_variants_sort_after_the_named_ones_and_none_stays_last():
    names = ["zeta", "none", "mlm_only@0.30", "full", "mlm_only", "best_mix", "electra", "alpha"]
    assert sort_variants(names) == ("full", "mlm_only", "mlm_only@0.30", "electra", "alpha", "zeta", "best_mix",
                                    "none")


def test_schema_1_pair_reads_as_the_pair_kind_its_weights_train():
    assert normalise_format("pair", sop_weight=1.0) == "sop_pairs"
    assert normalise_format("pair", sop_weight=0.0) == "nsp_pairs"
    assert normalise_format("single", sop_weight=0.0) == "single" and normalise_format(None, 0.0) == ""


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1", "mcc"])
def test_the_baseline_is_the_best_constant_predictor(metric):
    golds = ["a"] * 6 + ["b"] * 3 + ["c"]
    best = max(compute_metric(metric, [lab] * len(golds), golds) for lab in "abc")
    assert chance_baseline(metric, golds) == pytest.approx(best)


def test_baselines_of_f1_tagging_and_qa():
    golds = ["yes"] * 7 + ["no"] * 3
    assert chance_baseline("f1", golds, positive="yes") == pytest.approx(2 * 0.7 / 1.7)
    assert chance_baseline("f1", golds, positive="no") == 0.0  # the majority predictor never says 'no'
    tags = [json.dumps(["O", "B-PER", "O"]), json.dumps(["O", "O"])]
    assert chance_baseline("entity_f1", tags) == 0.0 and chance_baseline("token_accuracy", tags) == pytest.approx(0.8)
    assert chance_baseline("squad_f1", [json.dumps(["the cat"])]) == 0.0
