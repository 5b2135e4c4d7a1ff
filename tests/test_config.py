"""Config validation errors, dict round trip, dotted overrides, presets and variants."""

import pytest

from trainables.config import ConfigError, ModelConfig, ObjectiveConfig, from_dict, objective_for_variant
from trainables.overrides import apply_overrides
from trainables.presets import PRESETS, build_config
from trainables.objectives import OBJECTIVES, VARIANTS


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_round_trip_through_dicts(preset):
    cfg = build_config(preset)
    assert from_dict(cfg.to_dict()) == cfg


def test_cpu_small_is_laptop_sized():
    m = build_config("cpu-small").model
    embed = m.vocab_size * m.hidden_size
    layers = m.num_layers * (4 * m.hidden_size**2 + 2 * m.hidden_size * m.intermediate_size)
    assert 1_000_000 <= embed + layers <= 2_000_000


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_builds(variant):
    o = build_config("smoke", variant).objective
    assert o.variant == variant
    assert (o.total_weight == 0) == (variant == "none")


def test_mlm_only_defaults_to_single_segments_and_full_to_pairs():
    assert objective_for_variant("mlm_only").input_format == "single"
    assert objective_for_variant("full").input_format == objective_for_variant("mlm_pairs").input_format == "nsp_pairs"
    assert objective_for_variant("mlm_sop").input_format == "sop_pairs"
    assert objective_for_variant("mlm_only", input_format="pair").input_format == "nsp_pairs"  # the old spelling
    with pytest.raises(ConfigError, match="cannot train the NSP loss; use input_format='nsp_pairs'"):
        objective_for_variant("full", input_format="single")


@pytest.mark.parametrize("override, names", [
    ("objective.mask_ratio=1.5", "mask_ratio"),
    ("objective.mask_ratio=0", "mask_ratio"),
    ("objective.mlm_weight=-1", "mlm_weight"),
    ("objective.sop_weight=1", "sop_weight"),  # full has NSP on: both pair losses at once
    ("objective.rtdd_weight=1", "objective.rtdd_weight"),
    ("data.seq_len=4096", "max_position"),
    ("objective.bogus=1", "objective.bogus"),
    ("nosuch.key=1", "nosuch.key"),
    ("optim.max_steps=ten", "optim.max_steps"),
    ("finetune.lr_grid=1e-4,fast", "finetune.lr_grid"),
    ("optim.budget=hours", "optim.budget"),
    ("data.data_order=random", "data.data_order"),
    ("objective.mask_stream=-1", "objective.mask_stream=-1"),
    ("objective.mask_stream=1.5", "objective.mask_stream"),
    ("finetune.text_baselines=maybe", "finetune.text_baselines"),
])
def test_bad_values_give_one_line_errors_naming_them(override, names):
    with pytest.raises(ConfigError) as e:
        build_config("smoke", "full", [override])
    assert names in str(e.value) and "\n" not in str(e.value)


def test_the_text_baselines_switch_is_a_bool_off_by_default_and_on_in_the_cpu_presets():
    from trainables.config import FinetuneConfig, from_dict

    assert not FinetuneConfig().text_baselines and not build_config("smoke").finetune.text_baselines
    assert all(build_config(p).finetune.text_baselines for p in ("cpu-small", "cpu-long"))
    d = build_config("smoke").to_dict()
    with pytest.raises(ConfigError, match="finetune.text_baselines='yes' must be true or false"):
        from_dict({**d, "finetune": {**d["finetune"], "text_baselines": "yes"}})


def test_all_zero_weights_only_for_none():
    with pytest.raises(ConfigError, match="only 'none'"):
        ObjectiveConfig(variant="full", weights={"mlm": 0, "nsp": 0})
    with pytest.raises(ConfigError, match="none"):
        ObjectiveConfig(variant="none", weights={"mlm": 1})
    with pytest.raises(ConfigError, match="registered objectives: mlm, nsp"):
        ObjectiveConfig(weights={"mlmm": 1})


def test_unknown_preset_and_variant_list_valid_names():
    with pytest.raises(ConfigError, match="allowed: smoke, cpu-small"):
        build_config("laptop")
    with pytest.raises(ConfigError, match="full, mlm_only"):
        build_config("smoke", "mlm")


def test_overrides_are_typed_and_variant_override_brings_its_weights():
    cfg = apply_overrides(build_config("smoke", "full"), ["objective.mask_ratio=0.3", "optim.max_steps=5",
                                                          "run.tensorboard=false"])
    assert cfg.objective.mask_ratio == 0.3 and cfg.optim.max_steps == 5 and cfg.run.tensorboard is False
    cfg = apply_overrides(cfg, ["objective.variant=mlm_only"])
    assert cfg.objective.weights["nsp"] == 0 and cfg.objective.input_format == "single"
    assert cfg.objective.mask_ratio == 0.3
    assert apply_overrides(cfg, ["objective.variant=full", "objective.nsp_weight=0.5"]).objective.weights == \
        {**{n: 0.0 for n in OBJECTIVES}, "mlm": 1.0, "nsp": 0.5}


def test_weights_cover_every_registered_objective_and_old_spellings_load():
    o = build_config("smoke", "mlm_only").objective
    assert list(o.weights) == list(OBJECTIVES) and o.active == ("mlm",)
    old = build_config("smoke").to_dict()
    old["objective"] = {k: v for k, v in old["objective"].items() if k != "weights"}
    old["objective"].update(mlm_weight=1.0, nsp_weight=0.0, sop_weight=1.0, input_format="pair")  # an old run.json
    assert from_dict(old).objective.weights == {**{n: 0.0 for n in OBJECTIVES}, "mlm": 1.0, "sop": 1.0}


def test_heads_must_divide_hidden():
    with pytest.raises(ConfigError, match="num_heads"):
        ModelConfig(hidden_size=100, num_heads=3)


def test_a_preset_keeps_its_masking_when_switched_to_a_variant(monkeypatch):
    """A preset's masking (here a 30% mask ratio) survives the switch to any variant, as in the sweeps'
    switch: the variant brings only its loss weights and input format."""
    from trainables import presets
    from trainables.config import ObjectiveConfig

    base = presets.PRESETS["smoke"]
    monkeypatch.setitem(presets.PRESETS, "smoke", lambda: base().replace(objective=ObjectiveConfig(mask_ratio=0.3)))
    cfgs = {v: presets.build_config("smoke", v) for v in ("mlm_only", "none", "full")}
    assert {c.objective.mask_ratio for c in cfgs.values()} == {0.3}
    assert cfgs["mlm_only"].objective.input_format == "single" and cfgs["full"].objective.weights["nsp"] == 1.0
    assert presets.build_config("cpu-small", "mlm_only").objective.mask_ratio == 0.15
