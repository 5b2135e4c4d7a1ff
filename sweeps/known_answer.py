"""The instrument check: the whole pipeline on a planted language whose answers are known.

    python sweeps/known_answer.py                       # the gate, on 2 CPU cores; exit 1 if it fails
    python sweeps/known_answer.py --all-effects         # every planted effect, the ungated too
    python sweeps/known_answer.py --seeds 5 --plan      # what it costs, without running it
    python sweeps/known_answer.py --languages 5         # the frozen rule on 5 new languages
    python sweeps/known_answer.py --sabotage            # must FAIL: fine-tuning and the probe ignore the checkpoint

Data (``data.corpus=planted:seed=K``: ``trainables.data.planted``, language K) -> preparation ->
pretraining of the variants the gate reads (``gate_grid``: none and mlm_only; ``--all-effects``: every
variant the planted effects name, none, mlm_only, mlm_pairs, nsp_only, full, sop_only) over 3 pretraining
seeds -> checkpoints -> the linear probe on the gate's tasks (the lexical and null tasks; every planted task
with ``--all-effects``) and fine-tuning on them (the lexical, discourse and null tasks with
``--all-effects``; a fresh [CLS] head) -> export -> analysis, as every sweep. It prints first each task's surface-cue check (no planted task is solved by
word overlap or a bag of words: ``trainables.data.cues``), then one table: each planted effect, its
expected sign, the estimate [interval], Holm p over the checkable effects, and its verdict
(``analysis.known_answer``, which states the rule); the null task's rule; then the usual report.
The exit status is 1 when the check fails (a checkable effect not recovered, or the null task's rule
broken), after writing the report. ``--languages N`` runs the check unchanged on N languages never used
while designing it (``REPLICATION_LANGUAGES``), at pretraining seeds from ``REPLICATION_FIRST_SEED`` on
(0-8, and 9 on language 101, were used while designing protocols 1-3), and prints per effect the share of languages where it was recovered
with its Clopper-Pearson interval, and whether the frozen rule held. ``--sabotage`` is the negative
switch: ``finetune.init=random`` (each variant and seed gets its own fresh encoder: the contrasts keep
their seed noise) and a 1-step pretraining (its weights are not read anyway); it must recover nothing
(its languages: ``SABOTAGE_LANGUAGES``). ``--resume`` with the same ``--name`` keeps the checks a
replication finished and continues the rest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.cli import build_parser, sweep_defaults  # noqa: E402
from sweeps.frame import INTERRUPTED, Context, Sweep, sweep_main  # noqa: E402
from sweeps.variants import parse_variants  # noqa: E402
from trainables.config import ConfigError  # noqa: E402

PRESET = "known-answer"
VARIANTS = "none,mlm_only,mlm_pairs,nsp_only,full,sop_only"  # the variants the planted effects name
FINETUNE_TASKS = ("planted_lexical", "planted_discourse", "planted_null")  # fine-tuned; every one is also probed
DEFAULTS: dict[str, dict] = {}  # nothing of its own: seeds per preset are sweeps.cli.PRESET_DEFAULTS
# Languages and pretraining seeds never used while the check was designed: a replication on data that shaped the
# rule is no evidence for it. Each protocol's replication data became the next protocol's design data, so
# protocols 1-3 were designed on languages 0-2 and 101-110 at seeds 0-8 (and seed 9 of language 101);
# docs/known-answers.md says which protocol used which. Protocol 3's replication starts at language 111, seed 9.
PROTOCOL = 3
REPLICATION_LANGUAGES = tuple(range(111, 131))
REPLICATION_FIRST_SEED = 9
# A sabotaged check reads no pretrained weight (each variant and seed gets a fresh encoder), so it spends no new
# language: the negative switch runs on languages from 106 on, at seeds from 6 on, fixed so that a rerun repeats
# the checks docs/results.md reports.
SABOTAGE_LANGUAGES = tuple(range(106, 126))
SABOTAGE_FIRST_SEED = 6
SABOTAGE = ["finetune.init=random", "optim.max_steps=1"]
CHECK_JSON, CHECK_MD = "known_answer.json", "known_answer.md"


def parse(sweep: Sweep, argv: list[str] | None):
    p = build_parser(f"python sweeps/{sweep.script}.py", sweep.doc.split("\n\n")[0])
    p.set_defaults(preset=PRESET)
    p.add_argument("--variants", default=None, help="comma-separated measured variants (default: the gate's, "
                                                     "or with --all-effects the planted effects' own: " + VARIANTS + ")")
    p.set_defaults(modes=("finetune", "probe"))  # each on the grid's tasks: the gate's lexical and null tasks; with
    # --all-effects fine-tuning on the lexical, discourse and null tasks and the probe on every planted task
    p.add_argument("--languages", type=int, default=0,
                   help=f"run the check on this many new languages ({REPLICATION_LANGUAGES[0]}, ...) at pretraining "
                        f"seeds from {REPLICATION_FIRST_SEED} on, and report per effect the share recovered")
    p.add_argument("--seed-blocks", type=int, default=1,
                   help="with --languages: this many checks per language, on disjoint blocks of --seeds pretraining "
                        "seeds each (checks = languages x blocks)")
    gate_variants, gate_tasks = gate_grid()
    p.add_argument("--all-effects", action="store_true",
                   help="run every planted effect's variants and tasks, the ungated effects too (what protocols 1-3 "
                        "were designed and replicated on); by default only what the gate reads runs (the checkable "
                        "effects' variants and tasks, and the null task: " + ", ".join(gate_variants) + " on "
                        + ", ".join(gate_tasks) + ", as the main job's --check), and the other effects' rows read "
                        "'not measured'")
    p.add_argument("--sabotage", action="store_true", help="the negative switch: fine-tuning and the probe ignore "
                                                           "the checkpoints (" + ", ".join(SABOTAGE) + ")")
    known, _ = p.parse_known_args(argv)
    p.set_defaults(**sweep_defaults(known.preset, sweep.defaults))
    args = p.parse_args(argv)
    langs = SABOTAGE_LANGUAGES if args.sabotage else REPLICATION_LANGUAGES
    if not 0 <= args.languages <= len(langs):
        raise ConfigError(f"--languages {args.languages} is not valid; allowed: 0 (language 0 only) to {len(langs)}")
    if args.seed_blocks < 1:
        raise ConfigError(f"--seed-blocks {args.seed_blocks} must be >= 1")
    if args.first_seed < 0:
        raise ConfigError(f"--first-seed {args.first_seed} must be >= 0")
    if args.sabotage:
        args.overrides = list(getattr(args, "overrides", None) or []) + SABOTAGE
    args.mode_tasks = {"finetune": FINETUNE_TASKS}
    if args.all_effects and args.variants:
        raise ConfigError(f"--all-effects runs its own variants ({VARIANTS}); drop --variants {args.variants}")
    if args.all_effects or args.variants or args.tasks:  # every effect's grid, or the one asked for
        args.variants = args.variants or VARIANTS
        args.grid = "every planted effect's (--all-effects)" if args.all_effects else "asked for"
    else:  # the gate's grid; the preset's tasks stay in the config (its data and runs are the full grid's):
        # the phases run the gate's only
        args.variants, args.mode_tasks, args.grid = ",".join(gate_variants), gate_modes(gate_tasks), "the gate's"
    return args


def gate_modes(tasks) -> dict:
    """The tasks each mode runs on in the gate's grid: fine-tuning on the gate's fine-tuned tasks, the probe on
    the gate's tasks."""
    return {"finetune": tuple(t for t in FINETUNE_TASKS if t in tasks), "probe": tuple(tasks)}


def gate_grid(effects=None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the gate reads: the checkable effects' variants (in ``VARIANTS``' order) and their tasks, and the null
    task. Every other effect is shown, never gated, so a check of this grid gives the same verdicts on the same
    runs (every variant of a seed trains on the same batches from the same initial weights, whichever others run)."""
    from analysis.known_answer import NULL_TASK, PLANTED_EFFECTS

    gated = [e for e in (PLANTED_EFFECTS if effects is None else effects) if e.checkable]
    names = {v for e in gated for v in e.weights}
    tasks = dict.fromkeys([*(e.task.split(" (")[0] for e in gated), NULL_TASK])
    return tuple(v for v in parse_variants(VARIANTS) if v in names), tuple(tasks)


def measured(ctx: Context):
    return [(name, phases.variant_config(ctx.cfg, name), ctx.args.seeds) for name in parse_variants(ctx.args.variants)]


def cue_lines(corpus: str, tasks) -> list[str]:
    """Each planted task's surface-cue check on its language (``trainables.data.cues``)."""
    from trainables.data.cues import cue_check
    from trainables.data.planted import planted_language
    from trainables.data.sources import language_of

    lang = planted_language(language_of(corpus))
    return [f"- {t}: {cue_check(lang.task(t), lang.roles()).line()}" for t in tasks if t.startswith("planted_")]


def report(root: str, out=None) -> str | None:
    """The cue checks and the planted-effects table first, then the usual report; all written beside the export."""
    if "://" in root:
        print(f"export: {root}/export (run `python -m analysis.known_answer` on a local copy)", file=out)
        return None
    from analysis.report import build_report, format_table, write_report

    rep = build_report(f"{root}/export")
    text = _write_check(rep, root)
    print(text + "\n", file=out)
    print(format_table(rep), file=out)
    paths = write_report(rep, f"{root}/report")
    return str(Path(paths[0]).parent) if paths else f"{root}/report"


def _write_check(rep, root: str) -> str:
    """The cue checks and the planted-effects table of a report, written to <root>/report/known_answer.md and,
    with the verdicts (what the main job's report reads), known_answer.json."""
    from analysis.known_answer import check_planted, dumps, format_check

    check = check_planted(rep.contributions)
    corpus = _corpus(root)
    tasks = sorted({t.split(" (")[0] for t in rep.contributions.tasks})
    cues = ["surface-cue checks (chance + 0.05 at most on test):", *cue_lines(corpus, tasks)]
    text = format_check(check) + "\n\n" + "\n".join(cues)
    out_dir = Path(root) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CHECK_MD).write_text(text + "\n")
    (out_dir / CHECK_JSON).write_text(dumps({**check.to_json(), "corpus": corpus, "protocol": PROTOCOL}) + "\n")
    return text


def _corpus(root: str) -> str:
    """The pretraining corpus the export's measure runs used (its planted language)."""
    import pandas as pd

    runs = pd.read_parquet(Path(root) / "export" / "runs.parquet")
    runs = runs[runs["phase"] == "measure"]
    return json.loads(runs["config_json"].iloc[0])["data"]["corpus"] if len(runs) else "planted"


def status(root: str) -> int:
    """The exit status after the report: 1 when the check failed (or wrote no verdict)."""
    path = Path(root) / "report" / CHECK_JSON
    return 0 if path.exists() and json.loads(path.read_text())["passed"] else 1


def _check_setup(ctx: Context):
    """The main job's instrument check as it runs: the check's preset (its data shared with the job's), the
    gate's grid (``gate_grid``), one CPU trial per core; (root, cfg, args, tasks, variants)."""
    import argparse

    from sweeps.frame import with_shared_data
    from trainables.presets import build_config
    from trainables.tasks import resolve_tasks

    root = f"{ctx.root}/instrument_check"
    cfg = with_shared_data(build_config(PRESET), ctx.root)
    gate_variants, gate_tasks = gate_grid()
    # one CPU per trial and the preset's tasks in the config, as the full check runs (its data and runs)
    args = argparse.Namespace(**{**vars(ctx.args), **sweep_defaults(PRESET, DEFAULTS), "gpus_per_trial": 0,
                                 "cpus_per_trial": 1, "workers_per_trial": 1, "modes": ("finetune", "probe"),
                                 "first_seed": 0, "num_samples": 0, "mode_tasks": gate_modes(gate_tasks)})
    variants = [(name, phases.variant_config(cfg, name)) for name in gate_variants]
    return root, cfg, args, resolve_tasks(cfg.finetune.tasks), variants


def check_plan(ctx: Context) -> list:
    """The main job's plan row of its instrument check (``--check``): the gate's grid, measure and fine-tuning."""
    from sweeps.plan import PhasePlan, plan_sweep

    _, cfg, args, tasks, variants = _check_setup(ctx)
    gated = [t for t in tasks if t in args.mode_tasks["probe"]]
    plan = plan_sweep([(n, c, args.seeds) for n, c in variants], None, gated, args, cfg)
    return [PhasePlan("check", sum(p.runs for p in plan.phases), sum(p.tokens for p in plan.phases),
                      sum(p.flops for p in plan.phases), plan.wall_s, max(p.parallel for p in plan.phases),
                      f"the instrument check's gate: {', '.join(n for n, _ in variants)} x {args.seeds} seeds "
                      f"on {', '.join(gated)}")]


def run_check(ctx: Context) -> dict:
    """The instrument check inside another sweep (the main job's ``--check``): the gate's grid (``gate_grid``:
    what ``known_answer.py`` runs by default) at the check's own preset, in the same Ray session, exported to
    ``<root>/instrument_check``; returns the check's JSON (``analysis.known_answer.PlantedCheck.to_json``: the
    headline, the gate, each effect's verdict; the ungated effects read 'not measured'). Its wall time is the
    main job's phase ``check``."""
    import time

    from analysis.report import build_report
    from sweeps.export import export
    from sweeps.frame import prepare_data
    from sweeps.progress import Progress

    t0 = time.time()
    root, cfg, args, tasks, variants = _check_setup(ctx)
    prepare_data(cfg, tasks, root=root)
    export(root, phases.measure_and_read(variants, tasks, args, root,
                                         Progress(ctx.args.quiet, ctx.args.verbose, prefix="check/")))
    text = _write_check(build_report(f"{root}/export"), root)
    if not ctx.args.quiet:  # the verdict; the table of effects and the cue checks are in the file
        shown = text if ctx.args.verbose else f"{text.split(chr(10))[0]}\ndetails: {root}/report/{CHECK_MD}"
        print(shown + "\n", flush=True)
    ctx.progress.times["check"] = [t0, time.time()]
    return json.loads((Path(root) / "report" / CHECK_JSON).read_text())


SWEEP = Sweep("known_answer", __doc__, defaults=DEFAULTS, parse=parse, report=report, measured=measured,
              status=status)


def replicate(argv: list[str], n: int) -> int:
    """The check on ``n`` new languages (x ``--seed-blocks`` disjoint seed blocks), each its own experiment
    ``<name>-lang<K>[-seeds<S>]``, then the replication table; exit 1 when the frozen rule does not hold.
    With ``--resume`` a check that wrote its verdict is kept as it is and an interrupted one is continued, so
    a replication stopped after some checks loses none of them."""
    from analysis.known_answer import Replication, check_planted
    from analysis.report import build_report
    from sweeps.cli import experiment_root

    args = SWEEP.parse(SWEEP, argv)
    base = args.name or f"known_answer-{args.preset}-languages" + ("-sabotaged" if args.sabotage else "")
    langs = SABOTAGE_LANGUAGES if args.sabotage else REPLICATION_LANGUAGES
    first = args.first_seed or (SABOTAGE_FIRST_SEED if args.sabotage else REPLICATION_FIRST_SEED)
    rest = _without(argv, "--languages", "--name", "--first-seed", "--seed-blocks")
    runs = [(k, first + b * args.seeds) for k in langs[:n] for b in range(args.seed_blocks)]
    if args.plan:  # every check trains the same grid on another language: plan one, count them all
        code = sweep_main(SWEEP, [*rest, "--first-seed", str(first), "--set", f"data.corpus=planted:seed={langs[0]}"])
        print(f"\n{len(runs)} checks like this one ({n} language(s) x {args.seed_blocks} seed block(s)): "
              f"{len(runs)} x the total above", flush=True)
        return code
    roots = {}
    for k, seed in runs:
        name = f"{base}-lang{k}" + (f"-seeds{seed}" if args.seed_blocks > 1 else "")
        root = experiment_root(argparse_ns(args, name), SWEEP.script)
        head = f"language {k}, seeds {seed}-{seed + args.seeds - 1} ({len(roots) + 1} of {len(runs)}): {name}"
        if args.resume and _finished(root, args.variants):
            print(f"\n=== {head}: finished before, kept (--resume) ===", flush=True)
        else:
            print(f"\n=== {head} ===", flush=True)
            code = sweep_main(SWEEP, [*rest, "--name", name, "--first-seed", str(seed), "--set",
                                      f"data.corpus=planted:seed={k}"])
            if code in (2, INTERRUPTED):  # bad input, or interrupted: no later check runs, no table is judged
                return code
        roots[(k, seed)] = root
    rep = Replication({key: check_planted(build_report(f"{r}/export").contributions) for key, r in roots.items()})
    text = (f"protocol {PROTOCOL} (docs/known-answers.md); grid: {args.variants.replace(',', ', ')} ({args.grid})\n\n"
            + rep.format(sabotaged=args.sabotage))
    out = Path(experiment_root(argparse_ns(args, base), SWEEP.script))
    out.mkdir(parents=True, exist_ok=True)
    (out / "replication.md").write_text(text + "\n")
    print("\n" + text + f"\n\nreplication table: {out / 'replication.md'}", flush=True)
    return 0 if (rep.sabotage_holds if args.sabotage else rep.holds) else 1


def _finished(root: str, variants: str = "") -> bool:
    """Whether the check at ``root`` wrote its export and a verdict that measured every effect it gates (the
    last thing a check writes). On remote storage it is not looked up: ``--resume`` restores it instead,
    which finishes at once. ``variants`` (comma-separated): the grid this replication runs; a finished check
    of another grid (the gate's against ``--all-effects``') is refused in one line, not kept in its table."""
    path = Path(root) / "report" / CHECK_JSON
    if "://" in root or not (Path(root) / "export" / "runs.parquet").exists() or not path.exists():
        return False
    from analysis.known_answer import NOT_CHECKABLE

    effects = json.loads(path.read_text()).get("effects", [])
    done = bool(effects) and all(e["estimate"] is not None for e in effects if e["verdict"] != NOT_CHECKABLE)
    ran = _measured_variants(root) if done and variants else []
    if ran and ran != sorted(parse_variants(variants)):
        raise ConfigError(f"--resume: the check at {root} measured {','.join(ran)}, this replication measures "
                          f"{variants}; give the replication another --name (or the same flags as before)")
    return done


def _measured_variants(root: str) -> list[str]:
    """The variants the check at ``root`` measured (its export's measure runs), sorted."""
    import pandas as pd

    runs = pd.read_parquet(Path(root) / "export" / "runs.parquet", columns=["phase", "variant"])
    return sorted(set(runs.loc[runs["phase"] == "measure", "variant"]))


def argparse_ns(args, name: str):
    import argparse

    return argparse.Namespace(**{**vars(args), "name": name, "resume": False})


def _without(argv: list[str], *flags: str) -> list[str]:
    """``argv`` without the given flags and their values (``--flag v`` or ``--flag=v``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if any(a.startswith(f + "=") for f in flags):
            continue
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        n = SWEEP.parse(SWEEP, argv).languages
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not n:
        return sweep_main(SWEEP, argv)
    try:
        return replicate(argv, n)
    except ConfigError as e:  # a finished check of another grid under this --name
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
