"""ELECTRA's replaced-token detection against transformers' ELECTRA classes, its corruption, its checkpoints."""

import pytest
import torch

from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.data.batches import Position
from trainables.data.samples import IGNORE
from trainables.model import forward_pretraining
from trainables.objectives.rtd import disc_loss
from trainables.pretrain import initial_model, pretrain_model, build_pretraining_data, run_pretraining


def _cfg(tmp_path, variant="electra", *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'c'}",
                                           "run.tensorboard=false", *extra])


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    cfg = _cfg(tmp_path_factory.mktemp("e"))
    data = build_pretraining_data(cfg)
    model = pretrain_model(cfg, initial_model(cfg, data)).eval()
    return cfg, data, model, data.steps.batch(Position(0, 0, 0, 0))


def _dense(batch):
    labels = torch.full_like(batch.input_ids, IGNORE)
    keep = batch.mlm_labels != IGNORE
    rows = torch.arange(len(labels))[:, None].expand_as(batch.mlm_positions)
    labels[rows[keep], batch.mlm_positions[keep]] = batch.mlm_labels[keep]
    return labels


def test_discriminator_loss_matches_transformers_electra_for_pretraining(electra):
    from transformers import ElectraConfig, ElectraForPreTraining

    cfg, data, model, batch = electra
    bert, head = model.bert, model.extras["rtd"].head
    c = bert.config
    ref = ElectraForPreTraining(ElectraConfig(vocab_size=c.vocab_size, embedding_size=c.hidden_size,
                                              hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                                              num_attention_heads=c.num_attention_heads,
                                              intermediate_size=c.intermediate_size,
                                              max_position_embeddings=c.max_position_embeddings,
                                              hidden_act="gelu")).eval()
    state = {k.replace("bert.", "electra.", 1): v for k, v in bert.state_dict().items()
             if k.startswith(("bert.embeddings", "bert.encoder"))}
    state.update({"discriminator_predictions.dense.weight": head[0].weight, "discriminator_predictions.dense.bias": head[0].bias,
                  "discriminator_predictions.dense_prediction.weight": head[2].weight,
                  "discriminator_predictions.dense_prediction.bias": head[2].bias})
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in m for m in missing)
    fake = torch.rand(batch.input_ids.shape, generator=torch.Generator().manual_seed(0)) < 0.2
    with torch.no_grad():
        hidden = forward_pretraining(bert, batch, need_mlm=False, need_pair=False).hidden
        ours = disc_loss(head(hidden).squeeze(-1), fake, batch.attention_mask)
        theirs = ref(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     token_type_ids=batch.token_type_ids, labels=fake.long()).loss
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_generator_loss_matches_electra_for_masked_lm_and_corrupts_only_masked_positions(electra):
    cfg, data, model, batch = electra
    module = model.extras["rtd"]
    with torch.no_grad():
        corrupted, aux = model.objectives[0].corrupt(module, model.bert, batch, {})
        dense = module.generator(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 token_type_ids=batch.token_type_ids, labels=_dense(batch)).loss
    torch.testing.assert_close(aux["generator_loss"], dense, rtol=1e-5, atol=1e-5)
    original = batch.input_ids.clone()
    keep = batch.mlm_labels != IGNORE
    rows = torch.arange(len(original))[:, None].expand_as(batch.mlm_positions)
    original[rows[keep], batch.mlm_positions[keep]] = batch.mlm_labels[keep]
    changed = corrupted.input_ids != original
    masked = torch.zeros_like(changed)
    masked[rows[keep], batch.mlm_positions[keep]] = True
    assert not (changed & ~masked).any()  # only masked positions hold generator samples
    assert torch.equal(aux["is_fake"], changed)  # 'replaced' means the sample differs from the original


def test_the_generator_samples_from_its_distribution(electra):
    cfg, data, model, batch = electra
    module = model.extras["rtd"]
    target = 123
    with torch.no_grad():  # a generator that puts all its mass on one token samples only that token
        module.generator.generator_lm_head.bias.fill_(-1e4)
        module.generator.generator_lm_head.bias[target] = 1e4
        corrupted, aux = model.objectives[0].corrupt(module, model.bert, batch, {})
        module.generator.generator_lm_head.bias.zero_()
    keep = batch.mlm_labels != IGNORE
    assert (corrupted.input_ids.gather(1, batch.mlm_positions)[keep] == target).all()


def test_embeddings_are_shared_and_the_generator_is_a_quarter_wide(electra):
    cfg, data, model, batch = electra
    gen, bert = model.extras["rtd"].generator, model.bert
    assert gen.electra.embeddings.word_embeddings.weight is bert.bert.embeddings.word_embeddings.weight
    assert gen.electra.embeddings.position_embeddings.weight is bert.bert.embeddings.position_embeddings.weight
    assert gen.generator_lm_head.weight is bert.bert.embeddings.word_embeddings.weight
    assert gen.config.hidden_size == cfg.model.hidden_size // 4 and gen.config.embedding_size == cfg.model.hidden_size
    params = dict(model.named_parameters())
    assert sum(p is bert.bert.embeddings.word_embeddings.weight for p in params.values()) == 1  # optimised once


def test_electra_trains_and_both_checkpoints_load_in_stock_transformers(tmp_path):
    from transformers import AutoModel, pipeline

    result = run_pretraining(_cfg(tmp_path), tmp_path / "run")
    assert 0 <= result.metrics["rtd_acc"] <= 1 and 0 <= result.metrics["rtd_auc"] <= 1
    assert type(AutoModel.from_pretrained(tmp_path / "run")).__name__ == "BertModel"
    fill = pipeline("fill-mask", model=str(tmp_path / "run" / "generator"))
    assert len(fill("the man [MASK] the time")) == 5
    mlm = run_pretraining(_cfg(tmp_path, "mlm_only"), tmp_path / "mlm")
    assert mlm.metrics["rtd_acc"] != mlm.metrics["rtd_acc"]  # NaN: no discriminator head to measure


def test_electra_options_and_exclusions_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="rtd cannot train with mlm"):
        _cfg(tmp_path, "electra", "objective.mlm_weight=1")
    with pytest.raises(ConfigError, match="generator_fraction=1.5 must be in"):
        _cfg(tmp_path, "electra", "objective.rtd.generator_fraction=1.5")
    cfg = _cfg(tmp_path, "electra_nsp", "objective.rtd.discriminator_weight=10")
    assert cfg.objective.input_format == "nsp_pairs" and cfg.objective.options["rtd.discriminator_weight"] == 10.0
