"""The bench's MFU: peaks by exact device name (trainables.hardware), --peak-tflops, the right device synced.

CUDA is not needed: the device name and synchronize are monkeypatched; the CPU path runs at the smoke preset.
"""

import json

import pytest
import torch

from trainables import bench, hardware


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA L40S", 362.0), ("NVIDIA L4", 121.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H200", 989.0), ("NVIDIA A100-SXM4-40GB", 312.0), ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA A10G", 70.0), ("NVIDIA A10", 125.0), ("  nvidia   l40s ", 362.0),  # case and spaces folded
])
def test_peak_by_exact_name(name, peak):
    assert hardware.peak_bf16_tflops(name) == peak


@pytest.mark.parametrize("name", ["NVIDIA H100", "L4", "NVIDIA GeForce RTX 4090", "NVIDIA L4S", "H200", ""])
def test_unknown_or_partial_names_have_no_peak(name):
    assert hardware.peak_bf16_tflops(name) is None  # a substring is never enough


def test_planner_names_use_the_same_table():
    assert hardware.PLANNER_PEAK_BF16_TFLOPS == {"h200": 989.0, "h100": 989.0, "a100": 312.0, "l4": 121.0,
                                                 "a10g": 70.0}
    assert all(v in hardware.PEAK_BF16_TFLOPS for v in hardware.PLANNER_DEVICES.values())


def _fake_gpu(monkeypatch, name):
    seen = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: seen.append(dev) or name)
    return seen


def test_mfu_uses_the_exact_name_of_the_benched_device(monkeypatch):
    seen = _fake_gpu(monkeypatch, "NVIDIA L40S")
    dev = torch.device("cuda:1")
    out = bench._mfu(181e12, 90.5e12, dev)
    assert seen == [dev]
    assert out["peak_tflops"] == 362.0 and out["mfu"] == 0.5 and out["reference_mfu"] == 0.25  # not 1.5 (L4's peak)
    _fake_gpu(monkeypatch, "NVIDIA H100 PCIe")
    assert bench._mfu(378e12, 1e12, dev)["mfu"] == 0.5  # not the SXM's 0.382


def test_unknown_gpu_mfu_is_null_and_says_peak_tflops_is_needed(monkeypatch, caplog):
    _fake_gpu(monkeypatch, "NVIDIA B300 Prototype")
    out = bench._mfu(100e12, 50e12, torch.device("cuda"))
    assert out["mfu"] is None and out["reference_mfu"] is None and out["achieved_tflops"] == 100.0
    assert "--peak-tflops" in out["mfu_note"] and "NVIDIA B300 Prototype" in out["mfu_note"]
    assert "--peak-tflops" in caplog.text
    over = bench._mfu(100e12, 50e12, torch.device("cuda"), peak_tflops=400.0)
    assert over["mfu"] == 0.25 and over["peak_source"] == "--peak-tflops" and "mfu_note" not in over
    _fake_gpu(monkeypatch, "NVIDIA H200")
    assert bench._mfu(100e12, 50e12, torch.device("cuda"), peak_tflops=200.0)["mfu"] == 0.5  # overrides the table


def test_sync_waits_on_the_benched_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: calls.append(dev))
    bench._sync(torch.device("cuda:1"))
    bench._sync(torch.device("cpu"))
    assert calls == [torch.device("cuda:1")]


def test_cpu_bench_runs_at_smoke_with_peak_override(capsys):
    assert bench.main(["--preset", "smoke", "--corpus", "synthetic", "--steps", "2", "--threads", "1",
                       "--peak-tflops", "0.5", "--precision", "fp32", "--profile"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["ratio"] > 0 and out["ours_tokens_per_s"] > 0
    assert out["peak_tflops"] == 0.5 and out["peak_source"] == "--peak-tflops" and out["mfu"] > 0
    assert out["precision"] == "fp32" and list(out["by_precision"]) == ["fp32"]
    assert out["by_precision"]["fp32"]["profile"]["groups"]["matmul"] > 0  # --profile
    assert "compiled_tokens_per_s" not in out["by_precision"]["fp32"]  # no compiled side without model.compile
    assert bench.main(["--preset", "smoke", "--peak-tflops", "-1"]) == 2


def test_the_bench_prints_valid_json_when_a_figure_was_not_measured(capsys, monkeypatch):
    """A rate it could not measure (the loop's, with one logged window) is NaN inside; the printed line is
    JSON that a strict reader takes (null), not Python's NaN."""
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: {"ratio": 2.0, "loop_tokens_per_s": float("nan")})
    assert bench.main(["--preset", "smoke"]) == 0

    def refuse(name):
        raise ValueError(name)
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1], parse_constant=refuse)
    assert line == {"ratio": 2.0, "loop_tokens_per_s": None}


def test_the_profile_puts_each_op_in_one_group_and_the_groups_add_up_to_the_step():
    """A step of a known make-up: a matmul, a log-softmax and a cast; each lands in its group, and the groups
    together are the step's whole profiled time (nothing counted twice or dropped)."""
    x, w = torch.randn(256, 256), torch.randn(256, 256)

    def step(b, i):
        y = x @ w
        torch.log_softmax(y, -1).to(torch.bfloat16).float().sum()

    prof = bench.profile_step(step, [None] * 4)
    g = prof["groups"]
    assert g["matmul"] > 0 and g["loss softmax"] > 0 and g["copies"] > 0 and g["attention"] == 0
    assert sum(g.values()) == pytest.approx(prof["ms_per_step"], abs=0.05)
    assert prof["top_ops"] and all(ms >= 0 for _, ms in prof["top_ops"])


def test_with_model_compile_the_bench_times_a_compiled_side_beside_the_eager_one(capsys, monkeypatch):
    """model.compile=true adds our step compiled, timed in the same rounds on the same batches as the eager
    step, its first step (the compilation) timed apart. torch.compile is recorded and made an identity here, so
    the test needs no compiler and pins that the compiled side wraps the training module."""
    wrapped = []

    def fake_compile(module, *a, **k):
        wrapped.append(type(module).__name__)
        return module
    monkeypatch.setattr(torch, "compile", fake_compile)
    assert bench.main(["--preset", "smoke", "--corpus", "synthetic", "--steps", "2", "--rounds", "2", "--threads",
                       "1", "--precision", "fp32", "--set", "model.compile=true"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    fp32 = out["by_precision"]["fp32"]
    assert fp32["compiled_tokens_per_s"] > 0 and fp32["compiled_first_step_s"] >= 0
    assert fp32["compiled_vs_eager"] == pytest.approx(fp32["compiled_tokens_per_s"] / fp32["ours_tokens_per_s"],
                                                      rel=1e-2)
    # once for the bench's compiled side, once for the end-to-end loop after it; a compiled eager side makes three
    assert wrapped == ["PretrainModel", "PretrainModel"]
