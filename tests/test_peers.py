"""The peer services (trafilatura, readability, resiliparse): real pages, defaults, parity.

Parity here is a fixed sample; benchmarks/peer_parity.py runs the full datasets.
"""

from __future__ import annotations

import inspect
import statistics
from importlib.metadata import version
from pathlib import Path

import pytest
import trafilatura
from readability import Document
from resiliparse.extract.html2text import extract_plain_text

from orchestrator.scoring import bag_f1
from services.readability.extractor import ALGORITHM as READABILITY
from services.readability.extractor import ReadabilityOptions
from services.resiliparse.extractor import ALGORITHM as RESILIPARSE
from services.resiliparse.extractor import ResiliparseOptions
from services.trafilatura.direct import trafilatura_direct
from services.trafilatura.extractor import ALGORITHM as TRAFILATURA
from services.trafilatura.extractor import TrafilaturaOptions
from shared.blockmap import TextPeerOptions, block_support, text_extraction
from shared.contract import Algorithm
from shared.flatpage import flatten_html
from shared.html import parse_html, visible_text
from shared.registry import SERVICES
from shared.tokens import tokenize
from tests.helpers import LIBRARY_ARTICLE, dataset_pages

PEERS = {"trafilatura": TRAFILATURA, "readability": READABILITY, "resiliparse": RESILIPARSE}
DISTRIBUTIONS = {"trafilatura": "trafilatura", "readability": "readability-lxml",
                 "resiliparse": "resiliparse"}

NAV = "".join(f'<li><a href="/s{i}">Section {i}</a></li>' for i in range(12))
PARAGRAPHS = list(LIBRARY_ARTICLE[:4])
ARTICLE_PAGE = (
    "<html><head><title>Village library reopens</title></head><body>"
    f"<header><ul>{NAV}</ul></header><main><article><h1>Village library reopens</h1>"
    + "".join(f"<p>{p}</p>" for p in PARAGRAPHS)
    + "</article></main><footer><a href='/about'>About us</a> <a href='/jobs'>Jobs</a> "
    "<a href='/contact'>Contact</a></footer></body></html>"
)
ODD_PAGES = {
    "xml_declaration": '<?xml version="1.0" encoding="iso-8859-1"?>' + ARTICLE_PAGE,
    "control_chars": ARTICLE_PAGE.replace("library", "lib\x00rary\x0b", 3),
    "empty_body": "<html><body></body></html>",
    "no_body": "<html><head><title>t</title></head></html>",
    "fragment": "<p>just one short line</p>",
    "deep": "<div>" * 3000 + "deep text here" + "</div>" * 3000,
    "frameset": "<html><frameset><frame src='a.html'></frameset></html>",
}


def visible_blocks(html: str) -> list[str]:
    """The page's visible block texts, as bte, cetd and fusion cut them."""
    return [text for text in flatten_html(html, drop_hidden=True).block_texts()[0] if text]


def signature_defaults(function: object) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()}  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PEERS))
def test_version_is_the_installed_library(name: str) -> None:
    algorithm = PEERS[name]
    assert algorithm.version == version(DISTRIBUTIONS[name])
    assert algorithm.info().name == name


@pytest.mark.parametrize("name", sorted(PEERS))
def test_built_article_is_content_and_navigation_is_not(name: str) -> None:
    reply = PEERS[name].run(ARTICLE_PAGE)
    content = {b.text for b in reply.blocks if b.is_content}
    assert set(PARAGRAPHS) <= content
    assert not any(b.is_content for b in reply.blocks if b.text.startswith(("Section", "About")))
    assert bag_f1(reply.text, "\n".join(PARAGRAPHS)) > 0.9


@pytest.mark.dataset
@pytest.mark.parametrize("name", sorted(PEERS))
def test_real_pages_give_content_and_blocks_cover_the_page(name: str, scrapinghub: Path) -> None:
    for html, gold in dataset_pages(scrapinghub, step=45):
        reply = PEERS[name].run(html)
        assert [b.text for b in reply.blocks] == visible_blocks(html)
        assert reply.text.strip()
        assert any(b.is_content for b in reply.blocks)
        assert bag_f1(reply.text, gold) > 0.3


@pytest.mark.dataset
@pytest.mark.parametrize("name", sorted(PEERS))
def test_text_alone_is_the_same_text_without_blocks(name: str, scrapinghub: Path) -> None:
    for html, _ in dataset_pages(scrapinghub, step=60):
        full = PEERS[name].run(html)
        alone = PEERS[name].run(html, {"blocks": False})
        assert full.blocks
        assert alone.blocks == []
        assert alone.text == full.text


def test_text_peers_in_the_registry_are_the_services_with_text_peer_options() -> None:
    text_peers = {name for name, entry in SERVICES.items() if entry.text_peer}
    assert text_peers == set(PEERS)
    for name in PEERS:
        assert issubclass(PEERS[name].options_model, TextPeerOptions)


@pytest.mark.parametrize("name", sorted(PEERS))
@pytest.mark.parametrize("page", sorted(ODD_PAGES))
def test_odd_pages_never_raise(name: str, page: str) -> None:
    html = ODD_PAGES[page]
    reply = PEERS[name].run(html)
    assert [b.text for b in reply.blocks] == visible_blocks(html)
    if page in ("xml_declaration", "control_chars"):
        assert "volunteers carried" in reply.text.lower()


def test_trafilatura_defaults_are_the_library_defaults() -> None:
    library = signature_defaults(trafilatura.extract)
    ours = TrafilaturaOptions().model_dump()
    assert ours.pop("shared_parser") is False  # ours: parse as the library does
    assert ours.pop("blocks") is True  # ours: the page's blocks beside the text
    assert ours == {k: library[k] for k in ours}


def test_readability_defaults_are_the_library_defaults() -> None:
    library = signature_defaults(Document.__init__)
    ours = ReadabilityOptions().model_dump()
    assert ours.pop("blocks") is True  # ours: the page's blocks beside the text
    assert ours == {k: library[k] for k in ours}


def test_resiliparse_defaults_are_the_library_defaults_but_main_content() -> None:
    library = signature_defaults(extract_plain_text)
    ours = ResiliparseOptions().model_dump()
    # The one documented difference: this service is the main-content extractor.
    assert library["main_content"] is False
    assert ours.pop("main_content") is True
    assert ours.pop("blocks") is True  # ours: the page's blocks beside the text
    # The compiled function reports preserve_formatting's default as `...`: check it by use.
    assert extract_plain_text(ARTICLE_PAGE) == extract_plain_text(
        ARTICLE_PAGE, preserve_formatting=ours.pop("preserve_formatting"))
    assert ours == {k: library[k] for k in ours}


def test_options_reach_the_libraries() -> None:
    html = ARTICLE_PAGE
    precise = TRAFILATURA.run(html, {"favor_precision": True, "include_comments": False}).text
    assert precise == trafilatura.extract(html, favor_precision=True, include_comments=False)
    pruned = TRAFILATURA.run(html, {"prune_xpath": ["//p[2]"]}).text
    assert "Volunteers" not in pruned
    assert "librarian" in pruned
    whole = RESILIPARSE.run(html, {"main_content": False}).text
    assert "Section 3" in whole
    assert "Section 3" not in RESILIPARSE.run(html).text
    skipped = RESILIPARSE.run(html, {"skip_elements": ["article p"]}).text
    assert "Volunteers" not in skipped
    # Two equal candidates: readability takes the first, unless its class is negative.
    two = ("<html><body><div class='alpha'><p>" + "</p><p>".join(PARAGRAPHS[:2])
           + "</p></div><div class='beta'><p>" + "</p><p>".join(PARAGRAPHS[2:])
           + "</p></div></body></html>")
    assert READABILITY.run(two).text.startswith("The village library")
    demoted = READABILITY.run(two, {"negative_keywords": ["alpha"]}).text
    assert demoted.startswith("The librarian said")
    direct = Document(two, negative_keywords=["alpha"]).summary()
    assert demoted == visible_text(parse_html(direct))


@pytest.mark.dataset
def test_trafilatura_parity_with_the_library_called_directly(
    scrapinghub: Path, cleaneval: Path
) -> None:
    for root, step in ((scrapinghub, 20), (cleaneval, 80)):
        pages = dataset_pages(root, step=step)
        ours = [bag_f1(TRAFILATURA.run(html).text, gold) for html, gold in pages]
        direct = [bag_f1(trafilatura_direct(html), gold) for html, gold in pages]
        print(f"{root.name}: {len(pages)} pages, ours {statistics.fmean(ours):.4f}, "
              f"direct {statistics.fmean(direct):.4f}")
        assert abs(statistics.fmean(ours) - statistics.fmean(direct)) <= 0.01


def test_block_support_is_the_aligned_share_of_each_block() -> None:
    texts = ["alpha beta gamma delta", "menu home contact", "epsilon zeta", "!!"]
    support = block_support(texts, tokenize("alpha beta gamma epsilon zeta eta"))
    assert support == [0.75, 0.0, 1.0, 0.0]
    page = ("<body><p>alpha beta gamma delta</p><p>menu home contact</p>"
            "<p>alpha beta</p><p>gamma</p><p hidden>alpha beta gamma delta</p></body>")
    labelled = text_extraction(page, "alpha beta gamma delta gamma").blocks
    # The one LCS aligns the repeated words once, where their order fits.
    assert [b.is_content for b in labelled] == [True, False, False, True]  # hidden: no block
    assert labelled[0].score == 1.0
    assert [b.path for b in labelled] == [f"/html/body/p[{i}]" for i in range(1, 5)]


def test_peers_are_algorithms() -> None:
    for algorithm in PEERS.values():
        assert isinstance(algorithm, Algorithm)
        assert algorithm.info().options_schema["additionalProperties"] is False


@pytest.mark.parametrize(("name", "options"), [
    ("trafilatura", {"prune_xpath": ["//p[["]}),
    ("resiliparse", {"skip_elements": ["nav", "p[["]}),
])
def test_an_expression_the_library_cannot_parse_is_refused(name: str,
                                                           options: dict[str, object]) -> None:
    """A malformed XPath or CSS selector is the caller's error (invalid options), not a
    page with nothing in it; well-formed ones are applied."""
    import json

    from shared.answer import answer_page
    from shared.registry import SERVICES

    algorithm = SERVICES[name].algorithm()
    page = "<html><body><nav>Menu</nav><p>" + "Plain words of the article. " * 20 + "</p>"
    refused = answer_page(algorithm, json.dumps({"html": page, "options": options}).encode(),
                          {}, "application/json")
    assert str(refused.get("error", "")).startswith("invalid_options"), refused
    fine = {"prune_xpath": ["//nav"]} if name == "trafilatura" else {"skip_elements": ["nav"]}
    kept = answer_page(algorithm, json.dumps({"html": page, "options": fine}).encode(), {},
                       "application/json")
    assert "Plain words of the article." in str(kept["text"])
    assert "Menu" not in str(kept["text"])
