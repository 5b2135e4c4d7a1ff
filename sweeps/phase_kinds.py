"""The phases of a sweep, described once, and the trials of its read phases: what the run (``sweeps.phases``),
the plan (``sweeps.plan``), the progress lines and the export (``sweeps.export``) all read. A leaf: it imports
nothing of the project, so each of them can.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PhaseKind:
    """One phase of a sweep: its Tune experiment is ``<root>/<name>``, its plan row and progress line carry
    ``name``, and its trials' results become rows of the export's ``rows`` table."""

    name: str
    trainable: str  # pretrain | finetune: what one trial runs (trainables.tune_adapters)
    rows: str  # runs | evals
    about: str


PHASES = {k.name: k for k in (
    PhaseKind("search", "pretrain", "runs", "search trials: Optuna proposes the mix, ASHA stops the weak"),
    PhaseKind("measure", "pretrain", "runs", "each variant x pretraining seed at full budget"),
    PhaseKind("finetune", "finetune", "evals", "each measurement run x fine-tuning seed x mode, on the tasks"),
    PhaseKind("snapshots", "finetune", "evals", "each snapshot a run kept x fine-tuning seed, read by the probe"),
)}


def mode_tasks(args, tasks: list[str]) -> dict[str, list[str]]:
    """The tasks each fine-tuning mode (``args.modes``: finetune | probe) runs on, in ``tasks``' order, the modes
    with none left out: ``args.mode_tasks`` (mode -> its tasks) narrows a mode, the default is every task."""
    only = getattr(args, "mode_tasks", None) or {}
    of_mode = {m: [t for t in tasks if m not in only or t in only[m]]
               for m in tuple(getattr(args, "modes", None) or ("finetune",))}
    return {m: ts for m, ts in of_mode.items() if ts}


def read_specs(inputs: list[dict], of_mode: dict[str, list[str]], seeds: int) -> list[dict]:
    """The trials of a read phase: each input (a run or a snapshot: run_id, cfg, checkpoint) x fine-tuning seed x
    mode, on that mode's tasks. The plan builds its cost from the same list (sweeps.plan.plan_sweep)."""
    return [{**inp, "finetune_seed": s, "tasks": ts, "mode": mode} for inp in inputs for s in range(seeds)
            for mode, ts in of_mode.items()]


SNAPSHOT_READS = ("probe", "all")


def snapshot_modes(of_mode: dict[str, list[str]], reads: str = "probe") -> dict[str, list[str]]:
    """The modes that read snapshots (``--snapshot-reads``): the probe ones (cheap: a frozen encoder), or ``all``
    of them, fine-tuning included, which costs each snapshot what a run's own fine-tuning costs."""
    if reads not in SNAPSHOT_READS:
        raise ValueError(f"--snapshot-reads {reads!r} is not valid; allowed: {', '.join(SNAPSHOT_READS)}")
    return dict(of_mode) if reads == "all" else {mode: ts for mode, ts in of_mode.items() if mode.startswith("probe")}
