"""Mask ratio from 0.10 to 0.50 for MLM-only and MLM+NSP: intrinsic metrics and downstream scores.

    python sweeps/mask_ratio.py                                  # 0.10 0.15 0.20 0.30 0.40 0.50, plus none
    python sweeps/mask_ratio.py --preset smoke --ratios 0.15,0.4 --seeds 2

Held-out MLM accuracy and perplexity are always measured at the fixed 15% evaluation mask, so runs
trained at different ratios compare. Variants are labelled ``mlm_only@0.30`` etc.; ``none`` is the
shared untrained baseline every label is compared with.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.export import run_row  # noqa: E402
from sweeps.frame import Context, Sweep, sweep_main  # noqa: E402
from trainables.config import ConfigError  # noqa: E402

# Its grid is 13 variants (6 ratios x 2 objectives + none), 2.6x the main job's: fewer seeds than
# sweeps.cli.PRESET_DEFAULTS where time is short.
DEFAULTS = {"cpu-small": dict(seeds=2), "gpu-quick": dict(seeds=3)}
MASKED_VARIANTS = ("mlm_only", "full")


def parse_ratios(text: str) -> list[float]:
    try:
        ratios = sorted({float(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise ConfigError(f"--ratios {text!r} must be comma-separated numbers in (0, 1)") from None
    if not ratios or any(not 0 < r < 1 for r in ratios):
        raise ConfigError(f"--ratios {text!r} must be comma-separated numbers in (0, 1)")
    return ratios


def measured(ctx: Context):
    variants = [(f"{name}@{r:.2f}", phases.variant_config(ctx.cfg, name, mask_ratio=r), ctx.args.seeds)
                for name in MASKED_VARIANTS for r in parse_ratios(ctx.args.ratios)]
    return variants + [("none", phases.variant_config(ctx.cfg, "none"), ctx.args.seeds)]


def run(ctx: Context):
    variants = [(name, cfg) for name, cfg, _ in measured(ctx)]
    grids = phases.measure_and_read(variants, ctx.tasks, ctx.args, ctx.root, ctx.progress)
    print(intrinsic_table(grids["measure"]), flush=True)
    return grids


def intrinsic_table(measure_grid) -> str:
    """Held-out metrics at the fixed 15% mask, mean over seeds, per variant and training mask ratio."""
    import pandas as pd

    rows = pd.DataFrame([run_row(r, "measure") for r in measure_grid])
    rows = rows[rows["status"] == "completed"]
    table = rows.groupby(["variant"])[["mask_ratio", "mlm_acc", "mlm_ppl", "pair_acc_nsp", "token_cosine"]].mean()
    return "\nintrinsic metrics (held out, 15% evaluation mask; mean over seeds)\n" + table.to_string(float_format="%.3f")


def _extra_args(p) -> None:
    p.add_argument("--ratios", default="0.10,0.15,0.20,0.30,0.40,0.50", help="training mask ratios")


SWEEP = Sweep("mask_ratio", __doc__, run, defaults=DEFAULTS, extra_args=_extra_args, measured=measured)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
