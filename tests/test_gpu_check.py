"""The GPU check (trainables.gpu_check) on this CPU machine: the CUDA gate, the budget and the one JSON file,
and the dry run of every part with Ray, Optuna, datasets and seqeval blocked (the lent GPU machine has
none of them)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainables.gpu_check import check, record

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("ray", "optuna", "datasets", "seqeval")


def _strict(text: str) -> dict:
    """JSON as a strict reader takes it: NaN or Infinity are refused."""
    def refuse(name):
        raise ValueError(f"{name} in the JSON")
    return json.loads(text, parse_constant=refuse)


def _blocking_site(tmp_path: Path) -> dict:
    """An environment whose every Python process (the parts', the trials', the DDP ranks') starts with
    ``sys.modules[m] = None`` for the blocked modules: ``import ray`` fails there as where it is absent."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in BLOCKED))
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "HF_HUB_OFFLINE": "1"}


def test_a_cpu_only_torch_stops_the_check_at_once_in_one_line(tmp_path):
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "trainables.gpu_check", "--out", str(tmp_path / "gc")], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert time.perf_counter() - t0 < 5.0
    assert run.returncode == 2 and len(run.stdout.strip().splitlines()) == 1 and "CUDA is not usable" in run.stdout
    assert not (tmp_path / "gc").exists()  # nothing ran


def test_the_json_is_valid_and_names_what_was_not_finite():
    text = record.dumps({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": 2}})
    data = _strict(text)
    assert data["a"] is None and data["b"] == [1.0, None] and data["non_finite"] == ["a", "b[1]"]


# The smoke part's process as the check starts it, but stuck for good in its resume step (after its formats
# are recorded): a part that outlives its share on any machine, however fast.
_STUCK_SMOKE = ("import runpy, time; import trainables.gpu_check.smoke as s; "
                "s.resume = lambda *a, **k: time.sleep(3600); "
                "runpy.run_module('trainables.gpu_check.parts', run_name='__main__', alter_sys=True)")


def test_a_timed_out_part_keeps_what_came_before_and_the_json_reaches_the_storage(tmp_path, monkeypatch):
    """A part killed at its share of the budget is recorded as a timeout (its process group gone), the parts
    before it stay in the file, and every rewrite is mirrored to --storage (file:// through pyarrow, as s3://).
    The smoke part never finishes here (``_STUCK_SMOKE``) and its share is pinned to 20 s (it writes its header
    within a second or two; the margin is for a machine shared with the other xdist worker): a real smoke
    racing its share passed or failed with the machine's speed."""
    share, popen = check.part_timeout, check.subprocess.Popen

    def start(cmd, *args, **kwargs):
        if cmd[1:4] == ["-m", "trainables.gpu_check.parts", "smoke"]:
            cmd = [cmd[0], "-c", _STUCK_SMOKE, *cmd[3:]]
        return popen(cmd, *args, **kwargs)
    monkeypatch.setattr(check.subprocess, "Popen", start)
    monkeypatch.setattr(check, "MIN_PART_S", 5.0)
    monkeypatch.setattr(check, "part_timeout", lambda name, args, report: 20.0 if name == "smoke"
                        else share(name, args, report))
    store = tmp_path / "store"
    rc = check.main(["--dry-run", "--parts", "smoke,ddp", "--budget-s", "60", "--out", str(tmp_path / "gc"),
                     "--storage", f"file://{store}"])
    data = _strict((tmp_path / "gc" / "gpu_check.json").read_text())
    assert rc == 1 and data["parts"]["data"]["status"] == "pass"
    assert data["parts"]["smoke"]["status"] == "timeout" and data["parts"]["smoke"]["returncode"] is None
    assert data["parts"]["smoke"]["result"].get("part") == "smoke"  # what it had written is kept
    assert set(data["parts"]) == {"data", "smoke", "ddp"} and data["failed_parts"][0] == "smoke"
    assert _strict((store / "gpu_check.json").read_text())["parts"].keys() == data["parts"].keys()
    assert (store / "smoke.log").is_file()
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "gc" / "work")], capture_output=True).returncode == 1


def test_bad_arguments_are_one_line(capsys):
    for argv, expect in ((["--parts", "smoke,nope"], "unknown nope"), (["--budget-s", "-1"], "must be > 0")):
        with pytest.raises(SystemExit):
            check.main(argv)
        assert expect in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_dry_run_runs_every_part_without_ray_optuna_datasets_or_seqeval(tmp_path):
    """Every part on the CPU at smoke size, in processes that cannot import the blocked modules: the
    Ray-free core is all the check needs. The JSON records every version and is valid JSON."""
    out = tmp_path / "gc"
    run = subprocess.run([sys.executable, "-m", "trainables.gpu_check", "--dry-run", "--out", str(out)], cwd=REPO,
                         env=_blocking_site(tmp_path), capture_output=True, text=True, timeout=2300)
    data = _strict((out / "gpu_check.json").read_text())
    parts = data["parts"]
    failed = {n: (p.get("result", {}).get("checks"), p.get("error_tail", [])[-3:]) for n, p in parts.items()
              if p["status"] != "pass"}
    assert run.returncode == 0 and not failed, (failed, run.stdout[-2000:])
    assert set(parts) == {"data", *check.PARTS}
    env = data["environment"]
    assert all(env[k] for k in ("python", "torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas",
                                "pyarrow", "scikit-learn", "tensorboard", "source_sha256"))
    assert env["importable"] == {m: False for m in BLOCKED}
    smoke, bench = parts["smoke"]["result"], parts["bench"]["result"]
    assert smoke["summary"]["formats_ok"] == 6 and smoke["checks"]["resume_continues_after_its_checkpoint"]
    assert bench["summary"]["ms_per_step"] > 0 and bench["summary"]["ratio_to_stock"] > 0
    assert bench["eager"]["unpadded"]["backend"] != "unknown"
    calibrate = parts["calibrate"]["result"]
    assert calibrate["phases"]["alone"]["ok"] == 1 and calibrate["phases"]["four"]["ok"] == 4
    assert calibrate["planner"]["measured"]["overlap"] > 0 and "skipped" in calibrate["replan"]  # no Ray here
    assert all(parts["ddp"]["result"]["checks"].values())
