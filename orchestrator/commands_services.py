"""`boilerbench up`, `extract` and `check`: run the services, call one, check one (or
an image of one's own standing in for it) against what a replacement must answer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Annotated

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from orchestrator.launcher import (
    DEFAULT_PORT_BASE,
    MAX_PORT_BASE,
    LocalStack,
    StackError,
    StartCancelledError,
    check_service,
    parse_service_list,
    service_port,
    up_command,
)
from orchestrator.service_options import OptionsError, check_options
from orchestrator.terminal import escape, print_error
from shared.answer import answer_page, validation_message
from shared.contract import ExtractReply, bearer_header
from shared.decoding import NotHTMLError, decode_html
from shared.registry import get_service

app = typer.Typer()
console = Console(stderr=True)
WARC_TIME_LIMIT_S = 10.0
WARC_SHARD_ROWS = 10_000


@app.command()
def up(
    services: Annotated[str | None, typer.Option(
        help="Comma-separated service names (default: all).")] = None,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each /health.")] = 180.0,
    port_base: Annotated[int | None, typer.Option(
        metavar="N", envvar="BOILERBENCH_PORT_BASE", min=1, max=MAX_PORT_BASE,
        help=f"Ports from N: each service listens on N + (its registry port - "
             f"{DEFAULT_PORT_BASE}), so a second stack can run beside one on the registry "
             f"ports (N = {DEFAULT_PORT_BASE}); `boilerbench run --http --port-base N` calls "
             "them there.")] = None,
) -> None:
    """Start the algorithm services as local processes until Ctrl-C or SIGTERM."""
    try:
        names = parse_service_list(services)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    stack = LocalStack(names, host=host,
                       ports={name: service_port(name, port_base) for name in names})
    stopping = threading.Event()
    received: list[int] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        stopping.set()

    # SIGHUP too, unless ignored (nohup): a closed terminal would otherwise end `up`
    # alone, its services (each in a session of its own) left running.
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if stop_signal != signal.SIGHUP or signal.getsignal(stop_signal) != signal.SIG_IGN:
            signal.signal(stop_signal, _stop)
    try:  # a signal now stops the services started so far, not only once all are up
        urls = stack.start(timeout=timeout, cancel=stopping)
    except StartCancelledError:
        console.print("stopped before every service was ready")
        raise typer.Exit(128 + received[0]) from None
    except StackError as exc:
        print_error(console, f"could not start the services: {exc}")
        raise typer.Exit(1) from None
    table = Table(title="boilerbench services")
    table.add_column("service")
    table.add_column("url")
    for name, url in urls.items():
        table.add_row(name, url)
    Console().print(table)
    if port_base is not None:
        console.print(f"Evaluate them with `boilerbench run --http --port-base {port_base}`.")
    console.print("Ready. Ctrl-C stops every service.")
    try:
        while not stopping.wait(1.0):
            dead = [s.name for s in stack.processes.values() if s.process.poll() is not None]
            if dead:
                print_error(console, f"service process exited: {', '.join(dead)}; stopping all")
                raise typer.Exit(1)
    finally:
        with contextlib.suppress(OSError):  # a terminal that has gone takes no output
            console.print("stopping services ...")
        stack.stop()


@app.command()
def extract(
    context: typer.Context,
    inputs: Annotated[list[str], typer.Argument(
        metavar="PAGE | FILE_OR_GLOB...",
        help="An HTML file (- reads standard input); with --warc, WARC files or globs "
             "(quoted globs are expanded here).")],
    service: Annotated[str, typer.Option(help="Service name.")] = "justext",
    url: Annotated[str | None, typer.Option(
        help="Base URL of the service (default: http://127.0.0.1:<its port>, used once its "
             "/info names the service; a reply from another service is refused either way; "
             "with --warc the job runs in-process unless --url is given).")] = None,
    page_url: Annotated[str | None, typer.Option(help="The page's own URL, if known.")] = None,
    options: Annotated[str, typer.Option(help="Options as a JSON object.")] = "{}",
    in_process: Annotated[bool, typer.Option(
        "--in-process", help="Run the extractor here, without HTTP.")] = False,
    port_base: Annotated[int | None, typer.Option(
        metavar="N", envvar="BOILERBENCH_PORT_BASE", min=1, max=MAX_PORT_BASE,
        help="Without --url: the service of the stack `boilerbench up --port-base N` "
             "started.")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="BOILERBENCH_SERVICE_TOKEN",
        help="Bearer token of a service started with BOILERBENCH_TOKEN.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole reply.")] = False,
    warc: Annotated[bool, typer.Option(
        "--warc", help="Extract every HTML response of the WARC files named.")] = False,
    out: Annotated[Path | None, typer.Option(
        help="With --warc: a .jsonl or .parquet file, or a folder of JSONL shards. A "
             "re-run skips the records already written there.")] = None,
    blocks: Annotated[bool, typer.Option(
        "--blocks", help="With --warc: write each page's blocks too.")] = False,
    workers: Annotated[int | None, typer.Option(
        min=1, help="With --warc: pages at a time (processes in-process, requests with "
                    "--url, local Ray CPUs with --ray auto; default: all cores).")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", metavar="auto|ADDRESS",
        help="With --warc: run on Ray, a local one started for the job (auto) or the "
             "cluster at ADDRESS; OUT must be a folder.")] = None,
    time_limit: Annotated[float, typer.Option(
        min=0.1, help="With --warc: seconds per page before its worker is killed.")
                        ] = WARC_TIME_LIMIT_S,
    shard_rows: Annotated[int, typer.Option(
        min=1, help="With --warc and a folder OUT: rows per shard.")] = WARC_SHARD_ROWS,
) -> None:
    """Print the text one service extracts from PAGE, or write a crawl's text to OUT.

    With --warc, every HTML page of the crawl becomes one row of OUT."""
    try:
        entry = get_service(service)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    if url is not None:
        url = _base_url(url)
    # BOILERBENCH_PORT_BASE may be set for the whole shell: only the flag is refused.
    if (port_base is not None and (in_process or url is not None or warc) and
            getattr(context.get_parameter_source("port_base"), "name", "") == "COMMANDLINE"):
        raise typer.BadParameter("--port-base finds a service of a local stack: it does not go "
                                 "with --in-process, --url or --warc", param_hint="--port-base")
    token = token or None  # an empty token is no token, as for the services
    try:
        parsed_options = json.loads(options)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--options is not JSON: {exc}") from None
    if not isinstance(parsed_options, dict):
        raise typer.BadParameter("--options must be a JSON object")
    if warc:
        _extract_warc(inputs, entry.name, out, parsed_options, url, ray, blocks,
                      workers or os.cpu_count() or 1, time_limit, shard_rows, token)
        return
    warc_only = {"--out": out is not None, "--blocks": blocks, "--workers": workers is not None,
                 "--ray": ray is not None, "--time-limit": time_limit != WARC_TIME_LIMIT_S,
                 "--shard-rows": shard_rows != WARC_SHARD_ROWS}
    given = [flag for flag, set_ in warc_only.items() if set_]
    if given:
        raise typer.BadParameter(f"{', '.join(given)} go with --warc; one page's text goes "
                                 "to standard output")
    if len(inputs) != 1:
        raise typer.BadParameter(f"name one HTML file, or - for standard input, not "
                                 f"{len(inputs)} (pass --warc for WARC files)")
    _check_extract_options(entry.name, parsed_options)  # before any page is read
    try:  # decoded here, then the same JSON request either way
        html = decode_html(_page_bytes(inputs[0]))
    except NotHTMLError as exc:
        print_error(console, str(exc))
        raise typer.Exit(1) from None
    request: dict[str, object] = {"html": html, "url": page_url, "options": parsed_options}
    if in_process:
        reply = _extract_in_process(entry.name, request)
    else:
        reply = _extract_over_http(url or _default_url(entry.name, port_base, token),
                                   entry.name, request, token)
    if as_json:
        sys.stdout.write(json.dumps(reply, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(f"{reply['text']}\n")


@app.command()
def check(
    url: Annotated[str, typer.Argument(
        metavar="URL", help="Base URL of the service checked.")],
    service: Annotated[str, typer.Option(
        help="The service it stands in for (its /info and replies must name it).")],
    token: Annotated[str | None, typer.Option(
        envvar="BOILERBENCH_SERVICE_TOKEN",
        help="Bearer token of a service started with BOILERBENCH_TOKEN: sent as runs "
             "send it, and /info and /extract must refuse requests without it.")] = None,
    timeout: Annotated[float, typer.Option(
        min=0.1, help="Seconds each request may take, its whole reply read.")] = 30.0,
) -> None:
    """Check that the service at URL answers as a replacement of SERVICE must.

    Each point of docs/docker.md's "What a replacement must answer" a client can see."""
    from orchestrator.commands_run import out
    from orchestrator.conformance import NoReplyError, run_checks

    try:
        name = get_service(service).name
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0]), param_hint="--service") from None
    base = _base_url(url, "URL")
    try:
        results = run_checks(base, name, token or None, timeout)
    except NoReplyError as exc:
        print_error(console, f"nothing answers at {base}: {exc}")
        raise typer.Exit(1) from None
    table = Table(title=f"{base} as the {name} service")
    for column in ("check", "result", "expected", "got"):
        table.add_column(column)
    for result in results:
        table.add_row(escape(result.check), "ok" if result.ok else "[red]FAIL",
                      escape(result.expected), escape(result.got))
    out.print(table)
    failed = [result.check for result in results if not result.ok]
    if failed:
        print_error(console, f"{len(failed)} of {len(results)} checks failed: "
                             f"{'; '.join(failed)}")
        raise typer.Exit(1)
    console.print(f"all {len(results)} checks passed")


def _base_url(url: str, param_hint: str = "--url") -> str:
    """A service's URL as a base URL (without the trailing slash that would make
    //extract), or a usage error unless it is an http(s) URL naming a host."""
    try:
        parsed = httpx.URL(url)
        valid = (parsed.scheme in ("http", "https") and bool(parsed.host)
                 and (parsed.port or 0) <= 65535)
    except httpx.InvalidURL:
        valid = False
    if not valid:
        raise typer.BadParameter(f"{url!r} is not an http(s) URL", param_hint=param_hint)
    return url.rstrip("/")


def _check_extract_options(name: str, options: Mapping[str, object],
                           json_values: bool = True) -> None:
    """Options the service would refuse, as a usage error (as `run` treats them), and
    options lacking what the algorithm needs (rss's feed: no run adds it here)."""
    try:
        checked = check_options({name: options}, json_values).get(name)
    except OptionsError as exc:
        raise typer.BadParameter(f"--options: {exc}") from None
    missing = None if checked is None else checked.missing()
    if missing is not None:
        raise typer.BadParameter(f"--options: {name}: {missing}")


def _page_bytes(name: str) -> bytes:
    """The bytes of the page named on the command line (`-`: standard input), or a
    usage error that says what is wrong with the name."""
    if name == "-":
        if sys.stdin is None:  # started with standard input closed (<&-)
            raise typer.BadParameter("standard input is closed: name an HTML file")
        return sys.stdin.buffer.read()
    path = Path(name)
    if path.is_dir():
        raise typer.BadParameter(f"{name} is a folder: name one HTML file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise typer.BadParameter(f"no such file: {name}") from None
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {name}: {exc.strerror or exc}") from None


def _default_url(name: str, port_base: int | None, token: str | None) -> str:
    """The service on its registry port (or its stack's), once its /info says it is
    that service."""
    base = f"http://127.0.0.1:{service_port(name, port_base)}"
    try:
        check_service(base, name, token)
    except StackError as exc:
        hint = {"token": ", or pass it with --token",
                "absent": f"; start it with `{up_command(name, port_base)}` or give its URL "
                          "with --url"}.get(exc.cause or "", "; give its URL with --url")
        print_error(console, f"{exc}{hint}")
        raise typer.Exit(1) from None
    return base


def query_options(options: dict[str, object]) -> dict[str, str]:
    """Options as the query parameters of an /extract request with an HTML body (which
    the algorithm's options model reads in lax mode: "3" as 3, "true" as True)."""
    query: dict[str, str] = {}
    for key, value in options.items():
        if isinstance(value, dict | list) or value is None:
            raise typer.BadParameter(f"option {key!r}: only numbers, strings and booleans "
                                     "pass to a page given as HTML")
        query[key] = json.dumps(value) if isinstance(value, bool) else str(value)
    return query


def _extract_in_process(name: str, request: dict[str, object]) -> dict[str, object]:
    """The service's reply to the JSON request, computed here after the warm-up a
    service's worker makes (so a first page pays no loading)."""
    try:
        algorithm = get_service(name).algorithm()
        algorithm.warm_up()
    except Exception as exc:  # a library of its extra not installed, a model file missing
        hint = (f" (install its extra: pip install 'boilerbench[{name}]')"
                if isinstance(exc, ImportError) else "")
        print_error(console, f"cannot load the {name} extractor: "
                             f"{type(exc).__name__}: {exc}{hint}")
        raise typer.Exit(1) from None
    reply = answer_page(algorithm, json.dumps(request).encode(), {}, "application/json")
    if reply.get("error") is not None:
        print_error(console, str(reply["error"]))
        raise typer.Exit(1)
    return reply


def _extract_warc(patterns: list[str], name: str, out: Path | None,
                  options: dict[str, object], url: str | None, ray_address: str | None,
                  blocks: bool, workers: int, time_limit: float, shard_rows: int,
                  token: str | None) -> None:
    # Imported here: the WARC reader and Parquet writer come with the `warc` extra,
    # which the rest of the command does not need.
    try:
        from orchestrator.warc import expand_paths
        from orchestrator.warc_job import (
            JobAbortedError,
            WarcJob,
            is_output_file,
            run_job,
            summary_table,
        )
    except ImportError as exc:
        print_error(console, f"{exc}: install the `warc` extra (pip install 'boilerbench[warc]')")
        raise typer.Exit(1) from None

    if out is None:
        raise typer.BadParameter("--warc needs --out (a .jsonl or .parquet file, or a folder)")
    if url is not None and ray_address is not None:
        raise typer.BadParameter("--url and --ray exclude each other")
    _check_extract_options(name, options)
    query = query_options(options)  # how the pages' requests carry them
    _check_extract_options(name, query, json_values=False)
    try:
        # A glob such as 'crawl/*' also matches an OUT written beside the WARCs, and the
        # files the job keeps beside OUT: none of them is a WARC.
        paths, own = expand_paths(patterns, lambda path: is_output_file(path, out))
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc)) from None
    if own:
        named = ", ".join(map(str, own[:3])) + (f" and {len(own) - 3:,} more" if len(own) > 3
                                                else "")
        console.print(escape(f"left out of the input, as the output's own files: {named}"),
                      highlight=False, soft_wrap=True)
    if not paths:
        raise typer.BadParameter("no WARC file is left once the output's own files are left out")
    try:  # before anything is written: a wrong address would fill OUT with errors
        if url is not None:
            check_service(url.rstrip("/"), name, token)
        if ray_address is not None:
            from orchestrator.warc_ray import check_address

            check_address(ray_address)
    except (StackError, ValueError) as exc:
        print_error(console, str(exc))
        raise typer.Exit(1) from None
    job = WarcJob(paths=paths, service=name, out=out, options=query, blocks=blocks,
                  workers=workers, url=url, time_limit_s=time_limit, shard_rows=shard_rows,
                  token=token)
    started = time.monotonic()
    try:
        tally = run_job(job, console, ray_address)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except JobAbortedError as exc:
        print_error(console, f"stopped: {exc}; the rows written so far stay, a re-run resumes")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # Ctrl-C: the pages in flight are left to the re-run
        print_error(console, "stopped: the rows written so far stay; the same command resumes")
        raise typer.Exit(130) from None
    console.print(summary_table(job, tally, time.monotonic() - started))


def _extract_over_http(base: str, name: str, request: dict[str, object], token: str | None
                       ) -> dict[str, object]:
    """The reply of service `name` at `base`; one line and exit 1 when there is none, or
    when what answers is no such service (its text would pass for the one asked for)."""
    try:
        reply = httpx.post(f"{base}/extract", timeout=60.0, json=request,
                           headers=bearer_header(token))
    except httpx.TransportError as exc:
        print_error(console, f"cannot reach {base}: {exc} (is `boilerbench up` running?)")
        raise typer.Exit(1) from None
    try:
        body = reply.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        server = reply.headers.get("server")
        print_error(console, f"{base} is not a boilerbench service: HTTP {reply.status_code} "
                             f"to POST /extract{f' from {server!r}' if server else ''}, not JSON")
        raise typer.Exit(1)
    if reply.status_code != 200:
        hint = ""
        if reply.status_code == 401:
            hint = ("; the token given was refused" if token else
                    "; pass the service's token with --token (or BOILERBENCH_SERVICE_TOKEN)")
        print_error(console, f"HTTP {reply.status_code}: {body.get('error')}: "
                             f"{body.get('detail')}{hint}")
        raise typer.Exit(1)
    answered = body.get("algorithm")
    if answered != name or not isinstance(body.get("text"), str):
        what = (f"the {answered!r} service" if isinstance(answered, str) and answered != name
                else "a reply not in the /extract contract")
        print_error(console, f"{base} is not the {name} service: {what} answers there "
                             "(--service names it)")
        raise typer.Exit(1)
    try:  # what a run would refuse on every page is refused here too
        ExtractReply.model_validate(body)
    except ValidationError as exc:
        print_error(console, f"the reply of {base} is not in the /extract contract: "
                             f"{validation_message(exc, 3)}")
        raise typer.Exit(1) from None
    return body
