"""Rules as files: each clause's verdict is computed from an export whose facts are known, and the verdict
carries the rule file's git hash and says when the file read is not the committed one."""

import subprocess

import pytest
from analysis_fixtures import write_export

from analysis.rules import FAIL, PASS, UNMEASURED, RuleError, judge_export, load_rule, main

RULE = """
name = "fixture"
command = "python sweeps/objective_weights.py --preset cpu-long"
first_seed = 0
seeds = 3
primary = "mlm_only - none"
tasks = ["sst", "topic"]
equivalence_margin = 0.02

[wall_minutes]
native_bf16 = 30
fp32 = 45

[[clause]]
kind = "design"

[[clause]]
kind = "wall_time"

[[clause]]
kind = "every_run"
objective = "mlm"
column = "mlm_acc"
at_least = {floor}

[[clause]]
kind = "one_label"
at_most = 0

[[clause]]
kind = "called"
contrast = "mlm_only - none"
tasks_at_least = {tasks}

[[clause]]
kind = "estimate"
contrast = "mlm_only - none"
row = "average (finetune)"
at_least = {least}
lower_above = 0.0

[[clause]]
kind = "check"
"""


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _rule(tmp_path, commit=True, floor=0.05, tasks=2, least=0.15):
    repo = tmp_path / "repo"
    (repo / "docs" / "rules").mkdir(parents=True, exist_ok=True)
    path = repo / "docs" / "rules" / "fixture.toml"
    path.write_text(RULE.format(floor=floor, tasks=tasks, least=least))
    if commit:
        _git(repo, "init", "-q")
        _git(repo, "add", ".")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rule")
    return path


@pytest.fixture
def export(tmp_path):
    # mlm_only is 0.2 above none on both tasks, at three seeds, every MLM run at mlm_acc 0.1 (the fixture's)
    return write_export(tmp_path / "export", {"mlm_only": 0.8, "none": 0.6})


def _statuses(j):
    return {v.clause.split(":")[0].split(" (")[0]: v.status for v in j.verdicts}


def test_each_clause_is_judged_from_the_export_and_the_rule_passes_only_when_all_do(tmp_path, export):
    j = judge_export(_rule(tmp_path), export, wall_minutes=20.0, kind="native_bf16", check={"passed": True},
                     n_boot=200)
    assert [v.status for v in j.verdicts] == [PASS] * 7 and j.passed
    assert j.provenance.committed and len(j.provenance.blob) == 40
    assert "committed in" in j.lines()[0] and j.lines()[0].startswith("Rule fixture: PASS (7 of 7")

    # the same export under stricter thresholds, a slower machine and a failed check: each clause fails alone
    strict = judge_export(_rule(tmp_path / "b", floor=0.15, tasks=3, least=0.25), export, wall_minutes=46.0,
                          kind="fp32", check={"passed": False}, n_boot=200)
    assert [v.status for v in strict.verdicts] == [PASS, FAIL, FAIL, PASS, FAIL, FAIL, FAIL] and not strict.passed
    observed = {v.clause.split(" ")[0]: v.observed for v in strict.verdicts}
    assert "46.0 min on a fp32 CPU (limit 45)" in strict.verdicts[1].observed
    assert strict.verdicts[2].observed.startswith("lowest 0.100") and "6 below" not in observed
    assert strict.verdicts[4].observed == "2 tasks: sst, topic"


def test_what_the_export_cannot_show_is_not_measured_never_a_pass(tmp_path, export):
    j = judge_export(_rule(tmp_path), export, n_boot=200)  # no wall time, no instrument check
    assert j.verdicts[1].status == UNMEASURED and j.verdicts[-1].status == UNMEASURED and not j.passed


def test_a_rule_that_is_not_the_committed_file_is_said_not_to_be_evidence(tmp_path, export):
    path = _rule(tmp_path)
    path.write_text(path.read_text().replace("at_least = 0.15", "at_least = 0.1"))  # re-read after the data
    j = judge_export(path, export, wall_minutes=20.0, kind="native_bf16", check={"passed": True}, n_boot=200)
    assert all(v.status == PASS for v in j.verdicts) and not j.passed
    assert "NOT the committed file" in j.lines()[0] and "not evidence" in j.lines()[0]
    uncommitted = judge_export(_rule(tmp_path / "c", commit=False), export, 20.0, "native_bf16", {"passed": True},
                               n_boot=200)
    assert not uncommitted.provenance.committed and not uncommitted.passed


@pytest.mark.parametrize("text, message", [
    ('name = "x"\n[[clause]]\nkind = "vibes"', "kind='vibes' is not valid; allowed: check, design"),
    ('name = "x"\n[[clause]]\nkind = "called"\ncontrast = "a - b"', "needs tasks_at_least"),
    ('name = "x"\n[wall_minutes]\ngpu = 3', "wall_minutes.gpu is not a CPU kind; allowed: native_bf16, fp32"),
    ('name = "x"\nthreshold = 3', "unknown key 'threshold'"),
    ('name = "x"\nequivalence_margin = -1', "equivalence_margin=-1 must be a number > 0"),
    ("name = ", "not valid TOML"),
])
def test_a_bad_rule_is_one_line_naming_the_value(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_rule(path)


def test_the_command_prints_each_clause_and_exits_1_on_a_fail(tmp_path, export, capsys):
    assert main([str(_rule(tmp_path, least=0.5)), str(export)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Rule fixture: FAIL") and "  FAIL         mlm_only - none on average (finetune)" in out


def test_every_rule_file_in_the_docs_loads_and_states_a_wall_time_per_cpu_kind():
    """A rule committed with a typo would fail only at the end of the run it judges."""
    from pathlib import Path

    from analysis.rules import CPU_KINDS

    files = sorted((Path(__file__).parents[2] / "docs" / "rules").glob("*.toml"))
    assert files
    for f in files:
        rule = load_rule(str(f))
        assert rule.name == f.stem and set(rule.wall_minutes) == set(CPU_KINDS), f
