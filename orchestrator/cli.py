"""The `boilerbench` command.

Each group of commands lives in its own module; this file only assembles them.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="boilerbench",
    help="Web main-content extraction services and their evaluation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Command modules register themselves on `app` (or add a sub-Typer) when imported.
# Keep one import line per module here.
from orchestrator import (  # noqa: E402
    commands_render,  # noqa: F401
    commands_run,  # noqa: F401
    commands_services,  # noqa: F401
    kubernetes,  # noqa: F401
)
from orchestrator.commands_docker import docker_app  # noqa: E402
from orchestrator.commands_train import train_app  # noqa: E402

app.add_typer(docker_app, name="docker")
app.add_typer(train_app, name="train")

if __name__ == "__main__":
    app()
