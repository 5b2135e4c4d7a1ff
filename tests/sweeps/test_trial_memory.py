"""A phase's reused trial process gives back what each trial freed (sweeps.runner.returning_memory)."""

import argparse
import io

import pytest

from sweeps.progress import Progress
from trainables import runtime

WORKING_SET = 512 << 20  # bytes each trial allocates, in heap-sized blocks, and frees
BLOCK = 256 << 10  # below retain's 32 MiB mmap threshold: the blocks come from a malloc arena, as a probe's do

glibc_only = pytest.mark.skipif(runtime._glibc() is None, reason="malloc arenas and malloc_trim are glibc's")


def _run_four_trials(tmp_path, stop_at_first_report: bool) -> list[dict]:
    """Four trials, one at a time in one reused process, through the sweep's own phase runner; each allocates
    WORKING_SET and reports its RSS at its start. A returning trial frees the blocks and reports what of them the
    process still holds; a stopped one reports with the blocks alive, and its scheduler stops it there."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from sweeps.runner import Phase, run_phase

    def trial(config):
        import os

        import numpy as np
        from ray import tune

        from trainables.runtime import set_allocator

        def rss() -> int:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        set_allocator("retain")  # as every pretraining and fine-tuning trial sets it (run.allocator's default)
        start = rss()
        blocks = [np.ones(BLOCK // 4, dtype=np.float32) for _ in range(WORKING_SET // BLOCK)]
        if stop_at_first_report:  # ASHA stops a trial here, inside tune.report, with its memory still referenced
            tune.report({"pid": os.getpid(), "rss_at_start": start})
            tune.report({"reached_the_end": 1})
        del blocks
        tune.report({"pid": os.getpid(), "rss_at_start": start, "retained": rss() - start})

    class StopAtFirstResult(FIFOScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return TrialScheduler.STOP

    phase = Phase("snapshots", trial, {"spec": tune.grid_search([{"run_id": str(i)} for i in range(4)])},
                  {"CPU": 2},  # the whole instance per trial: one at a time, each in the process the last one used
                  scheduler=StopAtFirstResult() if stop_at_first_report else None)
    grid = run_phase(phase, str(tmp_path), argparse.Namespace(resume=False), Progress(quiet=True, out=io.StringIO()))
    runs = [r.metrics for r in grid]
    assert len({m["pid"] for m in runs}) == 1, "the trials ran in different processes: nothing was reused"
    return runs


def _growth(runs: list[dict]) -> int:
    starts = [m["rss_at_start"] for m in runs]
    return max(starts) - min(starts)


@pytest.mark.slow
@glibc_only
def test_a_reused_trial_process_does_not_keep_each_trials_freed_memory(ray_local, tmp_path):
    """Without a trim between trials the process kept every trial's peak: 3 x 512 MiB by the fourth trial's
    start. With it, the fourth starts within a quarter of one working set of the first. What is tested is that
    freed memory is given back before the next trial, whichever arena held it."""
    runs = _run_four_trials(tmp_path, stop_at_first_report=False)
    assert min(m["retained"] for m in runs) > WORKING_SET / 2, "the freed blocks went back by themselves here: " \
                                                               "this test would show nothing"
    growth = _growth(runs)
    assert growth < WORKING_SET / 4, f"the reused process grew {growth / 2**20:.0f} MiB over {len(runs)} trials"


@pytest.mark.slow
@glibc_only
def test_a_trial_its_scheduler_stops_leaves_nothing_to_the_next_one(ray_local, tmp_path):
    """A stopped trial unwinds after the trainable's own code has run, its frames holding its memory; the next
    trial's start gives that memory back."""
    runs = _run_four_trials(tmp_path, stop_at_first_report=True)
    assert not any("reached_the_end" in m or "retained" in m for m in runs), "a trial was not stopped"
    growth = _growth(runs)
    assert growth < WORKING_SET / 4, f"the reused process grew {growth / 2**20:.0f} MiB over {len(runs)} trials"
