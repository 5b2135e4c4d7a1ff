"""Rules as files: each clause's verdict is computed from an export whose facts are known, and the verdict
carries the rule file's git hash and says when the file read is not the committed one."""

import re
import subprocess
from pathlib import Path

import pytest
from analysis_fixtures import write_export

from analysis.rules import (FAIL, PASS, RUN_RECORD, UNMEASURED, RuleError, inside_repo, judge_export, load_rule, main,
                            start_record)

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


def _rule(tmp_path, commit=True, floor=0.05, tasks=2, least=0.15, text=None, name="fixture"):
    repo = tmp_path / "repo"
    (repo / "docs" / "rules").mkdir(parents=True, exist_ok=True)
    path = repo / "docs" / "rules" / f"{name}.toml"
    path.write_text(text if text is not None else RULE.format(floor=floor, tasks=tasks, least=least))
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
    path = _rule(tmp_path)
    j = judge_export(path, export, wall_minutes=20.0, kind="native_bf16", check={"passed": True}, n_boot=200,
                     start=start_record(path))
    assert [v.status for v in j.verdicts] == [PASS] * 7 and j.passed
    assert j.provenance.committed and len(j.provenance.blob) == 40
    assert len(j.provenance.last_commit) == 40 and j.provenance.last_commit_time  # found from the file's folder too
    assert "committed in" in j.lines()[0] and j.lines()[0].startswith("Rule fixture: PASS (7 of 7")

    # the same export under stricter thresholds, a slower machine and a failed check: each clause fails alone
    strict_path = _rule(tmp_path / "b", floor=0.15, tasks=3, least=0.25)
    strict = judge_export(strict_path, export, wall_minutes=46.0, kind="fp32", check={"passed": False}, n_boot=200,
                          start=start_record(strict_path))
    assert [v.status for v in strict.verdicts] == [PASS, FAIL, FAIL, PASS, FAIL, FAIL, FAIL] and not strict.passed
    assert "46.0 min on a fp32 CPU (limit 45)" in strict.verdicts[1].observed
    assert strict.verdicts[2].observed == "lowest 0.100 (mlm_only seed 0) over 3 runs; 3 below"
    assert strict.verdicts[4].observed == "2 tasks: sst, topic"


def test_what_the_export_cannot_show_is_not_measured_never_a_pass(tmp_path, export):
    j = judge_export(_rule(tmp_path), export, n_boot=200)  # no wall time, no instrument check
    assert j.verdicts[1].status == UNMEASURED and j.verdicts[-1].status == UNMEASURED and not j.passed


def test_a_rule_that_is_not_the_committed_file_is_said_not_to_be_evidence(tmp_path, export):
    path = _rule(tmp_path)
    start = start_record(path)
    path.write_text(path.read_text().replace("at_least = 0.15", "at_least = 0.1"))  # re-read after the data
    j = judge_export(path, export, wall_minutes=20.0, kind="native_bf16", check={"passed": True}, n_boot=200,
                     start=start)
    assert all(v.status == PASS for v in j.verdicts) and not j.passed
    assert "NOT the committed file" in j.lines()[0] and "not evidence" in j.lines()[0]
    uncommitted_path = _rule(tmp_path / "c", commit=False)
    uncommitted = judge_export(uncommitted_path, export, 20.0, "native_bf16", {"passed": True}, n_boot=200,
                               start=start_record(uncommitted_path))
    assert not uncommitted.provenance.committed and not uncommitted.passed


def test_a_rule_committed_or_changed_after_the_run_started_is_not_evidence(tmp_path, export):
    """Committed at judging time is not enough: the verdict compares the rule with the record taken when the run
    started (the blob, and whether it was committed then)."""
    facts = dict(wall_minutes=20.0, kind="native_bf16", check={"passed": True}, n_boot=200)
    late = _rule(tmp_path / "late", commit=False)
    start = start_record(late)  # the run starts before the rule is committed
    repo = late.parents[2]
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rule")
    j = judge_export(late, export, start=start, **facts)
    assert j.provenance.committed and not j.passed and "was not the committed file when the run started" in j.lines()[0]

    edited = _rule(tmp_path / "edited")
    start = start_record(edited)
    edited.write_text(edited.read_text().replace("at_least = 0.15", "at_least = 0.1"))
    _git(edited.parents[2], "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "re-read")
    j = judge_export(edited, export, start=start, **facts)
    assert j.provenance.committed and not j.passed and "changed after the run started" in j.lines()[0]

    assert not judge_export(_rule(tmp_path / "none"), export, **facts).passed  # no record of the start at all


def test_the_design_clause_fails_on_a_failed_run_or_another_task_set(tmp_path):
    path = _rule(tmp_path)
    facts = dict(wall_minutes=20.0, kind="native_bf16", check={"passed": True}, n_boot=200, start=start_record(path))
    failed = write_export(tmp_path / "failed", {"mlm_only": 0.8, "none": 0.6}, extra_runs=(("mlm_only", 3, "failed"),))
    v = judge_export(path, failed, **facts).verdicts[0]
    assert v.status == FAIL and "1 run(s) not completed, e.g. mlm_only seed 3 (failed)" in v.observed
    more = write_export(tmp_path / "more", {"mlm_only": 0.8, "none": 0.6}, tasks=("sst", "topic", "extra"))
    v = judge_export(path, more, **facts).verdicts[0]
    assert v.status == FAIL and "tasks extra, sst, topic" in v.observed
    ok = write_export(tmp_path / "ok", {"mlm_only": 0.8, "none": 0.6})
    assert judge_export(path, ok, **facts).verdicts[0].status == PASS


def test_a_run_that_did_not_record_the_value_fails_every_run(tmp_path):
    import pandas as pd

    path = _rule(tmp_path)
    export = write_export(tmp_path / "export", {"mlm_only": 0.8, "none": 0.6})
    runs = pd.read_parquet(export / "runs.parquet")
    runs.loc[runs["run_id"] == "mlm_only-s1", "mlm_acc"] = float("nan")
    runs.to_parquet(export / "runs.parquet")
    v = judge_export(path, export, n_boot=200, start=start_record(path)).verdicts[2]
    assert v.status == FAIL and v.observed.endswith("over 2 runs; 1 without mlm_acc")


def test_a_rule_outside_the_project_repository_is_refused(tmp_path, monkeypatch):
    path = _rule(tmp_path)
    with pytest.raises(RuleError, match="not inside this project's git repository"):
        inside_repo(path, cwd=Path(__file__).parent)
    inside_repo(path, cwd=path.parent)


@pytest.mark.parametrize("text, message", [
    ('name = "x"\n[[clause]]\nkind = "vibes"', "kind='vibes' is not valid; allowed: check, design"),
    ('name = "x"\n[[clause]]\nkind = "called"\ncontrast = "a - b"', "needs tasks_at_least"),
    ('name = "x"\n[wall_minutes]\ngpu = 3\n[[clause]]\nkind = "check"', "wall_minutes.gpu is not a CPU kind; allowed: native_bf16, fp32"),
    ('name = "x"\nthreshold = 3\n[[clause]]\nkind = "check"', "unknown key 'threshold'"),
    ('name = "x"\nequivalence_margin = -1\n[[clause]]\nkind = "check"', "equivalence_margin=-1 must be a number > 0"),
    ('name = "x"', "needs at least one [[clause]] table"),
    ('name = "x"\n[[clause]]\nkind = "estimate"\ncontrast = "a - b"\nrow = "pos"\nlower_abov = 0.0',
     "clause 1 (estimate) has unknown key 'lower_abov'; allowed: contrast, row, at_least, lower_above"),
    ('name = "x"\n[[clause]]\nkind = "estimate"\ncontrast = "a - b"\nrow = "pos"',
     "needs at_least or lower_above"),
    ('name = "x"\n[[clause]]\nkind = "called"\ncontrast = "a - b"\ntasks_at_least = 2\nsign = "Positive"',
     "sign='Positive': must be positive or negative"),
    ('name = "x"\n[[clause]]\nkind = "called"\ncontrast = "a - b"\ntasks_at_least = "two"',
     "tasks_at_least='two': must be a count >= 1"),
    ('name = "x"\ntasks = "sst"\n[[clause]]\nkind = "check"', "tasks='sst' must be a list of task names"),
    ('name = "x"\nseeds = "3"\n[[clause]]\nkind = "check"', "seeds='3' must be a count >= 1"),
    ('name = "x"\n[wall_minutes]\nfp32 = "lots"\n[[clause]]\nkind = "check"', "wall_minutes.fp32='lots' must be"),
    ('name = "x"\nclause = [1]', "needs at least one [[clause]] table"),
    ("name = ", "not valid TOML"),
])
def test_a_bad_rule_is_one_line_naming_the_value(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RuleError, match=re.escape(message)):
        load_rule(path)


def test_the_command_prints_each_clause_and_exits_1_on_a_fail(tmp_path, export, capsys, monkeypatch):
    """The command reads the start record and the wall time the sweep left beside its export."""
    import json

    path = _rule(tmp_path, least=0.5)
    monkeypatch.chdir(path.parent)
    (export.parent / RUN_RECORD).write_text(json.dumps({**start_record(path), "wall_minutes": 31.0,
                                                         "cpu_kind": "native_bf16"}))
    assert main([str(path), str(export)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Rule fixture: FAIL") and "  FAIL         mlm_only - none on average (finetune)" in out
    assert "31.0 min on a native_bf16 CPU (limit 30)" in out and "as at the run's start" in out


def test_every_rule_file_in_the_docs_loads_and_states_a_wall_time_per_cpu_kind():
    """A rule committed with a typo would fail only at the end of the run it judges."""
    from pathlib import Path

    from analysis.rules import CPU_KINDS

    files = sorted((Path(__file__).parents[2] / "docs" / "rules").glob("*.toml"))
    assert files
    for f in files:
        rule = load_rule(str(f))
        assert rule.name == f.stem and set(rule.wall_minutes) == set(CPU_KINDS), f


def test_a_sweep_records_the_rule_at_its_start_and_a_resumed_sweep_is_not_judged_on_its_time(tmp_path, export,
                                                                                              capsys):
    """sweeps.frame: the first start writes the record; a resume keeps it and marks it, so the wall-time clause is
    not measured (a resumed sweep's clock saw only its last part); the verdict goes into the export and report."""
    import json
    from types import SimpleNamespace

    from sweeps.frame import judge_rule, record_rule_start

    path = _rule(tmp_path)
    root = export.parent
    record_rule_start(str(path), str(root))
    first = json.loads((root / RUN_RECORD).read_text())
    args = SimpleNamespace(rule=str(path), gpus_per_trial=0)
    report = root / "report"
    report.mkdir()
    assert judge_rule(args, str(root), str(export), str(report), 12.0) is False  # no instrument check ran here
    judged = json.loads((export / "rule.json").read_text())
    assert judged["start"]["blob"] == first["blob"] and not judged["not_evidence"]
    assert (report / "rule.json").exists() and "wall time" in capsys.readouterr().out
    assert json.loads((root / RUN_RECORD).read_text())["wall_minutes"] == 12.0

    record_rule_start(str(path), str(root))  # --resume
    again = json.loads((root / RUN_RECORD).read_text())
    assert again["resumed"] and again["started"] == first["started"]
    judge_rule(args, str(root), str(export), str(report), 3.0)
    wall = [v for v in json.loads((export / "rule.json").read_text())["verdicts"] if v["clause"].startswith("wall")]
    assert wall[0]["status"] == UNMEASURED


def _probe_and_embeddings(tmp_path, probe: Path, embeddings: Path) -> Path:
    """One export whose probe rows are ``probe``'s and whose embeddings-probe rows are ``embeddings``'s (two
    exports of the same runs)."""
    import pandas as pd

    both = tmp_path / "export"
    both.mkdir()
    (probe / "runs.parquet").rename(both / "runs.parquet")
    for name in ("evals", "predictions"):
        parts = [pd.read_parquet(d / f"{name}.parquet").assign(mode=m)
                 for d, m in ((probe, "probe"), (embeddings, "probe-emb"))]
        pd.concat(parts).to_parquet(both / f"{name}.parquet")
    return both


def test_a_baseline_readings_calls_do_not_count_toward_called(tmp_path):
    """The embeddings probe's rows are a baseline reading, a family of their own: an effect there alone (the
    encoder's own reading flat) must not make "called on >= 2 tasks" pass."""
    flat = write_export(tmp_path / "a", {"mlm_only": 0.6, "none": 0.6}, variant_jitter={"mlm_only": (0.01, -0.01, 0)})
    strong = write_export(tmp_path / "b", {"mlm_only": 0.8, "none": 0.6})
    both = _probe_and_embeddings(tmp_path, flat, strong)
    path = _rule(tmp_path)
    j = judge_export(path, both, n_boot=200, start=start_record(path))
    called = [v for v in j.verdicts if v.clause.startswith("mlm_only - none called")][0]
    assert called.status == FAIL and called.observed == "0 tasks"


BEYOND = """
name = "beyond"
tasks = ["sst", "topic"]

[wall_minutes]
native_bf16 = 30

[[clause]]
kind = "beyond_embeddings"
contrast = "mlm_only - none"
tasks_at_least = 1
"""


@pytest.mark.parametrize("layers_add, status", [(True, PASS), (False, FAIL)])
def test_beyond_embeddings_passes_only_where_the_layers_beat_the_variants_own_embeddings(tmp_path, layers_add, status):
    """mlm_only beats none by 0.2 on the probe on both tasks; its embedding layer scores either 0.2 lower than its
    probe (the layers add: PASS) or the same (all of MLM's effect is in the embeddings: FAIL)."""
    probe = write_export(tmp_path / "a", {"mlm_only": 0.8, "none": 0.6})
    emb = write_export(tmp_path / "b", {"mlm_only": 0.6 if layers_add else 0.8, "none": 0.6})
    both = _probe_and_embeddings(tmp_path, probe, emb)
    path = _rule(tmp_path, text=BEYOND, name="beyond")
    (v,) = judge_export(path, both, n_boot=200, start=start_record(path)).verdicts
    assert v.status == status, v.observed
    assert ("called: sst, topic" in v.observed) and (("layers above embeddings: sst, topic" in v.observed) == layers_add)


def test_the_main_job_judges_itself_by_its_presets_rule_unless_the_design_is_changed(capsys):
    """The README's first command (no flags) is judged by docs/rules/cpu-small.toml; --set changes the design the rule
    was written for, so it is not judged and says so; --rule none judges nothing; an explicit --rule wins."""
    from sweeps import objective_weights
    from sweeps.frame import PROJECT, preset_rule

    def args(*argv):
        a = objective_weights.SWEEP.parse(objective_weights.SWEEP, list(argv))
        preset_rule(a)
        return a

    plain = args()
    assert plain.rule == str(PROJECT / "docs" / "rules" / "cpu-small.toml") and plain.rule_is_presets
    assert load_rule(plain.rule).preset == "cpu-small"
    changed = args("--set", "optim.max_steps=10")
    assert changed.rule is None and "not judged: --set changes the design" in capsys.readouterr().out
    assert args("--rule", "none").rule is None
    own = args("--rule", "docs/rules/cpu-long.toml")
    assert own.rule == "docs/rules/cpu-long.toml" and not getattr(own, "rule_is_presets", False)
    assert args("--preset", "cpu-long").rule is None  # cpu-long has no rule of its own: --rule names one


def test_the_one_label_clause_can_hold_only_the_tasks_every_variant_learns_by_its_margin(tmp_path):
    """none predicts one label in all 6 of its fine-tunings of each task. On sst its mean dev score is 0.06 over
    chance (0.5), on topic 0.2, so a margin of 0.1 holds topic only (6: FAIL), 0.05 both (12: FAIL), 0.3 neither
    (nothing held: NOT MEASURED, never a pass), and without a margin every fine-tuning counts (12: FAIL); an export
    with no one-label run passes at any margin that holds a task."""
    import numpy as np

    from analysis.contributions import estimate_contributions
    from analysis.export import load_export
    from analysis.rules import Facts, Rule, clause_one_label

    dev = {"sst": {"mlm_only": 0.8, "none": 0.56}, "topic": {"mlm_only": 0.8, "none": 0.7}}
    stuck = write_export(tmp_path / "stuck", {"mlm_only": 0.8, "none": 0.6}, dev_means=dev, majority=("none",))
    fine = write_export(tmp_path / "fine", {"mlm_only": 0.8, "none": 0.6}, dev_means=dev)
    facts = {name: Facts(estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=100), None)
             for name, root in (("stuck", stuck), ("fine", fine))}
    assert facts["stuck"].contributions.one_label_counts == {"sst": 6, "topic": 6}
    assert facts["stuck"].contributions.dev_floor == pytest.approx({"sst": 0.06, "topic": 0.2})
    rule = Rule("r.toml", "r", tasks=("sst", "topic"))

    def judged(name, **clause):
        return clause_one_label(rule, {"kind": "one_label", "at_most": 0, **clause}, facts[name])

    topic_only = judged("stuck", where_every_variant_learns_by=0.1)
    assert topic_only.status == FAIL and topic_only.observed.startswith("6 predicted one label on topic; not held")
    assert "sst (worst variant +0.060 over chance, 6 one-label)" in topic_only.observed
    assert judged("stuck", where_every_variant_learns_by=0.05).observed.startswith("12 predicted one label on sst, topic")
    assert judged("stuck", where_every_variant_learns_by=0.3).status == UNMEASURED
    assert judged("stuck").status == FAIL and judged("stuck").observed == "12 predicted one label"
    assert judged("fine", where_every_variant_learns_by=0.1).status == PASS
    assert judged("fine", where_every_variant_learns_by=0.3).status == UNMEASURED


BASELINE_RULE = """
name = "baselines"
tasks = ["sst", "topic"]

[wall_minutes]
native_bf16 = 30

[[clause]]
kind = "called"
contrast = "mlm_only - none"
tasks_at_least = 2

[[clause]]
kind = "called"
contrast = "mlm_only - TF-IDF logistic regression"
sign = "negative"
tasks_at_least = 1
"""


def test_a_non_neural_baselines_rows_alone_never_satisfy_called(tmp_path):
    """The probe reads mlm_only and none alike; the baseline rows (made to differ by variant, which a real baseline
    never does: a mutant reading them as an encoder's rows would then call mlm_only - none on both tasks) and the
    probe-minus-baseline cells (mlm_only's probe 0.2 below its baseline) are no contrast a rule's calls count."""
    from analysis_fixtures import with_modes

    flat = write_export(tmp_path / "a", {"mlm_only": 0.6, "none": 0.6}, variant_jitter={"mlm_only": (0.01, -0.01, 0)})
    strong = write_export(tmp_path / "b", {"mlm_only": 0.8, "none": 0.6})
    both = with_modes(tmp_path / "export", {"probe": flat, "baseline-tfidf": strong})
    path = _rule(tmp_path, text=BASELINE_RULE, name="baselines")
    vs_none, vs_baseline = judge_export(path, both, n_boot=200, start=start_record(path)).verdicts
    assert vs_none.status == FAIL and vs_none.observed == "0 tasks"
    assert vs_baseline.status == UNMEASURED
