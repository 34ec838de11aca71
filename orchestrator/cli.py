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
from orchestrator import commands_services  # noqa: E402,F401

if __name__ == "__main__":
    app()
