"""The contributions report: headline, Markdown tables, CSV, PNG plots, and the main job's terminal table.

    python -m analysis.report EXPORT_DIR [--out DIR] [--boot 1000] [--level 0.95] [--seed 0]

writes contributions.md, contributions.csv, contributions.png (per-task bars with interval whiskers),
contributions_forest.png (every contrast with its interval: a column per task, resolved cells marked) and,
when the export has search trials, search_response.png, into DIR (default: EXPORT_DIR/report). From code
(the sweep prints this):

    from analysis.report import build_report, format_table
    report = build_report(export_dir)          # -> Report (values only, prints nothing)
    text = format_table(report)                # the headline and one compact contrast x task table
    report.to_markdown(); write_report(report, out_dir)

The terminal gets the headline and one table (a row per contrast, a column per task row: estimate
[interval], '*' when resolved, '!' when flagged), lines at most ``TERMINAL_WIDTH`` wide; the scores
per variant, every table with p-values, MDEs and notes, and the messages stay in contributions.md.
The words positive / negative appear only for a contrast resolved after Holm's adjustment over the
family of every (contrast, task row) cell (``analysis.inference.called``, via
``analysis.headline.resolved``); everything else is inconclusive.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.bootstrap import MIN_RELIABLE_SEEDS, Interval
from analysis.choices import choices_section
from analysis.contributions import ContrastEstimate, Contributions, estimate_contributions
from analysis.contrasts import FAMILIES, primary_name
from analysis.export import load_export
from analysis.formats import input_format_section
from analysis.headline import count, effect_text, families, family_size, headline, resolved
from analysis.inference import EQUIVALENCE_MARGIN, SENSITIVITY_MARGINS, called, equivalent, tie_sensitivity
from analysis.plots import flagged, plot_forest, plot_search_response, plot_task_bars
from analysis.search import SearchSummary, summarize_search
from analysis.summary import WIDTH as SUMMARY_WIDTH, run_summary

log = logging.getLogger(__name__)
TERMINAL_WIDTH = 160  # the sweep's terminal output: no line longer (long sentences are wrapped)
FAMILY_TITLES = {"vs_none": "Every variant minus none", "seed": "The two named contributions (full minus one objective)",
                 "loss": "Loss effects (same inputs, one loss switched on)",
                 "format": "Input-format effects (same losses)", "swap": "One objective instead of another",
                 "factorial": "2x2 factorials with inputs held fixed (each objective's share, interaction)",
                 "best_mix": "The searched mix"}


def format_interval(iv: Interval, signed: bool = False, short: bool = False) -> str:
    """'0.800 [0.760, 0.840]', or the estimate alone with why there is no reliable interval."""
    f = "{:+.3f}" if signed else "{:.3f}"
    est = f.format(iv.estimate)
    if not np.isfinite(iv.lo):
        return est
    if not iv.reliable:
        return f"{est} (unreliable)" if short else (
            f"{est} (no reliable interval: {iv.n_seeds} seed{'s' * (iv.n_seeds != 1)})")
    return f"{est} [{f.format(iv.lo)}, {f.format(iv.hi)}]"


def verdict(iv: Interval, p_adjusted: float, p_equivalence: float = float("nan")) -> str:
    """Plain words for one difference: a finding only when ``analysis.inference.called`` (reliable,
    excluding 0, family-adjusted p < 0.05); never on the raw p. A tie only when shown by TOST within
    ``analysis.inference.EQUIVALENCE_MARGIN`` (family-adjusted)."""
    if not iv.reliable:
        return f"unreliable: {count(iv.n_seeds, 'pretraining seed')}, at least {MIN_RELIABLE_SEEDS} needed"
    if not np.isfinite(iv.lo):
        return "no interval"
    if called(iv, p_adjusted):
        return f"{'positive' if iv.estimate > 0 else 'negative'} (Holm p={p_adjusted:.2g})"
    if iv.excludes_zero:
        return f"inconclusive after Holm (p={iv.p_value:.2g}, Holm p={p_adjusted:.2g})"
    if equivalent(iv, p_equivalence):
        return f"a tie within +-{EQUIVALENCE_MARGIN:g} (TOST, Holm p={p_equivalence:.2g})"
    return "inconclusive: interval includes 0"


@dataclass(frozen=True)
class Report:
    export_dir: Path
    contributions: Contributions
    search: SearchSummary | None
    check: dict | None = None  # the instrument check's verdicts (known_answer.json) when it ran with the sweep
    curves: tuple = ()  # analysis.curves.CurvePoint per snapshot and the end, when the runs kept snapshots
    choices: tuple = ()  # analysis.choices.Choice per (variant, task): the rate and epoch fine-tuning chose on dev
    mlm_floor: float | None = None  # the held-out MLM accuracy the run's rule file requires (analysis.rules.mlm_floor)

    def to_frame(self) -> pd.DataFrame:
        """One row per (task, mean or contrast): the CSV."""
        c, rows = self.contributions, []
        for (task, v), iv in c.means.items():
            rows.append(dict(task=task, kind="mean", name=v, **_iv_fields(iv), p_holm=np.nan, family_m=np.nan,
                             mde=np.nan, seeds_needed=np.nan, seeds_needed_lo=np.nan, seeds_needed_hi=np.nan,
                             power="", verdict="",
                             notes="not learned at this budget" if task in c.not_learned else "", holm_family=""))
        for e in c.contrasts:
            p = e.power
            rows.append(dict(task=e.task, kind=e.contrast.family, name=e.contrast.name, **_iv_fields(e.interval),
                             p_holm=e.p_adjusted, family_m=p.m if p else np.nan, mde=p.mde if p else np.nan,
                             seeds_needed=p.seeds_needed if p and p.seeds_needed else np.nan,
                             seeds_needed_lo=p.seeds_range[0] if p and p.seeds_range[0] else np.nan,
                             seeds_needed_hi=p.seeds_range[1] if p and p.seeds_range[1] else np.nan,
                             power=p.verdict if p else "", verdict=verdict(e.interval, e.p_adjusted, e.p_equivalence),
                             notes="; ".join(e.contrast.notes + e.notes), holm_family=e.holm_family))
        return pd.DataFrame(rows)

    def to_markdown(self) -> str:
        return "\n".join(_markdown(self))


def _iv_fields(iv: Interval) -> dict:
    return dict(estimate=iv.estimate, lo=iv.lo, hi=iv.hi, p_value=iv.p_value, n_seeds=iv.n_seeds,
                reliable=iv.reliable)


def build_report(export_dir: str | Path, n_boot: int = 1000, level: float = 0.95, seed: int = 0,
                 check: dict | None = None, mlm_floor: float | None = None) -> Report:
    """Load an export and estimate everything the report shows (prints nothing). ``check``: the instrument
    check's verdicts, so that the headline says which quoted contrasts it vouches for."""
    from analysis.curves import curve_points
    from analysis.export import load_with_snapshots

    export = load_export(export_dir)
    rng = np.random.default_rng(seed)
    final = estimate_contributions(export, rng, n_boot, level)
    curves = curve_points(load_with_snapshots(export_dir), final, export, rng, n_boot, level)
    from analysis.choices import read_choices

    return Report(Path(export_dir), final, summarize_search(export.runs, seed), check, tuple(curves),
                  tuple(read_choices(export_dir)), mlm_floor)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows]


def _variant_table(c: Contributions) -> list[str]:
    rows = []
    for t in c.tasks:
        base = f"{c.baselines[t]:.3f}" if t in c.baselines else ""
        name = f"{t} (not learned at this budget)" if t in c.not_learned else t
        rows.append([name, c.metrics[t], base] + _text_baseline_cell(c, t)
                    + [format_interval(c.means[(t, v)]) + (" **[flagged]**" if flagged(c, t, v) else "")
                       for v in c.variants])
    return _md_table(["task", "metric", "chance", *(["non-neural baseline"] if c.text_baselines else []), *c.variants],
                     rows)


def _text_baseline_cell(c: Contributions, task: str) -> list[str]:
    """The "non-neural baseline" column's cell of a row (no column when the export has no such baseline): its mean
    score and what it is, on the main probe's rows, whose training labels it was fitted on."""
    if not c.text_baselines:
        return []
    name, value = c.text_baselines.get(task, ("", float("nan")))
    return [f"{value:.3f} ({name})" if name else ""]


def _over_baselines_section(c: Contributions) -> list[str]:
    if not c.over_baselines:
        return []
    rows = [[e.contrast.name.split(" - ", 1)[0], e.task, e.contrast.name.split(" - ", 1)[1],
             format_interval(e.interval, signed=True), f"{e.p_adjusted:.2g}",
             verdict(e.interval, e.p_adjusted) if np.isfinite(e.p_adjusted)
             else "no information: the two readings agree on every resample"] for e in c.over_baselines]
    return ["## What the probe adds over a non-neural baseline", "",
            "Per variant and probed task: the probe minus a baseline that reads no encoder, fitted on the same "
            "training labels of the same run, reading the same words and scored on the same test examples "
            "(TF-IDF logistic regression, its C "
            "chosen on dev as the probe's, for classification; the most frequent tag per word for tagging; none for "
            "QA), resampled together, Holm within these cells: a family of their own, apart from the primary and "
            "secondary ones. Above zero, the encoder gives a probe more than the words' surface does; the "
            "baselines' own scores are the tables' \"non-neural baseline\" column.", ""] + _md_table(
        ["variant", "task", "baseline", "probe - baseline", "Holm p", "verdict"], rows) + [""]


def _contrast_rows(es: list[ContrastEstimate]) -> list[list[str]]:
    rows = []
    for e in es:
        iv, p = e.interval, e.power
        power = "" if p is None else (f"{p.mde:.3f}" if np.isfinite(p.mde) else "")
        rows.append([e.contrast.name, e.task, format_interval(iv, signed=True), f"{iv.p_value:.2g}",
                     f"{e.p_adjusted:.2g}", verdict(iv, e.p_adjusted, e.p_equivalence), power,
                     "" if p is None or resolved(e) else p.verdict, "; ".join(e.contrast.notes + e.notes)])
    return rows


def _contrast_sections(c: Contributions) -> list[str]:
    out = []
    header = ["contrast", "task", "estimate [interval]", "p", "Holm p", "verdict", "MDE (Holm level)", "to resolve",
              "notes"]
    for family in FAMILIES:
        order = list(dict.fromkeys(e.contrast.name for e in c.contrasts))
        es = sorted((e for e in c.contrasts if e.contrast.family == family),
                    key=lambda e: (order.index(e.contrast.name), c.tasks.index(e.task)))
        if es:
            out += [f"## {FAMILY_TITLES[family]}", ""] + _md_table(header, _contrast_rows(es)) + [""]
    out += _tie_sensitivity(c)
    if c.context:
        rows = [[e.contrast.name.replace(" - its embeddings", ""), e.task, format_interval(e.interval, signed=True),
                 f"{e.p_adjusted:.2g}", verdict(e.interval, e.p_adjusted) if np.isfinite(e.p_adjusted)
                 else "no information: the two readings agree on every resample"] for e in c.context]
        out += ["## What the layers add over the embeddings (probe)", "",
                "Per variant and probed task: the probe of the encoder minus the probe of its own embedding layer "
                "(word, position and segment embeddings before any transformer layer), resampled together, Holm "
                "within these cells. Above zero, the layers add something a probe can read beyond word identity "
                "and frequency; the `(embeddings probe)` rows of the tables above are that baseline's own "
                "contrasts, a family of their own.", ""] + _md_table(
            ["variant", "task", "probe - embeddings probe", "Holm p", "verdict"], rows) + [""]
    out += _over_baselines_section(c)
    if c.itt:
        main = {(e.contrast.name, e.task): e for e in c.contrasts}
        rows = [[e.contrast.name, e.task, format_interval(e.interval, signed=True), f"{e.p_adjusted:.2g}",
                 verdict(e.interval, e.p_adjusted),
                 format_interval(main[(e.contrast.name, e.task)].interval, signed=True)
                 if (e.contrast.name, e.task) in main else "not estimated"] for e in c.itt]
        out += ["## Intention to treat: every fine-tuning counted", "",
                f"{c.did_not_learn} fine-tuning(s) predicted one label and are left out of the tables above, so those "
                "estimate the effect given that no fine-tuning collapsed. Here the fine-tuned primary cells count "
                "every fine-tuning (Holm within these cells); where the two disagree, the collapse is part of the "
                "effect.", ""] + _md_table(["contrast", "task", "every fine-tuning", "Holm p", "verdict",
                                             "left out (above)"], rows) + [""]
    return out


def _tie_sensitivity(c: Contributions) -> list[str]:
    """The primary family's unresolved cells, shown a tie or not at margins around the fixed one: a reader sees
    whether "a tie" hangs on the margin. Only the fixed margin is the claim."""
    es = [e for e in c.contrasts if e.holm_family == "primary" and np.isfinite(e.p_adjusted)]
    if not es:
        return []
    ties = tie_sensitivity([e.interval for e in es])
    rows = [[e.contrast.name, e.task, format_interval(e.interval, signed=True),
             *("tie" if t else "-" for t in row)] for e, row in zip(es, ties) if not called(e.interval, e.p_adjusted)]
    if not rows:
        return []
    return [f"## Ties at other margins (sensitivity; the claim is +-{EQUIVALENCE_MARGIN:g})", "",
            "The primary cells not resolved, each shown a tie or not by two one-sided tests at each margin, Holm "
            "within the primary family at that margin.", ""] + _md_table(
        ["contrast", "task", "estimate [interval]", *(f"+-{m:g}" for m in SENSITIVITY_MARGINS)], rows) + [""]


def _glossary(c: Contributions) -> list[str]:
    """What each contrast in the tables measures, once, with the primary question's plain name."""
    seen: dict[str, str] = {}
    for e in c.contrasts:
        d = e.contrast
        if d.name not in seen and d.meaning:
            plain = primary_name(d)
            seen[d.name] = f"- **{d.name}**: {d.meaning}" + (f". The primary question's \"{plain}\"" if plain else "")
    if not seen:
        return []
    return (["## What each contrast measures", "", "A contrast is a difference of mean scores between variants "
             "that share everything but the named part (same architecture, initial weights, batches, steps and "
             "fine-tuning); positive means the first variant scores higher.", ""] + list(seen.values()) + [""])


def _decompositions(c: Contributions) -> list[str]:
    cell = {(e.task, e.contrast.name): e for e in c.contrasts}
    lines = []
    for e in c.contrasts:
        if e.contrast.parts and all((e.task, n) in cell for _, n in e.contrast.parts):
            terms = " ".join(f"{'+' if s > 0 else '-'} {n} {format_interval(cell[(e.task, n)].interval, True)}"
                             for s, n in e.contrast.parts)
            lines.append(f"- {e.task}: {e.contrast.name} {format_interval(e.interval, True)} = {terms.lstrip('+ ')}")
    return ["## Decompositions", "", "A contrast between variants on different inputs, split at a variant that "
            "bridges them (the parts add up exactly; each has its own interval).", ""] + lines + [""] if lines else []


def _compute_section(c: Contributions) -> list[str]:
    """Gain over none per unit of pretraining compute, when the variants' FLOPs differ."""
    from analysis.headline import compute_spread

    flops = c.budget.flops if c.budget is not None else {}
    if not compute_spread(flops):
        return []
    rows = []
    for e in c.contrasts:
        if e.contrast.family != "vs_none":
            continue
        v = next(iter(e.contrast.weights))
        if v in flops and flops[v] > 0:
            pf = flops[v] / 1e15
            iv = e.interval
            rows.append([e.task, v, f"{pf:.3g}", f"{iv.estimate / pf:+.4g} [{iv.lo / pf:+.4g}, {iv.hi / pf:+.4g}]"])
    return ["## Gains per unit of compute", "", "Training FLOPs differ between variants "
            f"({compute_spread(flops)}; budget: {c.budget.kind}); the gain over none divided by each variant's "
            "pretraining PFLOPs (the interval scales with it).", ""] + _md_table(
        ["task", "variant", "PFLOPs per run", "gain over none per PFLOP"], rows) + [""]


def _power_section(c: Contributions) -> list[str]:
    """The prospective figure: per task row, the median MDE at the Holm level now and with more seeds."""
    ps = {t: [e.power for e in c.contrasts if e.task == t and e.power is not None and np.isfinite(e.power.mde)]
          for t in c.tasks}
    seeds = sorted({n for p in (x for v in ps.values() for x in v) for n, _ in p.mde_by_seeds})
    if not seeds or not any(ps.values()):
        return []
    m = family_size(c, "secondary") or family_size(c)
    rows = [[t, effect_text(float(np.median([p.mde for p in v])))] + [
        effect_text(float(np.median([dict(p.mde_by_seeds)[n] for p in v if n in dict(p.mde_by_seeds)])))
        for n in seeds] for t, v in ps.items() if v]
    return ["## Power at the Holm level", "", f"The difference each design detects with power 80% at Holm's first "
            f"step in this report's secondary family (alpha 0.05/{m}, two-sided; the primary family's m is "
            f"{family_size(c, 'primary')}), median over the row's contrasts: this run "
            f"({c.budget.pretrain_seeds if c.budget else '?'} seeds) and, prospectively, the same design with more "
            "pretraining seeds (the seed part scaled as 1/P, its df at P-1). Plan with these; 'to resolve' in the "
            "tables is post hoc (the observed difference taken as the truth, with the range its seed variance's "
            "chi-square interval allows).", ""] + _md_table(["task", "MDE now"] + [f"{n} seeds" for n in seeds],
                                                             rows) + [""]


def _markdown(r: Report) -> list[str]:
    c = r.contributions
    out = [f"# Objective contributions: {r.export_dir}", "", "```"] + run_summary(c, r.check, r.mlm_floor) + ["```", ""]
    out += [" ".join(headline(c, r.check)), ""]
    excluded = ", ".join(f"{n} {k}" for k, n in c.excluded.items()) or "none"
    out += [f"Measured variants: {', '.join(c.variants) or 'none'}; pretraining seeds: "
            f"{', '.join(map(str, c.pretrain_seeds))}. Intervals: {c.level:.0%} multi-bootstrap over "
            f"pretraining seeds and test examples (analysis.bootstrap; coverage checked by analysis.validate); "
            f"p-values: {families(c)}, each over every task row (analysis.inference.family_calls); MDE: the "
            f"difference detected with power 80% at Holm's first step of its family (alpha 0.05/m). Measure runs "
            f"excluded from the estimates "
            f"(not completed): {excluded}.", ""]
    if c.epochs:
        out += ["Epochs over the pretraining corpus per run (mean): "
                + ", ".join(f"{v} {e:.2f}" for v, e in c.epochs.items()), ""]
    out += _corpus_section(r.export_dir)
    if c.messages:
        out += ["## Messages", ""] + [f"- {m}" for m in c.messages] + [""]
    if not c.tasks:
        return out + ["No completed measure runs with evaluations: nothing to estimate."]
    out += ["## Scores per variant", ""] + _variant_table(c) + [""]
    from analysis.curves import curve_section

    out += (_contrast_sections(c) + choices_section(list(r.choices)) + curve_section(list(r.curves)) + _glossary(c)
            + _power_section(c))
    out += _decompositions(c) + _compute_section(c)
    out += _setup_section(r.export_dir)
    if c.flags:
        out += ["## Flags", ""] + [f"- {f.variant}{' on ' + f.task if f.task else ''}: {f.reason}"
                                   for f in c.flags] + [""]
    if r.search is not None:
        out += _search_markdown(r.search)
    return out


def _corpus_section(export_dir: Path) -> list[str]:
    """The pretraining corpus and what decontamination removed from it (``export/corpus.json``, written when
    the sweep prepared it); nothing for an export without one."""
    import json

    try:
        rec = json.loads((Path(export_dir) / "corpus.json").read_text())
    except (OSError, ValueError):
        return []
    from trainables.data.prepare import decontamination_line

    sizes = ", ".join(f"{rec[k]:,} {k}" for k in ("documents", "sentences", "tokens") if isinstance(rec.get(k), int))
    return [f"Pretraining corpus: {rec.get('corpus')} ({sizes}; prepared {rec.get('fingerprint')}); "
            f"{decontamination_line(rec.get('decontamination'))}.", ""]


def _setup_section(export_dir: Path) -> list[str]:
    """What the contrasts hold fixed that a reader should know: the fine-tuning head, the input formats."""
    export = load_export(export_dir)
    heads = sorted(set(export.evals["head"].dropna()) - {""}) if "head" in export.evals.columns else []
    out = [f"Fine-tuning head: {', '.join(heads) or 'pooler (not recorded)'}. With pooler, NSP-loss effects on "
           "classification (full - mlm_pairs) include the pooler NSP trains; with cls (a fresh head on [CLS], "
           "--set finetune.head=cls) they do not.", ""]
    return out + input_format_section(export.runs)


def _search_markdown(s: SearchSummary) -> list[str]:
    out = ["## Search phase: probe score vs loss weights and mask ratio", "",
           f"{len(s.trials)} completed full-budget trials; excluded: "
           + (", ".join(f"{n} ({k})" for k, n in s.excluded.items()) or "none") + ".", ""]
    if s.spearman:
        rows = [[p, f"{s.spearman[p]:+.2f}"] + [f"{s.importance.get(ev, {}).get(p, float('nan')):.2f}"
                                                for ev in ("fanova", "ped_anova")] for p in s.params]
        out += _md_table(["parameter", "Spearman rho", "fANOVA importance", "PED-ANOVA importance"], rows)
        best = s.trials.loc[s.trials["probe_score"].idxmax()]
        out += ["", "Best trial: " + ", ".join(f"{p}={best[p]:.3g}" for p in s.params)
                + f" -> probe score {best['probe_score']:.3f}"]
    return out + [""] + [f"- {m}" for m in s.messages]


def _cell(e: ContrastEstimate) -> str:
    """'+0.100 [+0.050,+0.150]*' (resolved) / '!' (flagged) / '+0.100 (unreliable)'."""
    iv = e.interval
    if iv.reliable and np.isfinite(iv.lo):
        text = f"{iv.estimate:+.3f} [{iv.lo:+.3f},{iv.hi:+.3f}]"
    else:
        text = format_interval(iv, True, short=True)
    return text + ("*" if resolved(e) else "") + ("!" if e.notes else "")


def _compact_table(c: Contributions, width: int) -> list[str]:
    """One row per contrast, one column per task row with contrasts; split into blocks of columns that fit."""
    tasks = [t for t in c.tasks if any(e.task == t for e in c.contrasts)]
    names = list(dict.fromkeys(e.contrast.name for e in c.contrasts))
    cell = {(e.contrast.name, e.task): _cell(e) for e in c.contrasts}
    nw = min(max(len(n) for n in names), int(width * 0.4)) + 2  # long factorial names still fit whole
    cw = max([len(v) for v in cell.values()] + [len(t) for t in tasks]) + 2
    per = max(1, (width - nw) // cw)
    out = []
    for i in range(0, len(tasks), per):
        block = tasks[i:i + per]
        out.append("contrast".ljust(nw) + "".join(t.ljust(cw) for t in block).rstrip())
        for n in names:
            short = n if len(n) <= nw - 2 else n[:nw - 3] + "~"
            out.append((short.ljust(nw) + "".join(cell.get((n, t), "").ljust(cw) for t in block)).rstrip())
    return out


def format_table(report: Report, width: int = TERMINAL_WIDTH) -> str:
    """The terminal output of the main job: the headline and one compact contrast x task table.

    Everything else (scores per variant, p-values, MDEs, notes, messages) is in contributions.md."""
    c = report.contributions
    wrap = lambda text: textwrap.wrap(text, width) or [""]  # noqa: E731
    if not c.tasks:
        return "\n".join(wrap("no completed measure runs to report") + [ln for m in c.messages for ln in wrap(m)])
    summary = [ln for line in run_summary(c, report.check, report.mlm_floor)
               for ln in textwrap.wrap(line, width, subsequent_indent=" " * SUMMARY_WIDTH) or [""]]
    lines = summary + [""] + [ln for sentence in headline(c, report.check) for ln in wrap(sentence)] + [""]
    if c.contrasts:
        lines += _compact_table(c, width) + [""]
    if report.curves:
        from analysis.curves import curve_rows

        primary = curve_rows(list(report.curves))
        rows = [r for r in primary if r.task.startswith("average")] or primary
    if report.curves and rows:
        from analysis.curves import extrapolate

        said = [f"{r.contrast} on {r.task}: {r.line()}" + (f", {x.short()}" if x else "")
                for r in rows for x in [extrapolate(r)]]
        lines += wrap("Over pretraining tokens (snapshots, probed): " + "; ".join(said)
                      + ". Every row: contributions.md.") + [""]
    lines += wrap(f"* resolved ({families(c)}, p < 0.05); ! flagged (collapsed, "
                  f"or worse than none on the task: not credited). Scores per variant, p-values, MDEs, notes and "
                  f"{count(len(c.messages), 'message')}: contributions.md.")
    return "\n".join(lines)


def write_report(report: Report, out_dir: str | Path) -> list[Path]:
    """Write contributions.md/.csv and the plots into ``out_dir``; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "contributions.md", out / "contributions.csv"]
    paths[0].write_text(report.to_markdown() + "\n")
    report.to_frame().to_csv(paths[1], index=False)
    if report.contributions.tasks:
        paths.append(plot_task_bars(report.contributions, out / "contributions.png"))
    if report.contributions.contrasts:
        paths.append(plot_forest(report.contributions, out / "contributions_forest.png"))
    if report.curves:
        from analysis.curves import curve_frame
        from analysis.plots import plot_curves

        paths.append(plot_curves(list(report.curves), out / "contributions_curves.png"))
        paths.append(out / "contributions_curves.csv")
        curve_frame(report.curves).to_csv(paths[-1], index=False)
    if report.search is not None and report.search.params and len(report.search.trials):
        paths.append(plot_search_response(report.search, out / "search_response.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Contribution estimates with intervals from a sweep export.")
    ap.add_argument("export_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: EXPORT_DIR/report)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # a main-job export sits beside its instrument check's verdicts: the summary and headline read them again
    check_json = args.export_dir.parent / "instrument_check" / "report" / "known_answer.json"
    check = json.loads(check_json.read_text()) if check_json.exists() else None
    from analysis.rules import mlm_floor, run_rule

    try:
        report = build_report(args.export_dir, args.boot, args.level, args.seed, check=check,
                              mlm_floor=mlm_floor(run_rule(args.export_dir.parent)))
    except ValueError as err:  # ExportError and bad arguments: one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    paths = write_report(report, args.out or args.export_dir / "report")
    print(format_table(report))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
