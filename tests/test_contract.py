"""The /extract contract, checked on every service of the registry over real HTTP.

Each service runs under uvicorn on a free port with its real worker processes;
a service added to shared/registry.py gets every test here without new code.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import lxml.html
import orjson
import pytest
from jsonschema import Draft202012Validator
from lxml import etree
from pydantic import ValidationError
from selectolax.lexbor import LexborHTMLParser

from shared.answer import ServiceError, answer_page, request_options
from shared.contract import BLOCK_PATH_PATTERN, ExtractReply, ServiceInfo
from shared.html import xpath_step
from shared.registry import SERVICES
from shared.service import create_service_app
from shared.settings import ServiceSettings
from shared.tokens import tokenize
from tests.helpers import assert_error
from tests.servers import serve_app, serve_service

TIME_LIMIT_S = 5.0
ARTICLE = """<!DOCTYPE html>
<html><head><title>Harbour bridge reopens after repairs</title></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/news">News</a></li>
<li><a href="/sport">Sport</a></li><li><a href="/weather">Weather</a></li></ul></nav>
<article>
<h1>Harbour bridge reopens after repairs</h1>
<p>The old harbour bridge opened again to traffic on Monday morning after eight months of
repairs, the city council said. Engineers replaced the corroded steel cables that had
worried inspectors since the winter storms of the previous year.</p>
<p>Commuters who had been taking the ferry or the long road around the bay welcomed the news.
"It saves me almost an hour every day," said one driver who crosses the bridge to reach the
hospital where she works as a nurse. The council expects traffic to return to normal within
a week.</p>
<p>The repairs cost less than planned because the weather was mild during the summer and the
crews could work at night without interruption, according to the chief engineer of the
project, who thanked the residents for their patience during the closure.</p>
</article>
<footer><p>Copyright 2026 City News. <a href="/privacy">Privacy</a> <a href="/terms">Terms</a></p>
</footer></body></html>"""


# The article inside a form and a table without <tbody>: libxml2 keeps the table as it
# is written, HTML5 tree construction adds the <tbody>, so a path names an element of
# one parse only; and jusText's cleaning drops the <form> from its own copy of the page.
ARTICLE_IN_TABLE = ARTICLE.replace("<article>", '<form action="/comment"><table><tr><td>'
                                   ).replace("</article>", "</td></tr></table></form>")
# The same with a <select> of more options than lexbor parses in linear time: the html5
# services parse this page with lxml instead, and their reply says so.
MANY_OPTIONS = ARTICLE_IN_TABLE.replace(
    "</form>", "<select>" + "".join(f"<option>{n}</option>" for n in range(1500))
    + "</select></form>")


def example_options(name: str) -> dict[str, Any]:
    """Options a service needs for a successful request (rss needs the page's feed)."""
    if name == "rss":
        item_text = (
            "The old harbour bridge opened again to traffic on Monday morning after eight "
            "months of repairs, the city council said.")
        feed = (
            '<?xml version="1.0"?><rss version="2.0"><channel><title>City News</title>'
            "<item><title>Harbour bridge reopens after repairs</title>"
            "<link>https://news.example/bridge</link>"
            f"<description>{item_text}</description></item></channel></rss>"
        )
        return {"feed": feed}
    return {}


def page_url(name: str) -> str | None:
    return "https://news.example/bridge" if name == "rss" else None


@pytest.fixture(scope="module", params=sorted(SERVICES))
def service(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(name, base URL) of a real running service with a short time limit."""
    name: str = request.param
    settings = ServiceSettings(time_limit_s=TIME_LIMIT_S, max_body_bytes=10 * 1024 * 1024)
    with serve_service(name, settings) as (url, _):
        yield name, url


def assert_healthy(url: str) -> None:
    reply = httpx.get(f"{url}/health", timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"status": "ok"}


def html5_tree(html: str) -> etree._Element:
    """The page's HTML5 tree (lexbor's, as a browser builds it) copied into lxml, so that
    paths into it resolve with lxml's XPath. A tag name lxml refuses becomes one no path
    can name."""
    source = LexborHTMLParser(html).root
    assert source is not None
    root = etree.Element(source.tag or "html")
    stack = [(source, root)]
    while stack:
        node, element = stack.pop()
        child = node.child
        while child is not None:
            tag = child.tag or ""
            if tag and tag[0] not in "-_!":  # text, comments and doctypes are no elements
                try:
                    copy = etree.SubElement(element, tag)
                except ValueError:
                    copy = etree.SubElement(element, "invalid-name")
                stack.append((child, copy))
            child = child.next
    return root


def parsed_page(html: str, tree: str) -> etree._Element:
    """The page as parsed by the parse /info's `path_tree` names."""
    if tree == "html5":
        return html5_tree(html)
    return lxml.html.document_fromstring(html.encode("utf-8"),
                                        parser=lxml.html.HTMLParser(encoding="utf-8"))


def reply_tree(info: ServiceInfo, reply: ExtractReply) -> str | None:
    """The parse a reply's block paths name: the reply's `details.path_tree` where it
    gives one, else /info's."""
    tree = (reply.details or {}).get("path_tree", info.path_tree)
    assert tree in (None, "libxml2", "html5"), tree
    return tree


def assert_block_paths(info: ServiceInfo, html: str, reply: ExtractReply) -> None:
    """Every block path has the contract's form and names one element of the page as
    parsed the way the reply or /info says; a service without a path tree gives no paths."""
    paths = [b.path for b in reply.blocks if b.path is not None]
    tree = reply_tree(info, reply)
    if tree is None:
        assert not paths, f"{info.name}: blocks carry paths but /info names no path tree"
        return
    assert paths, f"{info.name}: /info names a path tree but no block has a path"
    form = re.compile(BLOCK_PATH_PATTERN)
    document = etree.ElementTree(parsed_page(html, tree))
    for path in set(paths):
        assert form.fullmatch(path), f"{info.name}: {path!r} is not in the contract's form"
        found = document.xpath(path)
        assert isinstance(found, list)
        assert len(found) == 1, (
            f"{info.name}: {path!r} names {len(found)} elements of the {tree} "
            "parse, not one")
        # lxml names the element exactly so: no index that is not needed, none missing
        assert document.getpath(found[0]) == path


def service_info(url: str) -> ServiceInfo:
    return ServiceInfo.model_validate(httpx.get(f"{url}/info").json())


def test_info(service: tuple[str, str]) -> None:
    name, url = service
    info = service_info(url)
    assert info.name == name
    assert info.version
    assert info.description
    assert info.reference
    assert info.options_schema["type"] == "object"
    assert "properties" in info.options_schema
    assert len(info.score) > 20, "/info says what a block's score is"
    low, high = info.score_range
    assert high is None or low < high


@pytest.mark.parametrize("html", [ARTICLE_IN_TABLE, MANY_OPTIONS],
                         ids=["article_in_table", "many_options"])
def test_block_paths_name_elements_of_the_parse_stated(service: tuple[str, str],
                                                       html: str) -> None:
    """Paths name elements of the parse /info states, or of the one the reply states
    instead: MANY_OPTIONS the html5 services parse with lxml, and say so."""
    name, url = service
    reply = httpx.post(f"{url}/extract", json={"html": html, "url": page_url(name),
                                               "options": example_options(name)}, timeout=60)
    assert reply.status_code == 200, reply.text[:500]
    body = ExtractReply.model_validate(reply.json())
    info = service_info(url)
    tree = reply_tree(info, body)
    assert tree == ("libxml2" if html is MANY_OPTIONS and info.path_tree else info.path_tree)
    assert_block_paths(info, html, body)
    if tree is not None:
        paragraph = next(b for b in body.blocks if b.text.startswith("Commuters who"))
        inside = "/html/body/form/table/" + ("tbody/" if tree == "html5" else "")
        assert paragraph.path is not None
        assert paragraph.path.startswith(inside + "tr/td")


def test_extract_raw_html(service: tuple[str, str]) -> None:
    name, url = service
    params = {"url": page_url(name)} if page_url(name) else {}
    options = example_options(name)
    if options:  # options that do not fit a query string go in a JSON body instead
        reply = httpx.post(f"{url}/extract", json={"html": ARTICLE, "url": page_url(name),
                                                   "options": options}, timeout=60)
    else:
        reply = httpx.post(f"{url}/extract", content=ARTICLE.encode("utf-8"), params=params,
                           headers={"content-type": "text/html; charset=utf-8"}, timeout=60)
    assert reply.status_code == 200, reply.text[:500]
    body = ExtractReply.model_validate(reply.json())
    assert body.algorithm == name
    assert body.elapsed_ms >= 0
    assert body.blocks, "blocks must cover the page's visible text"
    block_words = set(tokenize(" ".join(b.text for b in body.blocks)))
    assert {"harbour", "bridge", "commuters", "engineer"} <= block_words
    assert "corroded" in tokenize(body.text), "the article body is the page's main content"


def test_extract_json_body_real_page(service: tuple[str, str], scrapinghub: Any) -> None:
    name, url = service
    from shared.decoding import decode_html

    path = sorted((scrapinghub / "html").glob("*.html"))[3]
    html = decode_html(path.read_bytes())
    reply = httpx.post(f"{url}/extract", json={"html": html, "url": page_url(name),
                                               "options": example_options(name)},
                       timeout=60)
    if name == "rss":  # a feed built for another page: no matching item is a clear 422
        assert_error(reply, 422)
        return
    assert reply.status_code == 200, reply.text[:500]
    body = ExtractReply.model_validate(reply.json())
    assert len(body.blocks) > 5
    assert len(tokenize(body.text)) > 50
    assert_block_paths(service_info(url), html, body)


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("random_bytes", 400),
        ("empty_body", 400),
        ("too_large", 413),
        ("malformed_json", 400),
        ("unknown_option", 422),
        ("wrong_option_type", 422),
        ("image_png", 415),
        ("missing_html", 422),
    ],
)
def test_bad_input_gets_json_error_and_service_stays_healthy(
    service: tuple[str, str], case: str, status: int
) -> None:
    _name, url = service
    html_headers = {"content-type": "text/html"}
    if case == "random_bytes":
        data = random.Random(7).randbytes(2000)
        reply = httpx.post(f"{url}/extract", content=data, headers=html_headers)
    elif case == "empty_body":
        reply = httpx.post(f"{url}/extract", content=b"", headers=html_headers)
    elif case == "too_large":
        reply = httpx.post(f"{url}/extract", content=b"<p>" + b"a" * (20 * 1024 * 1024),
                           headers=html_headers, timeout=60)
    elif case == "malformed_json":
        reply = httpx.post(f"{url}/extract", content=b'{"html": "<p>x</p>",',
                           headers={"content-type": "application/json"})
    elif case == "unknown_option":
        reply = httpx.post(f"{url}/extract",
                           json={"html": ARTICLE, "options": {"no_such_option": 1}})
    elif case == "wrong_option_type":
        schema = httpx.get(f"{url}/info").json()["options_schema"]
        option = sorted(schema["properties"])[0]
        reply = httpx.post(f"{url}/extract",
                           json={"html": ARTICLE, "options": {option: {"not": "a scalar"}}})
    elif case == "image_png":
        reply = httpx.post(f"{url}/extract", content=b"\x89PNG\r\n\x1a\n" + b"\0" * 64,
                           headers={"content-type": "image/png"})
    else:
        reply = httpx.post(f"{url}/extract", json={"url": "https://example.org/"})
    assert_error(reply, status)
    assert_healthy(url)


@pytest.mark.parametrize("page", ["nested_divs", "many_breaks"])
def test_slow_page_answers_within_the_time_limit(service: tuple[str, str], page: str) -> None:
    name, url = service
    if page == "nested_divs":
        html = "<html><body>" + "<div>" * 200_000 + "deep text" + "</div>" * 200_000
    else:
        html = "<html><body><p>" + "line of text<br>" * 100_000 + "</p></body></html>"
    started = time.monotonic()
    reply = httpx.post(f"{url}/extract", content=html.encode(),
                       headers={"content-type": "text/html"}, timeout=TIME_LIMIT_S + 30)
    waited = time.monotonic() - started
    if reply.status_code == 504:
        assert_error(reply, 504)
    else:
        assert reply.status_code in (200, 422), reply.text[:300]
    # The reply came within the limit plus transfer slack, not after the page finished.
    assert waited < TIME_LIMIT_S + 15
    ok = httpx.post(f"{url}/extract", json={"html": ARTICLE, "url": page_url(name),
                                            "options": example_options(name)},
                    timeout=120)
    assert ok.status_code == 200, ok.text[:300]


def test_unknown_route_is_json(service: tuple[str, str]) -> None:
    _, url = service
    assert_error(httpx.get(f"{url}/no-such-route"), 404)
    assert_error(httpx.get(f"{url}/extract"), 405)
    assert_error(httpx.get(f"{url}/info/"), 404)  # no redirect to /info: no such path


def test_bearer_token_when_configured() -> None:
    algorithm = SERVICES["justext"].algorithm()
    app = create_service_app(algorithm, ServiceSettings(token="s3cret"))
    with serve_app(app) as url:
        assert_error(httpx.post(f"{url}/extract", json={"html": ARTICLE}), 401)
        assert_error(httpx.get(f"{url}/info"), 401)
        good = httpx.post(f"{url}/extract", json={"html": ARTICLE},
                          headers={"authorization": "Bearer s3cret"})
        assert good.status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200  # probes need no token


def test_time_limit_kills_the_worker_and_the_service_recovers() -> None:
    """A page slower than the limit gets 504 and the next request is served."""
    algorithm = SERVICES["justext"].algorithm()
    app = create_service_app(algorithm, ServiceSettings(time_limit_s=0.05))
    html = "<html><body>" + "<p>many words in a paragraph of text</p>" * 20_000 + "</body></html>"
    with serve_app(app) as url:
        pids_before = {w.process.pid for w in app.state.pool._workers}
        slow = httpx.post(f"{url}/extract", content=html.encode(),
                          headers={"content-type": "text/html"}, timeout=60)
        assert_error(slow, 504)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            small = httpx.post(f"{url}/extract", json={"html": "<p>short page text</p>"})
            if small.status_code == 200:
                break
            time.sleep(0.2)
        assert small.status_code == 200, small.text
        pids_after = {w.process.pid for w in app.state.pool._workers}
        assert pids_after
        assert not pids_after & pids_before, "the timed-out worker was replaced"


def _options_of_types(name: str, types: set[type]) -> list[str]:
    """The options of service `name` that take a value of one of `types`."""
    fields = SERVICES[name].algorithm().options_model.model_fields
    return [field for field, info in fields.items()
            if types & (set(get_args(info.annotation)) or {info.annotation})]


@pytest.mark.parametrize("name", [name for name in sorted(SERVICES)
                                  if _options_of_types(name, {int, float})])
def test_numeric_options_refuse_booleans_and_take_query_strings(name: str) -> None:
    """JSON true is no number (pydantic's lax mode would read it as 1), while a query
    string's digits still are one."""
    options_model = SERVICES[name].algorithm().options_model
    for field in _options_of_types(name, {int, float}):
        with pytest.raises(ValidationError, match="not a boolean"):
            options_model.model_validate({field: True})
        default = options_model.model_fields[field].default
        if default is not None and not isinstance(default, bool):
            parsed = options_model.model_validate({field: str(default)})
            assert getattr(parsed, field) == default


def test_replies_match_the_openapi_document(service: tuple[str, str]) -> None:
    """What a client generated from /openapi.json reads: the replies of both body forms
    (the HTML one with a query parameter the document lists) and the error replies
    validate against the schemas the document gives for their status."""
    name, url = service
    document = httpx.get(f"{url}/openapi.json").json()
    operation = document["paths"]["/extract"]["post"]

    def check(reply: httpx.Response) -> None:
        replies = operation["responses"]
        described = replies.get(str(reply.status_code), replies.get("default"))
        assert described is not None, f"{name}: {reply.status_code} is not documented"
        schema = described["content"]["application/json"]["schema"]
        validator = Draft202012Validator({**schema, "components": document["components"]})
        problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                    for e in validator.iter_errors(reply.json())]
        assert not problems, (name, reply.status_code, problems[:3])

    options = example_options(name)
    json_reply = httpx.post(f"{url}/extract", json={"html": ARTICLE, "url": page_url(name),
                                                    "options": options}, timeout=60)
    assert json_reply.status_code == 200, json_reply.text[:300]
    check(json_reply)
    query = {"url": page_url(name) or "https://news.example/", **options}
    for parameter in operation["parameters"]:  # the first option with a default, as text
        default = parameter["schema"].get("default")
        if default is not None and parameter["name"] not in query:
            query[parameter["name"]] = str(default).lower() if isinstance(default, bool) \
                else str(default)
            break
    html_reply = httpx.post(f"{url}/extract", content=ARTICLE.encode(), params=query,
                            headers={"content-type": "text/html"}, timeout=60)
    assert html_reply.status_code == 200, html_reply.text[:300]
    check(html_reply)
    html_headers = {"content-type": "text/html"}
    for reply in (
        httpx.post(f"{url}/extract", content=b'{"html": ', headers={
            "content-type": "application/json"}),
        httpx.post(f"{url}/extract", content=b"", headers=html_headers),
        httpx.get(f"{url}/extract"),
        httpx.post(f"{url}/extract", content=b"<p>x</p>", headers={"content-type": "image/png"}),
        httpx.post(f"{url}/extract", json={"html": ARTICLE, "options": {"no_such_option": 1}}),
        httpx.post(f"{url}/extract/", json={"html": ARTICLE}),
    ):
        assert reply.status_code >= 400
        check(reply)


def _json_candidates(schema: dict[str, Any]) -> list[Any]:
    """Values of the JSON types an option's schema names, at its edges and past them, and
    the loose forms of them that pydantic's lax mode would read: numbers and booleans
    as strings, 0 and 1 for booleans, 7.5 for an integer, a number for a string."""
    values: list[Any] = [None]
    for kind in schema.get("anyOf", [schema]):
        low = kind.get("minimum", kind.get("exclusiveMinimum"))
        high = kind.get("maximum")
        if kind.get("type") == "integer":
            values += [7, 7.0, 7.5, "7", *(v for v in (low, high) if v is not None),
                       *([low - 1] if low is not None else []),
                       *([high + 1] if high is not None else [])]
        elif kind.get("type") == "number":
            values += [0.5, "0.5", *(v for v in (low, high) if v is not None),
                       *([low - 0.001] if low is not None else []),
                       *([high + 0.001] if high is not None else [])]
        elif kind.get("type") == "boolean":
            values += [True, False, "true", 1, 0]
        elif kind.get("type") == "string":
            values += [*kind.get("enum", []), "", "x", "en", "EN", "English", 7]
        elif kind.get("type") == "array":
            items = kind.get("items", {}).get("enum", [])
            values += [[], ["x"], [""], *([item] for item in items)]
    return values


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_the_options_schema_takes_what_the_service_takes(name: str) -> None:
    """Each option alone in a JSON body, at and past its edges in the JSON types its
    schema names and in loose forms of them: the service takes a value exactly where
    /info's schema does, so a client that checks its options against the schema learns
    of a refusal before sending them."""
    model = SERVICES[name].algorithm().options_model
    schema = model.model_json_schema()
    validator = Draft202012Validator(schema)
    disagreements = []
    for option, option_schema in schema["properties"].items():
        for value in _json_candidates(option_schema):
            try:
                request_options(model, {option: value}, json_body=True)
                taken = True
            except ServiceError:
                taken = False
            if taken != validator.is_valid({option: value}):
                disagreements.append(f"{option}={value!r}: the service "
                                     f"{'takes' if taken else 'refuses'} it")
    assert not disagreements, disagreements


@pytest.mark.parametrize("name", [name for name in sorted(SERVICES)
                                  if _options_of_types(name, {float})])
def test_numeric_options_refuse_infinity_and_nan(name: str) -> None:
    """A query string can spell inf and nan, which no JSON number is: an option refuses
    them, naming itself, rather than taking a number its schema cannot state."""
    options_model = SERVICES[name].algorithm().options_model
    for field in _options_of_types(name, {float}):
        for text in ("inf", "-inf", "nan"):
            with pytest.raises(ValidationError) as refused:
                options_model.model_validate({field: text})
            assert refused.value.errors()[0]["loc"] == (field,), (field, text)


def test_a_conflict_of_options_names_the_option() -> None:
    """rss takes a feed or a feed's URL: both is refused naming `feed_url`, as any other
    refused option is named, not the body."""
    body = orjson.dumps({"html": ARTICLE, "options": {"feed": "<rss/>",
                                                      "feed_url": "https://news.example/rss"}})
    reply = answer_page(SERVICES["rss"].algorithm(), body, {}, "application/json")
    assert reply["error"].startswith("invalid_options: feed_url: "), reply


def test_a_language_trafilatura_never_matches_is_refused() -> None:
    """trafilatura compares `target_language` with the two-letter codes of the page's
    declared language: anything else would silently empty every page that declares one."""
    algorithm = SERVICES["trafilatura"].algorithm()
    for code in ("EN", "english", "en-US", ""):
        reply = answer_page(algorithm, ARTICLE.encode(), {"target_language": code})
        assert reply.get("error", "").startswith("invalid_options: target_language: "), code
    assert "error" not in answer_page(algorithm, ARTICLE.encode(), {"target_language": "en"})


PREFIXED_TAGS = ("<html><body><fb:like><div>the first box of text</div></fb:like><fb:like>"
                 "<div>the second box of text</div></fb:like><o:p><p>a paragraph of text</p>"
                 "</o:p></body></html>")


def test_the_block_path_pattern_takes_steps_matched_by_name() -> None:
    """A tag no XPath name test can spell is matched by name() (docs/architecture.md):
    the contract's path pattern takes such steps, in each quoting xpath_step writes."""
    for name in ("bte", "justext"):  # an html5 and a libxml2 service
        paths = [b.path for b in SERVICES[name].algorithm().run(PREFIXED_TAGS).blocks
                 if b.path is not None]
        assert any("name()" in path for path in paths), (name, paths)
        for path in paths:
            assert re.fullmatch(BLOCK_PATH_PATTERN, path), (name, path)
    for tag in ("fb:like", "a'b", "a'b\"c"):
        assert re.fullmatch(BLOCK_PATH_PATTERN, f"/html/body{xpath_step(tag, 2)}/p"), tag
