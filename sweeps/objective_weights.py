"""The main job: what do MLM and NSP (or SOP) buy downstream, and which mix is best? With error bars.

    python sweeps/objective_weights.py                      # built-in default: cpu-small, real data, local Ray
    python sweeps/objective_weights.py --preset smoke       # the whole pipeline in a few minutes
    python sweeps/objective_weights.py --preset smoke --storage runs --name demo --resume
    python sweeps/objective_weights.py --preset bert-small --address auto --corpus hub:wikimedia/wikipedia:20231101.en \\
        --storage s3://BUCKET/bert-objectives --tasks benchmarks     # on a Ray cluster (README: Cluster)

1. Search: Optuna TPE proposes the MLM and NSP/SOP loss weights and the mask ratio; ASHA stops weak
   trials early. Trials are ranked on the linear-probe score on the dev split of a few tasks (the
   same meaning for every objective), never on the training loss.
   At cpu-small a two-trial, 160-step demonstration (--search-steps), said so.
2. Measure: full, mlm_only, mlm_pairs, nsp_only, none (--variants; mlm_only and none at cpu-small and
   cpu-long) and (--measure-best-mix, on except at cpu-small) the best mix found, each over --seeds
   pretraining seeds at full budget (the same batches and initial weights per seed), each fine-tuned
   on the task suite over --finetune-seeds seeds.
3. Report: export (Parquet), analysis, and the contribution table on the terminal; at cpu-small the verdict
   of its rule (docs/rules/cpu-small.toml).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.frame import Context, Sweep, prepare_data, sweep_main  # noqa: E402
from sweeps.runner import Phase, run_phase  # noqa: E402
from trainables.config import ConfigError, ExperimentConfig  # noqa: E402

# What is this script's own at each preset: the search and the best mix (seeds, GPUs and CPUs per trial come
# from sweeps.cli.PRESET_DEFAULTS; sized by measurement on 2 cores, docs/presets.md: fewer, longer runs).
# The instrument check (--check) runs first wherever it is a small part of the job; not at smoke (the plumbing in
# a minute or two, which the check would outlast) nor at gpu-quick (a quarter hour of one GPU, and the check's
# trials are CPU trials at its own preset).
DEFAULTS = {
    "smoke": dict(num_samples=4, check=False),
    # Two cores, 20 minutes, one question answered: MLM's effect over none (mlm_only; none costs no pretraining)
    # over four pretraining seeds, judged by the preset's own rule (docs/rules/cpu-small.toml). NSP, SOP and ELECTRA
    # learn too slowly to be read at this budget: the summary's Next names the run that measures them. The search
    # stays, as a demonstration of Optuna with ASHA (two trials of 160 steps; the summary says so): its ranking at
    # that budget is noise, and measuring its mix would cost four more runs.
    "cpu-small": dict(num_samples=2, seeds=4, search_steps=160, measure_best_mix=False, check=True, variants="mlm_only,none",
                      preset_rule="docs/rules/cpu-small.toml"),
    # Two cores, over an hour: no search; MLM's effect over none alone (mlm_only; none costs no pretraining) over six
    # pretraining seeds, each run ~30 M tokens, past where the effect first shows on real text (docs/presets.md).
    # Three seeds of full and mlm_only leave it borderline; NSP's loss effect needs full and mlm_pairs too: --variants
    # full,mlm_only,mlm_pairs,none (18 pretraining runs at six seeds: a GPU's job).
    "cpu-long": dict(num_samples=0, measure_best_mix=False, check=True, variants="mlm_only,none"),
    # One H200: eight search trials, four at a time on the shared GPU; the best mix is measured over the seeds.
    "gpu-quick": dict(num_samples=8, measure_best_mix=True, check=False),
    # Clusters: ASHA stops half the trials at each rung, so eight trials cost ~3 full runs (sweeps.plan).
    "bert-mini": dict(num_samples=8, measure_best_mix=True, check=True),
    "bert-small": dict(num_samples=8, measure_best_mix=True, check=True),
    "bert-base": dict(num_samples=4, measure_best_mix=True, check=True),
}
PROBE_TASKS = ("sentiment", "topic")


def searched_objectives(args) -> list[str]:
    """--objectives, or MLM and the --pair objective (BERT's own pair of losses)."""
    from trainables.objectives import OBJECTIVES

    names = [n.strip() for n in (args.objectives or f"mlm,{args.pair}").split(",") if n.strip()]
    bad = [n for n in names if n not in OBJECTIVES]
    if bad or not names:
        raise ConfigError(f"--objectives {args.objectives!r}: unknown {bad or 'empty list'}; allowed: "
                          f"{', '.join(OBJECTIVES)}")
    return names


def search_steps(cfg: ExperimentConfig, args) -> int:
    """A search trial's full budget: --search-steps, or the measured runs' own steps (0 or unset)."""
    steps = int(getattr(args, "search_steps", 0) or 0)
    if steps < 0:
        raise ConfigError(f"--search-steps {steps}: must be >= 0 (0 = the measured runs' own max_steps)")
    return steps or cfg.optim.max_steps


def search_rung(cfg: ExperimentConfig, args) -> int:
    """Steps between ASHA's rungs, where search trials are evaluated and probed (``sweeps.plan.search_rungs``)."""
    from sweeps.plan import search_rungs

    return max(search_steps(cfg, args) // search_rungs(args.num_samples), 1)


def _search_config(cfg: ExperimentConfig, args) -> tuple[ExperimentConfig, dict, dict]:
    """The search trials' base config (BERT's own mix to start from), the space and the first point."""
    from ray import tune

    from trainables.objectives import OBJECTIVES

    names = searched_objectives(args)
    space = {f"{n}_weight": tune.uniform(*OBJECTIVES[n].search) for n in names}
    space["mask_ratio"] = tune.uniform(0.1, 0.5)
    start = {**{f"{n}_weight": 1.0 for n in names}, "mask_ratio": 0.15}  # BERT's own mix is the first point
    rungs = search_rung(cfg, args)
    # A reserved pretraining seed (phases.search_seed): the measurement of best_mix never re-uses the trial
    # that won the search, and it is measured at the same seeds 0..P-1 as every variant it is compared with.
    search_cfg = cfg.replace(objective=_mix(cfg, "custom", start),
                             optim=replace(cfg.optim, max_steps=search_steps(cfg, args)),
                             run=replace(cfg.run, seed=phases.search_seed(cfg), eval_every=rungs,
                                         checkpoint_every=rungs))
    return search_cfg, space, start


def search_phase(cfg: ExperimentConfig, args, root: str) -> Phase:
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch
    from optuna.samplers import TPESampler

    from trainables.tune_adapters import pretrain_trainable

    search_cfg, space, start = _search_config(cfg, args)
    rungs = search_rung(cfg, args)
    searcher = OptunaSearch(metric="probe_score", mode="max", points_to_evaluate=[start],
                            sampler=TPESampler(seed=cfg.run.seed, n_startup_trials=max(args.num_samples // 2, 1)))
    limit = args.max_concurrent or max(args.num_samples, 1)
    asha = ASHAScheduler(time_attr="step", metric="probe_score", mode="max", max_t=max(search_steps(cfg, args), 1),
                         grace_period=rungs, reduction_factor=2)
    return Phase("search", phases.flatten(pretrain_trainable),
                 {**space, "cfg": search_cfg.to_dict(), "phase": "search",
                  **phases.common_trial_config(args, root, list(PROBE_TASKS))},
                 phases.pretrain_resources(args), num_samples=args.num_samples,
                 search_alg=ConcurrencyLimiter(searcher, max_concurrent=limit), scheduler=asha)


def pair_format(names: list[str]) -> str:
    """The input format whose pairs the searched pair objectives train (``sop_pairs`` for --pair sop); BERT's
    ``nsp_pairs`` when none is searched. Objectives that need differently built pairs are refused by the
    config, in one line."""
    from trainables.objectives import OBJECTIVES

    built = sorted({OBJECTIVES[n].pairs for n in names if OBJECTIVES[n].pairs})
    return f"{built[0]}_pairs" if built else "nsp_pairs"


def _mix(cfg: ExperimentConfig, name: str, values: dict[str, float]):
    """An objective named ``name`` with the given ``<objective>_weight`` values (others off) and mask ratio,
    on the pair inputs the searched pair loss trains on (``pair_format``: it may be switched on)."""
    weights = {k[:-len("_weight")]: v for k, v in values.items() if k.endswith("_weight")}
    changes = {"mask_ratio": values["mask_ratio"]} if "mask_ratio" in values else {}
    return replace(phases.variant_config(cfg, "full").objective, variant=name, weights=weights,
                   input_format=pair_format(list(weights)), **changes)


def _value(objective, key: str) -> float:
    return objective.mask_ratio if key == "mask_ratio" else objective.weights[key[:-len("_weight")]]


def best_mix(search_grid) -> dict[str, float] | None:
    """The completed (full-budget) trial with the highest final probe score; ASHA-stopped trials are
    excluded so that a trial cut short at a lucky rung cannot win."""
    from trainables.tune_adapters import searched_keys

    best, best_score = None, -math.inf
    for r in search_grid:
        m = r.metrics or {}
        if r.error is None and m.get("final") and not m.get("failed") and m.get("probe_score", -math.inf) > best_score:
            best, best_score = r.config, m["probe_score"]
    if best is None:
        return None
    return {k: float(best[k]) for k in searched_keys() if k in best}


def run(ctx: Context):
    cfg, args, root = ctx.cfg, ctx.args, ctx.root
    if args.check:  # the instrument check first: a pipeline that recovers no planted effect says nothing here
        from sweeps.known_answer import run_check

        run_check(ctx)  # writes instrument_check/report/known_answer.json, which the report and the exit status read
    prepare_data(cfg, list(PROBE_TASKS), corpus=False)
    search = run_phase(search_phase(cfg, args, root), root, args, ctx.progress) if args.num_samples else None
    if search is not None and search_steps(cfg, args) < cfg.optim.max_steps:
        print(f"search: a demonstration of the search at this budget (Optuna TPE with ASHA over the loss weights and "
              f"the mask ratio, {args.num_samples} trials of {search_steps(cfg, args)} steps against the measured runs' "
              f"{cfg.optim.max_steps}): its ranking is not a finding", flush=True)
    mix = best_mix(search) if search is not None else None
    full = phases.variant_config(cfg, "full").objective
    if mix and all(abs(_value(full, k) - v) < 1e-9 for k, v in mix.items()):
        print(f"best mix found: {mix}, which is BERT's own mix (= full): not measured twice", flush=True)
        mix = None
    elif mix and not args.measure_best_mix:
        print(f"best mix found: {mix}; not measured (--measure-best-mix measures it over the seeds)", flush=True)
    elif mix:
        print(f"best mix found: {mix}", flush=True)
    elif search is not None:
        print("no search trial completed its full budget: best_mix is not measured", flush=True)
    # Measurement runs are scored by fine-tuning; probing them at every evaluation would cost the budget.
    variants = [(name, vcfg) for name, vcfg, _ in measured(ctx, mix)]
    return {"search": search, **phases.measure_and_read(variants, ctx.tasks, args, root, ctx.progress)}


def _extra_args(p) -> None:
    p.add_argument("--pair", choices=("nsp", "sop"), default="nsp", help="the pair objective searched beside MLM")
    p.add_argument("--objectives", help="the objectives whose weights are searched, comma-separated "
                                        "(default: mlm and --pair)")
    p.add_argument("--measure-best-mix", action=argparse.BooleanOptionalAction, default=True,
                   help="measure the searched mix over the seeds beside the named variants "
                        "(default: on; off at cpu-small, whose two-trial search cannot tell a mix from BERT's)")
    p.add_argument("--search-steps", type=int, default=0,
                   help="a search trial's full budget in steps (default: the preset's; 0 = the measured runs' own "
                        "max_steps). A shorter search than the measurement is a demonstration of the search, and the "
                        "summary says so")
    p.add_argument("--variants", help="the named variants measured over the seeds, comma-separated (default: the "
                                      "preset's; " + ",".join(phases.MEASURE_VARIANTS) + " at most presets)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="run the instrument check's gate first (what sweeps/known_answer.py runs: MLM's planted "
                        "word classes recovered and nothing called on the null task; 1-4 minutes on 2 cores), open "
                        "the report's headline with its result and exit 1 if it failed (default: on, off at smoke "
                        "and gpu-quick; --no-check skips it)")


PLANNED = object()  # measured()'s mix before the search has found one: planned at full's cost


def measured(ctx: Context, mix: dict | None | object = PLANNED):
    """The grid the measure phase runs, for the plan and the run alike: the named variants and, when it is measured
    (--measure-best-mix after a search), the searched ``mix`` as ``best_mix``; before the search (the plan) it
    costs what full does, after it only a mix found and not BERT's own is measured."""
    a = ctx.args
    out = [(n, phases.variant_config(ctx.cfg, n), a.seeds) for n in measure_variants(a)]
    if not (a.num_samples and a.measure_best_mix) or mix is None:
        return out
    if mix is PLANNED:
        return out + [("best_mix", phases.variant_config(ctx.cfg, "full"), a.seeds)]
    return out + [("best_mix", ctx.cfg.replace(objective=_mix(ctx.cfg, "best_mix", mix)), a.seeds)]


def measure_variants(args) -> tuple[str, ...]:
    """The named variants the measure phase runs: --variants, or the main job's grid (phases.MEASURE_VARIANTS)."""
    text = getattr(args, "variants", None)
    if not text:
        return phases.MEASURE_VARIANTS
    return tuple(phases.parse_variants(text))


def searched(ctx: Context):
    return ctx.args.num_samples, _search_config(ctx.cfg, ctx.args)[0], PROBE_TASKS


def _check(root: str) -> dict | None:
    """The instrument check's verdicts (``--check``), or None when it did not run."""
    path = Path(root) / "instrument_check" / "report" / "known_answer.json"
    return json.loads(path.read_text()) if "://" not in root and path.exists() else None


def report(root: str, out=None) -> str | None:
    """The usual report; its summary's Check line and its headline read the instrument check's result when
    ``--check`` ran, each quoted contrast saying whether the check vouches for it."""
    from sweeps.frame import final_report

    return final_report(root, out, check=_check(root))


def status(root: str) -> int:
    """1 when ``--check`` ran and failed (the report is written first): a pipeline that cannot recover the planted
    effects cannot be read on the real tasks."""
    check = _check(root)
    return 1 if check is not None and not check["passed"] else 0


def planned_before(ctx: Context) -> list:
    """The instrument check's row of the plan, when ``--check`` runs it."""
    if not ctx.args.check:
        return []
    from sweeps.known_answer import check_plan

    return check_plan(ctx)


SWEEP = Sweep("objective_weights", __doc__, run, defaults=DEFAULTS, extra_args=_extra_args, measured=measured,
              searched=searched, report=report, status=status, planned_before=planned_before)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
