"""The run's summary: seven labelled lines a researcher reads first, at the end of every sweep and on top of the report.

    Ran      what was trained and read: variants, seeds, tokens per run, tasks and readings
    Check    the instrument check in one clause: PASS / FAIL, what it vouches for, what it cannot check
    Finding  the finding in words a reader quotes: which objective helped (or hurt) which task, by how much in
             the task's metric, how sure (Holm over the primary cells)
    Sanity   can this run's contrasts be read at all: did MLM leave the word-frequency stage (the floor a rule
             file sets, else UNIGRAM_STAGE; past it but short of a trained encoder's 15% is said so), did NSP's
             head learn above chance, did pretraining beat random weights, did every fine-tuning learn more than
             one label; each OK or FAIL
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
from analysis.headline import TRAINED_STAGE, UNIGRAM_STAGE, count, family_size, resolved, tie

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


def _cell(c: Contributions, e) -> str:
    task, reading = split_label(e.task)
    metric = c.metrics.get(e.task, "")
    iv = e.interval
    return f"{task} {iv.estimate:+.3f} {metric} ({reading}, [{iv.lo:+.3f}, {iv.hi:+.3f}])".replace("  ", " ")


def finding(c: Contributions) -> str:
    """The finding in words: per primary contrast, the tasks it helped and hurt (each task's largest called cell,
    in the task's metric, with its reading and interval) and the tasks with no call; averages are left to Answer."""
    prim = [e for e in c.contrasts if e.holm_family == "primary" and np.isfinite(e.interval.estimate)
            and not e.task.startswith("average")]
    if not prim:
        return _line("Finding", "none: the primary question's variants did not all run")
    groups: dict[str, list] = {}
    for e in prim:
        groups.setdefault(e.contrast.name, []).append(e)
    items = []
    for name, es in groups.items():
        d = es[0].contrast
        formula = " - ".join(v for sign in (1, -1) for v, w in d.weights.items() if w * sign > 0)
        tasks = list(dict.fromkeys(split_label(e.task)[0] for e in es))
        best: dict[int, dict[str, object]] = {1: {}, -1: {}}
        for e in es:
            if resolved(e):
                side, task = best[1 if e.interval.estimate > 0 else -1], split_label(e.task)[0]
                if task not in side or abs(e.interval.estimate) > abs(side[task].interval.estimate):
                    side[task] = e
        up, down = best[1], best[-1]
        quiet = [t for t in tasks if t not in up and t not in down]
        text = f"{primary_name(d) or name} ({formula}) "
        text += (f"helped {len(up)} of {count(len(tasks), 'task')}: " + "; ".join(_cell(c, e) for e in up.values())
                 if up else f"helped none of {count(len(tasks), 'task')}")
        text += ("; hurt " + "; ".join(_cell(c, e) for e in down.values())) if down else "; hurt none"
        text += f"; no effect called on {', '.join(quiet)}" if quiet and (up or down) else ""
        items.append(text)
    return _line("Finding", ". ".join(items) + f". Each call survives Holm over the run's "
                            f"{family_size(c, 'primary')} primary cells at {c.level:.0%} (pretraining seeds and test "
                            "examples resampled)")


def sanity(c: Contributions, mlm_floor: float | None = None) -> tuple[str, dict[str, bool | None]]:
    """The sanity line and its verdicts (None: not applicable in this run). ``mlm_floor``: the held-out MLM
    accuracy an encoder must reach (a rule file's, ``analysis.rules.mlm_floor``; else ``UNIGRAM_STAGE``)."""
    facts: dict[str, bool | None] = {}
    parts = []
    floor = UNIGRAM_STAGE if mlm_floor is None else mlm_floor
    if c.mlm_acc:
        best = max(c.mlm_acc, key=c.mlm_acc.get)
        facts["mlm_past_frequencies"] = c.mlm_acc[best] >= floor
        short = [f"{v} {a:.1%}" for v, a in c.mlm_acc.items() if a < floor and v != best]
        stage = ("" if not facts["mlm_past_frequencies"] else
                 f", short of a trained encoder's {TRAINED_STAGE:.0%}: early effects" if c.mlm_acc[best] < TRAINED_STAGE
                 else f", past a trained encoder's {TRAINED_STAGE:.0%}")
        parts.append(f"MLM past word frequencies {'OK' if facts['mlm_past_frequencies'] else 'FAIL'} "
                     f"(held-out accuracy {best} {c.mlm_acc[best]:.1%}, needs {floor:.0%}"
                     + (" (the rule's)" if mlm_floor is not None else "")
                     + (f"; below it: {', '.join(short)}" if short else "") + f"{stage})")
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


def _verdict(e) -> str:
    """' resolved', ' a tie (TOST)', ' (no reliable interval: N seeds)', or ' not resolved' where the interval alone
    excludes 0 (it is not called after Holm); '' for an interval across 0."""
    if resolved(e):
        return " resolved"
    if tie(e):
        return " a tie (TOST)"
    if not e.interval.reliable:
        return f" (no reliable interval: {e.interval.n_seeds} seeds)"
    return " not resolved after Holm" if e.interval.excludes_zero else ""


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
        cells = ", ".join(f"{_reading(e.task) if averages else 'on ' + e.task} {_fmt(e)}{_verdict(e)}" for e in es)
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
    if facts.get("every_fine_tuning_learned") is False and c.rates_tried > 1:
        tasks = ", ".join(c.one_label_tasks) or "some tasks"
        return _line("Next", f"the fine-tunings that predicted one label ({tasks}) were chosen on dev among "
                             f"{c.rates_tried} rates and their epochs, the fair protocol: at these labels this budget "
                             f"does not learn {tasks} reliably; more labels (--set finetune.max_train_examples=...) "
                             "or longer pretraining (--preset cpu-long) may help")
    if facts.get("every_fine_tuning_learned") is False:
        return _line("Next", "fine-tune fairly: --set finetune.lr_grid=3e-4,1e-3,3e-3 --set finetune.keep_best=true "
                             "--set finetune.epochs=6 --set finetune.patience=2 (docs/controls.md)")
    if set(c.variants) <= {"mlm_only", "none"} and c.preset in ("", "cpu-small", "cpu-long"):
        return _line("Next", _other_objectives(c))
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


# The seed's table on two cores: every variant trained as long as cpu-long's MLM runs (sweeps.cli, cpu-long).
TABLE_VARIANTS = "full,mlm_pairs,mlm_only,nsp_only,none"
TABLE_STEPS, TABLE_SEEDS = 8000, 6


def _other_objectives(c: Contributions) -> str:
    """Next for a run that measured MLM's effect alone: the command for the other objectives and its pretraining
    cost on this CPU, from this run's own seconds per step (its runs ran as that command's would, two at once)."""
    b = c.budget
    runs = TABLE_SEEDS * (len(TABLE_VARIANTS.split(",")) - 1)
    cost = ""
    if b is not None and np.isfinite(b.seconds) and np.isfinite(b.steps) and b.steps > 0:
        hours = b.seconds / b.steps * TABLE_STEPS * runs / 2 / 3600
        cost = (f", about {hours:.0f} h of pretraining on this CPU ({runs} runs of {TABLE_STEPS:,} steps at this "
                f"run's {b.seconds / b.steps:.2f} s a step, two at once)")
    return (f"NSP's loss effect, SOP, ELECTRA and the mask ratio were not measured here: each variant must train as "
            f"long as MLM did to be read. python sweeps/objective_weights.py --preset cpu-long --variants "
            f"{TABLE_VARIANTS}{cost}; cpu-long's first design read NSP with its pairs (docs/presets.md)")


def run_summary(c: Contributions, check: dict | None = None, mlm_floor: float | None = None) -> list[str]:
    """The summary block, one line per fact (docstring above), or one line when nothing was measured.
    ``mlm_floor``: the rule file's held-out MLM accuracy floor, when the run was judged by one."""
    if not c.tasks:
        return [_line("Ran", "no completed measure run with evaluations: nothing to summarise")]
    sane, facts = sanity(c, mlm_floor)
    return [ran(c), check_line(check), finding(c), sane, answer(c), detects(c), next_step(c, facts)]
