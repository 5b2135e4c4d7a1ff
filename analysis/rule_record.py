"""What a run records of its rule, read without the rules machinery: the record's file name, the rule a sweep
started with, and the MLM floor its ``every_run`` clause sets (the summary's Sanity line). It imports nothing of
the analysis, so the report can read it and ``analysis.rules`` can build on it without an import cycle."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

RUN_RECORD = "rule_run.json"  # in the sweep's folder, beside export/: the rule at the start, the wall time at the end


def mlm_floor(rule_path: str | Path | None) -> float | None:
    """The held-out MLM accuracy a rule's ``every_run`` clause on ``mlm_acc`` requires, or None: no rule, none
    readable, or no such clause (the rule itself was checked when the sweep started: analysis.rules.load_rule)."""
    if not rule_path:
        return None
    try:
        raw = tomllib.loads(Path(rule_path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    floors = [float(c["at_least"]) for c in raw.get("clause", [])
              if isinstance(c, dict) and c.get("kind") == "every_run" and c.get("column") == "mlm_acc"
              and isinstance(c.get("at_least"), (int, float))]
    return max(floors) if floors else None


def run_rule(root: str | Path) -> str | None:
    """The rule a sweep in ``root`` was started with (its RUN_RECORD), or None."""
    path = Path(root) / RUN_RECORD
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return record.get("rule_file") or record.get("rule")
