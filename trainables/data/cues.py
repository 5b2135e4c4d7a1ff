"""Surface-cue checks: could a task be solved without pretraining?

    from trainables.data.cues import cue_check
    check = cue_check(splits, roles=lang.roles())   # splits: {"train": rows, "dev": rows, "test": rows}
    check.passes()                                   # both baselines within chance + CUE_MARGIN on test

A known-answer task is a positive control only if what decides it was learned in pretraining. Two
baselines that learn nothing from a corpus look for what else could decide it:

* a logistic regression on surface features, fitted on the task's train split (its regularisation
  chosen on dev): a bag of words of each text (A's and B's apart), their word overlap (shared word
  types, their share of the smaller text, and per word role when the roles are known), and lengths;
* the best zero-parameter rule of a family (shares >= k words; shares a word of role r; a text has a
  repeated word; is longer than k words), in whichever direction scores better, chosen **on test**:
  optimistic for the baseline, so conservative for the check.

Both must score within ``CUE_MARGIN`` of chance (the test split's majority share) on the test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

CUE_MARGIN = 0.05


@dataclass(frozen=True)
class CueCheck:
    chance: float  # the test split's majority-label share
    regression: float  # test accuracy of the fitted surface logistic regression
    rule: float  # test accuracy of the best zero-parameter rule
    rule_name: str

    def passes(self, margin: float = CUE_MARGIN) -> bool:
        return max(self.regression, self.rule) <= self.chance + margin

    def line(self) -> str:
        verdict = "no surface cue" if self.passes() else "SURFACE CUE"
        return (f"chance {self.chance:.3f}; surface regression {self.regression:.3f}; best overlap rule "
                f"{self.rule:.3f} ({self.rule_name}): {verdict}")


def _texts(row: Mapping) -> list[list[str]]:
    keys = ("text_a", "text_b") if "text_a" in row else ("text",)
    return [str(row[k]).lower().replace(".", " ").split() for k in keys]


def _overlap(row_texts: list[list[str]], roles: Mapping[str, str], role_names: Sequence[str]) -> list[float]:
    """[shared types, shared / smaller text's types, shared per role ...]; zeros for single texts."""
    if len(row_texts) < 2:
        return [0.0] * (2 + len(role_names))
    a, b = set(row_texts[0]), set(row_texts[1])
    shared = a & b
    return [len(shared), len(shared) / max(1, min(len(a), len(b)))] + \
        [sum(roles.get(w) == r for w in shared) for r in role_names]


def _features(rows: Sequence[Mapping], vocab: dict[str, int], roles: Mapping[str, str],
              role_names: Sequence[str]):
    """(bag of words of each text, sparse; overlap and length features, dense) per row."""
    from scipy import sparse

    n_texts = len(_texts(rows[0]))
    r, c, dense = [], [], []
    for i, row in enumerate(rows):
        texts = _texts(row)
        cols = {j * len(vocab) + vocab[w] for j, words in enumerate(texts) for w in words if w in vocab}
        r += [i] * len(cols)
        c += sorted(cols)
        dense.append(_overlap(texts, roles, role_names) + [len(t) for t in texts] + [len(set(t)) for t in texts])
    bag = sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(rows), n_texts * len(vocab)))
    return bag, np.array(dense, dtype=float)


def _labels(rows: Sequence[Mapping]) -> np.ndarray:
    return np.array([str(r["label"]) for r in rows])


def surface_regression(splits: Mapping[str, Sequence[Mapping]], roles: Mapping[str, str] | None = None) -> float:
    """Test accuracy of a bag-of-words + overlap + length logistic regression fitted on train (C on dev)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    roles = roles or {}
    role_names = sorted(set(roles.values()))
    vocab = {w: i for i, w in enumerate(sorted({w for r in splits["train"] for t in _texts(r) for w in t}))}
    from scipy import sparse

    parts = {s: _features(splits[s], vocab, roles, role_names) for s in ("train", "dev", "test")}
    scaler = StandardScaler().fit(parts["train"][1])
    x = {s: sparse.hstack([bag, sparse.csr_matrix(scaler.transform(dense))]).tocsr()
         for s, (bag, dense) in parts.items()}
    y = {s: _labels(splits[s]) for s in ("train", "dev", "test")}
    best = None
    for c in (0.01, 0.1, 1.0, 10.0):
        model = LogisticRegression(C=c, max_iter=5000, solver="liblinear").fit(x["train"], y["train"])
        dev = float((model.predict(x["dev"]) == y["dev"]).mean())
        if best is None or dev > best[0]:
            best = (dev, model)
    return float((best[1].predict(x["test"]) == y["test"]).mean())


def _rules(texts: list[list[list[str]]], roles: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Zero-parameter rules, each a boolean per row."""
    out: dict[str, np.ndarray] = {}
    if len(texts[0]) == 2:
        shared = [set(a) & set(b) for a, b in texts]
        for k in range(1, 6):
            out[f"A and B share >= {k} word(s)"] = np.array([len(s) >= k for s in shared])
        for r in sorted(set(roles.values())):
            out[f"A and B share a {r} word"] = np.array([any(roles.get(w) == r for w in s) for s in shared])
        out["B is longer than A"] = np.array([len(b) > len(a) for a, b in texts])
    for j in range(len(texts[0])):
        name = "AB"[j] if len(texts[0]) == 2 else "the text"
        out[f"{name} repeats a word"] = np.array([len(set(t[j])) < len(t[j]) for t in texts])
        lengths = np.array([len(t[j]) for t in texts])
        for k in sorted(set(lengths.tolist()))[:-1]:
            out[f"{name} is longer than {k} words"] = lengths > k
    return out


def best_rule(rows: Sequence[Mapping], roles: Mapping[str, str] | None = None) -> tuple[float, str]:
    """The best zero-parameter rule's accuracy on ``rows`` (either direction: rule -> the label it fits best)."""
    y = _labels(rows)
    labels = sorted(set(y))
    texts = [_texts(r) for r in rows]
    best = (0.0, "")
    for name, fired in _rules(texts, roles or {}).items():
        for pos in labels:  # the rule predicts ``pos`` when it fires, the most common other label when not
            rest = [lab for lab in labels if lab != pos]
            neg = max(rest, key=lambda lab: int((y[~fired] == lab).sum())) if rest else pos
            acc = float(np.where(fired, y == pos, y == neg).mean())
            if acc > best[0]:
                best = (acc, f"{name} -> {pos}")
    return best


def cue_check(splits: Mapping[str, Sequence[Mapping]], roles: Mapping[str, str] | None = None) -> CueCheck:
    """Both baselines on a task's splits ({"train", "dev", "test"}: rows with text or text_a/text_b, label)."""
    y = _labels(splits["test"])
    chance = float(max(np.mean(y == lab) for lab in set(y)))
    rule, name = best_rule(splits["test"], roles)
    return CueCheck(chance, surface_regression(splits, roles), rule, name)
