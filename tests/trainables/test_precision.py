"""run.precision: ``auto`` is bf16 autocast on CUDA and on a CPU with native bf16 (AVX512-BF16 or AMX), fp32
elsewhere; ``fp32`` and ``bf16`` force theirs. Pretraining, fine-tuning and the probe follow the rule; run.json
and the bench state what was used and why.

The CPU's detection is monkeypatched, so both answers are tested on any machine."""

import json

import pytest
import torch

from trainables import bench, runtime
from trainables.finetune import api, probe
from trainables.presets import build_config
from trainables.pretrain import run_pretraining
from test_finetune_sync_free import _task

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU


@pytest.fixture
def cpu_bf16(monkeypatch):
    """cpu_bf16(flag): this CPU's native bf16 instruction set is ``flag`` (None: it has none)."""
    return lambda flag: monkeypatch.setattr(runtime, "_cpu_bf16_flag", lambda: flag, raising=False)


def _linear_dtype(device, precision: str) -> torch.dtype:
    with runtime.autocast(device, precision):
        return torch.nn.Linear(4, 4)(torch.ones(2, 4)).dtype


@pytest.mark.parametrize("text, flag", [
    ("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni\n", "avx512_bf16"),
    ("flags\t\t: fpu avx512f amx_bf16 amx_tile avx512_bf16\n", "amx_bf16"),
    ("flags\t\t: fpu sse avx2 avx512f avx512bw\nbugs\t\t: avx512_bf16\n", None),  # only the flags line counts
    ("Features\t: fp asimd bf16\n", None),  # an Arm CPU's bf16 is not one torch's CPU autocast uses here
])
def test_native_bf16_is_read_from_the_cpu_flags(text, flag):
    assert runtime.cpu_bf16_flag(text) == flag


def test_auto_is_bf16_on_a_cpu_with_native_bf16_and_fp32_without(cpu_bf16):
    cpu_bf16("avx512_bf16")
    assert _linear_dtype(CPU, "auto") == torch.bfloat16
    assert runtime.resolve_precision(CPU, "auto") == ("bf16", "auto: the CPU has avx512_bf16")
    cpu_bf16(None)
    assert _linear_dtype(CPU, "auto") == torch.float32
    name, why = runtime.resolve_precision(CPU, "auto")
    assert name == "fp32" and "no native bf16" in why and "avx512_bf16" in why
    assert runtime.resolve_precision(CUDA, "auto") == ("bf16", "auto: CUDA")


def test_fp32_and_bf16_force_theirs(cpu_bf16):
    cpu_bf16("amx_bf16")
    assert _linear_dtype(CPU, "fp32") == torch.float32
    assert runtime.resolve_precision(CUDA, "fp32") == ("fp32", "run.precision=fp32")
    cpu_bf16(None)
    assert _linear_dtype(CPU, "bf16") == torch.bfloat16  # forced: emulated where the CPU has no bf16
    with pytest.raises(runtime.ConfigError, match="'fp16'.*auto, fp32, bf16"):
        runtime.resolve_precision(CPU, "fp16")


def _pretrain(tmp_path, name: str, *extra) -> tuple[dict, list[float]]:
    cfg = build_config("smoke", "full", ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                         "run.tensorboard=false", "optim.max_steps=3", "run.log_every=1",
                                         "run.eval_batches=1", "run.device=cpu", *extra])
    losses = []
    run_pretraining(cfg, tmp_path / name, lambda m, checkpoint_dir=None: losses.append(m.get("loss/total")))
    return json.loads((tmp_path / name / "run.json").read_text()), [x for x in losses if x is not None]


def test_pretraining_follows_the_rule_is_deterministic_and_run_json_states_it(tmp_path, cpu_bf16):
    cpu_bf16("avx512_bf16")
    run, bf16 = _pretrain(tmp_path, "a")
    assert run["precision"] == "bf16" and run["precision_why"] == "auto: the CPU has avx512_bf16"
    assert run["config"]["run"]["precision"] == "auto"
    assert _pretrain(tmp_path, "b")[1] == bf16  # the same run twice in one process: the same losses, bit for bit
    cpu_bf16(None)
    run, fp32 = _pretrain(tmp_path, "c")
    assert run["precision"] == "fp32" and "no native bf16" in run["precision_why"]
    assert len(fp32) == len(bf16) == 2 and fp32 != bf16  # bf16 matmuls did run: the losses moved
    assert fp32 == pytest.approx(bf16, rel=1e-2)  # and only by rounding


def test_fine_tuning_and_the_probe_follow_the_rule(tiny_checkpoint, cpu_bf16):
    """Every Linear of fine-tuning (training and evaluation) and of the probe's encoder computes in bf16 at
    ``auto`` on a CPU with native bf16, in fp32 on one without."""
    seen: list[torch.dtype] = []

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear):
            seen.append(output.dtype)

    cfg = build_config("smoke", overrides=["run.device=cpu", "finetune.max_train_examples=8",
                                           "finetune.max_eval_examples=8", "finetune.probe_max_train=8"])
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        for flag, dtype in (("avx512_bf16", torch.bfloat16), (None, torch.float32)):
            cpu_bf16(flag)
            seen.clear()
            api.run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=[_task("pair")])
            assert seen and set(seen) == {dtype}, flag
            seen.clear()
            probe.run_probe(tiny_checkpoint, [_task("pair")], cfg)
            assert seen and set(seen) == {dtype}, flag
    finally:
        handle.remove()


def test_the_bench_compares_fp32_beside_bf16_where_auto_is_bf16(cpu_bf16):
    cpu_bf16("avx512_bf16")
    assert bench.bench_precisions(None, "auto", CPU) == ["auto", "fp32"]
    assert bench.bench_precisions(None, "fp32", CPU) == ["fp32"]
    assert bench.bench_precisions("fp32,bf16", "auto", CPU) == ["fp32", "bf16"]
    assert bench.bench_precisions("auto,bf16", "auto", CPU) == ["auto"]  # the same computation once
    assert bench.bench_precisions(None, "auto", CUDA) == ["auto"]  # a GPU bench stays at the run's precision
    cpu_bf16(None)
    assert bench.bench_precisions(None, "auto", CPU) == ["auto"]
    with pytest.raises(runtime.ConfigError, match="'fp16'.*auto, fp32, bf16"):
        bench.bench_precisions("fp32,fp16", "auto", CPU)


def test_cpu_mfu_is_over_the_measured_peak_of_its_precision(capsys, cpu_bf16):
    cpu_bf16("avx512_bf16")
    assert bench.main(["--preset", "smoke", "--corpus", "synthetic", "--steps", "2", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["precision"] == "bf16" and out["precision_why"] == "auto: the CPU has avx512_bf16"
    assert set(out["by_precision"]) == {"bf16", "fp32"} and out["bf16_vs_fp32"] > 0
    peaks = out["matmul_peaks"]
    assert peaks["square_matmul"] == "2048x2048x2048" and peaks["fp32_tflops"] > 0 and peaks["bf16_tflops"] > 0
    for name, side in out["by_precision"].items():
        assert side["peak_tflops"] == peaks[f"{name}_tflops"] and side["peak_source"].startswith("measured")
        # each of the three figures is rounded to 4 significant digits (5e-4 relative at most)
        assert side["mfu"] == pytest.approx(side["achieved_tflops"] / side["peak_tflops"], rel=1.5e-3)
        assert side["ratio"] == pytest.approx(side["ours_tokens_per_s"] / side["reference_tokens_per_s"], abs=1e-3)
    assert out["mfu"] == out["by_precision"]["bf16"]["mfu"]
    assert bench.main(["--preset", "smoke", "--precision", "fp16"]) == 2
    assert bench.main(["--preset", "smoke", "--rounds", "0"]) == 2


def test_attention_stays_fp32_under_a_cpus_bf16_autocast():
    """The linear layers of a BERT run in bf16 under CPU autocast, its attention in fp32 (torch's CPU flash
    attention is slower in bf16); without autocast the model is exactly transformers' own."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertModel(config, add_pooling_layer=False).eval()
    attention = model.encoder.layer[0].attention.self
    seen = {}
    attention.register_forward_hook(lambda m, args, out: seen.update(attention=out[0].dtype))
    attention.query.register_forward_hook(lambda m, args, out: seen.update(query=out.dtype))
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False  # a padded row: the bool mask reaches SDPA as it is
    with runtime.autocast(CPU, "bf16"):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert seen == {"query": torch.bfloat16, "attention": torch.float32} and out.dtype == torch.float32
    fp32 = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert seen == {"query": torch.float32, "attention": torch.float32}
    torch.testing.assert_close(out, fp32, atol=0.05, rtol=0.05)  # bf16's rounding, nothing more
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = (torch.randn(2, 2, 7, 16) for _ in range(3))
    ours, _ = runtime.sdpa_fp32_on_cpu(attention, q, k, v, mask, dropout=0.0, scaling=0.25)
    theirs, _ = sdpa_attention_forward(attention, q, k, v, mask, dropout=0.0, scaling=0.25)
    assert torch.equal(ours, theirs)  # outside autocast: transformers' function, unchanged
