"""Test sets: dataset folders, JSON pages, uploaded archives, and the Scrapinghub download.

A test set is pages with gold text (Rolli 2014, appendix B, f2): `html/<id>.html` and
`content/<id>.txt` paired by file name, optionally `feeds/<id>.xml` (the page's
RSS/Atom feed, for the rss service), as shared.pairing pairs them (training pairs
dataset folders the same way). Files without a partner, and what cannot be a page's
file (sub-folders, broken links), are listed as warnings in the run's results, never
silently dropped.

Archives come from users over HTTP, so they are unpacked member by member, each
streamed to a file of our own under limits counted on the bytes really unpacked
(total size, file count, size per file) and on the headers (compression ratio),
and refused when a member is a link, a device, encrypted, an absolute path or
climbs out with `..`, or when zip members overlap; nothing is ever extracted by the
archive library itself.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import re
import stat
import struct
import tarfile
import tempfile
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.answer import validation_message
from shared.decoding import decode_gold, decode_html
from shared.pairing import pair_files as pair_files  # re-exported: imported from here
from shared.pairing import pair_folders
from shared.pairing import readable_name as readable_name  # re-exported, and used here

_WORDS = re.compile(r"\w+")


class DatasetError(ValueError):
    """A test set that cannot be used (reported to the user as is)."""


SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
"""The built-in sample test set (orchestrator/sample/README.md says what it holds)."""


@dataclass(frozen=True)
class LabelledPage:
    """One test page. `html` is raw bytes (from files; decoded like the services do)
    or text (from JSON)."""

    dataset: str
    id: str
    html: bytes | str
    gold: str
    feed: str | None = None
    notes: tuple[str, ...] = ()
    """What was odd about the page's files (a gold file that is not UTF-8)."""

    def html_text(self) -> str:
        """The page as text; raises NotHTMLError for empty or binary input."""
        return self.html if isinstance(self.html, str) else decode_html(self.html)


@dataclass
class Dataset:
    """A named test set: its page ids, how to load a page, and pairing warnings."""

    name: str
    ids: list[str]
    loader: Callable[[str], LabelledPage]
    warnings: list[str] = field(default_factory=list)
    has_feeds: bool = False

    def page(self, page_id: str) -> LabelledPage:
        return self.loader(page_id)

    def pages(self) -> Iterator[LabelledPage]:
        for page_id in self.ids:
            yield self.loader(page_id)


def read_gold(data: bytes) -> str:
    """A gold (or feed) file's text: see shared.decoding.decode_gold."""
    return decode_gold(data)[0]


def open_folder(name: str, html_folder: Path, content_folder: Path,
                feeds_folder: Path | None = None, roots: Sequence[Path] | None = None
                ) -> Dataset:
    """A test set from an HTML folder and a content folder (pages read when needed).

    With `roots`, every file is resolved (links followed) and used only if it lies
    under one of them: a folder of links to elsewhere reads nothing outside. What
    cannot be a page's file (a sub-folder, a link to one, a broken link, links in a
    loop) is named in the warnings."""
    if html_folder.parent == content_folder.parent and not html_folder.parent.is_dir():
        raise DatasetError(f"{name}: no such folder: {html_folder.parent}")
    for label, folder in (("html", html_folder), ("content", content_folder)):
        if not folder.is_dir():
            raise DatasetError(f"{name}: the {label} folder {folder} does not exist")
    folders = pair_folders(name, html_folder, content_folder, feeds_folder, roots)
    pairing = folders.pairing
    warnings = list(folders.warnings)

    def load(page_id: str) -> LabelledPage:
        gold_name = pairing.content[page_id]
        feed_name = pairing.feeds.get(page_id)
        try:
            gold, note = decode_gold(folders.content[gold_name].read_bytes())
            html = folders.html_file(page_id).read_bytes()
            feed = (read_gold(folders.feeds[feed_name].read_bytes())
                    if feed_name is not None else None)
        except OSError as exc:  # gone or unreadable since the folder was listed
            raise DatasetError(f"{name}/{page_id}: cannot read {exc.filename}: "
                               f"{exc.strerror or exc}") from None
        return LabelledPage(dataset=name, id=page_id, html=html, gold=gold, feed=feed,
                            notes=(f"content/{gold_name} is {note}",) if note else ())

    if not pairing.ids:
        warnings.append(f"{name}: no page has both an html and a content file")
    return Dataset(name, pairing.ids, load, warnings, has_feeds=bool(folders.feeds))


def open_dataset_dir(folder: Path, name: str | None = None) -> Dataset:
    """A test set in the `html/`, `content/` (and optional `feeds/`) layout."""
    if not folder.is_dir():
        raise DatasetError(f"the dataset folder {folder} does not exist")
    feeds = folder / "feeds"
    return open_folder(name or folder.resolve().name, folder / "html", folder / "content",
                       feeds if feeds.is_dir() else None)


def in_memory(name: str, pages: list[LabelledPage], warnings: list[str] | None = None) -> Dataset:
    """A test set held in memory (JSON bodies, archives, pages kept in the store)."""
    by_id = {page.id: page for page in pages}
    if len(by_id) != len(pages):
        twice = sorted(page_id for page_id, n in Counter(p.id for p in pages).items() if n > 1)
        raise DatasetError(f"{name}: page ids are not unique: {', '.join(map(repr, twice[:5]))}"
                           + (f" and {len(twice) - 5} more" if len(twice) > 5 else ""))
    in_nfc: dict[str, str] = {}
    for page_id in by_id:  # prediction files name pages in NFC: such ids would share a text
        first = in_nfc.setdefault(unicodedata.normalize("NFC", page_id), page_id)
        if first != page_id:
            raise DatasetError(f"{name}: page ids are not unique: {first!a} and "
                               f"{page_id!a} differ only in Unicode normal form")
    return Dataset(name, list(by_id), by_id.__getitem__, list(warnings or []),
                   has_feeds=any(page.feed is not None for page in pages))


class PageIn(BaseModel):
    """One page of a JSON test set."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200, pattern=r"^[^/\\\x00]+$")
    html: str
    gold: str
    feed: str | None = None

    @field_validator("id")
    @classmethod
    def _file_name(cls, value: str) -> str:
        """Not `.` or `..`, which a folder's or an archive's pages cannot have (their ids
        are file names): a test set gives the same pages in every form."""
        if value in (".", ".."):
            raise ValueError(f"a page id cannot be {value!r}")
        return value

    @field_validator("id", "html", "gold", "feed")
    @classmethod
    def _utf8(cls, value: str | None) -> str | None:
        """JSON may escape a lone surrogate (\\ud800), which no UTF-8 text can hold."""
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"holds a lone surrogate at character {exc.start}, which "
                                 "UTF-8 text cannot hold") from None
        return value


class DatasetIn(BaseModel):
    """A JSON test set: a name and its pages."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("inline", min_length=1, max_length=100, pattern=r"^[\w.-]+$")
    pages: list[PageIn] = Field(min_length=1)

    def dataset(self) -> Dataset:
        return in_memory(self.name, [LabelledPage(self.name, p.id, p.html, p.gold, p.feed)
                                     for p in self.pages])


# ---------------------------------------------------------------------------------------
# Archives


@dataclass(frozen=True)
class ArchiveLimits:
    """Limits on an uploaded archive, against archive bombs."""

    max_total_bytes: int = 512 * 1024 * 1024
    max_files: int = 20_000
    max_file_bytes: int = 32 * 1024 * 1024
    max_ratio: float = 200.0
    """Uncompressed size over compressed size, per member (zip) or overall (tar)."""


class ArchiveError(DatasetError):
    """An archive refused as unsafe or over a limit."""


def _safe_member_path(name: str) -> PurePosixPath:
    """The member's path if it stays inside the archive, else ArchiveError."""
    if "\x00" in name or "\\" in name:
        raise ArchiveError(f"refused member {name!r}: backslash or NUL in the path")
    path = PurePosixPath(name)
    if path.is_absolute() or (path.parts and re.match(r"^[A-Za-z]:", path.parts[0])):
        raise ArchiveError(f"refused member {name!r}: absolute path")
    if ".." in path.parts:
        raise ArchiveError(f"refused member {name!r}: '..' in the path")
    return PurePosixPath(*[p for p in path.parts if p not in ("", ".")])


class _Budget:
    """Files and bytes unpacked so far, counted from what the decompressor gives (the
    sizes in the headers can lie)."""

    def __init__(self, limits: ArchiveLimits) -> None:
        self.limits = limits
        self.files = 0
        self.total = 0

    def admit(self, name: str, declared: int) -> None:
        """One more member, whose headers claim `declared` bytes."""
        self.files += 1
        if self.files > self.limits.max_files:
            raise ArchiveError(f"more than {self.limits.max_files} files in the archive")
        self.check_file(name, declared)
        if self.total + declared > self.limits.max_total_bytes:
            self.over_total()

    def check_file(self, name: str, size: int) -> None:
        if size > self.limits.max_file_bytes:
            raise ArchiveError(f"member {name!r} is {size} bytes; the limit per file is "
                               f"{self.limits.max_file_bytes}")

    def over_total(self) -> None:
        raise ArchiveError(f"the archive unpacks to more than {self.limits.max_total_bytes} "
                           "bytes")

    def copy(self, stream: IO[bytes], name: str, sink: Callable[[bytes], object]) -> None:
        """Stream one member into `sink` in chunks, counting its real size."""
        size = 0
        while chunk := stream.read(_CHUNK_BYTES):
            size += len(chunk)
            self.total += len(chunk)
            self.check_file(name, size)
            if self.total > self.limits.max_total_bytes:
                self.over_total()
            sink(chunk)


_CHUNK_BYTES = 1024 * 1024
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... name length, extra length
_ZIP_ENCRYPTED = 0x1  # general purpose bit 0 (APPNOTE 4.4.4)


def _check_zip_layout(archive: zipfile.ZipFile, source: IO[bytes]) -> None:
    """Refuse members whose data overlap (PKZIP APPNOTE 4.3.6: each local header and its
    data follow the previous ones): a few kB of shared deflate data named by thousands
    of entries is a bomb that per-member limits never see."""
    end = 0
    for info in sorted(archive.infolist(), key=lambda i: i.header_offset):
        if info.header_offset < end:
            raise ArchiveError(f"member {info.filename!r} overlaps the previous member's data")
        source.seek(info.header_offset)
        header = source.read(_ZIP_LOCAL_HEADER.size)
        if len(header) < _ZIP_LOCAL_HEADER.size:
            raise ArchiveError(f"member {info.filename!r}: its header is cut off")
        signature, name_length, extra_length = _ZIP_LOCAL_HEADER.unpack(header)
        if signature != b"PK\x03\x04":
            raise ArchiveError(f"member {info.filename!r}: no local header at its offset")
        end = (info.header_offset + _ZIP_LOCAL_HEADER.size + name_length + extra_length
               + info.compress_size)
    if end > archive.start_dir:
        raise ArchiveError("the last member's data overlap the central directory")


def _zip_members(source: IO[bytes], limits: ArchiveLimits, budget: _Budget
                 ) -> Iterator[tuple[PurePosixPath, IO[bytes]]]:
    try:
        archive = zipfile.ZipFile(source)
    except zipfile.BadZipFile as exc:
        raise ArchiveError(f"not a readable zip archive: {exc}") from None
    with archive:
        _check_zip_layout(archive, source)
        for info in archive.infolist():
            path = _safe_member_path(info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArchiveError(f"refused member {info.filename!r}: symbolic link")
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ArchiveError(f"refused member {info.filename!r}: not a regular file")
            if info.is_dir():
                continue
            if info.flag_bits & _ZIP_ENCRYPTED:
                raise ArchiveError(f"refused member {info.filename!r}: encrypted (pack the "
                                   "archive again without a password)")
            budget.admit(info.filename, info.file_size)
            if info.compress_size and info.file_size / info.compress_size > limits.max_ratio:
                raise ArchiveError(f"member {info.filename!r} has a compression ratio over "
                                   f"{limits.max_ratio:g}")
            if info.compress_size == 0 and info.file_size > 0:
                raise ArchiveError(f"member {info.filename!r}: inconsistent sizes")
            try:
                with archive.open(info) as stream:
                    yield path, stream
            except (zipfile.BadZipFile, OSError, NotImplementedError, EOFError) as exc:
                raise ArchiveError(f"member {info.filename!r} cannot be read: {exc}") from None


def _tar_members(source: IO[bytes], limits: ArchiveLimits, budget: _Budget
                 ) -> Iterator[tuple[PurePosixPath, IO[bytes]]]:
    packed = source.seek(0, io.SEEK_END)
    source.seek(0)
    try:
        archive = tarfile.open(fileobj=source, mode="r:*")  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError) as exc:
        # tarfile lists every compression it tried, one per line: the first line says it.
        reason = str(exc).splitlines()[0].rstrip(": ") if str(exc) else type(exc).__name__
        raise ArchiveError(f"not a readable zip or tar archive: {reason}") from None
    try:
        with archive:
            for member in archive:
                name = readable_name(member.name)
                path = _safe_member_path(name)
                if member.issym() or member.islnk():
                    raise ArchiveError(f"refused member {name!r}: "
                                       f"{'symbolic' if member.issym() else 'hard'} link")
                if member.isdir():
                    continue
                if not member.isfile():
                    raise ArchiveError(f"refused member {name!r}: not a regular file")
                budget.admit(name, member.size)
                if budget.total + member.size > limits.max_ratio * max(packed, 1):
                    raise ArchiveError(f"the archive's compression ratio is over "
                                       f"{limits.max_ratio:g}")
                stream = archive.extractfile(member)
                if stream is None:
                    raise ArchiveError(f"member {name!r} cannot be read")
                yield path, stream
    except (tarfile.TarError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ArchiveError(f"the tar archive is damaged: {exc}") from None


_MACOS_METADATA = "__MACOSX"
"""The folder where macOS's Finder puts each file's AppleDouble metadata (`._a.html`) in
the zips it makes: no test-set files, so not unpacked."""


def unpack_archive(source: IO[bytes] | bytes, target: Path,
                   limits: ArchiveLimits | None = None) -> list[PurePosixPath]:
    """Unpack the regular files of a zip or tar (.gz/.bz2/.xz) archive under `target`
    (created; it must not exist), streaming each member to disk while counting its
    real size; returns the files' paths. Raises ArchiveError, leaving `target` for the
    caller to remove."""
    limits = limits or ArchiveLimits()
    stream: IO[bytes] = io.BytesIO(source) if isinstance(source, bytes) else source
    if stream.seek(0, io.SEEK_END) > limits.max_total_bytes:
        raise ArchiveError(f"the archive is over {limits.max_total_bytes} bytes")
    stream.seek(0)
    budget = _Budget(limits)
    members = (_zip_members if zipfile.is_zipfile(stream) else _tar_members)
    stream.seek(0)
    target.mkdir(parents=True)
    written: list[PurePosixPath] = []
    for path, member in members(stream, limits, budget):
        if not path.parts or path.parts[0] == _MACOS_METADATA:
            continue
        destination = target.joinpath(*path.parts)
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):  # a folder of it is a file member
            raise ArchiveError(f"member {str(path)!r} lies in a folder that is also a file "
                               "of the archive") from None
        try:
            with destination.open("xb") as sink:
                budget.copy(member, str(path), sink.write)
        except FileExistsError:
            raise ArchiveError(f"member {str(path)!r} appears twice in the archive") from None
        except (NotADirectoryError, IsADirectoryError):
            raise ArchiveError(f"member {str(path)!r} is both a file and a folder") from None
        written.append(path)
    return written


def archive_dataset_folders(root: Path, files: Iterable[PurePosixPath], name: str
                            ) -> tuple[list[tuple[str, Path]], list[str]]:
    """The test sets of an unpacked archive: (set name, folder) of each folder holding
    `html/` and `content/` (the archive root is named `name`, a sub-folder by its own
    name), and a warning naming the files outside them. A folder with only one of the
    two is refused, as a test-set folder without it is."""
    files = list(files)
    roots = sorted({path.parent.parent for path in files
                    if len(path.parts) >= 2 and path.parent.name in ("html", "content")})
    found: list[tuple[str, Path]] = []
    used: set[PurePosixPath] = set()
    for set_root in roots:
        folder = root.joinpath(*set_root.parts)
        missing = [sub for sub in ("html", "content") if not (folder / sub).is_dir()]
        if missing:
            raise DatasetError(f"the archive's folder {set_root.as_posix() or '.'} has "
                               f"{'content/' if missing == ['html'] else 'html/'} but no "
                               f"{missing[0]}/ folder")
        found.append((set_root.name or name, folder))
        used.update(p for p in files if p.parent in
                    (set_root / "html", set_root / "content", set_root / "feeds"))
    if not found:
        raise DatasetError("the archive holds no folder with html/ and content/ sub-folders")
    names = [set_name for set_name, _ in found]
    if len(set(names)) != len(names):
        raise DatasetError(f"the archive holds two test sets of the same name: {names}")
    stray = sorted(str(p) for p in files if p not in used)
    warnings = []
    if stray:
        shown = ", ".join(stray[:20]) + (f" and {len(stray) - 20} more" if len(stray) > 20 else "")
        warnings.append(f"files outside any html/ or content/ folder: {shown}")
    return found, warnings


_SET_NAME = r"[\w.-]{1,100}"
"""A name DatasetIn takes: the name of a JSON file of bare pages must be one."""


_ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".txz", ".tar",
                     ".zip")


def archive_set_name(filename: str, default: str) -> str:
    """The test set name an archive's file name gives: the name without its folder and
    its archive suffix (else its last suffix) only, so `news-v1.2.zip` names
    `news-v1.2`, not `news-v1`."""
    name = readable_name(filename.rsplit("/", 1)[-1])
    suffix = next((s for s in _ARCHIVE_SUFFIXES if name.lower().endswith(s)),
                  name[name.rfind("."):] if "." in name else "")
    return name[:len(name) - len(suffix)] or default


def open_dataset_file(path: Path, limits: ArchiveLimits | None = None) -> list[Dataset]:
    """The test sets of a file named where a folder may be: a JSON test set (`{"name",
    "pages"}`, or only its list of pages, named after the file) or a zip/tar of folders
    with html/ and content/, unpacked in a temporary folder. Their pages are read into
    memory, for the run to keep in its store as it keeps those of a POST /runs."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or text
            raise DatasetError(f"{path}: not a readable JSON test set ({exc})") from None
        if isinstance(data, list):
            if not re.fullmatch(_SET_NAME, path.stem):
                raise DatasetError(f"{path}: the file's name cannot name a test set (up to "
                                   "100 letters, digits, '_', '.', '-'): rename the file or "
                                   'give {"name": ..., "pages": [...]}')
            data = {"name": path.stem, "pages": data}
        try:
            return [DatasetIn.model_validate(data).dataset()]
        except ValidationError as exc:  # a file of many pages: its first problems
            raise DatasetError(f"{path}: not a JSON test set: "
                               f"{validation_message(exc, most=3)}") from None
        except DatasetError as exc:
            raise DatasetError(f"{path}: {exc}") from None
    name = archive_set_name(path.name, "archive")
    with tempfile.TemporaryDirectory() as folder, path.open("rb") as source:
        root = Path(folder) / name
        try:
            folders, warnings = archive_dataset_folders(
                root, unpack_archive(source, root, limits), name)
        except DatasetError as exc:
            raise type(exc)(f"{path}: {exc}") from None  # ArchiveError stays one
        datasets = []
        for set_name, set_folder in folders:
            unpacked = open_dataset_dir(set_folder, set_name)
            datasets.append(in_memory(set_name, list(unpacked.pages()), unpacked.warnings))
        datasets[0].warnings.extend(warnings)  # the archive's own, said once
        return datasets


# ---------------------------------------------------------------------------------------
# The Scrapinghub article extraction benchmark

SCRAPINGHUB_COMMIT = "4a3bc979f76c0df73cb95fe272e2fc1b96f9f010"
SCRAPINGHUB_URL = ("https://raw.githubusercontent.com/scrapinghub/article-extraction-benchmark/"
                   f"{SCRAPINGHUB_COMMIT}")
_MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024


async def _fetch(client: httpx.AsyncClient, url: str, limit: int) -> bytes:
    """The body of `url`; DatasetError naming the URL and the failure (no network, a
    name that does not resolve, a timeout, an HTTP error status, too many bytes)."""
    try:
        async with client.stream("GET", url) as reply:
            if reply.status_code != 200:
                raise DatasetError(f"GET {url}: HTTP {reply.status_code}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in reply.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise DatasetError(f"GET {url}: more than {limit} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise DatasetError(f"GET {url}: {reason}") from None


def _gunzip(data: bytes, name: str, limit: int) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            out = stream.read(limit + 1)
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{name}: not a gzip file: {exc}") from None
    if len(out) > limit:
        raise DatasetError(f"{name}: unpacks to more than {limit} bytes")
    return out


async def download_scrapinghub(target: Path, source_url: str = SCRAPINGHUB_URL,
                               concurrency: int = 8,
                               progress: Callable[[int, int], None] | None = None,
                               timeout_s: float = 60.0) -> int:
    """Fetch the benchmark (upstream `ground-truth.json` and `html/<id>.html.gz`) into
    `target` as html/<id>.html (gunzipped), content/<id>.txt (`articleBody`) and
    index.tsv. Returns the number of pages. Pages already present are kept."""
    base = source_url.rstrip("/")
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=True) as client:
        raw = await _fetch(client, f"{base}/ground-truth.json", _MAX_DOWNLOAD_BYTES)
        try:
            truth = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"ground-truth.json is not JSON: {exc}") from None
        if not isinstance(truth, dict) or not truth:
            raise DatasetError("ground-truth.json is not an object of pages")
        for page_id, entry in truth.items():
            if not re.fullmatch(r"[0-9A-Za-z_-]{1,128}", page_id):
                raise DatasetError(f"ground-truth.json: unexpected page id {page_id!r}")
            if not isinstance(entry, dict) or not isinstance(entry.get("articleBody"), str):
                raise DatasetError(f"ground-truth.json: page {page_id} has no articleBody")
        (target / "html").mkdir(parents=True, exist_ok=True)
        (target / "content").mkdir(parents=True, exist_ok=True)
        semaphore = asyncio.Semaphore(concurrency)
        done = 0

        async def one(page_id: str) -> None:
            nonlocal done
            html_path = target / "html" / f"{page_id}.html"
            if not html_path.exists():
                async with semaphore:
                    packed = await _fetch(client, f"{base}/html/{page_id}.html.gz",
                                          _MAX_DOWNLOAD_BYTES)
                data = _gunzip(packed, f"html/{page_id}.html.gz", _MAX_DOWNLOAD_BYTES)
                partial = html_path.with_suffix(".part")
                partial.write_bytes(data)
                partial.replace(html_path)
            done += 1
            if progress is not None:
                progress(done, len(truth))

        await asyncio.gather(*(one(page_id) for page_id in truth))
    lines = ["id\turl\thtml_bytes\tgold_words"]
    for page_id, entry in sorted(truth.items()):
        body = entry["articleBody"]
        (target / "content" / f"{page_id}.txt").write_text(body, encoding="utf-8")
        size = (target / "html" / f"{page_id}.html").stat().st_size
        url = str(entry.get("url", "")).replace("\t", " ")
        words = len(_WORDS.findall(body))
        lines.append(f"{page_id}\t{url}\t{size}\t{words}")
    (target / "index.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (target / "SOURCE.md").write_text(
        "# scrapinghub (Zyte article extraction benchmark)\n\n"
        f"Downloaded by `boilerbench datasets download scrapinghub` from {base}.\n"
        "Licence: MIT (copyright 2020 Scrapinghub). Gold: the `articleBody` field of "
        "ground-truth.json.\n", encoding="utf-8")
    return len(truth)

