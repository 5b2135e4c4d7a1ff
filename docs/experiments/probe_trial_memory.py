"""What a reused Ray trial process holds after each real snapshot-probe trial (docs/results.md, "Why the snapshot
reads ran out of memory"): a cpu-long run's snapshots probed one per trial through Tune with ``reuse_actors``,
each trial the project's own ``finetune_trainable`` in probe mode; glibc's ``mallinfo2`` (memory in use, free
but held) and the RSS are appended to a log at each trial's start and end.

    python docs/experiments/probe_trial_memory.py runs/NAME topic,pos          # as the phase ran before the trim
    python docs/experiments/probe_trial_memory.py runs/NAME topic,pos --trim   # malloc_trim(0) after each trial
"""
import argparse
import ctypes
import glob
import os
import threading

import ray
from ray import tune

from trainables.presets import build_config

parser = argparse.ArgumentParser()
parser.add_argument("root", help="a cpu-long run's folder (runs/NAME): its measure/mlm_only-s*/.../snapshots")
parser.add_argument("tasks")
parser.add_argument("--trim", action="store_true")
parser.add_argument("--snapshots", type=int, default=4)
parser.add_argument("--log", default="probe_trial_memory.log")
args = parser.parse_args()
snaps = sorted(glob.glob(f"{args.root}/measure/mlm_only-s*/checkpoint_*/snapshots/step-*"))[:args.snapshots]
cfg = build_config("cpu-long", variant="mlm_only", overrides=["run.device=cpu"]).to_dict()
log = os.path.abspath(args.log)


def stat(tag: str) -> None:
    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open(log, "a") as f:
        f.write(f"pid {os.getpid()} {tag}: rss {rss / 1e9:.2f} GB, in use {m.uordblks / 1e9:.2f}, free but held "
                f"{m.fordblks / 1e9:.2f}, threads {threading.active_count()}\n")


def trial(config):
    from trainables.tune_adapters import finetune_trainable

    stat("start " + config["spec"]["run_id"])
    finetune_trainable({**config["spec"], **{k: v for k, v in config.items() if k != "spec"}})
    stat("end")
    if args.trim:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        stat("trimmed")


specs = [{"run_id": s.split("/")[-4] + "-" + s.split("/")[-1], "cfg": cfg, "checkpoint": os.path.abspath(s),
          "finetune_seed": 0, "tasks": args.tasks.split(","), "mode": "probe"} for s in snaps]
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
tune.Tuner(tune.with_resources(trial, {"cpu": 2}), param_space={"spec": tune.grid_search(specs), "cpus_per_trial": 2},
           tune_config=tune.TuneConfig(reuse_actors=True),
           run_config=tune.RunConfig(name="probe_trial_memory", storage_path=f"/tmp/probe_trial_memory-{os.getpid()}",
                                     verbose=0)).fit()
print(open(log).read())
