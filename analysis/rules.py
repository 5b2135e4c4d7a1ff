"""Rules as files, verdicts by code: what a run must show, fixed before the run, judged from its export.

    python -m analysis.rules docs/rules/cpu-long.toml runs/NAME/export            # judge an export
    python sweeps/objective_weights.py --preset cpu-long --rule docs/rules/cpu-long.toml   # judged at the end

A rule is a TOML file under ``docs/rules/``, committed before the run it judges: a rule written or re-read
after the data is not evidence. Each verdict records the rule file's git blob hash, the last commit that
touched it, and whether the file the run read is that committed version; a verdict under an uncommitted or
edited rule says so on its first line. A rule holds:

    name, command          what it judges and the command that runs it (documentation)
    preset, first_seed, seeds      the design the run must have had (first_seed may list several blocks)
    primary                the contrast the rule is about (e.g. "mlm_only - none")
    tasks                  the task set every average and count is over, fixed here, the same at every point
    equivalence_margin     the margin inside which a "tie" may be called (TOST; analysis.inference)
    [wall_minutes]         wall-time limits per CPU kind: native_bf16, fp32 (minutes, install not counted)
    [[clause]]             one per claim; ``kind`` is one of CLAUSES below, the other keys its thresholds

A clause is PASS, FAIL, or NOT MEASURED (what it needs is not in the export: never a pass). The rule
passes when every clause passes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tomllib
from functools import partial
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from analysis.inference import EQUIVALENCE_MARGIN

PASS, FAIL, UNMEASURED = "PASS", "FAIL", "NOT MEASURED"
CPU_KINDS = ("native_bf16", "fp32")


class RuleError(ValueError):
    """A rule file that cannot be judged: one line naming the bad value and what is allowed."""


@dataclass(frozen=True)
class Rule:
    path: str
    name: str
    command: str = ""
    preset: str = ""
    first_seed: int | list[int] | None = None  # a list: any one of these blocks of seeds
    seeds: int | None = None
    primary: str = ""
    tasks: tuple[str, ...] = ()
    equivalence_margin: float | None = None
    wall_minutes: dict[str, float] = field(default_factory=dict)
    clauses: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Verdict:
    clause: str  # the clause in words, thresholds included
    status: str  # PASS | FAIL | NOT MEASURED
    observed: str  # what the export shows


@dataclass(frozen=True)
class Provenance:
    path: str
    sha256: str  # of the bytes the run read
    blob: str  # git's blob hash of those bytes (git hash-object)
    committed: bool  # the bytes are the file as committed at HEAD
    last_commit: str  # the last commit that touched the file ('' outside git)
    last_commit_time: str  # its committer date, ISO 8601

    def line(self) -> str:
        if self.committed:
            return f"rule {self.path} (blob {self.blob[:12]}, committed in {self.last_commit[:12]} {self.last_commit_time})"
        return (f"rule {self.path} (blob {self.blob[:12]}) is NOT the committed file: a rule must be committed before "
                "the run it judges, so this verdict is not evidence")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise RuleError(message)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


# a clause key -> (what it must be, in words; its check)
KEYS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "objective": ("an objective's name, e.g. mlm", lambda v: isinstance(v, str) and bool(v)),
    "column": ("a runs column, e.g. mlm_acc", lambda v: isinstance(v, str) and bool(v)),
    "contrast": ("a contrast, e.g. mlm_only - none", lambda v: isinstance(v, str) and bool(v)),
    "row": ("a report row, e.g. average (probe)", lambda v: isinstance(v, str) and bool(v)),
    "at_least": ("a number", _is_number),
    "lower_above": ("a number", _is_number),
    "tasks_at_least": ("a count >= 1", lambda v: _is_int(v) and v >= 1),
    "at_most": ("a count >= 0", lambda v: _is_int(v) and v >= 0),
    "sign": ("positive or negative", lambda v: v in ("positive", "negative")),
    "reading": ("finetune or probe", lambda v: v in ("finetune", "probe")),
    "where_every_variant_learns_by": ("a margin >= 0 over the chance baseline", lambda v: _is_number(v) and v >= 0),
}


def load_rule(path: str | Path) -> Rule:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise RuleError(f"rule {path}: cannot read it ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise RuleError(f"rule {path}: not valid TOML ({e})") from None
    known = {"name", "command", "preset", "first_seed", "seeds", "primary", "tasks", "equivalence_margin",
             "wall_minutes", "clause"}
    extra = sorted(set(raw) - known)
    if extra:
        raise RuleError(f"rule {path}: unknown key {extra[0]!r}; allowed: {', '.join(sorted(known))}")
    _require(isinstance(raw.get("name"), str) and raw["name"], f"rule {path}: name must be a non-empty string")
    for key in ("command", "preset", "primary"):
        _require(isinstance(raw.get(key, ""), str), f"rule {path}: {key}={raw.get(key)!r} must be a string")
    first = raw.get("first_seed")
    _require(first is None or _is_int(first) or (isinstance(first, list) and first and all(map(_is_int, first))),
             f"rule {path}: first_seed={first!r} must be a seed or a list of seeds")
    _require(raw.get("seeds") is None or (_is_int(raw["seeds"]) and raw["seeds"] >= 1),
             f"rule {path}: seeds={raw.get('seeds')!r} must be a count >= 1")
    tasks = raw.get("tasks", [])
    _require(isinstance(tasks, list) and all(isinstance(t, str) and t for t in tasks),
             f"rule {path}: tasks={tasks!r} must be a list of task names")
    walls = raw.get("wall_minutes", {})
    _require(isinstance(walls, dict), f"rule {path}: wall_minutes={walls!r} must be a table of minutes per CPU kind")
    bad = sorted(set(walls) - set(CPU_KINDS))
    if bad:
        raise RuleError(f"rule {path}: wall_minutes.{bad[0]} is not a CPU kind; allowed: {', '.join(CPU_KINDS)}")
    for k, v in walls.items():
        _require(_is_number(v) and v > 0, f"rule {path}: wall_minutes.{k}={v!r} must be a number of minutes > 0")
    clauses = raw.get("clause", [])
    _require(isinstance(clauses, list) and clauses and all(isinstance(c, dict) for c in clauses),
             f"rule {path}: needs at least one [[clause]] table (a rule with no clause would pass anything)")
    for i, c in enumerate(clauses):
        kind = c.get("kind")
        _require(isinstance(kind, str) and kind in CLAUSES, f"rule {path}: clause {i + 1} kind={kind!r} is not valid; "
                                                            f"allowed: {', '.join(CLAUSES)}")
        required, optional, _ = CLAUSES[kind]
        missing = [k for k in required if k not in c]
        _require(not missing, f"rule {path}: clause {i + 1} ({kind}) needs {', '.join(missing)}")
        unknown = sorted(set(c) - {"kind", *required, *optional})
        if unknown:
            raise RuleError(f"rule {path}: clause {i + 1} ({kind}) has unknown key {unknown[0]!r}; allowed: "
                            f"{', '.join((*required, *optional)) or 'none'}")
        for k, v in c.items():
            if k != "kind":
                allowed, check = KEYS[k]
                _require(check(v), f"rule {path}: clause {i + 1} ({kind}) {k}={v!r}: must be {allowed}")
        _require(kind != "estimate" or "at_least" in c or "lower_above" in c,
                 f"rule {path}: clause {i + 1} (estimate) needs at_least or lower_above (a threshold)")
    clauses = tuple(clauses)
    margin = raw.get("equivalence_margin")
    _require(margin is None or (isinstance(margin, (int, float)) and margin > 0),
             f"rule {path}: equivalence_margin={margin!r} must be a number > 0")
    # The tables test ties at one margin; a rule that stated another would be judged against a test nobody ran.
    _require(margin is None or abs(margin - EQUIVALENCE_MARGIN) < 1e-12,
             f"rule {path}: equivalence_margin={margin!r}: this version tests ties at +-{EQUIVALENCE_MARGIN} "
             f"(analysis.inference.EQUIVALENCE_MARGIN); restate that or leave it out")
    return Rule(str(path), raw["name"], raw.get("command", ""), raw.get("preset", ""), raw.get("first_seed"),
                raw.get("seeds"), raw.get("primary", ""), tuple(tasks), margin,
                {k: float(v) for k, v in walls.items()}, clauses)


def provenance(path: str | Path) -> Provenance:
    """The rule file's hashes and whether the bytes read are the committed ones (git, from the file's folder)."""
    path = Path(path).resolve()
    data = path.read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    sha = hashlib.sha256(data).hexdigest()

    def git(*args: str, where: Path = path.parent) -> str:
        out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    top = git("rev-parse", "--show-toplevel")
    if not top:
        return Provenance(str(path), sha, blob, False, "", "")
    git = partial(git, where=Path(top))  # paths below are the repository's, not the file's folder's
    rel = path.relative_to(Path(top).resolve()).as_posix()
    head_blob = git("rev-parse", f"HEAD:{rel}")
    last = git("log", "-1", "--format=%H %cI", "--", rel).split()
    return Provenance(rel, sha, blob, head_blob == blob, last[0] if last else "", last[1] if len(last) > 1 else "")


@dataclass
class Facts:
    """What the clauses read: the report's estimates, the export's runs, the sweep's wall time and CPU kind."""

    contributions: Any  # analysis.contributions.Contributions
    runs: Any  # the export's completed measure runs
    all_runs: Any = None  # every measure run, failed ones too
    tasks: tuple[str, ...] = ()  # the source tasks the export measured
    check: dict | None = None
    wall_minutes: float | None = None
    cpu_kind: str | None = None  # native_bf16 | fp32 | None (not a CPU run, or unknown)


def _contrast_rows(c, contrast: str):
    return [e for e in c.contrasts if e.contrast.name == contrast or contrast in getattr(e.contrast, "also", ())]


def _fmt(e) -> str:
    iv = e.interval
    return f"{iv.estimate:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"


def _task_of(row: str) -> str:
    return row.split(" (")[0]


def _called(e, sign: int) -> bool:
    from analysis.headline import resolved

    return bool(resolved(e) and np.sign(e.interval.estimate) == sign)


def clause_check(rule: Rule, c: dict, f: Facts) -> Verdict:
    text = "the instrument check passes"
    if f.check is None:
        return Verdict(text, UNMEASURED, "no instrument check ran with this sweep")
    return Verdict(text, PASS if f.check.get("passed") else FAIL, "PASS" if f.check.get("passed") else "FAIL")


def clause_design(rule: Rule, c: dict, f: Facts) -> Verdict:
    want = []
    if rule.preset:
        want.append(f"preset {rule.preset}")
    firsts = rule.first_seed if isinstance(rule.first_seed, list) else [rule.first_seed or 0]
    blocks = [tuple(range(first, first + rule.seeds)) for first in firsts] if rule.seeds is not None else []
    if blocks:
        want.append("pretraining seeds " + " or ".join(f"{b[0]}-{b[-1]}" for b in blocks))
    if rule.tasks:
        want.append(f"tasks {', '.join(rule.tasks)}")
    text = "the run has the rule's design: " + (", ".join(want) or "(none stated)") + \
        ", every variant at every seed, no run failed"
    cs = f.contributions
    seeds = tuple(sorted(int(s) for s in cs.pretrain_seeds))
    seen = [f"preset {cs.preset or '?'}, pretraining seeds {','.join(map(str, seeds)) or 'none'}"]
    ok = (not rule.preset or cs.preset == rule.preset) and (not blocks or seeds in blocks)
    if rule.tasks and set(f.tasks) != set(rule.tasks):
        ok = False
        seen.append(f"tasks {', '.join(sorted(f.tasks)) or 'none'}")
    runs = f.all_runs
    if runs is not None and len(runs):
        failed = runs[runs["status"] != "completed"]
        if len(failed):
            ok = False
            seen.append(f"{len(failed)} run(s) not completed, e.g. {failed['variant'].iloc[0]} seed "
                        f"{int(failed['pretrain_seed'].iloc[0])} ({failed['status'].iloc[0]})")
        grid = {(v, int(s)) for v in runs["variant"].unique() for s in seeds}
        done = {(v, int(s)) for v, s in zip(f.runs["variant"], f.runs["pretrain_seed"])} if f.runs is not None else set()
        missing = sorted(grid - done)
        if missing:
            ok = False
            seen.append(f"{len(missing)} (variant, seed) without a completed run, e.g. {missing[0][0]} seed "
                        f"{missing[0][1]}")
    return Verdict(text, PASS if ok else FAIL, "; ".join(seen))


def clause_wall(rule: Rule, c: dict, f: Facts) -> Verdict:
    limits = ", ".join(f"{k} {v:g}" for k, v in rule.wall_minutes.items())
    text = f"wall time at most the limit for this CPU kind (minutes: {limits or 'none stated'})"
    if f.wall_minutes is None or f.cpu_kind is None:
        return Verdict(text, UNMEASURED, "the sweep's wall time or CPU kind is not recorded (a GPU run, or judged "
                                         "from an export alone)")
    if f.cpu_kind not in rule.wall_minutes:
        return Verdict(text, UNMEASURED, f"{f.wall_minutes:.1f} min on a {f.cpu_kind} CPU: the rule sets no limit there")
    limit = rule.wall_minutes[f.cpu_kind]
    return Verdict(text, PASS if f.wall_minutes <= limit else FAIL,
                   f"{f.wall_minutes:.1f} min on a {f.cpu_kind} CPU (limit {limit:g})")


def clause_every_run(rule: Rule, c: dict, f: Facts) -> Verdict:
    """Every measure run that trains ``objective`` has ``column`` >= ``at_least`` (e.g. mlm, mlm_acc, 0.15)."""
    obj, col, floor = c["objective"], c["column"], float(c["at_least"])
    text = f"every measure run with a {obj} loss has {col} >= {floor:g}"
    runs = f.runs
    weight = f"{obj}_weight"
    if runs is None or col not in runs.columns or weight not in runs.columns:
        return Verdict(text, UNMEASURED, f"the export has no {col} or {weight} column")
    trained = runs[runs[weight] > 0][["variant", "pretrain_seed", col]]
    vals = trained.dropna()
    if vals.empty:
        return Verdict(text, UNMEASURED, f"no measure run recorded {col}")
    low = vals.sort_values(col).iloc[0]
    short = vals[vals[col] < floor]
    unread = len(trained) - len(vals)  # a run that did not record the value has not shown it
    seen = (f"lowest {low[col]:.3f} ({low['variant']} seed {int(low['pretrain_seed'])}) over {len(vals)} runs"
            + (f"; {len(short)} below" if len(short) else "") + (f"; {unread} without {col}" if unread else ""))
    return Verdict(text, PASS if short.empty and not unread else FAIL, seen)


def clause_one_label(rule: Rule, c: dict, f: Facts) -> Verdict:
    """At most ``at_most`` fine-tunings predict one label (decided on dev). With ``where_every_variant_learns_by``
    (a margin), only on the tasks whose every variant's mean dev score, over pretraining seeds, lies at least that
    far above the task's chance baseline: where some variant learns a task barely or not at all, a one-label
    fine-tuning is what not learning looks like, not a failure of the protocol (the report's intention-to-treat
    estimate counts it). The others' one-label runs are named, not judged."""
    most = int(c.get("at_most", 0))
    margin = c.get("where_every_variant_learns_by")
    counts = dict(getattr(f.contributions, "one_label_counts", {}) or {})
    if margin is None:
        n = int(f.contributions.did_not_learn)
        return Verdict(f"at most {most} fine-tunings predict one label", PASS if n <= most else FAIL,
                       f"{n} predicted one label")
    margin = float(margin)
    text = f"at most {most} fine-tunings predict one label on the tasks every variant learns on dev by >= {margin:g}"
    floors = dict(getattr(f.contributions, "dev_floor", {}) or {})
    if rule.tasks:
        floors = {t: v for t, v in floors.items() if t in rule.tasks}
    if not floors:
        return Verdict(text, UNMEASURED, "no fine-tuned task with every variant's dev scores in the export")
    held = sorted(t for t, v in floors.items() if v >= margin)
    if not held:  # nothing held to the clause: it has not been shown, whatever the counts
        return Verdict(text, UNMEASURED, "no task that every variant learns on dev by the margin: " + ", ".join(
            f"{t} (worst variant {v:+.3f} over chance, {counts.get(t, 0)} one-label)" for t, v in sorted(floors.items())))
    n = sum(counts.get(t, 0) for t in held)
    rest = {t: counts.get(t, 0) for t in sorted(floors) if t not in held}
    seen = (f"{n} predicted one label on {', '.join(held) or 'no task'}"
            + ("; not held (some variant within the margin): " + ", ".join(
                f"{t} (worst variant {floors[t]:+.3f} over chance, {k} one-label)" for t, k in rest.items())
               if rest else ""))
    return Verdict(text, PASS if n <= most else FAIL, seen)


def clause_called(rule: Rule, c: dict, f: Facts) -> Verdict:
    """``contrast`` called with ``sign`` (positive | negative) after Holm on at least ``tasks_at_least``
    distinct tasks of the rule's task set (averages are not tasks); ``reading`` (optional) restricts the rows
    to one reading, e.g. "probe" or "finetune"."""
    contrast, need = c["contrast"], int(c["tasks_at_least"])
    sign = {"positive": 1, "negative": -1}[c.get("sign", "positive")]
    reading = c.get("reading")
    text = (f"{contrast} called {c.get('sign', 'positive')} after Holm on >= {need} distinct tasks"
            + (f" ({reading} rows)" if reading else "") + (f" of {', '.join(rule.tasks)}" if rule.tasks else ""))
    # the encoder's readings only: a baseline reading's rows (the embeddings probe) are a family of their own, and a
    # non-neural baseline (finetune.text_baselines) is no reading at all: its cells (over_baselines) are not contrasts
    rows = [e for e in _contrast_rows(f.contributions, contrast) if not e.task.startswith("average")
            and e.holm_family in ("primary", "secondary")
            and (not rule.tasks or _task_of(e.task) in rule.tasks) and (reading is None or _reading(e.task) == reading)]
    if not rows:
        return Verdict(text, UNMEASURED, f"no {contrast} row in the export")
    hits = sorted({_task_of(e.task) for e in rows if _called(e, sign)})
    return Verdict(text, PASS if len(hits) >= need else FAIL,
                   f"{len(hits)} task{'' if len(hits) == 1 else 's'}" + (f": {', '.join(hits)}" if hits else ""))


def clause_beyond_embeddings(rule: Rule, c: dict, f: Facts) -> Verdict:
    """``contrast`` called positive after Holm on at least ``tasks_at_least`` tasks of the rule's task set on which
    its first variant's probe is also above that variant's own embeddings probe (the report's "what the layers add
    over the embeddings", Holm within those cells): an effect there is more than word identity and frequency."""
    contrast, need = c["contrast"], int(c.get("tasks_at_least", 1))
    variant = contrast.split(" - ")[0].strip()
    text = (f"{contrast} called positive on >= {need} task{'' if need == 1 else 's'} where {variant}'s probe is also "
            f"above its own embeddings probe")
    rows = [e for e in _contrast_rows(f.contributions, contrast) if not e.task.startswith("average")
            and e.holm_family in ("primary", "secondary") and (not rule.tasks or _task_of(e.task) in rule.tasks)]
    layers = [e for e in f.contributions.context if e.contrast.name == f"{variant} - its embeddings"]
    if not rows or not layers:
        return Verdict(text, UNMEASURED, f"no {contrast} row" if not rows else
                       f"no embeddings probe of {variant} in the export (finetune.embedding_probe=true)")
    called = {_task_of(e.task) for e in rows if _called(e, 1)}
    above = {_task_of(e.task) for e in layers if _called(e, 1)}
    hits = sorted(called & above)
    return Verdict(text, PASS if len(hits) >= need else FAIL,
                   f"{len(hits)} task{'' if len(hits) == 1 else 's'}" + (f": {', '.join(hits)}" if hits else "")
                   + f" (called: {', '.join(sorted(called)) or 'none'}; layers above embeddings: "
                     f"{', '.join(sorted(above)) or 'none'})")


def _reading(row: str) -> str:
    """'pos (probe, 1000 labels)' -> 'probe'; 'pos' -> 'finetune'."""
    if " (" not in row:
        return "finetune"
    inner = row.split(" (", 1)[1].rstrip(")")
    return "finetune" if inner == "finetune" else inner.split(",")[0]


def clause_estimate(rule: Rule, c: dict, f: Facts) -> Verdict:
    """``contrast`` on ``row``: estimate >= ``at_least`` (optional) and interval's lower end > ``lower_above``
    (optional)."""
    contrast, row = c["contrast"], c["row"]
    least, above = c.get("at_least"), c.get("lower_above")
    bits = ([f"estimate >= {least:+g}"] if least is not None else []) + (
        [f"lower bound > {above:+g}"] if above is not None else [])
    text = f"{contrast} on {row}: {' and '.join(bits) or 'estimated'}"
    es = [e for e in _contrast_rows(f.contributions, contrast) if e.task == row]
    if not es or not np.isfinite(es[0].interval.estimate):
        return Verdict(text, UNMEASURED, f"no {contrast} estimate on {row}")
    iv = es[0].interval
    ok = (least is None or iv.estimate >= least) and (above is None or iv.lo > above)
    return Verdict(text, PASS if ok else FAIL, _fmt(es[0]))


# kind -> (required keys, optional keys, judge)
CLAUSES: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[[Rule, dict, Facts], Verdict]]] = {
    "check": ((), (), clause_check),
    "design": ((), (), clause_design),
    "wall_time": ((), (), clause_wall),
    "every_run": (("objective", "column", "at_least"), (), clause_every_run),
    "one_label": ((), ("at_most", "where_every_variant_learns_by"), clause_one_label),
    "called": (("contrast", "tasks_at_least"), ("sign", "reading"), clause_called),
    "estimate": (("contrast", "row"), ("at_least", "lower_above"), clause_estimate),
    "beyond_embeddings": (("contrast",), ("tasks_at_least",), clause_beyond_embeddings),
}


@dataclass(frozen=True)
class Judgement:
    rule: str
    provenance: Provenance
    verdicts: tuple[Verdict, ...]
    start: dict | None = None  # the rule as the run found it at its start (start_record)

    @property
    def not_evidence(self) -> str:
        """Why the verdict is not evidence ('' when it is): the rule must be the committed file now, and have been
        that same committed file when the run started."""
        p, s = self.provenance, self.start
        if not p.committed:
            return f"rule {p.path} (blob {p.blob[:12]}) is NOT the committed file"
        if s is None:
            return f"no record of rule {p.path} at the run's start ({RUN_RECORD})"
        if s.get("blob") != p.blob:
            return f"rule {p.path} changed after the run started (blob {str(s.get('blob'))[:12]} then, {p.blob[:12]} now)"
        if not s.get("committed"):
            return f"rule {p.path} was not the committed file when the run started ({s.get('started')})"
        return ""

    @property
    def passed(self) -> bool:
        return not self.not_evidence and all(v.status == PASS for v in self.verdicts)

    def lines(self) -> list[str]:
        n_pass = sum(v.status == PASS for v in self.verdicts)
        why = self.not_evidence
        where = (f"{why}: a rule must be committed before the run it judges, so this verdict is not evidence" if why
                 else f"{self.provenance.line()}, as at the run's start ({self.start.get('started')})")
        head = f"Rule {self.rule}: {'PASS' if self.passed else 'FAIL'} ({n_pass} of {len(self.verdicts)} clauses pass); {where}"
        return [head] + [f"  {v.status:<12} {v.clause}: {v.observed}" for v in self.verdicts]

    def to_json(self) -> str:
        return json.dumps({"rule": self.rule, "passed": self.passed, "not_evidence": self.not_evidence,
                           "provenance": asdict(self.provenance), "start": self.start,
                           "verdicts": [asdict(v) for v in self.verdicts]}, indent=2)


def judge(rule: Rule, facts: Facts, start: dict | None = None) -> Judgement:
    return Judgement(rule.name, provenance(rule.path),
                     tuple(CLAUSES[c["kind"]][2](rule, c, facts) for c in rule.clauses), start)


RUN_RECORD = "rule_run.json"  # in the sweep's folder, beside export/: the rule at the start, the wall time at the end


def mlm_floor(rule_path: str | Path | None) -> float | None:
    """The held-out MLM accuracy a rule's ``every_run`` clause on ``mlm_acc`` requires (the summary's Sanity line
    reads it), or None: no rule, none readable, or no such clause."""
    if not rule_path:
        return None
    try:
        rule = load_rule(rule_path)
    except (RuleError, OSError):
        return None
    floors = [float(c["at_least"]) for c in rule.clauses if c["kind"] == "every_run" and c.get("column") == "mlm_acc"]
    return max(floors) if floors else None


def run_rule(root: str | Path) -> str | None:
    """The rule a sweep in ``root`` was started with (its RUN_RECORD), or None."""
    path = Path(root) / RUN_RECORD
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return record.get("rule_file") or record.get("rule")


def start_record(rule_path: str | Path) -> dict:
    """What the verdict needs to know about the rule when the run starts: its blob, whether it was the committed
    file and when that commit was made, and the time."""
    p = provenance(rule_path)
    return {"rule": p.path, "rule_file": str(Path(rule_path).resolve()), "blob": p.blob, "committed": p.committed,
            "last_commit": p.last_commit,
            "last_commit_time": p.last_commit_time,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "resumed": False}


def inside_repo(rule_path: str | Path, cwd: str | Path = ".") -> None:
    """A rule is judged from the project it belongs to: a file in another git repository (one made for the
    occasion, say) is refused."""
    def top(where: Path) -> str:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        return str(Path(out.stdout.strip()).resolve()) if out.returncode == 0 else ""

    here, there = top(Path(cwd)), top(Path(rule_path).resolve().parent)
    _require(bool(there) and (not here or here == there),
             f"rule {rule_path}: not inside this project's git repository ({here or 'none'}); a rule is a file "
             "committed in the project that runs it (docs/rules/)")


def measure_runs(export) -> Any:
    runs = export.runs
    return runs[(runs["phase"] == "measure") & (runs["status"] == "completed")]


def cpu_kind() -> str:
    """This machine's CPU kind as rules name it: native_bf16 when it has amx_bf16 or avx512_bf16, else fp32."""
    from trainables.runtime import cpu_bf16_flag

    return "native_bf16" if cpu_bf16_flag() else "fp32"


def judge_export(rule_path: str | Path, export_dir: str | Path, wall_minutes: float | None = None,
                 kind: str | None = None, check: dict | None = None, n_boot: int = 1000,
                 start: dict | None = None) -> Judgement:
    """Load the rule and the export, estimate as the report does (its estimates, its seed), and judge every clause."""
    from analysis.contributions import estimate_contributions
    from analysis.export import load_export

    rule = load_rule(rule_path)
    export = load_export(export_dir)
    contributions = estimate_contributions(export, np.random.default_rng(0), n_boot, 0.95)  # build_report's draw
    runs = export.runs[export.runs["phase"] == "measure"]
    ev = export.evals[export.evals["run_id"].isin(runs["run_id"])]
    tasks = tuple(sorted(set(ev["source_task"].where(ev["source_task"].astype(bool), ev["task"]))))
    facts = Facts(contributions, measure_runs(export), all_runs=runs, tasks=tasks, check=check,
                  wall_minutes=wall_minutes, cpu_kind=kind)
    return judge(rule, facts, start)


def write_judgement(j: Judgement, *dirs: str | Path) -> None:
    for d in dirs:
        if d:
            (Path(d) / "rule.json").write_text(j.to_json() + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rule", help="the rule file (docs/rules/NAME.toml)")
    ap.add_argument("export", help="the sweep's export folder (runs/NAME/export)")
    ap.add_argument("--wall-minutes", type=float, help="the sweep's wall time, for a wall_time clause (default: the "
                                                        f"one the sweep recorded in {RUN_RECORD} beside the export)")
    ap.add_argument("--cpu-kind", choices=CPU_KINDS, help="the CPU kind it ran on (default: the recorded one; else "
                                                           "this machine's, when --wall-minutes is given)")
    ap.add_argument("--json", action="store_true", help="print the judgement as JSON")
    args = ap.parse_args(argv)
    root = Path(args.export).parent
    check_file = root / "instrument_check" / "report" / "known_answer.json"  # the main job's --check
    check = json.loads(check_file.read_text()) if check_file.exists() else None
    record_file = root / RUN_RECORD
    record = json.loads(record_file.read_text()) if record_file.exists() else None
    minutes = args.wall_minutes if args.wall_minutes is not None else (record or {}).get("wall_minutes")
    kind = args.cpu_kind or (record or {}).get("cpu_kind") or (cpu_kind() if args.wall_minutes is not None else None)
    try:
        inside_repo(args.rule)
        j = judge_export(args.rule, args.export, minutes, kind, check, start=record)
    except RuleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(j.to_json() if args.json else "\n".join(j.lines()))
    return 0 if j.passed else 1


if __name__ == "__main__":
    sys.exit(main())
