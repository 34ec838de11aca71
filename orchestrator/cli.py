"""The `boilerbench` command.

Each group of commands lives in its own module, which exports its own Typer app and
imports nothing from here; this file only assembles them. The command modules import
their heavy libraries (the docker SDK, aiohttp, the statistics) inside the commands
that need them, so `boilerbench up` or `--help` loads none of them.
"""

from __future__ import annotations

from typing import Any

import typer
from typer import rich_utils
from typer.core import TyperOption

from orchestrator import (
    commands_docker,
    commands_render,
    commands_run,
    commands_services,
    commands_train,
    kubernetes,
)

_option_type = TyperOption.display_type_rich


def _flag_type(option: TyperOption, ctx: Any) -> str | None:
    """An option's type in the --help table: none for a flag (--json, --help), which
    takes no value. typer's rich help (0.29) asks every option for its type and shows
    a flag's as `<bool>`, as if it took one; its plain help leaves flags' out."""
    return None if option.is_flag else _option_type(option, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign,assignment]


def _paragraphs(paragraphs: list[str], markup_mode: Any) -> str:
    """A command's help after its first line, each paragraph one line for the terminal
    to wrap. typer's rich help (0.29) keeps the docstring's own line breaks there, so
    an 88-column docstring wraps raggedly in 80 columns; it joins the first line's."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


rich_utils._fix_linebreaks = _paragraphs

app = typer.Typer(
    name="boilerbench",
    help="Web main-content extraction services and their evaluation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Unnamed: their commands are top-level ones (`boilerbench run`), listed in this order.
for commands in (commands_render.app, commands_run.app, commands_services.app, kubernetes.app):
    app.add_typer(commands)
app.add_typer(commands_run.datasets_app, name="datasets")
app.add_typer(commands_run.runs_app, name="runs")
app.add_typer(commands_docker.app, name="docker")
app.add_typer(commands_train.app, name="train")

if __name__ == "__main__":
    app()
