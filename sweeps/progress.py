"""Progress of a sweep on the terminal: trials running, finished, stopped and failed, per phase."""

from __future__ import annotations

import sys
import time

from ray import tune


class Progress(tune.Callback):
    """A Tune callback printing one line per event: trials running, finished, stopped, failed."""

    def __init__(self, quiet: bool = False, out=sys.stdout):
        self.quiet, self.out, self.phase = quiet, out, ""
        self.counts: dict[str, dict[str, int]] = {}
        self._last: dict[str, float] = {}
        self._results: dict[str, dict] = {}

    def _c(self) -> dict[str, int]:
        return self.counts.setdefault(self.phase, {"running": 0, "finished": 0, "stopped": 0, "failed": 0})

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        c = self._c()
        print(f"[{time.strftime('%H:%M:%S')}] {self.phase:8s} {c['running']} running, {c['finished']} finished, "
              f"{c['stopped']} stopped, {c['failed']} failed | {text}", file=self.out, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._c()["running"] += 1
        self._line(f"{trial} started")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._results[trial.trial_id] = result
        now = time.time()
        if now - self._last.get(trial.trial_id, 0) < 10 and not result.get("final"):
            return
        self._last[trial.trial_id] = now
        shown = {k: result[k] for k in ("step", "probe_score", "eval/mlm_acc", "mean_primary") if k in result}
        self._line(f"{trial} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))

    def on_trial_complete(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        last = self._results.get(trial.trial_id, {})
        if last.get("failed"):
            c["failed"] += 1
            self._line(f"{trial} FAILED: {last.get('stop_reason', '')}")
        elif last.get("final"):
            c["finished"] += 1
            self._line(f"{trial} finished")
        else:
            c["stopped"] += 1
            self._line(f"{trial} stopped early by ASHA at step {int(last.get('step', 0))}")

    def on_trial_error(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        c["failed"] += 1
        self._line(f"{trial} FAILED (error; see {trial.local_path})")
