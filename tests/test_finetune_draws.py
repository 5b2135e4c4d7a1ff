"""Fine-tuning draws are nested in pretraining seeds: fine-tuning seed f of pretraining seed p draws its
training subset, head init and data order from (p, f), the same for every variant of p, anew per p, so
the multibootstrap's resampling of pretraining seeds covers them (``analysis.bootstrap``)."""

import json
import shutil

import pytest

from trainables.finetune import run_finetuning
from trainables.finetune.heads import Checkpoint
from trainables.presets import build_config
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES


@pytest.fixture(scope="module")
def seeded(tiny_checkpoint, tmp_path_factory):
    """The same weights as checkpoints of pretraining seeds 0, 0 (another variant) and 1."""
    out = {}
    for name, seed in (("full-s0", 0), ("mlm_pairs-s0", 0), ("full-s1", 1)):
        path = tmp_path_factory.mktemp(name) / name
        shutil.copytree(tiny_checkpoint, path)
        (path / "run.json").write_text(json.dumps({"status": "completed", "config": {"run": {"seed": seed}}}))
        out[name] = path
    return out


def _subsets(checkpoint, monkeypatch):
    """The training rows and initial classifier weights each fine-tuning seed used."""
    import trainables.finetune.api as api

    seen, subsample, build = [], api.subsample, api.build_head_model

    def spy_subsample(rows, limit, rng):
        picked = subsample(rows, limit, rng)
        if rng is not None:
            seen.append(("rows", [r["id"] for r in picked]))
        return picked

    def spy_build(*a, **k):
        model = build(*a, **k)
        seen.append(("head", model.classifier.weight.detach().flatten()[:8].tolist()))
        return model

    monkeypatch.setattr(api, "subsample", spy_subsample)
    monkeypatch.setattr(api, "build_head_model", spy_build)
    cfg = build_config("smoke", overrides=["finetune.epochs=1", "run.device=cpu", "finetune.max_train_examples=3"])
    run_finetuning(checkpoint, [], [0, 1], cfg, datasets=[load_hub_task("mrpc", FIXTURES / "glue_mrpc")])
    monkeypatch.undo()
    return seen


def test_draws_are_shared_within_a_pretraining_seed_and_new_across_seeds(seeded, monkeypatch):
    a, b, c = (_subsets(seeded[n], monkeypatch) for n in ("full-s0", "mlm_pairs-s0", "full-s1"))
    assert a == b  # paired: every variant of seed 0 sees the same subset and head init per f
    heads = lambda x: [v for k, v in x if k == "head"]  # noqa: E731
    assert heads(a) != heads(c)  # seed 1 draws anew (today's code: the same draw for every run)
    assert heads(a)[0] != heads(a)[1]  # and f = 0, 1 differ within a seed


def test_draw_is_a_pure_function_of_both_seeds_and_a_foreign_checkpoint_keeps_f(tiny_checkpoint):
    from trainables.finetune.heads import finetune_draw

    assert finetune_draw(2, 0) == finetune_draw(2, 0) != finetune_draw(2, 1)
    assert len({finetune_draw(f, p) for f in range(5) for p in range(5)}) == 25
    assert 0 <= finetune_draw(7, 3) < 2 ** 31  # a valid torch.manual_seed and numpy seed
    assert finetune_draw(4, None) == 4
    assert Checkpoint.load(tiny_checkpoint).pretrain_seed is None  # no run.json: the draw is f, as before
