"""What the benchmark scripts share: the repository on sys.path, where a dataset is,
its pages, the machine and command a figure was measured with, a target's service and
options (rss's a feed per page, as no dataset has feeds), and where results are written.

Scripts run as `python benchmarks/<name>.py`, which puts benchmarks/ on sys.path, so
`import common` (first, before the project's imports) finds this module, and this
module puts the repository there too. A service to measure runs under
tests.servers.serve_service, as the tests run it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from shared.datasets import dataset_dir, datasets_root  # noqa: E402
from shared.pairing import pair_folders  # noqa: E402

FEED_WORDS = 60


@dataclass(frozen=True)
class PageRef:
    """A dataset's page by path (read when sent), and its gold text, for rss's feed."""

    dataset: str
    page_id: str
    html_path: str
    gold_path: str
    url: str | None


def require_dataset(name: str) -> Path:
    """The folder of development dataset `name`, or exit naming where it was looked for."""
    folder = dataset_dir(name)
    if folder is None:
        raise SystemExit(f"dataset {name!r} not found under {datasets_root()} "
                         "(set BOILERBENCH_DATASETS)")
    return folder


def paired_files(folder: Path, limit: int | None = None) -> list[tuple[str, Path, Path]]:
    """(page id, HTML file, gold file) of a dataset folder's pages, the first `limit`,
    paired as a run pairs a test set (shared.pairing)."""
    folders = pair_folders(folder.name, folder / "html", folder / "content")
    return [(i, folders.html_file(i), folders.gold_file(i)) for i in folders.ids[:limit or None]]


def load_pages(datasets: Sequence[str], limit: int | None) -> list[PageRef]:
    """Every page of the datasets (the first `limit` of each, paired_files), with its
    URL from the dataset's index.tsv where it has one."""
    pages: list[PageRef] = []
    for name in datasets:
        folder = require_dataset(name)
        urls: dict[str, str] = {}
        index = folder / "index.tsv"
        if index.exists():
            for line in index.read_text(encoding="utf-8").splitlines()[1:]:
                fields = line.split("\t")
                if len(fields) > 1 and fields[1].strip():
                    urls[fields[0]] = fields[1].strip()
        pages += [PageRef(name, i, str(html), str(gold), urls.get(i))
                  for i, html, gold in paired_files(folder, limit)]
    return pages


def positive_int(text: str) -> int:
    """An argparse type for a count (pages, rounds, processes, repeats): 0 or less would
    measure nothing, or as a slice bound every page but some, and report it as measured."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def service_list(value: str) -> list[str]:
    """An argparse type for `a,b` or `all`: the registry's names, an unknown one refused
    with the names known (rather than a KeyError's traceback once services start)."""
    from orchestrator.launcher import parse_service_list

    try:
        return parse_service_list(value)
    except KeyError as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0])) from None


def service_name(value: str) -> str:
    """An argparse type for one service of the registry (service_list's check)."""
    names = service_list(value)
    if len(names) != 1:
        raise argparse.ArgumentTypeError(f"{value!r}: name one service")
    return names[0]


def existing_file(text: str) -> Path:
    """An argparse type for a file read as input: a missing one is refused by name."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """A measured target, a service with options, in the scripts' compact form:
    `density:threshold=fixed` -> ('density', {'threshold': 'fixed'}); several options
    are `name:key=value:key=value`. The service coerces the values (its options model)."""
    name, *pairs = target.split(":")
    options: dict[str, str] = {}
    for pair in filter(None, pairs):
        key, mark, value = pair.partition("=")
        if not mark:
            raise SystemExit(f"{target!r}: {pair!r} is not key=value")
        options[key.strip()] = value.strip()
    return name.strip(), options


def _page_url(page: PageRef) -> str:
    """The page's URL, or one made up for a page without (rss matches its feed by it)."""
    return page.url or f"https://example.org/{page.page_id}"


def rss_feed(page: PageRef) -> str:
    """A one-item RSS feed for a page: its URL as link, its gold text's start as summary."""
    words = Path(page.gold_path).read_text(encoding="utf-8").split()[:FEED_WORDS]
    link = _page_url(page)
    return (
        '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><title>feed</title>'
        f"<item><title>{escape(page.page_id)}</title><link>{escape(link)}</link>"
        f"<description>{escape(' '.join(words))}</description></item></channel></rss>"
    )


def page_options(target: str, page: PageRef) -> tuple[dict[str, str], str | None]:
    """The options and URL a target gets for one page: rss its page's feed (without one
    it refuses the page, and would be measured refusing)."""
    name, options = parse_target(target)
    if name == "rss":
        return {**options, "feed": rss_feed(page)}, _page_url(page)
    return options, None


def query_params(options: dict[str, str], url: str | None) -> dict[str, str]:
    """A request's query: the options, and the page's URL where it has one."""
    return {**options, **({"url": url} if url else {})}


def machine() -> dict[str, Any]:
    """The processor, core count, Python and load a figure was measured on."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "platform": platform.platform(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def load_note(load_start: Sequence[float]) -> str:
    """The cores and the load average (1 minute) at a run's start and now: how busy the
    machine was, the run's own processes included, for a result's header."""
    return (f"{os.cpu_count()} cores, load average {load_start[0]:.2f} at the start and "
            f"{os.getloadavg()[0]:.2f} at the end")


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces a run of benchmarks/`script` (`argv`: its arguments,
    None for the process's own)."""
    arguments = sys.argv[1:] if argv is None else argv
    return " ".join(["python", f"benchmarks/{Path(script).name}", *arguments])


def write_results(out: Path, name: str, markdown: str, data: Any) -> None:
    """`name`.md and `name`.json under `out` (created), and the table on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(markdown, encoding="utf-8")
    (out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(markdown)
