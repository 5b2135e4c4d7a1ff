"""What a snapshot stands for, measured: at each budget k, a linear-schedule run's state part-way (its snapshot),
the warmup-stable-decay run's decay branch at k, and a run of k steps that ends its own linear schedule there,
read by held-out MLM accuracy at the fixed 15% evaluation mask.

    python -m trainables.schedules --preset cpu-small --steps 1600 --shares 0.25,0.5 --seed 0

A mid-run state of a linear schedule has not annealed: its learning rate is still high. Whether that reads
lower or higher than a run that ends at that budget depends on the regime: at cpu-small's budgets it reads
higher (a short linear run spends half its steps below half the peak rate while the model is far from
converged) and level with the WSD branch (docs/statistics.md has the table). A WSD branch decays to zero at k on the batches the long
run trains next, so it should read like the run of k steps (tests/trainables/test_snapshots.py shows the
branch is a WSD run of k steps bit for bit). This measures by how much each differs on the machine at hand,
and what the branches cost: the WSD run trains ``optim.decay_frac`` x each budget more steps. One seed per
call; run several seeds (one process each) and read the differences per seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def measure(preset: str, steps: int, shares: list[float], seed: int, out: Path, overrides: list[str] = ()) -> dict:
    """Every run of one seed, and the table's rows: per budget k, the three readings and their tokens."""
    from trainables.checkpoint import snapshots_of
    from trainables.presets import build_config
    from trainables.pretrain import run_pretraining

    text = ",".join(f"{s:g}" for s in shares)
    common = [f"optim.max_steps={steps}", f"run.seed={seed}", "run.tensorboard=false", *overrides]
    runs, walls = {}, {}
    for name, extra in (("linear", [f"run.snapshots={text}"]), ("wsd", ["optim.schedule=wsd", f"run.snapshots={text}"])):
        t0 = time.perf_counter()
        runs[name] = run_pretraining(build_config(preset, "mlm_only", [*common, *extra]), out / f"s{seed}" / name)
        walls[name] = time.perf_counter() - t0
    kept = {name: {s["steps"]: s for s in snapshots_of(out / f"s{seed}" / name)} for name in runs}
    rows = []
    for k in sorted(kept["linear"]):
        cfg = build_config(preset, "mlm_only", [*common, f"optim.max_steps={k}"])
        ended = run_pretraining(cfg, out / f"s{seed}" / f"linear-{k}")
        mid, branch = kept["linear"][k], kept["wsd"].get(k)
        rows.append({"seed": seed, "budget_steps": k, "tokens": mid["tokens_seen"],
                     "linear_mid_run": mid["intrinsic"]["mlm_acc"],
                     "wsd_branch": branch["intrinsic"]["mlm_acc"] if branch else float("nan"),
                     "linear_ended": ended.metrics["mlm_acc"]})
    rows.append({"seed": seed, "budget_steps": steps, "tokens": runs["linear"].tokens_seen,
                 "linear_mid_run": runs["linear"].metrics["mlm_acc"], "wsd_branch": runs["wsd"].metrics["mlm_acc"],
                 "linear_ended": runs["linear"].metrics["mlm_acc"]})
    return {"preset": preset, "steps": steps, "seed": seed, "rows": rows,
            "wall_s": walls, "wsd_extra_wall": walls["wsd"] / walls["linear"] - 1.0}


def format_table(result: dict) -> str:
    lines = [f"held-out MLM accuracy (15% evaluation mask), mlm_only at {result['preset']}, seed {result['seed']}; "
             "the last row is the end (WSD's own end, not a branch)",
             f"{'steps':>7}{'tokens':>10}{'linear, mid-run':>17}{'WSD branch':>12}{'linear, ended':>15}"]
    for r in result["rows"]:
        lines.append(f"{r['budget_steps']:>7}{r['tokens'] / 1e6:>9.2f}M{r['linear_mid_run']:>17.4f}"
                     f"{r['wsd_branch']:>12.4f}{r['linear_ended']:>15.4f}")
    w = result["wall_s"]
    lines.append(f"wall time: linear {w['linear']:.0f} s, WSD with its branches {w['wsd']:.0f} s "
                 f"({result['wsd_extra_wall']:+.0%})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from trainables.config import ConfigError

    p = argparse.ArgumentParser(prog="python -m trainables.schedules", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu-small")
    p.add_argument("--steps", type=int, default=1600, help="the long runs' steps")
    p.add_argument("--shares", default="0.25,0.5", help="the budgets, as shares of --steps in (0, 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/schedules", help="where the runs go (a finished run is not trained again)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    try:
        shares = [float(s) for s in a.shares.split(",") if s.strip()]
        if not shares or any(not 0 < s < 1 for s in shares):
            raise ValueError
    except ValueError:
        print(f"error: --shares {a.shares!r} must be comma-separated numbers in (0, 1)", file=sys.stderr)
        return 2
    try:
        result = measure(a.preset, a.steps, shares, a.seed, Path(a.out), a.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    (Path(a.out) / f"s{a.seed}" / "schedules.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
