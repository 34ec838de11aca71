"""`boilerbench docker ps|swap`: look at and swap the containers of a running ensemble.

The engine is the environment's (DOCKER_HOST, else the local socket) unless
`--engine` names one; the work itself is in orchestrator/docker_ops.py, imported by
each command (the docker SDK is loaded only when a `docker` command runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.terminal import print_error
from shared.registry import SERVICES

if TYPE_CHECKING:
    from orchestrator.docker_ops import SwapResult

app = typer.Typer(
    help="The running ensemble's algorithm containers (Docker Engine, via the docker SDK).",
    no_args_is_help=True,
)
console = Console(stderr=True)

Engine = Annotated[str | None, typer.Option(
    "--engine", envvar="DOCKER_HOST",
    help="Docker Engine URL, e.g. unix:///var/run/docker.sock (default: the environment's).")]
Project = Annotated[str | None, typer.Option(
    help="Only containers of this compose project (default: every project).")]


@app.command("ps")
def ps(
    engine: Engine = None,
    project: Project = None,
    token: Annotated[str | None, typer.Option(
        envvar="BOILERBENCH_TOKEN", help="Bearer token for the services' /info.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each /info.")] = 2.0,
) -> None:
    """List the algorithm containers with image, status, health and /info version."""
    from orchestrator.docker_ops import DockerOpsError, connect, list_algorithms

    try:
        rows = list_algorithms(connect(engine), project=project, token=token, timeout=timeout)
    except DockerOpsError as exc:
        print_error(console, str(exc))
        raise typer.Exit(1) from None
    if not rows:
        console.print("no algorithm containers (labelled org.boilerbench.role=algorithm) found")
        return
    table = Table(title="boilerbench algorithm containers")
    for column in ("service", "container", "id", "image", "status", "health", "version"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.service, row.name, row.short_id, row.image, row.status, row.health,
                      row.version)
    Console(width=200).print(table)


@app.command("swap")
def swap(
    service: Annotated[str, typer.Argument(help="Service name, e.g. justext.")],
    image: Annotated[str, typer.Argument(help="The image to run instead, e.g. me/justext:dev.")],
    timeout: Annotated[float, typer.Option(
        help="Seconds the new container has to become healthy.")] = 120.0,
    engine: Engine = None,
    project: Project = None,
    poll: Annotated[float, typer.Option(
        help="Seconds between health polls.", hidden=True)] = 1.0,
) -> None:
    """Replace SERVICE's container(s) by IMAGE, same network and alias; roll back if unhealthy.

    The old container is removed only once the new one is healthy; a new container that
    never becomes healthy is removed and the old one keeps running.
    """
    from orchestrator.docker_ops import DockerOpsError, connect, swap_service

    if service not in SERVICES:
        raise typer.BadParameter(f"unknown service {service!r}; known: {', '.join(SERVICES)}",
                                 param_hint="SERVICE")

    def report(result: SwapResult) -> None:
        console.print(f"[green]{result.service}: {result.new_name} ({image}) is healthy; "
                      f"{result.old_name} removed")

    try:
        swap_service(connect(engine), service, image, timeout=timeout, project=project,
                     poll=poll, on_swapped=report)
    except DockerOpsError as exc:
        print_error(console, f"swap failed: {exc}")
        raise typer.Exit(1) from None
