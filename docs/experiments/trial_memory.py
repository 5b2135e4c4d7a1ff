"""What a reused Ray trial process holds after each trial (docs/results.md, "Why the snapshot reads ran out of
memory"): four trials in one process through Tune with ``reuse_actors``, each allocating 1 GiB in 256 KiB heap
blocks and freeing it, as a probe trial's features and classifiers do; the RSS at each trial's start is printed.

    python docs/experiments/trial_memory.py                    # retain (the default), no trim: grows a GiB a trial
    python docs/experiments/trial_memory.py --allocator system # glibc's defaults: grows too
    python docs/experiments/trial_memory.py --arena-max 1      # one arena per process: nothing accumulates
    python docs/experiments/trial_memory.py --trim             # malloc_trim(0) after each trial (the phase runner's)
"""
import argparse
import ctypes
import os

import ray
from ray import tune

parser = argparse.ArgumentParser()
parser.add_argument("--allocator", choices=("retain", "system"), default="retain")
parser.add_argument("--arena-max", type=int, default=0, help="MALLOC_ARENA_MAX in the trial processes (0: unset)")
parser.add_argument("--trim", action="store_true")
parser.add_argument("--trials", type=int, default=4)
args = parser.parse_args()


def trial(config):
    import numpy as np

    from trainables.runtime import set_allocator

    def rss_gib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30

    set_allocator(args.allocator)
    start = rss_gib()
    blocks = [np.ones(64 << 10, dtype=np.float32) for _ in range(4096)]  # 4096 x 256 KiB = 1 GiB
    del blocks
    if args.trim:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    tune.report({"pid": os.getpid(), "rss_at_start_gib": start})


os.environ.setdefault("RAY_AUTH_MODE", "disabled")
env = {"MALLOC_ARENA_MAX": str(args.arena_max)} if args.arena_max else {}
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
grid = tune.Tuner(tune.with_resources(trial, {"cpu": 1}), param_space={"i": tune.grid_search(list(range(args.trials)))},
                  tune_config=tune.TuneConfig(reuse_actors=True),
                  run_config=tune.RunConfig(name="trial_memory", storage_path=f"/tmp/trial_memory-{os.getpid()}",
                                            verbose=0)).fit()
runs = sorted((r.metrics for r in grid), key=lambda m: m["config"]["i"])
print(f"allocator {args.allocator}, MALLOC_ARENA_MAX {args.arena_max or 'unset'}, trim {args.trim}; "
      f"processes {len({m['pid'] for m in runs})}")
print("RSS at each trial's start (GiB):", " ".join(f"{m['rss_at_start_gib']:.2f}" for m in runs))
