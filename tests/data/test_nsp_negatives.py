"""NSP's negatives carry no boundary cue: where B' starts and ends relative to sentence boundaries, and
whether it opens with a ``##`` piece, say nothing of the NSP label (``samples.random_spans``).

Real data (slow: it prepares the built-in corpus on first use): the cpu-small preset's nsp_pairs batches.
Before B' was placed as B is, B' always opened a sentence and almost never ended at one, while B opens
mid-sentence about half of the time: a logistic regression on the three features read 0.97 of the labels.
"""

import numpy as np
import pytest

from trainables.data.batches import continuation_table, layout, layout_sources
from trainables.data.samples import IGNORE
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data

BATCHES = 800  # of the epoch's ~1,420: 25,600 rows, ~12,800 scored (binomial SE at 0.5: 0.0044; 0.52 is 4.5 SE)


def boundary_features(corpus, sp, cont, idx, rows) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of one nsp_pairs batch as laid out: per labelled row, whether its second segment starts at a
    sentence start, ends at a sentence boundary, and opens with a ``##`` piece; its NSP label."""
    laid = layout(corpus, rows, "nsp_pairs", sp, idx)
    src = layout_sources(corpus, rows, "nsp_pairs", int(laid.input_ids.shape[1]), sp)
    labelled = np.flatnonzero(laid.pair_labels != IGNORE)
    first, last, opening = [], [], []
    for i in labelled:
        second = np.flatnonzero((laid.token_type_ids[i] == 1) & (src[i] >= 0))  # B or B', as the model reads it
        first.append(src[i, second[0]])
        last.append(src[i, second[-1]])
        opening.append(cont[laid.input_ids[i, second[0]]])
    offsets = np.asarray(corpus.sentences)  # sorted: every sentence start, and every document's end
    at = lambda t: offsets[np.minimum(np.searchsorted(offsets, t), len(offsets) - 1)] == t  # noqa: E731
    x = np.stack([at(np.asarray(first)), at(np.add(last, 1)), opening], 1).astype(float)
    return x, laid.pair_labels[labelled]


@pytest.mark.slow
def test_a_boundary_classifier_cannot_read_nsp_labels_on_the_builtin_corpus(tmp_path):
    from sklearn.linear_model import LogisticRegression

    cfg = build_config("cpu-small", "full", ["run.tensorboard=false"])
    assert cfg.objective.input_format == "nsp_pairs"
    data = build_pretraining_data(cfg)
    samples, corpus = data.steps.phases[0], data.corpus
    cont = continuation_table(corpus.tokenizer)
    assert samples.batches_in_epoch(0) >= BATCHES
    parts = [boundary_features(corpus, data.sp, cont, *samples.batch_chunks(0, b)) for b in range(BATCHES)]
    half = BATCHES // 2  # fitted on the first half of the batches, scored on the second
    x_fit, y_fit = (np.concatenate([p[k] for p in parts[:half]]) for k in (0, 1))
    x_test, y_test = (np.concatenate([p[k] for p in parts[half:]]) for k in (0, 1))
    assert len(y_test) > 12_000 and 0.45 < y_test.mean() < 0.55
    # the cues exist in the real pairs: B opens mid-sentence, or with a ## piece, often enough to be read
    real = x_test[y_test == 0]
    assert 0.3 < real[:, 0].mean() < 0.7 and 0.3 < real[:, 1].mean() < 0.8 and real[:, 2].mean() > 0.03
    accuracy = LogisticRegression().fit(x_fit, y_fit).score(x_test, y_test)
    assert accuracy <= 0.52, f"boundary features predict NSP at {accuracy:.3f} on {len(y_test)} rows"
