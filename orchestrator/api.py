"""The orchestrator's HTTP API (port 8000): start runs, follow them, fetch figures and reports.

    POST /runs                 202 {"id": ...}: JSON {"dataset": path | [paths] on the
                               server's allowed roots (or a root's own name:
                               "sample", the built-in sample), or "pages": {"name",
                               "pages": [{id, html, gold, feed?}]} or just the list
                               of pages,
                               "services": [...], "options": {...},
                               "backend": "http" | "embedded" (no services needed)}
                               or multipart: an `archive` file (zip/tar of html/ + content/)
                               with the JSON body's choices as optional text fields:
                               `services` (comma list), `options` (JSON), `backend`
    GET  /runs                 every run with its progress counts
    GET  /runs/{id}            status, progress per service, warnings
    GET  /runs/{id}/results    the figures (statistics summary) of the results so far
    GET  /runs/{id}/report     report.html of a finished run
    GET  /runs/{id}/pages/{page}  one page of a run: its gold text and, per row, the
                               extract, its scores and the missed and extra words
                               (?dataset=NAME when several test sets hold the page id)
    DELETE /runs/{id}          cancel the run if this server has it queued or running,
                               and delete it with its stored pages, results, outputs
                               and uploaded files (409 while another live process, a
                               `boilerbench run` or another server, holds it)
    GET  /health

At most `max_running_runs` runs execute at once; later ones wait as "pending",
and past `max_queued_runs` waiting, POST /runs is refused with 429 and a
Retry-After. An uploaded archive is unpacked in a worker thread, one at a time,
into a folder of its own under `uploads` (limits counted on the real unpacked
bytes, see orchestrator/testsets.py), which the run reads from and which is
deleted with it; its pages are not copied into the store.

Errors are the contract's ErrorReply, `{"error", "detail"}`, like the services'. A
store that cannot be used is the server's trouble, not the request's: 507
`store_full` when the disk is full, else 503 (`store_locked` with a Retry-After
while another process holds it; `store_unavailable` when it is damaged, read-only,
another program's or of a newer boilerbench); what was committed before stays.
The service URLs come from the configuration only (never from a request), so no
request makes the server fetch an address of the caller's choosing. Every service a
run calls over HTTP, at the URL the configuration gives or else at its registry port
(or a `port_base` stack's), must say it is that service on its /info before the run
is accepted (else 503): another service there would be scored under its name.
On start the server resumes runs left pending or running by a previous process
(same store), taking each over in one transaction (Store.claim_run), so a `run
--resume` at the same moment does not run it too; and it removes the uploads a
killed server had unpacked without recording their run (_remove_abandoned_uploads).
A run that a server of another host on the same store file holds (its heartbeat
fresh, orchestrator/store.py) stays that server's: this one does not look again,
and once that server has ended the run shows `interrupted` and is resumed by the
next start on the store or by `run --resume`, from its stored results.
A stop (SIGTERM) takes seconds, not as long as the work in hand: the requests in hand
get STOP_GRACE_S (the setting stop_grace_s), then those still going are answered 503
`shutting_down` (ApiApp); the runs going are cancelled and waited for STOP_RUNS_WAIT_S
at most, and left, as a killed server leaves them, for the next start to resume.

API settings come from the environment, prefix BOILERBENCH_API_ (host, port,
token, max_body_bytes, allowed_roots, config, max_running_runs, max_queued_runs,
max_unpacked_bytes, uploads, stop_grace_s; the HTTP limits of shared/serving.py:
max_header_bytes, request_timeout_s, max_connections, linger_bytes); run defaults (store, output
folder, service URLs, concurrency...) from the configuration file named by
BOILERBENCH_API_CONFIG and the BOILERBENCH_* variables (orchestrator/config.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_args

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.datastructures import FormData, UploadFile

from orchestrator.config import ConfigError, RunConfig, load_config
from orchestrator.launcher import StackError, check_services
from orchestrator.pagediff import page_diff
from orchestrator.runner import (
    Backend,
    DatasetSource,
    RunCancelledError,
    RunSpec,
    create_run,
    execute_run,
    folder_source,
    open_source,
    run_output_dir,
    run_summary,
)
from orchestrator.service_options import OptionsError, check_called, check_options
from orchestrator.store import (
    UNFINISHED,
    UPLOAD_ABANDONED_S,
    RunBusyError,
    Store,
    StoreError,
    delete_run_with_folders,
    held_state,
    resume_hint,
)
from orchestrator.testsets import (
    SAMPLE_DIR,
    ArchiveLimits,
    Dataset,
    DatasetError,
    DatasetIn,
    archive_dataset_folders,
    archive_set_name,
    unpack_archive,
)
from shared.answer import ServiceError, json_text, validation_message
from shared.contract import ErrorReply
from shared.datasets import datasets_root
from shared.openapi import document_bodies, install_offline_docs
from shared.registry import SERVICES, check_row
from shared.service import (
    Message,
    Receive,
    Scope,
    Send,
    TokenGuardedApp,
    error_response,
    install_error_handlers,
    json_response,
    read_limited,
    send_error,
)
from shared.serving import SHUTDOWN_GRACE_S

# Retry-After of a 429: about the time a run of the sample set takes.
RETRY_AFTER_S = 30
# How long a stop waits for the requests in hand (a run's figures take seconds to read
# where it has thousands of results); those still going are answered 503 (ApiApp).
STOP_GRACE_S = 2
# How long a stop then waits for the runs going to stop (their worker processes closed);
# a run still stopping is left to resume, its results stored page by page.
STOP_RUNS_WAIT_S = 2.0
log = logging.getLogger("boilerbench.orchestrator")


class ApiSettings(BaseSettings):
    """Settings of the orchestrator server (environment, prefix BOILERBENCH_API_)."""

    model_config = SettingsConfigDict(env_prefix="BOILERBENCH_API_", extra="ignore")

    host: str = Field("127.0.0.1", description="Bind address; containers set 0.0.0.0.")
    port: int = Field(8000, description="Listen port.")
    token: str | None = Field(None, description="If set, every request needs this bearer token.")
    max_body_bytes: int = Field(256 * 1024 * 1024, ge=1, description="Larger bodies get 413.")
    allowed_roots: list[Path] = Field(
        default_factory=lambda: [SAMPLE_DIR, datasets_root()],
        description="Folders under which POST /runs may name dataset paths (JSON list).")
    config: Path | None = Field(None, description="A key:value; configuration file of run "
                                                  "defaults.")
    resume: bool = Field(True, description="Resume unfinished runs of the store on start.")
    max_running_runs: int = Field(2, ge=1, description="Runs executed at once; later ones "
                                                       "wait (pending).")
    max_queued_runs: int = Field(100, ge=0, description="Runs waiting at most; past it "
                                                        "POST /runs gets 429.")
    max_unpacked_bytes: int = Field(512 * 1024 * 1024, ge=1,
                                    description="An upload may unpack to this many bytes.")
    uploads: Path | None = Field(None, description="Folder of unpacked uploads; default: "
                                                   "`uploads` beside the store.")
    stop_grace_s: float = Field(
        STOP_GRACE_S, ge=0, allow_inf_nan=False, description="A stop (SIGTERM) waits this "
        "long for the requests in hand; those still going then get 503 shutting_down.")

    @field_validator("token")
    @classmethod
    def _empty_token_means_none(cls, value: str | None) -> str | None:
        """BOILERBENCH_API_TOKEN= (set but empty) means no token, as for the services."""
        return value or None


class RunChoices(BaseModel):
    """How a run is made, whichever way its test sets come: the fields of a JSON body
    and of an upload's form alike, so both are checked by one model."""

    model_config = ConfigDict(extra="forbid")

    services: list[str] | None = Field(None, description=(
        "Rows to run: service names, or name@label for another row of that service "
        "called with its own options (two settings side by side)."))
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "Options per row (a service's name or name@label)."))
    backend: Backend | None = Field(None, description=(
        "`embedded`: the extractors run in worker processes of the server, so no "
        "service needs to run; `http`: the services are called over HTTP. Default: "
        "the server's configured mode (`embedded` for mode embedded, else `http`)."))


class RunRequest(RunChoices):
    """JSON body of POST /runs."""

    dataset: list[str] = Field(default_factory=list)
    pages: DatasetIn | None = None

    @field_validator("dataset", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("pages", mode="before")
    @classmethod
    def _bare_list(cls, value: Any) -> Any:
        """`"pages": [{id, html, gold}, ...]`: a list of pages is a test set named inline."""
        return {"pages": value} if isinstance(value, list) else value


ARCHIVE_FIELD = "archive"


def _archive_form() -> dict[str, Any]:
    """The multipart body's schema: the archive, and RunChoices' fields as text fields
    (their descriptions are the JSON body's)."""
    fields = RunChoices.model_fields

    def text(name: str, how: str = "") -> dict[str, Any]:
        return {"type": "string", "description": f"{how} {fields[name].description}".strip()}

    return {
        "type": "object",
        "required": [ARCHIVE_FIELD],
        "additionalProperties": False,
        "properties": {
            ARCHIVE_FIELD: {"type": "string", "format": "binary", "description":
                            "A zip or tar(.gz) of html/ and content/ (and feeds/)."},
            "services": text("services", "Comma-separated, or the field repeated."),
            "options": text("options", "A JSON object."),
            "backend": {**text("backend"), "enum": list(get_args(Backend))},
        },
    }


def _resolve_dataset(path: str, roots: list[Path]) -> Path:
    """A dataset folder named in a request, which must lie under an allowed root: an
    absolute path, a path below a root, or a root's own name ("sample", the built-in
    sample, as runs name it)."""
    resolved_roots = [root.resolve() for root in roots]
    candidates = ([Path(path)] if Path(path).is_absolute()
                  else [root / path for root in resolved_roots]
                  + [root for root in resolved_roots if root.name == path])
    for candidate in candidates:
        try:
            real = candidate.resolve()
            if any(real.is_relative_to(root) for root in resolved_roots) and real.is_dir():
                return real
        except (OSError, ValueError):  # a NUL byte, a name too long: no such folder
            continue
    raise ServiceError(422, "invalid_dataset",
                       f"dataset {path[:200]!r} is not a folder under the allowed roots "
                       f"({', '.join(str(r) for r in resolved_roots)})")


def _spec_from(config: RunConfig, services: list[str] | None,
               options: dict[str, dict[str, Any]],
               backend: Backend | None) -> RunSpec:
    if services == []:  # named, but empty: not a request for the configured services
        raise ServiceError(422, "invalid_request", "`services` names no service")
    names = services or config.services
    if not names:
        raise ServiceError(422, "invalid_request", "no services named")
    for name in [*names, *options]:
        try:
            check_row(name)
        except ValueError as exc:
            raise ServiceError(422, "invalid_request", str(exc)) from None
    try:
        check_called(options, names, "`options`")
        check_options({**config.options, **options})
    except OptionsError as exc:
        raise ServiceError(422, "invalid_options", str(exc)) from None
    return config.run_spec(services=names, options=options, backend=backend)


async def _check_called_services(config: RunConfig, spec: RunSpec
                                 ) -> dict[str, dict[str, Any]]:
    """Refuse (503) a run whose services are not there or are other services, at the
    URLs the configuration gives or at ports nobody gave: its pages would all fail, or
    score another service under the name asked for. Each one's /info by name (the run's
    in-sample flags read it)."""
    try:
        return await asyncio.to_thread(check_services, config.called_urls(spec, spec.local),
                                spec.service_token)
    except StackError as exc:
        raise ServiceError(503, "service_unavailable", _unavailable_detail(exc)) from None


def _unavailable_detail(exc: StackError) -> str:
    """What a refused run's poster can do, in the names the settings really have (the
    server takes no --url, and a run may do without services)."""
    key = f"service.{exc.service or '<name>'}.url"
    return (f"{exc}; start the service, give the server its URL (`{key}` in the server's "
            "configuration file, or BOILERBENCH_URLS), or post the run with "
            '"backend": "embedded" (a form: the field backend=embedded) to run the '
            "extractors in the server's own processes")


@dataclass
class ApiState:
    """What the API's routes share (app.state.api): settings, run defaults, the store
    (open while the app runs), the tasks of the runs waiting or running."""

    settings: ApiSettings
    run_config: RunConfig
    uploads: Path
    limits: ArchiveLimits
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    reserved: set[str] = field(default_factory=set)  # runs being recorded, not yet tasks
    opened: Store | None = None

    def __post_init__(self) -> None:
        self.running = asyncio.Semaphore(self.settings.max_running_runs)
        self.unpacking = asyncio.Semaphore(1)  # the temporary area holds one upload at a time

    @property
    def store(self) -> Store:
        if self.opened is None:
            raise RuntimeError("the store opens with the app's lifespan")
        return self.opened

    def start_task(self, run_id: str, urls: dict[str, str] | None = None) -> None:
        """Execute the run in the background, at most max_running_runs at a time."""
        async def run() -> None:
            try:
                async with self.running:
                    await execute_run(self.store, run_id, urls=urls)
            except RunCancelledError:
                log.info("run %s was cancelled", run_id)
            except Exception as exc:
                log.exception("run %s failed", run_id)
                self.record_failure(run_id, exc)
            finally:
                self.tasks.pop(run_id, None)

        self.tasks[run_id] = asyncio.get_running_loop().create_task(run(), name=run_id)

    def record_failure(self, run_id: str, exc: Exception) -> None:
        """Record a run whose task ended on an error still unfinished (its outputs could
        not be written, say) as failed, with the error: else it would stay `running`
        while this server lives, held by it, and no one could resume it."""
        try:
            if self.store.status(run_id) in UNFINISHED:
                self.store.set_status(run_id, "failed", f"{type(exc).__name__}: {exc}")
        except (StoreError, KeyError):
            log.exception("run %s could not be recorded as failed", run_id)

    def check_queue(self) -> None:
        """Refuse (429) a new run while max_queued_runs runs already wait."""
        taken = len(self.tasks) + len(self.reserved)
        if taken - self.settings.max_running_runs >= self.settings.max_queued_runs:
            raise ServiceError(429, "too_many_runs",
                               f"{taken} runs are running or waiting; "
                               "try again later", {"retry-after": str(RETRY_AFTER_S)})

    def upload_folder(self, run_id: str) -> Path:
        """Where a run's uploaded archive is unpacked (deleted with the run)."""
        return self.uploads / run_id

    async def unpack_upload(self, upload: UploadFile, run_id: str
                            ) -> tuple[list[DatasetSource], list[str]]:
        """The test sets of an uploaded archive, unpacked into upload_folder(run_id)."""
        stem = archive_set_name(upload.filename or "", "upload")
        partial, target = self.uploads / f"{run_id}.partial", self.upload_folder(run_id)

        def unpack() -> tuple[list[tuple[str, Path]], list[str]]:
            try:
                files = unpack_archive(upload.file, partial, self.limits)
                return archive_dataset_folders(partial, files, stem)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise

        async with self.unpacking:
            await asyncio.to_thread(self.store.reserve_upload, run_id, target)
            self.uploads.mkdir(parents=True, exist_ok=True)
            try:
                folders, warnings = await asyncio.to_thread(unpack)
            except DatasetError as exc:
                raise ServiceError(422, "invalid_archive", str(exc)) from None
        partial.rename(target)
        sources = []
        for name, folder in folders:
            moved = target / folder.relative_to(partial)
            feeds = moved / "feeds"
            sources.append(folder_source(name, moved / "html", moved / "content",
                                         feeds if feeds.is_dir() else None,
                                         roots=[target], owned=True))
        return sources, warnings

    def run_info(self, run_id: str) -> dict[str, Any]:
        """A run's RunInfo as JSON, or 404."""
        info = self.store.run(run_id)
        if info is None:
            raise ServiceError(404, "not_found", f"no run {run_id!r}")
        return info.model_dump(mode="json")

    def spec(self, run_id: str) -> RunSpec:
        return RunSpec.model_validate(self.store.spec(run_id))

    def details(self, run_id: str, status: str) -> dict[str, Any]:
        """A run's warnings, error and last update; an interrupted run's error says how
        to resume it, as no process will take it up on its own."""
        details = self.store.details(run_id)
        if status == "interrupted" and details["error"] is None:
            details["error"] = resume_hint(run_id, self.run_config.store_path)
        return details


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


Api = Annotated[ApiState, Depends(api_state)]
router = APIRouter()

Replies = dict[int | str, dict[str, Any]]
ERROR_REPLY_REF = "#/components/schemas/ErrorReply"


def _errors(*replies: tuple[int, str]) -> Replies:
    """The error replies an operation really gives, for its OpenAPI entry: each is a
    JSON ErrorReply (install_error_handlers), whatever raised it, also where the
    success is HTML (so the content is spelt out: a `model` would take the route's
    media type). _document_replies puts ErrorReply in the components."""
    return {status: {"description": description,
                     "content": {"application/json": {"schema": {"$ref": ERROR_REPLY_REF}}}}
            for status, description in replies}


UNAUTHORIZED = (401, "A token is set (BOILERBENCH_API_TOKEN) and the request has not "
                     "got it as `Authorization: Bearer <token>`.")
NO_RUN = (404, "`not_found`: no run of that id.")
STORE_TROUBLE = ((503, "`store_locked` (with a Retry-After) while another process holds "
                       "the store; `store_unavailable` when it is damaged, read-only, "
                       "another program's or of a newer boilerbench; `shutting_down` "
                       "when the server stops before it has answered."),
                 (507, "`store_full`: the disk of the store is full."))
ONE_RUN = _errors(UNAUTHORIZED, NO_RUN, *STORE_TROUBLE)
RUN_BUSY = ("`run_busy`: another live process (a `boilerbench run`, another server on "
            "the store) has the run queued or running; the detail says how to stop it.")


def _remove_abandoned_uploads(api: ApiState) -> None:
    """Remove the uploads a killed server left unpacked, or half unpacked, without their
    run. Each upload is reserved in the store before it is unpacked (reserve_upload),
    so only those of this store whose process has ended go (another host's once its
    heartbeat is stale): an upload another live server is unpacking stays, and so does
    a folder another store's run reads (two stores in one folder share `uploads`).
    A `.partial` folder no reservation names
    (left by an earlier version) goes once it is older than any unpacking takes."""
    for run_id, folder in api.store.abandoned_uploads():
        if folder.is_absolute() and folder.name == run_id:  # never another folder
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(folder.with_name(f"{run_id}.partial"), ignore_errors=True)
        api.store.release_upload(run_id)
    cutoff = time.time() - UPLOAD_ABANDONED_S
    for partial in api.uploads.glob("*.partial") if api.uploads.is_dir() else ():
        with contextlib.suppress(OSError):
            if partial.stat().st_mtime < cutoff:
                shutil.rmtree(partial, ignore_errors=True)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, float]]:
    """Open the store, resume its unfinished runs; at the end cancel the runs still going
    (a later start resumes them) and close the store. The state it gives bounds a stop's
    wait for the requests in hand (shared.serving)."""
    api: ApiState = app.state.api
    try:
        api.opened = Store(api.run_config.store_path)
    except StoreError as exc:
        raise SystemExit(str(exc)) from None
    _remove_abandoned_uploads(api)
    if api.settings.resume:
        for info in reversed(api.store.unfinished_runs()):  # the oldest gets a slot first
            # Pending until it gets a slot, and this server's: no other process
            # deletes it under the task, nor resumes it too.
            try:
                holder = api.store.claim_run(info.id, "pending", info)
            except KeyError:  # deleted since it was listed
                continue
            if holder is not None:
                log.info("run %s is %s: not resumed", info.id,
                         f"{held_state(holder)} in process {holder.owner}"
                         if holder.status in UNFINISHED else holder.status)
                continue
            spec = api.spec(info.id)
            # A run of a stack started for it is resumed on this server's services.
            known = api.run_config.service_urls
            urls = ({name: known.get(name, f"http://127.0.0.1:{SERVICES[name].port}")
                     for name in spec.called_services} if spec.local else None)
            api.start_task(info.id, urls)
    try:
        yield {SHUTDOWN_GRACE_S: api.settings.stop_grace_s}
    finally:
        going = list(api.tasks.values())
        for task in going:
            task.cancel()
        if going:  # a run still stopping past the wait is left as a killed one would be
            _, stopping = await asyncio.wait(going, timeout=STOP_RUNS_WAIT_S)
            for task in stopping:
                log.warning("run %s is left to resume: it did not stop within %g s",
                            task.get_name(), STOP_RUNS_WAIT_S)
        api.store.close()
        api.opened = None


@router.get("/health", response_description="`{status, running, queued}`: the runs "
            "executing and waiting (answered without the token).")
async def health(api: Api) -> Response:
    active = min(len(api.tasks), api.settings.max_running_runs)
    return json_response({"status": "ok", "running": active,
                          "queued": len(api.tasks) - active})


def _form_choices(form: FormData) -> RunChoices:
    """The run choices of an upload's form, checked by the model that checks a JSON
    body's, so a value is refused with the same words either way. `services` is a comma
    list (or the field repeated), `options` JSON text; an empty field counts as not
    sent, as a browser's form sends every field."""
    given: dict[str, Any] = {}
    for key in form:
        if key == ARCHIVE_FIELD:
            continue
        values = form.getlist(key)
        texts = [value for value in values if isinstance(value, str)]
        if len(texts) < len(values):
            raise ServiceError(422, "invalid_request",
                               f"the `{key}` field is a file; send it as text")
        texts = [text for text in texts if text.strip()]
        if not texts:
            continue
        if key == "services":
            given[key] = [name.strip() for text in texts for name in text.split(",")
                          if name.strip()]
        elif len(texts) > 1:
            raise ServiceError(422, "invalid_request", f"the `{key}` field is given "
                                                       f"{len(texts)} times; give it once")
        elif key == "options":
            try:
                given[key] = orjson.loads(texts[0])
            except orjson.JSONDecodeError as exc:
                raise ServiceError(422, "invalid_request",
                                   f"the `options` field is not JSON: {exc}") from None
        else:
            given[key] = texts[0]
    try:  # as JSON, whose errors pydantic words otherwise than a Python dict's
        return RunChoices.model_validate_json(orjson.dumps(given))
    except ValidationError as exc:
        raise ServiceError(422, "invalid_request", validation_message(exc)) from None


async def _archive_request(request: Request, body: bytes, api: ApiState, run_id: str
                           ) -> tuple[RunChoices, list[DatasetSource], list[str]]:
    """POST /runs as a form: its run choices, then the archive unpacked (a refused
    choice costs no unpacking)."""
    request._body = body  # the form parser reads the body already read (and limited)
    form = await request.form()
    uploads = form.getlist(ARCHIVE_FIELD)
    upload = uploads[0] if uploads else None
    if upload is None or isinstance(upload, str):
        raise ServiceError(422, "invalid_request", "the form needs an `archive` file")
    if len(uploads) > 1:  # one would be ignored: its pages silently not scored
        raise ServiceError(422, "invalid_request",
                           f"the form has {len(uploads)} `archive` fields; send one archive "
                           "(one archive may hold several test sets)")
    choices = _form_choices(form)
    folders, warnings = await api.unpack_upload(upload, run_id)
    return choices, folders, warnings


def _json_request(body: bytes, roots: list[Path]
                  ) -> tuple[RunRequest, list[DatasetSource], list[Dataset]]:
    """POST /runs as JSON: test sets by path under `roots`, or pages in the body."""
    if not body.strip():  # as the services answer a body that is no request at all
        raise ServiceError(400, "empty_body", "the body is empty")
    try:
        parsed = RunRequest.model_validate_json(json_text(body))
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            raise ServiceError(400, "malformed_json", validation_message(exc)) from None
        raise ServiceError(422, "invalid_request", validation_message(exc)) from None
    folders = []
    for path in parsed.dataset:
        folder = _resolve_dataset(path, roots)
        feeds = folder / "feeds"
        folders.append(folder_source(folder.name, folder / "html", folder / "content",
                                     feeds if feeds.is_dir() else None, roots=roots))
    try:
        memory = [parsed.pages.dataset()] if parsed.pages is not None else []
    except DatasetError as exc:
        raise ServiceError(422, "invalid_dataset", str(exc)) from None
    return parsed, folders, memory


@router.post(
    "/runs", status_code=202,
    response_description="The run is recorded and waits for a slot: `{id, status: "
                         "\"pending\", links}`; GET /runs/{id} follows it.",
    responses=_errors(
        (400, "`empty_body`, `malformed_json`, or a multipart body that cannot be parsed."),
        UNAUTHORIZED,
        (413, "`too_large`: the body passes max_body_bytes."),
        (415, "`unsupported_media_type`: neither application/json nor multipart/form-data."),
        (422, "`invalid_request`, `invalid_dataset`, `invalid_options` or "
              "`invalid_archive`: the detail names what is wrong."),
        (429, "`too_many_runs`: max_queued_runs runs already wait; try again after the "
              "Retry-After."),
        (503, "`service_unavailable`: a service the run would call is not there, or "
              "another service answers at its address (post with `\"backend\": "
              "\"embedded\"` to need none); or the store cannot be used (`store_locked`, "
              "`store_unavailable`); or the server stops before it has answered "
              "(`shutting_down`)."),
        STORE_TROUBLE[1]))
async def post_run(request: Request, api: Api) -> Response:
    api.check_queue()
    body = await read_limited(request.stream(), request.headers.get("content-length"),
                              api.settings.max_body_bytes)
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    run_id = uuid.uuid4().hex[:12]
    memory: list[Dataset] = []
    warnings: list[str] = []
    try:
        if media_type == "multipart/form-data":
            parsed, folders, warnings = await _archive_request(request, body, api, run_id)
        elif media_type == "application/json":  # a big body takes a while to validate
            parsed, folders, memory = await asyncio.to_thread(
                _json_request, body, api.settings.allowed_roots)
        else:
            raise ServiceError(415, "unsupported_media_type",
                               "send application/json or multipart/form-data")
        if not folders and not memory:
            raise ServiceError(422, "invalid_request", "give `dataset`, `pages` or an archive")
        try:
            spec = _spec_from(api.run_config, parsed.services, parsed.options, parsed.backend)
            infos = await _check_called_services(api.run_config, spec)
            # Again after the awaits above, and the place held until start_task: posts
            # read in parallel cannot all pass the check made before their bodies.
            api.check_queue()
            api.reserved.add(run_id)
            try:
                await asyncio.to_thread(create_run, api.store, spec, folders, memory,
                                        run_id=run_id, infos=infos)
            finally:
                api.reserved.discard(run_id)
        except (DatasetError, ValueError) as exc:
            raise ServiceError(422, "invalid_dataset", str(exc)) from None
    except BaseException as exc:
        # Refused before the run was recorded: its unpacked upload (if any) goes. A
        # request cancelled by a stop leaves it to its reservation: its thread may still
        # be unpacking it, or recording the run, which then owns it; the next start
        # removes an upload whose run was not recorded.
        if isinstance(exc, Exception):
            shutil.rmtree(api.upload_folder(run_id), ignore_errors=True)
            if media_type == "multipart/form-data":
                with contextlib.suppress(StoreError):  # else a later start removes it
                    api.store.release_upload(run_id)
        raise
    if warnings:
        api.store.add_warnings(run_id, warnings)
    api.start_task(run_id)
    return json_response({"id": run_id, "status": "pending",
                          "links": {"self": f"/runs/{run_id}",
                                    "results": f"/runs/{run_id}/results",
                                    "report": f"/runs/{run_id}/report"}}, 202)


@router.get("/runs", response_description="`{runs: [...]}`: every run with its "
            "progress counts.", responses=_errors(UNAUTHORIZED, *STORE_TROUBLE))
async def list_runs(api: Api) -> Response:
    return json_response({"runs": [api.run_info(info.id) for info in api.store.runs()]})


@router.get("/runs/{run_id}", responses=ONE_RUN,
            response_description="The run's status, progress per service and warnings.")
async def get_run(run_id: str, api: Api) -> Response:
    info = api.run_info(run_id)
    return json_response({**info, "per_service": api.store.service_counts(run_id),
                          **api.details(run_id, info["status"])})


@router.get("/runs/{run_id}/results", responses=ONE_RUN,
            response_description="The figures of the results so far, and the pages' errors.")
async def get_results(run_id: str, api: Api) -> Response:
    info = api.run_info(run_id)
    # Read in a thread: a run's results take seconds to read where it has a hundred
    # thousand, and the event loop serves every request and executes the runs.
    results = await asyncio.to_thread(api.store.results, run_id)
    spec = api.spec(run_id)
    summary = await asyncio.to_thread(run_summary, results, spec)
    errors = [{"dataset": r.dataset, "page_id": r.page_id, "service": r.service,
               "error": r.error} for r in results if r.status == "error"]
    return json_response({"run": info, "summary": summary.model_dump(mode="json"),
                          "errors": errors, **api.details(run_id, info["status"])})


@router.delete("/runs/{run_id}",
               responses=_errors(UNAUTHORIZED, NO_RUN, (409, RUN_BUSY), *STORE_TROUBLE),
               response_description="`{id, deleted: true, status}`: the run, cancelled "
                                    "first if this server had it queued or running, is "
                                    "gone with its files.")
async def delete_run(run_id: str, api: Api) -> Response:
    status = api.run_info(run_id)["status"]
    task = api.tasks.get(run_id)
    if task is not None:  # this server's own run: stopped before it is deleted
        api.store.set_status(run_id, "cancelled")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # As `boilerbench runs delete` does: the store's rows, the outputs, the uploads;
    # refused while another live process holds the run.
    try:
        deleted = await asyncio.to_thread(delete_run_with_folders, api.store, run_id)
    except RunBusyError as exc:
        raise ServiceError(409, "run_busy", str(exc)) from None
    if deleted is None:
        raise ServiceError(404, "not_found", f"no run {run_id!r}")
    return json_response({"id": run_id, "deleted": True,
                          "status": "cancelled" if status in UNFINISHED else status})


REPORT_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
"""report.html has inline CSS and SVG and nothing else (no script, no fetch), and it
shows text from test sets and services: should any of it ever get through as markup,
the browser still runs no script and loads nothing, on the API's own origin."""


@router.get("/runs/{run_id}/report", response_class=HTMLResponse,
            response_description="report.html of the finished run.",
            responses=_errors(
                UNAUTHORIZED,
                (404, "`not_found`: no run of that id; `report_missing`: the run is "
                      "finished but its report file is gone."),
                (409, "`not_finished`: the report comes when the run has finished."),
                *STORE_TROUBLE))
async def get_report(run_id: str, api: Api) -> Response:
    info = api.run_info(run_id)
    spec = api.spec(run_id)
    path = run_output_dir(Path(spec.output_folder), run_id) / "report.html"
    if info["status"] != "finished":
        raise ServiceError(409, "not_finished",
                           f"run {run_id} is {info['status']}; the report comes at the end")
    if not path.is_file():
        raise ServiceError(404, "report_missing",
                           f"run {run_id} is finished but its report is gone from {path}")
    return HTMLResponse(path.read_text(encoding="utf-8"), headers=REPORT_HEADERS)


@router.get("/runs/{run_id}/pages/{page_id}",
            response_description="The page's gold text and, per row, its extract, scores "
                                 "and the missed and extra words.",
            responses=_errors(
                UNAUTHORIZED,
                (404, "`not_found`: no such run, or the run has no such page."),
                (409, "`gold_unavailable`: the page's gold text cannot be read any more."),
                (422, "`ambiguous_page`: several test sets of the run hold the page id; "
                      "add ?dataset=NAME."),
                *STORE_TROUBLE))
async def get_page(run_id: str, page_id: str, api: Api, dataset: str | None = None
                   ) -> Response:
    api.run_info(run_id)
    results = await asyncio.to_thread(api.store.page_results, run_id, page_id, dataset)
    sets = sorted({r.dataset for r in results})
    if not results:
        raise ServiceError(404, "not_found", f"run {run_id} has no page {page_id!r}")
    if len(sets) > 1:
        raise ServiceError(422, "ambiguous_page",
                           f"page {page_id!r} is in {sets}: add ?dataset=NAME")
    spec = api.spec(run_id)
    source = next(s for s in spec.datasets if s.name == sets[0])
    try:
        gold = open_source(source, api.store, run_id).page(page_id).gold
    except (OSError, KeyError, ValueError) as exc:
        raise ServiceError(409, "gold_unavailable",
                           f"the gold text of {page_id!r} cannot be read: {exc}") from None
    rows = []
    for r in results:
        diff = page_diff(gold, r.text)
        rows.append({"row": r.service, "status": r.status, "error": r.error,
                     "text": r.text,
                     "scores": r.scores.model_dump(mode="json") if r.scores else None,
                     "diff": diff.model_dump(mode="json")})
    return json_response({"run": run_id, "dataset": sets[0], "page_id": page_id,
                          "gold": gold, "rows": rows})


class ApiApp(TokenGuardedApp):
    """The API's app: a request the server cancels because a stop's grace has passed
    (STOP_GRACE_S) is answered 503 `shutting_down` where its reply had not started. What
    it was doing is safe to cut: a read can be asked again, and a posted run is recorded
    in one transaction, or not at all."""

    async def dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().dispatch(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await super().dispatch(scope, receive, sending)
        except asyncio.CancelledError:
            if started:
                raise
            posted = scope["method"] == "POST" and scope["path"].rstrip("/") == "/runs"
            await send_error(send, ServiceError(
                503, "shutting_down", "the server is stopping; " + (
                    "the run may have been recorded: GET /runs once it is back, before "
                    "posting it again" if posted else "ask again once it is back")))


def store_error_reply(exc: StoreError) -> ServiceError:
    """The reply to a store that cannot be used: 507 for a full disk (freeing space
    helps), 503 otherwise, with a Retry-After where waiting helps (locked)."""
    if exc.problem == "full":
        return ServiceError(507, "store_full", str(exc))
    if exc.problem == "locked":
        return ServiceError(503, "store_locked", str(exc),
                            {"retry-after": str(RETRY_AFTER_S)})
    return ServiceError(503, "store_unavailable", str(exc))


def create_app(settings: ApiSettings | None = None, config: RunConfig | None = None) -> FastAPI:
    """The orchestrator app; `config` gives the run defaults (else load_config)."""
    settings = settings or ApiSettings()
    try:
        run_config = config or load_config(settings.config)
    except ConfigError as exc:
        raise SystemExit(f"configuration error: {exc}") from None
    app = ApiApp(title="boilerbench orchestrator", lifespan=lifespan, docs_url=None,
                 redoc_url=None)
    app.token = settings.token
    app.state.api = ApiState(
        settings=settings, run_config=run_config,
        uploads=(settings.uploads or run_config.store_path.parent / "uploads").resolve(),
        limits=ArchiveLimits(max_total_bytes=settings.max_unpacked_bytes))
    install_error_handlers(app)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, exc: StoreError) -> Response:
        return error_response(store_error_reply(exc))

    app.include_router(router)
    document_bodies(app, {("/runs", "post"): {"application/json": RunRequest,
                                              "multipart/form-data": _archive_form()}})
    _document_replies(app)
    install_offline_docs(app)
    return app


def _document_replies(app: FastAPI) -> None:
    """Put ErrorReply, which the routes' error replies name (_errors), into the
    document's components, and drop the 422 `HTTPValidationError` FastAPI lists for
    every route with parameters and none declared: the parameters here are plain
    strings that never fail validation, and a 422 of this API is an ErrorReply."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.setdefault("ErrorReply", ErrorReply.model_json_schema())
        framework = "#/components/schemas/HTTPValidationError"
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                replies = operation.get("responses", {})
                schema = replies.get("422", {}).get("content", {}) \
                    .get("application/json", {}).get("schema", {})
                if schema.get("$ref") == framework:
                    del replies["422"]
        if framework not in orjson.dumps(document.get("paths", {})).decode():
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def app_factory() -> FastAPI:
    """uvicorn's factory entry point: `uvicorn orchestrator.api:app_factory --factory`."""
    return create_app()
