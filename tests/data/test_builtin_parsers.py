"""Each built-in source parser on a tiny fixture written in that source's own format."""

import bz2
import zipfile
from pathlib import Path

import pytest

from trainables.data import parsers

FIX = Path(__file__).parent / "fixtures"


def test_news_articles_zip_csv(tmp_path):
    z = tmp_path / "NewsArticles.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.write(FIX / "NewsArticles.csv", "NewsArticles.csv")
    arts = parsers.parse_news_articles(z)
    assert [a.article_id for a in arts] == ["1", "2"]  # the row with empty text is skipped
    assert arts[0].title.startswith("Betsy DeVos Confirmed")
    assert '"?' not in arts[0].text and "DeVos\" highly" in arts[0].text  # mangled quote repaired


def test_bbc_article_title_paragraphs_and_latin1():
    arts = parsers.parse_bbc_dir(FIX / "bbc")
    assert [(a.article_id, a.category) for a in arts] == [("business/001", "business"), ("sports/199", "sports")]
    assert arts[0].title == "Ad sales boost Time Warner profit"
    assert arts[0].paragraphs[0].startswith("Quarterly profits at US media giant TimeWarner")
    assert all("\n" not in p for a in arts for p in a.paragraphs)
    assert "£15.8m" in " ".join(arts[1].paragraphs)  # the one Latin-1 file in the set decodes


def test_wiki_dump_strips_markup_and_skips_redirects(tmp_path):
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress((FIX / "enwiki-sample.xml").read_bytes()))
    arts = parsers.parse_wiki_dump(path)
    assert [a.title for a in arts] == ["Albedo"]  # redirect and non-article namespace dropped
    text = "\n".join(arts[0].paragraphs)
    assert text.startswith('Albedo is the "whiteness" of a surface. It is a reflection coefficient')
    assert "The lunar albedo is low." in text
    assert "Albedos of typical materials" in text  # a long list item is prose
    for junk in ("{{", "[[", "cite web", "wikitable", "short item", "Cool roof", "Category", "<ref", "thumb"):
        assert junk not in text


def test_rotten_tomatoes_drops_plot(tmp_path):
    path = tmp_path / "rt.csv.bz2"
    path.write_bytes(bz2.compress((FIX / "rotten_tomatoes_corpus_full.csv").read_bytes()))
    snippets = parsers.parse_rotten_tomatoes(path)
    assert [s.label for s in snippets] == ["positive", "positive", "negative", "negative"]
    assert all(s.group for s in snippets) and snippets[0].snippet_id == "rt:1"


def test_pang_lee_reviews_one_sentence_per_line():
    reviews = parsers.parse_pang_lee_reviews(FIX / "polarity-en-pang&lee1.csv")
    assert [r.label for r in reviews] == ["positive", "negative"]
    assert len(reviews[0].sentences) == 4
    assert reviews[0].sentences[1].startswith("for starters , it was created by alan moore")


def test_uncertainty_labels():
    rows = parsers.parse_uncertainty(FIX / "uncertainty-conll2010.csv")
    assert [(r.label, r.text[:20]) for r in rows] == [
        ("certain", "Prelingual deafness"), ("uncertain", "In children, this ty"), ("certain", "This can result in a")]


def test_tagged_wsj_and_oanc_quirks():
    wsj = parsers.parse_tagged(FIX / "tagged-en-wsj.txt", "wsj")
    assert wsj[0].tokens[:3] == ["Pierre", "Vinken", ","] and wsj[0].tags[:3] == ["NNP", "NNP", ","]
    assert "Nov." in wsj[0].tokens
    oanc = parsers.parse_tagged(FIX / "tagged-en-oanc.txt", "oanc")
    first = oanc[0]
    quotes = [t for w, t in zip(first.tokens, first.tags) if w == '"']
    assert quotes == ["``", "''"]  # plain quotes become opening/closing PTB quotes
    assert "VBG" in oanc[2].tags and not any("|" in t for s in oanc for t in s.tags)
    assert all(len(s.tokens) == len(s.tags) for s in wsj + oanc)


def test_tagged_rejects_untagged_token(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("The/DT cat sat/VBD\n")
    with pytest.raises(ValueError, match="'cat' is not word/TAG"):
        parsers.parse_tagged(bad, "x")


def test_wnut_bio_tweets():
    tweets = parsers.parse_conll_bio(FIX / "ner.txt", "wnut16")
    assert len(tweets) == 2
    assert tweets[0].tokens[:3] == ["@paulwalk", "It", "'s"]
    assert ("Empire", "B-facility") in zip(tweets[0].tokens, tweets[0].tags)
    assert ("State", "I-facility") in zip(tweets[0].tokens, tweets[0].tags)
