"""`python -m trainables.time_to_target`: seconds to a held-out MLM accuracy, evaluation left out of the clock,
each arm on its own code (the reference on its commit's), the CPU named beside every figure."""

import json
import subprocess
import time

import pytest

from trainables import time_to_target as ttt


def _write(path, header, points):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(x) for x in [{"header": header}, *points]) + "\n")


def test_the_summary_takes_each_runs_first_point_at_the_target_and_the_ratio_to_the_reference(tmp_path):
    head = {"cpu": "X", "flags": []}
    pts = lambda accs, dt: [{"step": 100 * (i + 1), "tokens": 1, "mlm_acc": a, "wall_s": dt * (i + 1)}  # noqa: E731
                            for i, a in enumerate(accs)]
    _write(tmp_path / "reference" / "s0.jsonl", head, pts([0.10, 0.14, 0.151, 0.149, 0.16], 100.0))
    _write(tmp_path / "fast" / "s0.jsonl", head, pts([0.12, 0.155, 0.17], 50.0))
    _write(tmp_path / "fast" / "s1.jsonl", head, pts([0.12, 0.13], 50.0))  # never reached
    s = ttt.summarise(tmp_path, ["reference", "fast"], [0, 1], 0.15)
    assert s["arms"]["reference"][0]["seconds"] == 300.0 and s["arms"]["reference"][0]["step"] == 300
    assert s["arms"]["fast"][0]["seconds"] == 100.0
    assert s["arms"]["fast"][1]["seconds"] is None and s["arms"]["fast"][1]["last_acc"] == 0.13
    assert s["mean_seconds"] == {"reference": 300.0, "fast": 100.0}  # the seed that never reached it left out
    assert s["ratio_to_reference"]["fast"] == {"of_means": round(100 / 300, 3), "per_seed": {0: round(100 / 300, 3)}}
    assert (tmp_path / "curves.png").stat().st_size > 0


@pytest.mark.slow
def test_each_arm_runs_its_own_code_and_its_clock_leaves_evaluation_out(tmp_path):
    out = tmp_path / "ttt"
    start = time.time()
    r = subprocess.run(["python", "-m", "trainables.time_to_target", "--arm", "here", "--arm", "reference",
                        "--preset", "smoke", "--seeds", "0", "--every", "4", "--full", "--target", "0.99",
                        "--eval-batches", "2", "--eval-seq-len", "64", "--set", "optim.max_steps=8",
                        "--set", "data.corpus=synthetic", "--set", f"data.cache_dir={tmp_path / 'cache'}",
                        "--reference-commit", "HEAD", "--out", str(out)],  # HEAD: in any clone, even a shallow one
                       capture_output=True, text=True, timeout=600)
    elapsed = time.time() - start
    assert r.returncode == 0, r.stdout + r.stderr
    heads = {}
    for arm in ("here", "reference"):
        head, points = ttt.read_points(out / arm / "s0.jsonl")
        heads[arm] = head
        assert head["cpu"] and isinstance(head["flags"], list) and head["preset"] == "smoke"
        assert [p["step"] for p in points] == [4, 8]
        assert all(p["eval_s"] > 0 for p in points) and points[0]["wall_s"] < points[1]["wall_s"]
        # the clock runs from the process's start less the evaluations: counted once, never twice
        assert points[-1]["wall_s"] + points[-1]["eval_s"] <= elapsed
    assert heads["reference"]["code"].startswith(str(out / ".code"))  # the commit's tree, not this checkout
    assert not heads["here"]["code"].startswith(str(out))
    assert json.loads(r.stdout.strip().splitlines()[-1])["arms"]["here"]["0"]["seconds"] is None


def test_the_reference_checkout_is_its_commits_tree_not_the_working_one(tmp_path):
    repo = tmp_path / "repo"
    (repo / "trainables").mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    git("init", "-q")
    (repo / "trainables" / "step.py").write_text("OLD = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old")
    old = git("rev-parse", "HEAD").stdout.strip()
    (repo / "trainables" / "step.py").write_text("NEW = 2\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "new")
    dest = ttt.checkout(old[:7], tmp_path / "cache", repo)
    assert (dest / "trainables" / "step.py").read_text() == "OLD = 1\n"
    assert ttt.checkout(old, tmp_path / "cache", repo) == dest  # once per commit
    with pytest.raises(SystemExit, match="is not in this clone's history"):
        ttt.checkout("0" * 40, tmp_path / "cache", repo)


def test_a_bad_arm_is_one_line(capsys):
    with pytest.raises(SystemExit):
        ttt.main(["--arm", "bogus", "--out", "x"])
    assert "--arm 'bogus' is not valid; allowed: reference" in capsys.readouterr().err
