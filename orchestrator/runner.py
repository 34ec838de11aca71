"""Runs: every chosen service on every page of the test sets, scored and stored as it arrives.

Two backends run the extractions:

- `http`: the services' /extract over one aiohttp session (keep-alive),
  at most `concurrency` requests in flight per service, a time limit per request,
  and retries with exponential back-off (backoff_s, doubled) on connection errors
  and 5xx replies. 4xx replies and time-outs are not retried (the same page would
  fail the same way). A service that is busy (503 busy or not ready, 429) has not
  tried the page: it is asked again after a growing pause (its Retry-After if
  given) without using up a retry, for up to `busy_wait_s`, and never recorded as
  the algorithm's failure (ServiceBusyError stops the run, which can be resumed).
  After a page has used up its retries on connection errors,
  the service counts as down and later pages get one attempt each, so a dead
  service costs milliseconds per page, and is picked up again if it comes back.
- `embedded`: no HTTP; each service's extractor runs in worker processes
  (shared.workers.WorkerPool, the same pool the services use, which enforces the
  time limit by killing the worker), with at most `workers` extractions at a time
  over all services, so the run uses that many cores; a service has
  ceil(workers / services) worker processes.

A service that fails never fails the run: the page becomes status "error" with
the reason and is scored as empty output. A service that needs more than the HTML
gets it from its registry entry's input hook (rss: the page's feed as option `feed`);
pages the hook finds lacking are "skipped" (not scored, but counted). A page
that is not decodable HTML is skipped for every service and named in the warnings.

Each page is prepared for scoring once (scoring.prepare_page) and reused by all
services. Preparing runs in one worker thread (PreparingThread), so the event loop
keeps answering (the API's /health, the other lanes) meanwhile. While the thread runs,
the loop gets the GIL back after each blocking call (a socket's send or recv, a SQLite
commit) only at the interpreter's switch interval, and the services run out of
requests meanwhile; so a run lowers the interval to GIL_SWITCH_INTERVAL_S, and the
last run of the process to end puts it back (LoweredSwitchInterval).
Results are scored in processes of their own (ScoringPool, `scoring_processes` of
them): scoring is pure Python, and in the orchestrator's process it was one core's
work that capped a run's results per second however many cores the services had
(benchmarks/results/throughput.md). A failed extraction is scored as empty output
in the loop itself, at once.
Each result is written to the store in its own transaction, so a killed run
resumes where it stopped: finished (dataset, page, service) rows are skipped.

Preparing or scoring one page has a time limit (`scoring_time_limit_s`). A page
whose preparing passes it is recorded for every service as an error without scores,
with the reason, and the run goes on with a fresh preparing thread (a thread cannot
be stopped: the old one finishes its page, whose result is dropped; preparing is
linear in the page's size, so it does finish). A result whose scoring passes it has
its scoring process killed and replaced, and is recorded as an error without scores.
A run whose status turns "cancelled" in the store (`DELETE /runs/{id}`,
`boilerbench runs cancel`, from any process) stops within a page of each lane and is
never resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import pickle
import shutil
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import aiohttp
import orjson
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from orchestrator.insample import served_trainings, trained_pages
from orchestrator.models import PageResult, PageScores, RunInfo
from orchestrator.predictions import (
    MISSING,
    ErrorText,
    PageTexts,
    lookup,
    match_pages,
    read_predictions,
    write_predictions,
)
from orchestrator.scoring import PageReference, block_marks, prepare_page, score_empty
from orchestrator.statistics import ALL_DATASETS, Summary, ranked, summarize
from orchestrator.store import Store
from orchestrator.testsets import (
    Dataset,
    DatasetError,
    LabelledPage,
    in_memory,
    open_folder,
    readable_name,
)
from shared.answer import ServiceError, finish_reply, validation_message
from shared.contract import Block, ExtractReply, bearer_header
from shared.decoding import NotHTMLError
from shared.registry import (
    SERVICES,
    MissingInputError,
    get_service,
    page_options,
    service_of,
)
from shared.workers import (
    ExtractionFailedError,
    ExtractionTimeoutError,
    PoolBusyError,
    ProcessPool,
    WorkerPool,
)

Backend = Literal["http", "embedded"]
# The interpreter's GIL switch interval during runs (module docstring says why).
GIL_SWITCH_INTERVAL_S = 0.0005
# How often a running run looks in the store whether it was cancelled.
CANCEL_CHECK_INTERVAL_S = 0.5
# The most scoring processes a run starts by default (each holds some 60-90 MB).
MAX_SCORING_PROCESSES = 8
# The longest pause between two tries of a busy service.
MAX_BUSY_PAUSE_S = 5.0


def default_scoring_processes() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset
    narrows), up to MAX_SCORING_PROCESSES."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_SCORING_PROCESSES))


class RunCancelledError(Exception):
    """The run was cancelled (its status in the store is "cancelled")."""


class ServiceBusyError(Exception):
    """A service stayed busy (503 busy or not ready) through every retry: the page was
    not attempted, so nothing is recorded for it and a resumed run tries it again."""


class DatasetSource(BaseModel):
    """Where a run's test set comes from: a folder pair on disk, or the store's inputs."""

    name: str
    kind: Literal["folder", "stored"]
    html_folder: str | None = None
    content_folder: str | None = None
    feeds_folder: str | None = None
    roots: list[str] | None = None
    """If set, files are read only where they resolve under one of these folders."""
    owned: bool = False
    """The folders belong to the run (an uploaded archive): deleted with it."""


class RunSpec(BaseModel):
    """Everything needed to run (or resume) a run; stored with it."""

    datasets: list[DatasetSource]
    services: list[str] = Field(default_factory=list)
    predictions: dict[str, str] = Field(default_factory=dict)
    """Rows scored from prediction files (row name -> file path), beside the services."""
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    backend: Backend = "http"
    urls: dict[str, str] = Field(default_factory=dict)
    local: bool = False
    """The URLs belong to a stack started for this run (a resumer supplies its own)."""
    concurrency: int = 4
    workers: int = 2
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    busy_wait_s: float = 600.0
    """How long a page may wait in all for a service that answers 503 busy."""
    scoring_time_limit_s: float = 60.0
    """Preparing or scoring one page longer than this makes it an unscored error."""
    scoring_processes: int = Field(default_factory=default_scoring_processes, ge=1)
    """Processes that score results side by side (ScoringPool)."""
    service_token: str | None = None
    output_folder: str = "results"
    total: int = 0
    rank_by: str = "f1"
    """The figure the tables rank by (statistics.RANK_KEYS)."""
    trained_pages: dict[str, dict[str, list[str]]] | None = None
    """Service -> test set -> ids of its pages the service's model was trained on,
    matched by their HTML when the run was created (orchestrator.insample); None for a
    run recorded before, whose in-sample flags go by the test sets' names."""
    unknown_training: list[str] = Field(default_factory=list)
    """Services called over HTTP whose /info named a model file this orchestrator has
    not got (insample.served_trainings): their rows are flagged as in-sample unknown."""

    @property
    def served_urls(self) -> dict[str, str]:
        """The services called over HTTP at an address the run does not start them on
        (every one, or with `local` those given a URL), by name: they may run with a
        model file other than this environment's."""
        if self.backend != "http":
            return {}
        return {name: self.url(name) for name in self.called_services
                if not self.local or name in self.urls}

    @model_validator(mode="after")
    def _some_row(self) -> RunSpec:
        if not self.services and not self.predictions:
            raise ValueError("name at least one service or prediction file")
        clash = set(self.services) & set(self.predictions)
        if clash:
            raise ValueError(f"a prediction row has a service's name: {sorted(clash)}")
        return self

    @property
    def rows(self) -> list[str]:
        """Every row of the run: the live services, then the prediction files."""
        return [*self.services, *self.predictions]

    @field_validator("services")
    @classmethod
    def _no_duplicates(cls, names: list[str]) -> list[str]:
        """A service named twice is run once (each result row is one page x service)."""
        return list(dict.fromkeys(names))

    def url(self, row: str) -> str:
        """Where a row's service answers (the URLs are by service, not by setting)."""
        service = service_of(row)
        return self.urls.get(service, f"http://127.0.0.1:{get_service(service).port}")

    @property
    def called_services(self) -> list[str]:
        """The services the rows call, each once (two settings of one are one service)."""
        return list(dict.fromkeys(service_of(row) for row in self.services))


@dataclass(frozen=True)
class Outcome:
    """What one extraction came back with: text and blocks, or an error reason.

    `elapsed_ms` is the whole round trip; `extract_ms` the part the service (or
    worker) reports for itself; `parse_ms` turning its reply into Blocks."""

    text: str = ""
    blocks: Sequence[Block] = ()
    elapsed_ms: float | None = None
    error: str | None = None
    extract_ms: float | None = None
    parse_ms: float = 0.0
    algorithm: str | None = None  # as the reply names it


@dataclass
class RunTimings:
    """Where a run's time goes, summed over its pages and services, in seconds.

    Pass one to execute_run to have it filled (benchmarks/throughput.py). The
    phases overlap in time (pages and services run concurrently), so their sum
    exceeds the wall time: they say where the work is, not the critical path.
    """

    prepare_s: float = 0.0  # decode + tokenise each page and its gold, once per page
    extract_s: float = 0.0  # inside the extractors (as the service or worker reports)
    transport_s: float = 0.0  # round trip minus extraction: HTTP or worker IPC, queueing
    parse_s: float = 0.0  # reply JSON to Blocks
    score_s: float = 0.0  # scoring each result, as the scoring process reports it
    store_s: float = 0.0  # writing each result to the store
    extractions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, phase: str, seconds: float) -> None:
        """Add to one phase (`score`, `prepare`, ...); safe from the preparing thread."""
        with self._lock:
            setattr(self, f"{phase}_s", getattr(self, f"{phase}_s") + seconds)

    def add_outcome(self, outcome: Outcome) -> None:
        with self._lock:
            self.extractions += 1
            self.parse_s += outcome.parse_ms / 1000
            if outcome.elapsed_ms is not None and outcome.extract_ms is not None:
                self.extract_s += outcome.extract_ms / 1000
                self.transport_s += max(outcome.elapsed_ms - outcome.extract_ms, 0.0) / 1000


class Extractor(Protocol):
    async def start(self) -> None: ...

    async def extract(self, row: str, html: str, options: dict[str, Any]) -> Outcome:
        """Run row `row` (a service, or a setting of one: registry.SETTING_MARK) on a page."""

    async def aclose(self) -> None: ...


_JSON = {"content-type": "application/json"}


class HttpExtractor:
    """The services' /extract over one aiohttp session (see the module docstring).

    aiohttp rather than httpx, which the rest of the project uses: a run sends every
    page to every service, and the client's CPU per request is taken from the cores
    the services extract on. httpx's (its models, h11 and anyio layers) is several
    times aiohttp's (benchmarks/http_clients.py; benchmarks/results/http_clients.md).
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        # By service, not by row: two settings of one service share its lanes.
        self.semaphores = {name: asyncio.Semaphore(spec.concurrency)
                           for name in spec.called_services}
        self.down: dict[str, bool] = dict.fromkeys(spec.called_services, False)
        self.headers = {**_JSON, **bearer_header(spec.service_token)}
        self.session: aiohttp.ClientSession | None = None
        # Each page's JSON, encoded once for all its services (they send the same text
        # object). At most one page per lane is in flight, and the cache ends with the run.
        self.page_json = functools.lru_cache(
            maxsize=len(spec.services) * spec.concurrency)(_encode_json)

    async def start(self) -> None:
        # The semaphores bound the connections per service; the connector need not.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s,
                                          connect=min(self.spec.timeout_s, 10.0)))

    async def extract(self, row: str, html: str, options: dict[str, Any]) -> Outcome:
        if self.session is None:
            raise RuntimeError("HttpExtractor.start() was not awaited")
        service = service_of(row)
        url = f"{self.spec.url(service)}/extract"
        payload = _request_body(self.page_json(html), options)
        attempts = 1 if self.down[service] else self.spec.retries + 1
        last = "no attempt"
        connection_failed = False
        busy_until = time.monotonic() + self.spec.busy_wait_s
        busy_pause = self.spec.backoff_s
        attempt = 0
        while attempt < attempts:
            if attempt:
                await asyncio.sleep(self.spec.backoff_s * 2 ** (attempt - 1))
            attempt += 1
            try:
                async with self.semaphores[service]:
                    started = time.perf_counter()  # time in the service, not in the queue
                    async with self.session.post(url, data=payload,
                                                 headers=self.headers) as reply:
                        status, content = reply.status, await reply.read()
                        retry_after = reply.headers.get("retry-after", "")
            except (TimeoutError, aiohttp.ClientConnectionError,
                    aiohttp.ClientPayloadError) as exc:
                # A time-out waiting for the reply is final; a service that was not there
                # or went away (aiohttp's connect time-out is a TimeoutError too) is not.
                if isinstance(exc, TimeoutError) and not isinstance(
                        exc, aiohttp.ConnectionTimeoutError):
                    limit = self.spec.timeout_s
                    return Outcome(error=f"no reply from {service} within {limit:g} s")
                connection_failed = True
                last = f"cannot reach {url}: {type(exc).__name__}: {exc}".rstrip(": ")
                continue
            except aiohttp.ClientError as exc:
                return Outcome(error=f"request to {url} failed: {type(exc).__name__}: {exc}")
            elapsed = (time.perf_counter() - started) * 1000
            if _is_busy(status, content):
                if time.monotonic() + busy_pause > busy_until:
                    raise ServiceBusyError(
                        f"{service} stayed busy for {self.spec.busy_wait_s:g} s "
                        f"(HTTP {status}: {_error_text(content)}); resume the run later")
                pause = float(retry_after) if retry_after.isdigit() else busy_pause
                await asyncio.sleep(min(pause, MAX_BUSY_PAUSE_S))
                busy_pause = min(busy_pause * 2, MAX_BUSY_PAUSE_S)
                attempt -= 1  # the page was not tried: no retry is used up
                continue
            if status >= 500:
                connection_failed = False
                last = f"HTTP {status}: {_error_text(content)}"
                continue
            self.down[service] = False
            if status != 200:
                return Outcome(error=f"HTTP {status}: {_error_text(content)}")
            return parse_reply(service, content, elapsed)
        if connection_failed:
            self.down[service] = True
        suffix = f" (after {attempts} attempts)" if attempts > 1 else ""
        return Outcome(error=f"{last}{suffix}")

    async def aclose(self) -> None:
        self.page_json.cache_clear()
        if self.session is not None:
            await self.session.close()


def _is_busy(status: int, content: bytes) -> bool:
    """Did the service turn the request away unread (busy, starting, too many requests)?"""
    if status == 429:
        return True
    if status != 503:
        return False
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return True  # a server's own 503 (a connection cap) says nothing about the page
    # busy, not_ready: the service's workers; service_unavailable: its connection cap.
    return not isinstance(body, dict) or body.get("error") in (
        "busy", "not_ready", "service_unavailable", None)


def parse_reply(service: str, content: bytes, elapsed_ms: float,
                extract_ms: float | None = None) -> Outcome:
    """A 200 reply of /extract as an Outcome. `extract_ms`: the worker's own time, for
    a reply that did not cross HTTP (else the service's `elapsed_ms`)."""
    parse_started = time.perf_counter()
    try:
        body = ExtractReply.model_validate_json(content)
    except ValidationError as exc:
        # The field named: a service of one's own that adds one fails every page so.
        return Outcome(error=f"invalid reply from {service}: {validation_message(exc, 1)}")
    return Outcome(body.text, body.blocks, round(elapsed_ms, 3),
                   extract_ms=body.elapsed_ms if extract_ms is None else extract_ms,
                   parse_ms=(time.perf_counter() - parse_started) * 1000,
                   algorithm=body.algorithm)


def _request_body(page_json: bytes, options: dict[str, Any]) -> bytes:
    """The JSON body of /extract around the page's already encoded JSON string."""
    return b'{"html":%b,"url":null,"options":%b}' % (page_json, _encode_json(options))


def _encode_json(value: Any) -> bytes:
    """orjson, several times faster than the stdlib encoder behind httpx's json=; the
    stdlib one for text orjson refuses (lone surrogates), which the service then judges."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value).encode()


def _error_text(content: bytes) -> str:
    """`error: detail` of a contract error reply, else the start of the body."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content[:200].decode("utf-8", "replace") or "(empty body)"
    if isinstance(body, dict) and "error" in body:
        return f"{body['error']}: {body.get('detail', '')}"[:500]
    return content[:200].decode("utf-8", "replace")


class EmbeddedExtractor:
    """Extractors in worker processes, no HTTP (see the module docstring)."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        # Services run side by side, so a worker each fills the slots when there are
        # as many services as slots; more would only warm up (JIT, caches) twice.
        # One pool per service, shared by its settings' rows (options go per request).
        size = -(-spec.workers // len(spec.called_services))
        self.pools = {name: WorkerPool(SERVICES[name].module, size)
                      for name in spec.called_services}
        self.free = {name: asyncio.Semaphore(size) for name in spec.called_services}
        self.slots = asyncio.Semaphore(spec.workers)
        self.broken: dict[str, str] = {}
        # The workers answer /extract requests as the services do: each page's JSON
        # is encoded once for all its services (see HttpExtractor).
        self.page_json = functools.lru_cache(
            maxsize=len(spec.services) * spec.workers)(_encode_json)

    async def start(self) -> None:
        async def start_one(name: str, pool: WorkerPool) -> None:
            try:
                await pool.start()
            except Exception as exc:
                self.broken[name] = f"the {name} extractor did not start: {exc}"

        await asyncio.gather(*(start_one(n, p) for n, p in self.pools.items()))

    async def extract(self, row: str, html: str, options: dict[str, Any]) -> Outcome:
        service = service_of(row)
        if service in self.broken:
            return Outcome(error=self.broken[service])
        body = _request_body(self.page_json(html), options)
        # A free worker of this service first, then a slot: a slot is never held
        # while waiting for a busy service.
        async with self.free[service], self.slots:
            started = time.perf_counter()
            try:
                result = await self.pools[service].run(body, "application/json", {},
                                                       self.spec.timeout_s)
            except ServiceError as exc:
                return Outcome(error=f"{exc.error}: {exc.detail}"[:500])
            except (ExtractionTimeoutError, ExtractionFailedError) as exc:
                return Outcome(error=f"{type(exc).__name__}: {exc}")
            except PoolBusyError as exc:
                raise ServiceBusyError(f"{service}: {exc}") from None
        elapsed = (time.perf_counter() - started) * 1000
        return parse_reply(service, finish_reply(result.partial_reply, elapsed), elapsed,
                           result.extract_ms)

    async def aclose(self) -> None:
        self.page_json.cache_clear()
        await asyncio.gather(*(pool.close() for pool in self.pools.values()))


def make_extractor(spec: RunSpec) -> Extractor:
    return EmbeddedExtractor(spec) if spec.backend == "embedded" else HttpExtractor(spec)


# ---------------------------------------------------------------------------------------
# Creating and running runs


def folder_source(dataset_name: str, html: Path, content: Path, feeds: Path | None,
                  roots: Sequence[Path] | None = None, owned: bool = False) -> DatasetSource:
    """A folder test set; with `roots`, every file it reads must resolve under them."""
    return DatasetSource(name=readable_name(dataset_name), kind="folder",
                         html_folder=str(html.resolve()),
                         content_folder=str(content.resolve()),
                         feeds_folder=str(feeds.resolve()) if feeds else None,
                         roots=[str(r.resolve()) for r in roots] if roots is not None else None,
                         owned=owned)


def predicted_texts(texts: dict[str, str], datasets: Sequence[Dataset], row: str,
                    path: str) -> PageTexts:
    """A prediction file's texts keyed by the run's pages (file-name keys read as their
    pages' ids, see match_pages)."""
    return match_pages(texts, {d.name: d.ids for d in datasets}, row, path)


def create_run(store: Store, spec: RunSpec, folders: Sequence[DatasetSource] = (),
               memory: Sequence[Dataset] = (), run_id: str | None = None,
               infos: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Record a new run (status pending) on folder test sets and in-memory ones (whose
    pages go into the store); returns its id. Raises DatasetError for a missing folder,
    or where no test set has a page. The services it calls over HTTP at addresses it
    does not start them on say which model they load in their /info, which decides
    their in-sample flags: `infos`, the replies the caller's check of the services
    read (launcher.check_services), by service; a service without one is asked."""
    datasets = [open_source(source) for source in folders]
    sources = list(folders) + [DatasetSource(name=d.name, kind="stored") for d in memory]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"two test sets have the same name: {names}")
    if len(names) > 1 and ALL_DATASETS in names:
        # its rows and pairwise tests would be mixed with those over every set pooled
        raise ValueError(f"a test set is named {ALL_DATASETS!r}, the name of the rows over "
                         "the pages of every test set of the run: rename it")
    all_sets = datasets + list(memory)
    if not any(d.ids for d in all_sets):  # one empty set among others is a warning
        raise DatasetError(f"{', '.join(names) or 'the run'}: no page with both its HTML "
                           "and its gold text")
    warnings = [w for d in all_sets for w in d.warnings]
    for row, path in spec.predictions.items():
        # A file that cannot be read fails now.
        matched = predicted_texts(read_predictions(Path(path)), all_sets, row, path)
        warnings.extend(matched.warnings)
        if not any(lookup(matched.texts, d.name, page_id) is not None
                   for d in all_sets for page_id in d.ids):
            warnings.append(f"{row}: the prediction file {path} names none of the run's "
                            "pages, so each of its pages is an error")
    served, unknown = served_trainings(spec.served_urls, spec.service_token, infos=infos)
    warnings.extend(unknown)
    spec = spec.model_copy(update={
        "datasets": sources, "total": sum(len(d.ids) for d in all_sets) * len(spec.rows),
        "trained_pages": trained_pages(spec.services, all_sets, served),
        "unknown_training": sorted(s for s, t in served.items() if t is None)})
    run_id = run_id or uuid.uuid4().hex[:12]
    info = RunInfo(id=run_id, datasets=names, services=spec.rows,
                   options={"services": spec.options, "backend": spec.backend,
                            "predictions": spec.predictions,
                            "concurrency": spec.concurrency, "timeout_s": spec.timeout_s,
                            "retries": spec.retries})
    inputs = [page for d in memory for page in d.pages()]
    store.create_run(info, spec.model_dump(mode="json"), warnings, inputs)
    return run_id


def open_source(source: DatasetSource, store: Store | None = None,
                run_id: str | None = None) -> Dataset:
    if source.kind == "folder":
        if not source.html_folder or not source.content_folder:
            raise ValueError(f"{source.name}: a folder test set needs both folders")
        return open_folder(source.name, Path(source.html_folder), Path(source.content_folder),
                           Path(source.feeds_folder) if source.feeds_folder else None,
                           [Path(r) for r in source.roots] if source.roots is not None else None)
    if store is None or run_id is None:
        raise ValueError("stored test sets need the store and the run id")
    return in_memory(source.name, store.inputs(run_id).get(source.name, []))


ProgressFn = Callable[[PageResult], None]


EMPTY_GOLD = "the gold text is empty: every extracted word counts as a false positive"


@dataclass
class _Prepared:
    html: str | None
    ref: PageReference | None
    reason: str | None
    notes: tuple[str, ...] = ()
    """Warnings about a page that is still scored (gold not UTF-8, empty gold)."""
    unscored: bool = False
    """`reason` is an error of scoring (a time limit), not a page to skip."""


def _prepare(page: LabelledPage) -> _Prepared:
    try:
        html = page.html_text()
    except NotHTMLError as exc:
        return _Prepared(None, None, f"the page is not HTML: {exc}")
    notes = page.notes + ((EMPTY_GOLD,) if not page.gold.strip() else ())
    return _Prepared(html, prepare_page(html, page.gold), None, notes)


class PreparedPages:
    """Pages loaded and prepared for scoring once, shared by every service of a run.

    Services move through the test set at their own pace, so the first to reach a
    page prepares it (in a thread) and the others await the same task; the entry
    is dropped when the last service that needs the page is done with it. At most
    `limit` entries are kept: when a slow service lags further behind, the oldest
    entries go and that service prepares its page again, trading a little work for
    bounded memory.
    """

    def __init__(self,
                 load: Callable[[Dataset, str],
                                Coroutine[Any, Any, tuple[LabelledPage, _Prepared]]],
                 needed: dict[tuple[str, str], int], limit: int = 256) -> None:
        self.load = load
        self.needed = dict(needed)
        self.limit = limit
        self.entries: dict[tuple[str, str], asyncio.Task[tuple[LabelledPage, _Prepared]]] = {}

    async def get(self, dataset: Dataset, page_id: str) -> tuple[LabelledPage, _Prepared]:
        key = (dataset.name, page_id)
        entry = self.entries.get(key)
        if entry is None:
            entry = asyncio.create_task(self.load(dataset, page_id))
            self.entries[key] = entry
            while len(self.entries) > self.limit:
                self.entries.pop(next(iter(self.entries)))
        return await entry

    def release(self, dataset_name: str, page_id: str) -> None:
        key = (dataset_name, page_id)
        self.needed[key] = self.needed.get(key, 1) - 1
        if self.needed[key] <= 0:
            self.needed.pop(key, None)
            self.entries.pop(key, None)


class LoweredSwitchInterval:
    """The interpreter's GIL switch interval lowered while runs execute (module
    docstring), and put back as it was when the last run of the process ends, however
    it ends (finished, failed, cancelled). Runs may overlap (the API executes several),
    so they are counted: the first saves the interval, the last restores it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs = 0
        self.saved = sys.getswitchinterval()
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def during_run(self) -> Iterator[None]:
        with self.lock:
            if self.runs == 0:
                self.saved = sys.getswitchinterval()
            self.runs += 1
            sys.setswitchinterval(min(self.saved, self.seconds))
        try:
            yield
        finally:
            with self.lock:
                self.runs -= 1
                if self.runs == 0:
                    sys.setswitchinterval(self.saved)


SWITCH_INTERVAL = LoweredSwitchInterval(GIL_SWITCH_INTERVAL_S)


class PreparingThread:
    """The one thread that prepares pages, with a time limit per call counted from when
    the call starts (not from its wait behind other pages).

    Preparing is pure Python: under the GIL a second thread would not run it any
    sooner, only make it and the event loop take turns more often. A call stuck past
    the limit is left to finish alone in its thread, and the next calls go to a fresh
    one (a thread cannot be stopped)."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.executor = self._new_executor()

    @staticmethod
    def _new_executor() -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="boilerbench-prepare")

    async def run(self, call: Callable[[], Any]) -> Any:
        """`call`'s value, or TimeoutError past the limit."""
        loop = asyncio.get_running_loop()
        while True:
            executor = self.executor
            started: asyncio.Future[None] = loop.create_future()

            def run(started: asyncio.Future[None] = started) -> Any:
                loop.call_soon_threadsafe(_settle, started)
                return call()

            future = loop.run_in_executor(executor, run)
            await asyncio.wait([started, future], return_when=asyncio.FIRST_COMPLETED)
            if future.cancelled():  # queued in a thread that was given up: again
                continue
            try:
                return await asyncio.wait_for(future, self.limit_s)
            except TimeoutError:
                if self.executor is executor:
                    self.executor = self._new_executor()
                    executor.shutdown(wait=False, cancel_futures=True)
                raise

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class ScoringPool:
    """Results scored in worker processes (shared.workers.ProcessPool running
    orchestrator.scoring.scoring_handler), so scoring uses as many cores as it has
    processes, and a page past the time limit has its process killed and replaced.
    Each page's PageReference is pickled once and sent with every result of it, under
    a key of its own; a worker that has the page already (from another service's
    result) uses its own copy and what that copy remembers."""

    def __init__(self, size: int, limit_s: float, timings: RunTimings | None = None,
                 handler: str = "orchestrator.scoring:scoring_handler") -> None:
        self.pool = ProcessPool(handler, "", size, "scoring")
        self.limit_s = limit_s
        self.timings = timings
        self.pickled: weakref.WeakKeyDictionary[PageReference, tuple[int, bytes]] = \
            weakref.WeakKeyDictionary()
        self.keys = itertools.count()

    async def start(self) -> None:
        await self.pool.start()

    async def score(self, ref: PageReference, text: str, blocks: Sequence[Block]
                    ) -> PageScores | str:
        """The result's scores, or why it has none (past the time limit, the process
        died on it). A scoring bug raises, as it would in the orchestrator itself."""
        found = self.pickled.get(ref)
        if found is None:
            found = self.pickled[ref] = (next(self.keys),
                                         pickle.dumps(ref, protocol=pickle.HIGHEST_PROTOCOL))
        key, pickled = found
        work = pickle.dumps((text, block_marks(blocks)), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            meta, reply, _ = await self.pool.call((key, len(pickled)), pickled + work,
                                                  self.limit_s, None)
        except TimeoutError:
            return (f"extract not scored (counted as empty): scoring it took longer than "
                    f"the limit of {self.limit_s:g} s")
        except ConnectionError as exc:
            return f"extract not scored (counted as empty): {exc}"
        if meta[0] != "ok":
            raise RuntimeError(f"scoring failed: {meta[1]}")
        if self.timings is not None:
            self.timings.add("score", meta[1])  # the worker's time, not the queue's
        scores: PageScores = pickle.loads(reply)
        return scores

    async def close(self) -> None:
        await self.pool.close()


WorkItem = tuple[Dataset, str]
"""A page of a test set (dataset, page id) that a row still needs."""


def remaining_work(datasets: Sequence[Dataset], rows: Sequence[str],
                   done: set[tuple[str, str, str]]) -> dict[str, list[WorkItem]]:
    """Per row, the pages it has no stored result for (a resumed run skips the others)."""
    return {row: [(dataset, page_id) for dataset in datasets for page_id in dataset.ids
                  if (dataset.name, page_id, row) not in done]
            for row in rows}


def rows_per_page(work: dict[str, list[WorkItem]]) -> dict[tuple[str, str], int]:
    """How many rows still need each page (PreparedPages drops a page after the last)."""
    needed: dict[tuple[str, str], int] = {}
    for items in work.values():
        for dataset, page_id in items:
            key = (dataset.name, page_id)
            needed[key] = needed.get(key, 0) + 1
    return needed


class RunExecution:
    """One execution of a run's remaining work: every row works through its pages in
    lanes of its own (`concurrency`, or `workers` in process), so a slow or dead
    service never holds up the others; pages are prepared once and shared through
    PreparedPages while rows still need them; each result is scored and stored as it
    comes. The first failure stops every lane: the run is then "failed", unless it was
    cancelled."""

    def __init__(self, store: Store, run_id: str, spec: RunSpec, extractor: Extractor | None,
                 progress: ProgressFn | None, timings: RunTimings | None,
                 predicted: dict[str, dict[str, str]]) -> None:
        self.store, self.run_id, self.spec = store, run_id, spec
        self.extractor, self.progress, self.timings = extractor, progress, timings
        self.predicted = predicted
        """Each prediction row's texts (predicted_texts)."""
        self.preparing = PreparingThread(spec.scoring_time_limit_s)
        self.scoring_pool = ScoringPool(spec.scoring_processes, spec.scoring_time_limit_s,
                                        timings)
        self.failures: list[BaseException] = []
        self.warned: set[tuple[str, str]] = set()
        self.warned_rows: set[str] = set()
        self.cancel_checked = time.monotonic()

    async def execute(self, work: dict[str, list[WorkItem]]) -> None:
        """Every row's lanes to the end; the first failure (a cancel included) stops them
        all and is raised."""
        pages = PreparedPages(self.load_page, rows_per_page(work))
        lanes = self.spec.workers if self.spec.backend == "embedded" else self.spec.concurrency
        tasks = []
        try:
            if work:
                await self.scoring_pool.start()
        except Exception as exc:
            self.failures.append(RuntimeError(f"the scoring processes did not start: {exc}"))
            work = {}
        for row, items in work.items():
            queue = iter(items)  # shared by the row's lanes: each item is taken once
            tasks += [asyncio.create_task(self.lane(row, queue, pages)) for _ in range(lanes)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.preparing.close()
            await self.scoring_pool.close()
        if self.failures:
            failure = self.failures[0]
            if not isinstance(failure, RunCancelledError):
                # Deleted or cancelled meanwhile: that is the news, not what it broke.
                _raise_if_cancelled(self.store, self.run_id)
                self.store.set_status(self.run_id, "failed",
                                      f"{type(failure).__name__}: {failure}")
            raise failure

    async def lane(self, row: str, queue: Iterator[WorkItem], pages: PreparedPages) -> None:
        for dataset, page_id in queue:
            if self.failures:
                return
            try:
                self.check_cancelled()
                page, prepared = await pages.get(dataset, page_id)
                self.warn_once(dataset, page_id, prepared)
                self.record(await self.result(dataset, page, prepared, row))
            except Exception as exc:
                self.failures.append(exc)
                return
            finally:
                pages.release(dataset.name, page_id)

    def check_cancelled(self) -> None:
        """RunCancelledError once the run is "cancelled" or deleted in the store (looked
        up every CANCEL_CHECK_INTERVAL_S)."""
        now = time.monotonic()
        if now - self.cancel_checked >= CANCEL_CHECK_INTERVAL_S:
            self.cancel_checked = now
            _raise_if_cancelled(self.store, self.run_id)

    async def load_page(self, dataset: Dataset, page_id: str) -> tuple[LabelledPage, _Prepared]:
        """A page read and prepared in the preparing thread; past the time limit, a
        stand-in that every row records as an unscored error."""
        def load() -> tuple[LabelledPage, _Prepared]:
            started = time.perf_counter()
            page = dataset.page(page_id)
            prepared = _prepare(page)
            self.add_time("prepare", started)
            return page, prepared

        try:
            loaded: tuple[LabelledPage, _Prepared] = await self.preparing.run(load)
        except TimeoutError:
            return (LabelledPage(dataset.name, page_id, b"", ""),
                    _Prepared(None, None, "not scored: preparing the page took longer than "
                              f"the limit of {self.spec.scoring_time_limit_s:g} s",
                              unscored=True))
        return loaded

    def warn_once(self, dataset: Dataset, page_id: str, prepared: _Prepared) -> None:
        """The run's warnings name a skipped or doubtful page once, not once per row."""
        if (prepared.reason is None and not prepared.notes) \
                or (dataset.name, page_id) in self.warned:
            return
        self.warned.add((dataset.name, page_id))
        reasons = [prepared.reason] if prepared.reason else list(prepared.notes)
        self.store.add_warnings(self.run_id, [f"{dataset.name}/{page_id}: {reason}"
                                              for reason in reasons])

    def warn_other_algorithm(self, row: str, outcome: Outcome) -> None:
        """A row whose service answers as another algorithm (a URL given for the wrong
        service, or a container swapped in) is scored all the same, with a warning once."""
        service = service_of(row)
        if outcome.algorithm in (None, service) or row in self.warned_rows:
            return
        self.warned_rows.add(row)
        self.store.add_warnings(self.run_id, [
            f"{row}: the service at {self.spec.url(service)} answers as "
            f"{outcome.algorithm!r}, not {service!r}; its figures are that algorithm's"])

    def service_options(self, dataset: Dataset, page: LabelledPage, row: str
                        ) -> dict[str, Any] | str:
        """The options a row's request carries for this page, or why the page is skipped
        for it: a service that needs more than the HTML gets it from its registry entry's
        input hook (rss: the page's feed)."""
        try:
            return {**self.spec.options.get(row, {}), **page_options(row, page, dataset)}
        except MissingInputError as missing:
            return str(missing)

    def predicts(self, row: str, dataset: Dataset, page: LabelledPage) -> bool:
        """Whether the row is a prediction file with a text for the page."""
        return row in self.predicted and lookup(self.predicted[row], dataset.name,
                                                page.id) is not None

    async def outcome(self, row: str, html: str, dataset: Dataset, page: LabelledPage,
                      options: dict[str, Any]) -> Outcome:
        """The row's extract of the page: from its prediction file, or its service."""
        if row in self.predicted:
            text = lookup(self.predicted[row], dataset.name, page.id)
            if text is None:
                return Outcome(error=MISSING)
            # A page that failed in the run that wrote the file fails again here.
            return Outcome(error=text.error) if isinstance(text, ErrorText) else Outcome(text)
        if self.extractor is None:
            raise RuntimeError("execute_run needs an extractor for live services")
        return await self.extractor.extract(row, html, options)

    async def result(self, dataset: Dataset, page: LabelledPage, prepared: _Prepared,
                     row: str) -> PageResult:
        """One row's result for one page: skipped, an error (scored as empty output where
        the page could be scored) or its scored extract."""
        base = {"run_id": self.run_id, "dataset": dataset.name, "page_id": page.id,
                "service": row}
        if prepared.unscored:
            return PageResult(**base, status="error", error=prepared.reason)
        if prepared.reason is not None or prepared.ref is None or prepared.html is None:
            return PageResult(**base, status="skipped", error=prepared.reason)
        options = self.service_options(dataset, page, row)
        if isinstance(options, str):
            # A prediction file's text is scored whatever the service would need; a page
            # it lacks is skipped where the service would skip it, so outputs/ of a run
            # score as the run did.
            if not self.predicts(row, dataset, page):
                return PageResult(**base, status="skipped", error=options)
            options = {}
        outcome = await self.outcome(row, prepared.html, dataset, page, options)
        if self.timings is not None:
            self.timings.add_outcome(outcome)
        self.warn_other_algorithm(row, outcome)
        ref = prepared.ref
        if outcome.error is not None:  # empty output: scored at once, here
            started = time.perf_counter()
            empty = score_empty(ref)
            self.add_time("score", started)
            return PageResult(**base, status="error", error=outcome.error, scores=empty)
        scores = await self.scoring_pool.score(ref, outcome.text, outcome.blocks)
        if isinstance(scores, str):  # an extract that could not be scored counts as empty
            return PageResult(**base, status="error", elapsed_ms=outcome.extract_ms,
                              text=outcome.text, error=scores, scores=score_empty(ref))
        # The service's own figure (its processing, not the queue or the network), so
        # algorithms compare alike over HTTP and in-process; the round trip otherwise.
        elapsed = outcome.extract_ms if outcome.extract_ms is not None else outcome.elapsed_ms
        return PageResult(**base, status="ok", elapsed_ms=elapsed, text=outcome.text,
                          scores=scores)

    def record(self, result: PageResult) -> None:
        """Store one result (its own transaction) and report it."""
        started = time.perf_counter()
        self.store.add_result(result)
        self.add_time("store", started)
        if self.progress is not None:
            self.progress(result)

    def add_time(self, phase: str, started: float) -> None:
        if self.timings is not None:
            self.timings.add(phase, time.perf_counter() - started)


def _raise_if_cancelled(store: Store, run_id: str) -> None:
    status = store.status(run_id)
    if status is None:
        raise RunCancelledError(f"run {run_id} was deleted")
    if status == "cancelled":
        raise RunCancelledError(f"run {run_id} was cancelled")


def _start_run(store: Store, run_id: str, urls: dict[str, str] | None) -> RunSpec:
    """The run's spec (with `urls` over the stored ones), its status set to running;
    RunCancelledError for a cancelled run, or one deleted while it waited for a slot."""
    _raise_if_cancelled(store, run_id)
    try:
        spec = RunSpec.model_validate(store.spec(run_id))
        store.set_status(run_id, "running")
    except KeyError:  # deleted since the check above
        raise RunCancelledError(f"run {run_id} was deleted") from None
    if urls:
        spec = spec.model_copy(update={"urls": {**spec.urls, **urls}})
    return spec


async def execute_run(store: Store, run_id: str, progress: ProgressFn | None = None,
                      urls: dict[str, str] | None = None,
                      extractor: Extractor | None = None,
                      timings: RunTimings | None = None) -> list[PageResult]:
    """Run (or resume) a recorded run to the end; returns all its page results.

    `urls` replaces the stored service URLs (a resumed run of a stack that is gone).
    `extractor` replaces the one the spec's backend makes (it is started, not closed).
    `timings`, when given, is filled with where the time went (RunTimings).
    The run ends "finished" even when services fail; "failed" only when the test set
    itself cannot be read.
    """
    spec = _start_run(store, run_id, urls)
    own_extractor = extractor is None and bool(spec.services)
    try:  # a test set or a prediction file moved away since the run was recorded
        datasets = [open_source(source, store, run_id) for source in spec.datasets]
        predicted = {row: predicted_texts(read_predictions(Path(path)), datasets, row, path).texts
                     for row, path in spec.predictions.items()}
        execution = RunExecution(store, run_id, spec, extractor, progress, timings, predicted)
    except Exception as exc:
        store.set_status(run_id, "failed", f"{type(exc).__name__}: {exc}")
        raise
    work = remaining_work(datasets, spec.rows, store.done_keys(run_id))
    if own_extractor:
        extractor = execution.extractor = make_extractor(spec)
    with SWITCH_INTERVAL.during_run():
        try:
            if extractor is not None:
                await extractor.start()
            await execution.execute(work)
        finally:
            if own_extractor and extractor is not None:
                await extractor.aclose()
    _raise_if_cancelled(store, run_id)
    results = store.results(run_id)
    writing = asyncio.ensure_future(asyncio.to_thread(
        write_run_outputs, store, run_id, Path(spec.output_folder), results))
    try:
        await asyncio.shield(writing)
        store.set_status(run_id, "finished")
    except asyncio.CancelledError:
        # The thread cannot be stopped: whoever cancelled (a deletion) waits until its
        # files are written, so that it removes them after, not before.
        await asyncio.gather(writing, return_exceptions=True)
        raise
    except KeyError:
        if store.status(run_id) is not None:
            raise
        # Deleted by another process while the files were written: they go too.
        shutil.rmtree(run_output_dir(Path(spec.output_folder), run_id), ignore_errors=True)
        raise RunCancelledError(f"run {run_id} was deleted") from None
    return results


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def run_summary(results: Sequence[PageResult], spec: RunSpec) -> Summary:
    """A run's figures as each of its tables shows them: ranked as the run asks, the
    prediction files, each row's options and the pages its model was trained on known
    (they decide the in-sample flags, with the services whose model is unknown)."""
    return ranked(summarize(results, spec.predictions, spec.options, spec.trained_pages,
                            spec.unknown_training), spec.rank_by)


def run_output_dir(output_folder: Path, run_id: str) -> Path:
    return output_folder / run_id


def write_run_outputs(store: Store, run_id: str, output_folder: Path,
                      results: list[PageResult]) -> Path:
    """results.json, pages.csv, summary.md and report.html of a run (orchestrator.report)."""
    from orchestrator.report import write_outputs

    info = store.run(run_id)
    if info is None:
        raise KeyError(run_id)
    # Written when every page is done, just before the store marks the run finished.
    info = info.model_copy(update={"status": "finished"})
    warnings = store.details(run_id)["warnings"]
    if warnings:  # unpaired files and unusable pages travel with the figures
        info = info.model_copy(update={"options": {**info.options, "warnings": warnings}})
    spec = RunSpec.model_validate(store.spec(run_id))
    sets: dict[str, Dataset] = {}
    for source in spec.datasets:
        with contextlib.suppress(Exception):  # the report goes out without its diffs then
            sets[source.name] = open_source(source, store, run_id)

    def gold(dataset: str, page_id: str) -> str | None:
        found = sets.get(dataset)
        return found.page(page_id).gold if found is not None else None

    out_dir = run_output_dir(output_folder, run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_outputs(out_dir, info, results, run_summary(results, spec), gold, spec.rank_by)
    write_predictions(out_dir, results)
    return out_dir
