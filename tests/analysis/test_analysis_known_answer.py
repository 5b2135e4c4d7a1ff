"""The planted-effects table: a contrast found either way round, recovered only when called in the
expected direction after Holm over the planted effects, and the null task's coverage of 0."""

from types import SimpleNamespace

from analysis.bootstrap import Interval
from analysis.known_answer import PLANTED_EFFECTS, check_planted, format_check


def _iv(est, half, p, seeds=3):
    return Interval(est, est - half, est + half, p, half / 2, 2.0, seeds, seeds >= 3, est - half, est + half)


def _estimate(task, weights, iv):
    return SimpleNamespace(task=task, contrast=SimpleNamespace(weights=weights), interval=iv)


def test_planted_effects_are_recovered_only_when_called_in_the_expected_direction():
    lexical, lexical2, discourse, order = PLANTED_EFFECTS
    contrasts = [
        _estimate(lexical.task, lexical.weights, _iv(0.30, 0.05, 1e-4)),  # recovered
        _estimate(lexical2.task, {"nsp_only": 1.0, "full": -1.0}, _iv(-0.25, 0.05, 1e-4)),  # derived the other way
        _estimate(discourse.task, discourse.weights, _iv(-0.20, 0.05, 1e-4)),  # resolved, wrong sign
        _estimate(order.task, order.weights, _iv(0.10, 0.15, 0.2)),  # inconclusive
        _estimate("planted_null", {"full": 1.0, "none": -1.0}, _iv(0.01, 0.05, 0.7)),
        _estimate("planted_null", {"mlm_only": 1.0, "none": -1.0}, _iv(0.08, 0.05, 0.01)),  # misses 0
    ]
    check = check_planted(SimpleNamespace(contrasts=contrasts))
    assert [r.recovered for r in check.effects] == [True, True, False, False]
    assert check.effects[1].interval.estimate == 0.25 and check.effects[1].interval.lo == 0.2
    assert (check.null_covered, check.null_total) == (1, 2)
    text = format_check(check)
    assert text.startswith("instrument check: 2 of 4 planted effects recovered")
    assert text.count("**recovered**") == 2 and "not recovered" in text


def test_holm_over_the_planted_effects_and_unreliable_intervals_are_not_recovered():
    effects = PLANTED_EFFECTS[:2]
    contrasts = [_estimate(e.task, e.weights, _iv(0.3, 0.1, 0.03)) for e in effects]  # p 0.03 each: Holm 0.06
    assert [r.recovered for r in check_planted(SimpleNamespace(contrasts=contrasts), effects).effects] == [False] * 2
    few = [_estimate(e.task, e.weights, _iv(0.3, 0.1, 1e-5, seeds=2)) for e in effects]
    assert not any(r.recovered for r in check_planted(SimpleNamespace(contrasts=few), effects).effects)
    missing = check_planted(SimpleNamespace(contrasts=[]), effects)
    assert missing.recovered == 0 and "not measured" in format_check(missing)


def test_a_null_task_not_learned_still_has_its_intervals_read_against_0():
    """The analysis leaves a task nobody learned out of every family; the check still reads whether its
    intervals cover 0 (the negative control's truth), from the contrasts the analysis kept aside."""
    unlearned = [_estimate("planted_null (probe)", {"full": 1.0, "none": -1.0}, _iv(0.01, 0.05, 0.7)),
                 _estimate("planted_null", {"sop_only": 1.0, "none": -1.0}, _iv(0.09, 0.05, 0.01))]  # misses 0
    check = check_planted(SimpleNamespace(contrasts=[], unlearned=unlearned,
                                          not_learned=("planted_null", "planted_null (probe)")))
    assert (check.null_covered, check.null_total) == (1, 2)
    assert check.headline().endswith("the null task: no variant beat chance on dev, as its truth says; its intervals "
                                     "cover 0 in 1 of 2 contrasts")
