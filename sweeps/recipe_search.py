"""Search the pretraining recipe on held-out MLM accuracy at a fixed token budget, then confirm the best.

    python sweeps/recipe_search.py                                   # cpu-small, ~6 M tokens per run
    python sweeps/recipe_search.py --preset smoke --num-samples 4 --seeds 1
    python sweeps/recipe_search.py --tokens 15e6 --set optim.lr=2e-3 # another budget, another starting recipe

1. Search: Optuna TPE proposes the peak learning rate, the batch size, the mask ratio and the warmup share
   for one variant (``--variant``, default ``mlm_only``), starting from the preset's own recipe; every
   trial trains on the same number of token slots (``--tokens``; its steps follow its batch), and ASHA
   stops weak trials at a quarter and half of the tokens. The score is held-out MLM accuracy at the fixed
   15% evaluation mask, so recipes with different mask ratios compare.
2. Confirm: the best ``--top`` searched recipes and the preset's own (``baseline``) are re-run at the
   measurement seeds (``--seeds``, default 2): a search ranks recipes on one seed and keeps the luckiest,
   so its winner's score is biased upward; the fresh seeds are what a recipe is judged on.

The search's seed is reserved (``sweeps.phases.SEARCH_SEED``), so a confirmation run never repeats a search
trial. The table at the end gives each recipe's accuracy per seed and its difference from the baseline
at the same seed; ``runs.parquet`` in the export holds every trial with its config. Nothing is fine-tuned:
MLM accuracy is the pretraining question this answers (docs/pretraining-recipes.md).
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.frame import Context, Sweep, sweep_main  # noqa: E402
from sweeps.runner import Phase, run_phase  # noqa: E402
from trainables.config import ConfigError, ExperimentConfig  # noqa: E402

METRIC = "eval/mlm_acc"
DEFAULTS = {"smoke": dict(num_samples=4, seeds=1, finetune_seeds=0),
            "cpu-small": dict(num_samples=12, seeds=2, finetune_seeds=0),
            "cpu-long": dict(num_samples=12, seeds=2, finetune_seeds=0),
            "known-answer": dict(num_samples=8, seeds=2, finetune_seeds=0),
            "gpu-quick": dict(num_samples=16, seeds=2, finetune_seeds=0),
            **{p: dict(num_samples=8, seeds=2, finetune_seeds=0) for p in ("bert-mini", "bert-small", "bert-base")}}
# Ranges around the presets' recipes and the literature's: peak rates from RoBERTa's 6e-4 to cramming's ~1e-3 and
# the few-layer models' 2e-3-5e-3; batches of 8-64 sequences (more, smaller updates pay off at a small token
# budget on two cores: docs/pretraining-recipes.md); mask ratios 0.10-0.40 (Wettig et al. 2023); warmup 0-20%
# of the steps.
SPACE = {"optim.lr": ("loguniform", 3e-4, 5e-3), "optim.batch_size": ("choice", 8, 16, 32, 64),
         "objective.mask_ratio": ("uniform", 0.10, 0.40), "optim.warmup_frac": ("uniform", 0.0, 0.2)}


def space(base: dict) -> dict:
    """Tune's search space, each range widened to hold the preset's own value (the first trial's)."""
    from ray import tune

    out = {}
    for key, (kind, *args) in SPACE.items():
        if kind == "choice":
            out[key] = tune.choice(sorted({*args, int(base[key])}))
        else:
            out[key] = getattr(tune, kind)(min(args[0], base[key]), max(args[1], base[key]))
    return out


def baseline_point(cfg: ExperimentConfig) -> dict:
    """The preset's own recipe, the search's first trial and the confirmation's reference."""
    return {"optim.lr": cfg.optim.lr, "optim.batch_size": cfg.optim.batch_size,
            "objective.mask_ratio": cfg.objective.mask_ratio, "optim.warmup_frac": cfg.optim.warmup_frac}


def budget_tokens(cfg: ExperimentConfig, args) -> float:
    """Token slots per run: --tokens, or the preset's own (max_steps x batch x sequence length)."""
    tokens = args.tokens if args.tokens else cfg.optim.max_steps * cfg.optim.batch_size * cfg.data.seq_len
    if not tokens or tokens < max(SPACE["optim.batch_size"][1:]) * cfg.data.seq_len or not math.isfinite(tokens):
        raise ConfigError(f"--tokens {args.tokens}: must be at least one step of the largest batch "
                          f"({max(SPACE['optim.batch_size'][1:])} x {cfg.data.seq_len} token slots)")
    return float(tokens)


def variant_cfg(ctx: Context) -> ExperimentConfig:
    return phases.variant_config(ctx.cfg, ctx.args.variant)


def search_phase(ctx: Context) -> Phase:
    from optuna.samplers import TPESampler
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    from trainables.tune_adapters import pretrain_trainable

    args, cfg = ctx.args, variant_cfg(ctx)
    tokens = budget_tokens(ctx.cfg, args)
    rung = tokens / 4  # evaluations (and ASHA's rungs) at a quarter, half and all of the tokens
    search_cfg = cfg.replace(run=replace(cfg.run, seed=phases.search_seed(cfg)))
    searcher = OptunaSearch(metric=METRIC, mode="max", points_to_evaluate=[baseline_point(cfg)],
                            sampler=TPESampler(seed=cfg.run.seed, n_startup_trials=max(args.num_samples // 2, 1)))
    # tokens_seen counts real tokens, fewer than the slots (short segments, padding): the rungs are set a little early
    asha = ASHAScheduler(time_attr="tokens_seen", metric=METRIC, mode="max", max_t=int(tokens),
                         grace_period=int(0.8 * rung), reduction_factor=2)
    return Phase("search", phases.flatten(pretrain_trainable),
                 {**space(baseline_point(cfg)), "cfg": search_cfg.to_dict(), "phase": "search", "tokens_per_run": tokens,
                  "tokens_per_eval": rung, **phases.common_trial_config(args, ctx.root, [])},
                 phases.pretrain_resources(args), num_samples=args.num_samples,
                 search_alg=ConcurrencyLimiter(searcher, max_concurrent=args.max_concurrent or args.num_samples),
                 scheduler=asha)


def best_recipes(search_grid, top: int) -> list[dict]:
    """The ``top`` trials that completed the whole budget, by final MLM accuracy (ASHA-stopped trials are out: a
    trial stopped early is not a recipe of this budget)."""
    done = [r for r in search_grid if r.error is None and (r.metrics or {}).get("final")
            and math.isfinite((r.metrics or {}).get(METRIC, math.nan))]
    done.sort(key=lambda r: -r.metrics[METRIC])
    return [{k: r.config[k] for k in SPACE} for r in done[:top]]


def recipe_name(point: dict) -> str:
    """'lr2e-03_b16_m0.30_w0.10': a recipe's values in its run ids."""
    return (f"lr{point['optim.lr']:.0e}_b{int(point['optim.batch_size'])}_m{point['objective.mask_ratio']:.2f}"
            f"_w{point['optim.warmup_frac']:.2f}")


def recipe_config(cfg: ExperimentConfig, point: dict, tokens: float) -> ExperimentConfig:
    from trainables.overrides import apply_overrides
    from trainables.tune_adapters import at_tokens

    return at_tokens(apply_overrides(cfg, point), tokens, tokens / 4)


def confirmations(ctx: Context, recipes: list[dict]) -> list[tuple[str, ExperimentConfig]]:
    """The baseline and each searched recipe, named, at the run's token budget (measured at --seeds)."""
    cfg, tokens = variant_cfg(ctx), budget_tokens(ctx.cfg, ctx.args)
    out = [("baseline", recipe_config(cfg, baseline_point(cfg), tokens))]
    base = recipe_name(baseline_point(cfg))
    return out + [(recipe_name(p), recipe_config(cfg, p, tokens)) for p in recipes if recipe_name(p) != base]


def run(ctx: Context):
    search = run_phase(search_phase(ctx), ctx.root, ctx.args, ctx.progress)
    variants = confirmations(ctx, best_recipes(search, ctx.args.top))
    specs = phases.measurement_specs(variants, ctx.args.seeds, ctx.args.first_seed)
    measure = run_phase(phases.measure_phase(specs, ctx.args, ctx.root, []), ctx.root, ctx.args, ctx.progress)
    return {"search": search, "measure": measure}


def recipe_table(runs) -> str:
    """Per recipe: its values, MLM accuracy at each seed, and the difference from the baseline at that seed."""
    import pandas as pd

    m = runs[(runs["phase"] == "measure") & (runs["status"] == "completed")].copy()
    if m.empty:
        return "no completed confirmation run"
    acc = m.pivot_table(index="variant", columns="pretrain_seed", values="mlm_acc")
    lines = ["held-out MLM accuracy at the fixed 15% evaluation mask, each recipe at the same token slots "
             "(confirmation seeds; the difference is from the baseline at the same seed):"]
    rows = []
    for name in acc.index:
        row = {"recipe": name}
        for seed in acc.columns:
            base = acc.loc["baseline", seed] if "baseline" in acc.index else math.nan
            row[f"seed {seed}"] = f"{acc.loc[name, seed]:.1%}" + ("" if name == "baseline" else
                                                                 f" ({(acc.loc[name, seed] - base) * 100:+.1f})")
        row["steps"] = int(m[m["variant"] == name]["steps"].max())
        row["minutes"] = f"{m[m['variant'] == name]['wall_time_s'].mean() / 60:.1f}"
        rows.append(row)
    order = ["baseline"] + [n for n in acc.index if n != "baseline"]
    table = pd.DataFrame(rows).set_index("recipe").loc[order]
    return "\n".join(lines) + "\n" + table.to_string()


def report(root: str) -> str | None:
    """The recipe table on the terminal and in ``<root>/report/recipes.md``."""
    import pandas as pd

    if "://" in root:
        print(f"export: {root}/export (runs.parquet holds every trial)")
        return None
    runs = pd.read_parquet(f"{root}/export/runs.parquet")
    text = recipe_table(runs)
    print(text, flush=True)
    out = Path(root) / "report"
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipes.md").write_text(f"# Pretraining recipes: {root}\n\n```\n{text}\n```\n")
    return str(out)


def _extra_args(p) -> None:
    p.add_argument("--variant", default="mlm_only", help="the variant whose recipe is searched (default: mlm_only)")
    p.add_argument("--tokens", type=float, default=0.0,
                   help="token slots per run (batch x sequence length x steps); default: the preset's own")
    p.add_argument("--top", type=int, default=2, help="searched recipes confirmed at the measurement seeds")


def announce(ctx: Context) -> str:
    a = ctx.args
    if a.num_samples < 1 or a.top < 1 or a.seeds < 1:
        raise ConfigError(f"--num-samples {a.num_samples} --top {a.top} --seeds {a.seeds}: each must be at least 1")
    return (f"recipe search {a.name}: preset {a.preset}, variant {a.variant}, {budget_tokens(ctx.cfg, a) / 1e6:.3g} M "
            f"token slots per run; {a.num_samples} search trials, then the baseline and the best {a.top} at "
            f"{a.seeds} seed{'' if a.seeds == 1 else 's'}")


def measured(ctx: Context):
    """For the plan: the confirmation grid at its largest (the baseline and --top recipes)."""
    cfg = confirmations(ctx, [])[0][1]
    return [(f"recipe{i}", cfg, ctx.args.seeds) for i in range(ctx.args.top + 1)]


def searched(ctx: Context):
    return ctx.args.num_samples, confirmations(ctx, [])[0][1]


SWEEP = Sweep("recipe_search", __doc__, run, defaults=DEFAULTS, extra_args=_extra_args, announce=announce,
              report=report, measured=measured, searched=searched)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
