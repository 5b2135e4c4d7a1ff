"""The check's files: valid JSON (no NaN, no inf: a non-finite number becomes null and is named under
``non_finite``), written whole (a temporary file, then renamed) and mirrored to ``--storage`` (a folder or an
``s3://``/``gs://``/``file://`` URI, through pyarrow's filesystems), so a check killed midway leaves every
part it finished."""

from __future__ import annotations

import json
import math
import os
import posixpath
from pathlib import Path
from typing import Any


def finite(value: Any, path: str = "", bad: list[str] | None = None) -> Any:
    """``value`` with every non-finite float replaced by None (its dotted path appended to ``bad``) and
    numpy scalars and arrays as plain Python: what ``json.dumps(allow_nan=False)`` accepts."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # numpy scalars and arrays, torch tensors
    if isinstance(value, dict):
        return {str(k): finite(v, f"{path}.{k}" if path else str(k), bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, f"{path}[{i}]", bad) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        if bad is not None:
            bad.append(path)
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def dumps(data: dict) -> str:
    """Valid JSON of ``data``: non-finite numbers are null, their paths listed under ``non_finite``."""
    bad: list[str] = []
    clean = finite(data, bad=bad)
    if bad:
        clean["non_finite"] = sorted(set(clean.get("non_finite") or []) | set(bad))
    return json.dumps(clean, indent=1, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: Path, data: dict) -> None:
    """``data`` as valid JSON at ``path``, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(dumps(data))
    tmp.replace(path)


def read_json(path: Path) -> dict:
    """A part's result file as far as it was written ({} when it never was or is unreadable)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def mirror(files: list[Path], storage: str) -> None:
    """Copy ``files`` (the JSON and the logs) into ``storage``: a folder or a URI every pyarrow filesystem
    opens (s3://, gs://, file://). The local copies stay the reference; a failed upload is raised."""
    from trainables.data.shards import filesystem, write_bytes

    fs, base = filesystem(storage)
    for f in files:
        if f.is_file():
            write_bytes(fs, posixpath.join(base, f.name), f.read_bytes())
