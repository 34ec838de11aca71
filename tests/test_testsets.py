"""Test sets: folder pairing, JSON pages, archives (bombs, traversal, links refused),
and the Scrapinghub download against a local HTTP server."""

from __future__ import annotations

import asyncio
import functools
import gzip
import http.server
import io
import json
import os
import tarfile
import tempfile
import unicodedata
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.testsets import (
    ArchiveError,
    ArchiveLimits,
    Dataset,
    DatasetError,
    DatasetIn,
    PageIn,
    archive_set_name,
    download_scrapinghub,
    open_dataset_dir,
    open_dataset_file,
    pair_files,
)
from shared.tokens import tokenize
from tests.helpers import SAMPLE, tar_bytes, zip_bytes
from tests.servers import serve_http

PAGE = b"<html><body><p>Hello world</p></body></html>"


def test_sample_set_pairs_every_page_and_decodes_latin1() -> None:
    dataset = open_dataset_dir(SAMPLE)
    assert dataset.warnings == []
    assert len(dataset.ids) == 13
    assert dataset.has_feeds
    cafe = dataset.page("latin1-cafe")
    assert isinstance(cafe.html, bytes)  # raw bytes, ISO-8859-1
    assert b"fa\xe7ade" in cafe.html
    assert "façade a gardé" in cafe.html_text()
    assert dataset.page("library-opening-hours").feed is not None
    assert dataset.page("blog-sourdough").feed is None
    for page in dataset.pages():  # each gold text is words of its own page
        page_words = set(tokenize(page.html_text()))
        gold = tokenize(page.gold)
        assert gold
        assert sum(word in page_words for word in gold) / len(gold) > 0.95, page.id


def test_unpaired_files_are_listed_not_dropped_silently(tmp_path: Path) -> None:
    for folder in ("html", "content", "feeds"):
        (tmp_path / folder).mkdir()
    (tmp_path / "html" / "a.html").write_bytes(PAGE)
    (tmp_path / "html" / "only-html.html").write_bytes(PAGE)
    (tmp_path / "html" / "notes.doc").write_bytes(b"x")
    (tmp_path / "content" / "a.txt").write_text("Hello world")
    (tmp_path / "content" / "only-gold.txt").write_text("gold")
    (tmp_path / "feeds" / "orphan.xml").write_text("<rss/>")
    dataset = open_dataset_dir(tmp_path, "mine")
    assert dataset.ids == ["a"]
    text = "\n".join(dataset.warnings)
    assert "mine: html/only-html.html has no content/only-html.txt" in text
    assert "mine: content/only-gold.txt has no html/only-gold.html" in text
    assert "mine: html/notes.doc: not a .html/.htm file" in text
    assert "mine: feeds/orphan.xml belongs to no test page" in text
    assert dataset.page("a").gold == "Hello world"


def test_a_folder_reads_the_files_it_paired(tmp_path: Path) -> None:
    """A file another file's id shadows, an upper-case suffix: each page is read from
    the file its pairing chose, the one no warning calls ignored."""
    for folder in ("html", "content", "feeds"):
        (tmp_path / folder).mkdir()
    (tmp_path / "html" / "a.html").write_bytes(PAGE)
    (tmp_path / "html" / "a.doc").write_bytes(b"not the page")
    (tmp_path / "html" / "b.htm").write_bytes(b"<p>the htm</p>")
    (tmp_path / "html" / "b.html").write_bytes(b"<p>the html</p>")
    (tmp_path / "content" / "a.TXT").write_text("Hello world")
    (tmp_path / "content" / "b.txt").write_text("the htm")
    (tmp_path / "feeds" / "a.XML").write_text("<rss/>")
    dataset = open_dataset_dir(tmp_path, "mine")
    assert dataset.ids == ["a", "b"]
    assert "mine: html/b.html: same id as html/b.htm; ignored" in dataset.warnings
    a, b = dataset.page("a"), dataset.page("b")
    assert (a.html, a.gold, a.feed) == (PAGE, "Hello world", "<rss/>")
    assert b.html == b"<p>the htm</p>"


def test_what_a_folder_cannot_use_is_named(tmp_path: Path) -> None:
    """Sub-folders, links to folders, broken links and links in a loop are warnings,
    each named as what it is (not passed over, nor a traceback); a name that is not
    UTF-8 is read, its bytes shown as U+FFFD."""
    (tmp_path / "html" / "sub").mkdir(parents=True)
    (tmp_path / "html" / "folder.html").symlink_to(tmp_path / "html" / "sub")
    (tmp_path / "html" / "device.html").symlink_to("/dev/null")
    (tmp_path / "content" / "sub").mkdir(parents=True)
    (tmp_path / "html" / "sub" / "c.html").write_bytes(PAGE)
    (tmp_path / "content" / "sub" / "c.txt").write_text("Hello world")
    (tmp_path / "html" / "gone.html").symlink_to(tmp_path / "nowhere.html")
    (tmp_path / "html" / "loop.html").symlink_to(tmp_path / "html" / "loop.html")
    (tmp_path / "content" / "gone.txt").write_text("x")
    (tmp_path / "content" / "loop.txt").write_text("x")
    latin = os.fsdecode(b"caf\xe9")
    (tmp_path / "html" / f"{latin}.html").write_bytes(PAGE)
    (tmp_path / "content" / f"{latin}.txt").write_text("Hello world")
    dataset = open_dataset_dir(tmp_path, "mine")
    assert dataset.ids == ["caf\ufffd"]
    assert dataset.page("caf\ufffd").gold == "Hello world"
    text = "\n".join(dataset.warnings)
    assert "mine: html/sub: a folder; files in sub-folders are not read" in text
    assert "mine: content/sub: a folder" in text
    assert "mine: html/gone.html: a broken link (its target does not exist)" in text
    assert "mine: html/loop.html: a link in a loop; not used" in text
    assert ("mine: html/folder.html: a link to a folder; files in sub-folders are not read"
            in text)
    assert "mine: html/device.html: a link to what is not a regular file" in text


def test_a_file_gone_after_listing_is_a_dataset_error(tmp_path: Path) -> None:
    (tmp_path / "html").mkdir()
    (tmp_path / "content").mkdir()
    (tmp_path / "html" / "a.html").write_bytes(PAGE)
    (tmp_path / "content" / "a.txt").write_text("Hello world")
    dataset = open_dataset_dir(tmp_path, "mine")
    (tmp_path / "html" / "a.html").unlink()
    with pytest.raises(DatasetError, match=r"mine/a: cannot read .*a\.html: No such file"):
        dataset.page("a")


def test_pairing_reports_duplicate_ids() -> None:
    pairing = pair_files(["x.html", "x.htm"], ["x.txt"])
    assert pairing.ids == ["x"]
    assert any("same id" in w for w in pairing.warnings)


CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")  # as macOS writes file names


def _names_kept_as_written(folder: Path) -> bool:
    """Whether the file system keeps a name's normal form (not one that normalises)."""
    (folder / CAFE_NFD).touch()
    kept = CAFE_NFD in os.listdir(folder)
    (folder / CAFE_NFD).unlink()
    return kept


def test_names_in_nfd_and_nfc_pair_under_one_nfc_id(tmp_path: Path) -> None:
    """The html name in NFC, the gold and feed names in NFD: one page, its id in NFC,
    each file read from its own name."""
    for folder in ("html", "content", "feeds"):
        (tmp_path / folder).mkdir()
    if not _names_kept_as_written(tmp_path):
        pytest.skip("this file system normalises names")
    (tmp_path / "html" / f"{CAFE_NFC}.html").write_bytes(PAGE)
    (tmp_path / "content" / f"{CAFE_NFD}.txt").write_text("Hello world", encoding="utf-8")
    (tmp_path / "feeds" / f"{CAFE_NFD}.xml").write_text("<rss/>", encoding="utf-8")
    dataset = open_dataset_dir(tmp_path, "mine")
    assert dataset.warnings == []
    assert dataset.ids == [CAFE_NFC]
    page = dataset.page(CAFE_NFC)
    assert (page.id, page.html, page.gold, page.feed) == (CAFE_NFC, PAGE, "Hello world",
                                                          "<rss/>")


def test_two_names_that_differ_only_in_normal_form_are_told_apart(tmp_path: Path) -> None:
    """Two files of one id print alike: the warning spells both out and names the one
    ignored, and the page is read from the other."""
    for folder in ("html", "content"):
        (tmp_path / folder).mkdir()
    if not _names_kept_as_written(tmp_path):
        pytest.skip("this file system normalises names")
    (tmp_path / "html" / f"{CAFE_NFC}.html").write_bytes(b"<p>the NFC file</p>")
    (tmp_path / "html" / f"{CAFE_NFD}.html").write_bytes(b"<p>the NFD file</p>")
    (tmp_path / "content" / f"{CAFE_NFC}.txt").write_text("gold", encoding="utf-8")
    dataset = open_dataset_dir(tmp_path, "mine")
    assert dataset.ids == [CAFE_NFC]
    (warning,) = dataset.warnings
    assert warning == (f"mine: html/{CAFE_NFC}.html: same id as html/{CAFE_NFD}.html, the "
                       "same name in another Unicode normal form ('caf\\xe9.html' is NFC, "
                       "'cafe\\u0301.html' NFD); ignored")
    assert dataset.page(CAFE_NFC).html == b"<p>the NFD file</p>"


def test_an_archive_pairs_names_in_nfd_and_nfc() -> None:
    data = zip_bytes({f"set/html/{CAFE_NFC}.html": PAGE,
                      f"set/content/{CAFE_NFD}.txt": b"Hello world"})
    (dataset,) = datasets_from_archive(data)
    assert (dataset.ids, dataset.warnings) == ([CAFE_NFC], [])
    assert dataset.page(CAFE_NFC).gold == "Hello world"


def test_json_page_ids_that_differ_only_in_normal_form_are_refused() -> None:
    """Prediction files name pages in NFC: the two pages would get one text."""
    pages = [{"id": page_id, "html": "<p>x</p>", "gold": "x"} for page_id in (CAFE_NFC,
                                                                              CAFE_NFD)]
    with pytest.raises(DatasetError, match=r"'caf\\xe9' and 'cafe\\u0301' differ only in "
                                           "Unicode normal form"):
        DatasetIn.model_validate({"pages": pages}).dataset()


@pytest.mark.parametrize("page_id", [".", ".."])
def test_a_json_page_id_no_file_could_have_is_refused(page_id: str) -> None:
    """A folder or an archive cannot hold page `.` or `..` (html/..html is passed over
    with a warning): a JSON test set may not either, so that one test set gives the same
    pages whatever its form, and outputs written as files have names."""
    with pytest.raises(ValidationError, match="a page id cannot be"):
        PageIn.model_validate({"id": page_id, "html": "<p>x</p>", "gold": "x"})
    assert PageIn.model_validate({"id": "...x", "html": "<p>x</p>", "gold": "x"}).id == "...x"


def test_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        open_dataset_dir(tmp_path / "nothing")


def test_json_pages() -> None:
    body = {"name": "inline", "pages": [{"id": "p1", "html": "<p>x</p>", "gold": "x"},
                                        {"id": "p2", "html": "<p>y</p>", "gold": "y",
                                         "feed": "<rss/>"}]}
    dataset = DatasetIn.model_validate(body).dataset()
    assert dataset.ids == ["p1", "p2"]
    assert dataset.has_feeds
    assert dataset.page("p2").html_text() == "<p>y</p>"
    with pytest.raises(ValidationError):
        DatasetIn.model_validate({"pages": [{"id": "../x", "html": "", "gold": ""}]})
    with pytest.raises(DatasetError, match="not unique"):
        DatasetIn.model_validate({"pages": [{"id": "a", "html": "", "gold": ""}] * 2}).dataset()


def datasets_from_archive(data: bytes, name: str = "upload",
                          limits: ArchiveLimits | None = None) -> list[Dataset]:
    """The test sets of an archive, read as `--dataset` reads an archive file."""
    with tempfile.TemporaryDirectory() as temp:
        path = Path(temp) / f"{name}.archive"
        path.write_bytes(data)
        return open_dataset_file(path, limits)


def test_a_json_test_set_file_as_pages_or_named(tmp_path: Path) -> None:
    sample = open_dataset_dir(SAMPLE)
    pages = [{"id": p.id, "html": p.html_text(), "gold": p.gold} for p in sample.pages()]
    (tmp_path / "listed.json").write_text(json.dumps(pages), encoding="utf-8")
    (tmp_path / "named.json").write_text(json.dumps({"name": "mine", "pages": pages[:2]}),
                                         encoding="utf-8")
    (listed,) = open_dataset_file(tmp_path / "listed.json")
    (named,) = open_dataset_file(tmp_path / "named.json")
    assert (listed.name, listed.ids) == ("listed", sample.ids)
    assert (named.name, named.ids) == ("mine", sample.ids[:2])
    page = sample.ids[0]
    assert listed.page(page).gold == sample.page(page).gold
    assert listed.page(page).html_text() == sample.page(page).html_text()
    (tmp_path / "broken.json").write_text('[{"id": "a"', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"broken\.json: not a readable JSON test set"):
        open_dataset_file(tmp_path / "broken.json")
    (tmp_path / "odd.json").write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"odd\.json: not a JSON test set: pages: Field"):
        open_dataset_file(tmp_path / "odd.json")


def test_zip_archive_with_two_sets_and_stray_files() -> None:
    data = zip_bytes({"html/a.html": PAGE, "content/a.txt": b"Hello world",
                 "content/b.txt": b"gold", "other/html/c.html": PAGE,
                 "other/content/c.txt": b"c", "README": b"notes"})
    first, second = datasets_from_archive(data, "upload")
    assert (first.name, first.ids) == ("upload", ["a"])
    assert (second.name, second.ids) == ("other", ["c"])
    assert any("content/b.txt has no html/b.html" in w for w in first.warnings)
    assert any("README" in w for w in first.warnings)
    assert first.page("a").html_text() == PAGE.decode()


def test_an_archive_set_without_its_gold_folder_is_refused() -> None:
    data = zip_bytes({"good/html/a.html": PAGE, "good/content/a.txt": b"Hello",
                      "nogold/html/b.html": PAGE})
    with pytest.raises(DatasetError, match="nogold has html/ but no content/ folder"):
        datasets_from_archive(data)


def test_tar_archive_reads_pages_and_feeds() -> None:
    data = tar_bytes([("set/html/a.html", PAGE), ("set/content/a.txt", b"Hello"),
                 ("set/feeds/a.xml", b"<rss/>")])
    (dataset,) = datasets_from_archive(data)
    assert dataset.name == "set"
    assert dataset.page("a").feed == "<rss/>"


@pytest.mark.parametrize("name", ["../evil/html/a.html", "/etc/html/a.html",
                                  "set/../../html/a.html", "C:/x/html/a.html",
                                  "set\\..\\html\\a.html"])
def test_traversal_and_absolute_paths_are_refused(name: str) -> None:
    with pytest.raises(ArchiveError, match="refused member"):
        datasets_from_archive(zip_bytes({name: PAGE, "content/a.txt": b"x"}))
    with pytest.raises(ArchiveError, match="refused member"):
        datasets_from_archive(tar_bytes([(name, PAGE), ("content/a.txt", b"x")]))


def test_a_member_under_a_file_member_and_a_repeated_member_say_which_they_are() -> None:
    with pytest.raises(ArchiveError, match="lies in a folder that is also a file"):
        datasets_from_archive(zip_bytes({"ds/html": b"x", "ds/html/a.html": PAGE,
                                         "ds/content/a.txt": b"x"}))
    with pytest.raises(ArchiveError, match="appears twice"):
        datasets_from_archive(tar_bytes([("html/a.html", PAGE), ("html/a.html", PAGE),
                                         ("content/a.txt", b"x")]))


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE])
def test_tar_links_and_devices_are_refused(kind: bytes) -> None:
    link = tarfile.TarInfo("html/a.html")
    link.type = kind
    link.linkname = "/etc/passwd"
    with pytest.raises(ArchiveError, match=r"link|not a regular file"):
        datasets_from_archive(tar_bytes([("content/a.txt", b"x"), link]))


def test_zip_symlink_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("html/a.html")
        info.external_attr = (0o120777 << 16)  # S_IFLNK
        archive.writestr(info, "/etc/passwd")
        archive.writestr("content/a.txt", "x")
    with pytest.raises(ArchiveError, match="symbolic link"):
        datasets_from_archive(buffer.getvalue())


def test_an_encrypted_zip_member_is_refused_in_one_line() -> None:
    data = bytearray(zip_bytes({"html/a.html": PAGE, "content/a.txt": b"x"}))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local, central
        at = data.find(signature)
        while at >= 0:
            data[at + flags_at] |= 0x1  # general purpose bit 0: encrypted
            at = data.find(signature, at + 4)
    with pytest.raises(ArchiveError, match=r"'html/a\.html': encrypted"):
        datasets_from_archive(bytes(data))


def test_compression_bombs_and_limits_are_refused() -> None:
    zeros = b"\0" * 5_000_000  # deflates about 1000:1
    with pytest.raises(ArchiveError, match="compression ratio"):
        datasets_from_archive(zip_bytes({"html/a.html": zeros, "content/a.txt": b"x"}))
    with pytest.raises(ArchiveError, match="compression ratio"):
        datasets_from_archive(tar_bytes([("html/a.html", zeros), ("content/a.txt", b"x")]))
    small = ArchiveLimits(max_file_bytes=100)
    with pytest.raises(ArchiveError, match="limit per file"):
        datasets_from_archive(zip_bytes({"html/a.html": bytes(range(256)) * 2,
                                    "content/a.txt": b"x"}), limits=small)
    many = {f"html/{i}.html": PAGE for i in range(30)}
    with pytest.raises(ArchiveError, match="more than 20 files"):
        datasets_from_archive(zip_bytes(many), limits=ArchiveLimits(max_files=20))
    big = zip_bytes({f"html/{i}.html": PAGE * 50 for i in range(30)})  # 66 kB in, a few kB packed
    with pytest.raises(ArchiveError, match="unpacks to more than 20000"):
        datasets_from_archive(big, limits=ArchiveLimits(max_total_bytes=20_000))


def test_not_an_archive() -> None:
    with pytest.raises(ArchiveError, match="not a readable zip or tar archive"):
        datasets_from_archive(b"just text, no archive at all")
    with pytest.raises(DatasetError, match="no folder with html/ and content/"):
        datasets_from_archive(zip_bytes({"a.txt": b"x"}))


@pytest.fixture
def fake_upstream(tmp_path: Path) -> Iterator[str]:
    """A local HTTP server with the upstream layout: ground-truth.json, html/<id>.html.gz."""
    root = tmp_path / "upstream"
    (root / "html").mkdir(parents=True)
    truth = {
        "aa11": {"articleBody": "First article body.", "url": "https://example.org/1"},
        "bb22": {"articleBody": "Zweiter Artikel über Käse.", "url": "https://example.org/2"},
    }
    (root / "ground-truth.json").write_text(json.dumps(truth), encoding="utf-8")
    for page_id in truth:
        (root / "html" / f"{page_id}.html.gz").write_bytes(
            gzip.compress(f"<html><body><p>{page_id} page</p></body></html>".encode()))
    handler = functools.partial(_QuietHandler, directory=str(root))
    with serve_http(handler) as url:
        yield url


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def test_download_scrapinghub_from_a_local_server(fake_upstream: str, tmp_path: Path) -> None:
    target = tmp_path / "scrapinghub"
    seen: list[tuple[int, int]] = []
    count = asyncio.run(download_scrapinghub(target, fake_upstream,
                                             progress=lambda d, t: seen.append((d, t))))
    assert count == 2
    assert seen[-1] == (2, 2)
    dataset = open_dataset_dir(target)
    assert dataset.ids == ["aa11", "bb22"]
    assert dataset.warnings == []
    assert dataset.page("bb22").gold == "Zweiter Artikel über Käse."
    assert dataset.page("aa11").html_text() == "<html><body><p>aa11 page</p></body></html>"
    index = (target / "index.tsv").read_text().splitlines()
    size = len("<html><body><p>aa11 page</p></body></html>")
    assert index[1] == f"aa11\thttps://example.org/1\t{size}\t3"


def test_download_reports_missing_files(fake_upstream: str, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="HTTP 404"):
        asyncio.run(download_scrapinghub(tmp_path / "x", fake_upstream + "/nothing-here"))


def test_cli_download(fake_upstream: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    result = CliRunner().invoke(app, ["datasets", "download", "scrapinghub", "--to",
                                      str(tmp_path / "sh"), "--source-url", fake_upstream])
    assert result.exit_code == 0, result.output
    assert "2 pages in" in result.output
    assert sorted(p.name for p in (tmp_path / "sh" / "content").iterdir()) == [
        "aa11.txt", "bb22.txt"]


def test_a_json_test_set_with_a_lone_surrogate_names_the_file_and_the_page(
        tmp_path: Path) -> None:
    path = tmp_path / "set.json"
    path.write_text('[{"id": "a", "html": "<p>x</p>", "gold": "ok"},'
                    ' {"id": "b", "html": "<p>x</p>", "gold": "\\ud800"}]', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"set\.json.*pages\.1\.gold.*lone surrogate"):
        open_dataset_file(path)


def test_json_test_sets_that_cannot_be_read_say_why_in_one_line(tmp_path: Path) -> None:
    page = {"id": "a", "html": "<p>x</p>", "gold": "x"}
    cases = {
        "deep.json": ("[" * 100_000 + "]" * 100_000, "not a readable JSON test set"),
        "number.json": ('[{"id": "a", "html": "<p>x</p>", "gold": ' + "9" * 5000 + "}]",
                        "not a readable JSON test set"),
        "my pages.json": (json.dumps([page]), "the file's name cannot name a test set"),
        "twice.json": (json.dumps([page, page]), r"twice\.json: twice: page ids are not "
                                                 "unique: 'a'"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(DatasetError, match=message):
            open_dataset_file(tmp_path / name)


@pytest.mark.parametrize(("filename", "expected"), [
    ("news-v1.2.zip", "news-v1.2"), ("set.v2.tar.gz", "set.v2"), ("pages.TGZ", "pages"),
    ("uploads/data.tar.xz", "data"), ("pages.archive", "pages"), ("plain", "plain"),
    (".zip", "archive")])
def test_an_archive_names_its_test_set_by_its_name_without_the_archive_suffix(
        filename: str, expected: str) -> None:
    # Two versions of one set (set.v1.zip, set.v2.zip) must not both be named "set".
    assert archive_set_name(filename, "archive") == expected


def test_an_archive_file_with_dots_in_its_name_keeps_them_in_the_set_name(
        tmp_path: Path) -> None:
    path = tmp_path / "news-v1.2.zip"
    path.write_bytes(zip_bytes({"html/a.html": PAGE, "content/a.txt": b"x"}))
    (dataset,) = open_dataset_file(path)
    assert dataset.name == "news-v1.2"


def test_archive_entries_whose_page_id_would_be_dot_dot_or_empty_are_named() -> None:
    """`s/html/..html` would be page `.`: no page can be so named, and the pairing passes
    over it as a hidden file, so a warning says it was not used."""
    data = zip_bytes({"s/html/a.html": PAGE, "s/content/a.txt": b"Hello",
                      "s/html/..html": PAGE, "s/content/..txt": b"dot",
                      "s/html/.HTM": PAGE, "s/content/...txt": b"dot dot",
                      "s/feeds/..xml": b"<rss/>", "s/html/._a.html": b"macOS metadata"})
    (dataset,) = datasets_from_archive(data)
    assert dataset.ids == ["a"]
    named = [w for w in dataset.warnings if "a page id cannot be" in w]
    assert named == ["s: html/..html: a page id cannot be '.'; not used",
                     "s: html/.HTM: a page id cannot be ''; not used",
                     "s: content/...txt: a page id cannot be '..'; not used",
                     "s: content/..txt: a page id cannot be '.'; not used",
                     "s: feeds/..xml: a page id cannot be '.'; not used"]
    assert not any("._a.html" in w for w in dataset.warnings)  # hidden files stay unread


def test_a_zip_made_by_macos_finder_reads_as_its_folder() -> None:
    """Finder's "Compress" adds `__MACOSX/<folder>/._<file>` (AppleDouble metadata) for
    every file: read as a second test set of the same name, they made the archive
    refused."""
    data = zip_bytes({"s/html/a.html": PAGE, "s/content/a.txt": b"Hello",
                      "__MACOSX/s/html/._a.html": b"\x00\x05\x16\x07",
                      "__MACOSX/s/content/._a.txt": b"\x00\x05\x16\x07",
                      "__MACOSX/._s": b"\x00\x05\x16\x07"})
    (dataset,) = datasets_from_archive(data)
    assert (dataset.name, dataset.ids) == ("s", ["a"])
    assert not any("__MACOSX" in w for w in dataset.warnings)
