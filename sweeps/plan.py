"""What a sweep will cost before it runs: runs, tokens, FLOPs and wall time per phase (``--plan``).

    python sweeps/objective_weights.py --plan                            # this machine, calibrated
    python sweeps/objective_weights.py --preset gpu-quick --plan --hardware h200 --mfu 0.3

FLOPs come from ``trainables.flops`` at the preset's shapes (pretraining: every step at its phase's full
sequence length -- BERT's second phase at ``optim.phase2_seq_len`` -- an upper bound; a search trial also pays its linear probe at every rung it
reaches; fine-tuning: the encoder at ``finetune.max_len`` over ``epochs x train examples``, plus one
forward pass over dev and test, and over dev after every epoch when TensorBoard logs it). Wall time is FLOPs over the
achieved rate -- on this machine the rate is measured by timing a few pretraining steps of the
preset's model (``--hardware this``); for an accelerator it is its peak bf16 rate times the stated
utilisation (``--mfu``) -- divided by the trials that run at once, plus a fixed start-up per trial.
The plan is written beside the experiment (plan.json) and the report puts it next to what happened.

On an accelerator a small model's step is not FLOP-bound: an eager step launches a few hundred CUDA
kernels (``step_kernels``) at ``KERNEL_LAUNCH_S`` each, so a step takes max(FLOPs / rate, that floor)
(``step_floor_s``; the rate measured on this machine already includes it). Each fine-tuning trial also
builds a model from its checkpoint per (task, rate): ``FINETUNE_LOAD_S`` each. The plan prints its
assumptions under the table (``Plan.assumptions``); gpu-quick's quarter hour on one H200 rests on them:
20% MFU, 4 trials sharing the GPU with their kernels overlapping (CUDA MPS), a ~5 ms step floor.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainables.hardware import PLANNER_PEAK_BF16_TFLOPS as PEAK_BF16_TFLOPS  # one table with the bench
# What the rate does not cover, set from the main job's log on cpu-small (2 cores): a trial's start-up, final
# evaluation and checkpoint; a search evaluation's fixed part (checkpoint, held-out metrics, loading the probe
# tasks, the logistic fits).
TRIAL_OVERHEAD_S = {"pretrain": 12.0, "finetune": 5.0}
EVAL_OVERHEAD_S = 12.0
# Fine-tuning reaches less of the pretraining step's rate: its dropout (cpu-small pretrains without) and short
# sequences.
FINETUNE_RATE_FACTOR = 0.85
# The per-step latency floor on an accelerator (assumed, not measured here): an eager training step launches
# KERNELS_FIXED (embeddings, heads, losses, clipping, the fused AdamW) + KERNELS_PER_LAYER per encoder layer
# CUDA kernels, forward and backward -- ~600 for a 4-layer 256-wide BERT -- at KERNEL_LAUNCH_S each (5-10 us of
# launch and scheduling per kernel, whatever its FLOPs). A forward-only batch launches EVAL_KERNEL_SHARE of them.
KERNEL_LAUNCH_S = 7.5e-6
KERNELS_PER_LAYER = 120
KERNELS_FIXED = 120
EVAL_KERNEL_SHARE = 1 / 3
# Per (run, task, seed, rate) of fine-tuning: the checkpoint read and the head model built and moved to the
# device (trainables.finetune builds one per rate), a fixed cost whatever the model's FLOPs (assumed).
FINETUNE_LOAD_S = 1.0
# Approximate train-split sizes of the hub benchmarks (the planner needs a count before anything is loaded).
HUB_TRAIN_SIZES = {"mnli": 392_702, "qnli": 104_743, "mrpc": 3_668, "sst2": 67_349, "cola": 8_551,
                   "conll2003_ner": 14_041, "conll2003_pos": 14_041, "squad": 87_599}


@dataclass
class PhasePlan:
    name: str
    runs: int
    tokens: float
    flops: float
    wall_s: float
    parallel: int
    notes: str = ""


@dataclass
class Plan:
    hardware: str
    rate_flops: float  # achieved FLOP/s per trial the estimate assumes
    utilisation: str
    phases: list[PhasePlan] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # printed under the table

    @property
    def wall_s(self) -> float:
        return sum(p.wall_s for p in self.phases)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "wall_s": self.wall_s}, indent=1)

    def format(self) -> str:
        lines = [f"plan on {self.hardware} ({self.utilisation}; {self.rate_flops / 1e9:.3g} GFLOP/s per trial)",
                 f"{'phase':10s}{'runs':>6}{'tokens':>12}{'PFLOPs':>10}{'at once':>9}{'wall':>10}  notes"]
        for p in self.phases:
            lines.append(f"{p.name:10s}{p.runs:>6}{p.tokens / 1e6:>10.3g} M{p.flops / 1e15:>10.3g}{p.parallel:>9}"
                         f"{p.wall_s / 60:>8.1f} m  {p.notes}")
        lines.append(f"{'total':10s}{'':>47}{self.wall_s / 60:>8.1f} m")
        lines += [f"  assumes: {a}" for a in self.assumptions]
        return "\n".join(lines)


@dataclass(frozen=True)
class Calibration:
    """The planner's fixed costs as the GPU check measured them (``python -m trainables.gpu_check``, its
    calibrate part), in place of the assumed ones (None: as assumed). ``overlap``: how many trials' worth of
    steps the trials sharing one GPU deliver together (the plan otherwise assumes all of them)."""

    kernel_launch_s: float | None = None
    finetune_load_s: float | None = None
    pretrain_overhead_s: float | None = None
    overlap: float | None = None
    mfu: float | None = None
    source: str = ""

    @classmethod
    def from_check(cls, path: str) -> "Calibration":
        """From the check's JSON (runs/gpu_check/gpu_check.json) or its calibrate part's result file."""
        from trainables.config import ConfigError

        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"--calibration {path}: not readable as JSON ({e})") from None
        part = (data.get("parts", {}).get("calibrate") or {}).get("result") or data
        measured = (part.get("planner") or {}).get("measured")
        if not measured:
            raise ConfigError(f"--calibration {path}: no measured planner constants in it; allowed: the JSON of "
                              "`python -m trainables.gpu_check` with its calibrate part, or that part's result")
        keys = ("kernel_launch_s", "finetune_load_s", "pretrain_overhead_s", "overlap", "mfu")
        return cls(**{k: measured.get(k) for k in keys}, source=str(path))


def step_kernels(model) -> int:
    """CUDA kernels one eager training step of ``model`` launches (forward, backward, optimizer): assumed."""
    return KERNELS_FIXED + KERNELS_PER_LAYER * model.num_layers


def step_floor_s(model, cal: Calibration = Calibration()) -> float:
    """The least time one training step of ``model`` takes on an accelerator: its kernel launches."""
    return step_kernels(model) * (cal.kernel_launch_s or KERNEL_LAUNCH_S)


def _finetune_steps(cfg, tasks: list[str]) -> tuple[float, float]:
    """(optimizer steps, forward-only batches) of fine-tuning one checkpoint with one seed on ``tasks``."""
    ft, steps, batches = cfg.finetune, 0.0, 0.0
    for t in tasks:
        n = _task_train_size(t, cfg)
        steps += ft.epochs * math.ceil(n / ft.batch_size) * ft.most_rates
        passes = 2 + (max(math.ceil(ft.epochs) - 1, 0) if cfg.run.tensorboard else 0)
        batches += passes * math.ceil((ft.max_eval_examples or n // 8) / (2 * ft.batch_size)) * ft.most_rates
    return steps, batches


def pretrain_cost(cfg) -> tuple[float, float]:
    """(tokens, FLOPs) of one pretraining run of ``cfg``, each phase at its full length (BERT's second phase,
    ``optim.phase2_steps`` at ``optim.phase2_seq_len``, at its own): an upper bound on both."""
    from trainables.flops import StepShape, step_flops
    from trainables.objectives import get_objective
    from trainables.presets import run_tokens

    o, opt, B = cfg.objective, cfg.optim, cfg.optim.batch_size
    if o.variant == "none":
        return 0.0, 0.0
    lengths = [(opt.max_steps - opt.phase2_steps, cfg.data.seq_len)] + (
        [(opt.phase2_steps, opt.phase2_seq_len)] if opt.phase2_steps else [])
    flops = 0.0
    for steps, T in lengths:
        shape = StepShape(B, T, max(int(round((T - 3) * o.mask_ratio)), 1))
        flops += steps * step_flops(cfg.model, [get_objective(n) for n in o.active], o.options, shape,
                                    cfg.model.vocab_size)
    return float(run_tokens(cfg)), flops


@functools.lru_cache(maxsize=8)
def _builtin_sizes(cache_dir: str) -> dict:
    from trainables.data.builtin import builtin_task_sizes

    return builtin_task_sizes(cache_dir or None)  # verifies the cache: once per plan, not per run x task


def _task_train_size(name: str, cfg) -> int:
    if name in HUB_TRAIN_SIZES:
        n = HUB_TRAIN_SIZES[name]
    else:
        n = _builtin_sizes(cfg.data.cache_dir).get(name, {}).get("train", 1000)
    return min(n, cfg.finetune.max_train_examples) if cfg.finetune.max_train_examples else n


def _finetune_cost(cfg, tasks: list[str]) -> tuple[float, float]:
    """(tokens, FLOPs) of fine-tuning one checkpoint with one seed on ``tasks`` at every rate."""
    from trainables.flops import encoder_forward

    ft, m = cfg.finetune, cfg.model
    tokens = flops = 0.0
    for t in tasks:
        n = _task_train_size(t, cfg)
        L = min(ft.max_len, m.max_position)
        train = ft.epochs * n * ft.most_rates
        # dev and test once; with TensorBoard, dev after every epoch (the last one's is reused)
        passes = 2 + (max(math.ceil(ft.epochs) - 1, 0) if cfg.run.tensorboard else 0)
        evals = passes * (ft.max_eval_examples or n // 8) * ft.most_rates
        tokens += (train + evals) * L
        per_seq = encoder_forward(1, L, m.num_layers, m.hidden_size, m.intermediate_size)
        flops += (3 * train + evals) * per_seq
    return tokens, flops


def _probe_cost(cfg, tasks, eval_splits: int = 1) -> tuple[float, float]:
    """(tokens, FLOPs) of one linear probe: frozen features of the probe tasks' train (at most
    ``probe_max_train``) and evaluation examples, forward only; ``eval_splits``: a search evaluation scores
    dev (1), a fine-tuning phase's probe trial dev and test (2)."""
    from trainables.flops import encoder_forward

    ft, m = cfg.finetune, cfg.model
    L = min(ft.max_len, m.max_position)
    n = sum(min(_task_train_size(t, cfg), ft.probe_max_train or 10**9) + eval_splits * (ft.max_eval_examples or 1000)
            for t in tasks)
    return float(n * L), n * encoder_forward(1, L, m.num_layers, m.hidden_size, m.intermediate_size)


def measure_rate(cfg, steps: int = 10, threads: int = 0) -> float:
    """FLOP/s one trial achieves here: a few timed pretraining steps of ``cfg``'s model on synthetic data,
    with the CPU threads one trial gets."""
    import tempfile

    import torch

    from trainables.overrides import apply_overrides
    from trainables.data.batches import Loader, Position
    from trainables.flops import step_flops
    from trainables.objectives import get_objective
    from trainables.pretrain import initial_model, pretrain_model, build_optimizer, build_pretraining_data, train_step
    from trainables.runtime import autocast, resolve_device

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        probe = apply_overrides(cfg, {"data.corpus": "synthetic", "data.max_documents": 300, "data.cache_dir": tmp,
                                      "data.prepared_root": "", "data.decontaminate": "none",  # timing only
                                      "model.vocab_size": min(cfg.model.vocab_size, 4096)})
        data = build_pretraining_data(probe)
        device = resolve_device(probe.run.device)
        model = pretrain_model(probe, initial_model(probe, data)).to(device)
        opt, sched = build_optimizer(model, probe)
        active = [get_objective(n) for n in probe.objective.active]
        meter, rates = {}, []
        for i, (_, batch) in enumerate(Loader(data.steps, Position(0, 0, 0, 0), steps + 3)):
            t0 = time.perf_counter()
            train_step(model, opt, sched, probe, batch, meter, device, lambda: autocast(device, probe.run.precision))
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= 3:  # after warm-up; the median step, as single steps on a shared machine are noisy
                flops = step_flops(probe.model, active, probe.objective.options, batch.shape, data.sp.vocab_size)
                rates.append(flops / max(time.perf_counter() - t0, 1e-9))
    torch.set_num_threads(before)
    return float(sorted(rates)[len(rates) // 2])


def _phase(name: str, runs: list[tuple[object, float]], finetunes: list[tuple[object, int, list[str], str]],
           rate: float, parallel: int, notes: str = "", probes: tuple[list[str], float] = ((), 0.0),
           accelerator: bool = False, cal: Calibration = Calibration()) -> PhasePlan:
    """``finetunes``: (config, seeds, tasks, mode) per fine-tuning trial kind, mode ``finetune`` or ``probe``
    (a frozen encoder's linear probe: its features' forward passes over dev and test, the encoder loaded once).
    ``probes``: the probe tasks and the expected probed evaluations per run (search trials).
    ``accelerator``: a step takes at least ``step_floor_s`` (a rate measured here already includes it).
    ``cal``: the GPU check's measured constants, where given."""
    tokens = flops = seconds = 0.0
    probe_tasks, evals = probes
    for cfg, fraction in runs:
        t, f = pretrain_cost(cfg)
        tokens, flops = tokens + fraction * t, flops + fraction * f
        steps = fraction * (0 if cfg.objective.variant == "none" else cfg.optim.max_steps)
        seconds += max(f * fraction / rate, steps * step_floor_s(cfg.model, cal) if accelerator else 0.0)
        if probe_tasks and evals:
            t, f = _probe_cost(cfg, probe_tasks)
            tokens, flops = tokens + evals * t, flops + evals * f
            seconds += evals * (f / (rate * FINETUNE_RATE_FACTOR) + EVAL_OVERHEAD_S)
    for cfg, n, tasks, mode in finetunes:
        load = cal.finetune_load_s or FINETUNE_LOAD_S
        if mode == "probe":
            t, f = _probe_cost(cfg, tasks, eval_splits=2)
            tokens, flops = tokens + n * t, flops + n * f
            seconds += n * (f / (rate * FINETUNE_RATE_FACTOR) + load)
            continue
        t, f = _finetune_cost(cfg, tasks)
        tokens, flops = tokens + n * t, flops + n * f
        steps, batches = _finetune_steps(cfg, tasks)
        floor = (steps + EVAL_KERNEL_SHARE * batches) * step_floor_s(cfg.model, cal) if accelerator else 0.0
        seconds += n * (max(f / (rate * FINETUNE_RATE_FACTOR), floor) + finetune_loads(cfg, tasks) * load)
    trials = len(runs) + len(finetunes)
    at_once = max(1, min(parallel, trials))
    overhead = len(runs) * (cal.pretrain_overhead_s or TRIAL_OVERHEAD_S["pretrain"]) + \
        len(finetunes) * TRIAL_OVERHEAD_S["finetune"]
    together = min(at_once, cal.overlap) if cal.overlap and at_once > 1 else at_once  # measured: less than all
    return PhasePlan(name, trials, tokens, flops, (seconds + overhead) / together, at_once, notes)


def _rates_note(ft) -> str:
    n = len(ft.rates)
    return f"{n} rate(s)" + (f" (+ up to {ft.extend_edges} past an edge, priced as tried)" if ft.extend_edges else "")


def finetune_loads(cfg, tasks: list[str]) -> int:
    """Models one fine-tuning trial builds from its checkpoint, at most: one per (task, rate)."""
    return len(tasks) * cfg.finetune.most_rates


def plan_assumptions(args, cfg, accelerator: bool, cal: Calibration = Calibration()) -> list[str]:
    """What the plan's wall time rests on, printed under its table."""
    lines = [f"measured by the GPU check ({cal.source}): " + ", ".join(
        f"{k} {v:.3g}" for k, v in asdict(cal).items() if isinstance(v, float))] if cal.source else []
    if accelerator:
        share = args.gpus_per_trial or 1.0
        lines.append(f"{cal.mfu or args.mfu:.0%} MFU on {args.hardware} x {share:g} GPU per trial; "
                     f"{concurrency(args)} trial(s) at once" + (", their kernels overlapping (CUDA MPS, --mps)"
                                                                  if 0 < share < 1 else ""))
        lines.append(f"a step takes at least {step_kernels(cfg.model)} kernel launches x "
                     f"{(cal.kernel_launch_s or KERNEL_LAUNCH_S) * 1e6:.3g} us = {step_floor_s(cfg.model, cal) * 1e3:.1f} "
                     "ms (eager PyTorch; sweeps.plan.step_floor_s)")
    lines.append(f"start-up {cal.pretrain_overhead_s or TRIAL_OVERHEAD_S['pretrain']:.3g} s per pretraining and "
                 f"{TRIAL_OVERHEAD_S['finetune']:g} s per fine-tuning trial, {cal.finetune_load_s or FINETUNE_LOAD_S:.3g} "
                 "s per model built for a (task, rate), "
                 f"{EVAL_OVERHEAD_S:g} s per search evaluation; data preparation not planned")
    return lines


def concurrency(args) -> int:
    """Trials at once on this machine's resources (a cluster's are not known before Ray starts)."""
    import os

    if args.gpus_per_trial:
        import torch

        gpus = torch.cuda.device_count() or 1
        by = int(gpus / args.gpus_per_trial)
    else:
        by = max((os.cpu_count() or 1) // max(args.cpus_per_trial * args.workers_per_trial, 1), 1)
    return min(by, args.max_concurrent) if args.max_concurrent else by


def plan_sweep(measured: list[tuple[str, object, int]], searched: tuple[int, object] | None, tasks: list[str],
               args, cfg) -> Plan:
    """The phases a sweep runs: the search (ASHA's expected share of the budget per trial), the
    measurement grid (variants x seeds) and its fine-tuning (x fine-tuning seeds on ``tasks``); with
    ``--calibration FILE``, the GPU check's measured constants in place of the assumed ones."""
    cal = Calibration.from_check(args.calibration) if getattr(args, "calibration", None) else Calibration()
    rate, how = hardware_rate(args.hardware, cal.mfu or args.mfu, cfg, args.gpus_per_trial, args.cpus_per_trial)
    check_corpus_epochs(cfg)
    accelerator = args.hardware != "this"
    plan = Plan(args.hardware, rate, how, assumptions=plan_assumptions(args, cfg, accelerator, cal))
    parallel = concurrency(args)
    if searched and searched[0]:
        trials, scfg, *rest = searched
        rungs = search_rungs(trials)
        frac = asha_fraction(trials, rungs)
        probe_tasks = list(rest[0]) if rest else []
        plan.phases.append(_phase("search", [(scfg, frac)] * trials, [], rate, parallel,
                                  f"ASHA: {frac:.0%} of the budget per trial expected",
                                  probes=(probe_tasks, frac * rungs), accelerator=accelerator, cal=cal))
    runs = [(vcfg, 1.0) for _, vcfg, seeds in measured for _ in range(seeds)]
    plan.phases.append(_phase("measure", runs, [], rate, parallel,
                              f"{len(measured)} variants x seeds; none trains 0 steps"
                              + ("; best_mix counted (an upper bound)" if any(n == "best_mix" for n, *_ in measured) else ""),
                              accelerator=accelerator, cal=cal))
    if args.finetune_seeds:
        from sweeps.phase_kinds import mode_tasks, read_specs, snapshot_modes

        # the trials as sweeps.phases builds them (read_specs), from the runs the measure phase will complete
        of_mode = mode_tasks(args, tasks)
        notes = "; ".join(f"{len(ts)} tasks x {_rates_note(cfg.finetune)} per trial" if mode == "finetune"
                          else f"{len(ts)} probed per trial" for mode, ts in of_mode.items())
        reads = read_specs([{"cfg": vcfg} for vcfg, _ in runs], of_mode, args.finetune_seeds)
        plan.phases.append(_phase("finetune", [], [(r["cfg"], 1, r["tasks"], r["mode"]) for r in reads], rate,
                                  parallel, notes, accelerator=accelerator, cal=cal))
        # each snapshot a run keeps (run.snapshots; none trains no step and keeps none)
        kept = [{"cfg": vcfg} for vcfg, _ in runs if vcfg.objective.variant != "none"
                for _ in vcfg.run.snapshot_steps(vcfg.optim.max_steps)]
        reads = read_specs(kept, snapshot_modes(of_mode, getattr(args, "snapshot_reads", "probe")), args.finetune_seeds)
        if reads:
            plan.phases.append(_phase("snapshots", [], [(r["cfg"], 1, r["tasks"], r["mode"]) for r in reads], rate,
                                      parallel, f"{len(kept)} snapshots, " + (
                                          "probed" if getattr(args, "snapshot_reads", "probe") == "probe" else
                                          "read by every mode"), accelerator=accelerator, cal=cal))
    return plan


# Training tokens of the built-in corpus: the data benchmark's 6.0 M tokens less the 2% of documents held out
# (README; a few % fewer at bert-*'s 30k vocabulary). The plan checks the epochs with it before preparing.
BUILTIN_TRAIN_TOKENS = 5.9e6


def check_corpus_epochs(cfg) -> None:
    """``trainables.presets.check_epochs`` before anything is prepared, where the corpus's size is known
    without preparing it (the built-in corpus); every corpus is checked again once prepared (sweeps.frame)."""
    from trainables.presets import check_epochs

    if cfg.data.corpus == "builtin" and not cfg.data.max_documents:
        check_epochs(cfg, BUILTIN_TRAIN_TOKENS)


def planned_vs_actual(plan: Plan, actual: dict[str, float]) -> str:
    """The plan's wall time per phase next to what the phases took."""
    lines = [f"planned vs actual wall time ({plan.utilisation}):"]
    for p in plan.phases:
        a = actual.get(p.name)
        ratio = f"  actual/planned {a / p.wall_s:.2f}" if a and p.wall_s else ""
        lines.append(f"  {p.name:9s} planned {p.wall_s / 60:6.1f} min   actual "
                     f"{(a / 60 if a else float('nan')):6.1f} min{ratio}")
    if "prepare" in actual:
        lines.append(f"  {'prepare':9s} (not planned)        actual {actual['prepare'] / 60:6.1f} min")
    total = sum(v for v in actual.values())
    lines.append(f"  {'total':9s} planned {plan.wall_s / 60:6.1f} min   actual {total / 60:6.1f} min")
    return "\n".join(lines)


ASHA_RUNGS = 4  # the search's rungs: at each quarter of the budget, where trials are evaluated and probed


def search_rungs(num_samples: int) -> int:
    """ASHA's rungs for a search of ``num_samples`` trials: four, or two (half and full budget) when there are
    two trials or fewer (ASHA then has nothing to compare at the early rungs)."""
    return ASHA_RUNGS if num_samples > 2 else 2


def asha_fraction(num_samples: int, rungs: int = ASHA_RUNGS, reduction: int = 2) -> float:
    """Expected share of the full budget a search trial trains under ASHA (``rungs`` evenly spaced): the
    first trial always runs it all (a rung has nothing to compare it with), a later one survives each
    rung with probability 1 / reduction."""
    if not num_samples:
        return 0.0
    later = sum((1.0 / reduction) ** r for r in range(rungs)) / rungs
    return (1.0 + (num_samples - 1) * later) / num_samples


def hardware_rate(hardware: str, mfu: float, cfg, gpus_per_trial: float, threads: int = 1) -> tuple[float, str]:
    """(FLOP/s per trial, how it was decided)."""
    if hardware == "this":
        return measure_rate(cfg, threads=threads), f"this machine: median of 10 timed pretraining steps on {threads} thread(s)"
    if hardware not in PEAK_BF16_TFLOPS:
        from trainables.config import ConfigError

        raise ConfigError(f"--hardware={hardware!r} is not valid; allowed: this, {', '.join(PEAK_BF16_TFLOPS)}")
    share = gpus_per_trial or 1.0
    return PEAK_BF16_TFLOPS[hardware] * 1e12 * mfu * share, f"peak bf16 x utilisation {mfu:.0%} x {share:g} GPU"

