"""A phase's reused trial process gives back what each trial freed (sweeps.runner.returning_memory)."""

import argparse
import io
import sys

import pytest

from sweeps.progress import Progress

WORKING_SET = 512 << 20  # bytes each trial allocates, in heap-sized blocks, and frees again before it ends
BLOCK = 256 << 10  # far below glibc's mmap threshold, so the blocks come from a malloc arena, as a probe's do


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc's arenas")
def test_a_reused_trial_process_does_not_keep_each_trials_freed_memory(ray_local, tmp_path):
    """Four trials in one reused process, each allocating and freeing 512 MiB: without the trim between trials
    each trial's new thread got another arena and the process kept every trial's peak (3 x 512 MiB by the fourth
    trial); with it the process starts the fourth trial within a quarter of one working set of the first."""
    from ray import tune

    from sweeps.runner import Phase, run_phase

    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def allocating_trial(config):
        """What a probe trial does to the heap, without the model: the run's allocator setting, a working set
        of many heap blocks, all of it freed before the trial reports."""
        import os

        import numpy as np
        from ray import tune

        from trainables.runtime import set_allocator

        set_allocator("retain")  # as every pretraining and fine-tuning trial sets it (run.allocator's default)
        start = _rss()
        blocks = [np.ones(BLOCK // 4, dtype=np.float32) for _ in range(WORKING_SET // BLOCK)]
        del blocks
        tune.report({"pid": os.getpid(), "rss_at_start": start})

    phase = Phase("snapshots", allocating_trial, {"spec": tune.grid_search([{"run_id": str(i)} for i in range(4)])},
                  {"CPU": 2})  # the whole instance per trial: one at a time, each in the process the last one used
    grid = run_phase(phase, str(tmp_path), argparse.Namespace(resume=False), Progress(quiet=True, out=io.StringIO()))
    runs = [r.metrics for r in grid]
    starts = [m["rss_at_start"] for m in runs]
    assert len({m["pid"] for m in runs}) == 1, "the trials ran in different processes: nothing was reused"
    growth = max(starts) - min(starts)
    assert growth < WORKING_SET / 4, f"the reused process grew {growth / 2**20:.0f} MiB over {len(starts)} trials"
