"""finetune.head: ``cls`` makes sequence classification independent of the checkpoint's pooler (which NSP
trains and ``mlm_pairs`` leaves at random), ``pooler`` (the default) is BERT's head as before."""

import shutil

import pytest
import torch

from trainables.config import ConfigError
from trainables.finetune import run_finetuning
from trainables.finetune.heads import build_head_model
from trainables.presets import build_config
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES

BASE = ["finetune.epochs=2", "run.device=cpu"]


def _cfg(*extra):
    return build_config("smoke", overrides=BASE + list(extra))


@pytest.fixture(scope="module")
def mrpc():
    return [load_hub_task("mrpc", FIXTURES / "glue_mrpc")]


@pytest.fixture(scope="module")
def perturbed(tiny_checkpoint, tmp_path_factory):
    """A copy of the tiny checkpoint whose pooler weights (and only those) are different."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("perturbed") / "ck"
    shutil.copytree(tiny_checkpoint, out)
    path = next(out.glob("*.safetensors"))
    weights = load_file(str(path))
    keys = [k for k in weights if ".pooler." in k]
    assert keys, "the checkpoint has a pooler to perturb"
    gen = torch.Generator().manual_seed(1)
    for k in keys:
        weights[k] = weights[k] * -3.0 + torch.randn(weights[k].shape, generator=gen)
    save_file(weights, str(path), metadata={"format": "pt"})
    return out


def _outcome(checkpoint, cfg, data, monkeypatch):
    """(metrics, predictions, heads recorded, every evaluation's logits) of one fine-tuning."""
    import trainables.finetune.api as api

    logits, predict = [], api.predict_logits
    monkeypatch.setattr(api, "predict_logits", lambda *a, **k: logits.append(predict(*a, **k)) or logits[-1])
    evals, preds = run_finetuning(checkpoint, [], [0], cfg, run_id="r", datasets=data).to_tables()
    ev = evals.to_pandas()
    return (sorted(zip(ev.task, ev.metric, ev.value, ev.dev_value)), preds.column("prediction").to_pylist(),
            sorted(set(ev["head"])), [x.tolist() for out in logits for x in out])


def _state(checkpoint, spec, head):
    return build_head_model(checkpoint, spec, 0, head=head).state_dict()


def test_cls_head_never_reads_the_checkpoint_pooler(tiny_checkpoint, perturbed, mrpc):
    spec = mrpc[0].spec
    a, b = _state(tiny_checkpoint, spec, "cls"), _state(perturbed, spec, "cls")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the model that starts fine-tuning is the same
    p, q = _state(tiny_checkpoint, spec, "pooler"), _state(perturbed, spec, "pooler")
    assert not torch.equal(p["bert.pooler.dense.weight"], q["bert.pooler.dense.weight"])
    assert torch.equal(p["classifier.weight"], a["classifier.weight"])  # the classifier's draw is shared


def test_cls_outputs_do_not_depend_on_the_pooler_and_pooler_outputs_do(tiny_checkpoint, perturbed, mrpc,
                                                                         monkeypatch):
    cls = _cfg("finetune.head=cls")
    assert _outcome(tiny_checkpoint, cls, mrpc, monkeypatch) == _outcome(perturbed, cls, mrpc, monkeypatch)
    pooler = _cfg()
    before, after = _outcome(tiny_checkpoint, pooler, mrpc, monkeypatch), _outcome(perturbed, pooler, mrpc, monkeypatch)
    assert before[3] != after[3]  # the logits move with the pooler (the tiny model's metrics are too coarse)
    assert _outcome(tiny_checkpoint, cls, mrpc, monkeypatch)[2] == ["cls"] and before[2] == ["pooler"]


def test_default_is_the_pooler_and_unchanged(tiny_checkpoint, mrpc, monkeypatch):
    default = _cfg()
    assert default.finetune.head == "pooler"
    assert (_outcome(tiny_checkpoint, default, mrpc, monkeypatch)
            == _outcome(tiny_checkpoint, _cfg("finetune.head=pooler"), mrpc, monkeypatch))


def test_head_is_recorded_only_where_it_applies(tiny_checkpoint):
    data = [load_hub_task("conll2003_ner", FIXTURES / "conll2003")]
    ev = run_finetuning(tiny_checkpoint, [], [0], _cfg("finetune.head=cls", "finetune.epochs=1"),
                        datasets=data).to_tables()[0].to_pandas()
    assert set(ev["head"]) == {""}  # tagging reads token states: no pooler either way


def test_bad_head_is_a_config_error():
    with pytest.raises(ConfigError, match="finetune.head"):
        _cfg("finetune.head=mean")
