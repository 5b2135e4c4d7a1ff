"""The literature's ablation tables as one-command recipes (sweeps/recipes/): list, run, plan.

    python sweeps/reproduce.py --list
    python sweeps/reproduce.py bert-t5 --scale smoke                     # end to end on CPU, minutes
    python sweeps/reproduce.py albert-t5 --scale paper --plan --hardware h100 --mfu 0.4 --gpus 8 --price-per-gpu-hour 2.5
    python sweeps/reproduce.py electra-t1 --scale quick --plan --hardware h200
    python sweeps/reproduce.py wettig-mask --scale paper --plan --peak-tflops 400 --mfu 0.35

A recipe fixes the preset, corpus, tasks, seeds and overrides of each scale and the variants of the
paper's table; every other option of the shared frame works as in sweeps/variants.py (--set after the
recipe's overrides wins). The run's report opens with the paper's table beside this run's estimates
(paper_vs_run.md, paper_vs_run.png in the report folder; analysis.paper). ``--plan`` adds, to the shared
planner's table, GPU-hours = FLOPs / (peak x MFU) / 3600 per phase, the wall time on --gpus N (GPU-hours / N,
FLOP-bound) and, with --price-per-gpu-hour, the cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.cli import base_config, build_parser, experiment_root, sweep_defaults  # noqa: E402
from sweeps.frame import Context, Sweep, final_report, sweep_main, sweep_plan, with_shared_data  # noqa: E402
from sweeps.recipes import RECIPES, SCALES, Recipe  # noqa: E402
from trainables.config import ConfigError  # noqa: E402
from trainables.hardware import PLANNER_PEAK_BF16_TFLOPS  # noqa: E402


def list_recipes() -> str:
    lines = []
    for r in RECIPES.values():
        status = f"  NOT RUNNABLE: {r.not_runnable.split(': ', 1)[-1]}" if r.not_runnable else ""
        lines.append(f"{r.name:12s} {r.citation.format()}{status}")
        lines.append(f"{'':12s} variants: " + ", ".join(f"{v.paper_name} -> {v.label}" for v in r.variants))
        for c in r.claims:
            lines.append(f"{'':12s} paper: {c.name} on {c.task}: {c.paper_plus:.1f} vs {c.paper_minus:.1f} "
                         f"({c.paper_diff:+.1f}){'' if c.verified else '  [unverified]'}")
        lines.append(f"{'':12s} scales: {', '.join(r.scales) or 'none'}; {r.note}")
    return "\n".join(lines)


def recipe_of(name: str | None) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"recipe {name!r} is not known; allowed: {', '.join(RECIPES)} (or --list)")
    return RECIPES[name]


def _pre_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("recipe", nargs="?")
    p.add_argument("--scale", default="smoke")
    p.add_argument("--list", action="store_true")
    return p


def _extra_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", nargs="?", help=f"one of: {', '.join(RECIPES)}")
    p.add_argument("--scale", default="smoke", help=f"one of: {', '.join(SCALES)} (default: smoke)")
    p.add_argument("--list", action="store_true", help="print the recipes with their citations and exit")
    p.add_argument("--gpus", type=int, default=1, help="for --plan: GPUs the wall time is divided over")
    p.add_argument("--price-per-gpu-hour", type=float, default=0.0, help="for --plan: the cost at this price")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="for --plan: an accelerator's dense bf16 peak, instead of --hardware's table")


def parse(sweep: Sweep, argv: list[str] | None) -> argparse.Namespace:
    """The shared options, with the recipe's scale as the defaults (preset, corpus, tasks, seeds)."""
    known, _ = _pre_parser().parse_known_args(argv)
    recipe = recipe_of(known.recipe)
    if known.scale not in recipe.scales:
        raise ConfigError(f"--scale {known.scale!r} is not valid; allowed: {', '.join(SCALES)}")
    s = recipe.scales[known.scale]
    p = build_parser("python sweeps/reproduce.py", sweep.doc.split("\n\n")[0])
    _extra_args(p)
    p.set_defaults(**{**sweep_defaults(s.preset), "preset": s.preset, "corpus": s.corpus, "tasks": s.tasks,
                      "seeds": s.seeds, "finetune_seeds": s.finetune_seeds})
    args = p.parse_args(argv)
    args.overrides = list(s.overrides) + list(args.overrides)  # the user's --set comes last and wins
    if args.gpus < 1 or args.price_per_gpu_hour < 0 or args.peak_tflops < 0:
        raise ConfigError("--gpus must be >= 1, --price-per-gpu-hour and --peak-tflops >= 0")
    return args


def measured(ctx: Context):
    recipe = recipe_of(ctx.args.recipe)
    return [(v.label, phases.variant_config(ctx.cfg, v.variant, **v.objective), ctx.args.seeds)
            for v in recipe.variants]


def run(ctx: Context):
    variants = [(name, cfg) for name, cfg, _ in measured(ctx)]
    measure, finetune = phases.measure_and_finetune(variants, ctx.tasks, ctx.args, ctx.root, ctx.progress)
    return None, measure, finetune


def announce(ctx: Context) -> str:
    r, a = recipe_of(ctx.args.recipe), ctx.args
    return (f"reproduce {r.name} at scale {a.scale}: {r.citation.format()}\n"
            f"  preset {a.preset}, corpus {ctx.cfg.data.corpus}, tasks {','.join(ctx.tasks)}; variants "
            f"{', '.join(v.label for v in r.variants)}; {a.seeds} pretraining x {a.finetune_seeds} fine-tuning seeds")


def paper_report(recipe: Recipe, root: str, out=sys.stdout) -> str | None:
    """The paper's table beside this run's (printed first, written as paper_vs_run.md/.png), then the
    shared report."""
    if "://" not in root:
        from analysis.paper import compare, plot, to_markdown

        rows = compare(f"{root}/export", list(recipe.claims))
        title = f"{recipe.citation.authors} {recipe.citation.year}, {recipe.citation.table} vs this run"
        text = to_markdown(rows, title, f"{recipe.citation.format()}. {recipe.note}.")
        report_dir = Path(root) / "report"
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "paper_vs_run.md").write_text(text)
        plot(rows, report_dir / "paper_vs_run.png", title)
        print(text, file=out, flush=True)
    return final_report(root, out)


# --------------------------------------------------------------------------------------------- the plan

def peak_tflops(args) -> tuple[float, str]:
    if args.peak_tflops:
        return args.peak_tflops, f"{args.peak_tflops:g} TFLOPS peak (--peak-tflops)"
    if args.hardware not in PLANNER_PEAK_BF16_TFLOPS:
        raise ConfigError(f"--plan needs --hardware (one of {', '.join(PLANNER_PEAK_BF16_TFLOPS)}) or --peak-tflops")
    peak = PLANNER_PEAK_BF16_TFLOPS[args.hardware]
    return peak, f"{args.hardware} ({peak:g} TFLOPS bf16 peak)"


def gpu_hours(flops: float, peak_tflops: float, mfu: float) -> float:
    return flops / (peak_tflops * 1e12 * mfu) / 3600.0


def cost_table(plan, peak: float, what: str, mfu: float, gpus: int, price: float) -> str:
    """Per phase and in total: runs, tokens, PFLOPs, GPU-hours at ``mfu``, wall on ``gpus``, cost."""
    lines = [f"GPU-hours on {what} at {mfu:.0%} MFU (FLOP-bound: no step floor, perfect scaling over {gpus} GPU(s))",
             f"{'phase':10s}{'runs':>6}{'tokens':>12}{'PFLOPs':>12}{'GPU-h':>11}{'wall':>11}" + ("  cost" if price else "")]
    total = dict(runs=0, tokens=0.0, flops=0.0)
    for p in plan.phases:
        total = dict(runs=total["runs"] + p.runs, tokens=total["tokens"] + p.tokens, flops=total["flops"] + p.flops)
        lines.append(_cost_line(p.name, p.runs, p.tokens, p.flops, peak, mfu, gpus, price))
    lines.append(_cost_line("total", total["runs"], total["tokens"], total["flops"], peak, mfu, gpus, price))
    return "\n".join(lines)


def _cost_line(name, runs, tokens, flops, peak, mfu, gpus, price) -> str:
    h = gpu_hours(flops, peak, mfu)
    wall = h / gpus
    wall_text = f"{wall:8.2f} h" if wall >= 1 else f"{wall * 60:8.1f} m"
    return (f"{name:10s}{runs:>6}{tokens / 1e9:>10.3g} B{flops / 1e15:>12.4g}{h:>11.4g}{wall_text:>11}"
            + (f"  ${h * price:,.0f}" if price else ""))


def plan_main(sweep: Sweep, argv: list[str] | None) -> int:
    """--plan: the shared planner's table (when --hardware names an accelerator), then GPU-hours and cost."""
    try:
        args = sweep.parse(sweep, argv)
        peak, what = peak_tflops(args)
        if args.hardware == "this":  # the planner's own wall column needs a rate; FLOPs do not depend on it
            args.hardware = "h100"
            shared = False
        else:
            shared = True
        root = experiment_root(args, sweep.script)
        cfg = with_shared_data(sweep.configure(args), root)
        from sweeps.progress import Progress
        from trainables.tasks import resolve_tasks

        ctx = Context(cfg, args, root, resolve_tasks(cfg.finetune.tasks), Progress(True, False))
        plan = sweep_plan(sweep, ctx)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(announce(ctx))
    if shared:
        print(plan.format())
    print(cost_table(plan, peak, what, args.mfu, args.gpus, args.price_per_gpu_hour))
    return 0


SWEEP = Sweep("reproduce", __doc__, run, defaults={}, extra_args=_extra_args, parse=parse, configure=base_config,
              announce=announce, measured=measured)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    known, _ = _pre_parser().parse_known_args(argv)
    if known.list:
        print(list_recipes())
        return 0
    if known.recipe is None and {"-h", "--help"} & set(argv):
        p = build_parser("python sweeps/reproduce.py", SWEEP.doc.split("\n\n")[0])
        _extra_args(p)
        p.print_help()
        return 0
    try:
        recipe = recipe_of(known.recipe)
        if recipe.not_runnable:
            raise ConfigError(recipe.not_runnable)
        if known.scale not in recipe.scales:
            raise ConfigError(f"--scale {known.scale!r} is not valid; allowed: {', '.join(SCALES)}")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sweep = dataclasses.replace(SWEEP, report=lambda root: paper_report(recipe, root))
    if "--plan" in argv:
        return plan_main(sweep, argv)
    return sweep_main(sweep, argv)


if __name__ == "__main__":
    sys.exit(main())
