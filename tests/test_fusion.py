"""fusion: block features on a hand-built page, the model file, training, the service."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from services.fusion.extractor import ALGORITHM, FusionOptions
from services.fusion.features import FEATURES, page_features, page_stoplist
from services.fusion.model import DEFAULT_MODEL, default_model, read_model
from services.fusion.training import train
from shared.datasets import DATASETS
from shared.learners import TreeParams
from shared.service import create_service_app
from shared.tokens import tokenize
from tests.helpers import assert_recorded_page_scores, walk_trees
from tests.servers import serve_app

ARTICLE = [
    "The council voted on Tuesday to rebuild the old library, which has been closed since "
    "the flood of last spring damaged most of its ground floor.",
    "Work is expected to begin in the autumn and to take about two years, according to "
    "the plans that were presented to residents at a public meeting in the town hall.",
    "Many of the people who spoke at the meeting said that the library had been the heart "
    "of the neighbourhood and that they were glad it would be open again for their children.",
    "The new building will keep the original facade but add a reading room, a small cafe "
    "and a garden where the council hopes to hold concerts during the summer months.",
]
PAGE = f"""<html><head><title>Library</title><style>p {{ color: red }}</style></head><body>
<div id="header"><ul class="nav">
<li><a href="/">Home</a></li><li><a href="/news">News</a></li><li><a href="/sport">Sport</a></li>
</ul></div>
<div class="article-body">
<h1>Library to be rebuilt after the flood</h1>
{"".join(f"<p>{text}</p>" for text in ARTICLE)}
</div>
<div class="sidebar"><p><a href="/a">Most read: ten things to do this weekend</a></p></div>
<footer><p>Copyright 2024 The Town Gazette. All rights reserved.</p></footer>
</body></html>"""


def column(name: str) -> int:
    return FEATURES.index(name)


# -- features --------------------------------------------------------------------------


def test_features_of_a_hand_built_page() -> None:
    page = page_features(PAGE)
    texts = [block.text for block in page.blocks]
    assert texts == ["Home", "News", "Sport", "Library to be rebuilt after the flood", *ARTICLE,
                     "Most read: ten things to do this weekend",
                     "Copyright 2024 The Town Gazette. All rights reserved."]
    m = page.matrix
    assert m.shape == (10, len(FEATURES))
    assert np.isfinite(m).all()
    words = [len(tokenize(text)) for text in texts]
    assert m[:, column("log_words")] == pytest.approx(np.log1p(words))
    assert m[:, column("log_chars")] == pytest.approx(np.log1p([len(t) for t in texts]))
    # links: the menu and the sidebar are all link text, the article none
    assert m[:, column("link_density")].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 1, 0]
    assert m[:, column("sentence_end")].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 1]
    # punctuation per word: "Most read: ten things ..." has one colon in 8 words
    assert m[8, column("punctuation")] == pytest.approx(1 / 8)
    assert m[9, column("digits")] == pytest.approx(4 / len(texts[9]))
    # containers: li, h1, p
    assert m[:3, column("tag_li")].tolist() == [1, 1, 1]
    assert m[3, column("tag_h")] == 1
    assert m[4:, column("tag_p")].tolist() == [1] * 6
    # ancestors: <ul> and class/id hints; <footer> is navigation markup
    assert m[:, column("in_list")].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert m[:, column("negative_attr")].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 1, 0]
    assert m[:, column("positive_attr")].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert m[:, column("in_navigation")].tolist() == [0] * 9 + [1]
    # html > body > div > ul > li is depth 4; html > body > div > p is depth 3
    assert m[0, column("depth")] == 4
    assert m[4, column("depth")] == 3
    # position by block and by words
    assert m[:, column("position")] == pytest.approx(np.arange(10) / 9)
    assert m[4, column("word_position")] == pytest.approx(sum(words[:4]) / sum(words))
    # the longest block is an article paragraph: its siblings share its parent
    assert m[:, column("longest_parent")].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    # BTE's window holds the article paragraphs, not the menu
    assert m[4:8, column("bte_inside")].tolist() == [1, 1, 1, 1]
    assert m[:3, column("bte_inside")].tolist() == [0, 0, 0]
    # CETD: a <p> of plain text has no tags below it and no links: CTD = C * ln(C) / ln ln(C + e)
    # (C here in characters of the block's text; body has 3 + 1 + ... link characters)
    chars = [len(t) for t in texts]
    body_ratio = (chars[0] + chars[1] + chars[2] + chars[8]) / sum(chars)
    c = chars[4]
    expected = c * math.log(c) / math.log(math.log(c / c * 1 + body_ratio * c + math.e))
    assert m[4, column("log_ctd")] == pytest.approx(math.log1p(expected))
    # the article's <div> holds the heading and the paragraphs, the menu's <ul> only links
    assert m[4, column("parent_char_share")] == pytest.approx(sum(chars[3:8]) / sum(chars))
    assert m[0, column("parent_link_density")] == 1
    assert m[4, column("parent_link_density")] == 0
    assert m[4, column("ctd_over_body")] > m[0, column("ctd_over_body")]
    # readability: the article's <div> is the best candidate, the paragraphs' parent; the
    # menu's containers hold no paragraph, the sidebar's is all links (scores 0)
    assert m[:, column("readability_article")].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert m[3:8, column("readability_share")].tolist() == [1.0] * 5
    assert m[[0, 1, 2, 8], column("readability_share")].tolist() == [0, 0, 0, 0]
    assert 0 < m[9, column("readability_share")] < 0.2  # the footer: one short paragraph
    # page figures are the same on every row
    assert m[:, column("page_log_words")] == pytest.approx([math.log1p(sum(words))] * 10)
    # context: the neighbours' figures, zeros beyond the page
    assert m[1:, column("log_words_prev")] == pytest.approx(m[:-1, column("log_words")])
    assert m[:-1, column("link_density_next")] == pytest.approx(m[1:, column("link_density")])
    assert m[0, column("log_words_prev")] == 0
    assert m[-1, column("log_words_next")] == 0
    # the five-block window around block 2: three link-only menu items and two text blocks
    window = words[0:5]
    assert m[2, column("window_link_density")] == pytest.approx(sum(window[:3]) / sum(window))
    # structure: the heading is just before the first paragraph, two blocks before the
    # second; no heading before the menu (as far as the page is long)
    assert m[:, column("heading_prev")].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert m[2, column("heading_next")] == 1
    assert m[5, column("heading_distance")] == pytest.approx(math.log1p(2))
    assert m[0, column("heading_distance")] == pytest.approx(math.log1p(10))
    # the menu repeats one markup (li in ul.nav) three times; the paragraphs share theirs
    # (p in div.article-body) and hold most of the words
    assert m[:3, column("path_share")] == pytest.approx([0.3] * 3)
    assert m[4, column("path_share")] == pytest.approx(0.4)
    assert m[4, column("path_word_share")] == pytest.approx(sum(words[4:8]) / sum(words))
    assert m[:, column("log_sibling_blocks")] == pytest.approx(
        np.log1p([3, 3, 3, 5, 5, 5, 5, 5, 1, 1]))
    longest = int(np.argmax(words))
    assert m[:, column("longest_distance")] == pytest.approx((np.arange(10) - longest) / 10)


def test_stopword_density_uses_the_page_language() -> None:
    english = page_stoplist(tokenize(" ".join(ARTICLE)))
    assert {"the", "of", "and", "which"} <= english
    german = page_stoplist(tokenize("Der Rat hat am Dienstag beschlossen, die alte Bibliothek "
                                    "wieder aufzubauen, die seit dem Hochwasser und der Flut "
                                    "geschlossen ist und nicht mehr genutzt werden kann."))
    assert {"der", "die", "und", "nicht"} <= german
    assert "which" not in german
    page = page_features(PAGE)
    stop = page_stoplist([t for tokens in page.tokens for t in tokens])
    expected = [sum(t in stop for t in tokens) / max(len(tokens), 1) for tokens in page.tokens]
    assert page.matrix[:, column("stopword_density")] == pytest.approx(expected)
    assert page.matrix[4, column("stopword_density")] > 0.3  # an English sentence
    assert page.matrix[2, column("stopword_density")] == 0  # "Sport"


def test_hidden_elements_are_not_blocks() -> None:
    """A browser does not draw display:none, visibility:hidden or `hidden` elements (here
    a schema.org copy of the article, as news sites embed it), so they are not page text."""
    hidden = ('<div style="display: none" itemscope><div itemprop="articleBody">'
              f'{" ".join(ARTICLE)}</div></div><p hidden>Hidden teaser text</p>'
              '<div style="visibility:hidden"><p>Invisible promotion</p></div>')
    with_hidden = PAGE.replace("</body>", f"{hidden}</body>")
    texts = [block.text for block in page_features(with_hidden).blocks]
    assert texts == [block.text for block in page_features(PAGE).blocks]
    assert ALGORITHM.run(with_hidden).text.count(ARTICLE[0]) == 1


def test_empty_and_odd_pages_have_no_rows() -> None:
    for html in ("", "<html></html>", "<p></p>", "<script>var a = 1;</script>"):
        page = page_features(html)
        assert page.matrix.shape == (0, len(FEATURES))
        assert ALGORITHM.run(html).blocks == []


# -- the model file and the service ----------------------------------------------------


def test_model_file_loads_and_reproduces_its_recorded_probabilities() -> None:
    model = read_model(DEFAULT_MODEL)
    meta = model.metadata
    assert [d["name"] for d in meta["datasets"]] == list(DATASETS)
    assert meta["trained_on"] == sorted(DATASETS)
    assert meta["seed"] == 0
    lodo = meta["leave_one_dataset_out"]
    assert set(lodo["word_f1"]) == set(DATASETS)
    for name, others in lodo["trained_on"].items():
        assert sorted(others) == sorted(set(DATASETS) - {name})
    rows = np.array(meta["checks"]["rows"])
    assert rows.shape[1] == len(FEATURES)
    assert model.probabilities(rows) == pytest.approx(meta["checks"]["probabilities"],
                                                      abs=1e-12)
    assert 0 < model.cut < 1


def test_trees_agree_with_a_plain_walk_of_each_tree() -> None:
    trees = default_model().gbdt
    rows = np.array(default_model().metadata["checks"]["rows"])
    inner = np.flatnonzero(trees.feature >= 0)
    for row, node in zip(rows, inner, strict=False):  # some values on a threshold
        row[trees.feature[node]] = trees.threshold[node]
    expected = [walk_trees(trees, row) for row in rows]
    assert trees.logits(rows) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert trees.logits(rows[:0]).shape == (0,)


@pytest.mark.dataset
@pytest.mark.parametrize("name", ["scrapinghub", "cleaneval"])
def test_model_reproduces_its_recorded_page_scores(name: str, request: pytest.FixtureRequest
                                                   ) -> None:
    folder: Path = request.getfixturevalue(name)
    assert_recorded_page_scores(default_model().metadata["checks"]["page_word_f1"][name], folder,
                                lambda html: ALGORITHM.run(html).text)


def test_service_extracts_the_article() -> None:
    with serve_app(create_service_app(ALGORITHM)) as url:
        reply = httpx.post(f"{url}/extract", json={"html": PAGE}, timeout=60)
    assert reply.status_code == 200
    body = reply.json()
    kept = [block["text"] for block in body["blocks"] if block["is_content"]]
    assert set(ARTICLE) <= set(kept)
    assert not {"Home", "News", "Sport"} & set(kept)
    assert "Copyright" not in body["text"]
    assert all(0 <= block["score"] <= 1 for block in body["blocks"])
    assert [block["path"] for block in body["blocks"]][4] == "/html/body/div[2]/p[1]"


def test_options_change_the_decision() -> None:
    everything = ALGORITHM.run(PAGE, {"cut": 0.0})
    assert all(block.is_content for block in everything.blocks)
    default = ALGORITHM.run(PAGE)
    strict = ALGORITHM.run(PAGE, {"cut": 1.0})  # only the page's likeliest half remain
    assert sum(b.is_content for b in strict.blocks) <= sum(b.is_content for b in default.blocks)
    raw = ALGORITHM.run(PAGE, {"smooth": False})
    probabilities = default_model().probabilities(page_features(PAGE).matrix)
    assert [b.score for b in raw.blocks] == pytest.approx(probabilities.round(4).tolist())
    with pytest.raises(ValidationError):
        FusionOptions.model_validate({"cut": 1.5})
    with pytest.raises(ValidationError):
        FusionOptions.model_validate({"threshold": 0.5})


# -- training --------------------------------------------------------------------------


@pytest.mark.dataset
def test_training_is_deterministic(four_datasets: list[Path], tmp_path: Path) -> None:
    candidates = {"a": TreeParams(trees=3, leaves=4, min_child_samples=5),
                  "b": TreeParams(trees=2, leaves=3, min_child_samples=5)}
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    train(four_datasets, first, seed=5, candidates=candidates, limit=2, workers=1)
    train(four_datasets, second, seed=5, candidates=candidates, limit=2, workers=1)
    assert first.read_bytes() == second.read_bytes()
    model = read_model(first)
    meta = model.metadata
    assert [d["pages"] for d in meta["datasets"]] == [2, 2, 2, 2]
    assert meta["seed"] == 5
    assert model.gbdt.roots.size == (3 if meta["shipped"] == "a" else 2)
    assert set(meta["candidates"]) == {"a", "b"}
    shipped = meta["candidates"][meta["shipped"]]
    assert shipped["mean"] == max(c["mean"] for c in meta["candidates"].values())
    assert meta["leave_one_dataset_out"]["word_f1"] == shipped["word_f1"]
