"""Dotted ``section.key=value`` overrides (the command line's ``--set``) applied to a config tree.

Strings are parsed to the type of the value they replace; unknown keys are one-line errors listing the
keys the section has; ``objective.<name>_weight`` sets a registered objective's loss weight and
``objective.<name>.<option>`` one of its options; ``objective.variant=V`` brings V's weights and input
format unless those are set in the same call.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from trainables.config import SECTIONS, ConfigError, ExperimentConfig, from_dict, registry, require


def _parse_value(text: str, current: Any, key: str) -> Any:
    if isinstance(current, bool):
        low = text.strip().lower()
        require(low in ("true", "false", "1", "0", "yes", "no"), f"{key}={text!r} must be true or false")
        return low in ("true", "1", "yes")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                as_float = None
            require(as_float is not None and as_float.is_integer(), f"{key}={text!r} must be an integer")
            return int(as_float)
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r} must be a number") from None
    return text


def apply_overrides(cfg: ExperimentConfig, overrides: list[str] | tuple[str, ...] | dict[str, Any]) -> ExperimentConfig:
    """Apply ``section.key=value`` overrides (strings from the CLI, or a dict of typed values).

    A loss weight is ``objective.<objective>_weight`` (e.g. ``objective.mlm_weight=0.5``)."""
    items = list(overrides.items()) if isinstance(overrides, dict) else [_split_override(o) for o in overrides]
    d = cfg.to_dict()
    weights = registry().OBJECTIVES
    for key, value in items:
        section, _, name = key.partition(".")
        require(section in SECTIONS and name,
                 f"unknown override key {key!r}; use section.key with section in: {', '.join(SECTIONS)}")
        valid = {f.name for f in fields(SECTIONS[section])} - ({"weights", "options"} if section == "objective" else set())
        if section == "objective" and name.split(".")[0] in weights and "." in name:
            options = {f"{o.name}.{k}": v for o in weights.values() for k, v in o.options.items()}
            require(name in options, f"unknown override key {key!r}; objective options: "
                                      f"{', '.join(options) or 'none'}")
            current = d["objective"]["options"].get(name, options[name])
            d["objective"]["options"][name] = _parse_value(value, current, key) if isinstance(value, str) else value
            continue
        if section == "objective" and name.endswith("_weight") and name[:-len("_weight")] in weights:
            objective = name[:-len("_weight")]
            current = d["objective"]["weights"].get(objective, 0.0)
            d["objective"]["weights"][objective] = _parse_value(value, current, key) if isinstance(value, str) else value
            continue
        allowed = sorted(valid | ({f"{n}_weight" for n in weights} if section == "objective" else set()))
        require(name in valid, f"unknown override key {key!r}; {section} has: {', '.join(allowed)}")
        current = d[section][name]
        d[section][name] = _parse_value(value, current, key) if isinstance(value, str) else value
    given = dict(items)
    variants = registry().VARIANTS
    if given.get("objective.variant") in variants:
        # Changing the variant by override brings its weights and input format, unless they were set too.
        v = variants[given["objective.variant"]]
        explicit = {k[len("objective."):-len("_weight")] for k in given if k.endswith("_weight")}
        d["objective"]["weights"] = {**{n: 0.0 for n in weights}, **v.weights,
                                     **{n: d["objective"]["weights"][n] for n in explicit}}
        if "objective.input_format" not in given:
            d["objective"]["input_format"] = v.input_format
    return from_dict(d)


def _split_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    require(bool(sep) and bool(key.strip()), f"override {text!r} is not of the form section.key=value")
    return key.strip(), value.strip()
