"""The worked example of docs/objectives.md runs: the plugin objective shown there registers, validates its
setting, pretrains exactly as ``mlm_only`` at ``smoothing=0`` and differently at 0.2, and gets its contrasts.

The code is taken from the doc itself (the ```python block that opens with ``# my_objectives.py``), so an
edit to the doc that breaks the example, or a change to the registry that breaks the doc, fails here.

    python -m pytest -q tests/test_docs_objective_example.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from trainables.config import ConfigError
from trainables.objectives import OBJECTIVES, VARIANTS, load_plugins, unregister_objective
from trainables.presets import build_config
from trainables.pretrain import run_pretraining

DOC = Path(__file__).resolve().parents[1] / "docs" / "objectives.md"
MODULE = "my_objectives"


def fenced_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)


def example_code() -> str:
    blocks = [b for b in fenced_blocks(DOC.read_text(), "python") if b.startswith(f"# {MODULE}.py")]
    assert len(blocks) == 1, f"docs/objectives.md should hold one ```python block opening with '# {MODULE}.py'"
    return blocks[0]


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(example_code())
    monkeypatch.syspath_prepend(str(tmp_path))
    load_plugins(MODULE)
    yield OBJECTIVES["smooth_mlm"]
    unregister_objective("smooth_mlm")
    sys.modules.pop(MODULE, None)


def _cfg(tmp_path, variant: str, *extra: str):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                           "run.tensorboard=false", "run.log_every=1", "optim.max_steps=4", *extra])


def _losses(cfg, out_dir: Path, name: str) -> list[float]:
    seen: list[float] = []
    run_pretraining(cfg, out_dir, lambda m, checkpoint_dir=None: seen.append(m.get(f"loss/{name}")))
    return [v for v in seen if v is not None]


def test_the_example_registers_its_objective_variant_and_setting(plugin):
    assert "smooth_mlm_only" in VARIANTS
    cfg = build_config("smoke", "smooth_mlm_only", ["objective.smooth_mlm.smoothing=0.2"])
    assert cfg.objective.active == ("smooth_mlm",) and cfg.objective.options["smooth_mlm.smoothing"] == 0.2
    with pytest.raises(ConfigError, match=r"smoothing=1.5 must be in \[0, 1\)"):
        build_config("smoke", "smooth_mlm_only", ["objective.smooth_mlm.smoothing=1.5"])
    with pytest.raises(ConfigError, match="cannot train with mlm"):
        build_config("smoke", "smooth_mlm_only", ["objective.mlm_weight=1"])


def test_at_zero_smoothing_it_pretrains_exactly_as_mlm_only_and_smoothing_changes_the_loss(plugin, tmp_path):
    plain = _losses(_cfg(tmp_path, "mlm_only"), tmp_path / "mlm_only", "mlm")
    zero = _losses(_cfg(tmp_path, "smooth_mlm_only", "objective.smooth_mlm.smoothing=0"), tmp_path / "zero",
                   "smooth_mlm")
    smoothed = _losses(_cfg(tmp_path, "smooth_mlm_only", "objective.smooth_mlm.smoothing=0.2"),
                       tmp_path / "smoothed", "smooth_mlm")
    assert len(plain) >= 3
    assert zero == plain  # same batches, masks, weights and steps: only the loss function is new
    assert smoothed[0] > plain[0]  # label smoothing raises the cross-entropy of the same first step


def test_its_contrasts_are_derived_from_what_it_is(plugin):
    from analysis.contrasts import derive_contrasts
    from analysis.variants import VariantSpec

    objectives = tuple(OBJECTIVES)
    specs = {name: VariantSpec(name, tuple(VARIANTS[name].weights.get(o, 0.0) for o in objectives),
                               "" if name == "none" else VARIANTS[name].input_format, 0.15)
             for name in ("smooth_mlm_only", "mlm_only", "none")}
    defs, _ = derive_contrasts(specs, objectives, frozenset({"nsp", "sop"}))
    weights = [d.weights for d in defs]
    assert {"smooth_mlm_only": 1.0, "none": -1.0} in weights
    assert {"smooth_mlm_only": 1.0, "mlm_only": -1.0} in weights


def test_the_docs_commands_name_the_plugin_and_its_variant():
    shell = "\n".join(fenced_blocks(DOC.read_text(), "bash"))
    assert f"BERT_OBJECTIVES_PLUGINS={MODULE}" in shell and "smooth_mlm_only" in shell
