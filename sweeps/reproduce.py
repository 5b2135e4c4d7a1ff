"""The literature's ablation tables as one-command recipes (sweeps/recipes/): list, run, plan.

    python sweeps/reproduce.py --list
    python sweeps/reproduce.py bert-t5 --scale smoke                     # end to end on CPU, minutes
    python sweeps/reproduce.py albert-t5 --scale paper --plan --hardware h100 --mfu 0.4 --gpus 8 --price-per-gpu-hour 2.5
    python sweeps/reproduce.py electra-t1 --scale quick --plan --hardware h200
    python sweeps/reproduce.py wettig-mask --scale paper --plan --peak-tflops 400 --mfu 0.35 --extra-rows

A recipe fixes the preset, corpus, tasks, seeds and overrides of each scale and maps the paper's rows to
variants (sweeps/recipes/); every other option of the shared frame works as in sweeps/variants.py (--set
after the recipe's overrides wins). ``--list``, ``--plan`` and the report print each row beside what it
trains (variant, input, masking, steps, betas), the section or table it is read from, and what the tool
cannot do as the paper did; the paper's protocol beside the run's; the scale's note. The run's report opens
with the paper's table beside this run's estimates, on the paper's metrics (paper_vs_run.md,
paper_vs_run.png in the report folder; analysis.paper), and the paper's intrinsic metrics where it reports
them. ``--plan`` adds, to the shared planner's table, GPU-hours = FLOPs / (peak x MFU) / 3600 per phase, the
wall time on --gpus N (GPU-hours / N, FLOP-bound) and, with --price-per-gpu-hour, the cost; at paper scale,
each row's tokens and FLOPs beside 6 N T at the paper's own size. ``--extra-rows`` adds a recipe's extra rows
(bert-t5: No NSP on single segments; wettig-mask: the 80/10/10 pair).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps.cli import base_config, build_parser, experiment_root, sweep_defaults  # noqa: E402
from sweeps.frame import Context, Sweep, final_report, sweep_main, sweep_plan, with_shared_data  # noqa: E402
from sweeps.recipes import RECIPES, SCALES, Recipe, RecipeVariant, describe, row_config, row_spec  # noqa: E402
from trainables.config import ConfigError  # noqa: E402
from trainables.hardware import PLANNER_PEAK_BF16_TFLOPS  # noqa: E402

PAD = " " * 13


def row_lines(recipe: Recipe, rows: list[tuple[RecipeVariant, object]]) -> list[str]:
    """Each row beside what it trains (its config's ``row_spec``), its source and what it does differently."""
    lines = []
    for v, cfg in rows:
        extra = " (extra row: --extra-rows)" if v.extra else ""
        lines.append(f"{v.paper_name} -> {v.label}{extra}: {describe(row_spec(cfg))}  [{v.source}]")
        lines += [f"    differs: {d}" for d in v.differs]
    lines += [f"every row differs: {d}" for d in recipe.differs]
    return lines


def protocol_lines(recipe: Recipe, seeds: int, finetune_seeds: int) -> list[str]:
    """The paper's protocol (where it says it) and this run's."""
    p = recipe.protocol
    runs = f"{p.statistic} of {p.finetune_runs} fine-tuning runs" if p.finetune_runs else f"fine-tuning runs {p.statistic}"
    return [f"protocol, paper: {runs}, {p.split} set; {p.text}",
            f"protocol, this run: {seeds} pretraining x {finetune_seeds} fine-tuning seeds per row, scored on each "
            "task's test split (for the hub GLUE/SQuAD tasks, the benchmark's dev set; the rate chosen on a dev "
            "split carved from train); differences of means with a multi-bootstrap 95% interval, the difference "
            "of medians over fine-tuning seeds beside it"]


def scale_config(recipe: Recipe, scale: str):
    from trainables.presets import build_config

    return build_config(recipe.scales[scale].preset, overrides=recipe.scale_overrides(scale))


def list_recipes() -> str:
    lines = []
    for r in RECIPES.values():
        status = f"  NOT RUNNABLE: {r.not_runnable.split(': ', 1)[-1]}" if r.not_runnable else ""
        lines.append(f"{r.name:12s} {r.citation.format()}{status}")
        cfg = scale_config(r, "paper")
        lines.append(f"{PAD}rows at paper scale (paper row -> label: what it trains  [where the paper says so]):")
        lines += [f"{PAD}  {x}" for x in row_lines(r, [(v, row_config(cfg, v)) for v in r.variants])]
        for c in r.claims:
            lines.append(f"{PAD}paper: {c.name} on {c.task} ({c.metric}): {c.paper_plus:.1f} vs {c.paper_minus:.1f} "
                         f"({c.paper_diff:+.1f}){'' if c.verified else '  [unverified]'}")
        if r.intrinsic:
            lines.append(f"{PAD}paper, intrinsic: " + ", ".join(f"{i.variant} {i.metric} {i.paper:.1f}" for i in r.intrinsic))
        paper = r.scales["paper"]
        lines += [f"{PAD}{x}" for x in protocol_lines(r, paper.seeds, paper.finetune_seeds)]
        lines += [f"{PAD}scale {name}: {s.note}" for name, s in r.scales.items()]
        lines.append(f"{PAD}{r.note}")
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
    p.add_argument("--extra-rows", action="store_true",
                   help="also train the recipe's extra rows (bert-t5: No NSP on single segments; wettig-mask: 80/10/10)")
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
    overrides = recipe.scale_overrides(known.scale)
    p = build_parser("python sweeps/reproduce.py", sweep.doc.split("\n\n")[0])
    _extra_args(p)
    p.set_defaults(**{**sweep_defaults(s.preset), "preset": s.preset, "corpus": s.corpus, "tasks": s.tasks,
                      "seeds": s.seeds, "finetune_seeds": s.finetune_seeds})
    args = p.parse_args(argv)
    args.overrides = overrides + list(args.overrides)  # the user's --set comes last and wins
    if args.gpus < 1 or args.price_per_gpu_hour < 0 or args.peak_tflops < 0:
        raise ConfigError("--gpus must be >= 1, --price-per-gpu-hour and --peak-tflops >= 0")
    return args


def rows_of(ctx: Context) -> list[tuple[RecipeVariant, object]]:
    """The rows this run trains, each with its config."""
    recipe = recipe_of(ctx.args.recipe)
    return [(v, row_config(ctx.cfg, v)) for v in recipe.rows(ctx.args.extra_rows)]


def measured(ctx: Context):
    return [(v.label, cfg, ctx.args.seeds) for v, cfg in rows_of(ctx)]


def announce(ctx: Context) -> str:
    r, a = recipe_of(ctx.args.recipe), ctx.args
    rows = rows_of(ctx)
    skipped = [v.label for v in r.variants if v.extra and not a.extra_rows]
    lines = [f"reproduce {r.name} at scale {a.scale}: {r.citation.format()}",
             f"  preset {a.preset}, corpus {ctx.cfg.data.corpus}, tasks {','.join(ctx.tasks)}; {a.seeds} pretraining "
             f"x {a.finetune_seeds} fine-tuning seeds; scale {a.scale}: {r.scales[a.scale].note}"]
    lines += [f"  {x}" for x in row_lines(r, rows) + protocol_lines(r, a.seeds, a.finetune_seeds)]
    if skipped:
        lines.append(f"  extra rows not trained (--extra-rows): {', '.join(skipped)}")
    return "\n".join(lines)


def run_rows(root: str, recipe: Recipe) -> list[tuple[RecipeVariant, object]]:
    """The rows the export holds, each with the config its first measure run trained."""
    import json

    from analysis.export import load_export
    from trainables.config import from_dict

    runs = load_export(f"{root}/export").runs
    runs = runs[runs["phase"] == "measure"]
    out = []
    for v in recipe.variants:
        mine = runs[runs["variant"] == v.label]
        if len(mine) and "config_json" in mine.columns and str(mine["config_json"].iloc[0]) not in ("", "{}"):
            out.append((v, from_dict(json.loads(mine["config_json"].iloc[0]))))
    return out


def paper_report(recipe: Recipe, root: str, scale: str = "", out=None) -> str | None:
    """The paper's table beside the run's (printed first, written as paper_vs_run.md/.png) with the rows, the
    protocols and the scale's note under it, then the paper's intrinsic metrics, then the shared report."""
    if "://" not in root:
        from analysis.paper import compare, compare_intrinsic, intrinsic_markdown, plot, to_markdown
        from analysis.report import build_report

        contributions = build_report(f"{root}/export").contributions
        rows = run_rows(root, recipe)
        labels = {v.label for v, _ in rows} or set(contributions.variants)
        ran = tuple(v for v in recipe.variants if v.label in labels)
        table = compare(f"{root}/export", list(recipe.claims_of(ran)), contributions=contributions)
        budget = contributions.budget
        notes = row_lines(recipe, rows) + protocol_lines(recipe, len(contributions.pretrain_seeds),
                                                         budget.finetune_seeds if budget else 0)
        if scale:
            notes.append(f"scale {scale}: {recipe.scales[scale].note}")
        notes += [f"extra row not trained (--extra-rows): {v.label} ({v.paper_name})" for v in recipe.variants
                  if v.label not in labels]
        title = f"{recipe.citation.authors} {recipe.citation.year}, {recipe.citation.table} vs this run"
        text = to_markdown(table, title, f"{recipe.citation.format()}. {recipe.note}.", tuple(notes))
        items = [i for i in recipe.intrinsic if i.variant in labels]
        if items:
            text += "\n" + intrinsic_markdown(compare_intrinsic(f"{root}/export", items),
                                              f"{recipe.citation.table}, intrinsic metrics vs this run",
                                              "The paper's in points; the run's held-out metrics x 100.")
        report_dir = Path(root) / "report"
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "paper_vs_run.md").write_text(text)
        plot(table, report_dir / "paper_vs_run.png", title)
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
    if args.scale == "paper":
        print(compute_table(recipe_of(args.recipe), rows_of(ctx)))
    return 0


def compute_table(recipe: Recipe, rows) -> str:
    """Per row: one pretraining run's tokens and FLOPs as planned, beside T and 6 N T at the paper's own size
    (and the FLOPs the paper reports, where it does)."""
    from sweeps.plan import pretrain_cost

    c = recipe.compute
    n2 = f", 6 N' T with N' = {c.compute_params / 1e6:g}M" if c.compute_params else ""
    ratio, own_head = ("FLOPs/6N'T" if n2 else "FLOPs/6NT"), "6 N' T"
    lines = [f"one pretraining run per row, planned vs the paper's own size (N = {c.params / 1e6:g}M{n2}; {c.source})",
             f"{'row':28s}{'tokens':>10}{'paper T':>10}{'FLOPs':>11}{'6 N T':>11}" + (f"{own_head:>11}" if n2 else "")
             + f"{ratio:>12}{'reported':>11}"]
    for v, cfg in rows:
        tokens, flops = pretrain_cost(cfg)
        six, own = c.six_nt(v.label), c.six_nt(v.label, c.compute_params)
        reported = c.reported_flops.get(v.label)
        lines.append(f"{v.label:28s}{tokens / 1e9:>8.3g} B{c.tokens.get(v.label, float('nan')) / 1e9:>8.3g} B"
                     f"{flops:>11.3g}{six:>11.3g}" + (f"{own:>11.3g}" if n2 else "") + f"{flops / own:>12.2f}"
                     + (f"{reported:>11.3g}" if reported else f"{'-':>11}"))
    return "\n".join(lines)


SWEEP = Sweep("reproduce", __doc__, defaults={}, extra_args=_extra_args, parse=parse, configure=base_config,
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
    sweep = dataclasses.replace(SWEEP, report=lambda root: paper_report(recipe, root, known.scale))
    if "--plan" in argv:
        return plan_main(sweep, argv)
    return sweep_main(sweep, argv)


if __name__ == "__main__":
    sys.exit(main())
