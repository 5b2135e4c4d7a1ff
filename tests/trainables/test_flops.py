"""The FLOPs formula against PyTorch's own count of what a step computes, and budgets at equal compute."""

import json

import pytest
from torch.utils.flop_counter import FlopCounterMode

from trainables.presets import build_config
from trainables.data.batches import Position
from trainables.flops import shape_of, step_flops
from trainables.objectives import get_objective, total_loss
from trainables.pretrain import initial_model, pretrain_model, build_pretraining_data, run_pretraining


def _cfg(tmp_path, variant, *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'c'}",
                                           "run.tensorboard=false", *extra])


@pytest.mark.parametrize("variant", ["full", "mlm_only", "nsp_only", "mlm_pairs", "electra", "electra_nsp"])
def test_step_flops_equal_pytorchs_count_of_forward_and_backward(tmp_path, variant):
    cfg = _cfg(tmp_path, variant, "model.hidden_size=64", "model.intermediate_size=256")
    data = build_pretraining_data(cfg)
    model = pretrain_model(cfg, initial_model(cfg, data))
    batch = data.steps.batch(Position(0, 0, 0, 0))
    counter = FlopCounterMode(display=False)
    with counter:
        loss, _ = total_loss(model(batch), batch, cfg.objective.weights, cfg.objective.options)
        loss.backward()
    ours = step_flops(cfg.model, [get_objective(n) for n in cfg.objective.active], cfg.objective.options,
                      shape_of(batch), data.sp.vocab_size)
    assert ours == pytest.approx(counter.get_total_flops(), rel=1e-6)


@pytest.mark.parametrize("kind", ["flops", "tokens"])
def test_every_variant_spends_the_same_budget_within_one_step(tmp_path, kind):
    runs = {}
    for v in ("full", "mlm_only", "electra"):
        run_pretraining(_cfg(tmp_path, v, f"optim.budget={kind}", "optim.max_steps=12"), tmp_path / v)
        runs[v] = json.loads((tmp_path / v / "run.json").read_text())
    target = runs["full"]["budget_target"]
    assert {r["budget_target"] for r in runs.values()} == {target}
    for v, r in runs.items():
        spent = r["train_flops"] if kind == "flops" else r["tokens_seen"]
        per_step = spent / r["steps"]  # batch lengths vary (bucketing): one step may cost twice the mean
        assert target <= spent < target + 2 * per_step, (v, spent, target)  # reached, and within one step
    if kind == "flops":
        assert runs["electra"]["train_flops"] / runs["electra"]["steps"] > runs["full"]["train_flops"] / runs["full"]["steps"]


def test_the_reference_budget_is_berts_full_whatever_the_variants_mask_ratio(tmp_path):
    """A mix searched at mask ratio 0.34 gets BERT's compute (full at 0.15), not full's at 0.34 (1.31x)."""
    targets = {}
    for ratio in (0.15, 0.34):
        out = tmp_path / f"r{ratio}"
        run_pretraining(_cfg(tmp_path, "full", "optim.budget=flops", "optim.max_steps=6",
                             f"objective.mask_ratio={ratio}"), out)
        targets[ratio] = json.loads((out / "run.json").read_text())["budget_target"]
    assert targets[0.34] == targets[0.15]


def test_full_at_a_token_budget_runs_exactly_its_max_steps(tmp_path):
    """The plan counts each row's real tokens: with NSP's random segments as long as B, full reaches its
    own token target at max_steps (it ran 163 of 160 steps when negatives were shorter than planned)."""
    run_pretraining(_cfg(tmp_path, "full", "optim.budget=tokens", "optim.max_steps=20"), tmp_path / "t")
    assert json.loads((tmp_path / "t" / "run.json").read_text())["steps"] == 20
