"""How a dataset folder's files pair into pages, one rule for test sets and training.

A page is `html/<id>.html` (or `.htm`, the suffix in any case) and `content/<id>.txt`
paired by file name, optionally `feeds/<id>.xml` (the page's RSS/Atom feed, for the
rss service). Names are compared in Unicode normal form NFC, the id is that form, and
each file is read by its own name: macOS writes names in NFD, other systems mostly in
NFC, and a folder gathered from both pairs all the same. Files without a partner, and
what cannot be a page's file (sub-folders, broken links), are named in warnings, never
silently dropped.

The orchestrator scores test sets and training learns from dataset folders through
this one module, so a folder that scores is a folder that trains, on the same pages.
"""

from __future__ import annotations

import errno
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

HTML_SUFFIXES = (".html", ".htm")
GOLD_SUFFIX = ".txt"
FEED_SUFFIX = ".xml"
_SUFFIXES = {"html": HTML_SUFFIXES, "content": (GOLD_SUFFIX,), "feeds": (FEED_SUFFIX,)}


@dataclass(frozen=True)
class Pairing:
    """Paired ids, the file chosen for each id in each folder, and warnings naming
    every file left out."""

    ids: list[str]
    warnings: list[str]
    html: dict[str, str]
    content: dict[str, str]
    feeds: dict[str, str]


def normal_form(name: str) -> str:
    """Which Unicode normal form a name is in, to tell apart two names that print alike."""
    for form in ("NFC", "NFD"):
        if unicodedata.is_normalized(form, name):
            return form
    return "neither NFC nor NFD"


def pair_files(html: Iterable[str], content: Iterable[str], feeds: Iterable[str] = (),
               dataset: str = "") -> Pairing:
    """Pair file names by id: the name without its suffix (which is matched in any case)
    in normal form NFC, so that `café` written in NFD by macOS pairs with `café` in NFC.
    Of two files with one id in a folder the first by name is used; pages are read
    from the names chosen here, so a file that a warning calls ignored is never the one
    read. Two names that differ only in normal form print alike: their warning spells
    them out."""
    prefix = f"{dataset}: " if dataset else ""
    warnings: list[str] = []

    def by_id(names: Iterable[str], suffixes: tuple[str, ...], folder: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in sorted(names):
            if name.startswith("."):
                continue
            stem, dot, suffix = name.rpartition(".")
            if not dot or f".{suffix.lower()}" not in suffixes:
                warnings.append(f"{prefix}{folder}/{name}: not a {'/'.join(suffixes)} file; "
                                "ignored")
                continue
            page_id = unicodedata.normalize("NFC", stem)
            if page_id not in found:
                found[page_id] = name
                continue
            kept = found[page_id]
            if kept.rpartition(".")[0] == stem:
                warnings.append(f"{prefix}{folder}/{name}: same id as {folder}/{kept}; ignored")
            else:
                warnings.append(
                    f"{prefix}{folder}/{name}: same id as {folder}/{kept}, the same name in "
                    f"another Unicode normal form ({name!a} is {normal_form(name)}, "
                    f"{kept!a} {normal_form(kept)}); ignored")
        return found

    pages = by_id(html, HTML_SUFFIXES, "html")
    golds = by_id(content, (GOLD_SUFFIX,), "content")
    feed_ids = by_id(feeds, (FEED_SUFFIX,), "feeds")
    paired = sorted(set(pages) & set(golds))
    for page_id in sorted(set(pages) - set(golds)):
        warnings.append(f"{prefix}html/{pages[page_id]} has no content/{page_id}.txt; not used")
    for page_id in sorted(set(golds) - set(pages)):
        warnings.append(f"{prefix}content/{golds[page_id]} has no html/{page_id}.html; not used")
    for page_id in sorted(set(feed_ids) - set(paired)):
        warnings.append(f"{prefix}feeds/{feed_ids[page_id]} belongs to no test page; not used")
    return Pairing(paired, warnings, pages, golds, feed_ids)


def readable_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (kept by Python as lone
    surrogates, which no encoder takes, so the store could not hold the name) become
    U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _unresolved(path: Path, exc: OSError | RuntimeError) -> str:
    """Why a folder entry cannot be followed, in the words its owner would use: a
    link to a missing target is a broken link, whatever the error says."""
    if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
        return "a link in a loop"  # RuntimeError up to Python 3.12, ELOOP after
    if isinstance(exc, FileNotFoundError):
        return ("a broken link (its target does not exist)" if path.is_symlink()
                else "gone since the folder was listed")
    return f"cannot be read ({exc.strerror or exc})"


def folder_files(folder: Path, label: str, dataset: str, unusable: list[str],
                 roots: Sequence[Path] | None = None) -> dict[str, Path]:
    """The regular files of `folder` (links followed) by readable name; what cannot be
    a page's file (a sub-folder, a link to one, a broken link, links in a loop) is
    appended to `unusable`. With `roots`, a file is used only if it lies under one of
    them: a folder of links to elsewhere reads nothing outside. Hidden entries are
    passed over, but for a page's file whose id would be empty, `.` or `..` (`.html`,
    `..html`, `...html`): its name is a page's suffix and nothing else, and no page can
    be so named."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        shown = readable_name(path.name)
        where = f"{dataset}: {label}/{shown}"
        if path.name.startswith("."):
            stem, _, suffix = shown.rpartition(".")
            if stem in ("", ".", "..") and f".{suffix.lower()}" in _SUFFIXES.get(label, ()):
                unusable.append(f"{where}: a page id cannot be {stem!r}; not used")
            continue
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            unusable.append(f"{where}: {_unresolved(path, exc)}; not used")
            continue
        # A link is named as one: the folder a user meets may be its target.
        link = path.is_symlink()
        if roots is not None and not any(real.is_relative_to(r) for r in roots):
            unusable.append(f"{where} lies outside the allowed folders; not used")
        elif real.is_dir():
            what = "a link to a folder" if link else "a folder"
            unusable.append(f"{where}: {what}; files in sub-folders are not read")
        elif not real.is_file():
            what = "a link to what is not a regular file" if link else "not a regular file"
            unusable.append(f"{where}: {what}; not used")
        elif shown in found:
            unusable.append(f"{where}: its name is not UTF-8 and reads as another "
                            "file's; not used")
        else:
            found[shown] = real
    return found


@dataclass(frozen=True)
class PairedFolders:
    """A dataset's files paired into pages: the pairing of their names, the file each
    name reads, and every warning (unusable entries first, then the pairing's)."""

    pairing: Pairing
    html: dict[str, Path]
    content: dict[str, Path]
    feeds: dict[str, Path]
    warnings: list[str]

    @property
    def ids(self) -> list[str]:
        return self.pairing.ids

    def html_file(self, page_id: str) -> Path:
        return self.html[self.pairing.html[page_id]]

    def gold_file(self, page_id: str) -> Path:
        return self.content[self.pairing.content[page_id]]


def pair_folders(dataset: str, html_folder: Path, content_folder: Path,
                 feeds_folder: Path | None = None, roots: Sequence[Path] | None = None
                 ) -> PairedFolders:
    """List the folders (folder_files) and pair what they hold (pair_files). The html
    and content folders must exist; feeds are read where their folder does."""
    unusable: list[str] = []
    html = folder_files(html_folder, "html", dataset, unusable, roots)
    content = folder_files(content_folder, "content", dataset, unusable, roots)
    feeds = (folder_files(feeds_folder, "feeds", dataset, unusable, roots)
             if feeds_folder is not None and feeds_folder.is_dir() else {})
    pairing = pair_files(html, content, feeds, dataset)
    return PairedFolders(pairing, html, content, feeds, unusable + pairing.warnings)
