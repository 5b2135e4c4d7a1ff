"""The run's summary: six labelled lines a researcher reads first, at the end of every sweep and on top of the report.

    Ran      what was trained and read: variants, seeds, tokens per run, tasks and readings
    Check    the instrument check in one clause: PASS / FAIL, what it vouches for, what it cannot check
    Sanity   can this run's contrasts be read at all: did MLM leave the word-frequency stage, did NSP's head
             learn above chance, did pretraining beat random weights, did every fine-tuning learn more than one
             label; each OK or FAIL
    Answer   the primary question (MLM's effect over none, NSP's loss effect) on the average rows
    Detects  the smallest effect the primary family detects with power 80%, in the metric's units
    Next     the one command that would answer more, chosen from the sanity line first, then from the seeds

Each line is a pure function of ``Contributions`` (and the check's verdicts), so each is tested on exports
whose facts are known.
"""

from __future__ import annotations

import numpy as np

from analysis.contributions import Contributions, split_label
from analysis.contrasts import primary_name
from analysis.headline import WORD_FREQUENCY_STAGE, count, resolved, tie

NSP_CHANCE_MARGIN = 0.05  # NSP's held-out accuracy must clear chance (0.5) by this much for its head to count as trained
WIDTH = 9  # the label column
# Beyond this many pretraining seeds for a typical open cell, Next points at a larger scale instead: such cells
# are ties whose intervals already exclude the effects the design set out to find.
MAX_SEEDS_ADVISED = 20


def _line(label: str, text: str) -> str:
    return f"{label:<{WIDTH}}{text}"


def _fmt(e) -> str:
    iv = e.interval
    return f"{iv.estimate:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"


def ran(c: Contributions) -> str:
    b = c.budget
    trained = [v for v in c.variants if v != "none"]
    tokens = f", {b.tokens / 1e6:.2g} M tokens each" if b is not None and np.isfinite(b.tokens) else ""
    seeds = count(len(c.pretrain_seeds), "pretraining seed")
    tasks = sorted({t.split(" (")[0] for t in c.tasks if not t.startswith("average")})
    modes = sorted({t.split(" (", 1)[1].rstrip(")") if " (" in t else "" for t in c.tasks
                    if not t.startswith("average")})
    readings = [{"": "fine-tuning", "probe": "the probe"}.get(m, "the " + m.replace("probe, ", "probe at "))
                for m in modes]
    preset = f" at {c.preset}" if c.preset else ""
    return _line("Ran", f"{', '.join(trained) or 'no pretrained variant'} against none{preset}, {seeds}{tokens}; "
                        f"{count(len(tasks), 'task')} ({', '.join(tasks)}), read by {', '.join(readings)}")


def check_line(check: dict | None) -> str:
    if check is None:
        return _line("Check", "no instrument check with this run (the main job's --check runs one first; "
                              "python sweeps/known_answer.py alone)")
    word = "PASS" if check.get("passed") else "FAIL"
    found = [e["name"].split(" (")[0].split(", ")[0] for e in check.get("effects", []) if e.get("verdict") == "recovered"]
    named = ", ".join(f"{n} ({found.count(n)} readings)" if found.count(n) > 1 else n for n in dict.fromkeys(found))
    null = check.get("null", {})
    what = (f"{named or 'no planted effect'} recovered on a planted language; "
            f"{count(null.get('called', 0), 'false call')} on its null task")
    return _line("Check", f"{word}: {what}. It vouches for that path only: NSP's and SOP's effects have no planted "
                          "control (docs/known-answers.md)")


def sanity(c: Contributions) -> tuple[str, dict[str, bool | None]]:
    """The sanity line and its verdicts (None: not applicable in this run)."""
    facts: dict[str, bool | None] = {}
    parts = []
    if c.mlm_acc:
        best = max(c.mlm_acc, key=c.mlm_acc.get)
        facts["mlm_past_frequencies"] = c.mlm_acc[best] >= WORD_FREQUENCY_STAGE
        short = [f"{v} {a:.1%}" for v, a in c.mlm_acc.items() if a < WORD_FREQUENCY_STAGE and v != best]
        parts.append(f"MLM past word frequencies {'OK' if facts['mlm_past_frequencies'] else 'FAIL'} "
                     f"(held-out accuracy {best} {c.mlm_acc[best]:.1%}, needs {WORD_FREQUENCY_STAGE:.0%}"
                     + (f"; below it: {', '.join(short)}" if short else "") + ")")
    if c.nsp_acc:
        low = min(c.nsp_acc.values())
        facts["nsp_learned"] = low >= 0.5 + NSP_CHANCE_MARGIN
        parts.append(f"NSP head above chance {'OK' if facts['nsp_learned'] else 'FAIL'} ({low:.2f}; chance 0.50)")
    avg = [t for t in c.tasks if t.startswith("average")]
    vs_none = [(t, v, c.means[(t, v)].estimate - c.means[(t, "none")].estimate) for t in avg
               for v in c.variants if v != "none" and (t, v) in c.means and (t, "none") in c.means]
    vs_none = [x for x in vs_none if np.isfinite(x[2])]  # a row whose fine-tunings were all left out has no mean
    if vs_none:
        t, v, d = max(vs_none, key=lambda x: x[2])
        facts["beats_none"] = d > 0
        parts.append(f"pretraining beats none {'OK' if d > 0 else 'FAIL'} (best: {v} {d:+.3f} on {t})")
    facts["every_fine_tuning_learned"] = c.did_not_learn == 0
    parts.append("every fine-tuning learned more than one label " + (
        "OK" if c.did_not_learn == 0 else f"FAIL ({c.did_not_learn} predicted one label; left out)"))
    return _line("Sanity", "; ".join(parts)), facts


def _reading(task: str) -> str:
    """'average (probe, 100 labels)' -> 'probe, 100 labels'; 'average (finetune)' -> 'fine-tuned'; else the task."""
    name, reading = split_label(task)
    return reading if name == "average" else task


def answer(c: Contributions) -> str:
    prim = [e for e in c.contrasts if e.holm_family == "primary" and np.isfinite(e.interval.estimate)]
    if not prim:
        return _line("Answer", "the primary question (mlm_only - none, full - mlm_pairs) was not measured: "
                               "these variants did not all run")
    shown = [e for e in prim if e.task.startswith("average")] or prim
    n_pos = sum(resolved(e) and e.interval.estimate > 0 for e in prim)
    n_neg = sum(resolved(e) and e.interval.estimate < 0 for e in prim)
    groups: dict[str, list] = {}
    for e in shown:
        groups.setdefault(e.contrast.name, []).append(e)
    items = []
    for name, es in groups.items():
        averages = all(e.task.startswith("average") for e in es)
        cells = ", ".join(f"{_reading(e.task) if averages else 'on ' + e.task} {_fmt(e)}"
                          f"{' resolved' if resolved(e) else ' a tie (TOST)' if tie(e) else ''}" for e in es)
        d = es[0].contrast
        formula = " - ".join(v for sign in (1, -1) for v, w in d.weights.items() if w * sign > 0)
        items.append(f"{primary_name(d) or name} ({formula}){', on the average:' if averages else ':'} {cells}")
    return _line("Answer", f"{'; '.join(items)}. Over all {len(prim)} primary cells: {n_pos} resolved positive, "
                           f"{n_neg} negative")


def detects(c: Contributions) -> str:
    prim = [e.power.mde for e in c.contrasts if e.holm_family == "primary" and e.power is not None
            and np.isfinite(e.power.mde)]
    if not prim:
        return _line("Detects", "no power statement: fewer than 3 pretraining seeds or no primary cell")
    mde = float(np.median(prim))
    if mde >= 1.0:
        return _line("Detects", "no effect a metric in [0, 1] can show: the seeds' spread is too large for "
                                f"{len(c.pretrain_seeds)} seeds")
    return _line("Detects", f"a primary effect of about {mde:.3f} (median over its cells, power 80% after Holm)")


def next_step(c: Contributions, facts: dict[str, bool | None]) -> str:
    if facts.get("mlm_past_frequencies") is False:
        longer = ("python sweeps/objective_weights.py --preset cpu-long (over an hour on two cores)"
                  if c.preset in ("", "smoke", "cpu-small") else "a longer pretraining budget (--set optim.max_steps=...)")
        return _line("Next", f"train longer: {longer}; more seeds cannot help while the encoders hold only word "
                             "frequencies")
    if facts.get("every_fine_tuning_learned") is False:
        return _line("Next", "fine-tune fairly: --set finetune.lr_grid=3e-4,1e-3,3e-3 --set finetune.keep_best=true "
                             "--set finetune.epochs=6 --set finetune.patience=2 (docs/controls.md)")
    open_cells = [e for e in c.contrasts if e.holm_family == "primary" and not resolved(e) and e.power is not None]
    needs = [e.power.seeds_needed for e in open_cells if e.power.seeds_needed]
    larger = "the same question at a larger scale: --preset gpu-quick on one GPU, a bert-* preset on a cluster"
    need = int(np.median(needs)) if needs else None
    if open_cells and (need is None or need > MAX_SEEDS_ADVISED):  # ties: seeds would narrow them, not resolve them
        why = f"a typical one would need ~{need} pretraining seeds to resolve, post hoc" if need else \
            "no seed count resolves them at these test sets"
        return _line("Next", f"{larger}; the open primary cells are near zero ({why})")
    if need:
        more = max(need - len(c.pretrain_seeds), 1)
        return _line("Next", f"{count(more, 'more pretraining seed')}: the same command with --first-seed "
                             f"{max(c.pretrain_seeds) + 1} --seeds {more}, then python -m analysis.export merge "
                             f"(docs/statistics.md); {need} in all would resolve a typical open primary cell if its "
                             "estimate is the truth (post hoc)")
    return _line("Next", larger)


def run_summary(c: Contributions, check: dict | None = None) -> list[str]:
    """The summary block, one line per fact (docstring above), or one line when nothing was measured."""
    if not c.tasks:
        return [_line("Ran", "no completed measure run with evaluations: nothing to summarise")]
    sane, facts = sanity(c)
    return [ran(c), check_line(check), sane, answer(c), detects(c), next_step(c, facts)]
