"""Domain adaptation: continue MLM pretraining of a checkpoint on your corpus; the tasks before vs after.

    python -m trainables.pretrain --preset cpu-small --variant full --out runs/base     # or any BERT checkpoint
    python sweeps/domain_adapt.py --checkpoint runs/base --corpus my_corpus.txt        # cpu-small, offline tasks
    python sweeps/domain_adapt.py --checkpoint runs/base --corpus notes/ --tasks sentiment,topic \\
        --seeds 3 --finetune-seeds 2 --steps 2000 --lr 5e-5 --storage runs --name clinic
    python sweeps/domain_adapt.py --checkpoint runs/base --corpus my.txt --name clinic --resume

1. Measure: ``before`` is the checkpoint as it is (0 steps: the same weights and tokenizer, plus its
   held-out MLM metrics on your corpus); ``domain_adapt`` continues pretraining it with MLM alone
   (single-segment inputs, the checkpoint's tokenizer) on --corpus for --steps steps at --lr, over
   --seeds pretraining seeds (masking and dropout differ; data order is the same).
2. Fine-tune: each ``domain_adapt`` run on the tasks over --finetune-seeds seeds, and the base
   checkpoint seeds x finetune-seeds times, so both sides carry their own fine-tuning noise.
3. Report: export (Parquet), then per task before, after and after - before with multi-bootstrap
   intervals (``analysis.domain``), and the held-out MLM metrics on the corpus.

--checkpoint is a directory holding a Hugging Face BERT checkpoint with its tokenizer (what
``trainables.pretrain`` and the sweeps write) or a hub name already in the local Hugging Face cache.
For our own checkpoints the preset defaults to the one they were trained with. On a multi-node
cluster the checkpoint and corpus paths must be readable on every node (a shared filesystem).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.cli import base_config, build_parser, sweep_defaults  # noqa: E402
from sweeps.frame import Context, Sweep, sweep_main  # noqa: E402
from sweeps.runner import Phase, run_phase  # noqa: E402
from trainables.config import ConfigError, ExperimentConfig, ModelConfig  # noqa: E402
from trainables.presets import PRESETS  # noqa: E402

DEFAULTS: dict[str, dict] = {}  # nothing of its own: seeds and resources per preset are sweeps.cli.PRESET_DEFAULTS
BEFORE, AFTER = "before", "domain_adapt"
LR_FACTOR = 0.1  # default: continued pretraining at a tenth of the preset's peak learning rate


# ------------------------------------------------------------------ the checkpoint

def resolve_checkpoint(name: str) -> str:
    """A local directory (absolute) or a hub name found in the local cache -> an absolute local path."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve())
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ConfigError(f"--checkpoint {name!r} is not a directory; allowed: a checkpoint directory "
                          "(python -m trainables.pretrain --out DIR) or a hub name in the local cache")
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "vocab.txt"])
    except Exception as e:  # hub errors are many classes; the first line says which
        raise ConfigError(f"--checkpoint {name!r} is neither a directory nor a hub model available here: "
                          f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def checkpoint_model(path: str) -> ModelConfig:
    """The encoder shape of a checkpoint (its config.json), so configs and run records describe it."""
    from transformers import BertConfig

    try:
        c = BertConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--checkpoint {path!r} has no readable BERT config.json: {str(e).splitlines()[0]}") from None
    return ModelConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_layers=c.num_hidden_layers,
                       num_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
                       max_position=c.max_position_embeddings, dropout=c.hidden_dropout_prob)


def checkpoint_preset(path: str) -> str | None:
    """The preset a checkpoint of ours was pretrained with (from its run.json), if any."""
    run = Path(path) / "run.json"
    try:
        preset = json.loads(run.read_text())["config"]["preset"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return preset if preset in PRESETS else None


# ------------------------------------------------------------------ configs and phases

def adapt_config(cfg: ExperimentConfig, checkpoint: str, model: ModelConfig, lr: float,
                 steps: int | None) -> ExperimentConfig:
    """MLM alone on single segments (the checkpoint's tokenizer and weights), at ``lr`` for ``steps``."""
    objective = replace(phases.variant_config(cfg, "mlm_only").objective, variant=AFTER)
    optim = replace(cfg.optim, lr=lr, max_steps=cfg.optim.max_steps if steps is None else steps)
    if optim.max_steps < 1:
        raise ConfigError(f"--steps={optim.max_steps} must be >= 1 (the 'before' run is the 0-step one)")
    return cfg.replace(model=model, objective=objective, optim=optim,
                       run=replace(cfg.run, init_checkpoint=checkpoint))


def before_config(adapted: ExperimentConfig) -> ExperimentConfig:
    """The same run with 0 steps: the checkpoint's weights rewritten, measured on the corpus's held-out part."""
    return adapted.replace(optim=replace(adapted.optim, max_steps=0, phase2_steps=0))


def default_lr(cfg: ExperimentConfig, args: argparse.Namespace) -> float:
    if args.lr is not None:
        if args.lr <= 0:
            raise ConfigError(f"--lr={args.lr} must be > 0")
        return args.lr
    if any(o.replace(" ", "").startswith("optim.lr=") for o in args.overrides):
        return cfg.optim.lr  # set explicitly with --set
    return cfg.optim.lr * LR_FACTOR


def finetune_phase(measured: list[dict], tasks: list[str], args, root: str = "") -> Phase:
    """``phases.finetune_phase``, with the base checkpoint fine-tuned seeds x finetune-seeds times."""
    before = [m for m in measured if m["run_id"].startswith(f"{BEFORE}-")]
    phase = phases.finetune_phase([m for m in measured if m not in before], tasks, args, root)
    if before:
        more = argparse.Namespace(**{**vars(args), "finetune_seeds": args.seeds * args.finetune_seeds})
        extra = phases.finetune_phase(before, tasks, more, root).param_space["spec"]["grid_search"]
        phase.param_space["spec"]["grid_search"] += extra
    return phase


def run(ctx: Context):
    """The 'before' run (0 steps) and the adapted runs, then their fine-tuning."""
    adapted, args = ctx.cfg, ctx.args
    specs = (phases.measurement_specs([(BEFORE, before_config(adapted))], 1)
             + phases.measurement_specs([(AFTER, adapted)], args.seeds))
    measure = run_phase(phases.measure_phase(specs, args, ctx.root, []), ctx.root, args, ctx.progress)
    measured = phases.completed_measurements(measure)
    if not measured or not args.finetune_seeds:  # Tune cannot run an empty grid
        print("no completed pretraining run to fine-tune" if not measured else "--finetune-seeds 0: no fine-tuning",
              flush=True)
        return {"measure": measure}
    return {"measure": measure,
            "finetune": run_phase(finetune_phase(measured, ctx.tasks, args, ctx.root), ctx.root, args, ctx.progress)}


# ------------------------------------------------------------------ report

def domain_report(root: str, out=None) -> str | None:
    """The before/after table on the terminal; domain_adapt.csv and .txt beside the export."""
    if "://" in root:
        print(f"export: {root}/export (run analysis.domain on a local copy for the table)", file=out)
        return None
    import numpy as np

    from analysis.domain import estimate_domain_shift, format_domain_table
    from analysis.export import load_export

    shift = estimate_domain_shift(load_export(f"{root}/export"), np.random.default_rng(0))
    text = format_domain_table(shift)
    print("\n" + text, file=out, flush=True)
    report = Path(root) / "report"
    report.mkdir(parents=True, exist_ok=True)
    shift.to_frame().to_csv(report / "domain_adapt.csv", index=False)
    (report / "domain_adapt.txt").write_text(text + "\n")
    return str(report)


# ------------------------------------------------------------------ command line

def build_cli() -> argparse.ArgumentParser:
    p = build_parser("python sweeps/domain_adapt.py", __doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="the BERT checkpoint to adapt: a directory (with its tokenizer) or a "
                                        "cached hub name (required)")
    p.add_argument("--lr", type=float, help=f"peak learning rate of the continued pretraining (default: "
                                            f"{LR_FACTOR:g} x the preset's optim.lr, e.g. 1e-4 for cpu-small)")
    p.add_argument("--steps", type=int, help="continued-pretraining steps, sets optim.max_steps (default: the preset's)")
    for action in p._actions:  # argparse has no public way to edit an added argument's help
        if action.dest == "preset":
            action.help = (f"one of: {', '.join(PRESETS)} (default: the checkpoint's own preset when it has a "
                           "run.json, else cpu-small)")
        elif action.dest == "corpus":
            action.help = ("your corpus (required): a .txt (blank-line separated documents), .jsonl, .parquet, "
                           "a folder, or hub:NAME")
        elif action.dest == "num_samples":
            action.help = argparse.SUPPRESS  # no search in this sweep
    p.set_defaults(preset=None)
    return p


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """Arguments with --checkpoint resolved and the preset's defaults applied; checks the required ones."""
    p = build_cli()
    known = p.parse_args(argv)  # strict first: an unknown flag is named before the checkpoint is looked up
    for flag in ("checkpoint", "corpus"):
        if not getattr(known, flag):
            raise ConfigError(f"--{flag} is required (see python sweeps/domain_adapt.py --help)")
    checkpoint = resolve_checkpoint(known.checkpoint)
    preset = known.preset or checkpoint_preset(checkpoint) or "cpu-small"
    p.set_defaults(preset=preset, **sweep_defaults(preset, DEFAULTS))
    args = p.parse_args(argv)
    corpus = Path(args.corpus).expanduser()
    if corpus.exists():  # trials run in their own directories: relative paths would not resolve there
        args.corpus = str(corpus.resolve())
    return args, checkpoint


def configure(args: argparse.Namespace) -> ExperimentConfig:
    """The adapted run's config: MLM alone from the checkpoint, on --corpus, at --lr for --steps."""
    cfg = base_config(args)
    return adapt_config(cfg, args.checkpoint, checkpoint_model(args.checkpoint), default_lr(cfg, args), args.steps)


def announce(ctx: Context) -> str:
    a, o = ctx.args, ctx.cfg.optim
    return (f"sweep {a.name}: {a.checkpoint} pretrained further on {ctx.cfg.data.corpus} with MLM for "
            f"{o.max_steps} steps at lr {o.lr:g} (preset {a.preset}); tasks {','.join(ctx.tasks)}; {a.seeds} "
            f"pretraining x {a.finetune_seeds} fine-tuning seeds (the base checkpoint: "
            f"{a.seeds * a.finetune_seeds} fine-tunings)")


def _parse(sweep: Sweep, argv: list[str] | None) -> argparse.Namespace:
    args, checkpoint = parse_args(argv)
    args.checkpoint = checkpoint
    return args


def measured(ctx: Context):
    return [(BEFORE, before_config(ctx.cfg), 1), (AFTER, ctx.cfg, ctx.args.seeds)]


SWEEP = Sweep("domain_adapt", __doc__, run, defaults=DEFAULTS, parse=_parse, configure=configure, announce=announce,
              report=domain_report, measured=measured)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
