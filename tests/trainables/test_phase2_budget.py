"""BERT's second phase under token and FLOP budgets: every variant trains it, for the same share of its steps.

At ``optim.budget=flops`` ELECTRA plans fewer steps than ``full``; with phase 2 at the fixed step
``max_steps - phase2_steps`` it got a smaller share of phase 2 or none, so ``electra - full`` also
differed in how much of training ran at the longer sequence length.
"""

import pytest

from trainables import pretrain
from trainables.budget import phase2_share, plan_budget
from trainables.presets import build_config

LOADER = pretrain.Loader
PHASE2 = ("data.seq_len=32", "optim.phase2_seq_len=64", "optim.max_steps=24", "optim.phase2_steps=8")


def _cfg(tmp_path, variant, *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'c'}",
                                           "run.tensorboard=false", "run.log_every=100", *PHASE2, *extra])


def _phases_run(tmp_path, monkeypatch, variant, *extra) -> list[int]:
    """The phase of every step the run trained, seen where the training loop reads its batches."""
    seen: list[int] = []

    class Spy(LOADER):
        def __iter__(self):
            for pos, batch in super().__iter__():
                seen.append(pos.phase)
                yield pos, batch

    monkeypatch.setattr(pretrain, "Loader", Spy)
    pretrain.run_pretraining(_cfg(tmp_path, variant, *extra), tmp_path / variant)
    return seen


def test_every_variant_trains_the_same_share_of_phase_two_at_a_flop_budget(tmp_path, monkeypatch):
    # A generator as wide as the encoder (ELECTRA's generator-size ablation) halves ELECTRA's steps at equal
    # FLOPs: with phase 2 at the fixed step max_steps - phase2_steps it stopped before phase 2 began.
    runs = {v: _phases_run(tmp_path, monkeypatch, v, "optim.budget=flops", "objective.rtd.generator_fraction=1.0")
            for v in ("full", "electra")}
    assert runs["full"].count(1) == 8 and len(runs["full"]) == 24  # full is the reference: as at a steps budget
    assert len(runs["electra"]) < len(runs["full"])  # the generator costs: fewer steps at equal FLOPs
    for phases in runs.values():
        assert phases == sorted(phases)  # one switch, phase 1 then phase 2
    share = runs["full"].count(1) / len(runs["full"])
    electra = runs["electra"]
    assert electra.count(1) >= 1
    assert abs(electra.count(1) - share * len(electra)) <= 1, (electra.count(1), len(electra))


@pytest.mark.parametrize("variant", ["full", "electra", "mlm_only"])
def test_a_steps_budget_keeps_phase_two_at_max_steps_less_phase2_steps(tmp_path, variant):
    cfg = _cfg(tmp_path, variant)
    budget = plan_budget(cfg, pretrain.build_pretraining_data(cfg).steps, 1024)
    assert (budget.planned_steps, budget.phase2_from) == (24, 16)


def test_phase_two_share_grows_by_at_most_one_step_and_is_exact_at_max_steps():
    shares = [phase2_share(p, 24, 8) for p in range(1, 60)]
    assert phase2_share(24, 24, 8) == 8 and phase2_share(10, 24, 0) == 0 and min(shares) == 1
    assert all(0 <= b - a <= 1 for a, b in zip(shares, shares[1:]))
