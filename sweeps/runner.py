"""Ray set-up and one Tune experiment per phase: ``init_ray``, ``Phase``, ``run_phase``, logging, and the
CUDA MPS advice for trials that share a GPU (``mps_advice``).

A phase is a Tune experiment at ``<root>/<phase.name>``; ``--resume`` restores it with
``Tuner.restore`` so finished trials are not run again. Trial directories are named by run id
(variant and seed), which is what TensorBoard shows.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from sweeps.progress import Progress
from trainables.config import ConfigError
from trainables.hardware import MPS_CONTROL, mps_running


def init_ray(args: argparse.Namespace) -> None:
    import ray

    if ray.is_initialized():  # a script that runs several sweeps in one process (known_answer --languages)
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # run_phase adds the JSON and CSV loggers
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        # Ray's token authentication stays on; its notice that it is on is not the first thing a user should read
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level=logging.WARNING)
    from trainables.data.shards import check_shared_storage

    check_shared_storage(args.storage, ray.nodes())  # a local folder on a multi-node cluster: one line, now


def mps_advice(args: argparse.Namespace, cfg=None, out=None, which=shutil.which, run=subprocess.run) -> str | None:
    """Trials that share a GPU (fractional --gpus-per-trial) are separate processes: without CUDA MPS the GPU
    time-slices between their contexts, so one small trial's kernels never overlap another's, and each step
    costs at least its kernel launches (``sweeps.plan.step_floor_s``, a few ms for a 4-layer model). With the
    MPS daemon they run concurrently. Nothing is started silently: one line of advice, or, under --mps, the
    daemon on this node (on a cluster every GPU node needs it: README, Cluster). Returns the line printed."""
    gpus = args.gpus_per_trial
    if not 0 < gpus < 1:
        return None
    path = which(MPS_CONTROL)
    if path is None:
        if getattr(args, "mps", False):
            raise ConfigError(f"--mps but {MPS_CONTROL} is not on PATH here; allowed: a node with the NVIDIA "
                              "driver's MPS tools, or leave out --mps")
        return None
    floor = ""
    if cfg is not None:
        from sweeps.plan import step_floor_s

        floor = f"; each trial's step takes at least ~{step_floor_s(cfg.model) * 1e3:.1f} ms of kernel launches"
    trials = int(1 / gpus)
    if mps_running():
        line = f"CUDA MPS is running: the {trials} trials sharing each GPU overlap{floor}"
    elif getattr(args, "mps", False):
        run([path, "-d"], check=True)
        line = (f"started the CUDA MPS control daemon for {trials} trials per GPU{floor} "
                f"(stop it with: echo quit | {MPS_CONTROL})")
    else:
        line = (f"tip: {trials} trials share each GPU; without CUDA MPS their kernels take turns{floor}: start it "
                f"with `{MPS_CONTROL} -d` (or add --mps), stop it with `echo quit | {MPS_CONTROL}`")
    print(line, file=out or sys.stdout, flush=True)
    return line


@dataclass
class Phase:
    name: str  # search | measure | finetune
    trainable: Callable
    param_space: dict[str, Any]
    resources: dict[str, float]
    num_samples: int = 1
    search_alg: Any = None
    scheduler: Any = None
    max_concurrent: int = 0

    @property
    def trials(self) -> int:
        """How many trials the phase runs: the grid's size times num_samples."""
        grid = self.param_space.get("spec", {})
        return self.num_samples * (len(grid["grid_search"]) if isinstance(grid, dict) and "grid_search" in grid else 1)


def returning_memory(trainable: Callable) -> Callable:
    """``trainable``, handing the memory freed by the trial before it back to the kernel when it starts, and its own
    when it returns (``trainables.runtime.release_free_memory``): a phase reuses its processes from trial to trial
    (``reuse_actors``), and without it a process may keep each earlier trial's peak, one arena each. A trial a
    scheduler stops (ASHA's) ends by an exception raised in ``tune.report``, while its frames still hold its
    memory, and Tune gives the thread two seconds to end: its memory is given back when the next trial starts."""

    def run(config):
        from trainables.runtime import release_free_memory

        release_free_memory()
        result = trainable(config)
        release_free_memory()  # the phase's last trial leaves its process as small as the next phase finds it
        return result

    run.__name__ = getattr(trainable, "__name__", "trainable")
    return run


def run_phase(phase: Phase, root: str, args: argparse.Namespace, progress: Progress):
    """Run (or, with --resume, restore and finish) one Tune experiment at ``<root>/<phase.name>``."""

    trainable = tune.with_resources(returning_memory(phase.trainable), phase.resources)
    path = f"{root}/{phase.name}"
    progress.begin(phase.name, phase.trials)
    if tune.Tuner.can_restore(path):
        if not args.resume:
            raise ConfigError(f"experiment {path} already exists; add --resume to continue it, or choose another --name")
        with progress.restoring():
            tuner = tune.Tuner.restore(path, trainable, resume_errored=True, param_space=phase.param_space)
    else:
        tuner = tune.Tuner(
            trainable, param_space=phase.param_space,
            # reuse_actors: a finished trial's process runs the phase's next trial instead of a new process
            # importing torch, transformers and the project again (that import costs more CPU than a smoke
            # phase's trial spends training). Safe because a trial's core sets everything it depends on itself:
            # its seeds, threads and device (a run made after another in the same process trains the same bits:
            # tests/trainables/test_pretrain.py, tests/test_finetune.py)
            tune_config=tune.TuneConfig(num_samples=phase.num_samples, search_alg=phase.search_alg,
                                        scheduler=phase.scheduler, max_concurrent_trials=phase.max_concurrent or None,
                                        reuse_actors=True, trial_dirname_creator=_trial_dirname,
                                        trial_name_creator=_trial_name),
            run_config=tune.RunConfig(
                name=phase.name, storage_path=root, verbose=0,
                # Tune's result.json and progress.csv per trial, but not its TensorBoard logger: each run
                # writes its own one stream (trainables.tune_adapters.tensorboard_dir)
                callbacks=[progress, CSVLoggerCallback(), JsonLoggerCallback()],
                # on s3:// or gs:// storage a trial's TensorBoard stream is written in its folder: upload it
                sync_config=tune.SyncConfig(sync_artifacts="://" in root),
                failure_config=tune.FailureConfig(max_failures=2),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2)))
    try:
        grid = tuner.fit()
    finally:
        progress.end(phase.name)
    unfinished = interrupted(grid)
    if unfinished:  # Ctrl-C (or SIGTERM) ends tuner.fit() with trials still pending or running: the phase did not
        # finish, so nothing after it may read it as finished (an export, a report, a check's verdict)
        raise KeyboardInterrupt(f"phase {phase.name} interrupted with {unfinished} trial(s) unfinished; "
                                f"continue with --resume --name {getattr(args, 'name', '') or '<name>'}")
    return grid


def interrupted(grid) -> int:
    """How many of the grid's trials neither ended nor failed (0 for a finished phase; ASHA's stopped trials
    count as ended)."""
    return max(len(grid) - grid.num_terminated - grid.num_errors, 0)


def _trial_name(trial) -> str:
    spec = trial.config.get("spec", {})
    return spec.get("run_id_ft") or spec.get("run_id") or f"search-{trial.trial_id}"


def _trial_dirname(trial) -> str:
    return _trial_name(trial)  # TensorBoard shows runs by this name: variant and seed


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes, not the stream it was made with: a sweep run
    inside a notebook or a test whose captured stream is closed later must not break every later log line."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


LOG_FILE = "run.log"  # in the experiment directory: every library's log lines, whatever the terminal shows


def configure_logging(quiet: bool, verbose: bool = False) -> None:
    """The terminal shows warnings and errors (``--verbose``: every INFO line too, ``--quiet``: warnings);
    ``log_to_file`` adds the run's own file with everything. The data preparation's and the planner's
    progress lines, Ray's and the libraries' notices are INFO: in the file, off the user's screen."""
    reset_logging()
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    console = _StderrHandler()
    console.setLevel(logging.INFO if verbose and not quiet else logging.WARNING)
    console.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    console.addFilter(lambda record: not record.name.startswith("sweeps.progress"))  # shown by Progress itself
    console._bert_objectives = True
    root.addHandler(console)
    for noisy in ("ray", "transformers", "datasets", "filelock", "urllib3", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not verbose else logging.INFO)
    # Tune's "The `choose_trial_to_run` operation took ... s, which may be a performance bottleneck": its own
    # loop timed while the trials hold every core, as they should; Ray prints it through its own handler
    logging.getLogger("ray.tune.utils.util").setLevel(logging.INFO if verbose else logging.ERROR)
    # --resume: "Failed to fetch metrics for N trial(s) ... result.json and progress.csv were not found", a line
    # per trial that had not reported when the first driver stopped; they run now, as they should
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.INFO if verbose else logging.ERROR)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def reset_logging() -> None:
    """Take this module's handlers off the root logger again (a sweep run from a notebook or a test ends clean)."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_bert_objectives", False)]:
        root.removeHandler(h)
        h.close()


def log_to_file(experiment_root: str) -> str | None:
    """Every INFO line from here on also goes to ``<root>/run.log`` (local roots; a remote root has Ray's own
    logs on its nodes). Returns the file's path."""
    if "://" in experiment_root and not experiment_root.startswith("file://"):
        return None
    path = Path(experiment_root.removeprefix("file://")) / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    handler._bert_objectives = True
    logging.getLogger().addHandler(handler)
    return str(path)
