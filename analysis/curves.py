"""Every contrast as a curve over pretraining tokens: its estimate and interval at each snapshot the runs kept
(``run.snapshots``) and at the runs' end.

    points = curve_points(export_with_snapshots, final_contributions, rng)
    rows = curve_rows(points)           # per (contrast, task row): the points, and "first detected at N tokens"

Each snapshot is estimated as its own export (``analysis.export.snapshot_exports``): that step's snapshots as the
measure runs beside ``none``, read by the probe; the same multi-bootstrap, families and Holm as at the end.

**The rule across points.** A curve is read at K points (the snapshots and the end), so a cell that is null at
every point would be called somewhere with a chance of up to K x 5% if each point were judged alone. A cell is
*resolved at a point* when its interval excludes 0 and its Holm-adjusted p within its family at that point is
below 0.05 / K: Bonferroni over the points on top of Holm within each, so the chance of any false call along
all the curves of a family stays at most 5% (``python -m analysis.validate --curves`` checks it by simulation).
"First detected at N tokens" is the first point where that holds: detection, not onset (an effect too small for
the seeds to call was there before), and when it is the first point measured the onset is left-censored and the
line says so. Intervals are each point's own 95% ones. K
is the curve's number of points for every row, also for a row read at fewer of them (fine-tuned rows are read at
the end only unless ``--snapshot-reads all`` fine-tunes every snapshot): rows read once and rows read at every
point are one family, so a row judged at 0.05 beside rows judged at 0.05 / K would let the family's error exceed
5%. The curve's end column is therefore stricter than the main table, which answers the question at the end alone
at 0.05: the two are different questions (is there an effect at the end; where along the run is one detected), each
with its own family-wise error of at most 5%.

**What a snapshot stands for.** A snapshot is the run's state part-way through its schedule, its learning rate
not yet decayed: not a run that ends at that budget. At cpu-small's budgets a linear run's snapshot reads level
with a WSD run's decay branch there and above a linear run that ends there (``python -m trainables.schedules``;
docs/statistics.md); the end, annealed, is a different kind of point than the snapshots before it. The curve is
the shape of one run's learning, read at its own points.

**Trend.** Between the last two *like* points a curve is *rising* or *falling* when the estimate moved by more
than half the last interval's half-width, else *flat*. Like points: both mid-schedule snapshots, or both annealed
(the end, and under ``optim.schedule=wsd`` every snapshot, a decay branch). Under BERT's linear schedule the end
is annealed and the snapshots are not, so the trend is read between the last two snapshots and says so: the
annealing step (the jump in held-out MLM accuracy over cpu-long's last half: docs/statistics.md) is not learning a
trend can extend.

**Extrapolation: where tokens, not seeds, limit a row.** A row not resolved at the end, whose end estimate is
smaller than the effect the end's design detects (its MDE: power 80% after Holm, ``analysis.inference``), is
extended along a line in log tokens through its last two points to where it would reach that effect, only when
those two points are alike and the second is the end: under WSD. Under a linear schedule no line is drawn (it
would cross the annealing step). Its range comes from drawing both points from their intervals independently:
the two points are the same runs read twice, so their errors are positively correlated and independent draws
overstate the slope's noise (the range is wide, not narrow). It is an extrapolation, labelled so: learning
curves bend, and the last two points say nothing about where. ``extrapolate`` computes it; the report prints it
under the curves with the steps that budget means at the run's batch (``--plan`` prices them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.contributions import ContrastEstimate, Contributions, estimate_contributions
from analysis.export import Export, snapshot_exports
from analysis.inference import ALPHA, called


@dataclass(frozen=True)
class CurvePoint:
    step: int  # optimizer steps of the pretrained runs at this point (the end: their mean)
    tokens: float  # mean real tokens the pretrained runs had trained on
    contributions: Contributions
    final: bool = False
    # the runs' rate had decayed here: the end always; a snapshot only under WSD, where it is a decay branch. Trends
    # and extrapolations join like points only: the annealing step between a snapshot and the end is not learning
    annealed: bool | None = None

    @property
    def is_annealed(self) -> bool:
        return self.final if self.annealed is None else self.annealed


@dataclass(frozen=True)
class CurveRow:
    contrast: str
    task: str
    family: str  # primary | secondary
    points: tuple[tuple[float, ContrastEstimate, bool], ...]  # (tokens, estimate, resolved under the curve rule)
    end_step: int = 0  # optimizer steps of the pretrained runs at the end
    unread: int = 0  # points of the curve this row has no reading at (fine-tuning reads only the end by default)
    annealed: tuple[bool, ...] = ()  # per point: the runs' rate had decayed there (CurvePoint.is_annealed)
    first_measured: float | None = None  # the tokens of the curve's first point, read or not

    @property
    def first_resolved(self) -> float | None:
        return next((t for t, _, ok in self.points if ok), None)

    def like_pair(self) -> tuple[int, int] | None:
        """The indices of the last two points of one kind (both annealed, or both mid-schedule): the pair a trend or an
        extrapolation may join. Under BERT's linear schedule the end is annealed and the snapshots are not, so
        the pair is the last two snapshots; under WSD every point is annealed and the pair is the last two."""
        kinds = self._kinds()
        for kind in (kinds[-1], not kinds[-1]):
            same = [i for i, k in enumerate(kinds) if k == kind]
            if len(same) >= 2:
                return same[-2], same[-1]
        return None

    def _kinds(self) -> tuple[bool, ...]:
        return self.annealed or tuple(False for _ in self.points)

    def trend(self) -> str:
        pair = self.like_pair()
        if pair is None:
            return ""
        (_, a, _), (_, b, _) = self.points[pair[0]], self.points[pair[1]]
        half = (b.interval.hi - b.interval.lo) / 2
        move = b.interval.estimate - a.interval.estimate
        if not (math.isfinite(move) and math.isfinite(half)):
            return ""
        return "flat" if abs(move) <= half / 2 else ("rising" if move > 0 else "falling")

    def line(self) -> str:
        """'first detected at 3.7 M tokens' or 'not resolved by 30 M tokens; rising over the last two mid-schedule
        points'."""
        first = self.first_resolved
        if self.unread and len(self.points) == 1:  # "first detected at" would claim the snapshots were read too
            return (f"{'resolved' if first is not None else 'not resolved'} at the end, {tokens_text(self.points[-1][0])} "
                    "tokens (read at the end only; --snapshot-reads all reads every snapshot)")
        if first is not None:
            # detection, not onset: the effect may have been there earlier and too small for these seeds to call
            early = (" (the first point measured: it may have been there earlier)"
                     if self.first_measured is not None and first <= self.first_measured else "")
            return f"first detected at {tokens_text(first)} tokens{early}"
        trend = self.trend()
        kind = ("annealed " if self._kinds()[self.like_pair()[1]] else "mid-schedule ") if trend else ""
        return f"not resolved by {tokens_text(self.points[-1][0])} tokens" + (
            f"; {trend} over the last two {kind}points" if trend else "")


@dataclass(frozen=True)
class Extrapolation:
    """Where a row's trend would reach the effect the end's design detects: an extrapolation, not a measurement
    (module docstring). ``hi`` is inf when in more than a tenth of the draws the trend never gets there."""

    target: float  # the end's MDE, signed as the end's estimate
    tokens: float  # median over the draws (inf: the trend does not get there)
    lo: float  # 10th percentile
    hi: float  # 90th percentile
    end_tokens: float
    end_step: int

    @property
    def ratio(self) -> float:
        return self.tokens / self.end_tokens

    def short(self) -> str:
        """The terminal's few words: 'extrapolated to reach +0.043: ~95 M tokens (80%: 50 M to beyond reach)'."""
        if not math.isfinite(self.tokens):
            return f"its trend does not reach the detectable {self.target:+.3f}"
        upper = tokens_text(self.hi) if math.isfinite(self.hi) else "beyond reach"
        return (f"extrapolated to reach the detectable {self.target:+.3f}: ~{tokens_text(self.tokens)} tokens "
                f"(80%: {tokens_text(self.lo)} to {upper})")

    def text(self) -> str:
        if not math.isfinite(self.tokens):
            return (f"extrapolated: the trend of its last two points does not reach the detectable {self.target:+.3f} "
                    "(flat or turning within its noise)")
        upper = tokens_text(self.hi) if math.isfinite(self.hi) else "beyond reach"
        steps = int(math.ceil(self.end_step * self.ratio / 100.0) * 100) if self.end_step else 0
        return (f"extrapolated (a line in log tokens through the last two points, not measured): the detectable "
                f"{self.target:+.3f} at ~{tokens_text(self.tokens)} tokens (80%: {tokens_text(self.lo)} to {upper}), "
                f"{self.ratio:.1f}x this run's" + (f"; --set optim.max_steps={steps} --plan prices it" if steps else ""))


EXTRAPOLATION_DRAWS = 4000


def extrapolate(row: CurveRow, draws: int = EXTRAPOLATION_DRAWS, seed: int = 0) -> Extrapolation | None:
    """The tokens at which ``row``'s trend reaches the effect its end detects, when tokens, not seeds, limit it:
    the row is not resolved at the end and its end estimate is below that effect. None otherwise, or when the
    row has fewer than two points or no power figure."""
    if len(row.points) < 2 or row.points[-1][2]:
        return None
    pair = row.like_pair()
    if pair is None or pair[1] != len(row.points) - 1:  # never across the annealing step: the end's pair is unlike
        return None
    (t0, a, _), (t1, b, _) = row.points[pair[0]], row.points[pair[1]]
    power = b.power
    ea, eb = a.interval.estimate, b.interval.estimate
    if power is None or not (np.isfinite(power.mde) and np.isfinite(ea) and np.isfinite(eb)) or eb == 0 or t1 <= t0:
        return None
    sign = 1.0 if eb > 0 else -1.0
    target = sign * power.mde
    if abs(eb) >= power.mde:  # the effect is already as large as the design detects: seeds or noise limit it
        return None
    rng = np.random.default_rng(seed)
    da = rng.normal(ea, max(a.interval.se, 0.0), draws)
    db = rng.normal(eb, max(b.interval.se, 0.0), draws)
    slope = sign * (db - da) / math.log(t1 / t0)  # per unit of log tokens, towards the target
    gap = sign * (target - db)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        tokens = np.where(gap <= 0, t1, np.where(slope > 0, t1 * np.exp(gap / slope), np.inf))
    lo, mid, hi = np.quantile(tokens, [0.1, 0.5, 0.9], method="inverted_cdf")
    return Extrapolation(float(target), float(mid), float(lo), float(hi), float(t1), row.end_step)


@dataclass(frozen=True)
class BacktestPoint:
    """One later point of a row predicted from its first two like points, the way ``extrapolate`` draws."""

    contrast: str
    task: str
    tokens: float
    predicted: float  # median of the draws
    lo: float  # 10th percentile
    hi: float  # 90th percentile
    measured: float

    @property
    def covered(self) -> bool:
        return self.lo <= self.measured <= self.hi


def backtest(rows: list[CurveRow], draws: int = EXTRAPOLATION_DRAWS, seed: int = 0) -> list[BacktestPoint]:
    """The extrapolation's assumption tested where the answer is known: for each row with at least three like points
    (mid-schedule snapshots among themselves, or annealed ones), a line in log tokens through the first two, its
    two points drawn from their intervals as ``extrapolate`` draws them, predicts each later like point; the
    measured estimate there either falls in the 80% range or not. The range carries the two points' noise only,
    not the later point's own, so a coverage well below 80% says the line or the range is wrong."""
    out = []
    for r in rows:
        kinds = r._kinds()
        for kind in dict.fromkeys(kinds):
            like = [i for i, k in enumerate(kinds) if k == kind]
            if len(like) < 3:
                continue
            (t0, a, _), (t1, b, _) = r.points[like[0]], r.points[like[1]]
            ea, eb = a.interval.estimate, b.interval.estimate
            if not (np.isfinite(ea) and np.isfinite(eb)) or t1 <= t0:
                continue
            rng = np.random.default_rng(seed)
            da = rng.normal(ea, max(a.interval.se, 0.0) if np.isfinite(a.interval.se) else 0.0, draws)
            db = rng.normal(eb, max(b.interval.se, 0.0) if np.isfinite(b.interval.se) else 0.0, draws)
            slope = (db - da) / math.log(t1 / t0)
            for i in like[2:]:
                t, e, _ = r.points[i]
                if not np.isfinite(e.interval.estimate):
                    continue
                lo, mid, hi = np.quantile(db + slope * math.log(t / t1), [0.1, 0.5, 0.9])
                out.append(BacktestPoint(r.contrast, r.task, float(t), float(mid), float(lo), float(hi),
                                         float(e.interval.estimate)))
    return out


def backtest_lines(points: list[BacktestPoint]) -> list[str]:
    if not points:
        return []
    n_in = sum(p.covered for p in points)
    err = float(np.median([abs(p.measured - p.predicted) for p in points]))
    missed = [p for p in points if not p.covered]
    out = [f"Backtest of the extrapolation: from each row's first two like points, a line in log tokens predicted "
           f"its later like points; {n_in} of {len(points)} measured estimates fell inside the predicted 80% range "
           f"(median |error| {err:.3f}). The range carries only the two points' noise."]
    if missed:
        out[-1] += " Outside it: " + "; ".join(
            f"{p.contrast} on {p.task} at {tokens_text(p.tokens)} (predicted {p.predicted:+.3f} "
            f"[{p.lo:+.3f}, {p.hi:+.3f}], measured {p.measured:+.3f})" for p in missed[:6]) + (
            f"; and {len(missed) - 6} more" if len(missed) > 6 else "") + "."
    return out + [""]


def tokens_text(t: float) -> str:
    if t >= 1e9:
        return f"{t / 1e9:.2g} B"
    return f"{t / 1e6:.2g} M" if t >= 1e5 else f"{t / 1e3:.2g} k"


def _tokens(export: Export) -> tuple[int, float]:
    runs = export.runs
    trained = runs[(runs["phase"] == "measure") & (runs["variant"] != "none") & (runs["status"] == "completed")]
    return int(trained["steps"].mean()), float(trained["tokens_seen"].mean())


def _schedule(export: Export) -> str:
    """The measure runs' optim.schedule (linear when the export does not record it)."""
    import json

    runs = export.runs
    done = runs[(runs["phase"] == "measure") & (runs["status"] == "completed")]
    for text in done.get("config_json", []):
        try:
            return str(json.loads(text).get("optim", {}).get("schedule", "linear"))
        except (TypeError, ValueError):
            continue
    return "linear"


def curve_points(export: Export, final: Contributions, final_export: Export, rng: np.random.Generator,
                 n_boot: int = 1000, level: float = 0.95) -> list[CurvePoint]:
    """The snapshots' points (each estimated as its own export) and the end's (``final``), by tokens; [] when the
    runs kept no snapshot."""
    snaps = snapshot_exports(export)
    if not snaps:
        return []
    points = []
    wsd = _schedule(final_export) == "wsd"  # a WSD run's snapshots are decay branches: annealed like its end
    for step, ex in snaps:
        _, tokens = _tokens(ex)
        points.append(CurvePoint(step, tokens, estimate_contributions(ex, rng, n_boot, level), annealed=wsd))
    step, tokens = _tokens(final_export)
    points.append(CurvePoint(step, tokens, final, final=True))
    return sorted(points, key=lambda p: p.tokens)


def curve_rows(points: list[CurvePoint], family: str | None = "primary") -> list[CurveRow]:
    """Per (contrast, task row) of ``family`` (None: all) that every point estimated: its points, each judged by
    the rule across points (module docstring)."""
    if not points:
        return []
    k = len(points)
    by_key: dict[tuple[str, str], list] = {}
    for p in points:
        for e in p.contributions.contrasts:
            if family is None or e.holm_family == family:
                by_key.setdefault((e.contrast.name, e.task), []).append((p.tokens, e))
    rows = []
    for (name, task), pts in by_key.items():
        if len(pts) != k:
            continue
        # A point where the row has no reading (a fine-tuned row at a snapshot nobody fine-tuned) is left out, but
        # the rule still divides by the curve's K points: rows read at one point and rows read at every point are
        # one family, and dividing each by its own count of points bounds the family's error only by about 9%
        # (the union bound at cpu-long's shape; analysis.validate --curve-rows simulates it)
        read = [(t, e) for t, e in pts if np.isfinite(e.interval.estimate)]
        judged = tuple((t, e, bool(np.isfinite(e.p_adjusted)) and called(e.interval, e.p_adjusted * k, ALPHA))
                       for t, e in read)
        if judged:
            kind = {p.tokens: p.is_annealed for p in points}
            rows.append(CurveRow(name, task, pts[-1][1].holm_family, judged, points[-1].step, unread=k - len(read),
                                 annealed=tuple(kind[t] for t, _, _ in judged), first_measured=points[0].tokens))
    return rows


def curve_frame(points) -> "pd.DataFrame":
    """Every curve as rows (contrast, task, family, tokens, estimate, lo, hi, resolved): what the report's curve
    section and contributions_curves.csv show, for a notebook. Empty when the runs kept no snapshot."""
    import pandas as pd

    cols = ["contrast", "task", "family", "tokens", "estimate", "lo", "hi", "resolved"]
    return pd.DataFrame([(r.contrast, r.task, r.family, t, e.interval.estimate, e.interval.lo, e.interval.hi, ok)
                         for r in curve_rows(list(points), None) for t, e, ok in r.points], columns=cols)


def curve_section(points: list[CurvePoint]) -> list[str]:
    """The report's Markdown section: one table per family, points as columns, a line per row."""
    rows = curve_rows(points, None)
    if not rows:
        return []
    k = len(points)
    head = [f"{tokens_text(p.tokens)}{' (end)' if p.final else ''}" for p in points]
    out = ["## Effects over pretraining tokens", "",
           f"Each contrast at the {k - 1} snapshot{'' if k == 2 else 's'} the runs kept (`run.snapshots`, read by the probe) and at their "
           f"end, by the mean tokens the pretrained runs had seen. `*`: resolved under the rule across points (Holm "
           f"within the family at each point, at 0.05/{k} for every row, also one read at fewer points; so the end column "
           "can be stricter than the main table, which asks about the end alone: analysis/curves.py); a snapshot is the run part-way "
           "through its schedule, not a run that ends there. Plot: contributions_curves.png.", ""]
    titles = {"primary": "The primary question", "secondary": "The other contrasts",
              "baseline": "The embeddings probe (a baseline reading)"}
    for family in titles:
        fam = [r for r in rows if r.family == family]
        if not fam:
            continue
        out += [f"### {titles[family]}", "",
                "| contrast | task | " + " | ".join(head) + " | reading |", "|" + "---|" * (k + 3)]
        for r in fam:
            at = {t: (e, ok) for t, e, ok in r.points}
            cells = []
            for p in points:
                e, ok = at.get(p.tokens, (None, False))
                cells.append("not read" if e is None else
                             f"{e.interval.estimate:+.3f} [{e.interval.lo:+.3f}, {e.interval.hi:+.3f}]{'*' if ok else ''}")
            out.append(f"| {r.contrast} | {r.task} | " + " | ".join(cells) + f" | {r.line()} |")
        out.append("")
        far = [(r, x) for r in fam for x in [extrapolate(r)] if x is not None]
        if far:
            out += ["Where tokens, not seeds, limit a row (its end estimate below what the design detects):", ""]
            out += [f"- {r.contrast} on {r.task}: {x.text()}" for r, x in far] + [""]
        if family == "primary":
            out += backtest_lines(backtest(fam))
    return out
