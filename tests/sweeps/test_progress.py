"""Live progress: a tqdm status per phase on a terminal, plain lines in a log, counts that add up."""

import io

from sweeps.progress import Progress


class Trial:
    def __init__(self, name):
        self.trial_id, self.local_path = name, f"/x/{name}"

    def __str__(self):
        return self.trial_id


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _events(p: Progress) -> None:
    a, b, c, d = Trial("full-s0"), Trial("none-s0"), Trial("search-1"), Trial("mlm_only-s0")
    p.begin("measure", 4)
    for t in (a, b, c, d):
        p.on_trial_start(0, [], t)
    p.on_trial_recover(0, [], d)  # its node was lost: Tune restarts it from its checkpoint
    p.on_trial_start(0, [], d)
    p.on_trial_result(0, [], a, {"step": 200, "final": 1.0})
    p.on_trial_complete(0, [], a)
    p.on_trial_result(0, [], b, {"failed": 1.0, "stop_reason": "loss became nan by step 3"})
    p.on_trial_complete(0, [], b)
    p.on_trial_result(0, [], c, {"step": 50})
    p.on_trial_complete(0, [], c)  # no final result: ASHA stopped it
    p.end("measure")


def test_a_log_file_gets_a_line_per_phase_and_per_ended_trial_and_verbose_every_event():
    out = io.StringIO()
    p = Progress(out=out, planned={"measure": 600})
    _events(p)
    lines = out.getvalue().splitlines()
    # phase start, the four ends (finished, failed, stopped, and the lost worker), phase end; no 'started'
    assert "\r" not in out.getvalue() and len(lines) == 6 and "started" not in out.getvalue()
    assert lines[0].split("] ")[1] == "measure  4 trials, planned 10.0 min"
    assert lines[-1].split("] ")[1].startswith("measure  done in 0.0 min: 1 finished, 1 stopped, 1 failed")
    assert "full-s0 finished step=200\n" in out.getvalue()
    assert "mlm_only-s0 lost its worker; retried from its last checkpoint" in out.getvalue()
    assert "none-s0 FAILED: loss became nan by step 3" in out.getvalue()
    assert p.counts["measure"] == {"running": 1, "finished": 1, "stopped": 1, "failed": 1}
    verbose = io.StringIO()
    _events(Progress(out=verbose, verbose=True))
    every = verbose.getvalue().splitlines()
    assert len(every) == 12 and "full-s0 started" in verbose.getvalue()
    assert every[-1].split("] ")[1].startswith("measure  1 running, 1 finished, 1 stopped, 1 failed")


def test_a_terminal_gets_one_live_bar_per_phase_and_verbose_gets_the_lines_back():
    tty = Terminal()
    _events(Progress(out=tty, planned={"measure": 600}))
    text = tty.getvalue()
    assert "\r" in text and "trials |" in text and "started" not in text  # a bar redrawn in place
    assert "3/4 trials" in text  # finished + stopped + failed
    verbose = Terminal()
    _events(Progress(out=verbose, verbose=True))
    assert "\r" not in verbose.getvalue() and "full-s0 started" in verbose.getvalue()


def _finish(p, name):
    p.on_trial_start(0, [], Trial(name))
    p.on_trial_result(0, [], Trial(name), {"final": 1.0})
    p.on_trial_complete(0, [], Trial(name))


def test_eta_comes_from_the_plan_while_it_has_time_left_then_from_the_pace():
    """Trials of one phase differ in cost: six `none` runs done in a second say nothing of six pretraining runs,
    and one pretraining run done in 100 s says nothing of six instant ones; the plan holds until it runs out."""
    p = Progress(out=io.StringIO(), planned={"measure": 600})
    p.begin("measure", 12)
    assert 590 < p.eta() <= 600
    for i in range(6):
        _finish(p, f"none-s{i}")  # instant: the pace would say a second is left
    assert 590 < p.eta() <= 600
    p.times["measure"][0] -= 100
    assert 495 < p.eta() <= 500
    p.times["measure"][0] -= 600  # 700 s in, past the plan, 6 of 12 done: the pace of the phase so far
    assert 695 < p.eta() < 710
    assert Progress(quiet=True, out=io.StringIO()).live is False


def test_a_phase_whose_trials_all_ended_has_no_time_left_whatever_the_plan_said():
    """A phase that ends before its plan runs out printed the plan's remaining minutes beside "0 running, 12
    finished" (a reader saw "ETA 3:17" on a finished phase)."""
    p = Progress(out=io.StringIO(), planned={"measure": 600})
    p.begin("measure", 12)
    for i in range(12):
        _finish(p, f"none-s{i}")
    assert p.eta() == 0 and p.status().endswith("12 finished, 0 stopped, 0 failed | ETA 0:00")


def test_a_phase_inside_another_sweep_is_named_with_its_prefix():
    """The main job's instrument check runs its own measure and finetune phases before the job's: its lines read
    check/measure, so a log never shows two different measure phases under one name."""
    out = io.StringIO()
    _events(Progress(out=out, prefix="check/"))
    lines = out.getvalue().splitlines()
    assert lines and all(line.split("] ")[1].startswith("check/measure ") for line in lines)
    assert Progress(out=out).prefix == ""


class Unpicklable(Terminal):
    """A stream as a notebook or pytest's capture gives one: it cannot be pickled."""

    def __reduce__(self):
        raise TypeError("cannot pickle this stream")


def test_progress_pickles_without_its_stream_as_tune_saves_it_for_resume():
    """Tune pickles its callbacks into tuner.pkl when a phase starts; a sweep run where sys.stdout cannot be
    pickled (a notebook, a test's capture) failed there. The stream and the live bar stay behind; the counts go."""
    import sys

    from ray import cloudpickle

    p = Progress(out=Unpicklable())
    p.begin("measure", 2)
    p.on_trial_start(0, [], Trial("full-s0"))
    assert p._bar is not None  # live, as on a terminal
    copy = cloudpickle.loads(cloudpickle.dumps(p))
    assert copy.out is sys.stdout and copy._bar is None and copy.counts == p.counts and copy.totals == {"measure": 2}
    assert p.out.__class__ is Unpicklable and p._bar is not None  # the running sweep's own object is untouched
    p.end("measure")


def test_a_resumed_phase_reports_to_the_progress_that_began_it(ray_local, tmp_path):
    """--resume: Tune restores the callbacks it pickled when the phase first began and sends them its events.
    The counts and the ETA on the user's screen are the resuming driver's: its own trials, its own clock (the
    pickled copy's clock started hours earlier, and a resumed fine-tuning read "ETA 4016:12")."""
    import argparse

    from ray import tune

    from sweeps.runner import Phase, run_phase

    broken = tmp_path / "broken"
    broken.touch()

    def trainable(config):
        if broken.exists():
            raise RuntimeError("the first driver's trials fail")
        tune.report({"final": 1.0, "step": 1})

    phase = Phase("measure", trainable, {"spec": tune.grid_search([{"run_id": "a"}, {"run_id": "b"}])}, {"CPU": 1})
    first = Progress(quiet=True, out=io.StringIO(), planned={"measure": 3600})
    run_phase(phase, str(tmp_path), argparse.Namespace(resume=False), first)
    assert first.counts["measure"]["failed"] == 2

    broken.unlink()
    second = Progress(quiet=True, out=io.StringIO(), planned={"measure": 3600})
    run_phase(phase, str(tmp_path), argparse.Namespace(resume=True), second)
    assert second.counts["measure"] == {"running": 0, "finished": 2, "stopped": 0, "failed": 0}
    assert second.times["measure"][0] > first.times["measure"][1]  # its ETA runs from this driver's start
