"""Runs over HTTP against fake services (real uvicorn servers on free ports): a good one,
one failing with 500 before it answers, one down, one slow, one too slow for the time
limit, one refusing pages (422)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.models import PageResult
from orchestrator.runner import (
    EmbeddedExtractor,
    Outcome,
    RunSpec,
    _encode_json,
    _request_body,
    create_run,
    execute_run,
    folder_source,
)
from orchestrator.store import Store
from orchestrator.testsets import open_dataset_dir
from services.rss.inputs import NO_FEEDS, NO_PAGE_FEED
from shared.html import parse_html, text_blocks
from tests.helpers import independent_bag_f1
from tests.servers import free_port, serve_app

SAMPLE = Path(__file__).resolve().parent.parent / "orchestrator" / "sample"


class FakeService:
    """An /extract service whose behaviour the test chooses; it records what it saw."""

    def __init__(self, name: str, fail_first: int = 0, status: int = 200,
                 delay: float = 0.0) -> None:
        self.name, self.fail_first, self.status, self.delay = name, fail_first, status, delay
        self.requests: list[dict[str, Any]] = []
        self.attempts: Counter[str] = Counter()
        self.in_flight = self.max_in_flight = 0
        self.app = FastAPI()
        self.app.get("/health")(self.health)
        self.app.post("/extract")(self.extract)

    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    async def extract(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        key = body["html"]
        self.attempts[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if self.attempts[key] <= self.fail_first:
            return JSONResponse({"error": "busy", "detail": "try again"}, 503)
        if self.status != 200:
            return JSONResponse({"error": "unprocessable_page", "detail": "no thanks"},
                                self.status)
        # Keep the paragraphs and headings: a plausible, imperfect extractor.
        found = text_blocks(parse_html(body["html"]))
        kept = [b.element.tag in ("p", "h1", "h2", "li") for b in found]
        blocks = [{"text": b.text, "is_content": k, "score": None, "path": b.path}
                  for b, k in zip(found, kept, strict=True)]
        text = "\n".join(b.text for b, k in zip(found, kept, strict=True) if k)
        return JSONResponse({"algorithm": self.name, "version": "0", "text": text,
                             "blocks": blocks, "elapsed_ms": 1.0})


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, tuple[FakeService, str]]]:
    services = {
        "justext": FakeService("justext"),
        "bte": FakeService("bte", fail_first=2),
        "density": FakeService("density", delay=0.15),
        "boilerpipe": FakeService("boilerpipe", status=422),
        "rss": FakeService("rss"),
        "readability": FakeService("readability", delay=2.0),
    }
    urls: dict[str, tuple[FakeService, str]] = {}
    servers = [serve_app(service.app) for service in services.values()]
    try:
        for name, server in zip(services, servers, strict=True):
            urls[name] = (services[name], server.__enter__())
        yield urls
    finally:
        for server in servers:
            server.__exit__(None, None, None)


def _run(tmp_path: Path, fakes: dict[str, tuple[FakeService, str]], services: list[str],
         dataset: Path = SAMPLE, **settings: Any) -> tuple[Store, str, list[PageResult]]:
    urls = {name: url for name, (_, url) in fakes.items()}
    urls["cetd"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    spec = RunSpec(datasets=[], services=services, urls=urls, backoff_s=0.01,
                   output_folder=str(tmp_path / "out"), **settings)
    store = Store(tmp_path / "store.sqlite")
    feeds = dataset / "feeds"
    run_id = create_run(store, spec, [folder_source("sample", dataset / "html",
                                                    dataset / "content",
                                                    feeds if feeds.is_dir() else None)])
    results = asyncio.run(execute_run(store, run_id))
    return store, run_id, results


def test_a_run_survives_failing_services_and_names_their_errors(
        tmp_path: Path, fakes: dict[str, tuple[FakeService, str]]) -> None:
    services = ["justext", "bte", "cetd", "boilerpipe", "density"]
    sys.setswitchinterval(0.005)  # the interpreter's default, whatever ran before
    store, run_id, results = _run(tmp_path, fakes, services, concurrency=2, retries=3)
    pages = len(open_dataset_dir(SAMPLE).ids)
    assert len(results) == pages * len(services)
    by_service: dict[str, list[PageResult]] = {}
    for result in results:
        by_service.setdefault(result.service, []).append(result)
    # good and retried-then-good services: every page ok and scored
    for name in ("justext", "bte", "density"):
        assert {r.status for r in by_service[name]} == {"ok"}, name
        assert all(r.scores is not None and r.scores.word.tp > 0 for r in by_service[name])
    bte = fakes["bte"][0]
    assert set(bte.attempts.values()) == {3}  # two 503s, then the answer
    # the service that is down: errors naming the reason, scored as empty output
    for result in by_service["cetd"]:
        assert result.status == "error"
        assert result.error is not None
        assert "cannot reach" in result.error
        assert "ClientConnectorError" in result.error
        assert result.scores is not None
        assert result.scores.word.tp == 0
        assert result.scores.word.fn > 0
    # 4xx is not retried, and its reason is kept
    boilerpipe = fakes["boilerpipe"][0]
    assert set(boilerpipe.attempts.values()) == {1}
    assert all(r.error == "HTTP 422: unprocessable_page: no thanks"
               for r in by_service["boilerpipe"])
    # concurrency per service is bounded, and reached
    assert fakes["density"][0].max_in_flight == 2
    # the switch interval the run lowered is the interpreter's again
    assert sys.getswitchinterval() == pytest.approx(0.005)
    info = store.run(run_id)
    assert info is not None
    assert info.status == "finished"
    assert info.counts == {"ok": 3 * pages, "error": 2 * pages, "skipped": 0,
                           "done": 5 * pages, "total": 5 * pages}
    out = tmp_path / "out" / run_id
    assert {p.name for p in out.iterdir()} >= {"results.json", "pages.csv", "summary.md",
                                               "report.html"}


def test_a_service_past_the_time_limit_is_not_retried(
        tmp_path: Path, fakes: dict[str, tuple[FakeService, str]]) -> None:
    slow = fakes["readability"][0]
    slow.attempts.clear()
    _, _, results = _run(tmp_path, fakes, ["readability"], timeout_s=0.3, retries=2)
    assert len(results) == len(open_dataset_dir(SAMPLE).ids)
    assert {r.error for r in results} == {"no reply from readability within 0.3 s"}
    assert all(r.status == "error" and r.scores is not None for r in results)
    assert set(slow.attempts.values()) == {1}


def test_rss_gets_the_feed_or_is_skipped(tmp_path: Path,
                                         fakes: dict[str, tuple[FakeService, str]]) -> None:
    rss = fakes["rss"][0]
    rss.requests.clear()
    _, _, results = _run(tmp_path / "a", fakes, ["rss"])
    with_feed = {"news-harbour-ferry", "library-opening-hours"}
    assert {r.page_id for r in results if r.status == "ok"} == with_feed
    assert {r.error for r in results if r.status == "skipped"} == {NO_PAGE_FEED}
    feeds = sorted(request["options"]["feed"][:5] for request in rss.requests)
    assert feeds == ["<?xml", "<?xml"]
    # a dataset without feeds/: every rss page skipped with the reason
    plain = tmp_path / "plain"
    for folder in ("html", "content"):
        (plain / folder).mkdir(parents=True)
        for file in sorted((SAMPLE / folder).iterdir())[:3]:
            (plain / folder / file.name).write_bytes(file.read_bytes())
    _, _, results = _run(tmp_path / "b", fakes, ["rss"], dataset=plain)
    assert [r.status for r in results] == ["skipped"] * 3
    assert {r.error for r in results} == {NO_FEEDS}


def test_resume_skips_finished_pages(tmp_path: Path,
                                     fakes: dict[str, tuple[FakeService, str]]) -> None:
    justext = fakes["justext"][0]
    store, run_id, results = _run(tmp_path, fakes, ["justext"])
    kept = results[:5]
    with store._transaction() as db:  # as if the run had been killed after five pages
        db.execute("DELETE FROM page_results WHERE run_id = ? AND page_id NOT IN "
                   f"({','.join('?' for _ in kept)})", (run_id, *[r.page_id for r in kept]))
    store.set_status(run_id, "running")
    justext.requests.clear()
    resumed = asyncio.run(execute_run(store, run_id))
    assert len(resumed) == len(results)
    assert len(justext.requests) == len(results) - 5  # the finished five were not redone


def test_word_f1_matches_an_independent_bag_of_words_computation(
        tmp_path: Path, fakes: dict[str, tuple[FakeService, str]]) -> None:
    _, _, results = _run(tmp_path, fakes, ["justext"])
    dataset = open_dataset_dir(SAMPLE)
    checked = 0
    for result in results:
        assert result.scores is not None
        expected = independent_bag_f1(result.text, dataset.page(result.page_id).gold)
        assert result.scores.word_bag.f1 == pytest.approx(expected, abs=0.001), result.page_id
        checked += 1
    assert checked == len(dataset.ids)
    assert 0 < min(r.scores.word_bag.f1 for r in results if r.scores) < 1


def test_two_settings_of_one_service_are_two_rows_sharing_its_lanes(
        tmp_path: Path, fakes: dict[str, tuple[FakeService, str]]) -> None:
    """`density` and `density@b` call the one service, each row with its own options;
    the two rows share the service's requests in flight (its concurrency)."""
    density = fakes["density"][0]
    density.requests.clear()
    density.max_in_flight = 0
    _, _, results = _run(tmp_path, fakes, ["density", "density@b"], concurrency=2,
                         options={"density@b": {"threshold": "mean"}})
    pages = len(open_dataset_dir(SAMPLE).ids)
    assert Counter(r.service for r in results if r.status == "ok") == {
        "density": pages, "density@b": pages}
    sent = Counter(json.dumps(request["options"]) for request in density.requests)
    assert sent == {"{}": pages, '{"threshold": "mean"}': pages}
    assert density.max_in_flight == 2


@pytest.mark.parametrize("html", [
    '<p class="x">Quotes " and \\ backslashes, ünïcode, 中文</p>',
    "<p>a lone surrogate \ud800 only the stdlib encoder takes</p>",
])
def test_request_body_is_the_json_of_page_and_options(html: str) -> None:
    """The page part is encoded once and spliced in: the body must still be exactly
    the JSON object the contract describes, for every service's options."""
    for options in ({}, {"threshold": "fixed", "min_inside": 0.25, "feed": "<rss>\"</rss>"}):
        body = json.loads(_request_body(_encode_json(html), options))
        assert body == {"html": html, "url": None, "options": options}


def test_in_process_backend_reports_refusals_as_the_services_do() -> None:
    """The embedded backend sends the workers the JSON body the HTTP backend sends: a
    page comes back with text and blocks, bad options as the contract's error."""
    spec = RunSpec(datasets=[], services=["bte"], backend="embedded", workers=1)

    async def go() -> tuple[Outcome, Outcome]:
        extractor = EmbeddedExtractor(spec)
        await extractor.start()
        try:
            html = "<html><body><p>" + "Words of a paragraph. " * 40 + "</p></body></html>"
            return (await extractor.extract("bte", html, {}),
                    await extractor.extract("bte", html, {"no_such_option": 1}))
        finally:
            await extractor.aclose()

    good, refused = asyncio.run(go())
    assert good.error is None
    assert good.text.startswith("Words of a paragraph.")
    assert any(b.is_content for b in good.blocks)
    assert good.extract_ms is not None
    assert good.elapsed_ms is not None
    assert good.extract_ms <= good.elapsed_ms
    assert refused.error is not None
    assert refused.error.startswith("invalid_options: no_such_option")


def test_in_process_settings_of_one_service_share_its_pool(tmp_path: Path) -> None:
    """Two settings of trafilatura run in one worker pool; each row gets its own
    options, so keeping a page's comments or not gives different text."""
    spec = RunSpec(datasets=[], services=["trafilatura", "trafilatura@no-comments"],
                   options={"trafilatura@no-comments": {"include_comments": False}},
                   backend="embedded", workers=2, output_folder=str(tmp_path / "out"))
    assert list(EmbeddedExtractor(spec).pools) == ["trafilatura"]
    store = Store(tmp_path / "store.sqlite")
    run_id = create_run(store, spec, [folder_source("sample", SAMPLE / "html",
                                                    SAMPLE / "content", None)])
    results = asyncio.run(execute_run(store, run_id))
    texts: dict[str, dict[str, str]] = {}
    for result in results:
        assert result.status == "ok", result.error
        texts.setdefault(result.service, {})[result.page_id] = result.text
    assert texts.keys() == {"trafilatura", "trafilatura@no-comments"}
    differ = [page for page, text in texts["trafilatura"].items()
              if text != texts["trafilatura@no-comments"][page]]
    assert differ  # the sample has pages with reader comments
    for page in differ:  # without comments, a shorter text
        assert len(texts["trafilatura@no-comments"][page]) < len(texts["trafilatura"][page])


def test_a_service_answering_as_another_algorithm_is_named_in_the_warnings(
        tmp_path: Path, fakes: dict[str, tuple[FakeService, str]]) -> None:
    # justext's URL given to the bte service (a slip of a port, a container swapped in).
    swapped = {"justext": fakes["justext"], "bte": fakes["justext"]}
    store, run_id, results = _run(tmp_path, swapped, ["justext", "bte"])
    warnings = store.details(run_id)["warnings"]
    assert [w for w in warnings if "answers as" in w] == [
        f"bte: the service at {fakes['justext'][1]} answers as 'justext', not 'bte'; "
        "its figures are that algorithm's"]
    assert {r.status for r in results} == {"ok"}
