"""`boilerbench up` and `boilerbench extract`: run the services, call one."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from orchestrator.cli import app
from orchestrator.launcher import LocalStack, StackError, parse_service_list
from shared.decoding import NotHTMLError, decode_html
from shared.registry import SERVICES, get_service

console = Console(stderr=True)


@app.command()
def up(
    services: Annotated[str | None, typer.Option(
        help="Comma-separated service names (default: all).")] = None,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each /health.")] = 180.0,
) -> None:
    """Start the algorithm services as local processes until Ctrl-C or SIGTERM."""
    try:
        names = parse_service_list(services)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    stack = LocalStack(names, host=host)
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        urls = stack.start(timeout=timeout)
    except StackError as exc:
        console.print(f"[red]could not start the services: {exc}")
        raise typer.Exit(1) from None
    table = Table(title="boilerbench services")
    table.add_column("service")
    table.add_column("url")
    for name, url in urls.items():
        table.add_row(name, url)
    Console().print(table)
    console.print("Ready. Ctrl-C stops every service.")
    try:
        while not stopping.wait(1.0):
            dead = [s.name for s in stack.processes.values() if s.process.poll() is not None]
            if dead:
                console.print(f"[red]service process exited: {', '.join(dead)}; stopping all")
                raise typer.Exit(1)
    finally:
        console.print("stopping services ...")
        stack.stop()


@app.command()
def extract(
    page: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="An HTML file.")],
    service: Annotated[str, typer.Option(help="Service name.")] = "justext",
    url: Annotated[str | None, typer.Option(
        help="Base URL of the service (default: http://127.0.0.1:<its port>).")] = None,
    page_url: Annotated[str | None, typer.Option(help="The page's own URL, if known.")] = None,
    options: Annotated[str, typer.Option(help="Options as a JSON object.")] = "{}",
    in_process: Annotated[bool, typer.Option(
        "--in-process", help="Run the extractor here, without HTTP.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole reply.")] = False,
) -> None:
    """Print the text one service extracts from PAGE."""
    try:
        entry = get_service(service)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    try:
        parsed_options = json.loads(options)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--options is not JSON: {exc}") from None
    if in_process:
        reply = _extract_in_process(entry.name, page.read_bytes(), parsed_options, page_url)
    else:
        base = url or f"http://127.0.0.1:{SERVICES[entry.name].port}"
        reply = _extract_over_http(base, page.read_bytes(), parsed_options, page_url)
    if as_json:
        sys.stdout.write(json.dumps(reply, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(f"{reply['text']}\n")


def _extract_in_process(name: str, data: bytes, options: dict[str, object],
                        page_url: str | None) -> dict[str, object]:
    import time

    from pydantic import ValidationError

    algorithm = get_service(name).algorithm()
    try:
        html = decode_html(data)
        started = time.perf_counter()
        body = algorithm.run(html, options, page_url)
    except (NotHTMLError, ValidationError, ValueError) as exc:
        console.print(f"[red]{type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    return {
        "algorithm": algorithm.name, "version": algorithm.version, "text": body.text,
        "blocks": [dataclasses.asdict(b) for b in body.blocks],
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 3),
    }


def _extract_over_http(base: str, data: bytes, options: dict[str, object],
                       page_url: str | None) -> dict[str, object]:
    try:
        html = decode_html(data)
    except NotHTMLError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(1) from None
    try:
        reply = httpx.post(f"{base}/extract", timeout=60.0,
                           json={"html": html, "url": page_url, "options": options})
    except httpx.TransportError as exc:
        console.print(f"[red]cannot reach {base}: {exc} (is `boilerbench up` running?)")
        raise typer.Exit(1) from None
    body: dict[str, object] = reply.json()
    if reply.status_code != 200:
        console.print(f"[red]HTTP {reply.status_code}: {body.get('error')}: {body.get('detail')}")
        raise typer.Exit(1)
    return body
