"""The task-type registry: a new type is one entry (shown with a toy type), unknown names are one line."""

import dataclasses

import pandas as pd
import pytest

from trainables.presets import build_config
from trainables.finetune import run_finetuning
from trainables.task_types import TASK_TYPES, TaskError, TaskType, get_task_type, register_task_type
from trainables.task_types.classification import SINGLE
from trainables.tasks import HUB_TASKS, load_hub_task, load_user_task
from test_tasks import FIXTURES


def _toy_type() -> TaskType:
    """A single-text classification whose files name their columns 'sentence' and 'category', with
    predictions written in upper case: everything but the shared encoder and head is its own."""

    def parse(raw, path, i):
        return {"id": str(raw.get("id", i)), "text": str(raw["sentence"]), "label": str(raw["category"])}

    def decode(spec, rows, enc, logits, ft):
        preds, golds = SINGLE.decode(spec, rows, enc, logits, ft)
        return [p.upper() for p in preds], [g.upper() for g in golds]

    return dataclasses.replace(SINGLE, name="toy_upper", columns=("sentence", "category"), parse_row=parse,
                               decode=decode, metrics=("accuracy",))


@pytest.fixture
def toy_type():
    registered = register_task_type(_toy_type())
    yield registered
    del TASK_TYPES[registered.name]


def test_a_registered_toy_type_loads_user_files_and_fine_tunes(toy_type, tiny_checkpoint, tmp_path):
    rows = [{"sentence": f"the match was {'won' if i % 2 else 'lost'} by {i}", "category": "ab"[i % 2]}
            for i in range(40)]
    pd.DataFrame(rows).to_csv(tmp_path / "toy.csv", index=False)
    data = load_user_task(tmp_path / "toy.csv", "toy_upper")
    assert data.spec.type == "toy_upper" and data.spec.labels == ("a", "b")
    cfg = build_config("smoke", overrides=["finetune.epochs=1", "run.device=cpu"])
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=[data])
    assert {p.prediction for p in result.predictions} <= {"A", "B"}
    assert {p.gold for p in result.predictions} <= {"A", "B"} and len(result.predictions) == len(data["test"])
    assert [e.metric for e in result.evals] == ["accuracy"]


def test_unknown_type_names_are_one_line_errors_listing_the_valid_ones(tmp_path):
    with pytest.raises(TaskError, match=r"task type 'tagger' is not valid; allowed: single, pair, tagging, qa"):
        get_task_type("tagger")
    (tmp_path / "x.csv").write_text("text,label\na,b\n")
    with pytest.raises(TaskError, match="allowed: single, pair"):
        load_user_task(tmp_path / "x.csv", "tagger")
    with pytest.raises(TaskError, match="already registered"):
        register_task_type(SINGLE)


def test_an_unknown_hub_row_mapping_is_an_error_not_squad(monkeypatch):
    spec = HUB_TASKS["mrpc"]
    broken = dataclasses.replace(spec, hub=dataclasses.replace(spec.hub, row_fn="glu"))
    monkeypatch.setitem(HUB_TASKS, "mrpc", broken)
    with pytest.raises(TaskError, match=r"row mapping 'glu' is not valid; allowed: glue, conll, squad"):
        load_hub_task("mrpc", FIXTURES / "glue_mrpc")
