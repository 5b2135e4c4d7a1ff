"""The instrument check: the whole pipeline on a planted language whose answers are known.

    python sweeps/known_answer.py                       # ~10 minutes on 2 CPU cores
    python sweeps/known_answer.py --seeds 5 --plan      # what it costs, without running it
    python sweeps/known_answer.py --set finetune.init=random   # must FAIL: fine-tuning ignores the checkpoint

Data (``data.corpus=planted``: ``trainables.data.planted``) -> preparation -> pretraining of the variants
the planted effects name (none, mlm_only, nsp_only, full, sop_only) over 3 pretraining seeds ->
checkpoints -> fine-tuning on the planted tasks -> export -> analysis, as every sweep. It prints first
one table: each planted effect, its expected sign, the estimate [interval], Holm p over the planted
effects, and recovered / not recovered (``analysis.known_answer``); the null task's intervals should
cover 0; then the usual report. A pipeline that lost the pretrained weights on the way to fine-tuning,
reset the embeddings or paired predictions with the wrong examples recovers no lexical effect.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.cli import build_parser, sweep_defaults  # noqa: E402
from sweeps.frame import Context, Sweep, sweep_main  # noqa: E402
from sweeps.variants import parse_variants  # noqa: E402
from trainables.config import ConfigError  # noqa: E402

PRESET = "known-answer"
VARIANTS = "none,mlm_only,nsp_only,full,sop_only"  # the variants the planted effects name
DEFAULTS: dict[str, dict] = {}  # nothing of its own: seeds per preset are sweeps.cli.PRESET_DEFAULTS


def parse(sweep: Sweep, argv: list[str] | None):
    p = build_parser(f"python sweeps/{sweep.script}.py", sweep.doc.split("\n\n")[0])
    p.set_defaults(preset=PRESET)
    p.add_argument("--variants", default=VARIANTS, help="comma-separated measured variants (default: the planted "
                                                         "effects' own)")
    p.add_argument("--modes", default="finetune,probe", type=lambda t: tuple(m for m in t.split(",") if m),
                   help="finetune and/or probe (a linear probe of the frozen encoder: what pretraining put in it)")
    known, _ = p.parse_known_args(argv)
    p.set_defaults(**sweep_defaults(known.preset, sweep.defaults))
    args = p.parse_args(argv)
    bad = [m for m in args.modes if m not in ("finetune", "probe")]
    if bad or not args.modes:
        raise ConfigError(f"--modes {','.join(args.modes)!r}: unknown {bad or 'empty list'}; allowed: finetune, probe")
    return args


def measured(ctx: Context):
    return [(name, phases.variant_config(ctx.cfg, name), ctx.args.seeds) for name in parse_variants(ctx.args.variants)]


def run(ctx: Context):
    variants = [(name, cfg) for name, cfg, _ in measured(ctx)]
    measure, finetune = phases.measure_and_finetune(variants, ctx.tasks, ctx.args, ctx.root, ctx.progress)
    return None, measure, finetune


def report(root: str, out=sys.stdout) -> str | None:
    """The planted-effects table first, then the usual report; both written beside the export."""
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
    """The planted-effects table of a report, also written to <root>/report/known_answer.md."""
    from analysis.known_answer import check_planted, format_check

    text = format_check(check_planted(rep.contributions))
    out_dir = Path(root) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "known_answer.md").write_text(text + "\n")
    return text


def run_check(ctx: Context) -> str:
    """The instrument check inside another sweep (the main job's ``--check``): the known-answer grid at its
    own preset, in the same Ray session, exported to ``<root>/instrument_check``; returns the check's
    headline ("instrument check: 4 of 4 planted effects recovered; ...")."""
    import argparse

    from analysis.report import build_report
    from sweeps.export import export
    from sweeps.frame import prepare_data, with_shared_data
    from sweeps.progress import Progress
    from trainables.presets import build_config
    from trainables.tasks import resolve_tasks

    root = f"{ctx.root}/instrument_check"
    cfg = with_shared_data(build_config(PRESET), ctx.root)
    args = argparse.Namespace(**{**vars(ctx.args), **sweep_defaults(PRESET, DEFAULTS), "gpus_per_trial": 0,
                                 "workers_per_trial": 1, "modes": ("finetune", "probe")})
    tasks = resolve_tasks(cfg.finetune.tasks)
    prepare_data(cfg, tasks, root=root)
    variants = [(name, phases.variant_config(cfg, name)) for name in parse_variants(VARIANTS)]
    measure, finetune = phases.measure_and_finetune(variants, tasks, args, root,
                                                    Progress(ctx.args.quiet, ctx.args.verbose))
    export(root, None, measure, finetune)
    text = _write_check(build_report(f"{root}/export"), root)
    print(text + "\n", flush=True)
    return text.splitlines()[0]


SWEEP = Sweep("known_answer", __doc__, run, defaults=DEFAULTS, parse=parse, report=report, measured=measured)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
