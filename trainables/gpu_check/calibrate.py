"""The gpu-quick calibration part: what the planner assumes about trials that share one GPU, measured.

gpu-quick's main job runs 4 trials on one H200 (``--gpus-per-trial 0.25``), each a separate process, and the
planner (``sweeps.plan``) prices a step at max(FLOPs / rate, ~600 kernel launches x 7.5 us), assumes the 4
overlap fully under CUDA MPS, and adds a fixed start-up per trial and a model load per fine-tuned (task,
rate). Here gpu-quick trials (``trial.py``, plain processes: no Ray) run one alone, then 4 at once without
MPS, then 4 at once under MPS (``--mps``): steps/s, host vs device milliseconds per step, start-up,
model-load time and fine-tuning steps/s; from them the planner's constants as measured, beside the ones it
assumes, for ``sweeps/objective_weights.py --plan --calibration FILE`` to re-plan the quarter hour with.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

PHASES = (("alone", 1, False), ("four", 4, False), ("four_mps", 4, True))
STEPS = 300  # per trial: ~1.5 s of steps at the planner's 4.5 ms floor, after a start-up of seconds


def trial_config(part, corpus: str):
    """gpu-quick (the smoke model in a dry run) for a short timed run: no evaluation, no checkpoints."""
    from trainables.presets import build_config

    preset, steps = ("smoke", 8) if part.dry_run else ("gpu-quick", STEPS)
    return build_config(preset, "full", [f"data.corpus={corpus}", f"run.device={part.device}", "run.tensorboard=false",
                                         f"optim.max_steps={steps}", f"run.log_every={steps}", "run.eval_every=0",
                                         "run.checkpoint_every=0", "run.eval_batches=1", "data.allow_epochs=1000",
                                         *(["run.threads=1", "data.max_documents=200"] if part.dry_run else [])])


def mps_env(part) -> dict:
    """The MPS daemon's pipe and log folders under the part's work folder (writable without root), for the
    daemon and its clients alike."""
    pipe, logs = part.work / "mps" / "pipe", part.work / "mps" / "log"
    pipe.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}


def run_trials(part, cfg, k: int, name: str, env: dict, task: str) -> list[dict]:
    """``k`` trial processes started together; each one's figures (or its error)."""
    folder = part.work / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(cfg.to_json())
    procs = []
    for i in range(k):
        cmd = [sys.executable, "-m", "trainables.gpu_check.trial", "--cfg", str(folder / "cfg.json"), "--out",
               str(folder / f"run{i}"), "--result", str(folder / f"trial{i}.json"), "--task", task,
               "--started", f"{time.time():.3f}"]
        log_file = open(folder / f"trial{i}.log", "w")
        procs.append((subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env), log_file))
    deadline = time.perf_counter() + max(part.left() - 10.0, 5.0)
    out = []
    for i, (proc, log_file) in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(deadline - time.perf_counter(), 1.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = None
        log_file.close()
        from trainables.gpu_check.record import read_json

        got = read_json(folder / f"trial{i}.json")
        if rc != 0:
            got["error"] = "timed out" if rc is None else \
                " | ".join((folder / f"trial{i}.log").read_text(errors="replace").strip().splitlines()[-3:])
        out.append(got)
    return out


def aggregate(trials: list[dict]) -> dict:
    """One phase's figures: the summed throughput and the per-trial medians."""
    ok = [t for t in trials if "error" not in t and t.get("steps_per_s")]

    def med(key: str) -> float | None:
        values = [t[key] for t in ok if t.get(key) is not None]
        return statistics.median(values) if values else None
    total = sum(t["steps_per_s"] for t in ok) if ok else None
    return {"trials": len(trials), "ok": len(ok), "total_steps_per_s": total,
            **{k: med(k) for k in ("steps_per_s", "wall_ms_per_step", "host_ms_per_step", "device_ms_per_step",
                                   "startup_s", "model_load_s", "finetune_steps_per_s", "flops_per_s")},
            "errors": [t["error"] for t in trials if "error" in t]}


def planner_constants(cfg, phases: dict, peak_tflops: float | None) -> dict:
    """The planner's assumed constants (``sweeps.plan``) and the same re-derived from the phases: the step floor
    is a trial's wall time per step alone (where the step is launch-bound, as gpu-quick's is, its launches;
    otherwise an upper bound), the overlap the 4 trials' summed steps/s over one trial's (under MPS where it
    ran), the load and start-up times the trials' medians, the MFU a trial's alone over the GPU's peak."""
    from sweeps import plan

    alone = phases.get("alone") or {}
    shared = phases.get("four_mps") or phases.get("four") or {}
    kernels = plan.step_kernels(cfg.model)
    floor = alone.get("wall_ms_per_step") and alone["wall_ms_per_step"] / 1e3
    overlap = shared.get("total_steps_per_s") / alone["steps_per_s"] if shared.get("total_steps_per_s") and \
        alone.get("steps_per_s") else None
    rate = alone.get("flops_per_s")
    return {"assumed": {"step_floor_s": plan.step_floor_s(cfg.model), "kernel_launch_s": plan.KERNEL_LAUNCH_S,
                        "overlap": 4.0, "finetune_load_s": plan.FINETUNE_LOAD_S,
                        "pretrain_overhead_s": plan.TRIAL_OVERHEAD_S["pretrain"], "mfu": 0.2},
            "measured": {"step_floor_s": floor, "kernel_launch_s": floor / kernels if floor else None,
                         "overlap": overlap, "overlap_from": "four_mps" if phases.get("four_mps") else "four",
                         "finetune_load_s": alone.get("model_load_s"), "pretrain_overhead_s": alone.get("startup_s"),
                         "mfu": rate / (peak_tflops * 1e12) if rate and peak_tflops else None},
            "kernels_per_step": kernels}


def replan(part, result_path: Path) -> dict:
    """The main job's plan on this GPU with the measured constants, where the sweeps (Ray) are installed; the
    command to run elsewhere otherwise (the plan needs the main job's grid, which the sweeps build)."""
    # 20% MFU as the README's quarter-hour claim assumes, unless the check measured it (the calibration's MFU wins)
    cmd = [sys.executable, "sweeps/objective_weights.py", "--preset", "gpu-quick", "--plan", "--hardware", "h200",
           "--mfu", "0.2", "--calibration", str(result_path)]
    record = {"command": " ".join(cmd[1:]).replace(str(result_path), "runs/gpu_check/gpu_check.json")}
    try:
        import ray  # noqa: F401  (the sweeps' planner builds the main job's grid with Ray's search space)
    except ImportError:
        return {**record, "skipped": "Ray is not installed here: run the command where the sweeps run"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(part.left() - 5, 10))
    return {**record, "returncode": done.returncode, "plan": done.stdout.strip().splitlines()[-12:]}


def run(part) -> None:
    from trainables.data.builtin import cache_ready
    from trainables.hardware import MPS_CONTROL, peak_bf16_tflops, start_mps, stop_mps
    from trainables.pretrain import build_pretraining_data

    corpus = "builtin" if cache_ready() else "synthetic"
    task = "sentiment" if corpus == "builtin" else "planted_lexical"
    cfg = trial_config(part, corpus)
    t0 = time.perf_counter()
    build_pretraining_data(cfg)  # prepared once here, before 4 trials would race to prepare it
    part.record(corpus=corpus, task=task, preset=cfg.preset, steps_per_trial=cfg.optim.max_steps,
                prepare_s=round(time.perf_counter() - t0, 1))
    phases: dict = {}
    for name, k, mps in PHASES:
        if mps and (part.mps == "off" or (part.mps == "auto" and shutil.which(MPS_CONTROL) is None)):
            phases[name] = None
            part.record(mps=f"not run: --mps {part.mps}" + ("" if part.mps == "off" else f", no {MPS_CONTROL} here"))
            continue
        env = mps_env(part) if mps else {**os.environ}
        if mps:
            try:
                part.record(mps=start_mps(env))
            except RuntimeError as e:
                part.check("mps_started", False, str(e))
                phases[name] = None
                continue
        try:
            trials = run_trials(part, cfg, k, name, env, task)
        finally:
            if mps:
                stop_mps(env)
        phases[name] = aggregate(trials)
        part.record(phases=phases)
        part.check(f"{name}_trials_ran", phases[name]["ok"] == k, phases[name]["errors"] or None)
    name = __import__("torch").cuda.get_device_name(0) if part.device == "cuda" else "cpu"
    constants = planner_constants(cfg, phases, part.peak_tflops or peak_bf16_tflops(name))
    part.record(planner=constants)
    part.record(replan=replan(part, part.result_path))
    part.record(summary={k: (phases.get(k) or {}).get("total_steps_per_s") for k, _, _ in PHASES} |
                {"measured": constants["measured"], "assumed": constants["assumed"]})
    log.info("calibration: %s", json.dumps(constants["measured"]))
