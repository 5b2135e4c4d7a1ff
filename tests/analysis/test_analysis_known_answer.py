"""The planted-effects table: a contrast found either way round, recovered only when called in the
expected direction after Holm over the checkable planted effects; the null task's rule (no contrast called
after Holm over its own contrasts); the gate; which report contrasts the check vouches for; replication."""

from types import SimpleNamespace

import pytest

from analysis.bootstrap import Interval
from analysis.known_answer import (NOT_CHECKABLE, PLANTED_EFFECTS, PlantedEffect, Replication, check_planted,
                                   clopper_pearson, format_check, planted_tasks_for,
                                   verdict_for)


def _iv(est, half, p, seeds=3):
    return Interval(est, est - half, est + half, p, half / 2, 2.0, seeds, seeds >= 3, est - half, est + half)


def _estimate(task, weights, iv):
    return SimpleNamespace(task=task, contrast=SimpleNamespace(weights=weights), interval=iv)


def _null(*intervals):
    names = ["full", "mlm_only", "sop_only", "nsp_only", "mlm_pairs"]
    return [_estimate("planted_null", {names[i]: 1.0, "none": -1.0}, iv) for i, iv in enumerate(intervals)]


def test_planted_effects_are_recovered_only_when_called_in_the_expected_direction():
    lexical, lexical_ft, lexical2, order, discourse, fmt, swap = PLANTED_EFFECTS
    contrasts = [
        _estimate(lexical.task, lexical.weights, _iv(0.30, 0.05, 1e-4)),  # recovered
        _estimate(lexical_ft.task, {"none": 1.0, "mlm_only": -1.0}, _iv(-0.25, 0.05, 1e-4)),  # derived the other way
        _estimate(lexical2.task, lexical2.weights, _iv(0.30, 0.05, 1e-6)),  # not checkable (protocol 3): no verdict
        _estimate(order.task, order.weights, _iv(0.30, 0.05, 1e-6)),  # not checkable (protocol 2): no verdict
        _estimate(discourse.task, discourse.weights, _iv(0.30, 0.05, 1e-6)),  # not checkable: no verdict
        *_null(_iv(0.01, 0.05, 0.7), _iv(0.08, 0.05, 0.04)),  # the second misses 0 but is not called after Holm
    ]
    check = check_planted(SimpleNamespace(contrasts=contrasts))
    assert [r.recovered for r in check.effects] == [True, True, False, False, False, False, False]
    assert [r.verdict for r in check.effects][2:] == [NOT_CHECKABLE] * 5
    assert check.effects[1].interval.estimate == 0.25 and check.effects[1].interval.lo == 0.2
    assert (check.null_called, check.null_covered, check.null_total) == (0, 1, 2) and check.null_passes
    assert check.passed
    assert format_check(check).startswith(  # what was checked named apart from what was not
        "instrument check PASSED: 2 of 2 checkable planted effects recovered (MLM learns word classes; MLM learns "
        "word classes, fine-tuned); 5 more not checked, not checkable at this size (MLM contribution; SOP learns "
        "the order; NSP loss effect; input-format effect; SOP instead of NSP on order)")
    wrong = [_estimate(lexical.task, lexical.weights, _iv(-0.20, 0.05, 1e-4)), *contrasts[1:]]  # resolved, wrong sign
    check = check_planted(SimpleNamespace(contrasts=wrong))
    assert [r.verdict for r in check.effects][:2] == ["not recovered", "recovered"] and not check.passed
    text = format_check(check)
    assert text.startswith("instrument check FAILED: 1 of 2 checkable planted effects recovered")
    assert text.count("**recovered**") == 1 and "not recovered" in text
    as_json = check.to_json()  # a report's mlm_only - none is vouched for only if every planted control of it passed
    assert verdict_for(as_json, lexical.weights) == "not recovered"
    assert verdict_for(as_json, lexical2.weights) == NOT_CHECKABLE
    assert verdict_for(as_json, discourse.weights) == NOT_CHECKABLE
    fine = check_planted(SimpleNamespace(contrasts=contrasts)).to_json()
    assert verdict_for(fine, lexical.weights) == "recovered"


def test_a_headline_says_on_which_planted_task_its_contrast_was_recovered():
    """A report's contrast on a real task (sentiment) is vouched for by the planted task the check measured it
    on, and the headline says which: the check shows the pipeline recovers the effect where it is planted,
    not that the report's own task was checked."""
    from analysis.headline import vouched

    lexical, lexical_ft = PLANTED_EFFECTS[:2]
    good = [_estimate(e.task, e.weights, _iv(0.3, 0.05, 1e-5)) for e in PLANTED_EFFECTS]
    as_json = check_planted(SimpleNamespace(contrasts=good + _null(_iv(0.0, 0.05, 0.9)))).to_json()
    assert planted_tasks_for(as_json, lexical.weights) == [lexical.task, lexical_ft.task] != []
    sentiment = _estimate("sentiment", {"mlm_only": 1.0, "none": -1.0}, _iv(0.1, 0.05, 1e-3))
    assert vouched(as_json, sentiment) == " (instrument check: recovered on planted_lexical (probe), planted_lexical)"
    discourse = PLANTED_EFFECTS[4]  # not checkable at this size: no planted task is named
    assert vouched(as_json, _estimate("topic", discourse.weights, _iv(0.1, 0.05, 1e-3))) == \
        " (instrument check: not checkable at this size)"
    assert vouched(as_json, _estimate("topic", {"electra": 1.0, "none": -1.0}, _iv(0.1, 0.05, 1e-3))) == \
        " (no planted control for this contrast)"
    assert vouched(None, sentiment) == ""
    mixed = [_estimate(lexical_ft.task, lexical_ft.weights, _iv(0.1, 0.3, 0.5)) if e is lexical_ft else c
             for e, c in zip(PLANTED_EFFECTS, good)]  # the probe recovers it, fine-tuning does not
    mixed_json = check_planted(SimpleNamespace(contrasts=mixed + _null(_iv(0.0, 0.05, 0.9)))).to_json()
    assert vouched(mixed_json, sentiment) == " (instrument check: not recovered on planted_lexical)"


def test_the_check_passes_only_with_every_checkable_effect_and_the_null_rule():
    good = [_estimate(e.task, e.weights, _iv(0.3, 0.05, 1e-5)) for e in PLANTED_EFFECTS]
    passed = check_planted(SimpleNamespace(contrasts=good + _null(_iv(0.0, 0.05, 0.9))))
    assert passed.passed and passed.headline().startswith("instrument check PASSED: 2 of 2")
    called_null = check_planted(SimpleNamespace(contrasts=good + _null(_iv(0.0, 0.05, 0.9), _iv(0.2, 0.05, 1e-6))))
    assert called_null.null_called == 1 and not called_null.null_passes and not called_null.passed
    assert "FAILS its rule: 1 of 2" in format_check(called_null)
    no_null = check_planted(SimpleNamespace(contrasts=good))
    assert not no_null.passed and "the null task: not measured" in no_null.headline()


def test_an_effect_not_checkable_at_this_size_gets_no_verdict_and_stays_out_of_holm():
    effects = PLANTED_EFFECTS[:2] + (PlantedEffect("input-format effect (mlm_pairs - mlm_only)",
                                                   {"mlm_pairs": 1.0, "mlm_only": -1.0}, "planted_lexical (probe)",
                                                   -1, "why", checkable=False),)
    contrasts = [_estimate(e.task, e.weights, _iv(0.3, 0.1, 0.02)) for e in effects]
    check = check_planted(SimpleNamespace(contrasts=contrasts + _null(_iv(0.0, 0.1, 0.9))), effects)
    assert [r.verdict for r in check.effects] == ["recovered", "recovered", NOT_CHECKABLE]  # Holm over 2, not 3
    assert check.passed and "not checkable at this size (input-format effect)" in check.headline()
    as_json = check.to_json()
    assert verdict_for(as_json, {"mlm_only": -1.0, "mlm_pairs": 1.0}) == NOT_CHECKABLE
    assert verdict_for(as_json, {"none": 1.0, "mlm_only": -1.0}) == "recovered"  # the same contrast, negated
    assert verdict_for(as_json, {"full": 1.0, "none": -1.0}) == ""


def test_holm_over_the_planted_effects_and_unreliable_intervals_are_not_recovered():
    effects = PLANTED_EFFECTS[:2]
    contrasts = [_estimate(e.task, e.weights, _iv(0.3, 0.1, 0.03)) for e in effects]  # p 0.03 each: Holm 0.06
    assert [r.recovered for r in check_planted(SimpleNamespace(contrasts=contrasts), effects).effects] == [False] * 2
    few = [_estimate(e.task, e.weights, _iv(0.3, 0.1, 1e-5, seeds=2)) for e in effects]
    assert not any(r.recovered for r in check_planted(SimpleNamespace(contrasts=few), effects).effects)
    missing = check_planted(SimpleNamespace(contrasts=[]), effects)
    assert missing.recovered == 0 and "not measured" in format_check(missing)


def test_a_task_no_variant_learned_still_has_its_contrasts_read():
    """The analysis leaves a task nobody learned out of every family; the check still reads it: the null
    task's intervals against 0, and a planted effect's contrast (not recovered when nobody learned it)."""
    lexical = PLANTED_EFFECTS[0]
    unlearned = [_estimate("planted_null (probe)", {"full": 1.0, "none": -1.0}, _iv(0.01, 0.05, 0.7)),
                 _estimate("planted_null", {"sop_only": 1.0, "none": -1.0}, _iv(0.09, 0.05, 0.04)),  # misses 0
                 _estimate(lexical.task, lexical.weights, _iv(0.01, 0.05, 0.7))]
    check = check_planted(SimpleNamespace(contrasts=[], unlearned=unlearned,
                                          not_learned=("planted_null", "planted_null (probe)", lexical.task)))
    assert (check.null_covered, check.null_total) == (1, 2)
    assert check.effects[0].interval is not None and check.effects[0].verdict == "not recovered"
    assert check.headline().endswith("the null task: no variant beat chance on dev, as its truth says; 0 of 2 "
                                     "contrasts called (1 of 2 intervals cover 0)")


def test_replication_counts_languages_and_applies_the_frozen_rule():
    good = [_estimate(e.task, e.weights, _iv(0.3, 0.05, 1e-5)) for e in PLANTED_EFFECTS] + _null(_iv(0, .1, .9))
    bad = [_estimate(e.task, e.weights, _iv(0.0, 0.05, 0.9)) for e in PLANTED_EFFECTS] + _null(_iv(0, .1, .9))
    checks = {k: check_planted(SimpleNamespace(contrasts=good)) for k in range(4)}
    rep = Replication({**checks, 9: check_planted(SimpleNamespace(contrasts=bad))})
    assert rep.holds and rep.rows()[0][1:] == (4, 5) and rep.rows()[-2] == ("the whole check passed", 4, 5)
    assert "| 4 of 5 | 0.80 [0.28, 0.99] |" in rep.format()
    assert rep.recoveries == (8, 10) and not rep.sabotage_holds  # 2 checkable effects per check
    two_bad = Replication({**checks, 8: checks[0],
                           9: check_planted(SimpleNamespace(contrasts=bad)),
                           10: check_planted(SimpleNamespace(contrasts=bad))})
    assert not two_bad.holds  # 4 of 6 < 80%


def test_the_sabotage_rule_allows_no_passing_check_and_at_most_5_percent_of_effects():
    def one(recovered: int):
        ivs = [_iv(0.3, 0.05, 1e-5) if i < recovered else _iv(0.0, 0.05, 0.9) for i in range(len(PLANTED_EFFECTS))]
        return check_planted(SimpleNamespace(contrasts=[_estimate(e.task, e.weights, iv)
                                                        for e, iv in zip(PLANTED_EFFECTS, ivs)] + _null(_iv(0, .1, .9))))
    quiet = {(k, 3): one(0) for k in range(19)}
    assert Replication({**quiet, (99, 3): one(1)}).sabotage_holds  # 1 of 40 effects: 2.5%
    assert not Replication({**quiet, (99, 3): one(4)}).sabotage_holds  # a sabotaged check passed
    many = Replication({**{(k, 3): one(1) for k in range(5)}, **{(k, 3): one(0) for k in range(5, 20)}})
    assert many.recoveries == (5, 40) and not many.sabotage_holds  # 12.5%
    assert "sabotaged check(s)" in many.format(sabotaged=True) and "DOES NOT HOLD" in many.format(sabotaged=True)


def test_clopper_pearson_matches_known_values():
    assert clopper_pearson(0, 20)[0] == 0.0 and clopper_pearson(0, 20)[1] == pytest.approx(0.1684, abs=1e-4)
    assert clopper_pearson(5, 5)[0] == pytest.approx(0.4782, abs=1e-4)


def test_the_check_exits_1_when_it_failed_and_0_when_it_passed(tmp_path):
    from analysis.known_answer import dumps
    from sweeps import known_answer, objective_weights

    good = [_estimate(e.task, e.weights, _iv(0.3, 0.05, 1e-5)) for e in PLANTED_EFFECTS] + _null(_iv(0, .1, .9))
    for passed, contrasts in ((True, good), (False, good[1:])):
        check = check_planted(SimpleNamespace(contrasts=contrasts))
        assert check.passed is passed
        for path in (tmp_path / "report", tmp_path / "instrument_check" / "report"):
            path.mkdir(parents=True, exist_ok=True)
            (path / "known_answer.json").write_text(dumps(check.to_json()))
        assert known_answer.status(str(tmp_path)) == objective_weights.status(str(tmp_path)) == (0 if passed else 1)
    assert known_answer.status(str(tmp_path / "nothing")) == 1  # no verdict written: not a pass
    assert objective_weights.status(str(tmp_path / "nothing")) == 0  # the main job without --check
