"""A planted language whose downstream answers are known by construction: the instrument's positive and
negative controls (``data.corpus=planted``, tasks ``planted_*``).

    from trainables.data.planted import PlantedLanguage
    lang = PlantedLanguage(seed=0)
    docs = lang.documents(4000)            # the pretraining corpus (lists of sentences)
    splits = lang.task("planted_lexical")  # {"train": rows, "dev": rows, "test": rows}

Every word is a made-up syllable string (whole WordPiece tokens), so nothing but this generator gives it
meaning. A document has a **topic** (its topic words recur in every sentence) and a **stage** sequence
(sentence i carries a marker word of stage s0 + i: stages rise through a document); each sentence also
holds four **lexical phrases** "frame content" whose frame word belongs to the content word's latent
class; a document keeps one class, drawn apart from its topic. So:

* **lexical** (MLM's known effect): a content word's class shows only in its frame words. The task
  labels three content words of the label's class group, frames removed; its dev and test splits use content words that
  never occur in its train split (they do occur in pretraining). An encoder that learned the classes from
  context (MLM, RTD) carries the label to the unseen words; random initialisation cannot, and NSP alone
  sometimes does (its positive pairs share the document's class words: docs/known-answers.md, Protocol 3).
* **discourse** (the NSP question without its surface cue): does sentence B continue A's topic, or take
  another topic's? Both labels share the class and B is one stage after A; A's topic words come from one
  half of its topic and B's from the other half of its own, so no word is shared by topic; train and test
  use disjoint topics and disjoint stage markers. Only which words belong to one topic, learned in
  pretraining from their co-occurrence, tells. (Negatives from a document of another topic and class would
  differ in their frame words too, and the overlap rule "A and B share a frame word" would solve the task:
  docs/known-answers.md.)
* **order** (SOP's, against NSP's): two consecutive sentences of one document, in order or swapped. Only
  the stage markers tell, and the test uses marker synonyms the train split never shows. NSP's negatives
  come from other documents, so topic alone solves NSP and it never needs the order (ALBERT's argument).
* **null**: sentences with labels drawn independently of the text: every contrast's truth is 0.

The language and the tasks are a pure function of ``seed`` (``planted:seed=K`` names language K for the
corpus and its tasks); the task documents are drawn from streams apart from the corpus's, so no task
sentence is a pretraining sentence. Every task ships with a surface-cue check (``trainables.data.cues``):
a bag-of-words + overlap + length regression fitted on its train split and the best zero-parameter
overlap rule stay within chance + 0.05 on its test split (tests/data/test_planted.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

PLANTED_VERSION = 7  # bump when the generator changes what a seed produces (prepared corpora are keyed on it)
TASKS = ("planted_lexical", "planted_discourse", "planted_order", "planted_null")
TASK_INFO = {  # name: (task type, what it asks)
    "planted_lexical": ("single", "class group of three content words never seen in fine-tuning's train split"),
    "planted_discourse": ("pair", "does B continue A's topic? (no word shared by topic; topics unseen in train)"),
    "planted_order": ("pair", "are two consecutive sentences swapped? (stage markers unseen in train)"),
    "planted_null": ("single", "a random label: nothing in pretraining carries information about it"),
}
TASK_SIZES = (2000, 500)  # train; dev and test each
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class PlantedLanguage:
    seed: int = 0
    classes: int = 8  # latent lexical classes; the lexical label is the class group (class % 2)
    content_words: int = 48  # per class: 24 for the task's train split, 12 dev, 12 test (96 unseen test words:
    # with fewer, which way their random embeddings happen to lean moves an untrained encoder's lexical probe too
    # far across seeds for a 3-seed interval of mlm_only - none)
    frame_words: int = 3  # per class
    topics: int = 12  # the discourse task trains on half of them and tests on the other half
    topic_words: int = 6  # per topic; a sentence carries three
    stages: int = 12  # a document of n sentences covers stages s0 .. s0 + n - 1
    stage_words: int = 6  # synonyms per stage: two for the pair tasks' train split, two dev, two test
    sentences: tuple[int, int] = (5, 10)  # per document

    # ------------------------------------------------------------------ the vocabulary

    @cached_property
    def _words(self) -> dict[str, np.ndarray]:
        """Distinct made-up words per role, shaped (groups, words per group)."""
        shapes = {"content": (self.classes, self.content_words), "frame": (self.classes, self.frame_words),
                  "topic": (self.topics, self.topic_words), "stage": (self.stages, self.stage_words)}
        total = sum(a * b for a, b in shapes.values())
        rng = np.random.default_rng([self.seed, 0])
        seen: set[str] = set()
        words: list[str] = []
        while len(words) < total:
            n = int(rng.integers(2, 4))  # syllables
            w = "".join(rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS)) for _ in range(n))
            if w not in seen:
                seen.add(w)
                words.append(w)
        out, i = {}, 0
        for role, (a, b) in shapes.items():
            out[role] = np.array(words[i:i + a * b]).reshape(a, b)
            i += a * b
        return out

    def words(self, role: str) -> np.ndarray:
        return self._words[role]

    def roles(self) -> dict[str, str]:
        """word -> its role (content, frame, topic, stage): what the cue checks' overlap rules may use."""
        return {str(w): role for role, words in self._words.items() for w in words.ravel()}

    # ------------------------------------------------------------------ documents

    def _document(self, rng: np.random.Generator, topic: int, stage_pool: np.ndarray | None = None,
                  cls: int | None = None) -> list[str]:
        """One document: n sentences "marker (topic frame content) x3 frame content marker." (one draw per
        array). The document has one lexical class, drawn apart from its topic: its content and frame words
        co-occur throughout it, the way topic words do, which MLM learns within this budget (a class shown
        only by the adjacent word needs position-specific attention, which the check's budget does not teach)."""
        w = self._words
        markers = w["stage"] if stage_pool is None else stage_pool
        n = int(rng.integers(self.sentences[0], self.sentences[1] + 1))
        stage = int(rng.integers(self.stages - n + 1)) + np.arange(n)
        mark = markers[stage[:, None], rng.integers(markers.shape[1], size=(n, 2))]
        topics = w["topic"][topic][rng.integers(self.topic_words, size=(n, 3))]
        cls = np.full((n, 4), int(rng.integers(self.classes)) if cls is None else cls)
        content = w["content"][cls, rng.integers(self.content_words, size=(n, 4))]
        frames = w["frame"][cls, rng.integers(self.frame_words, size=(n, 4))]
        return [_render(mark[i], topics[i], frames[i], content[i]) for i in range(n)]

    def _sentence(self, rng: np.random.Generator, topic_pool: np.ndarray, cls: int, stage: int,
                  markers: np.ndarray) -> str:
        """One sentence of the document template: three topic words from ``topic_pool``, four lexical
        phrases of class ``cls``, two markers of ``stage`` from ``markers``."""
        w = self._words
        return _render(markers[stage, rng.integers(markers.shape[1], size=2)],
                       topic_pool[rng.integers(len(topic_pool), size=3)],
                       w["frame"][cls, rng.integers(self.frame_words, size=4)],
                       w["content"][cls, rng.integers(self.content_words, size=4)])

    def documents(self, n: int, start: int = 0) -> list[list[str]]:
        """Documents ``start .. start + n`` of the pretraining corpus (each from its own stream: a prefix
        of a longer corpus is the shorter one)."""
        out = []
        for d in range(start, start + n):
            rng = np.random.default_rng([self.seed, 1, d])
            out.append(self._document(rng, int(rng.integers(self.topics))))
        return out

    # ------------------------------------------------------------------ tasks

    def task(self, name: str, n_train: int = TASK_SIZES[0], n_eval: int = TASK_SIZES[1]) -> dict[str, list[dict]]:
        """The splits of one planted task (rows in the task type's schema; labels as strings)."""
        if name not in TASKS:
            raise ValueError(f"planted task {name!r} is not valid; allowed: {', '.join(TASKS)}")
        build = {"planted_lexical": self._lexical, "planted_discourse": self._discourse,
                 "planted_order": self._order, "planted_null": self._null}[name]
        sizes = {"train": n_train, "dev": n_eval, "test": n_eval}
        return {split: build(np.random.default_rng([self.seed, 2, TASKS.index(name), i]), split, n)
                for i, (split, n) in enumerate(sizes.items())}

    def lexical_split_words(self, split: str) -> np.ndarray:
        """(classes, k) the content words the lexical task shows in ``split``: train, dev, test disjoint."""
        k = self.content_words
        cut = {"train": slice(0, k // 2), "dev": slice(k // 2, 3 * k // 4), "test": slice(3 * k // 4, k)}[split]
        return self._words["content"][:, cut]

    def _lexical(self, rng: np.random.Generator, split: str, n: int) -> list[dict]:
        pool = self.lexical_split_words(split)
        labels = rng.integers(2, size=n)
        classes = labels[:, None] + 2 * rng.integers(self.classes // 2, size=(n, 3))  # three of the label's group
        words = pool[classes, rng.integers(pool.shape[1], size=(n, 3))]
        return [{"id": f"{split}-{i}", "text": " ".join(words[i]) + ".", "label": str(int(labels[i]))} for i in range(n)]

    def _topic_split(self, split: str) -> np.ndarray:
        half = self.topics // 2
        return np.arange(half) if split == "train" else np.arange(half, self.topics)

    def topic_halves(self, topic: int) -> tuple[np.ndarray, np.ndarray]:
        """A topic's words in two disjoint halves (pretraining mixes them in every sentence)."""
        words, k = self._words["topic"][topic], self.topic_words // 2
        return words[:k], words[k:]

    def _discourse(self, rng: np.random.Generator, split: str, n: int) -> list[dict]:
        """A sentence and the next one: B's topic is A's (label 1) or another of the split's topics (0).
        Everything else is the same for both labels: A and B share the class (so their lexical phrases
        overlap alike), B is at A's stage + 1, and A's topic words come from one half of its topic, B's from
        the other half of its own, so A and B never share a topic word. Only which words belong to one
        topic, learned in pretraining from their co-occurrence, tells the label; train and test topics
        are disjoint, so fine-tuning cannot learn it from its train split."""
        topics, pool = self._topic_split(split), self.split_markers(split)
        rows = []
        for i in range(n):
            t, cls = int(rng.choice(topics)), int(rng.integers(self.classes))
            stage, half = int(rng.integers(self.stages - 1)), int(rng.integers(2))
            label = int(rng.integers(2))  # 1: B is the sentence after A
            tb = t if label else int(rng.choice(topics[topics != t]))
            a = self._sentence(rng, self.topic_halves(t)[half], cls, stage, pool)
            b = self._sentence(rng, self.topic_halves(tb)[1 - half], cls, stage + 1, pool)
            rows.append({"id": f"{split}-{i}", "text_a": a, "text_b": b, "label": str(label)})
        return rows

    def split_markers(self, split: str) -> np.ndarray:
        """(stages, k) the stage markers the pair tasks show in ``split``: train, dev, test disjoint."""
        k = self.stage_words // 3
        i = ("train", "dev", "test").index(split)
        return self._words["stage"][:, i * k:(i + 1) * k]

    def _order(self, rng: np.random.Generator, split: str, n: int) -> list[dict]:
        pool = self.split_markers(split)
        rows = []
        for i in range(n):
            doc = self._document(rng, int(rng.integers(self.topics)), stage_pool=pool)
            j = int(rng.integers(len(doc) - 1))
            label = int(rng.integers(2))  # 1: swapped
            a, b = (doc[j + 1], doc[j]) if label else (doc[j], doc[j + 1])
            rows.append({"id": f"{split}-{i}", "text_a": a, "text_b": b, "label": str(label)})
        return rows

    def _null(self, rng: np.random.Generator, split: str, n: int) -> list[dict]:
        rows = []
        for i in range(n):
            doc = self._document(rng, int(rng.integers(self.topics)))
            rows.append({"id": f"{split}-{i}", "text": doc[int(rng.integers(len(doc)))],
                         "label": str(int(rng.integers(2)))})
        return rows


def _render(markers, topics, frames, contents) -> str:
    """The sentence template: "marker (topic frame content) x3 frame content marker." """
    words = [markers[0]]
    for k in range(4):
        words += ([topics[k]] if k < 3 else []) + [frames[k], contents[k]]
    return " ".join(words + [markers[1]]) + "."


@lru_cache(maxsize=8)
def planted_language(seed: int = 0) -> PlantedLanguage:
    """Language ``seed``, built once per process (its words are drawn once for all its tasks)."""
    return PlantedLanguage(seed=seed)
