"""The check's driver: the CUDA gate, the versions, the budget, one process per part, the one JSON file.

``python -m trainables.gpu_check [--from DIR] [--budget-s 480] [--parts smoke,bench,calibrate,ddp]
[--mps auto|on|off] [--storage URI] [--out DIR] [--dry-run] [--usable]`` (docs/gpu.md says what each part
measures). Nothing here touches CUDA: the gate asks torch through NVML and a probe process opens the
only context, so the parts' processes (and the MPS daemon) find the GPU as a fresh box would.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainables.gpu_check.record import mirror, read_json, write_json

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
# nominal seconds of each part on one H200, in the order they run: --budget-s is shared out in these proportions
PARTS: dict[str, float] = {"smoke": 90.0, "bench": 120.0, "calibrate": 150.0, "ddp": 60.0}
DEFAULT_BUDGET_S = 480.0  # the whole check: the parts' nominal seconds and the start-up, with a little room
DRY_RUN_BUDGET_S = 1800.0  # a dry run on a small, shared CPU is slower than the GPU run
MIN_PART_S = 20.0  # a part given less than this is skipped, not started
DRIVER_FLOOR = 570  # CUDA 12.8 wheels (torch's cu128) need driver >= 570
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "pyarrow", "scikit-learn",
            "scipy", "tensorboard", "tqdm", "ray", "optuna", "datasets", "seqeval", "bert-objectives")


def torch_build() -> tuple[str, str | None]:
    """(version, CUDA build) of the installed torch from its version.py, without importing torch (seconds)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return "not installed", None
    found = {"__version__": "unknown", "cuda": None}
    for node in ast.parse((Path(spec.origin).parent / "version.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in found and isinstance(node.value, ast.Constant):
            found[target.id] = node.value.value
    return str(found["__version__"]), found["cuda"]


def cuda_gate() -> tuple[bool, str, dict]:
    """(usable, one line, the probe's device record). A CPU-only wheel is told from its version file at
    once; otherwise no CUDA context here either: torch's availability check goes through NVML, then a probe
    process runs one matmul on the GPU and reports the device, its driver and the libraries."""
    version, cuda = torch_build()
    if cuda is None:
        return False, (f"CUDA is not usable here: torch {version} is a CPU-only build; this check needs a CUDA "
                       "build and a GPU (--dry-run runs every part on the CPU at smoke size)"), {}
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    build = torch.version.cuda or "none: a CPU-only wheel"
    if not torch.cuda.is_available():
        return False, (f"CUDA is not usable here: torch {torch.__version__} (CUDA build {build}) sees no GPU; "
                       "this check needs one (--dry-run runs every part on the CPU at smoke size)"), {}
    probe = subprocess.run([sys.executable, "-m", "trainables.gpu_check.probe"], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    info = read_probe(probe.stdout)
    if probe.returncode != 0 or not info:
        tail = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["no output"]
        return False, (f"CUDA is not usable here: torch {torch.__version__} (CUDA build {build}) failed on the GPU: "
                       f"{tail[0]}"), {}
    driver = info.get("driver") or ""
    if driver[:3].isdigit() and int(driver.split(".")[0]) < DRIVER_FLOOR:
        return False, (f"CUDA driver {driver} on {info['device']} is older than {DRIVER_FLOOR}, which torch "
                       f"{torch.__version__}'s CUDA {build} build needs; use a current GPU image"), info
    return True, (f"CUDA usable: {info['device']} x{info['count']}, driver {driver or 'unknown'}, torch "
                  f"{torch.__version__} (CUDA {build}), {info['memory_gib']:.0f} GiB"), info


def read_probe(stdout: str) -> dict:
    import json

    for line in reversed(stdout.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {}


def versions() -> dict:
    """Every package the check's figures depend on, and the ones it must run without (None: absent)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["importable"] = {m: _importable(m) for m in ("ray", "optuna", "datasets", "seqeval")}
    out["torch_cuda"] = torch_build()[1]
    return out


def _importable(module: str) -> bool:
    """Whether ``import module`` would find it (a module blocked as ``sys.modules[m] = None`` would not)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ValueError, ImportError):
        return False


def source_version() -> dict:
    """The code that ran: the checkout's commit where git knows it, else a sha256 of every project .py file
    (a carried working tree has no .git)."""
    import hashlib

    from trainables.checkpoint import code_version

    h = hashlib.sha256()
    for path in sorted(p for pkg in ("trainables", "sweeps", "analysis") for p in (REPO / pkg).rglob("*.py")):
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return {"code_version": code_version(), "source_sha256": h.hexdigest()[:16]}


class Report:
    """The one JSON file: rewritten after every part, mirrored to ``--storage``."""

    def __init__(self, out: Path, storage: str | None, data: dict):
        self.out, self.storage, self.data, self.t0 = out, storage, data, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def part(self, name: str, record: dict) -> None:
        self.data["parts"][name] = record
        failed = [n for n, r in self.data["parts"].items() if r["status"] in ("fail", "timeout")]
        self.data.update(passed=not failed, failed_parts=failed, wall_s=round(self.elapsed(), 1),
                         summary=summary(self.data["parts"]))
        write_json(self.out, self.data)
        if self.storage:
            mirror([self.out, *sorted((self.out.parent / "logs").glob("*.log"))], self.storage)
        log.info("%s: %s in %.0f s%s", name, record["status"], record.get("seconds", 0),
                 f" ({record['reason']})" if record.get("reason") else "")


def summary(parts: dict) -> dict:
    """The headline figures of every part, in one flat place (each part's own ``summary``)."""
    return {name: r.get("result", {}).get("summary") for name, r in parts.items() if r.get("result")}


def part_timeout(name: str, args, report: Report) -> float:
    """This part's share of ``--budget-s``: its nominal seconds scaled to the budget, capped by what is left
    once the parts after it get their minimum (a dry run: all that is left)."""
    todo = [p for p in PARTS if p in args.parts]
    later = todo[todo.index(name) + 1:]
    scale = args.budget_s / max(sum(PARTS[p] for p in todo) + 30.0, 1.0)  # 30 s: start-up, data, the JSON
    left = args.budget_s - report.elapsed() - MIN_PART_S * len(later)
    return left if args.dry_run else min(PARTS[name] * scale, left)  # a dry run's CPU is slower than any share


def run_part(name: str, timeout: float, args, work: Path, env: dict) -> dict:
    """One part in its own process group, killed at ``timeout``; what it wrote to its result file is kept."""
    result, logfile = work / f"{name}.json", Path(args.out) / "logs" / f"{name}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "trainables.gpu_check.parts", name, "--result", str(result), "--work",
           str(work / name), "--seconds", f"{timeout:.0f}", "--mps", args.mps,
           *(["--dry-run"] if args.dry_run else []),
           *(["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else [])]
    t0 = time.perf_counter()
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc = None
    got = read_json(result)
    status = "timeout" if rc is None else "pass" if rc == 0 and got.get("passed") else "fail"
    rec = {"status": status, "seconds": round(time.perf_counter() - t0, 1), "timeout_s": round(timeout),
           "returncode": rc, "command": shlex.join(cmd), "log": str(logfile), "result": got}
    if status != "pass":
        rec["error_tail"] = [ln for ln in logfile.read_text(errors="replace").splitlines() if ln.strip()][-12:]
    return rec


def kill_group(proc: subprocess.Popen) -> None:
    """The part and everything it started (trial processes, DDP ranks), politely first."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def install_data(args) -> dict:
    """The built-in data from the carried folder (``--from``), with no network; the calibration reads it."""
    from trainables.data import builtin
    from trainables.data.text import CorpusError

    t0 = time.perf_counter()
    rec = {"cache": str(builtin.data_dir(args.cache_dir)), "from": args.from_dir}
    try:
        if builtin.cache_ready(args.cache_dir):
            rec.update(status="pass", how="already complete")
        elif args.from_dir:
            builtin.ensure_fetched(args.cache_dir, from_dir=args.from_dir)
            rec.update(status="pass", how=f"installed from {args.from_dir}")
        else:
            rec.update(status="skipped", reason="no built-in data and no --from DIR: the calibration falls back to "
                       "the synthetic corpus (make DIR with `python -m trainables.data fetch --to DIR --compact`)")
    except CorpusError as e:
        rec.update(status="fail", error_tail=[str(e)])
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def run_check(args) -> dict:
    env_info = {**versions(), **source_version()}
    out = Path(args.out)
    data = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:], "dry_run": args.dry_run,
            "budget_s": args.budget_s, "cuda": args.gate, "environment": env_info, "parts": {}}
    report = Report(out / "gpu_check.json", args.storage, data)
    report.part("data", install_data(args))
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)  # no install needed
    env = {**os.environ, "PYTHONPATH": path,
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "BERT_OBJECTIVES_DATA": data["parts"]["data"]["cache"]}
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    for name in (p for p in PARTS if p in args.parts):
        timeout = part_timeout(name, args, report)
        if timeout < MIN_PART_S:
            why = f"only {timeout:.0f} s of --budget-s {args.budget_s:.0f} left"
            report.part(name, {"status": "skipped", "reason": why})
            continue
        report.part(name, run_part(name, timeout, args, Path(args.work) if args.work else out / "work", env))
    return report.data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainables.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/gpu_check", help="folder of gpu_check.json and logs/")
    p.add_argument("--work", help="scratch folder of the parts (corpora, checkpoints: hundreds of MB; default OUT/work)")
    p.add_argument("--storage", help="also copy the JSON and logs here after every part: a folder, s3://, gs:// "
                                     "or file://")
    p.add_argument("--from", dest="from_dir", help="the carried built-in data (fetch --to DIR --compact)")
    p.add_argument("--cache-dir", help="the built-in data cache (default $BERT_OBJECTIVES_DATA or ~/.cache/...)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--budget-s", type=float, default=None,
                   help=f"seconds for the whole check (default {DEFAULT_BUDGET_S:.0f}; a dry run "
                        f"{DRY_RUN_BUDGET_S:.0f}); each part gets its share")
    p.add_argument("--mps", choices=("auto", "on", "off"), default="auto",
                   help="the calibration's 4 trials under CUDA MPS: auto (where nvidia-cuda-mps-control exists), "
                        "on (required), off")
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, where trainables.hardware lacks it")
    p.add_argument("--dry-run", action="store_true", help="every part on the CPU at smoke size (no GPU needed)")
    p.add_argument("--usable", action="store_true", help="only the CUDA gate: one line, exit 0 if usable, else 2")
    args = p.parse_args(argv)
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    bad = [s for s in args.parts if s not in PARTS]
    if bad:
        p.error(f"--parts: unknown {', '.join(bad)}; allowed: {', '.join(PARTS)}")
    args.budget_s = args.budget_s or (DRY_RUN_BUDGET_S if args.dry_run else DEFAULT_BUDGET_S)
    if args.budget_s <= 0 or (args.peak_tflops is not None and args.peak_tflops <= 0):
        p.error(f"--budget-s {args.budget_s:g} and --peak-tflops must be > 0")
    if args.storage and "://" not in args.storage:
        args.storage = str(Path(args.storage).expanduser().resolve())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    args.gate = {"line": "dry run: not checked"}
    if not args.dry_run or args.usable:
        usable, line, device = cuda_gate()
        print(line, flush=True)
        if args.usable or not usable:
            return 0 if usable else 2
        args.gate = {"line": line, **device}
    data = run_check(args)
    for name, rec in data["parts"].items():
        why = rec.get("reason") or " | ".join(rec.get("error_tail", [])[-2:])
        print(f"{name:10s} {rec['status']:8s} {rec.get('seconds', '')!s:>7}  {why}"[:200])
    print(f"written to {Path(args.out) / 'gpu_check.json'}" + (f" and {args.storage}" if args.storage else ""))
    return 0 if data["passed"] else 1
