"""User task files are checked like input data should be: encoding, every row's required values, and a
label column that can teach something. Every fixture is written in ``tmp_path``."""

import json

import pandas as pd
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
