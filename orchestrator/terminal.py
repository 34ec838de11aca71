"""Text the CLI prints as it is: page ids, file names and service replies may hold
[brackets], which rich would take for markup, and ESC sequences, which the terminal
would obey (report.printable writes them out)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as escape_markup


def escape(text: str) -> str:
    """The text for a rich print, shown as it is."""
    from orchestrator.report import printable

    return escape_markup(printable(text))


def print_error(console: Console, text: str) -> None:
    """One line in red, as it is."""
    console.print(f"[red]{escape(text)}", highlight=False, soft_wrap=True)
