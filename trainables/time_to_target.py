"""Time to a trained encoder: wall seconds until held-out MLM accuracy first reaches a target (15%).

    python -m trainables.time_to_target --arm reference --arm batch8-mask30 --seeds 0,1 --out runs/ttt
    python -m trainables.time_to_target --arm here --set optim.lr=2e-3 --seeds 10 --out runs/ttt-lr

Each (arm, seed) trains ``mlm_only`` on the built-in corpus in its own process, two at once with one thread each
(as a sweep's trials run), and reads held-out MLM accuracy every ``--every`` steps on one fixed held-out set
whatever the arm's batch or sequence: 32 batches of 32 rows at sequence 128, the fixed 15% evaluation mask
(``--eval-batches``). A point's wall time counts from the moment its process was started (interpreter, imports,
data loading and any compilation included) less the time spent evaluating, so an arm that evaluates more often is
not charged for it. A run stops at its first point at or above ``--target`` (``--full`` trains on to its end).

An arm is a preset with overrides, run from this checkout or from a git commit (``ARMS``): ``reference`` is the
``cpu-long`` recipe (cpu-small's model, batch 32, 8,000 steps of linear decay) at the commit before the time to a
trained encoder was worked on, checked out into a cache folder, so its figure is that code's and not this checkout's.
Each point, the CPU's model name and its bf16 flags go to ``OUT/<arm>/s<seed>.jsonl``; ``OUT/summary.json`` holds
each arm's seconds to the target per seed and, with the reference beside it, the ratio; ``OUT/curves.png`` draws
accuracy against seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Arm(NamedTuple):
    preset: str
    overrides: tuple[str, ...]
    commit: str | None  # None: this checkout
    about: str


# The commit whose code and recipe are the reference: the last before this command existed.
REFERENCE_COMMIT = "e785a2b"
ARMS: dict[str, Arm] = {
    "reference": Arm("cpu-long", ("run.snapshots=",), REFERENCE_COMMIT,
                     "cpu-long's recipe and code before the time to 15% was worked on: batch 32, peak 1e-3, "
                     "8,000 steps of linear decay"),
    # The recipe search's winner (docs/pretraining-recipes.md: four times the updates with a higher mask ratio) on the
    # reference's token budget: batch 8 for 32,000 steps of linear decay, mask ratio 0.3, 5% warmup.
    "batch8-mask30": Arm("cpu-long", ("run.snapshots=", "optim.batch_size=8", "optim.max_steps=32000",
                                      "objective.mask_ratio=0.3", "optim.warmup_frac=0.05"), None,
                         "four times the updates at the reference's tokens: batch 8, mask ratio 0.3, 5% warmup"),
    # Mask ratio 0.3 at the reference's batch (sooner to 15% on its own: docs/results.md) with the position
    # table started as sinusoids (model.position_init): neighbouring positions start alike instead of unrelated.
    "sin-mask30": Arm("cpu-long", ("run.snapshots=", "objective.mask_ratio=0.3", "model.position_init=sinusoidal"),
                      None, "the reference's recipe with mask ratio 0.3 and sinusoidal starting positions"),
    # sin-mask30 with the position table started at three times BERT's std (model.position_scale): the positions
    # outweigh the tokens at the start, so attending by offset comes sooner; a 4% warmup (320 steps, not 800).
    "sin3-mask30": Arm("cpu-long", ("run.snapshots=", "objective.mask_ratio=0.3", "model.position_init=sinusoidal",
                                    "model.position_scale=3", "optim.warmup_frac=0.04"), None,
                       "mask ratio 0.3, sinusoidal starting positions at three times BERT's std, 4% warmup"),
    "here": Arm("cpu-long", ("run.snapshots=",), None, "cpu-long's recipe on this checkout's code"),
}
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_record() -> dict:
    """The CPU's model name and the instruction-set flags that decide its precision and speed."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.partition(":")[2].strip()
            if line.startswith("flags"):
                flags = set(line.partition(":")[2].split())
    except OSError:
        pass
    return {"cpu": model, "flags": [f for f in FLAGS if f in flags], "cores": os.cpu_count()}


class _Reached(Exception):
    pass


def child(args) -> int:
    """One (arm, seed): train, evaluate every ``--every`` steps, write each point as a JSON line."""
    t0 = float(os.environ.get("TTT_T0", time.time()))
    code = os.environ.get("TTT_CODE")
    if code:  # the arm's code first on the path: a checkout of its commit
        sys.path.insert(0, code)
    import torch

    import trainables.pretrain as P
    from trainables.presets import build_config

    out = Path(args.child_out)
    spent = {"eval": 0.0}
    build = P.build_eval_sets

    def fixed_eval_sets(corpus, sp, **_):  # the same held-out set for every arm: 32 x 32 rows at sequence 128
        return build(corpus, sp, seq_len=args.eval_seq_len, batch_size=args.eval_batch_size,
                     n_batches=args.eval_batches, eval_mask_ratio=0.15)

    from trainables.objectives.mlm import mlm_metrics

    def timed_evaluate(model, sets, device):  # held-out MLM accuracy on pair inputs (run.json's mlm_acc) only
        s, was_training = time.time(), model.training
        model.eval()
        try:
            pairs = sets._replace(masked={"nsp_pairs": sets.masked["nsp_pairs"], "single": []})
            return {"mlm_acc": mlm_metrics(model, pairs, device)["mlm_acc"]}
        finally:
            model.train(was_training)
            spent["eval"] += time.time() - s

    P.build_eval_sets, P.evaluate_intrinsic = fixed_eval_sets, timed_evaluate
    overrides = [*args.overrides, f"run.seed={args.seed}", f"run.threads={args.threads}",
                 f"run.eval_every={args.every}", "run.tensorboard=false", "run.checkpoint_every=0"]
    cfg = build_config(args.preset, "mlm_only", overrides)
    head = {"arm": args.arm, "seed": args.seed, "preset": args.preset, "overrides": overrides,
            "code": str(Path(P.__file__).resolve().parents[1]), "commit": args.commit, "torch": torch.__version__,
            "threads": args.threads, "steps": cfg.optim.max_steps, "batch_size": cfg.optim.batch_size, "seq_len": cfg.data.seq_len,
            **cpu_record()}
    log = out.open("w")
    log.write(json.dumps({"header": head}) + "\n")
    log.flush()

    def report(metrics, checkpoint_dir=None):
        acc = metrics.get("eval/mlm_acc")
        if acc is None:
            return
        point = {"step": metrics["step"], "tokens": metrics.get("tokens_seen"), "mlm_acc": acc,
                 "wall_s": time.time() - t0 - spent["eval"], "eval_s": spent["eval"]}
        log.write(json.dumps(point) + "\n")
        log.flush()
        if acc >= args.target and not args.full:
            raise _Reached

    try:
        P.run_pretraining(cfg, out.parent / f"{out.stem}-run", report, resume=False)
    except _Reached:
        pass
    log.close()
    os._exit(0)  # the loader's threads need not wind down: every point is written


def checkout(commit: str, cache: Path, repo: Path = ROOT) -> Path:
    """``commit``'s ``trainables`` package in ``cache`` (git archive: no worktree bookkeeping), once."""
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          capture_output=True, text=True)
    if full.returncode:
        raise SystemExit(f"error: commit {commit!r} is not in this clone's history ({full.stderr.strip()}); the "
                         "reference arm needs a clone with history (git fetch --unshallow)")
    dest = cache / full.stdout.strip()[:12]
    if not (dest / "trainables").is_dir():  # extracted beside it, then renamed: a cut extraction is never reused
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit, "trainables"], capture_output=True,
                                 check=True)
        subprocess.run(["tar", "-x", "-C", str(part)], input=archive.stdout, check=True)
        part.rename(dest)
    return dest


def first_at(points: list[dict], target: float) -> dict | None:
    return next((p for p in points if p["mlm_acc"] >= target), None)


def read_points(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return lines[0]["header"], lines[1:]


def summarise(out: Path, arms: list[str], seeds: list[int], target: float) -> dict:
    rows, curves = {}, {}
    for arm in arms:
        for s in seeds:
            path = out / arm / f"s{s}.jsonl"
            if not path.exists():
                continue
            head, pts = read_points(path)
            hit = first_at(pts, target)
            rows.setdefault(arm, {})[s] = {"seconds": hit and round(hit["wall_s"], 1), "step": hit and hit["step"],
                                           "tokens": hit and hit["tokens"], "last_acc": pts[-1]["mlm_acc"] if pts else None,
                                           "cpu": head["cpu"], "flags": head["flags"]}
            curves[(arm, s)] = pts
    summary = {"target": target, "arms": rows, **cpu_record()}
    # The ratio of the arms' mean seconds over the seeds that reached the target; per seed beside it (seed k of
    # two arms shares initial weights and data order, not batches when the batch size differs).
    means = {arm: sum(t) / len(t) for arm, r in rows.items() if (t := [x["seconds"] for x in r.values() if x["seconds"]])}
    summary["mean_seconds"] = {arm: round(m, 1) for arm, m in means.items()}
    if "reference" in means:
        for arm in rows:
            if arm == "reference" or arm not in means:
                continue
            summary.setdefault("ratio_to_reference", {})[arm] = {
                "of_means": round(means[arm] / means["reference"], 3),
                "per_seed": {s: round(r["seconds"] / rows["reference"][s]["seconds"], 3)
                             for s, r in rows[arm].items() if r["seconds"] and rows["reference"].get(s, {}).get("seconds")}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _plot(out / "curves.png", curves, target)
    return summary


def _plot(path: Path, curves: dict, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (arm, s), pts in sorted(curves.items()):
        ax.plot([p["wall_s"] for p in pts], [100 * p["mlm_acc"] for p in pts], marker=".", label=f"{arm}, seed {s}")
    ax.axhline(100 * target, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("wall seconds from process start (evaluation excluded)")
    ax.set_ylabel("held-out MLM accuracy (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.time_to_target", description=__doc__.split("\n\n")[0],
                                epilog="arms: " + "; ".join(f"{name}: {a.about}" for name, a in ARMS.items()))
    p.add_argument("--arm", action="append",
                   help=f"one of: {', '.join(ARMS)} (repeatable; default: reference, batch8-mask30)")
    p.add_argument("--seeds", default="0,1", help="pretraining seeds, comma-separated")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override on top of every arm's own (repeatable)")
    p.add_argument("--target", type=float, default=0.15, help="held-out MLM accuracy to reach (default 0.15)")
    p.add_argument("--every", type=int, default=100, help="steps between held-out readings (default 100)")
    p.add_argument("--eval-batches", type=int, default=32, help="held-out batches (default 32)")
    p.add_argument("--eval-batch-size", type=int, default=32, help="rows per held-out batch (default 32)")
    p.add_argument("--eval-seq-len", type=int, default=128, help="held-out sequence length (default 128)")
    p.add_argument("--parallel", type=int, default=2, help="processes at once (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--full", action="store_true", help="train to the end instead of stopping at the target")
    p.add_argument("--out", required=True)
    # the child's own arguments (one arm and seed, in its own process)
    p.add_argument("--reference-commit", default=REFERENCE_COMMIT,
                   help=f"the commit whose code the reference arm runs (default {REFERENCE_COMMIT})")
    p.add_argument("--preset", help="train every arm at this preset instead of its own (e.g. smoke, for a quick look)")
    for name in ("--child-out", "--commit"):
        p.add_argument(name, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--child-arm", dest="child_arm", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_out:
        args.arm = args.child_arm
        return child(args)
    arms = args.arm or ["reference", "batch8-mask30"]
    bad = [a for a in arms if a not in ARMS]
    if bad:
        p.error(f"--arm {bad[0]!r} is not valid; allowed: {', '.join(ARMS)}")
    if not 0 < args.target < 1:
        p.error(f"--target {args.target} must be in (0, 1)")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds {args.seeds!r} must be comma-separated integers")
    out = Path(args.out)
    jobs = []
    for arm in arms:
        a = ARMS[arm]
        if arm == "reference":
            a = a._replace(commit=args.reference_commit)
        code = checkout(a.commit, out / ".code") if a.commit else None
        for s in seeds:
            (out / arm).mkdir(parents=True, exist_ok=True)
            jobs.append((arm, s, a, code))
    running: list = []
    env0 = {**os.environ, "HF_HUB_OFFLINE": "1"}
    while jobs or running:
        while jobs and len(running) < args.parallel:
            arm, s, a, code = jobs.pop(0)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--out", args.out, "--child-out",
                   str(out / arm / f"s{s}.jsonl"), "--child-arm", arm, "--preset", args.preset or a.preset, "--seed", str(s),
                   "--threads", str(args.threads), "--every", str(args.every), "--target", str(args.target),
                   "--eval-batches", str(args.eval_batches), "--eval-batch-size", str(args.eval_batch_size),
                   "--eval-seq-len", str(args.eval_seq_len), *(["--full"] if args.full else []),
                   *(["--commit", a.commit] if a.commit else []),
                   *[x for o in (*a.overrides, *args.overrides) for x in ("--set", o)]]
            env = {**env0, "TTT_T0": repr(time.time()), **({"TTT_CODE": str(code)} if code else {})}
            if not code:
                env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env0.get("PYTHONPATH", "")])
            running.append((arm, s, subprocess.Popen(cmd, env=env, cwd=str(ROOT),
                                                     stdout=(out / arm / f"s{s}.log").open("w"),
                                                     stderr=subprocess.STDOUT)))
            print(f"started {arm} seed {s}", flush=True)
        time.sleep(2)
        for item in list(running):
            arm, s, proc = item
            if proc.poll() is not None:
                running.remove(item)
                _, pts = read_points(out / arm / f"s{s}.jsonl") if (out / arm / f"s{s}.jsonl").exists() else ({}, [])
                hit = first_at(pts, args.target)
                print(f"{arm} seed {s}: " + (f"{100 * args.target:g}% at {hit['wall_s']:.0f} s (step {hit['step']})"
                                             if hit else f"not reached (last {pts[-1]['mlm_acc'] if pts else math.nan:.3f}"
                                                         f", rc {proc.returncode})"), flush=True)
    print(json.dumps(summarise(out, arms, seeds, args.target)))
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file by the parent: the arm's code (TTT_CODE) decides what imports
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    sys.exit(main())
