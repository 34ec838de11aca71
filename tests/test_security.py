"""Security of the services and the orchestrator API at the HTTP level.

- Request size limits on every endpoint that reads a body (declared length and
  chunked bodies without one); endpoints that take no body never read it.
- The optional bearer token (BOILERBENCH_TOKEN for a service,
  BOILERBENCH_API_TOKEN for the orchestrator) on every endpoint but /health.
- Services and the orchestrator bind to 127.0.0.1 by default outside containers
  (the settings' defaults and the launcher's processes).
- No endpoint fetches a URL unless configured to: no extractor follows the page
  URL or the links in a page, rss fetches `feed_url` only when allowed and only
  from allow-listed hosts, the orchestrator takes datasets by path under its
  allowed roots only and never service URLs from a request.
- The orchestrator's upload refuses archive bombs, absolute paths, `..` and links
  (the library-level cases are in tests/test_testsets.py; here the HTTP replies).

Kit-level checks that need no extraction run in-process (httpx's ASGITransport
without the lifespan: the token and the size limit answer before any worker is
needed, and a request that gets past them meets 503 not_ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import stat
import tarfile
import threading
import zipfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from orchestrator.launcher import LocalStack
from shared.contract import PageError
from shared.registry import SERVICES
from shared.service import create_service_app
from shared.settings import ServiceSettings
from tests.helpers import assert_error, tar_bytes, write_test_set
from tests.servers import free_port, serve_app, stand_in_service

LIMIT = 64 * 1024
PAGE = "<html><body><p>The harbour bridge opened again after repairs.</p></body></html>"


async def _chunks(total: int, size: int = 16 * 1024) -> AsyncIterator[bytes]:
    """A body without Content-Length (chunked), so only the streaming count can stop it."""
    yield b"<html><body><p>"
    sent = 0
    while sent < total:
        yield b"a" * size
        sent += size


def _in_process(app: FastAPI, calls: list[tuple[str, str, dict[str, Any]]]
                ) -> list[httpx.Response]:
    """Send requests to an app in-process (no lifespan, no workers)."""
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.request(method, path, **kwargs)
                    for method, path, kwargs in calls]

    return asyncio.run(go())


# ---- services: size limits and token ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_body_limit_on_every_body_endpoint(name: str) -> None:
    app = create_service_app(SERVICES[name].algorithm(), ServiceSettings(max_body_bytes=LIMIT))
    # Every route that may take a body, and every operation the schema documents with
    # one (POST /extract is served outside the router).
    body_routes = sorted({
        *((method, route.path) for route in app.routes if isinstance(route, APIRoute)
          for method in route.methods or () if method in {"POST", "PUT", "PATCH"}),
        *((method.upper(), path) for path, operations in app.openapi()["paths"].items()
          for method, operation in operations.items() if "requestBody" in operation),
    })
    assert ("POST", "/extract") in body_routes
    over = b"<p>" + b"a" * LIMIT
    json_over = orjson.dumps({"html": "<p>" + "a" * LIMIT + "</p>"})
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for method, path in body_routes:
        calls += [
            (method, path, {"content": over, "headers": {"content-type": "text/html"}}),
            (method, path, {"content": json_over,
                            "headers": {"content-type": "application/json"}}),
            (method, path, {"content": _chunks(2 * LIMIT),
                            "headers": {"content-type": "text/html"}}),
        ]
    for reply in _in_process(app, calls):
        assert_error(reply, 413)
    # Exactly the limit passes the size check (and meets the not-yet-started pool).
    at_limit = b"<p>" + b"a" * (LIMIT - 3)
    [reply] = _in_process(app, [("POST", "/extract", {"content": at_limit,
                                                      "headers": {"content-type": "text/html"}})])
    assert_error(reply, 503)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_token_on_every_endpoint_but_health(name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOILERBENCH_TOKEN", "s3cret-token")
    settings = ServiceSettings()
    assert settings.token == "s3cret-token", "the token comes from the environment"
    app = create_service_app(SERVICES[name].algorithm(), settings)
    html = {"content-type": "text/html"}
    good = {"authorization": "Bearer s3cret-token"}
    wrong = {"authorization": "Bearer s3cret-tokeN"}

    def page(headers: dict[str, str]) -> dict[str, Any]:
        return {"content": PAGE.encode(), "headers": {**html, **headers}}

    replies = _in_process(app, [
        ("POST", "/extract", page({})),
        ("POST", "/extract", page(wrong)),
        ("POST", "/extract", page({"authorization": "s3cret-token"})),
        ("GET", "/info", {}),
        ("GET", "/info", {"headers": wrong}),
        ("GET", "/info", {"headers": good}),
        ("POST", "/extract", page(good)),
        ("GET", "/health", {}),
        # The token is checked before the body is read: an unauthorised 20 MB body is not.
        ("POST", "/extract", {"content": b"a" * (20 * 1024 * 1024),
                              "headers": {"content-type": "text/html"}}),
    ])
    for reply in replies[:5]:
        assert_error(reply, 401)
    assert replies[5].status_code == 200
    assert replies[5].json()["name"] == name
    assert_error(replies[6], 503)  # authorised; the workers of this in-process app never start
    assert replies[7].status_code == 503  # /health answers without a token (not ready here)
    assert_error(replies[8], 401)


def test_a_token_beyond_ascii_is_taken_as_clients_send_it() -> None:
    """HTTP clients send a header's text as UTF-8: a token set as "sécret" is the bytes
    b"s\\xc3\\xa9cret" on the wire, and so is accepted; its latin-1 bytes are another token."""
    app = create_service_app(SERVICES["bte"].algorithm(), ServiceSettings(token="sécret"))
    utf8, latin1 = ({"headers": {"authorization": b"Bearer " + "sécret".encode(codec)}}
                    for codec in ("utf-8", "latin-1"))
    accepted, refused = _in_process(app, [("GET", "/info", utf8), ("GET", "/info", latin1)])
    assert accepted.status_code == 200
    assert_error(refused, 401)


def test_other_methods_on_extract_get_405_after_the_token() -> None:
    """/extract takes POST only: the others get a JSON 405 naming it, without reading
    a body, and only once the token is right."""
    app = create_service_app(SERVICES["justext"].algorithm(), ServiceSettings(token="t0k"))
    good = {"authorization": "Bearer t0k"}
    replies = _in_process(app, [
        ("GET", "/extract", {}),
        ("GET", "/extract", {"headers": good}),
        ("PUT", "/extract", {"content": PAGE.encode(), "headers": good}),
        ("DELETE", "/extract", {"headers": good}),
    ])
    unauthorised = assert_error(replies[0], 401)
    assert unauthorised.error == "unauthorized"
    assert replies[0].headers["www-authenticate"] == "Bearer"
    for reply in replies[1:]:
        assert assert_error(reply, 405).error == "method_not_allowed"
        assert reply.headers["allow"] == "POST"


def test_chunked_body_over_the_limit_over_real_http() -> None:
    """uvicorn streams a chunked body; the service stops reading it at the limit."""
    app = create_service_app(SERVICES["justext"].algorithm(),
                             ServiceSettings(max_body_bytes=LIMIT, time_limit_s=10))

    def chunks() -> Iterator[bytes]:
        yield b"<html><body><p>"
        for _ in range(4096):  # 64 MB offered; the reply comes after the first ~64 KB
            yield b"a" * 16384

    with serve_app(app) as url:
        try:
            reply = httpx.post(f"{url}/extract", content=chunks(),
                               headers={"content-type": "text/html"}, timeout=60)
        except httpx.WriteError:
            pass  # the server answered 413 and closed before we finished sending
        else:
            assert_error(reply, 413)
        ok = httpx.post(f"{url}/extract", content=PAGE.encode(),
                        headers={"content-type": "text/html"}, timeout=60)
        assert ok.status_code == 200, ok.text[:300]


# ---- binding to loopback ---------------------------------------------------------------

def _listening_addresses(port: int) -> set[str]:
    """Local IPv4/IPv6 addresses (hex, as in /proc/net/tcp*) listening on `port`."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def test_services_and_orchestrator_bind_to_loopback_by_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOILERBENCH_HOST", raising=False)
    monkeypatch.delenv("BOILERBENCH_API_HOST", raising=False)
    assert ServiceSettings().host == "127.0.0.1"
    assert ApiSettings().host == "127.0.0.1"
    port = free_port()
    stack = LocalStack(["bte"], ports={"bte": port})
    assert stack.host == "127.0.0.1"
    with stack:
        assert _listening_addresses(port) == {"0100007F"}, "listens on 127.0.0.1 only"


# ---- no URL fetching unless configured -------------------------------------------------

class Recorder:
    """A local HTTP server that counts the requests it gets (the target of would-be fetches)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.lock = threading.Lock()
        app = FastAPI()

        @app.get("/{path:path}")
        async def anything(path: str, request: Request) -> PlainTextResponse:
            with self.lock:
                self.hits.append(path)
            feed = ('<?xml version="1.0"?><rss version="2.0"><channel><title>t</title><item>'
                    "<title>Harbour bridge</title><link>https://news.example/bridge</link>"
                    "<description>The harbour bridge opened again after repairs."
                    "</description></item></channel></rss>")
            return PlainTextResponse(feed, media_type="application/rss+xml")

        self.app = app


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    with serve_app(rec.app, ready_path=None) as url:
        yield rec, url


def _baiting_page(base: str) -> str:
    """A page whose every kind of reference points at the recorder."""
    return (
        f"<html><head><base href='{base}/base/'><link rel='alternate' "
        f"type='application/rss+xml' href='{base}/feed.xml'><link rel='stylesheet' "
        f"href='{base}/style.css'><meta http-equiv='refresh' content='0; url={base}/refresh'>"
        f"<link rel='canonical' href='{base}/canonical'><script src='{base}/script.js'></script>"
        f"<style>@import url('{base}/import.css');</style></head><body>"
        f"<iframe src='{base}/frame'></iframe><img src='{base}/image.png'>"
        "<article><h1>Harbour bridge reopens</h1>"
        "<p>The harbour bridge opened again after repairs. " * 5 + "</p>"
        f"<p><a href='{base}/next'>Next page</a></p></article></body></html>"
    )


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_no_extractor_follows_the_page_url_or_its_links(
        name: str, recorder: tuple[Recorder, str], monkeypatch: pytest.MonkeyPatch) -> None:
    rec, base = recorder
    monkeypatch.delenv("BOILERBENCH_ALLOW_FETCH", raising=False)
    algorithm = SERVICES[name].algorithm()
    options: dict[str, Any] = {}
    if name == "rss":
        options = {"feed": (f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
                            f"<link>{base}/site</link><item><title>Harbour bridge</title>"
                            f"<link>{base}/page</link><enclosure url='{base}/enc'/>"
                            "<description>The harbour bridge opened again after repairs."
                            "</description></item></channel></rss>")}
    before = len(rec.hits)
    with contextlib.suppress(PageError):  # refusing the page is fine; fetching is not
        algorithm.run(_baiting_page(base), options, f"{base}/page")
    assert rec.hits[before:] == [], f"{name} fetched {rec.hits[before:]}"


def _rss_app() -> FastAPI:
    return create_service_app(SERVICES["rss"].algorithm(), ServiceSettings(time_limit_s=20))


def test_rss_feed_url_refused_by_default_and_off_the_allow_list(
        recorder: tuple[Recorder, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers inherit the environment at start, so each setting gets its own service."""
    rec, base = recorder
    request = {"html": _baiting_page(base), "url": "https://news.example/bridge",
               "options": {"feed_url": f"{base}/feed.xml"}}
    monkeypatch.delenv("BOILERBENCH_ALLOW_FETCH", raising=False)
    monkeypatch.delenv("BOILERBENCH_FETCH_ALLOW_LIST", raising=False)
    with serve_app(_rss_app()) as url:
        before = len(rec.hits)
        refused = httpx.post(f"{url}/extract", json=request, timeout=60)
        assert "ALLOW_FETCH" in assert_error(refused, 422).detail
        assert rec.hits[before:] == []
    monkeypatch.setenv("BOILERBENCH_ALLOW_FETCH", "true")
    monkeypatch.setenv("BOILERBENCH_FETCH_ALLOW_LIST", '["127.0.0.1"]')
    port = base.rsplit(":", 1)[1]
    with serve_app(_rss_app()) as url:
        before = len(rec.hits)
        # localhost reaches the recorder too, but only the host names listed may be fetched.
        for feed_url in (f"http://localhost:{port}/feed.xml", "file:///etc/passwd",
                         f"http://127.0.0.1.evil.test:{port}/feed.xml",
                         f"ftp://127.0.0.1:{port}/feed.xml"):
            reply = httpx.post(f"{url}/extract", json={**request,
                                                       "options": {"feed_url": feed_url}},
                               timeout=60)
            assert_error(reply, 422)
        assert rec.hits[before:] == []
        allowed = httpx.post(f"{url}/extract", json=request, timeout=60)
        assert allowed.status_code in (200, 422), allowed.text[:300]
        assert rec.hits[before:] == ["feed.xml"], "fetched once, when configured to"


# ---- the orchestrator API --------------------------------------------------------------

@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The orchestrator on a free port with a token, a small body limit and one allowed root.
    Its one service is a stand-in that refuses every page: accepted runs end with
    errors, and no address a request names is ever fetched."""
    root = tmp_path / "allowed"
    write_test_set(root / "set", {"p1": (PAGE, "The harbour bridge opened again.")})
    outside = write_test_set(tmp_path / "outside", {})
    (root / "link").symlink_to(outside, target_is_directory=True)
    settings = ApiSettings(token="api-token", max_body_bytes=LIMIT, allowed_roots=[root],
                           resume=False)

    async def refuse() -> PlainTextResponse:
        return PlainTextResponse("no extraction here", status_code=500)

    with serve_app(stand_in_service("justext", refuse)) as service_url:
        config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                           services=["justext"], urls={"justext": service_url},
                           retries=0, timeout_s=5)
        with serve_app(create_app(settings, config)) as url:
            yield url, tmp_path


AUTH = {"authorization": "Bearer api-token"}


def test_orchestrator_token(api: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = api
    monkeypatch.setenv("BOILERBENCH_API_TOKEN", "from-env")
    assert ApiSettings().token == "from-env"
    assert httpx.get(f"{url}/health").status_code == 200
    for method, path in (("GET", "/runs"), ("GET", "/runs/x"), ("GET", "/runs/x/results"),
                         ("GET", "/runs/x/report"), ("POST", "/runs"), ("GET", "/docs"),
                         ("GET", "/openapi.json")):
        for headers in ({}, {"authorization": "Bearer wrong"}):
            assert_error(httpx.request(method, f"{url}{path}", headers=headers), 401)
    assert httpx.get(f"{url}/runs", headers=AUTH).status_code == 200
    assert_error(httpx.get(f"{url}/runs/x", headers=AUTH), 404)
    # Set but empty (as compose files leave it): no token, as for the services; never
    # a token that a bare "Bearer" matches.
    monkeypatch.setenv("BOILERBENCH_API_TOKEN", "")
    assert ApiSettings().token is None


def test_orchestrator_refuses_duplicate_page_ids_and_answers_bugs_in_json(
        api: tuple[str, Path]) -> None:
    url, _ = api
    pages = [{"id": "a", "html": PAGE, "gold": "x"}, {"id": "a", "html": PAGE, "gold": "y"}]
    error = assert_error(httpx.post(f"{url}/runs", json={"pages": pages}, headers=AUTH), 422)
    assert error.error == "invalid_dataset"
    assert "unique" in error.detail
    app = create_service_app(SERVICES["justext"].algorithm(), ServiceSettings())

    @app.get("/broken")
    async def broken() -> None:
        raise RuntimeError("a bug")

    with serve_app(app) as service_url:
        error = assert_error(httpx.get(f"{service_url}/broken"), 500)
    assert error.error == "internal_error"
    assert "RuntimeError: a bug" in error.detail


def test_orchestrator_body_limit(api: tuple[str, Path]) -> None:
    url, _ = api
    pages = {"name": "big", "pages": [{"id": "p", "html": "<p>" + "a" * LIMIT, "gold": "a"}]}
    assert_error(httpx.post(f"{url}/runs", json={"pages": pages}, headers=AUTH), 413)
    files = {"archive": ("big.zip", b"\0" * (LIMIT + 1), "application/zip")}
    assert_error(httpx.post(f"{url}/runs", files=files, headers=AUTH), 413)

    def chunks() -> Iterator[bytes]:
        yield b'{"pages": {"name": "x", "pages": [{"id": "p", "gold": "g", "html": "'
        for _ in range(64):
            yield b"a" * 16384

    try:
        reply = httpx.post(f"{url}/runs", content=chunks(),
                           headers={**AUTH, "content-type": "application/json"}, timeout=60)
    except httpx.WriteError:
        pass
    else:
        assert_error(reply, 413)
    assert httpx.get(f"{url}/health").status_code == 200


def test_orchestrator_datasets_by_path_under_allowed_roots_only(
        api: tuple[str, Path], recorder: tuple[Recorder, str]) -> None:
    url, tmp_path = api
    rec, base = recorder
    before = len(rec.hits)
    for dataset in ("/etc", str(tmp_path / "outside"), "../outside", "set/../../outside",
                    "link", f"{base}/dataset", "file:///etc", "~"):
        reply = httpx.post(f"{url}/runs", json={"dataset": dataset}, headers=AUTH)
        assert_error(reply, 422)
    # Service URLs and other unknown keys cannot come from a request.
    inline = {"name": "inline", "pages": [{"id": "p", "html": PAGE, "gold": "harbour"}]}
    for extra in ({"urls": {"justext": f"{base}/svc"}}, {"url": f"{base}/x"},
                  {"feed_url": f"{base}/feed"}):
        assert_error(httpx.post(f"{url}/runs", json={"pages": inline, **extra},
                                headers=AUTH), 422)
    accepted = httpx.post(f"{url}/runs", json={"dataset": "set"}, headers=AUTH)
    assert accepted.status_code == 202, accepted.text[:300]
    assert rec.hits[before:] == []


def test_a_root_is_named_by_its_own_folder_name_too(tmp_path: Path) -> None:
    from orchestrator.api import _resolve_dataset
    from orchestrator.testsets import SAMPLE_DIR
    from shared.answer import ServiceError

    other = tmp_path / "datasets"
    write_test_set(other / "news", {"p1": (PAGE, "The harbour bridge opened again.")})
    roots = [SAMPLE_DIR, other]
    assert _resolve_dataset("sample", roots) == SAMPLE_DIR.resolve()  # as runs name it
    assert _resolve_dataset("news", roots) == (other / "news").resolve()
    assert _resolve_dataset("datasets", roots) == other.resolve()
    for outside in ("samples", "news/../..", "../datasets/..", str(tmp_path)):
        with pytest.raises(ServiceError):
            _resolve_dataset(outside, roots)


def _zip(members: Sequence[tuple[str, bytes, int | None]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return buf.getvalue()


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


GOOD = [("set/html/p1.html", PAGE.encode(), None), ("set/content/p1.txt", b"harbour bridge", None)]
BAD_ARCHIVES = {
    "zip_bomb": _zip([*GOOD, ("set/html/p2.html", b"\0" * (40 * 1024 * 1024), None)]),
    "tar_bomb": tar_bytes([(n, d) for n, d, _ in GOOD] + [("set/html/p2.html",
                                                      b"\0" * (40 * 1024 * 1024))]),
    "zip_absolute": _zip([*GOOD, ("/etc/cron.d/x", b"x", None)]),
    "zip_dotdot": _zip([*GOOD, ("set/html/../../../escape.html", b"<p>x</p>", None)]),
    "tar_absolute": tar_bytes([(n, d) for n, d, _ in GOOD] + [("/tmp/x.html", b"<p>x</p>")]),
    "tar_dotdot": tar_bytes([(n, d) for n, d, _ in GOOD] + [("../x.html", b"<p>x</p>")]),
    "zip_symlink": _zip([*GOOD, ("set/html/p3.html", b"/etc/passwd", stat.S_IFLNK | 0o777)]),
    "tar_symlink": tar_bytes([(n, d) for n, d, _ in GOOD]
                        + [_link("set/html/p3.html", "/etc/passwd", tarfile.SYMTYPE)]),
    "tar_hardlink": tar_bytes([(n, d) for n, d, _ in GOOD]
                         + [_link("set/html/p3.html", "/etc/passwd", tarfile.LNKTYPE)]),
    "not_an_archive": b"PK\x03\x04 this is not really a zip",
}


def test_archive_bombs_fit_in_the_upload_limit() -> None:
    """The bombs are small on the wire (so the body limit is not what stops them)."""
    for name in ("zip_bomb", "tar_bomb"):
        assert len(BAD_ARCHIVES[name]) < LIMIT, (name, len(BAD_ARCHIVES[name]))


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_orchestrator_upload_refuses_unsafe_archives(api: tuple[str, Path], case: str) -> None:
    url, tmp_path = api
    suffix = ".zip" if case.startswith(("zip", "not")) else ".tar.gz"
    files = {"archive": (f"upload{suffix}", BAD_ARCHIVES[case], "application/octet-stream")}
    reply = httpx.post(f"{url}/runs", files=files, headers=AUTH, timeout=60)
    error = assert_error(reply, 422)
    assert error.error == "invalid_archive", error
    assert not (tmp_path / "escape.html").exists()
    assert httpx.get(f"{url}/runs", headers=AUTH).json()["runs"] == []


def test_orchestrator_upload_accepts_a_safe_archive(api: tuple[str, Path]) -> None:
    url, _ = api
    files = {"archive": ("upload.zip", _zip(GOOD), "application/zip")}
    reply = httpx.post(f"{url}/runs", files=files, headers=AUTH, timeout=60)
    assert reply.status_code == 202, reply.text[:300]
