"""Search phase: how the downstream probe score responds to loss weights and the mask ratio.

Only search runs that completed their full budget count (status 'completed' and the largest step
count among completed search runs): ASHA-stopped trials saw less training and would confound the
response with the budget. Response = Spearman correlation of each varied parameter with the probe
score; importance = Optuna's fANOVA and PED-ANOVA evaluators on an in-memory study rebuilt from the
trials (``optuna.trial.create_trial`` with a FloatDistribution over each parameter's observed range).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import numpy as np
import optuna
import pandas as pd
from scipy import stats as sps

SEARCH_PARAMS = ("mlm_weight", "nsp_weight", "sop_weight", "mask_ratio")
MIN_TRIALS_FOR_IMPORTANCE = 4

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchSummary:
    trials: pd.DataFrame  # run_id, the varied params, probe_score (full-budget completed trials)
    params: tuple[str, ...]  # the parameters that varied
    spearman: dict[str, float]  # param -> rank correlation with the probe score
    importance: dict[str, dict[str, float]]  # evaluator name -> param -> normalised importance
    excluded: dict[str, int]  # reason -> search trials left out
    messages: list[str] = field(default_factory=list)


def full_budget_trials(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Completed, full-budget search trials with a measured probe score; counts of the rest."""
    search = runs[runs["phase"] == "search"]
    excluded = {f"status {k}": int(v) for k, v in
                search.loc[search["status"] != "completed", "status"].value_counts().items()}
    done = search[search["status"] == "completed"]
    if "steps" in done.columns and not done.empty:
        short = done["steps"] < done["steps"].max()
        if short.any():
            excluded["completed with fewer steps than the full budget"] = int(short.sum())
        done = done[~short]
    scored = done[np.isfinite(done["probe_score"].astype(float))]
    if len(scored) < len(done):
        excluded["no probe score"] = len(done) - len(scored)
    return scored, excluded


def build_study(trials: pd.DataFrame, params: tuple[str, ...]) -> optuna.Study:
    """An in-memory maximising study holding one finished trial per row."""
    dists = {p: optuna.distributions.FloatDistribution(float(trials[p].min()), float(trials[p].max()))
             for p in params}
    study = optuna.create_study(direction="maximize", storage=None)
    study.add_trials([optuna.trial.create_trial(params={p: float(r[p]) for p in params},
                                                distributions=dists, value=float(r["probe_score"]))
                      for _, r in trials.iterrows()])
    return study


def parameter_importance(study: optuna.Study, seed: int = 0) -> tuple[dict[str, dict[str, float]], list[str]]:
    """fANOVA and PED-ANOVA importances; an evaluator that cannot run leaves a message instead."""
    evaluators = {"fanova": optuna.importance.FanovaImportanceEvaluator(seed=seed),
                  "ped_anova": optuna.importance.PedAnovaImportanceEvaluator()}
    out, messages = {}, []
    for name, ev in evaluators.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out[name] = {k: float(v) for k, v in optuna.importance.get_param_importances(
                    study, evaluator=ev).items()}
            except (ValueError, RuntimeError, ZeroDivisionError) as err:
                messages.append(f"{name} importance not computed: {err}")
    return out, messages


def demonstration(runs: pd.DataFrame) -> str:
    """Says so when the search trials trained fewer steps than the measured runs (--search-steps): a
    demonstration of the search at this budget, whose ranking is not a finding; '' otherwise."""
    search, measure = runs[runs["phase"] == "search"], runs[(runs["phase"] == "measure") & (runs["steps"] > 0)]
    if search.empty or measure.empty or "steps" not in runs.columns:
        return ""
    longest, measured = int(search["steps"].max()), int(measure["steps"].max())
    if longest >= measured:
        return ""
    return (f"a demonstration of the search at this budget: its trials trained at most {longest} steps, the measured "
            f"runs {measured}; its ranking of loss weights and mask ratios is not a finding")


def summarize_search(runs: pd.DataFrame, seed: int = 0) -> SearchSummary | None:
    """The search-phase response, or None when the export has no search runs."""
    if not (runs["phase"] == "search").any():
        return None
    trials, excluded = full_budget_trials(runs)
    params = tuple(p for p in SEARCH_PARAMS if p in trials.columns and trials[p].nunique() > 1)
    keep = trials[["run_id", *params, "probe_score"]].reset_index(drop=True)
    messages, spearman, importance = [], {}, {}
    demo = demonstration(runs)
    if demo:
        messages.append(demo)
    if len(trials) < 3 or not params:
        messages.append(f"{len(trials)} full-budget search trials with {len(params)} varied parameters: "
                        "too few to describe a response")
        return SearchSummary(keep, params, spearman, importance, excluded, messages)
    for p in params:
        spearman[p] = float(sps.spearmanr(trials[p], trials["probe_score"]).statistic)
    if len(trials) >= MIN_TRIALS_FOR_IMPORTANCE:
        importance, msgs = parameter_importance(build_study(trials, params), seed)
        messages += msgs
    else:
        messages.append(f"{len(trials)} trials: parameter importance needs >= {MIN_TRIALS_FOR_IMPORTANCE}")
    return SearchSummary(keep, params, spearman, importance, excluded, messages)
