"""The evaluation tasks' dev/test text, offline, for decontamination (``trainables.data.decontam`` matches
it; ``trainables.data.prepare`` asks for it). A task that cannot be loaded (a hub task with no local copy,
the built-in tasks before ``python -m trainables.data fetch``) is reported as not checked, never fetched."""

from __future__ import annotations

from typing import Iterable



def task_identity(name: str, language: int = 0) -> dict:
    """What names a task's dev/test text without loading it (part of a prepared corpus's fingerprint)."""
    from trainables.tasks import get_task_spec

    spec = get_task_spec(name)
    if spec.source == "builtin":
        from trainables.data.builtin import BUILDER_VERSION

        return {"name": name, "source": "builtin", "version": BUILDER_VERSION}
    if spec.source == "planted":
        from trainables.data.planted import PLANTED_VERSION

        return {"name": name, "source": "planted", "version": PLANTED_VERSION,
                **({"language": language} if language else {})}
    return {"name": name, "source": spec.source, "revision": spec.hub.revision if spec.hub else None}


def load_eval_texts(names: Iterable[str], cache_dir: str | None = None, language: int = 0
                    ) -> tuple[dict[str, dict[str, list[dict]]], dict[str, str]]:
    """({task: {"dev": rows, "test": rows}} of the tasks that load offline, {task: why not} of the others).
    Never fetches: the built-in tasks only from a complete cache, hub tasks only from a local copy."""
    from trainables.tasks import get_task_spec, load_task

    loaded, missing = {}, {}
    for name in names:
        spec = get_task_spec(name)
        if spec.source == "builtin":
            from trainables.data.builtin import cache_ready

            if not cache_ready(cache_dir):
                missing[name] = "built-in data not fetched (python -m trainables.data fetch)"
                continue
        try:
            data = load_task(name, cache_dir, language=language)
        except Exception as e:  # a hub task without a local copy: offline, the hub's errors vary
            missing[name] = f"not loadable offline ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]})"
            continue
        loaded[name] = {s: rows for s, rows in data.splits.items() if s != "train"}
    return loaded, missing
