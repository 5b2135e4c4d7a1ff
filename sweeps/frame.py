"""The frame every sweep script shares: parse, validate, announce, prepare data, start Ray, run, export,
report. A script is a ``Sweep``: its run function (the phases it runs) and, where it differs from the
default, how it parses its arguments, builds its config, announces itself and reports.

    SWEEP = Sweep("variants", __doc__, defaults=DEFAULTS, extra_args=_extra_args, measured=measured)
    def main(argv=None): return sweep_main(SWEEP, argv)

Its phases are ``sweeps.phases.PHASES``: a script that declares only what it measures (``measured``) runs the
measurement grid and its reads (``sweeps.phases.measure_and_read``), and its plan is built from the same list.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sweeps.cli import base_config, build_parser, experiment_root, sweep_defaults
from sweeps.export import export
from sweeps.progress import Progress
from sweeps.runner import configure_logging, init_ray, log_to_file, mps_advice, reset_logging
from trainables.config import ConfigError, ExperimentConfig
from trainables.data.text import CorpusError


@dataclass(frozen=True)
class Context:
    """What a sweep's run function gets: the validated config, the arguments, where results go."""

    cfg: ExperimentConfig
    args: argparse.Namespace
    root: str
    tasks: list[str]
    progress: Progress


def prepare_data(cfg: ExperimentConfig, task_names: list[str], corpus: bool = True, root: str = "") -> None:
    """Fetch the tasks (before trials race for them, and so that the corpus can be decontaminated against
    them), then prepare the corpus once, on Ray Data over every CPU of the cluster, into
    ``data.prepared_root`` (every trial memory-maps it), refuse runs that would repeat it more than
    data.allow_epochs times, and write what decontamination removed into ``<root>/export/corpus.json``
    for the report."""
    from trainables.data.prepare import prepare_run
    from trainables.data.sources import language_of
    from trainables.tasks import load_task

    for name in task_names:
        load_task(name, cfg.data.cache_dir or None, language=language_of(cfg.data.corpus))
    if corpus:
        uri = prepare_run(cfg, engine="ray")
        check_prepared_epochs(cfg, uri)
        if root:
            write_corpus_record(uri, root)


def write_corpus_record(dir_uri: str, root: str) -> None:
    """``<root>/export/corpus.json``: the prepared corpus's fingerprint, counts and decontamination record."""
    import json
    import posixpath

    from sweeps.export import write_text
    from trainables.data import shards

    fs, base = shards.filesystem(dir_uri)
    m = shards.read_json(fs, posixpath.join(base, shards.MANIFEST)) or {}
    keep = ("fingerprint", "corpus", "documents", "sentences", "tokens", "decontamination")
    write_text(json.dumps({k: m.get(k) for k in keep}, indent=1), root, "corpus.json")


def train_tokens(dir_uri: str, heldout_fraction: float) -> float | None:
    """A prepared corpus's training tokens from its manifest: all its tokens less the held-out share (the
    held-out part is a share of documents, so this is approximate), or None without a manifest."""
    import posixpath

    from trainables.data import shards

    fs, base = shards.filesystem(dir_uri)
    manifest = shards.read_json(fs, posixpath.join(base, shards.MANIFEST))
    return None if not manifest else manifest["tokens"] * (1.0 - heldout_fraction)


def check_prepared_epochs(cfg: ExperimentConfig, dir_uri: str) -> None:
    """Refuse, before any trial starts, a sweep whose runs would repeat the prepared corpus more than
    data.allow_epochs times (``trainables.presets.check_epochs``)."""
    from trainables.presets import check_epochs

    tokens = train_tokens(dir_uri, cfg.data.heldout_fraction)
    if tokens is not None:
        check_epochs(cfg, tokens)


def with_shared_data(cfg: ExperimentConfig, root: str) -> ExperimentConfig:
    """Prepared corpora live beside the experiments, ``<storage>/data``, so trials on any node find them."""
    if cfg.data.prepared_root:
        return cfg
    from dataclasses import replace

    return cfg.replace(data=replace(cfg.data, prepared_root=f"{root.rsplit('/', 1)[0]}/data"))


def final_report(root: str, out=None, check: dict | None = None) -> str | None:
    """Analysis of the export: the contribution table on the terminal, Markdown/CSV/PNG beside it (``check``: the
    instrument check's verdicts, read by the headline). ``out=None`` prints to ``sys.stdout`` as it is at the call
    (a test's or a notebook's capture), as every sweep's report does."""
    export_dir = f"{root}/export"
    if "://" in root:
        print(f"export: {export_dir} (run `python -m analysis.report` on a local copy for the table)", file=out)
        return None
    from analysis.report import build_report, format_table, write_report

    from analysis.rules import mlm_floor, run_rule

    report = build_report(export_dir, check=check, mlm_floor=mlm_floor(run_rule(root)))
    print(format_table(report), file=out)
    paths = write_report(report, f"{root}/report")
    if report.curves:  # the report's curves in TensorBoard too, beside the runs' streams
        from sweeps.export import write_curves

        write_curves(report.curves, f"{root}/tensorboard/curves")
    return str(Path(paths[0]).parent) if paths else None


def default_parse(sweep: "Sweep", argv: list[str] | None) -> argparse.Namespace:
    p = build_parser(f"python sweeps/{sweep.script}.py", sweep.doc.split("\n\n")[0])
    if sweep.extra_args:
        sweep.extra_args(p)
    known, _ = p.parse_known_args(argv)
    p.set_defaults(**sweep_defaults(known.preset, sweep.defaults))
    return p.parse_args(argv)


def default_announce(ctx: Context) -> str:
    a = ctx.args
    return (f"sweep {a.name}: preset {a.preset}, corpus {ctx.cfg.data.corpus}, tasks {','.join(ctx.tasks)}; "
            f"{a.num_samples} search trials, {a.seeds} pretraining x {a.finetune_seeds} fine-tuning seeds")


@dataclass(frozen=True)
class Sweep:
    """One sweep script. ``run(ctx)`` runs its phases and returns their results by phase name
    (``sweeps.phases.PHASES``); without one, the sweep measures what ``measured`` declares and reads it."""

    script: str
    doc: str
    run: Callable[[Context], dict] | None = None
    defaults: dict[str, dict] = dataclasses.field(default_factory=dict)
    extra_args: Callable[[argparse.ArgumentParser], None] | None = None
    parse: Callable[["Sweep", list[str] | None], argparse.Namespace] = default_parse
    configure: Callable[[argparse.Namespace], ExperimentConfig] = base_config
    announce: Callable[[Context], str] = default_announce
    report: Callable[[str], str | None] = final_report
    # What the phases will run, for the plan: the measured (name, config, seeds) and the search (trials, config).
    measured: Callable[[Context], list[tuple[str, ExperimentConfig, int]]] | None = None
    # the search: (trials, config[, probe tasks])
    searched: Callable[[Context], tuple] | None = None
    # the exit status once the report is written (the instrument check's gate); None: 0
    status: Callable[[str], int] | None = None
    # phases the sweep runs before its own, for the plan (the main job's instrument check): [PhasePlan, ...]
    planned_before: Callable[[Context], list] | None = None


INTERRUPTED = 130  # the exit status of an interrupted sweep (128 + SIGINT), as a shell reports Ctrl-C


def sweep_main(sweep: Sweep, argv: list[str] | None = None) -> int:
    """Parse, validate, announce, prepare the data, start Ray, run the phases, export and report.
    Bad input anywhere before the trials start is one line on stderr and exit status 2."""
    try:
        return _sweep_main(sweep, argv)
    finally:
        reset_logging()


def _sweep_main(sweep: Sweep, argv: list[str] | None = None) -> int:
    t0 = time.time()
    try:
        args = sweep.parse(sweep, argv)
        configure_logging(args.quiet, args.verbose)
        root = experiment_root(args, sweep.script)
        cfg = with_shared_data(sweep.configure(args), root)
        from trainables.tasks import resolve_tasks

        preset_rule(args)
        if getattr(args, "rule", None):  # a rule that cannot be judged fails now, not after an hour of training
            from analysis.rules import inside_repo, load_rule

            load_rule(args.rule)
            inside_repo(args.rule)
        ctx = Context(cfg, args, root, resolve_tasks(cfg.finetune.tasks), Progress(args.quiet, args.verbose))
        if args.plan:
            print(sweep_plan(sweep, ctx).format())
            return 0
        log_file = log_to_file(root)
        print(f"{sweep.announce(ctx)}\nresults: {root}" + (f" (log: {log_file})" if log_file else "")
              + f"\nTensorBoard: tensorboard --logdir {root}", flush=True)
        plan = sweep_plan(sweep, ctx) if sweep.measured and (args.hardware != "this" or not args.gpus_per_trial) else None
        if plan is not None:
            ctx.progress.planned.update({p.name: p.wall_s for p in plan.phases})
        if getattr(args, "rule", None):
            record_rule_start(args.rule, root)
        mps_advice(args, cfg)
        init_ray(args)
        t_prep = time.time()
        if not args.quiet:
            print(f"data: preparing the {cfg.data.corpus} corpus and {len(ctx.tasks)} task{'' if len(ctx.tasks) == 1 else 's'} (once per corpus)",
                  flush=True)
        prepare_data(cfg, ctx.tasks, root=root)
        ctx.progress.times["prepare"] = [t_prep, time.time()]
        if not args.quiet:
            print(f"data: ready in {time.time() - t_prep:.0f} s", flush=True)
        export_dir = export(root, run_phases(sweep, ctx))
    except (ConfigError, CorpusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # nothing is exported or reported from a phase that did not finish
        print(f"interrupted: {e or 'Ctrl-C'}; every finished trial is kept", file=sys.stderr)
        return INTERRUPTED
    report_dir = finish(root, export_dir, t0, sweep.report, plan, ctx.progress)
    status = sweep.status(root) if sweep.status else 0
    if getattr(args, "rule", None):
        passed = judge_rule(args, root, export_dir, report_dir, (time.time() - t0) / 60)
        if getattr(args, "rule_is_presets", False):  # the preset's own rule informs; only --rule sets the status
            if passed is False:
                print("(the preset's own rule: its verdict does not change the exit status; --rule FILE does)")
        else:
            status = status or (0 if passed in (True, None) else RULE_FAILED)
    return status


PROJECT = Path(__file__).resolve().parents[1]


def preset_rule(args: argparse.Namespace) -> None:
    """The rule a preset is judged by when the command is the preset's own (``preset_rule`` in a sweep's DEFAULTS,
    no --set, no --rule): the README's first command prints its verdict too. ``--rule none`` judges nothing. The
    rule is skipped, with one line saying why, where it cannot be judged (not in this checkout, or the command
    runs inside another git repository)."""
    if getattr(args, "rule", None) == "none":
        args.rule = None
        return
    own = getattr(args, "preset_rule", None)
    if getattr(args, "rule", None) or not own:
        return
    if args.overrides:
        print(f"rule: {own} not judged: --set changes the design it was written for", flush=True)
        return
    from analysis.rules import RuleError, inside_repo

    path = PROJECT / own
    try:
        if not path.exists():
            raise RuleError(f"{own} is not in this installation (a checkout has it)")
        inside_repo(path)
    except RuleError as err:
        print(f"rule: the preset's rule is not judged: {err}", flush=True)
        return
    args.rule, args.rule_is_presets = str(path), True


RULE_FAILED = 1  # the exit status of a sweep that finished but failed its --rule


def record_rule_start(rule: str, root: str) -> None:
    """The rule as this run found it (analysis.rules.start_record), kept from the first start: a resumed sweep
    keeps its first record and is marked resumed, so its wall time is not judged."""
    if "://" in root:
        return
    from analysis.rules import RUN_RECORD, start_record

    path = Path(root) / RUN_RECORD
    if path.exists():
        record = json.loads(path.read_text())
        record["resumed"] = True
    else:
        record = start_record(rule)
    path.write_text(json.dumps(record, indent=2) + "\n")


def judge_rule(args: argparse.Namespace, root: str, export_dir: str, report_dir: str | None,
               minutes: float) -> bool | None:
    """The rule's verdict, clause by clause, computed from the export (``analysis.rules``); written as rule.json
    into the export and the report, so the export carries the rule file's hash. None when not judged here."""
    if "://" in root:
        print(f"rule: judge it on a local copy: python -m analysis.rules {args.rule} <local copy of {export_dir}>")
        return None
    from analysis.rules import RUN_RECORD, cpu_kind, judge_export, write_judgement

    check_file = Path(root) / "instrument_check" / "report" / "known_answer.json"
    check = json.loads(check_file.read_text()) if check_file.exists() else None
    record_file = Path(root) / RUN_RECORD
    record = json.loads(record_file.read_text()) if record_file.exists() else None
    kind = None if args.gpus_per_trial else cpu_kind()
    if record is not None:  # a resumed sweep's time is only its last part: not the rule's wall time
        record.update(wall_minutes=None if record.get("resumed") else round(minutes, 2), cpu_kind=kind)
        record_file.write_text(json.dumps(record, indent=2) + "\n")
    judgement = judge_export(args.rule, export_dir, None if (record or {}).get("resumed") else minutes, kind, check,
                             start=record)
    print("\n" + "\n".join(judgement.lines()), flush=True)
    write_judgement(judgement, export_dir, report_dir)
    return judgement.passed


def run_phases(sweep: Sweep, ctx: Context) -> dict:
    """The sweep's phases, run: its own ``run``, or the grid its ``measured`` declares, measured and read."""
    if sweep.run is not None:
        return sweep.run(ctx)
    from sweeps.phases import measure_and_read

    variants = [(name, cfg) for name, cfg, _ in sweep.measured(ctx)]
    return measure_and_read(variants, ctx.tasks, ctx.args, ctx.root, ctx.progress)


def sweep_plan(sweep: Sweep, ctx: Context):
    """The plan of this sweep (``sweeps.plan``) from what its phases will run."""
    from sweeps.plan import plan_sweep

    if sweep.measured is None:
        raise ConfigError(f"sweeps/{sweep.script}.py cannot plan itself: it declares no measured variants")
    plan = plan_sweep(sweep.measured(ctx), sweep.searched(ctx) if sweep.searched else None, ctx.tasks, ctx.args,
                      ctx.cfg)
    if sweep.planned_before:
        plan.phases[:0] = sweep.planned_before(ctx)
    return plan


def finish(root: str, export_dir: str, t0: float, report: Callable[[str], str | None], plan=None,
           progress: Progress | None = None) -> str | None:
    """The last lines every sweep prints: where the export, the report and the TensorBoard logs are, and
    the plan next to what the phases took."""
    print(f"\nexport: {export_dir}", flush=True)
    report_dir = report(root)
    if plan is not None and progress is not None:
        from sweeps.plan import planned_vs_actual

        text = planned_vs_actual(plan, progress.actual())
        print("\n" + text, flush=True)
        if report_dir:
            (Path(report_dir) / "plan.txt").write_text(text + "\n")
            (Path(report_dir) / "plan.json").write_text(plan.to_json() + "\n")
    print(f"report: {report_dir}\nTensorBoard: tensorboard --logdir {root}\n"
          f"finished in {(time.time() - t0) / 60:.1f} min", flush=True)
    return report_dir
