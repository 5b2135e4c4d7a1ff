"""Extractive question answering (SQuAD v1.1): rows ``{"id", "context", "question", "answers"}``.

``answers`` is ``{"text": [...], "answer_start": [...]}`` with character offsets into the context.
Long contexts are cut into windows with a document stride (the fast tokenizer's overflowing windows
and offsets); a window without the answer is labelled with [CLS]. Head: ``BertForQuestionAnswering``.
Decoding takes the best start+end span over all windows of an example, at most
``finetune.qa_max_answer_len`` tokens, mapped back to the original context text; predictions are JSON
strings and golds JSON lists of the gold answers. The linear probe does not support QA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from trainables.task_types.base import Encoded, TaskError, TaskType, features

QA_TOP_N = 20  # start/end candidates considered per window when decoding spans


def parse_answers(value: Any, path: Path, i: int) -> dict:
    """``{"text": [...], "answer_start": [...]}`` (a dict or its JSON); errors name the 1-based row."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(f"{path}: row {i + 1} column 'answers' is not JSON") from None
    if not isinstance(value, dict) or "text" not in value or "answer_start" not in value:
        raise TaskError(f"{path}: row {i + 1} column 'answers' must be {{'text': [...], 'answer_start': [...]}}")
    texts = [str(t) for t in list(value["text"])]
    try:
        starts = [int(s) for s in list(value["answer_start"])]
    except (TypeError, ValueError):
        raise TaskError(f"{path}: row {i + 1} 'answers' answer_start must be whole numbers") from None
    if not texts or len(texts) != len(starts):
        raise TaskError(f"{path}: row {i + 1} 'answers' needs as many texts as answer_start values (at least one)")
    return {"text": texts, "answer_start": starts}


def parse_row(raw: dict, path: Path, i: int) -> dict:
    row = {"id": str(raw.get("id", i)), "context": str(raw["context"]), "question": str(raw["question"]),
           "answers": parse_answers(raw["answers"], path, i)}
    for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
        if row["context"][start:start + len(text)] != text:
            raise TaskError(f"{path}: row {i + 1} answer {text!r} is not at answer_start={start} in the context")
    return row


def _clip_question(tok, question: str, max_tokens: int) -> str:
    enc = tok(question, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    return question if len(offsets) <= max_tokens else question[:offsets[max_tokens - 1][1]]


def _answer_span(offsets: list, seq_ids: list, answers: dict) -> tuple[int, int]:
    """Token (start, end) of the first answer inside this window, or (0, 0) ([CLS]) when it is not."""
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    ctx = [i for i, s in enumerate(seq_ids) if s == 1]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0
    start = next(i for i in ctx if offsets[i][1] > start_char)
    end = next(i for i in reversed(ctx) if offsets[i][0] < end_char)
    return start, end


def encode_qa(rows: list[dict], tok, max_len: int, stride: int, train: bool) -> Encoded:
    """Question + context windows with a document stride (the fast tokenizer's overflowing windows)."""
    max_q = max(1, max_len - stride - 4)  # the tokenizer needs room for the stride after the question
    questions = [_clip_question(tok, r["question"].lstrip(), max_q) for r in rows]
    enc = tok(questions, [r["context"] for r in rows], truncation="only_second", max_length=max_len, stride=stride,
              return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    inputs, example_of, metas = [], [], []
    for i, ex in enumerate(enc["overflow_to_sample_mapping"]):
        seq_ids, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
        feat = features(enc, i)
        if train:
            feat["start_positions"], feat["end_positions"] = _answer_span(offsets, seq_ids, rows[ex]["answers"])
        inputs.append(feat)
        example_of.append(ex)
        metas.append([tuple(o) if s == 1 else None for o, s in zip(offsets, seq_ids)])
    return Encoded(inputs, example_of, metas)


def encode(rows: list[dict], tok, label2id: dict[str, int], ft, max_pos: int, train: bool) -> Encoded:
    max_len = min(ft.qa_max_len, max_pos)
    return encode_qa(rows, tok, max_len, min(ft.qa_doc_stride, max_len // 2), train)


def best_span(start: np.ndarray, end: np.ndarray, offsets: list, max_answer_len: int) -> tuple[float, int, int] | None:
    """Highest start+end score over context tokens with start <= end < start + max_answer_len."""
    best = None
    for s in np.argsort(start)[::-1][:QA_TOP_N]:
        if offsets[s] is None:
            continue
        for e in np.argsort(end)[::-1][:QA_TOP_N]:
            if offsets[e] is None or e < s or e - s + 1 > max_answer_len:
                continue
            score = float(start[s] + end[e])
            if best is None or score > best[0]:
                best = (score, int(s), int(e))
    return best


def decode_qa(rows: list[dict], enc: Encoded, logits: list, max_answer_len: int) -> list[str]:
    """Best span over all windows of each example, as text of the original context."""
    best: list[tuple[float, str] | None] = [None] * len(rows)
    for f, ex in enumerate(enc.example_of):
        offsets = enc.meta[f]
        span = best_span(logits[f][0], logits[f][1], offsets, max_answer_len)
        if span is None:
            continue
        score, s, e = span
        if best[ex] is None or score > best[ex][0]:
            best[ex] = (score, rows[ex]["context"][offsets[s][0]:offsets[e][1]])
    return [b[1] if b is not None else "" for b in best]


def decode(spec, rows: list[dict], enc: Encoded, logits: list, ft) -> tuple[list[str], list[str]]:
    texts = decode_qa(rows, enc, logits, ft.qa_max_answer_len)
    return [json.dumps(t) for t in texts], [json.dumps(r["answers"]["text"]) for r in rows]


QA = TaskType("qa", ("context", "question", "answers"), ("squad_f1", "squad_em"), "BertForQuestionAnswering",
              parse_row, None, encode, decode, probe=None)
