"""What each pretraining input format put in front of the model, one sentence per format, from runs.

Every variant of a pretraining seed reads the same chunks (A and B spans of the corpus); a format only
lays them out (``trainables.data.batches.layout``):

    single      [CLS] A B+ [SEP]         B+: B and the document's next token (a [SEP] filler at its end),
                                         in the middle [SEP]'s place
    nsp_pairs   [CLS] A [SEP] B' [SEP]   B' (NSP's random segment half the time) has B's length
    sop_pairs   [CLS] A [SEP] B [SEP]    A and B swapped half the time
    full_sentences  the step's chunks packed across document boundaries, a [SEP] between them (RoBERTa)
    sentence_pairs  each chunk's sentences paired in order and packed in its row, each pair attending to
                    itself only, positions from 0 (RoBERTa's SENTENCE-PAIR): short inputs by definition

So the masked positions of each row are the same in every one-chunk-per-row format, and so are the real
tokens (where a chunk ends its document ``single`` has no next token: an attended [SEP] fills its place);
every format reaches the last position of the sequence. What remains (single's next tokens) is stated from
the recorded tokens per step: it is part of the input-format effect (``mlm_pairs - mlm_only``), not of a
contrast within one format.

    lines = input_format_section(export.runs)   # Markdown lines; [] when fewer than two formats ran
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

LAYOUTS = {
    "single": "[CLS] A B+ [SEP], B+ being B and the document's next token (a [SEP] where the chunk ends its document)",
    "nsp_pairs": "[CLS] A [SEP] B [SEP], B replaced half the time by a random segment of B's length",
    "sop_pairs": "[CLS] A [SEP] B [SEP], A and B swapped half the time",
    "full_sentences": "the step's chunks (A B) in batch order with a [SEP] between consecutive ones, cut into full "
                      "rows [CLS] ... [SEP] that cross document boundaries (RoBERTa's FULL-SENTENCES)",
    "sentence_pairs": "each chunk's sentences paired in order, [CLS] s [SEP] s' [SEP] per pair, packed in the chunk's "
                      "row, each pair attending to itself only with positions from 0, s' replaced half the time by "
                      "a piece of another document of s''s length (RoBERTa's SENTENCE-PAIR)",
}


def _measured(runs: pd.DataFrame) -> pd.DataFrame:
    """Completed measurement runs that pretrained (``none`` has no input format)."""
    keep = (runs["phase"] == "measure") & (runs["status"] == "completed") & (runs["variant"] != "none")
    return runs[keep & runs["input_format"].isin(list(LAYOUTS))]


def _lengths(runs: pd.DataFrame) -> list[int]:
    """The sequence lengths the runs trained at (phase 1, and phase 2 where it ran), from config_json."""
    out = set()
    for text in runs.get("config_json", pd.Series(dtype=str)).dropna():
        cfg = json.loads(text)
        data, optim = cfg.get("data", {}), cfg.get("optim", {})
        if "seq_len" in data:
            out.add(int(data["seq_len"]))
        if optim.get("phase2_steps"):
            out.add(int(optim["phase2_seq_len"]))
    return sorted(out)


def _per_step(rows: pd.DataFrame, column: str) -> str:
    values = rows[column].dropna() if column in rows else pd.Series(dtype=float)
    return f"{values.mean():.1f}" if len(values) and np.isfinite(values.mean()) else "not recorded"


def format_sentence(fmt: str, rows: pd.DataFrame, lengths: list[int]) -> str:
    """One sentence on what format ``fmt`` saw: its layout, its variants and its real tokens per step."""
    variants = ", ".join(sorted(rows["variant"].unique()))
    seen = f"{_per_step(rows, 'tokens_per_step')} real tokens per step"
    if fmt == "full_sentences":
        return (f"Input format full_sentences ({variants}): {LAYOUTS[fmt]}; {seen}: the same content tokens as "
                "single on the same chunks plus one separator per chunk but the first, and the masked positions "
                "rounded per packed row rather than per chunk; its rows reach the last position.")
    if fmt == "sentence_pairs":
        longest = " and ".join(str(n - 1) for n in lengths) or "seq_len - 1"
        return (f"Input format sentence_pairs ({variants}): {LAYOUTS[fmt]}; {seen}: as many content tokens and "
                "masked positions per row as the other formats on the same chunks, 3 specials per pair; its "
                f"positions restart at each pair, so the positions up to {longest} are trained only as far as "
                "its longest pair reaches (by the format's definition): part of the input-format effect.")
    if fmt != "single":
        return (f"Input format {fmt} ({variants}): {LAYOUTS[fmt]}; {seen}, the same content tokens and masked "
                "positions per row as every other format on the same chunks.")
    last = " and ".join(str(n - 1) for n in lengths) or "seq_len - 1"
    return (f"Input format single ({variants}): {LAYOUTS[fmt]} ({seen}): as many real tokens per row as the "
            "pair formats on the same chunks (a chunk that ends its document has an attended [SEP] in place of "
            f"the next token), the same masked positions per row, and its full rows reach the last position "
            f"({last}); the next tokens and the missing middle [SEP] are part of the input-format effect "
            "(mlm_pairs - mlm_only), not of any contrast between variants of one format.")


def input_format_notes(runs: pd.DataFrame) -> list[str]:
    """One sentence per input format among the measured variants, when more than one format ran."""
    done = _measured(runs)
    formats = [f for f in LAYOUTS if f in set(done["input_format"])]
    if len(formats) < 2:
        return []
    lengths = _lengths(done)
    return [format_sentence(f, done[done["input_format"] == f], lengths) for f in formats]


def input_format_section(runs: pd.DataFrame) -> list[str]:
    """The report's Markdown section on input formats ([] when the measured variants share one format)."""
    notes = input_format_notes(runs)
    return ["## Input formats", ""] + [f"- {n}" for n in notes] + [""] if notes else []
