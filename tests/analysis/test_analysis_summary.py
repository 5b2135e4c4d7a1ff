"""The run summary: each line says its fact, and says FAIL (or the other answer) when the export's fact is the other."""

import json

import numpy as np
import pandas as pd
from analysis_fixtures import SEED_MEANS, write_export

from analysis.contributions import estimate_contributions
from analysis.export import load_export
from analysis.summary import run_summary

CHECK = {"passed": True, "effects": [{"name": "MLM contribution (full - nsp_only)", "verdict": "recovered"},
                                     {"name": "MLM contribution, fine-tuned (full - nsp_only)", "verdict": "recovered"},
                                     {"name": "SOP learns the order", "verdict": "not checkable at this size"}],
         "null": {"called": 0, "covered": 2, "total": 2}}


def _summary(root, runs=None, check=None, mlm_floor=None):
    if runs:
        df = pd.read_parquet(root / "runs.parquet")
        df.assign(**runs).to_parquet(root / "runs.parquet")
    c = estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=200)
    lines = run_summary(c, check, mlm_floor)
    assert [ln.split()[0] for ln in lines] == ["Ran", "Check", "Finding", "Sanity", "Answer", "Detects", "Next"]
    return dict(zip(["ran", "check", "finding", "sanity", "answer", "detects", "next"], lines))


def test_what_ran_and_the_check_in_one_line_each(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    s = _summary(root, runs={"config_json": json.dumps({"preset": "cpu-long"})}, check=CHECK)
    assert s["ran"].startswith("Ran") and "full, mlm_only, mlm_pairs, nsp_only against none at cpu-long" in s["ran"]
    assert "3 pretraining seeds" in s["ran"] and "2 tasks (sst, topic), read by fine-tuning" in s["ran"]
    assert s["check"].startswith("Check    PASS: MLM contribution (2 readings) recovered") and "0 false calls" in s["check"]
    failed = _summary(root, check={**CHECK, "passed": False, "effects": [{**CHECK["effects"][0],
                                                                           "verdict": "not recovered"}]})
    assert "FAIL: no planted effect recovered" in failed["check"]
    assert "no instrument check with this run" in _summary(root)["check"]


def test_sanity_fails_when_every_pretrained_variant_is_below_none(tmp_path):
    below = write_export(tmp_path / "below", {"full": 0.55, "mlm_only": 0.5, "none": 0.6})
    assert "pretraining beats none FAIL (best: full -0.050" in _summary(below)["sanity"]
    above = write_export(tmp_path / "above", {"full": 0.7, "mlm_only": 0.65, "none": 0.6})
    assert "pretraining beats none OK (best: full +0.100" in _summary(above)["sanity"]


def test_sanity_reads_mlm_and_nsp_accuracy_of_the_variants_that_trained_them(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    shallow = _summary(root, runs={"mlm_acc": 0.05, "pair_acc_nsp": 0.51})
    assert "MLM past word frequencies FAIL (held-out accuracy full 5.0%, needs 6%" in shallow["sanity"]
    assert "NSP head above chance FAIL" in shallow["sanity"]
    assert "--preset cpu-long" in shallow["next"]
    runs = pd.read_parquet(root / "runs.parquet")
    # mlm_only's NSP head was never trained: its chance-level accuracy must not fail full's trained one
    nsp = np.where(runs["variant"].isin(["full", "nsp_only"]), 0.8, 0.5)
    deep = _summary(root, runs={"mlm_acc": 0.2, "pair_acc_nsp": nsp})
    assert "MLM past word frequencies OK (held-out accuracy full 20.0%, needs 6%, past a trained encoder's 15%)" \
        in deep["sanity"]
    # one MLM variant past the stage is enough for the run to be readable; the ones short of it are named
    mixed = _summary(root, runs={"mlm_acc": np.where(runs["variant"] == "mlm_only", 0.07, 0.05)})
    assert "OK (held-out accuracy mlm_only 7.0%, needs 6%; below it: full 5.0%" in mixed["sanity"]
    assert "cpu-long" not in mixed["next"]
    assert "NSP head above chance OK (0.80" in deep["sanity"] and "cpu-long" not in deep["next"]


def test_an_encoder_past_the_unigram_stage_but_short_of_a_trained_one_is_said_so_not_failed(tmp_path):
    """The default's encoders reach ~11%: past the word-frequency stage, short of cpu-long's 15%. That is OK with a
    word on what it means, never FAIL beside a finding; a rule file's floor replaces the built-in one."""
    root = write_export(tmp_path / "e", SEED_MEANS)
    s = _summary(root, runs={"mlm_acc": 0.11})
    assert "MLM past word frequencies OK (held-out accuracy full 11.0%, needs 6%, short of a trained encoder's 15%: " \
           "early effects)" in s["sanity"]
    ruled = _summary(root, runs={"mlm_acc": 0.11}, mlm_floor=0.12)
    assert "MLM past word frequencies FAIL (held-out accuracy full 11.0%, needs 12% (the rule's)" in ruled["sanity"]


def test_finding_names_the_tasks_each_objective_helped_and_hurt_in_their_metric(tmp_path):
    """mlm_only helps sst by 0.2 and hurts topic by 0.1 (none at 0.6): the Finding line says both, in the tasks'
    metric, with the reading and interval; a contrast with no call anywhere says it helped none."""
    root = write_export(tmp_path / "e", {"mlm_only": 0.8, "none": 0.6},
                        task_means={"sst": {"mlm_only": 0.8, "none": 0.6}, "topic": {"mlm_only": 0.5, "none": 0.6}})
    s = _summary(root, runs={"mlm_acc": 0.11})
    f = s["finding"]
    assert f.startswith("Finding  MLM's effect over none (mlm_only - none) helped 1 of 2 tasks: sst +0.200 accuracy "
                        "(fine-tuned, [+0."), f
    assert "; hurt topic -0.100 accuracy (fine-tuned, [-0." in f and "no effect called" not in f
    assert "Each call survives Holm over the run's 3 primary cells at 95%" in f
    flat = write_export(tmp_path / "flat", {"mlm_only": 0.6, "none": 0.6})
    g = _summary(flat, runs={"mlm_acc": 0.11})["finding"]
    assert "helped none of 2 tasks; hurt none" in g


def test_next_after_mlm_alone_names_the_other_objectives_command_and_its_cost_here(tmp_path):
    """A run of mlm_only and none (the default's design) has answered MLM's effect only: Next gives the command for
    the seed's other contrasts and its pretraining hours from this run's own seconds per step."""
    root = write_export(tmp_path / "e", {"mlm_only": 0.8, "none": 0.6})
    s = _summary(root, runs={"mlm_acc": 0.11, "wall_time_s": 300.0, "steps": 1000})
    assert "--preset cpu-long --variants full,mlm_pairs,mlm_only,nsp_only,none" in s["next"]
    # 24 runs x 8,000 steps x 0.3 s a step / 2 at once = 8 h
    assert "about 8 h of pretraining on this CPU (24 runs of 8,000 steps at this run's 0.30 s a step" in s["next"]


def test_sanity_counts_fine_tunings_that_predicted_one_label_and_next_asks_for_a_fair_protocol(tmp_path):
    root = write_export(tmp_path / "e", {"full": 0.7, "mlm_only": 0.7, "none": 0.6}, majority=("mlm_only",))
    s = _summary(root, runs={"mlm_acc": 0.2})
    assert "every fine-tuning learned more than one label FAIL (12 predicted one label" in s["sanity"]
    assert "finetune.lr_grid" in s["next"]
    ok = _summary(write_export(tmp_path / "ok", {"full": 0.7, "mlm_only": 0.7, "none": 0.6}), runs={"mlm_acc": 0.2})
    assert "every fine-tuning learned more than one label OK" in ok["sanity"]


def test_answer_and_detects_read_the_primary_family(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    s = _summary(root, runs={"mlm_acc": 0.2})
    assert "MLM's effect over none (mlm_only - none), on the average: fine-tuned +0.200 [" in s["answer"]
    assert "6 resolved positive" in s["answer"]
    # NSP's loss effect is named in words too: full 0.7 vs mlm_pairs SEED_MEANS
    assert "NSP's loss effect (full - mlm_pairs), on the average: fine-tuned" in s["answer"]
    assert "a primary effect of about 0.0" in s["detects"]
    noisy = write_export(tmp_path / "noisy", {"full": 0.6, "mlm_only": 0.6, "mlm_pairs": 0.6, "none": 0.6},
                         variant_jitter={"mlm_only": (-0.4, 0.0, 0.4), "full": (0.4, -0.4, 0.0)}, n_examples=40)
    n = _summary(noisy, runs={"mlm_acc": 0.2})
    assert "0 resolved positive, 0 negative" in n["answer"]
    assert "a primary effect of about" not in n["detects"] or float(
        n["detects"].split("about ")[1].split()[0]) < 1.0  # never a number beyond the metric's range
    assert "more pretraining seeds" in n["next"] or "larger scale" in n["next"]


def test_no_primary_variants_says_so(tmp_path):
    s = _summary(write_export(tmp_path / "e", {"full": 0.7, "none": 0.6}), runs={"mlm_acc": 0.2})
    assert "was not measured" in s["answer"]


def test_next_asks_for_the_seeds_a_typical_open_cell_needs_and_how_to_add_them(tmp_path):
    # a real effect seen through noisy seeds: a few more seeds resolve it, added by a second run and a merge
    wide = write_export(tmp_path / "wide", {"full": 0.66, "mlm_only": 0.66, "mlm_pairs": 0.6, "none": 0.6},
                        variant_jitter={"mlm_only": (-0.06, 0.0, 0.06), "full": (0.06, -0.06, 0.0)})
    s = _summary(wide, runs={"mlm_acc": 0.2})
    assert "0 resolved positive" in s["answer"]
    assert "--first-seed 3 --seeds" in s["next"] and "analysis.export merge" in s["next"]
    more = int(s["next"].split("--seeds ")[1].split(",")[0])
    assert 1 <= more and more + 3 <= 20
    # a tie: no effect anywhere, so a resolving seed count is huge and Next points at scale instead
    tie = write_export(tmp_path / "tie", {"full": 0.6, "mlm_only": 0.601, "mlm_pairs": 0.6, "none": 0.6},
                       variant_jitter={"mlm_only": (-0.03, 0.0, 0.03), "full": (0.03, -0.03, 0.0)})
    t = _summary(tie, runs={"mlm_acc": 0.2})
    assert "larger scale" in t["next"] and "near zero" in t["next"] and "--first-seed" not in t["next"]


def test_sanity_never_names_a_variant_whose_average_was_left_out(tmp_path):
    """full's fine-tunings all predicted one label, so its fine-tuned average has no mean: the best variant against
    none is read among the others, not printed as '+nan' (the default's own summary once said 'best: full +nan')."""
    root = write_export(tmp_path / "e", {"full": 0.7, "mlm_only": 0.7, "none": 0.6}, majority=("full",))
    s = _summary(root, runs={"mlm_acc": 0.2})
    assert "nan" not in s["sanity"] and "pretraining beats none OK (best: mlm_only +0.100" in s["sanity"]


def test_next_does_not_advise_the_fair_protocol_to_a_run_that_used_it(tmp_path):
    """A run that chose its rate on dev among three and still had one-label fine-tunings is not told to 'fine-tune
    fairly' with the settings it ran (the first reader of cpu-long's summary tripped on it): Next names the tasks."""
    root = write_export(tmp_path / "e", {"full": 0.7, "mlm_only": 0.7, "none": 0.6}, majority=("mlm_only",))
    evals = pd.read_parquet(root / "evals.parquet")
    grid = pd.concat([evals.assign(lr=r, selected=r == 1e-3) for r in (3e-4, 1e-3, 3e-3)])
    grid.to_parquet(root / "evals.parquet")
    s = _summary(root, runs={"mlm_acc": 0.2})
    assert "lr_grid" not in s["next"] and "were chosen on dev among 3 rates" in s["next"]
    assert "(sst, topic)" in s["next"]


def test_the_answer_line_marks_an_interval_off_zero_that_holm_does_not_call(tmp_path):
    """An interval that excludes 0 but is not called after Holm reads as a finding unless it says so; one without a
    reliable interval says that too (the default's fine-tuned average rested on two seeds once)."""
    from analysis.summary import _verdict
    from analysis.bootstrap import Interval

    iv = Interval(0.04, 0.018, 0.064, 0.01, 0.01, 3.0, 4, True, 0.018, 0.064)
    e = type("E", (), {"interval": iv, "p_adjusted": 0.097, "p_equivalence": float("nan")})()
    assert _verdict(e) == " not resolved after Holm"
    e.p_adjusted = 0.01
    assert _verdict(e) == " resolved"
    e.interval, e.p_adjusted = Interval(0.04, -0.2, 0.1, 0.5, 0.1, 1.0, 2, False, -0.2, 0.1), 0.5
    assert _verdict(e) == " (no reliable interval: 2 seeds)"
    e.interval = Interval(0.04, -0.01, 0.09, 0.2, 0.02, 3.0, 4, True, -0.01, 0.09)
    assert _verdict(e) == ""
