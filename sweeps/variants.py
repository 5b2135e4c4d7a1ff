"""The measurement grid alone: named variants x pretraining seeds x fine-tuning seeds, then the report.

    python sweeps/variants.py                                   # full, mlm_only, nsp_only, sop_only, mlm_sop, none
    python sweeps/variants.py --preset smoke --variants full,mlm_only,none --seeds 3
    python sweeps/variants.py --variants full,mlm_sop,none --set objective.mask_ratio=0.2
    python sweeps/variants.py --variants electra,mlm_only,none --set optim.budget=flops   # equal compute

Every variant of one comparison shares, per pretraining seed, the batches, the initial weights, the
steps and the schedule (or, with optim.budget=tokens|flops, the tokens or FLOPs it may spend); only
the loss differs. No search: every run is at full budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python sweeps/x.py` from a checkout

from sweeps import phases  # noqa: E402
from sweeps.frame import Context, Sweep, sweep_main  # noqa: E402
from trainables.objectives import VARIANTS  # noqa: E402

DEFAULTS: dict[str, dict] = {}  # nothing of its own: seeds and resources per preset are sweeps.cli.PRESET_DEFAULTS


parse_variants = phases.parse_variants


def _extra_args(p) -> None:
    p.add_argument("--variants", default="full,mlm_only,nsp_only,sop_only,mlm_sop,none",
                   help=f"comma-separated, from: {', '.join(VARIANTS)}")


def measured(ctx: Context):
    return [(name, phases.variant_config(ctx.cfg, name), ctx.args.seeds) for name in parse_variants(ctx.args.variants)]


SWEEP = Sweep("variants", __doc__, defaults=DEFAULTS, extra_args=_extra_args, measured=measured)


def main(argv: list[str] | None = None) -> int:
    return sweep_main(SWEEP, argv)


if __name__ == "__main__":
    sys.exit(main())
