"""The planner (--plan) and the gpu-quick preset: what a sweep will cost, checked from outside.

The planner's accuracy against a real run is measured by the main job (README: planned vs actual);
these tests hold its arithmetic to independent counts and its contract (it trains nothing).
"""

import argparse
import io
from dataclasses import replace

import pytest

from sweeps import objective_weights, phases, plan
from sweeps.frame import Context, default_parse
from sweeps.progress import Progress
from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.tasks import resolve_tasks


def _args(*argv):
    return default_parse(objective_weights.SWEEP, ["--storage", "unused", *argv])


def _plan(*argv):
    args = _args(*argv)
    cfg = objective_weights.SWEEP.configure(args)
    ctx = Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks), Progress(quiet=True))
    return plan.plan_sweep(objective_weights.measured(ctx), objective_weights.searched(ctx), ctx.tasks, args, cfg), cfg, args


def test_plan_prints_every_phase_and_starts_nothing(tmp_path, capsys):
    import ray

    code = objective_weights.main(["--preset", "gpu-quick", "--plan", "--hardware", "h200", "--mfu", "0.4",
                                   "--storage", str(tmp_path / "runs"), "--name", "planned"])
    out = capsys.readouterr().out
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for phase in ("search", "measure", "finetune", "total"):
        assert phase in lines, out
    assert "M" in lines["measure"] and "none trains 0 steps" in lines["measure"]
    assert not (tmp_path / "runs").exists()  # no experiment directory, no trial, no Ray
    assert not ray.is_initialized()


def test_measure_tokens_are_trained_variants_x_seeds_x_steps_x_batch_x_length():
    p, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200")
    measure = {x.name: x for x in p.phases}["measure"]
    trained = [v for v in phases.MEASURE_VARIANTS if v != "none"] + ["best_mix"]  # none trains 0 steps
    assert measure.runs == (len(phases.MEASURE_VARIANTS) + 1) * args.seeds
    assert measure.tokens == len(trained) * args.seeds * cfg.optim.max_steps * cfg.optim.batch_size * cfg.data.seq_len


def test_pretraining_flops_per_token_match_six_times_the_parameters():
    """Kaplan's 6N FLOPs per token (N: non-embedding weights) plus attention's 6*L*T*d and the MLM
    decoder at the masked positions: the formula the planner uses must land there, not merely be positive."""
    cfg = build_config("gpu-quick", "mlm_only")
    m, T = cfg.model, cfg.data.seq_len
    tokens, flops = plan.pretrain_cost(cfg)
    n = m.num_layers * (4 * m.hidden_size ** 2 + 2 * m.hidden_size * m.intermediate_size)
    expected = 6 * n + 6 * m.num_layers * T * m.hidden_size + 6 * cfg.objective.mask_ratio * m.vocab_size * m.hidden_size
    assert flops / tokens == pytest.approx(expected, rel=0.15)


def test_bert_phase_two_is_planned_at_its_own_length():
    """BERT's last 10% of steps at 512 (optim.phase2_steps): the plan counts them at 512, so its tokens are what
    the run trains (presets.run_tokens) and its FLOPs those of the two phases, each at its own length."""
    from trainables.flops import StepShape, step_flops
    from trainables.objectives import get_objective
    from trainables.presets import run_tokens

    cfg = build_config("bert-base", "full", ["optim.max_steps=1000", "optim.phase2_steps=100",
                                             "optim.phase2_seq_len=512", "data.seq_len=128"])
    tokens, flops = plan.pretrain_cost(cfg)
    assert tokens == run_tokens(cfg) == 900 * 256 * 128 + 100 * 256 * 512
    active = [get_objective(n) for n in cfg.objective.active]

    def per_step(T):
        return step_flops(cfg.model, active, cfg.objective.options, StepShape(256, T, round((T - 3) * 0.15)),
                          cfg.model.vocab_size)

    assert flops == pytest.approx(900 * per_step(128) + 100 * per_step(512))
    assert flops > 1.2 * 1000 * per_step(128)  # phase 2 at 512 is ~25% of the run's FLOPs, not 10% at 128


def test_wall_time_scales_with_one_over_the_utilisation(monkeypatch):
    monkeypatch.setattr(plan, "TRIAL_OVERHEAD_S", {"pretrain": 0.0, "finetune": 0.0})
    monkeypatch.setattr(plan, "EVAL_OVERHEAD_S", 0.0)
    monkeypatch.setattr(plan, "FINETUNE_LOAD_S", 0.0)  # fixed costs and the step floor do not scale with MFU
    monkeypatch.setattr(plan, "KERNEL_LAUNCH_S", 0.0)
    fast, _, _ = _plan("--preset", "gpu-quick", "--hardware", "h200", "--mfu", "0.4")
    slow, _, _ = _plan("--preset", "gpu-quick", "--hardware", "h200", "--mfu", "0.2")
    for a, b in zip(fast.phases, slow.phases):
        assert a.flops == b.flops and b.wall_s == pytest.approx(2 * a.wall_s)
    # and with the GPU split four ways, four trials run at once: the phase takes a quarter of its trials' sum
    assert all(x.parallel == 4 for x in fast.phases)


def test_per_epoch_dev_evaluations_are_planned_when_tensorboard_logs_them():
    cfg = build_config("gpu-quick")
    tasks = resolve_tasks(cfg.finetune.tasks)
    with_tb = plan._finetune_cost(cfg, tasks)[0]
    without = plan._finetune_cost(cfg.replace(run=replace(cfg.run, tensorboard=False)), tasks)[0]
    ft = cfg.finetune
    extra_passes = ft.epochs - 1  # dev after each epoch; the last one doubles as the final dev score
    assert with_tb - without == pytest.approx(
        extra_passes * len(ft.rates) * min(ft.max_len, cfg.model.max_position)
        * sum(ft.max_eval_examples for _ in tasks))


def test_unknown_hardware_and_bad_utilisation_are_one_line_errors(capsys):
    assert objective_weights.main(["--plan", "--hardware", "tpu9", "--storage", "unused"]) == 2
    assert objective_weights.main(["--plan", "--hardware", "h200", "--mfu", "1.5", "--storage", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --hardware='tpu9' is not valid; allowed: this, h200, h100, a100, l4, a10g",
                   "error: --mfu=1.5 must be in (0, 1]"]


def test_gpu_quick_answers_the_question_in_a_quarter_hour_on_one_h200():
    """The preset's contract (issue 14): the six built-in tasks, the core variants incl. mlm_pairs over at
    least five pretraining seeds, several trials sharing the GPU, and a plan inside 15 minutes on an H200
    at a modest utilisation (small models reach far less than bert-base's 40%)."""
    p, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200", "--mfu", "0.2")
    assert resolve_tasks(cfg.finetune.tasks) == ["sentiment", "topic", "hedge", "pos", "ner", "headline_match"]
    assert {"full", "mlm_only", "mlm_pairs", "nsp_only", "none"} <= set(phases.MEASURE_VARIANTS)
    assert args.seeds >= 5 and args.num_samples > 0 and args.finetune_seeds >= 1
    assert 0 < args.gpus_per_trial < 1
    assert phases.pretrain_resources(args) == {"CPU": args.cpus_per_trial, "GPU": args.gpus_per_trial}
    assert cfg.run.precision == "bf16"
    assert [x.name for x in p.phases] == ["search", "measure", "finetune", "snapshots"]
    assert p.wall_s <= 15 * 60, p.format()


def test_the_plan_on_this_machine_times_the_presets_own_step():
    """--hardware this measures a rate by timing real steps: it must be a positive, finite FLOP/s that
    falls when the model grows (the same thread count)."""
    small = plan.measure_rate(build_config("smoke"), steps=3, threads=1)
    big = plan.measure_rate(build_config("smoke", overrides=["model.hidden_size=128", "model.intermediate_size=512",
                                                             "model.num_heads=4"]), steps=3, threads=1)
    assert 1e6 < small < 1e13 and 1e6 < big < 1e13
    # the FLOPs per step grow ~10x from smoke to this width; the wall per step must not grow with them 1:1
    assert big > small


def test_fractional_gpus_let_two_trials_share_one_gpu(tmp_path):
    """Two 0.5-GPU trials, on a Ray instance that declares one GPU (none is needed to schedule it), run at
    the same time through the sweep's own resources and phase runner."""
    import time

    import ray

    from sweeps.runner import Phase, run_phase

    def sleeper(config):
        from ray import tune

        start = time.time()
        time.sleep(3)
        tune.report({"start": start, "end": time.time(), "gpus": len(ray.get_gpu_ids())})

    args = argparse.Namespace(**{**vars(_args("--gpus-per-trial", "0.5")), "resume": False})
    resources = phases.pretrain_resources(args)
    assert resources == {"CPU": 1, "GPU": 0.5}
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        from ray import tune

        grid = run_phase(Phase("measure", sleeper, {"spec": tune.grid_search([{"run_id": "a"}, {"run_id": "b"}])},
                               resources), str(tmp_path), args, Progress(quiet=True, out=io.StringIO()))
    finally:
        ray.shutdown()
    (a, b) = [r.metrics for r in grid]
    assert a["gpus"] == b["gpus"] == 1  # each sees the one GPU
    assert max(a["start"], b["start"]) < min(a["end"], b["end"]), "the two 0.5-GPU trials did not overlap"


def test_search_trials_pay_their_probe_at_every_rung_they_reach():
    p, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200")
    search = {x.name: x for x in p.phases}["search"]
    frac = plan.asha_fraction(args.num_samples)
    scfg = objective_weights._search_config(cfg, args)[0]
    pretrain_tokens = args.num_samples * frac * plan.pretrain_cost(scfg)[0]
    probe_tokens = args.num_samples * frac * plan.ASHA_RUNGS * plan._probe_cost(scfg, objective_weights.PROBE_TASKS)[0]
    assert probe_tokens > 0 and search.tokens == pytest.approx(pretrain_tokens + probe_tokens)


def _no_fixed_costs(monkeypatch):
    monkeypatch.setattr(plan, "TRIAL_OVERHEAD_S", {"pretrain": 0.0, "finetune": 0.0})
    monkeypatch.setattr(plan, "EVAL_OVERHEAD_S", 0.0)
    monkeypatch.setattr(plan, "FINETUNE_LOAD_S", 0.0)


def test_the_step_floor_dominates_a_tiny_model_at_a_huge_utilisation(monkeypatch):
    """At 100% MFU of an H200 quarter, gpu-quick's FLOPs take ~1.6 ms a step; its ~600 kernel launches take
    4.5 ms: the measure phase is the floor x steps, not FLOPs / rate."""
    _no_fixed_costs(monkeypatch)
    p, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200", "--mfu", "1.0")
    measure = {x.name: x for x in p.phases}["measure"]
    floor = plan.step_floor_s(cfg.model)
    assert plan.step_kernels(cfg.model) == 600 and floor == pytest.approx(4.5e-3)
    flops_per_step = measure.flops / (measure.tokens / (cfg.optim.batch_size * cfg.data.seq_len))
    assert flops_per_step / p.rate_flops < floor  # the premise: FLOP time is below the floor
    trained_runs = measure.tokens / (cfg.optim.max_steps * cfg.optim.batch_size * cfg.data.seq_len)
    assert measure.wall_s == pytest.approx(trained_runs * cfg.optim.max_steps * floor / measure.parallel)
    # bert-base's steps are FLOP-bound (45 ms of FLOPs at 40% MFU, an 11.7 ms floor): the floor changes nothing
    big = build_config("bert-base")
    assert plan.pretrain_cost(big)[1] / big.optim.max_steps / (989e12 * 0.4) > 3 * plan.step_floor_s(big.model)


def test_the_step_floor_is_for_accelerators_only(monkeypatch):
    _no_fixed_costs(monkeypatch)
    monkeypatch.setattr(plan, "measure_rate", lambda cfg, threads=1: 1e9)  # "this machine", not timed here
    args = _args("--preset", "gpu-quick", "--hardware", "this")
    cfg = objective_weights.SWEEP.configure(args)
    ctx = Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks), Progress(quiet=True))
    p = plan.plan_sweep(objective_weights.measured(ctx), None, ctx.tasks, args, cfg)
    measure = {x.name: x for x in p.phases}["measure"]
    assert measure.wall_s == pytest.approx(measure.flops / 1e9 / measure.parallel)


def test_fine_tuning_pays_a_model_load_per_task_and_rate(monkeypatch):
    _no_fixed_costs(monkeypatch)
    base, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200", "--modes", "finetune")
    monkeypatch.setattr(plan, "FINETUNE_LOAD_S", 10.0)
    loaded, _, _ = _plan("--preset", "gpu-quick", "--hardware", "h200", "--modes", "finetune")
    before, after = ({x.name: x for x in q.phases}["finetune"] for q in (base, loaded))
    loads = before.runs * len(resolve_tasks(cfg.finetune.tasks)) * len(cfg.finetune.rates)  # evals per phase
    assert plan.finetune_loads(cfg, resolve_tasks(cfg.finetune.tasks)) == 6 * 3
    assert after.wall_s - before.wall_s == pytest.approx(10.0 * loads / before.parallel)


def test_the_plan_prints_what_its_wall_time_assumes(capsys, tmp_path):
    assert objective_weights.main(["--preset", "gpu-quick", "--plan", "--hardware", "h200", "--mfu", "0.2",
                                   "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "assumes: 20% MFU on h200 x 0.25 GPU per trial" in out and "CUDA MPS" in out
    assert "600 kernel launches x 7.5 us = 4.5 ms" in out and "per model built" in out


def test_the_gpu_checks_measured_constants_replan_the_quarter_hour(monkeypatch, tmp_path, capsys):
    """``--calibration`` reads the planner's constants as the GPU check measured them (its JSON): twice the
    assumed launch time doubles the launch-bound measure phase, 4 trials delivering only 2 trials' worth of
    steps double it again; the measured values are stated under the plan. Unmeasured ones stay assumed."""
    import json

    _no_fixed_costs(monkeypatch)
    base, cfg, args = _plan("--preset", "gpu-quick", "--hardware", "h200", "--mfu", "1.0")  # launch-bound steps
    measured = {"kernel_launch_s": 2 * plan.KERNEL_LAUNCH_S, "overlap": 2.0, "finetune_load_s": None, "mfu": 1.0}
    check = tmp_path / "gpu_check.json"
    check.write_text(json.dumps({"parts": {"calibrate": {"result": {"planner": {"measured": measured}}}}}))
    calibrated, _, _ = _plan("--preset", "gpu-quick", "--hardware", "h200", "--calibration", str(check))
    before, after = ({x.name: x for x in q.phases}["measure"] for q in (base, calibrated))
    assert before.parallel == 4 and after.wall_s == pytest.approx(before.wall_s * 2 * 4 / 2)
    assert any("measured by the GPU check" in a and "overlap 2" in a for a in calibrated.assumptions)
    (tmp_path / "empty.json").write_text("{}")
    assert objective_weights.main(["--preset", "gpu-quick", "--plan", "--hardware", "h200", "--calibration",
                                   str(tmp_path / "empty.json"), "--storage", str(tmp_path)]) == 2
    assert "no measured planner constants" in capsys.readouterr().err


@pytest.mark.parametrize("gate", [False, True])
def test_the_plan_counts_the_fine_tuning_trials_each_mode_runs_with_its_own_tasks(gate):
    """The known-answer check fine-tunes some tasks and probes others (its gate fewer of each): the plan's
    fine-tuning phase has as many trials as the phase it plans creates, and a probe trial costs less than a
    fine-tuning trial of the same tasks (forward passes of frozen features, no training)."""
    from sweeps import known_answer

    args = known_answer.SWEEP.parse(known_answer.SWEEP, ["--storage", "unused", *([] if gate else ["--all-effects"])])
    cfg = known_answer.SWEEP.configure(args)
    ctx = Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks), Progress(quiet=True))
    planned = {p.name: p for p in plan.plan_sweep(known_answer.measured(ctx), None, ctx.tasks, args, cfg).phases}
    measured = [{"run_id": f"{n}-s{s}", "cfg": c, "checkpoint": None} for n, c, seeds in known_answer.measured(ctx)
                for s in range(seeds)]
    specs = phases.finetune_phase(measured, ctx.tasks, args).param_space["spec"]["grid_search"]
    assert planned["finetune"].runs == len(specs) == len(measured) * args.finetune_seeds * 2  # finetune + probe
    lexical_null = ["planted_lexical", "planted_null"]
    expected = {"finetune": lexical_null, "probe": lexical_null} if gate else \
        {"finetune": ["planted_discourse", *lexical_null], "probe": sorted(ctx.tasks)}
    assert {m: sorted({t for s in specs if s["mode"] == m for t in s["tasks"]}) for m in ("finetune", "probe")} == \
        expected
    # the phase's cost is each trial's, with its own mode and tasks: planned one by one, the same FLOPs
    by_spec = [plan._phase("finetune", [], [(s["cfg"], 1, s["tasks"], s["mode"])], 1e10, 1).flops for s in specs]
    assert planned["finetune"].flops == pytest.approx(sum(by_spec))
    one = [(cfg, 1, list(ctx.tasks), mode) for mode in ("finetune", "probe")]
    ft, pr = (plan._phase("finetune", [], [x], 1e10, 1) for x in one)
    assert 0 < pr.flops < ft.flops and pr.wall_s < ft.wall_s


def test_the_main_job_probes_beside_fine_tuning_at_cpu_small_and_takes_a_first_seed():
    """cpu-small reads every checkpoint both ways, planned as such, as the GPU presets do (their probe reads their
    snapshots); --modes narrows it;
    --first-seed moves the measured block of pretraining seeds; a bad mode or seed is one line."""
    assert _args().modes == ("finetune", "probe") and _args("--preset", "gpu-quick").modes == ("finetune", "probe")
    assert _args("--preset", "gpu-quick", "--modes", "finetune").modes == ("finetune",)
    cfg = build_config("cpu-small")
    args = _args("--first-seed", "3")
    specs = phases.measurement_specs([("mlm_only", phases.variant_config(cfg, "mlm_only"))], args.seeds, args.first_seed)
    assert sorted(s["cfg"]["run"]["seed"] for s in specs) == [3, 4, 5, 6]
    for bad, said in ((["--modes", "finetune,lasso"], "--modes"), (["--first-seed", "-1"], "--first-seed")):
        with pytest.raises(ConfigError, match=said):
            objective_weights.SWEEP.configure(_args(*bad))


def test_cpu_long_measures_mlm_only_and_none_read_by_fine_tuning_and_the_probe_at_two_budgets():
    """cpu-long's grid: mlm_only and none over 6 pretraining seeds x 1 fine-tuning seed, each checkpoint
    fine-tuned at the rate chosen on dev and probed at 1,000 and 100 labels, no search, the check first."""
    ow = objective_weights
    args = default_parse(ow.SWEEP, ["--preset", "cpu-long"])
    assert (args.seeds, args.finetune_seeds, args.num_samples, args.check) == (6, 1, 0, True)
    assert args.modes == ("finetune", "probe") and ow.measure_variants(args) == ("mlm_only", "none")
    cfg = build_config("cpu-long")
    assert cfg.finetune.probe_modes == {"probe": 1000, "probe@100": 100, "probe-emb": 1000} and len(cfg.finetune.rates) == 3
    assert cfg.finetune.keep_best and cfg.optim.max_steps == 8000


def test_the_plan_counts_the_probe_reads_of_every_snapshot_as_their_own_phase():
    """cpu-long keeps four snapshots per pretrained run; each is probed in the snapshots phase, planned at the
    probe's cost per read (not a fine-tuning's); the fine-tuning phase is the same with or without them, none
    keeps none, and a sweep with no snapshot plans no snapshots phase."""
    base = "--hardware", "h200", "--mfu", "0.2"
    with_snaps, cfg, args = _plan("--preset", "cpu-long", *base)
    without, _, _ = _plan("--preset", "cpu-long", "--set", "run.snapshots=", *base)
    by = {p.name: p for p in with_snaps.phases}
    by0 = {p.name: p for p in without.phases}
    assert list(by) == [n for n in phases.PHASES if n in by] and "snapshots" not in by0
    pretrained = args.seeds  # mlm_only's runs; none keeps no snapshot
    assert cfg.run.snapshot_steps(cfg.optim.max_steps) == (500, 1000, 2000, 4000)
    assert by["snapshots"].runs == 4 * pretrained * args.finetune_seeds  # one probe trial: 1,000 and 100 labels
    assert (by["finetune"].runs, by["finetune"].tokens) == (by0["finetune"].runs, by0["finetune"].tokens)
    probe_read = by["snapshots"].tokens / by["snapshots"].runs
    assert probe_read < by0["finetune"].tokens / (2 * 2 * pretrained)  # a probe read is cheaper than a fine-tuning

@pytest.mark.parametrize("preset", ["cpu-long", "gpu-quick", "bert-mini", "bert-small", "bert-base"])
def test_the_longer_presets_keep_snapshots_and_probe_them(preset):
    """Every preset past the laptop default keeps four log-spaced snapshots and probes them (the curve's points),
    planned as their own phase; gpu-quick's whole job stays inside its quarter hour on an H200."""
    corpus = [] if preset in ("cpu-long", "gpu-quick") else ["--corpus", "hub:wikimedia/wikipedia:20231101.en"]
    hardware = ["--hardware", "h200", "--mfu", "0.3"]
    p, cfg, args = _plan("--preset", preset, *corpus, *hardware)
    shares = [s / cfg.optim.max_steps for s in cfg.run.snapshot_steps(cfg.optim.max_steps)]
    assert shares == pytest.approx([1 / 16, 1 / 8, 1 / 4, 1 / 2], abs=1e-3) and "probe" in args.modes
    assert "snapshots" in [x.name for x in p.phases]
    if preset == "gpu-quick":
        assert p.wall_s < 15 * 60

def test_snapshot_reads_all_fine_tunes_every_snapshot_too_and_the_plan_prices_it():
    """--snapshot-reads all: each snapshot is read by every mode (fine-tuning too), in the run's trials and in the
    plan's alike; a bad value is one line."""
    base = "--preset", "cpu-long", "--hardware", "h200", "--mfu", "0.2"
    probed, cfg, args = _plan(*base)
    everything, _, all_args = _plan(*base, "--snapshot-reads", "all")
    snaps = {p.name: p for p in probed.phases}["snapshots"]
    snaps_all = {p.name: p for p in everything.phases}["snapshots"]
    kept = 4 * args.seeds  # mlm_only's runs, four snapshots each
    assert (snaps.runs, snaps_all.runs) == (kept, kept * 2) and snaps_all.wall_s > 2 * snaps.wall_s
    inputs = [{"run_id": f"mlm_only-s0@{s}", "cfg": cfg.to_dict(), "checkpoint": "unused"} for s in (500, 1000)]
    specs = phases.snapshot_phase(inputs, resolve_tasks(cfg.finetune.tasks), all_args).param_space["spec"]["grid_search"]
    assert sorted({s["mode"] for s in specs}) == ["finetune", "probe"] and len(specs) == 4
    with pytest.raises(SystemExit):
        _args("--preset", "cpu-long", "--snapshot-reads", "some")
