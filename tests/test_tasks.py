"""Task registry, hub-schema loaders on local fixtures (never the hub), and user task files."""

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainables.tasks import (BENCHMARK_TASKS, GLUE_TASKS, HUB_TASKS, TaskError, load_hub_task, load_user_task,
                              resolve_tasks, subsample, task_registry)

FIXTURES = Path(__file__).parent / "fixtures"


def test_registry_has_the_eight_benchmarks_with_their_metrics():
    reg = task_registry()
    expected = {"mnli": "accuracy", "qnli": "accuracy", "mrpc": "f1", "sst2": "accuracy", "cola": "mcc",
                "conll2003_ner": "entity_f1", "conll2003_pos": "token_accuracy", "squad": "squad_f1"}
    assert {n: reg[n].metric for n in expected} == expected
    assert "accuracy" in reg["mrpc"].metrics and reg["mrpc"].positive == "equivalent"
    assert reg["mnli"].reported_names() == {"test": "mnli_m", "test_mm": "mnli_mm"}
    assert reg["conll2003_ner"].hub.revision == "refs/convert/parquet"


def test_resolve_tasks_groups_and_errors():
    assert resolve_tasks("glue") == list(GLUE_TASKS)
    assert resolve_tasks("all") == resolve_tasks("benchmarks") == list(BENCHMARK_TASKS)
    assert resolve_tasks("mrpc, squad,mrpc") == ["mrpc", "squad"]
    with pytest.raises(TaskError, match=r"unknown task 'mrcp'; valid: mnli, qnli"):
        resolve_tasks("mrpc,mrcp")
    with pytest.raises(TaskError, match="no tasks"):
        resolve_tasks(" , ")


def test_glue_local_file_through_datasets_maps_int_labels_to_hub_names():
    data = load_hub_task("mrpc", FIXTURES / "glue_mrpc")
    assert len(data["test"]) == 4  # test = the hub's validation split
    assert len(data["dev"]) == 1 and len(data["train"]) == 7  # dev carved from train (10%, at least 1)
    assert {r["label"] for r in data["train"] + data["dev"]} == {"equivalent", "not_equivalent"}
    row = data["test"][0]
    assert set(row) == {"id", "text_a", "text_b", "label"} and row["label"] == "equivalent"
    again = load_hub_task("mrpc", FIXTURES / "glue_mrpc")
    assert again["dev"] == data["dev"]  # the dev slice is fixed, not drawn per run


def test_mnli_has_matched_and_mismatched_test_splits():
    data = load_hub_task("mnli", FIXTURES / "glue_mnli")
    assert data["test"][0]["text_b"] == "A dog was asleep." and data["test"][0]["label"] == "entailment"
    assert data["test_mm"][2]["label"] == "contradiction"


def test_missing_local_split_is_one_line_error(tmp_path):
    (tmp_path / "train.jsonl").write_text((FIXTURES / "glue_mrpc" / "train.jsonl").read_text())
    with pytest.raises(TaskError, match="no 'validation' split"):
        load_hub_task("mrpc", tmp_path)


def test_conll_parquet_with_classlabel_features():
    ner = load_hub_task("conll2003_ner", FIXTURES / "conll2003")
    assert ner["train"][0]["tokens"] == ["John", "Smith", "moved", "to", "London", "."]
    assert ner["train"][0]["tags"] == ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    pos = load_hub_task("conll2003_pos", FIXTURES / "conll2003")
    assert pos["test"][1]["tags"] == ["NNP", "VBD", "DT", "NN", "IN", "NNP", "."]


def test_conll_parquet_with_bare_int_tags_uses_the_known_names(tmp_path):
    for split in ("train", "validation", "test"):
        table = pq.read_table(FIXTURES / "conll2003" / f"{split}.parquet").replace_schema_metadata(None)
        pq.write_table(table, tmp_path / f"{split}.parquet")
    ner = load_hub_task("conll2003_ner", tmp_path)
    assert ner["train"][0]["tags"] == ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]


def test_squad_local_files():
    data = load_hub_task("squad", FIXTURES / "squad")
    row = data["test"][0]
    start = row["answers"]["answer_start"][0]
    assert row["context"][start:start + 4] == "1871"
    assert len(data["train"]) + len(data["dev"]) == 5


def test_subsample_is_ordered_and_seeded():
    rows = [{"id": str(i)} for i in range(50)]
    import numpy as np
    a = subsample(rows, 10, np.random.default_rng(1))
    assert a == subsample(rows, 10, np.random.default_rng(1)) and a != subsample(rows, 10, np.random.default_rng(2))
    assert [int(r["id"]) for r in a] == sorted(int(r["id"]) for r in a)
    assert subsample(rows, 0, None) is rows and subsample(rows, 10, None) == subsample(rows, 10, None)


# ---------------------------------------------------------------- user task files

def write_user_files(folder: Path) -> dict[str, Path]:
    """One small file per schema (CSV single, JSONL pair, Parquet tagging, JSONL qa)."""
    folder.mkdir(parents=True, exist_ok=True)
    single = folder / "reviews.csv"
    pd.DataFrame({"text": [f"a {'good' if i % 2 else 'bad'} film number {i}" for i in range(20)],
                  "label": ["pos" if i % 2 else "neg" for i in range(20)]}).to_csv(single, index=False)
    pair = folder / "pairs.jsonl"
    pair.write_text("".join(json.dumps({"id": f"p{i}", "text_a": f"the cat sat {i}", "text_b": "the cat sat"
                                        if i % 2 else "the dog ran", "label": str(i % 2)}) + "\n" for i in range(20)))
    tagging = folder / "tags.parquet"
    pq.write_table(pa.table({"tokens": [["John", "went", "to", "Paris"]] * 12,
                             "tags": [["B-PER", "O", "O", "B-LOC"]] * 12}), tagging)
    qa = folder / "qa.jsonl"
    ctx = "The tower was built in 1889 in Paris for the world fair."
    qa.write_text("".join(json.dumps({"id": f"q{i}", "context": ctx, "question": "When was the tower built?",
                                      "answers": {"text": ["1889"], "answer_start": [ctx.index("1889")]}}) + "\n"
                          for i in range(10)))
    return {"single": single, "pair": pair, "tagging": tagging, "qa": qa}


def test_user_files_in_each_schema_load(tmp_path):
    files = write_user_files(tmp_path)
    for kind, path in files.items():
        data = load_user_task(path, kind)
        assert data.spec.type == kind and data.spec.source == f"file:{path}"
        assert all(data[s] for s in ("train", "dev", "test"))
        assert len(data["train"]) + len(data["dev"]) + len(data["test"]) >= 10
    assert load_user_task(files["single"], "single").spec.labels == ("neg", "pos")
    assert load_user_task(files["tagging"], "tagging").spec.labels == ("B-LOC", "B-PER", "O")


def test_user_file_split_column_and_folder(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame({"text": list("abcdef"), "label": list("xyxyxy"),
                  "split": ["train", "train", "validation", "test", "train", "dev"]}).to_csv(path, index=False)
    data = load_user_task(path, "single", name="mine")
    assert data.spec.name == "mine" and [len(data[s]) for s in ("train", "dev", "test")] == [3, 2, 1]
    folder = tmp_path / "splits"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        pd.DataFrame({"text": ["a", "b"], "label": ["x", "y"]}).to_csv(folder / f"{split}.csv", index=False)
    assert len(load_user_task(folder, "single")["test"]) == 2


@pytest.mark.parametrize("content,kind,labels,message", [
    ("text\nhello\n", "single", (), r"missing column\(s\) \['label'\]"),
    ("text,label\nhi,a\nho,b\nhu,zz\n", "single", ("a", "b"), "label 'zz' not in the declared set"),
    ("", "single", (), "empty"),
    ("text,label\n", "single", (), "empty"),
    ("text_a,label\nx,1\n", "pair", (), r"missing column\(s\) \['text_b'\]"),
])
def test_bad_user_files_get_one_line_errors_naming_the_file(tmp_path, content, kind, labels, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(TaskError, match=message) as err:
        load_user_task(path, kind, labels=labels)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_bad_user_file_rows(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    with pytest.raises(TaskError, match="2 tokens but 1 tags"):
        load_user_task(path, "tagging")
    path.write_text(json.dumps({"context": "abc", "question": "q", "answers": {"text": ["zz"], "answer_start": [0]}}))
    with pytest.raises(TaskError, match="not at answer_start=0"):
        load_user_task(path, "qa")
    with pytest.raises(TaskError, match="task type 'regression' is not valid"):
        load_user_task(path, "regression")
    with pytest.raises(TaskError, match="unsupported file type '.txt'"):
        (tmp_path / "x.txt").write_text("a")
        load_user_task(tmp_path / "x.txt", "single")


def test_hub_loading_is_the_default_path(monkeypatch):
    """Without data_files the loader asks datasets for the hub name and revision (never reached in tests)."""
    import datasets

    calls = []
    empty = datasets.Dataset.from_dict({"id": [], "tokens": [], "pos_tags": []})
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or empty)
    load_hub_task("conll2003_pos")
    assert calls[0][0] == ("eriktks/conll2003", None) and calls[0][1]["revision"] == "refs/convert/parquet"
    assert {c[1]["split"] for c in calls} == {"train", "validation", "test"}
    assert HUB_TASKS["mnli"].hub.splits == {"train": "train", "test": "validation_matched",
                                            "test_mm": "validation_mismatched"}
