"""The instrument check end to end (slow; still run by .ci/run): a reduced known-answer sweep recovers the
planted MLM effect through the probe AND through fine-tuning, and recovers neither under the negative
switch (``--sabotage``: fine-tuning and the probe ignore the checkpoint, each variant and seed with its own
fresh encoder). The first test to fail if the pretrained weights stop reaching fine-tuning; and the check's
exit status is its gate."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.known_answer import PROTOCOL

ROOT = Path(__file__).resolve().parents[2]
REDUCED = ["--seeds", "3", "--quiet",  # the gate's grid, what the main job's --check runs: none, mlm_only on the
           "--set", "optim.max_steps=500"]  # lexical and null tasks; the effect is large by 500 steps (the check: 1,200)


def _known_answer(tmp_path, name, *extra) -> tuple[dict, int]:
    cmd = [sys.executable, str(ROOT / "sweeps" / "known_answer.py"), *REDUCED, "--storage", str(tmp_path),
           "--name", name, *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    report = tmp_path / name / "report"
    table = (report / "known_answer.md").read_text()
    assert table.splitlines()[0] in done.stdout  # printed first, and written
    written = json.loads((report / "known_answer.json").read_text())
    assert written["protocol"] == PROTOCOL  # which frozen protocol gave these verdicts
    verdicts = {(e["name"], e["task"]): e["verdict"] for e in written["effects"]}
    return verdicts, done.returncode


@pytest.mark.slow
def test_the_planted_mlm_effect_is_recovered_through_fine_tuning_and_not_without_the_checkpoint(tmp_path):
    probe = ("MLM learns word classes (mlm_only - none)", "planted_lexical (probe)")
    finetuned = ("MLM learns word classes, fine-tuned (mlm_only - none)", "planted_lexical")
    verdicts, code = _known_answer(tmp_path, "check")
    assert verdicts[probe] == verdicts[finetuned] == "recovered", verdicts
    assert code == 0  # the gate's grid passes the gate: both effects recovered, nothing called on the null task
    sabotaged, code = _known_answer(tmp_path, "sabotaged", "--sabotage")
    assert sabotaged[probe] == sabotaged[finetuned] == "not recovered", sabotaged
    assert code == 1


def test_languages_with_plan_plans_one_check_counts_them_and_reads_no_export(tmp_path):
    """--languages N --plan used to plan one language, then read N exports that no run had written
    (ExportError); it plans one check and says how many it stands for, and trains nothing."""
    cmd = [sys.executable, str(ROOT / "sweeps" / "known_answer.py"), "--languages", "2", "--seed-blocks", "2",
           "--plan", "--hardware", "h100", "--storage", str(tmp_path), "--name", "plan"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "4 checks like this one (2 language(s) x 2 seed block(s))" in done.stdout
    assert "measure" in done.stdout and "finetune" in done.stdout  # the planner's table of the one check
    assert not list(tmp_path.glob("**/export"))  # nothing trained, nothing exported


def test_a_resumed_replication_keeps_the_checks_it_finished_and_continues_the_rest(tmp_path, monkeypatch):
    """An interrupted replication loses nothing it had finished: with --resume a check that wrote its export
    and verdict is not run again, every other one is run with --resume (Tune continues an interrupted one);
    the sabotaged checks run on their own languages (from 106), the replication on protocol 3's (from 111)."""
    import analysis.known_answer as ak
    import analysis.report as ar
    from sweeps import known_answer

    calls = []
    monkeypatch.setattr(known_answer, "sweep_main", lambda sweep, argv: calls.append(argv) or 1)
    monkeypatch.setattr(ar, "build_report", lambda path: type("R", (), {"contributions": path})())
    nothing = ak.PlantedCheck([ak.EffectResult(e, None, float("nan")) for e in ak.PLANTED_EFFECTS], 0, 0, 0)
    monkeypatch.setattr(ak, "check_planted", lambda contributions: nothing)  # no effect measured, none recovered
    import pandas as pd

    base = ["--languages", "2", "--seed-blocks", "2", "--storage", str(tmp_path), "--name", "r"]
    done = tmp_path / "r-lang106-seeds6"  # finished: export and verdict
    (done / "export").mkdir(parents=True)
    gate_runs = pd.DataFrame({"phase": ["measure", "measure", "finetune"], "variant": ["mlm_only", "none", "none"]})
    gate_runs.to_parquet(done / "export" / "runs.parquet")
    (done / "report").mkdir()
    (done / "report" / "known_answer.json").write_text(json.dumps({"effects": [
        {"verdict": "recovered", "estimate": 0.5}, {"verdict": "not checkable at this size", "estimate": None}]}))
    half = tmp_path / "r-lang107-seeds6"  # interrupted after its export, before its verdict
    (half / "export").mkdir(parents=True)
    (half / "export" / "runs.parquet").write_bytes(b"")
    empty = tmp_path / "r-lang106-seeds9"  # a verdict from no measured run (an interrupted phase, before the fix)
    (empty / "export").mkdir(parents=True)
    (empty / "export" / "runs.parquet").write_bytes(b"")
    (empty / "report").mkdir()
    (empty / "report" / "known_answer.json").write_text(json.dumps({"effects": [
        {"verdict": "not measured", "estimate": None}]}))
    assert known_answer.main([*base, "--sabotage", "--resume"]) == 0  # the fakes recover nothing: the switch holds
    ran = [a[a.index("--name") + 1] for a in calls]
    assert ran == ["r-lang106-seeds9", "r-lang107-seeds6", "r-lang107-seeds9"]
    assert all("--resume" in a and "--sabotage" in a for a in calls)
    table = (tmp_path / "r" / "replication.md").read_text()
    assert table.count("sabotaged check(s)") == 1 and "grid: none, mlm_only (the gate's)" in table
    calls.clear()  # the same name asked for the full grid: its finished gate check is refused, nothing runs
    assert known_answer.main([*base, "--sabotage", "--resume", "--all-effects"]) == 2
    assert calls == []
    calls.clear()
    assert known_answer.main([*base, "--name", "p"]) == 1  # nothing recovered: the frozen rule does not hold
    assert [a[a.index("--name") + 1] for a in calls] == ["p-lang111-seeds9", "p-lang111-seeds12",
                                                         "p-lang112-seeds9", "p-lang112-seeds12"]



def test_the_gate_grid_is_what_the_checkable_effects_and_the_null_task_read():
    """known_answer.py and the main job's --check run only the variants and tasks the gate reads, derived from the
    checkable effects: an effect made checkable brings its variants and task in, one made uncheckable leaves;
    --all-effects, --variants or --tasks run the grid asked for."""
    import dataclasses

    from analysis.known_answer import PLANTED_EFFECTS
    from sweeps.known_answer import SWEEP, VARIANTS, gate_grid

    assert gate_grid() == (("none", "mlm_only"), ("planted_lexical", "planted_null"))
    sop = next(e for e in PLANTED_EFFECTS if e.weights == {"sop_only": 1.0, "none": -1.0})
    more = [dataclasses.replace(e, checkable=True) if e is sop else e for e in PLANTED_EFFECTS]
    assert gate_grid(more) == (("none", "mlm_only", "sop_only"), ("planted_lexical", "planted_order", "planted_null"))
    args = SWEEP.parse(SWEEP, ["--storage", "unused"])
    gate = ("planted_lexical", "planted_null")
    assert args.variants == "none,mlm_only" and args.mode_tasks == {"finetune": gate, "probe": gate}
    assert args.tasks is None  # the preset's tasks stay in the config: the same data and runs as the full check
    every = SWEEP.parse(SWEEP, ["--all-effects", "--storage", "unused"])
    assert every.variants == VARIANTS and "probe" not in every.mode_tasks  # the full grid: every task probed
    asked = SWEEP.parse(SWEEP, ["--variants", "full,none", "--storage", "unused"])
    assert asked.variants == "full,none" and "probe" not in asked.mode_tasks
    assert SWEEP.parse(SWEEP, ["--tasks", "planted_order", "--storage", "unused"]).variants == VARIANTS
    from trainables.config import ConfigError

    with pytest.raises(ConfigError, match="--all-effects runs its own variants .*; drop --variants full,none"):
        SWEEP.parse(SWEEP, ["--all-effects", "--variants", "full,none", "--storage", "unused"])


def test_the_main_jobs_plan_starts_with_its_instrument_check_when_it_runs_one():
    """--check's gate is planned before the job's own phases, by default at cpu-small (the built-in default) and the
    cluster presets; with --no-check, and by default at smoke and gpu-quick, nothing is planned for it."""
    from sweeps import objective_weights
    from sweeps.frame import Context, default_parse, sweep_plan
    from trainables.tasks import resolve_tasks

    def plan_of(*argv):
        args = default_parse(objective_weights.SWEEP, ["--storage", "unused", "--hardware", "h200", *argv])
        cfg = objective_weights.SWEEP.configure(args)
        phases = sweep_plan(objective_weights.SWEEP, Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks),
                                                             None)).phases
        return [p.name for p in phases], phases[0]

    names, first = plan_of()
    assert names == ["check", "search", "measure", "finetune"]  # on by default
    # 6 pretraining runs, each fine-tuned and probed: 12 trials on the lexical and null tasks
    assert first.runs == 6 + 12 and "none, mlm_only x 3 seeds on planted_lexical, planted_null" in first.notes
    assert plan_of("--check")[0] == names
    assert plan_of("--preset", "bert-small", "--set", "data.allow_epochs=300")[0][0] == "check"
    assert plan_of("--no-check")[0] == ["search", "measure", "finetune"]
    for preset in ("smoke", "gpu-quick"):
        assert plan_of("--preset", preset)[0][0] == "search"  # off by default there
        assert plan_of("--preset", preset, "--check")[0][0] == "check"


def test_an_interrupted_phase_raises_instead_of_returning_a_partial_grid():
    """Ctrl-C ends Tune's fit() with trials pending; a sweep that went on exported and judged a check from the
    runs that had finished, and --resume then kept that verdict (seen: a sabotaged check reported from 0 runs)."""
    from sweeps.runner import interrupted

    def grid(n, ended, failed):
        return type("Grid", (), {"__len__": lambda self: n, "num_terminated": ended, "num_errors": failed})()

    assert interrupted(grid(18, 18, 0)) == interrupted(grid(18, 16, 2)) == 0  # finished: ended or failed
    assert interrupted(grid(18, 5, 1)) == 12


def test_an_interrupted_check_stops_the_replication(tmp_path, monkeypatch):
    from sweeps import known_answer
    from sweeps.frame import INTERRUPTED

    calls = []
    monkeypatch.setattr(known_answer, "sweep_main", lambda sweep, argv: calls.append(argv) or INTERRUPTED)
    code = known_answer.main(["--languages", "2", "--storage", str(tmp_path), "--name", "r"])
    assert code == INTERRUPTED and len(calls) == 1 and not (tmp_path / "r" / "replication.md").exists()
