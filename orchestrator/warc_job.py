"""`boilerbench extract --warc`: one service's text for every HTML response of a crawl.

Each page goes through shared.answer.answer_extract, the code every service runs on an
/extract request with an HTML body: the project's decoder, the algorithm's options
model, its extractor. In-process that happens in a pool of worker processes
(shared.workers, the services' own pool, so a page past the time limit has its worker
killed and costs that page only); with `--url` a running service does it; on Ray
(orchestrator.warc_ray) the cluster's worker processes do.

Resuming: each row is written and flushed as its page completes, so a killed job
loses at most the pages in flight. A new run over the same output first reads the
record ids already there (cutting off a last line torn by the kill) and skips them.
Beside the output, `<out>.job.json` (in a folder of shards, `job.json`) records the
service, options and blocks setting that wrote it: a job asking for another text is
refused there instead of leaving the old rows as if they were its own.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import aiohttp
import orjson
from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TextColumn
from rich.table import Table
from rich.text import Text

from orchestrator.warc import OddRecord, OtherRecord, WarcItem, WarcPage, read_warc
from shared.answer import ServiceError, finish_reply, page_query, reply_text_json
from shared.contract import bearer_header
from shared.registry import get_service
from shared.workers import (
    ExtractionFailedError,
    ExtractionTimeoutError,
    PoolBusyError,
    WorkerPool,
)

Row = dict[str, Any]
# How often a service that cannot be reached is tried again before the job stops.
_HTTP_ATTEMPTS = 3
# The error codes a service answers for the worker pool's failures (shared.service),
# so a row's error reads the same in-process and with --url.
_POOL_ERRORS: dict[type[Exception], str] = {ExtractionTimeoutError: "timeout",
                                            PoolBusyError: "busy",
                                            ExtractionFailedError: "extraction_failed"}


class JobAbortedError(Exception):
    """The job cannot go on (a service out of reach); what was written stays."""


@dataclass(frozen=True)
class WarcJob:
    """What `boilerbench extract --warc` was asked to do."""

    paths: list[Path]
    service: str
    out: Path
    options: dict[str, str] = field(default_factory=dict)
    blocks: bool = False
    workers: int = 1
    url: str | None = None
    time_limit_s: float = 10.0
    shard_rows: int = 10_000
    token: str | None = field(default=None, repr=False)  # the service's bearer token


@dataclass
class Tally:
    """What the job met: pages written and failed, records skipped and why."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # Records of other types (warcinfo, request, revisit, ...) by type.
    other_types: Counter[str] = field(default_factory=Counter)
    # When the first and the last row were written (time.monotonic()): the steady
    # rate leaves out the start-up of the workers or the cluster.
    first_row_at: float | None = None
    last_row_at: float | None = None

    def odd(self, record: OddRecord, path: Path) -> None:
        self._count(record.kind, path, record.uri or record.record_id, record.detail)

    def cut_short(self, page: WarcPage, path: Path) -> None:
        """A page whose body is cut short: it gets its row all the same, and the report
        says how many such rows there are, as the row has no field to say so."""
        self._count("pages cut short", path, page.uri or page.record_id, page.truncated or "")

    def _count(self, kind: str, path: Path, name: str | None, detail: str) -> None:
        self.counts[kind] += 1
        found = self.examples.setdefault(kind, [])
        if len(found) < 3:
            found.append(f"{path.name}: {name or '(no id)'}: {detail}")

    def other(self, record: OtherRecord) -> None:
        self.counts["other record types"] += 1
        self.other_types[record.record_type] += 1

    def row(self, row: Row) -> None:
        self.last_row_at = time.monotonic()
        if self.first_row_at is None:
            self.first_row_at = self.last_row_at
        self.counts["written"] += 1
        if row["error"] is not None:
            self.counts["extraction errors"] += 1

    def records_per_second(self) -> float | None:
        """Rows per second from the first row to the last (None under two rows)."""
        if self.first_row_at is None or self.last_row_at is None \
                or self.last_row_at <= self.first_row_at:
            return None
        return (self.counts["written"] - 1) / (self.last_row_at - self.first_row_at)


def page_row(page: WarcPage, reply: Row, blocks: bool) -> Row:
    """The output row of one page from its reply (or its error)."""
    row: Row = {"record_id": page.record_id, "uri": page.uri, "date": page.date,
                "text": reply.get("text"), "elapsed_ms": reply.get("elapsed_ms"),
                "error": reply.get("error")}
    if blocks:
        row["blocks"] = reply.get("blocks")
    return row


# --- output ------------------------------------------------------------------------


class RowSink(Protocol):
    def done_ids(self) -> set[str]: ...

    def write(self, row: Row) -> None: ...

    def close(self) -> None: ...


def _read_jsonl_ids(path: Path) -> set[str]:
    """Record ids of a JSONL file's rows, read line by line. A kill can tear only the
    last line, which then has no newline: such a line that is no row is cut off, so
    the file takes appended rows cleanly (one that is a whole row gets its newline).
    Any other line that is no row is not a kill's doing, and is refused (ValueError)."""
    ids: set[str] = set()
    if not path.exists():
        return ids
    good = 0
    with path.open("r+b") as stream:
        for number, line in enumerate(stream, 1):
            torn = not line.endswith(b"\n")
            try:
                row = orjson.loads(line)
                ids.add(str(row["record_id"]))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                if not torn:
                    raise ValueError(f"{path}, line {number}, is not an output row: "
                                     "fix or remove it, then run again") from None
                stream.truncate(good)
                break
            good += len(line)
            if torn:
                stream.write(b"\n")
    return ids


class JsonlSink:
    """Rows appended to one JSONL file, each flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stream: IO[bytes] | None = None

    def done_ids(self) -> set[str]:
        return _read_jsonl_ids(self.path)

    def write(self, row: Row) -> None:
        if self._stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = self.path.open("ab")
        self._stream.write(orjson.dumps(row) + b"\n")
        self._stream.flush()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class ShardSink:
    """A folder of JSONL shards (`part-00000.jsonl`, ...), a new one every `shard_rows`
    rows; a resumed job starts new shards after the ones there."""

    def __init__(self, folder: Path, shard_rows: int) -> None:
        self.folder = folder
        self.shard_rows = shard_rows
        self._current: JsonlSink | None = None
        self._rows = 0
        self._next = 0

    def done_ids(self) -> set[str]:
        ids: set[str] = set()
        for shard in sorted(self.folder.glob("part-*.jsonl")):
            ids |= _read_jsonl_ids(shard)
            self._next = max(self._next, int(shard.stem.removeprefix("part-")) + 1)
        return ids

    def write(self, row: Row) -> None:
        if self._current is None or self._rows >= self.shard_rows:
            self.close()
            self._current = JsonlSink(self.folder / f"part-{self._next:05d}.jsonl")
            self._next += 1
            self._rows = 0
        self._current.write(row)
        self._rows += 1

    def close(self) -> None:
        if self._current is not None:
            self._current.close()


class ParquetSink:
    """A Parquet file. Parquet cannot be appended to row by row, so rows go to a JSONL
    journal beside it (`OUT.parquet.partial.jsonl`) as they complete; at the end the
    journal's rows join the file's (rewritten whole, through a temporary file) and the
    journal goes."""

    def __init__(self, path: Path, blocks: bool) -> None:
        self.path = path
        self.blocks = blocks
        self.journal = JsonlSink(path.with_name(path.name + ".partial.jsonl"))

    def done_ids(self) -> set[str]:
        """Ids in the journal and the file. A file Arrow cannot read rows from is
        refused in one line naming it (ValueError), not in Arrow's many-line words."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids = self.journal.done_ids()
        if self.path.exists():
            try:
                column = pq.read_table(self.path, columns=["record_id"]).column("record_id")
            except (pa.ArrowException, OSError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ValueError(f"{self.path} is not a Parquet file of output rows "
                                 f"({reason}): name another --out, or remove it") from None
            ids |= {str(i) for i in column.to_pylist()}
        return ids

    def write(self, row: Row) -> None:
        self.journal.write(row)

    def close(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.journal.close()
        if not self.journal.path.exists():
            return
        rows = [orjson.loads(line) for line in self.journal.path.read_bytes().splitlines()]
        if self.path.exists():  # a kill after the last merge's file, before its journal went
            written = pq.read_table(self.path)
            there = {str(i) for i in written.column("record_id").to_pylist()}
            rows = [row for row in rows if str(row["record_id"]) not in there]
            table = pa.concat_tables(
                [written, pa.Table.from_pylist(rows, schema=row_schema(self.blocks))])
        else:
            table = pa.Table.from_pylist(rows, schema=row_schema(self.blocks))
        _write_parquet(table, self.path)
        self.journal.path.unlink()


def _write_parquet(table: Any, path: Path) -> None:
    """The table as the Parquet file at `path`, through a temporary file beside it, so a
    kill leaves the old file or the new one, never a part."""
    import pyarrow.parquet as pq

    partial = path.with_name(path.name + ".tmp")
    pq.write_table(table, partial)
    partial.replace(path)


def write_empty_output(out: Path, blocks: bool) -> None:
    """OUT with no rows where there is none yet, so that a crawl without HTML pages still
    leaves what the next step of a pipeline reads: an empty JSONL file, a Parquet file
    of no rows with the rows' schema, a folder of no shards."""
    if out.exists():
        return
    if not _is_file_output(out):
        out.mkdir(parents=True)
    elif out.suffix.lower() == ".jsonl":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch()
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_parquet(row_schema(blocks).empty_table(), out)


def row_schema(blocks: bool) -> Any:
    """The Arrow schema of the output rows."""
    import pyarrow as pa

    fields = [("record_id", pa.string()), ("uri", pa.string()), ("date", pa.string()),
              ("text", pa.string()), ("elapsed_ms", pa.float64()), ("error", pa.string())]
    if blocks:
        block = pa.struct([("text", pa.string()), ("is_content", pa.bool_()),
                           ("score", pa.float64()), ("path", pa.string()),
                           ("label", pa.string())])
        fields.append(("blocks", pa.list_(block)))
    return pa.schema(fields)


def open_sink(out: Path, blocks: bool, shard_rows: int, shards_only: bool = False) -> RowSink:
    """The sink OUT names: a `.jsonl` or `.parquet` file, or else a folder of shards."""
    if _is_file_output(out):
        if shards_only:
            raise ValueError(f"{out} is a file; this job writes shards: name a folder")
        return JsonlSink(out) if out.suffix.lower() == ".jsonl" else ParquetSink(out, blocks)
    return ShardSink(out, shard_rows)


def _is_file_output(out: Path) -> bool:
    """Whether OUT names one file (.jsonl, .parquet) rather than a folder of shards."""
    return out.suffix.lower() in (".jsonl", ".parquet") and not out.is_dir()


# --- reading -----------------------------------------------------------------------


def pending_pages(job: WarcJob, done: set[str], tally: Tally) -> Iterator[WarcPage]:
    """The job's HTML pages not written yet, in file order; everything else counted.
    `done` holds the ids OUT had before this run: a page among them is already written.
    A page whose id came earlier in this run's input is an odd record (`duplicate_id`):
    its row would share the id with another, and a resumed run could not tell them apart.
    An id met moves from `done` to the run's own set, so none is held twice."""
    seen: set[str] = set()
    for path in job.paths:
        item: WarcItem
        for item in read_warc(path):
            if isinstance(item, WarcPage):
                if item.record_id in seen:
                    tally.odd(OddRecord("duplicate_id", item.record_id,
                                        f"a record earlier in the input has its id, "
                                        f"{item.record_id}", item.uri), path)
                    continue
                seen.add(item.record_id)
                if item.record_id in done:
                    done.discard(item.record_id)
                    tally.counts["already written"] += 1
                    continue
                tally.counts["HTML pages"] += 1
                if item.truncated:
                    tally.cut_short(item, path)
                yield item
            elif isinstance(item, OddRecord):
                tally.odd(item, path)
            elif isinstance(item, OtherRecord):
                tally.other(item)


# --- running -----------------------------------------------------------------------


class RecordsPerSecondColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{task.speed or 0.0:,.1f} records/s", style="progress.data.speed")


def job_progress(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"),
                    TextColumn("{task.completed:,.0f} records"), RecordsPerSecondColumn(),
                    TextColumn("{task.elapsed:,.0f} s"), console=console)


def job_file(out: Path) -> Path:
    """Where the settings that wrote `out` are kept (module docstring)."""
    return out.with_name(f"{out.name}.job.json") if _is_file_output(out) else out / "job.json"


def is_output_file(path: Path, out: Path) -> bool:
    """Whether `path` is OUT or one of the job's own files beside it (its settings, a
    Parquet file's journal and temporary file, a folder's shards): an input glob that
    matches one has matched no WARC."""
    path, out = path.resolve(), out.resolve()
    if not _is_file_output(out):
        return path.is_relative_to(out)
    own = {out.name, job_file(out).name, f"{out.name}.partial.jsonl", f"{out.name}.tmp"}
    return path.parent == out.parent and path.name in own


def claim_output(job: WarcJob, record: bool = True) -> None:
    """Record the job's settings beside its output (with `record`; else only check),
    or ValueError where rows of other settings are there already, or where OUT cannot
    be written."""
    settings = {"service": job.service, "options": job.options, "blocks": job.blocks}
    path = job_file(job.out)
    try:
        if path.is_file():
            recorded = orjson.loads(path.read_bytes())
            if recorded != settings:
                raise ValueError(f"{job.out} holds the rows of another job ({recorded}); "
                                 "name another --out, or remove it to start again")
            return
        if job.out.exists() and not _is_file_output(job.out) and not job.out.is_dir():
            raise ValueError(f"{job.out} is a file but not .jsonl or .parquet: name one of "
                             "those, or a folder for shards")
        if record:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(orjson.dumps(settings))
    except FileExistsError:  # mkdir met a file where OUT's path needs a folder
        raise ValueError(f"cannot write to {job.out}: a part of its path is a file, "
                         "not a folder") from None
    except OSError as exc:
        raise ValueError(f"cannot write to {job.out}: {exc.strerror or exc}") from None


def run_job(job: WarcJob, console: Console, ray_address: str | None = None,
            on_row: Callable[[Row], None] | None = None) -> Tally:
    """Run the job to the end (or until it cannot go on); return what it met.
    `on_row` is called after each row is written (benchmarks time the rows with it)."""
    sink = open_sink(job.out, job.blocks, job.shard_rows, shards_only=ray_address is not None)
    claim_output(job, record=False)  # before the sink reads (and may mend) what is there
    tally = Tally()
    done = sink.done_ids()
    pending = pending_pages(job, done, tally)
    first = next(pending, None)
    if first is None:  # nothing left to do: no workers or cluster started for it
        claim_output(job)
        sink.close()
        write_empty_output(job.out, job.blocks)
        return tally
    claim_output(job)
    pages = itertools.chain([first], pending)
    try:
        with job_progress(console) as progress:
            task = progress.add_task(f"{job.service} ", total=None)

            def write(row: Row) -> None:
                sink.write(row)
                tally.row(row)
                progress.advance(task)
                if on_row is not None:
                    on_row(row)

            if ray_address is not None:
                from orchestrator.warc_ray import run_on_ray

                run_on_ray(job, ray_address, pages, write)
            else:
                asyncio.run(_run_local(job, pages, write))
    finally:
        sink.close()
    return tally


async def _run_local(job: WarcJob, pages: Iterator[WarcPage], write: Callable[[Row], None]
                     ) -> None:
    """Every page through the worker pool or the service, `job.workers` at a time."""
    extract: Callable[[WarcPage], Coroutine[Any, Any, Row]]
    pool: WorkerPool | None = None
    session: aiohttp.ClientSession | None = None
    if job.url is None:
        pool = WorkerPool(get_service(job.service).module, job.workers)
        await pool.start()
        extract = _pool_extract(job, pool)
    else:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), headers=bearer_header(job.token),
            timeout=aiohttp.ClientTimeout(total=job.time_limit_s + 30.0))
        extract = _http_extract(job, session)
    slots = asyncio.Semaphore(job.workers)
    running: set[asyncio.Task[None]] = set()
    failure: list[BaseException] = []

    async def one(page: WarcPage) -> None:
        try:
            write(page_row(page, await extract(page), job.blocks))
        except JobAbortedError as exc:
            failure.append(exc)
        finally:
            slots.release()

    try:
        for page in pages:
            await slots.acquire()
            if failure:
                break
            task = asyncio.create_task(one(page))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    finally:
        # Stopped (Ctrl-C): the pages in flight are abandoned before their workers
        # go, not written as the errors the workers' ends would make of them; a
        # re-run does them again.
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if pool is not None:
            await pool.close()
        if session is not None:
            await session.close()
    if failure:
        raise failure[0]


def _pool_extract(job: WarcJob, pool: WorkerPool) -> Callable[[WarcPage], Coroutine[Any, Any, Row]]:
    async def extract(page: WarcPage) -> Row:
        started = time.perf_counter()
        try:
            result = await pool.run(page.body, page.content_type,
                                    page_query(page.uri, job.options),
                                    job.time_limit_s, blocks=job.blocks)
        except ServiceError as exc:
            return {"error": f"{exc.error}: {exc.detail}"}
        except tuple(_POOL_ERRORS) as exc:
            code = next(code for kind, code in _POOL_ERRORS.items() if isinstance(exc, kind))
            return {"error": f"{code}: {exc}"}
        elapsed = (time.perf_counter() - started) * 1000
        if not job.blocks:
            # The text's JSON goes into the row as the worker encoded it: no parsing
            # of the reply and no second encoding of the text in this process, which
            # shares the cores with the workers.
            return {"text": orjson.Fragment(reply_text_json(result.partial_reply)),
                    "elapsed_ms": round(max(elapsed, 0.0), 3)}
        reply: Row = orjson.loads(finish_reply(result.partial_reply, elapsed))
        return reply

    return extract


def _http_extract(job: WarcJob, session: aiohttp.ClientSession
                  ) -> Callable[[WarcPage], Coroutine[Any, Any, Row]]:
    """Pages through the service at job.url. aiohttp, not httpx: it reads the reply while
    the body is still being sent, as a client should (RFC 9112, section 9.5), so a page
    the service refuses early (413, past its max_body_bytes) gets the service's error
    instead of a connection it closed, which would look like a service out of reach."""
    endpoint = f"{(job.url or '').rstrip('/')}/extract"

    async def extract(page: WarcPage) -> Row:
        problem = ""
        for attempt in range(_HTTP_ATTEMPTS):
            if attempt:
                await asyncio.sleep(0.5 * 2 ** attempt)
            try:
                async with session.post(endpoint, data=page.body,
                                        params=page_query(page.uri, job.options),
                                        headers={"content-type": page.content_type}) as reply:
                    status, content = reply.status, await reply.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"cannot reach {endpoint}: {type(exc).__name__}: {exc}".rstrip(": ")
                continue
            if status in (401, 503):  # not ready, or no token: not the page
                problem = f"{endpoint} answered {status}: {content[:200].decode(errors='replace')}"
                continue
            try:
                body = orjson.loads(content)
            except orjson.JSONDecodeError:
                body = None
            if not isinstance(body, dict):
                body = {"error": "bad_reply", "detail": content[:200].decode(errors="replace")}
            if status != 200:
                return {"error": f"{body.get('error')}: {body.get('detail')}"}
            return body
        raise JobAbortedError(problem)

    return extract


def summary_table(job: WarcJob, tally: Tally, seconds: float) -> Table:
    """The end-of-job report: counts, and a few examples of each odd kind."""
    rate = tally.records_per_second()
    none = not tally.counts["HTML pages"] and not tally.counts["already written"]
    table = Table(title=f"{job.service} over {len(job.paths)} WARC file(s) in {seconds:,.1f} s"
                  + (f", {rate:,.1f} records/s after the first" if rate else "")
                  + (f": no HTML pages, so {job.out.name} holds no rows" if none else ""))
    table.add_column("records")
    table.add_column("count", justify="right")
    # Folded, not cut: an example is there to find the record by.
    table.add_column("examples", overflow="fold")
    order = ("HTML pages", "written", "extraction errors", "pages cut short",
             "already written", "not_ok", "not_html", "truncated", "malformed", "too_large",
             "duplicate_id", "other record types")
    examples = {**tally.examples, "other record types": [", ".join(
        f"{name} {count:,}" for name, count in tally.other_types.most_common())]}
    for key in order:
        table.add_row(key.replace("_", " "), f"{tally.counts[key]:,}",
                      "\n".join(examples.get(key, [])))
    return table
