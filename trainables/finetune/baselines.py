"""Non-neural baselines of a probe trial (``finetune.text_baselines``): what a task's words give with no encoder.

Each is fitted on the probe's own training subset (the same draw: ``probe.probe_rows``) and scored on the rows the
probe scores, so "probe - baseline" stays paired within every run. The task type names its baseline
(``TaskType.baseline``):

    baseline-tfidf  single, pair: TF-IDF of word unigrams and bigrams, then a logistic regression whose C is
                    chosen on dev from finetune.probe_c_grid by the probe's own rule (``probe.fit_on_dev``)
    baseline-tag    tagging: each word's most frequent tag in the training subset; an unseen word gets the most
                    frequent tag overall
    (none)          qa: an answer span has no word-level floor of this kind

Both read the words the encoders read (``Reading``): lower-cased when the tokenizer folds case, and only what fits
in the encoder's window, so that "probe - baseline" is what the encoder does with the same words, not a cue or a
stretch of text one side had and the other did not.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from trainables.config import TAG_BASELINE, TFIDF_BASELINE, FinetuneConfig
from trainables.finetune.heads import Checkpoint
from trainables.finetune.inputs import score
from trainables.finetune.probe import ProbeFit, fit_on_dev, probe_rows
from trainables.task_types import get_task_type
from trainables.task_types.tagging import fallback_tag
from trainables.tasks import TaskData, TaskSpec

Predicted = dict[str, tuple[list[dict], list[str], list[str]]]  # {split: (rows, predictions, golds)}


def folds_case(tok) -> bool:
    """Whether the tokenizer lower-cases text before the encoder reads it (its normaliser maps 'A' to 'a')."""
    normalizer = getattr(getattr(tok, "backend_tokenizer", None), "normalizer", None)
    return normalizer is not None and normalizer.normalize_str("A") == "a"


@dataclass(frozen=True)
class Reading:
    """How the encoders read a task's words: case folded or not, and the tokens of the encoder's window
    (``max_len`` of ``tok``'s tokens, truncated as ``TaskType.encode`` truncates; ``tok`` None: every word)."""

    lowercase: bool = True
    tok: Any = None
    max_len: int = 0

    @classmethod
    def of(cls, ck: Checkpoint, ft: FinetuneConfig) -> "Reading":
        return cls(folds_case(ck.tokenizer), ck.tokenizer, min(ft.max_len, ck.max_position))

    def texts(self, rows: list[dict], columns: tuple[str, ...]) -> list[list[str]]:
        """Per row, each of its ``columns``' text up to the last character the encoder reads of it."""
        if self.tok is None or not rows:
            return [[r[c] for c in columns] for r in rows]
        enc = self.tok(*[[r[c] for r in rows] for c in columns], truncation=True, max_length=self.max_len,
                       return_offsets_mapping=True)
        out = []
        for i, row in enumerate(rows):
            ends = [0] * len(columns)
            for side, (_, end) in zip(enc.sequence_ids(i), enc["offset_mapping"][i]):
                if side is not None:
                    ends[side] = max(ends[side], end)
            out.append([row[c][:end] for c, end in zip(columns, ends)])
        return out

    def words(self, rows: list[dict]) -> list[int]:
        """Per tagging row, how many of its words the encoder reads (the rest are truncated away)."""
        if self.tok is None or not rows:
            return [len(r["tokens"]) for r in rows]
        enc = self.tok([r["tokens"] for r in rows], is_split_into_words=True, truncation=True,
                       max_length=self.max_len)
        return [1 + max((w for w in enc.word_ids(i) if w is not None), default=-1) for i in range(len(rows))]


def text_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The row fields a classification task's text is in: ``text``, or ``text_a`` and ``text_b``."""
    return tuple(c for c in get_task_type(spec.type).columns if c != "label")


def _tfidf_features(columns: tuple[str, ...], lowercase: bool):
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer

    # A pair's two texts get a vocabulary each, their features side by side, not one vocabulary over the two joined
    # by a separator: which side a word is on is a cue in itself (a negation in an NLI hypothesis alone predicts
    # contradiction: Gururangan et al. 2018, Poliak et al. 2018), and the encoders are told the side too (segment
    # embeddings), so one shared vocabulary would put the floor below what word identity gives them. The token
    # pattern keeps one-letter words ("a", "I"), which scikit-learn's default drops and the encoders read.
    return ColumnTransformer([(col, TfidfVectorizer(ngram_range=(1, 2), lowercase=lowercase,
                                                    token_pattern=r"(?u)\b\w+\b"), i)
                              for i, col in enumerate(columns)])


def tfidf_baseline(train_rows: list[dict], evaluated: dict[str, list[dict]], spec: TaskSpec, ft: FinetuneConfig,
                   seed: int, reading: Reading = Reading()) -> tuple[Predicted, ProbeFit]:
    """TF-IDF logistic regression: the vocabulary and document frequencies from ``train_rows`` alone, the C of
    ``ft.probe_cs`` best on ``evaluated["dev"]`` (ties: the smaller C, the probe's rule); predicts every split of
    ``evaluated``. Returns ({split: (rows, predictions, golds)}, ProbeFit)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    columns = text_columns(spec)

    def table(rows: list[dict]) -> np.ndarray:
        return np.array(reading.texts(rows, columns), dtype=object).reshape(len(rows), len(columns))

    # fitted once, outside the C grid: the features do not depend on C (as the probe's encoder features)
    vectorizer = _tfidf_features(columns, reading.lowercase)
    x_train = vectorizer.fit_transform(table(train_rows))
    x = {split: vectorizer.transform(table(rows)) for split, rows in evaluated.items()}

    def predict(clf, split: str) -> tuple[list[str], list[str]]:
        return [str(p) for p in clf.predict(x[split])], [r["label"] for r in evaluated[split]]

    def dev_score(clf) -> float:
        return score(spec, *predict(clf, "dev"))[spec.selection_metric]

    def make(c: float):
        # no scaling: TF-IDF rows are already L2-normalised, and centring would make them dense
        return make_pipeline(LogisticRegression(C=c, max_iter=ft.probe_max_iter, random_state=seed))

    with warnings.catch_warnings():  # an unconverged fit is recorded (evals.probe_iters), as the probe's
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf, fit = fit_on_dev(make, x_train, [r["label"] for r in train_rows], dev_score, ft.probe_cs)
    return {split: (rows, *predict(clf, split)) for split, rows in evaluated.items()}, fit


def _most_frequent(counts: Counter, order: dict[str, int]) -> str:
    """The commonest tag of ``counts``; ties: the tag first in the task's tag set (``order``), then by name."""
    return min(counts, key=lambda t: (-counts[t], order.get(t, len(order)), t))


def tag_baseline(train_rows: list[dict], evaluated: dict[str, list[dict]], spec: TaskSpec, ft: FinetuneConfig,
                 seed: int, reading: Reading = Reading()) -> tuple[Predicted, None]:
    """Each word's most frequent tag in ``train_rows`` (the word form lower-cased when the encoders' is); a word not
    seen there gets the most frequent tag overall. Only the words the encoder reads count; one truncated away is
    given the probe's fallback tag (``tagging.fallback_tag``). Predicts every split of ``evaluated``; there is
    nothing to choose on dev. Returns ({split: (rows, predictions, golds)}, None)."""
    form: Callable[[str], str] = str.lower if reading.lowercase else str
    by_word: dict[str, Counter] = defaultdict(Counter)
    for row, n in zip(train_rows, reading.words(train_rows)):
        for word, tag in zip(row["tokens"][:n], row["tags"][:n]):
            by_word[form(word)][tag] += 1
    order = {t: i for i, t in enumerate(spec.labels)}
    unseen = _most_frequent(sum(by_word.values(), Counter()), order)
    tag_of = {w: _most_frequent(c, order) for w, c in by_word.items()}
    cut = fallback_tag(spec.labels)

    def predict(rows: list[dict]) -> tuple[list[str], list[str]]:
        return ([json.dumps([tag_of.get(form(w), unseen) for w in r["tokens"][:n]] + [cut] * (len(r["tokens"]) - n))
                 for r, n in zip(rows, reading.words(rows))], [json.dumps(r["tags"]) for r in rows])

    return {split: (rows, *predict(rows)) for split, rows in evaluated.items()}, None


BASELINES: dict[str, Callable] = {TFIDF_BASELINE: tfidf_baseline, TAG_BASELINE: tag_baseline}


def baseline_splits(ck: Checkpoint, data: TaskData, seed: int, ft: FinetuneConfig, splits: tuple[str, ...]
                    ) -> tuple[str, Predicted, ProbeFit | None] | None:
    """The task type's baseline in the probe trial of (``ck``, fine-tuning ``seed``): fitted on that draw's probe
    training subset, scored on the rows the probe scores (dev and ``splits``: ``probe.probe_rows``), reading the
    words ``ck``'s encoder reads. None for a type without one (QA)."""
    train_rows, evaluated = probe_rows(ck, data, seed, ft, splits)
    return text_baseline(data.spec, train_rows, evaluated, ft, ck.draw(seed), Reading.of(ck, ft))


def text_baseline(spec: TaskSpec, train_rows: list[dict], evaluated: dict[str, list[dict]], ft: FinetuneConfig,
                  seed: int, reading: Reading = Reading()) -> tuple[str, Predicted, ProbeFit | None] | None:
    """The task type's baseline (``TaskType.baseline``) as (mode, {split: (rows, predictions, golds)}, ProbeFit or
    None), or None for a type without one (QA)."""
    mode = get_task_type(spec.type).baseline
    if not mode:
        return None
    predicted, fit = BASELINES[mode](train_rows, evaluated, spec, ft, seed, reading)
    return mode, predicted, fit
