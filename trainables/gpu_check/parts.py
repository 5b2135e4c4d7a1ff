"""The process each part of the check runs in: ``python -m trainables.gpu_check.parts PART --result FILE
--work DIR --seconds S [--dry-run] [--mps auto|on|off]`` (``check.py`` starts it).

A part records as it goes (``Part.record`` rewrites FILE whole), so a part killed at its timeout keeps the
figures it had; it ends with ``passed`` and its ``checks`` (name -> passed), exit status 0 when all passed.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from trainables.gpu_check.record import write_json

log = logging.getLogger(__name__)


@dataclass
class Part:
    """What a part gets: where it works, its device, its seconds, and the result it builds up."""

    name: str
    result_path: Path
    work: Path
    seconds: float
    dry_run: bool
    mps: str = "auto"
    peak_tflops: float | None = None
    t0: float = field(default_factory=time.perf_counter)
    result: dict = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def left(self) -> float:
        """Seconds of this part's timeout still ahead."""
        return self.seconds - (time.perf_counter() - self.t0)

    def record(self, **fields) -> None:
        """Add ``fields`` to the result and rewrite the file."""
        self.result.update(fields, seconds=round(time.perf_counter() - self.t0, 1))
        write_json(self.result_path, self.result)

    def check(self, name: str, ok: bool, detail=None) -> bool:
        """One named pass/fail, recorded at once; a failed check does not stop the part."""
        checks = self.result.setdefault("checks", {})
        checks[name] = bool(ok)
        if detail is not None:
            self.result.setdefault("details", {})[name] = detail
        self.record()
        if not ok:
            log.warning("check %s failed: %s", name, detail)
        return bool(ok)


def runners() -> dict:
    from trainables.gpu_check import calibrate, ddp, smoke, stepbench

    return {"smoke": smoke.run, "bench": stepbench.run, "calibrate": calibrate.run, "ddp": ddp.run}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.gpu_check.parts")
    p.add_argument("part", choices=("smoke", "bench", "calibrate", "ddp"))
    p.add_argument("--result", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--mps", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--peak-tflops", type=float)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    part = Part(args.part, Path(args.result), Path(args.work), args.seconds, args.dry_run, args.mps, args.peak_tflops)
    shutil.rmtree(part.work, ignore_errors=True)  # a rerun starts clean: a finished run would not train again
    part.work.mkdir(parents=True)
    part.record(part=args.part, device=part.device, dry_run=args.dry_run)
    try:
        runners()[args.part](part)
    except Exception as e:  # recorded whole: the check's JSON says what broke, the next part still runs
        part.record(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc().splitlines()[-15:])
        log.exception("part %s failed", args.part)
    checks = part.result.get("checks", {})
    part.record(passed=bool(checks) and all(checks.values()) and "error" not in part.result)
    return 0 if part.result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
