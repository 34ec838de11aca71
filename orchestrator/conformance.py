"""Whether the service at a URL answers as a replacement of a registry service must
(docs/docker.md, "What a replacement must answer"): asked as runs, the ensemble,
`boilerbench extract --warc --url` and compose's health check ask it, on pages of the
built-in sample. `boilerbench check` prints the results.

Each check is a function of a Target giving one CheckResult, so that a failure says
what was expected and what came back. Every request has a time limit on the whole
reply (a server trickling bytes is cut off too), so no check waits for ever. What
cannot be seen from outside (the port the image listens on, the `python` its health
check needs, how it retries) is not checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from pydantic import ValidationError

from orchestrator.launcher import StackError, check_info_reply
from orchestrator.runner import parse_reply
from orchestrator.testsets import SAMPLE_DIR, LabelledPage, open_dataset_dir
from shared.answer import page_query
from shared.contract import ErrorReply, bearer_header
from shared.registry import MissingInputError, page_options

SAMPLE_PAGE_IDS = ("news-harbour-ferry", "library-opening-hours", "latin1-cafe")
"""The sample pages sent to /extract: the two with a feed, so that rss (which skips a
page without one) gets pages too, and the one in ISO-8859-1, whose raw bytes a
text/html body leaves the service to decode."""
UNKNOWN_OPTION = "no_such_option"
MAX_REPLY_BYTES = 64 * 2**20
"""A reply this large to a sample page is no reply: reading stops there."""
_JSON = {"content-type": "application/json"}
_SHOWN_CHARS = 160


class NoReplyError(Exception):
    """A request got no whole reply: nothing listens, the time limit passed, or the
    connection broke (the message says which)."""


@dataclass(frozen=True)
class CheckResult:
    check: str
    ok: bool
    expected: str
    got: str


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    server: str | None = None


@dataclass(frozen=True)
class SamplePage:
    """A sample page and the options a run sends with it to the service checked."""

    page: LabelledPage
    options: dict[str, Any]

    def raw(self) -> bytes:
        html = self.page.html
        return html if isinstance(html, bytes) else html.encode()

    def url(self) -> str:
        """An address for the page (the sample's pages have none of their own)."""
        return f"http://sample.example/{self.page.id}.html"


@dataclass(frozen=True)
class Target:
    """The service checked: its base URL, the registry name it stands in for, its token."""

    url: str
    name: str
    token: str | None
    timeout_s: float
    client: httpx.Client

    def ask(self, method: str, path: str, *, token: str | None = None,
            headers: Mapping[str, str] | None = None, **request: Any) -> Answer:
        """The reply to one request, read whole within the time limit; NoReplyError
        where none came."""
        what = f"{method} {path}"
        deadline = time.monotonic() + self.timeout_s
        body = bytearray()
        try:
            with self.client.stream(method, f"{self.url}{path}",
                                    headers={**bearer_header(token), **(headers or {})},
                                    **request) as reply:
                for chunk in reply.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise NoReplyError(f"no whole reply to {what} within "
                                           f"{self.timeout_s:g} s")
                    if len(body) > MAX_REPLY_BYTES:
                        raise NoReplyError(f"the reply to {what} passes "
                                           f"{MAX_REPLY_BYTES // 2**20} MiB")
        except httpx.TimeoutException:
            raise NoReplyError(f"no reply to {what} within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise NoReplyError(f"no reply to {what}: {type(exc).__name__}: {exc}"
                               .rstrip(": ")) from None
        return Answer(reply.status_code, bytes(body), reply.headers.get("server"))


def sample_pages(name: str) -> list[SamplePage]:
    """SAMPLE_PAGE_IDS with the options service `name` needs for each (its registry
    input hook: rss's feed), less the pages a run would skip for it."""
    dataset = open_dataset_dir(SAMPLE_DIR, "sample")
    pages = []
    for page_id in SAMPLE_PAGE_IDS:
        page = dataset.page(page_id)
        try:
            pages.append(SamplePage(page, page_options(name, page, dataset)))
        except MissingInputError:
            continue
    return pages


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _error_reply(body: bytes) -> ErrorReply | None:
    try:
        return ErrorReply.model_validate_json(body)
    except ValidationError:
        return None


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS - 3]}..."


def describe(answer: Answer) -> str:
    """A reply in a few words: its status and its error, or what its body is."""
    error = _error_reply(answer.body)
    if error is not None:
        return _short(f"{answer.status} {error.error}: {error.detail}")
    if _json_object(answer.body) is not None:
        return _short(f"{answer.status}, JSON {answer.body.decode('utf-8', 'replace')}")
    if not answer.body:
        return f"{answer.status}, an empty body"
    return _short(f"{answer.status}, not JSON: {answer.body[:80].decode('utf-8', 'replace')!r}")


def _error_check(check: str, status: int, ask: Callable[[], Answer]) -> CheckResult:
    """A request the service must refuse with `status` and a JSON {error, detail}."""
    expected = f"{status}, JSON {{error, detail}}"
    try:
        answer = ask()
    except NoReplyError as exc:
        return CheckResult(check, False, expected, str(exc))
    ok = answer.status == status and _error_reply(answer.body) is not None
    return CheckResult(check, ok, expected, describe(answer))


def reply_problem(name: str, answer: Answer) -> str | None:
    """What a run would hold against this reply of service `name` (None: nothing). A
    run records a page as an error for a reply its parsing refuses, and warns that
    another algorithm's figures are scored where `algorithm` is not the service's."""
    if answer.status != 200:
        return describe(answer)
    outcome = parse_reply(name, answer.body, 0.0)
    if outcome.error is not None:
        return _short(outcome.error)
    if outcome.algorithm != name:
        return f"algorithm {outcome.algorithm!r}"
    return None


def check_health(target: Target) -> CheckResult:
    """GET /health without a token, as compose's health check and the launcher ask it.
    NoReplyError passes on: with nothing answering there, no other check can say more."""
    answer = target.ask("GET", "/health")
    expected = "200" + (", without the token" if target.token else "")
    return CheckResult("health", answer.status == 200, expected, describe(answer))


def check_info(target: Target) -> CheckResult:
    """GET /info names the service (runs and `extract` refuse an address where it does
    not, with check_service's words) and gives a version (`docker ps` shows it)."""
    expected = f"200, a JSON object with name {target.name!r} and a version"
    try:
        answer = target.ask("GET", "/info", token=target.token)
        check_info_reply(target.url, target.name, target.token, answer.status, answer.body,
                         answer.server)
    except (NoReplyError, StackError) as exc:
        return CheckResult("info", False, expected, _short(str(exc)))
    version = (_json_object(answer.body) or {}).get("version")
    got = f"name {target.name!r}, version {version!r}"
    return CheckResult("info", isinstance(version, str) and bool(version), expected, got)


def _extract_json(target: Target, page: SamplePage, options: Mapping[str, Any],
                  token: str | None) -> Answer:
    """POST /extract with the JSON body a run sends."""
    body = orjson.dumps({"html": page.page.html_text(), "url": None, "options": options})
    return target.ask("POST", "/extract", token=token, headers=_JSON, content=body)


def _extract_html(target: Target, page: SamplePage) -> Answer:
    """POST /extract with the page's bytes as `extract --warc --url` sends them: the URL
    and the options in the query (the input hooks' options are text: rss's feed)."""
    options = {key: str(value) for key, value in page.options.items()}
    return target.ask("POST", "/extract", token=target.token,
                      headers={"content-type": "text/html"}, content=page.raw(),
                      params=page_query(page.url(), options))


def _extract_check(check: str, target: Target, pages: Sequence[SamplePage],
                   ask: Callable[[SamplePage], Answer]) -> CheckResult:
    """Every page answered 200 with a reply a run takes, the first one that is not named."""
    expected = (f"200 to {len(pages)} sample pages, each a reply in the contract "
                f"from {target.name!r}")
    for page in pages:
        try:
            problem = reply_problem(target.name, ask(page))
        except NoReplyError as exc:
            problem = str(exc)
        if problem is not None:
            return CheckResult(check, False, expected, f"{page.page.id}: {problem}")
    return CheckResult(check, True, expected, f"{len(pages)} replies in the contract")


def check_extract_json(target: Target, pages: Sequence[SamplePage]) -> CheckResult:
    return _extract_check("extract (JSON body)", target, pages,
                          lambda page: _extract_json(target, page, page.options, target.token))


def check_extract_html(target: Target, pages: Sequence[SamplePage]) -> CheckResult:
    return _extract_check("extract (text/html body)", target, pages,
                          lambda page: _extract_html(target, page))


def check_malformed_json(target: Target) -> CheckResult:
    return _error_check("malformed JSON", 400, lambda: target.ask(
        "POST", "/extract", token=target.token, headers=_JSON, content=b'{"html": "<p>'))


def check_unsupported_body(target: Target) -> CheckResult:
    return _error_check("neither JSON nor HTML", 415, lambda: target.ask(
        "POST", "/extract", token=target.token, headers={"content-type": "text/plain"},
        content=b"a page as plain text"))


def check_unknown_option(target: Target, page: SamplePage) -> CheckResult:
    options = {**page.options, UNKNOWN_OPTION: True}
    return _error_check("unknown option", 422,
                        lambda: _extract_json(target, page, options, target.token))


def check_token_asked(target: Target, page: SamplePage) -> list[CheckResult]:
    """/info and /extract refuse a request without the token (only /health is open)."""
    return [
        _error_check("/info without token", 401,
                     lambda: target.ask("GET", "/info")),
        _error_check("/extract without token", 401,
                     lambda: _extract_json(target, page, page.options, None)),
    ]


def run_checks(url: str, name: str, token: str | None, timeout_s: float) -> list[CheckResult]:
    """Every check of the service at `url` standing in for registry service `name`;
    NoReplyError where /health gets no reply at all."""
    pages = sample_pages(name)
    timeout = httpx.Timeout(timeout_s)
    with httpx.Client(timeout=timeout) as client:
        target = Target(url, name, token, timeout_s, client)
        results = [check_health(target), check_info(target),
                   check_extract_json(target, pages), check_extract_html(target, pages),
                   check_malformed_json(target), check_unsupported_body(target),
                   check_unknown_option(target, pages[0])]
        if token:
            results += check_token_asked(target, pages[0])
    return results
