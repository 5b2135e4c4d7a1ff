"""User task files are checked like input data should be: encoding, every row's required values, and a
label column that can teach something. Every fixture is written in ``tmp_path``."""

import json
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainables.tasks import TaskError, load_user_task


def one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(TaskError) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- encoding

@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_non_utf8_file_says_so_with_the_first_bad_byte(tmp_path, suffix):
    good = "text,label\nnice,pos\n" if suffix == ".csv" else json.dumps({"text": "nice", "label": "pos"}) + "\n"
    latin1 = "café".encode("latin-1")  # b'caf\xe9': valid Latin-1, not UTF-8
    body = good.encode() + (b"ok " + latin1 + b",neg\n" if suffix == ".csv" else b'{"text": "' + latin1 + b'"}\n')
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(body)
    message = one_line_error(load_user_task, path, "single")
    offset = body.index(b"\xe9")
    assert message == f"{path}: not UTF-8 text (byte {offset}: b'\\xe9'); re-encode it as UTF-8"


def test_a_utf8_bom_and_non_ascii_text_still_load(tmp_path):
    path = tmp_path / "bom.csv"
    rows = "".join(f"café {i} ünïcode,{'ab'[i % 2]}\n" for i in range(10))
    path.write_bytes("\ufefftext,label\n".encode() + rows.encode())
    data = load_user_task(path, "single")
    assert data.spec.labels == ("a", "b")
    assert all(r["text"].startswith("café") for s in ("train", "dev", "test") for r in data[s])


# ---------------------------------------------------------------- a value in every row

def pair_csv_with_holes(path, n=300, n_no_text_b=43, n_no_label=33, seed=0):
    """A pair CSV whose rows miss ``text_b`` (empty cell) or ``label`` (empty cell) at random, disjoint rows."""
    rng = np.random.default_rng(seed)
    holes = rng.permutation(n)[:n_no_text_b + n_no_label]
    no_text_b, no_label = set(holes[:n_no_text_b].tolist()), set(holes[n_no_text_b:].tolist())
    frame = pd.DataFrame({"text_a": [f"the cat sat {i}" for i in range(n)],
                          "text_b": ["" if i in no_text_b else f"a cat sat {i}" for i in range(n)],
                          "label": ["" if i in no_label else str(i % 2) for i in range(n)]})
    frame.to_csv(path, index=False)
    return no_text_b, no_label


def all_rows(data):
    return [r for s in ("train", "dev", "test") for r in data[s]]


def test_missing_values_in_any_row_are_an_error_naming_row_and_column(tmp_path):
    path = tmp_path / "pairs.csv"
    no_text_b, no_label = pair_csv_with_holes(path)
    first = min(no_text_b | no_label)
    column = "text_b" if first in no_text_b else "label"
    message = one_line_error(load_user_task, path, "pair")
    assert message == f"{path}: row {first + 1} column {column!r} has no value (empty)"


def test_drop_removes_exactly_the_bad_rows_and_logs_their_count(tmp_path, caplog):
    path = tmp_path / "pairs.csv"
    no_text_b, no_label = pair_csv_with_holes(path)
    caplog.set_level(logging.WARNING, logger="trainables.tasks.user")
    data = load_user_task(path, "pair", bad_rows="drop")
    rows = all_rows(data)
    assert len(rows) == 300 - 76
    assert {int(r["id"]) for r in rows} == set(range(300)) - no_text_b - no_label  # ids stay file indices
    assert data.spec.labels == ("0", "1") and {r["label"] for r in rows} == {"0", "1"}
    assert all(r["text_b"].strip() and r["text_b"] != "nan" for r in rows)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: dropped 76 of 300 rows")
    assert "\n" not in warnings[0]


def _write(path, rows):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN is written as the literal NaN
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        pd.DataFrame(rows).to_csv(path, index=False)


@pytest.mark.parametrize("suffix,value,why", [
    (".jsonl", "absent", "absent"), (".jsonl", None, "null"), (".jsonl", float("nan"), "NaN"),
    (".jsonl", " \t ", "empty"), (".parquet", None, "null"), (".csv", "", "empty"), (".csv", "   ", "empty"),
])
@pytest.mark.parametrize("column", ["text", "label"])
def test_every_form_of_missing_is_caught_in_every_format(tmp_path, suffix, value, why, column):
    rows = [{"text": f"text {i}", "label": "ab"[i % 2]} for i in range(12)]
    if value == "absent":
        del rows[7][column]
    else:
        rows[7][column] = value
    path = tmp_path / f"holes{suffix}"
    _write(path, rows)
    assert one_line_error(load_user_task, path, "single") == f"{path}: row 8 column {column!r} has no value ({why})"
    kept = all_rows(load_user_task(path, "single", bad_rows="drop"))
    assert len(kept) == 11 and "7" not in {r["id"] for r in kept}
    assert not {r[column] for r in kept} & {"", "nan", "None", "<NA>"}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_an_int_label_column_with_a_null_keeps_its_label_names(tmp_path, suffix):
    rows = [{"text": f"text {i}", "label": i % 2} for i in range(12)]
    rows[3]["label"] = None  # pandas would turn the whole column into 0.0 / 1.0
    path = tmp_path / f"ints{suffix}"
    _write(path, rows)
    data = load_user_task(path, "single", bad_rows="drop")
    assert data.spec.labels == ("0", "1")


def test_tagging_rows_need_tokens_and_a_value_for_every_tag(tmp_path):
    good = {"tokens": ["John", "went", "home"], "tags": ["B-PER", "O", "O"]}
    path = tmp_path / "tags.jsonl"
    empty, item = "has no value (an empty list)", "has no value at position 2"
    for bad, message in [({"tokens": [], "tags": []}, f"row 4 column 'tokens' {empty}"),
                         ({"tokens": "[]", "tags": "[]"}, f"row 4 column 'tokens' {empty}"),
                         ({"tokens": ["a", "b"], "tags": ["O", None]}, f"row 4 column 'tags' {item}"),
                         ({"tokens": ["a", " "], "tags": ["O", "O"]}, f"row 4 column 'tokens' {item}")]:
        _write(path, [good] * 3 + [bad] + [good] * 6)
        assert one_line_error(load_user_task, path, "tagging").startswith(f"{path}: {message}")
        assert len(all_rows(load_user_task(path, "tagging", bad_rows="drop"))) == 9


def test_a_split_column_needs_a_value_in_every_row(tmp_path):
    path = tmp_path / "s.csv"
    splits = ["train"] * 6 + ["dev", "", "test", "test"]
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(10)], "label": list("ab" * 5), "split": splits})
    frame.to_csv(path, index=False)
    assert one_line_error(load_user_task, path, "single") == f"{path}: row 8 column 'split' has no value (empty)"
    data = load_user_task(path, "single", bad_rows="drop")
    assert [len(data[s]) for s in ("train", "dev", "test")] == [6, 1, 2]


def test_a_split_folder_drops_and_counts_per_file(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="trainables.tasks.user")
    for split, holes in (("train", 2), ("dev", 0), ("test", 1)):
        rows = [{"text": f"{split} {i}", "label": "ab"[i % 2]} for i in range(8)]
        for i in range(holes):
            rows[i]["label"] = ""
        _write(tmp_path / f"{split}.csv", rows)
    data = load_user_task(tmp_path, "single", bad_rows="drop")
    assert [len(data[s]) for s in ("train", "dev", "test")] == [6, 8, 7]
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert [w.split(": dropped ")[1].split(" rows")[0] for w in warnings] == ["1 of 8", "2 of 8"]
    assert warnings[0].startswith(str(tmp_path / "test.csv")) and warnings[1].startswith(str(tmp_path / "train.csv"))


def test_rows_the_task_type_rejects_are_dropped_too_and_all_bad_is_an_error(tmp_path):
    ctx = "The tower was built in 1889."
    good = {"context": ctx, "question": "When?", "answers": {"text": ["1889"], "answer_start": [ctx.index("1889")]}}
    misplaced = dict(good, answers={"text": ["1889"], "answer_start": [0]})
    path = tmp_path / "qa.jsonl"
    _write(path, [good] * 9 + [misplaced])
    assert "row 10 answer '1889' is not at answer_start=0" in one_line_error(load_user_task, path, "qa")
    assert len(all_rows(load_user_task(path, "qa", bad_rows="drop"))) == 9
    _write(path, [dict(good, question="")] * 5)
    message = one_line_error(load_user_task, path, "qa", bad_rows="drop")
    assert message == f"{path}: all 5 rows are bad (the first: row 1 column 'question' has no value (empty))"


def test_bad_rows_option_and_bad_json_lines_are_one_line_errors(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n\n{"text": "b", "label": \n')
    assert one_line_error(load_user_task, path, "single") == f"{path}: line 3 is not valid JSON (Expecting value)"
    path.write_text('{"text": "a", "label": "x"}\n["b", "y"]\n')
    assert "line 2 holds a JSON list, not an object" in one_line_error(load_user_task, path, "single")
    assert one_line_error(load_user_task, path, "single", bad_rows="skip") == \
        f"{path}: bad_rows 'skip' is not valid; allowed: error, drop"


# ---------------------------------------------------------------- a label column that can teach something

def single_class_message(path, column, label, kind):
    return f"{path}: column {column!r} has one label only ({label!r}) across the train rows; a {kind!r} task " \
        "needs at least two"


@pytest.mark.parametrize("kind", ["single", "pair"])
def test_a_single_class_file_is_refused_naming_column_and_label(tmp_path, kind):
    texts = {"text": [f"a fine film {i}" for i in range(30)]} if kind == "single" else \
        {"text_a": [f"a {i}" for i in range(30)], "text_b": [f"b {i}" for i in range(30)]}
    path = tmp_path / "one.csv"
    pd.DataFrame({**texts, "label": ["pos"] * 30}).to_csv(path, index=False)
    assert one_line_error(load_user_task, path, kind) == single_class_message(path, "label", "pos", kind)
    assert one_line_error(load_user_task, path, kind, labels=("neg", "pos")) == \
        single_class_message(path, "label", "pos", kind)  # declaring a second label does not teach it


def test_a_single_tag_overall_is_refused_even_with_varied_rows(tmp_path):
    path = tmp_path / "tags.jsonl"
    _write(path, [{"tokens": ["w"] * (1 + i % 4), "tags": ["O"] * (1 + i % 4)} for i in range(12)])
    assert one_line_error(load_user_task, path, "tagging") == single_class_message(path, "tags", "O", "tagging")


def test_a_single_train_class_is_refused_in_split_folders_and_split_columns(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    for split, labels in (("train", "aaaa"), ("dev", "ab"), ("test", "ab")):
        _write(folder / f"{split}.csv", [{"text": f"{split} {i}", "label": x} for i, x in enumerate(labels)])
    # dev/test hold 'b', which train never shows: that is named first, as a label the train rows lack
    message = one_line_error(load_user_task, folder, "single")
    assert message.startswith(f"{folder}: dev row '1' has label 'b' not in the train rows' labels ['a']")
    for split in ("dev", "test"):
        _write(folder / f"{split}.csv", [{"text": f"{split} {i}", "label": "a"} for i in range(2)])
    assert one_line_error(load_user_task, folder, "single") == single_class_message(folder, "label", "a", "single")
    path = tmp_path / "s.csv"
    _write(path, [{"text": f"t{i}", "label": "ab"[i > 5], "split": "train" if i < 6 else "test"} for i in range(9)]
           + [{"text": "d", "label": "b", "split": "dev"}])
    assert one_line_error(load_user_task, path, "single", labels=("a", "b")) == \
        single_class_message(path, "label", "a", "single")  # every label declared, but train holds only 'a'


# ---------------------------------------------------------------- the fine-tuning command line

def test_cli_bad_rows_errors_by_default_and_drops_on_request(tmp_path, capsys):
    from trainables.finetune.__main__ import _parser, _user_tasks, main

    path = tmp_path / "pairs.csv"
    no_text_b, no_label = pair_csv_with_holes(path)
    argv = ["--checkpoint", str(tmp_path / "unused"), "--task-file", str(path), "--task-type", "pair",
            "--preset", "smoke", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: row {min(no_text_b | no_label) + 1} column ") and "\n" not in err
    (data,) = _user_tasks(_parser().parse_args(argv + ["--bad-rows", "drop"]))
    assert len(all_rows(data)) == 300 - len(no_text_b) - len(no_label) and data.spec.labels == ("0", "1")
    with pytest.raises(SystemExit):
        _parser().parse_args(argv + ["--bad-rows", "skip"])
