"""The command line of ``python -m trainables.pretrain`` (see ``trainables.pretrain``): one variant of a
preset, with --corpus, --seed and --set overrides, into --out; resumes what --out holds."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from trainables import pretrain
from trainables.config import ConfigError
from trainables.data.text import CorpusError
from trainables.objectives import VARIANTS
from trainables.presets import build_config


def main(argv: list[str] | None = None) -> int:
    from trainables.presets import PRESETS

    p = argparse.ArgumentParser(prog="python -m trainables.pretrain", description=pretrain.__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu-small", help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--variant", default="full", help=f"one of: {', '.join(VARIANTS)}")
    p.add_argument("--corpus", help="builtin | synthetic | PATH | hub:NAME[:CONFIG] (sets data.corpus)")
    p.add_argument("--seed", type=int, help="pretraining seed (sets run.seed)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override, e.g. objective.mask_ratio=0.3 (repeatable)")
    p.add_argument("--out", required=True, help="output directory (a Hugging Face checkpoint + run.json)")
    p.add_argument("--no-resume", action="store_true", help="start over even if OUT holds a resumable state")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    overrides = list(args.overrides)
    if args.corpus:
        overrides.insert(0, f"data.corpus={args.corpus}")
    if args.seed is not None:
        overrides.insert(0, f"run.seed={args.seed}")
    try:
        cfg = build_config(args.preset, args.variant, overrides)

        def report(metrics, checkpoint_dir=None):
            shown = {k: v for k, v in metrics.items() if k in ("step", "tokens_per_s", "eval/mlm_acc", "eval/pair_acc_nsp")
                     or k.startswith("loss/")}
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()), flush=True)

        result = pretrain.run_pretraining(cfg, args.out, report, resume=not args.no_resume)
    except (ConfigError, CorpusError, pretrain.NonFiniteLossError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": result.out_dir, "steps": result.steps, "tokens_seen": result.tokens_seen,
                      "wall_time_s": round(result.wall_time_s, 2), **result.metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
