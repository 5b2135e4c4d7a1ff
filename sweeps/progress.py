"""Progress of a sweep: a compact live status per phase on a terminal, plain lines in a log file.

On a terminal each phase is one tqdm bar -- trials finished out of the phase's total, with running /
stopped / failed counts and an ETA from the plan (``sweeps.plan``) while it has time left, then from
the pace of finished trials. Where the output is not a terminal (a log file, CI), a phase is a line when it starts,
one per trial that ends (with its last metrics) and a line when it ends. ``--verbose`` prints one line
per trial event instead (started, every result, ended). Phase start and end times are kept for the
report's planned-versus-actual table.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager

from ray import tune

# Every trial event, whatever the terminal shows, goes to the run's log file (sweeps.runner.log_to_file); the
# terminal handler leaves these records out, since the terminal has its own bar or lines.
log = logging.getLogger("sweeps.progress")


class Progress(tune.Callback):
    """A Tune callback: counts trials running, finished, stopped early and failed in the current phase."""

    def __init__(self, quiet: bool = False, verbose: bool = False, out=None, planned: dict[str, float] | None = None,
                 prefix: str = ""):
        """``prefix``: shown before each phase's name (the main job's instrument check: ``check/measure``)."""
        self.quiet, self.verbose, self.out, self.phase, self.prefix = quiet, verbose, out or sys.stdout, "", prefix
        self.live = not verbose and not quiet and getattr(self.out, "isatty", lambda: False)()
        self.planned = dict(planned or {})  # phase -> planned seconds
        self.counts: dict[str, dict[str, int]] = {}
        self.times: dict[str, list[float]] = {}  # phase -> [start, end]
        self.totals: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._results: dict[str, dict] = {}
        self._bar = None

    def __getstate__(self) -> dict:
        """Tune pickles its callbacks with the experiment (``tuner.pkl``, for ``--resume``). The stream and the
        live bar belong to this process and are left out: a notebook's or a test's captured stream cannot be
        pickled, and pickling it would fail a sweep run from one at its first phase. An unpickled Progress
        writes to ``sys.stdout``."""
        return {**self.__dict__, "out": None, "_bar": None}

    def __setstate__(self, state: dict) -> None:
        live = Progress._restoring
        if live is not None:
            # --resume: Tune restores the callbacks it pickled when the phase first started and sends its events
            # to that copy, not to the Progress this process built and began the phase on. The copy's phase
            # start is the first run's, so its ETA would count the hours the driver was not running. Share the live
            # object's state: one set of counts and times.
            self.__dict__ = live.__dict__
            return
        self.__dict__.update(state, out=state.get("out") or sys.stdout)

    _restoring: "Progress | None" = None

    @contextmanager
    def restoring(self):
        """While Tune unpickles a phase's experiment (``Tuner.restore``), the Progress it unpickles shares this
        one's state."""
        Progress._restoring = self
        try:
            yield
        finally:
            Progress._restoring = None

    # ---- phases (called by sweeps.runner.run_phase)
    def begin(self, phase: str, total: int) -> None:
        self.phase, self.totals[phase] = phase, total
        self.times[phase] = [time.time(), float("nan")]
        self._c()
        if not self.live and not self.verbose:
            planned = self.planned.get(phase)
            self._say(f"{total} trial{'' if total == 1 else 's'}" + (f", planned {planned / 60:.1f} min" if planned else ""))
        if self.live:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=f"{self.prefix + phase:8s}", unit="trial", file=self.out, dynamic_ncols=True,
                             bar_format="{desc} {bar} {n_fmt}/{total_fmt} trials | {postfix}")
            self._refresh()

    def end(self, phase: str) -> None:
        t = self.times.setdefault(phase, [time.time(), float("nan")])
        t[1] = time.time()
        if not self.live and not self.verbose:
            c = self.counts.get(phase, {})
            self._say(f"done in {(t[1] - t[0]) / 60:.1f} min: {c.get('finished', 0)} finished, "
                      f"{c.get('stopped', 0)} stopped, {c.get('failed', 0)} failed")
        if self._bar is not None:
            self._refresh()
            self._bar.close()
            self._bar = None

    def actual(self) -> dict[str, float]:
        return {p: t[1] - t[0] for p, t in self.times.items() if t[1] == t[1]}

    # ---- status
    def _c(self) -> dict[str, int]:
        return self.counts.setdefault(self.phase, {"running": 0, "finished": 0, "stopped": 0, "failed": 0})

    def eta(self) -> float:
        """Seconds left in the phase: the plan's while it has time left, then the pace of finished trials. A
        phase's trials differ in cost (``none`` trains nothing, a probe is cheap beside a fine-tuning), so the
        pace of the first few says little about the rest: the first to end may be the cheapest or the dearest."""
        c, start = self._c(), self.times.get(self.phase, [time.time()])[0]
        elapsed, done = time.time() - start, c["finished"] + c["stopped"] + c["failed"]
        total = self.totals.get(self.phase, 0)
        planned = self.planned.get(self.phase)
        if total and done >= total:
            return 0.0  # every trial has ended: the plan's time left would be a wait that is not coming
        if planned and elapsed < planned:
            return planned - elapsed
        if done and total:
            return elapsed / done * (total - done)
        return 0.0 if planned else float("nan")

    def status(self) -> str:
        c, eta = self._c(), self.eta()
        left = f"ETA {int(eta // 60)}:{int(eta % 60):02d}" if eta == eta else "ETA -"
        return f"{c['running']} running, {c['finished']} finished, {c['stopped']} stopped, {c['failed']} failed | {left}"

    def _refresh(self) -> None:
        if self._bar is not None:
            c = self._c()
            self._bar.n = c["finished"] + c["stopped"] + c["failed"]
            self._bar.set_postfix_str(self.status(), refresh=True)

    def _say(self, text: str) -> None:
        log.info("%s %s", self.prefix + self.phase, text)
        if not self.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {self.prefix + self.phase:8s} {text}", file=self.out, flush=True)

    def _line(self, text: str, ended: bool = False) -> None:
        """A trial event: the live bar redrawn on a terminal; a line in a log (only the trial's end, unless
        verbose)."""
        log.info("%s %s | %s", self.prefix + self.phase, self.status(), text)
        if self.quiet:
            return
        if self.live:
            self._refresh()
            return
        if self.verbose or ended:
            print(f"[{time.strftime('%H:%M:%S')}] {self.prefix + self.phase:8s} {self.status()} | {text}",
                  file=self.out, flush=True)

    def _metrics(self, result: dict) -> str:
        # mean_primary is one fine-tuning seed's test score at the rate best on that seed's dev; the export chooses
        # the rate by the mean dev over every seed (finetune.selection), so with several seeds the two can differ
        names = {"mean_primary": "primary_at_this_seeds_rate"}
        shown = {names.get(k, k): result[k] for k in ("step", "probe_score", "eval/mlm_acc", "mean_primary")
                 if k in result}
        return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())

    # ---- Tune events
    def on_trial_start(self, iteration, trials, trial, **info):
        self._c()["running"] += 1
        self._line(f"{trial} started")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._results[trial.trial_id] = result
        now = time.time()
        if now - self._last.get(trial.trial_id, 0) < 10 and not result.get("final"):
            return
        self._last[trial.trial_id] = now
        self._line(f"{trial} {self._metrics(result)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        last = self._results.get(trial.trial_id, {})
        if last.get("failed"):
            c["failed"] += 1
            self._line(f"{trial} FAILED: {last.get('stop_reason', '')}", ended=True)
        elif last.get("final"):
            c["finished"] += 1
            self._line(f"{trial} finished {self._metrics(last)}".rstrip(), ended=True)
        else:
            c["stopped"] += 1
            self._line(f"{trial} stopped early by ASHA at step {int(last.get('step', 0))}", ended=True)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._c()["running"] -= 1  # on_trial_start counts it again when it restarts
        self._line(f"{trial} lost its worker; retried from its last checkpoint", ended=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        c["failed"] += 1
        self._line(f"{trial} FAILED (error; see {trial.local_path})", ended=True)
