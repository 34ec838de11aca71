"""`boilerbench render PAGE`: a page's layout in headless Chromium, element by element."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.terminal import print_error
from shared.decoding import NotHTMLError, decode_html
from shared.layout import BrowserUnavailableError, LayoutFailedError, layout

app = typer.Typer()
console = Console()


@app.command()
def render(
    page: Annotated[Path, typer.Argument(help="An HTML file.", exists=True, dir_okay=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the layout as JSON.")] = False,
    javascript: Annotated[bool, typer.Option(
        help="Run the page's scripts first (they still get no network).")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds the browser may take.")] = 30.0,
) -> None:
    """Lay PAGE out as cetd's measure htd does and show every element's box.

    No network, a 1366x768 viewport; per element (keyed by XPath) its box, whether it
    is rendered and its font."""
    try:
        html = decode_html(page.read_bytes())
        rendered = layout(html, javascript=javascript, timeout_s=timeout)
    except (NotHTMLError, BrowserUnavailableError, LayoutFailedError) as exc:
        print_error(console, str(exc))
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(rendered.to_json(), indent=1))
        return
    table = Table(title=f"{page.name}: page {rendered.page_width:.0f} x "
                        f"{rendered.page_height:.0f} px, viewport {rendered.viewport_width} x "
                        f"{rendered.viewport_height}")
    for column in ("path", "x", "y", "width", "height", "rendered", "font"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for path, box in rendered.boxes.items():
        table.add_row(path, f"{box.x:.0f}", f"{box.y:.0f}", f"{box.width:.0f}",
                      f"{box.height:.0f}", "yes" if box.rendered else "no",
                      f"{box.font_size:g}px {box.font_weight}")
    console.print(table)
