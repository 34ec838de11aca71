"""Helpers several test files share: dataset samples, archives, the rss feed, and the
one bag-of-words F1 written independently of orchestrator.scoring.

Tests that merely need a word F1 use orchestrator.scoring.bag_f1 (the project's
scoring); `independent_bag_f1` is for the tests whose point is to check the
orchestrator's figures against a separate computation.
"""

from __future__ import annotations

import http.client
import io
import socket
import sqlite3
import struct
import tarfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.context import ForkContext
from pathlib import Path
from statistics import fmean

import httpx
import orjson
import pytest

from orchestrator.scoring import bag_f1
from shared.contract import Algorithm, ErrorReply
from shared.gbdt import Gbdt
from shared.html import parse_html, visible_text
from shared.tokens import tokenize
from shared.training import load_page, page_ids

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "orchestrator" / "sample"  # the test set the CLI runs without --dataset

# A one-item feed whose item matches a page about the harbour bridge at RSS_URL: what
# the rss service needs for a page to reach its algorithm.
RSS_URL = "https://news.example/bridge"
RSS_FEED = (
    '<?xml version="1.0"?><rss version="2.0"><channel><title>City News</title>'
    "<item><title>Harbour bridge reopens after repairs</title>"
    f"<link>{RSS_URL}</link>"
    "<description>The old harbour bridge opened again to traffic on Monday morning after "
    "eight months of repairs, the city council said.</description></item></channel></rss>"
)

# An article's paragraphs, long enough for every extractor to take them for content.
LIBRARY_ARTICLE = (
    "The village library reopened on Saturday after a year of building work that doubled its "
    "reading room and added a small garden where children can listen to stories in summer.",
    "Volunteers carried more than eleven thousand books back onto the new shelves during the "
    "week, sorting them by subject while the electricians finished the lighting upstairs.",
    "The librarian said that the old building had been too cold in winter and too dark all "
    "year, and that the new windows would make the long evenings of reading more pleasant.",
    "Opening hours will be longer from next month, with the library staying open until eight "
    "o'clock on Thursdays so that people who work in the town can visit after their day ends.",
    "A reading group for teenagers starts in the new year, and the council has promised money "
    "for a second computer room once the roof of the old wing has been repaired as well.",
)

# Pages with little or odd text that an extractor must take without raising.
ODD_PAGES = ("", "   ", "<html></html>", "<p>only words here</p>", "<br><br><hr>",
             "\x00\x01<p>ctrl</p>", "<?xml version='1.0' encoding='bogus'?><p>x</p>")


def assert_odd_pages_do_not_raise(algorithm: Algorithm, pages: Sequence[str] = ODD_PAGES
                                  ) -> None:
    """Each page runs without raising and gives no empty block; a lone paragraph is the
    whole extract."""
    for html in pages:
        reply = algorithm.run(html)
        assert all(b.text for b in reply.blocks)
    assert algorithm.run("<p>only words here</p>").text == "only words here"


def run_processes_at_once(context: ForkContext, target: Callable[..., None],
                          args: tuple[object, ...], count: int = 4) -> None:
    """Start `count` processes of `target(*args)` (which meet at a barrier in `args`, so
    that they race), wait for them, and check that each ended well."""
    processes = [context.Process(target=target, args=args)
                 for _ in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert all(process.exitcode == 0 for process in processes)


def post_html_sent_whole(connection: http.client.HTTPConnection, body: bytes, chunked: bool
                         ) -> http.client.HTTPResponse:
    """POST an HTML body to /extract the way http.client does: all of it sent before the
    reply is read (with a Content-Length, or chunked)."""
    headers = {"content-type": "text/html"}
    if chunked:
        connection.request("POST", "/extract", body=iter([body]), headers=headers,
                           encode_chunked=True)
    else:
        connection.request("POST", "/extract", body=body, headers=headers)
    return connection.getresponse()


def assert_error(reply: httpx.Response, status: int) -> ErrorReply:
    """A JSON error reply (the services' and the API's ErrorReply) of `status`."""
    assert reply.status_code == status, reply.text[:500]
    assert reply.headers["content-type"].startswith("application/json")
    return ErrorReply.model_validate(reply.json())


def independent_bag_f1(extract: str, gold: str) -> float:
    """Bag-of-words F1 from plain Counter arithmetic (DESIGN.md), written separately from
    orchestrator.scoring: the same 0/0 rules, none of its code."""
    e, g = Counter(tokenize(extract)), Counter(tokenize(gold))
    common = sum(min(n, g[w]) for w, n in e.items())
    e_total, g_total = sum(e.values()), sum(g.values())
    if e_total == 0 or g_total == 0:
        return 1.0 if e_total == g_total else 0.0
    p, r = common / e_total, common / g_total
    return 0.0 if common == 0 else 2 * p * r / (p + r)


def dataset_pages(folder: Path, stop: int | None = None, step: int = 1
                  ) -> list[tuple[str, str]]:
    """Decoded HTML and gold text of a dataset folder's pages, by sorted id, [:stop:step]:
    a fixed sample, so a test sees the same pages on every run."""
    return [load_page(folder, page_id) for page_id in page_ids(folder)[:stop:step]]


def visible_text_of(html: str) -> str:
    """All of a page's visible text: the baseline an extractor must beat."""
    return visible_text(parse_html(html))


def mean_bag_f1(extract: Callable[[str], str], pages: Sequence[tuple[str, str]]) -> float:
    """Mean bag-of-words word F1 (orchestrator.scoring.bag_f1) of `extract`'s text over
    (html, gold) pages."""
    return fmean(bag_f1(extract(html), gold) for html, gold in pages)


def assert_beats_visible_text(extract: Callable[[str], str], folder: Path,
                               margin: float = 0.1) -> None:
    """On a fixed sample of a dataset (its first 40 pages), `extract`'s mean word F1 is
    at least `margin` above keeping all visible text."""
    pages = dataset_pages(folder, 40)
    assert mean_bag_f1(extract, pages) > mean_bag_f1(visible_text_of, pages) + margin


def assert_recorded_page_scores(recorded: dict[str, float], folder: Path,
                                extract: Callable[[str], str]) -> None:
    """The word F1 a model file recorded for its pages at training time (shared.training
    checks) is what `extract`'s text scores on them now."""
    assert recorded
    for page_id, score in recorded.items():
        html, gold = load_page(folder, page_id)
        assert bag_f1(extract(html), gold) == pytest.approx(score, abs=1e-6), page_id


def tar_bytes(members: Sequence[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz"
              ) -> bytes:
    """A tar archive in memory: (name, data) pairs become files, TarInfo entries
    (links, devices, ...) are added as they are."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                archive.addfile(info, io.BytesIO(member[1]))
    return buffer.getvalue()


def zip_bytes(members: Mapping[str, bytes | str]) -> bytes:
    """A deflated zip archive in memory of (name -> data) files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def write_test_set(folder: Path, pages: Mapping[str, tuple[str, str]]) -> Path:
    """A test set folder (html/, content/) with each page id's (HTML, gold text)."""
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    for page_id, (html, gold) in pages.items():
        (folder / "html" / f"{page_id}.html").write_text(html, encoding="utf-8")
        (folder / "content" / f"{page_id}.txt").write_text(gold, encoding="utf-8")
    return folder


def overlapping_zip(entries: int, kernel: bytes, prefix: str = "set/html/p") -> bytes:
    """A zip of `entries` stored (uncompressed) members whose data overlap: member i's
    data are the local headers of members i+1... and then `kernel`, so each member is
    valid (its CRC and sizes agree, its ratio is 1) but the archive unpacks to about
    `entries` times its own size (D. Fifield, "A better zip bomb", WOOT 2019, without
    the deflate quoting). Every member is an HTML page of a test set with one gold file."""
    names = [f"{prefix}{i:06d}.html".encode() for i in range(entries)]
    data = kernel
    headers: list[bytes] = []
    crcs: list[tuple[int, int]] = []
    for name in reversed(names):  # each member's data hold the following headers
        crc = zlib.crc32(data)
        header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, crc,
                             len(data), len(data), len(name), 0) + name
        headers.insert(0, header)
        crcs.insert(0, (crc, len(data)))
        data = header + data
    gold_name = prefix.rsplit("/", 2)[0].encode() + b"/content/p000000.txt"
    gold = b"the gold text"
    gold_header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0,
                              zlib.crc32(gold), len(gold), len(gold), len(gold_name), 0)
    body = data + gold_header + gold_name + gold
    central = b""
    offset = 0
    for name, header, (crc, size) in zip(names, headers, crcs, strict=True):
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc,
                               size, size, len(name), 0, 0, 0, 0, 0, offset) + name
        offset += len(header)
    central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0,
                           zlib.crc32(gold), len(gold), len(gold), len(gold_name), 0, 0, 0,
                           0, 0, len(data)) + gold_name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries + 1, entries + 1,
                      len(central), len(body), 0)
    return body + central + end


def walk_trees(model: Gbdt, row: Sequence[float]) -> float:
    """One row down each tree, node by node: the plain reading of the tree file format,
    to check the vectorised evaluator against."""
    total = model.base
    for root in model.roots:
        node = int(root)
        while model.feature[node] >= 0:
            goes_left = row[model.feature[node]] <= model.threshold[node]
            node = int(model.left[node] if goes_left else model.right[node])
        total += float(model.value[node])
    return total


def set_run_owner(store: Path, run_id: str, owner: int | str, status: str = "running"
                  ) -> None:
    """Record a run as running (or another `status`, such as queued: pending) in process
    `owner` of this host (a pid), or by `owner` as written (`host:pid:start`), as that
    process would."""
    with sqlite3.connect(store) as db:
        (info,) = db.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()
        recorded = f"{socket.gethostname()}:{owner}" if isinstance(owner, int) else owner
        record = orjson.loads(info) | {"status": status, "owner": recorded}
        db.execute("UPDATE runs SET status = ?, info = ? WHERE id = ?",
                   (status, orjson.dumps(record).decode(), run_id))


def store_of_runs(path: Path, count: int) -> None:
    """A store file of `count` runs, each a few kilobytes, so that it spans many
    pages (to damage one, or cut the file)."""
    from orchestrator.models import RunInfo
    from orchestrator.store import Store

    store = Store(path)
    for i in range(count):
        store.create_run(RunInfo(id=f"r{i}"), {"total": 0, "padding": "x" * 2000}, [])
    store.close()


STORED_PAGE = ("<html><body><p>The river rose overnight and the bridge was closed.</p>"
               "</body></html>", "The river rose overnight and the bridge was closed.")
"""A page and its gold, for runs whose pages are kept in the store."""


def one_page_runs(path: Path, output_folder: Path, count: int) -> list[str]:
    """`count` pending runs of bte on one stored page (STORED_PAGE), in the store at
    `path`; their ids."""
    from orchestrator.runner import RunSpec, create_run
    from orchestrator.store import Store
    from orchestrator.testsets import LabelledPage, in_memory

    store = Store(path)
    spec = RunSpec(datasets=[], services=["bte"], output_folder=str(output_folder))
    page = [in_memory("set", [LabelledPage("set", "p", *STORED_PAGE)])]
    run_ids = [create_run(store, spec, memory=page) for _ in range(count)]
    store.close()
    return run_ids


def resume_hint(stderr: str, store: Path) -> list[str]:
    """The `--resume ID --store PATH` that a stopped `run` or `score` printed, checked
    to name `store`."""
    hint = stderr[stderr.index("resume with ") + len("resume with "):].split()[:4]
    assert hint[0] == "--resume", hint
    assert hint[2:4] == ["--store", str(store)], hint
    return hint
