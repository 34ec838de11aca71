"""WARC files compressed with zstd (IIPC's "WARC zstd": each record its own zstd frame,
maybe after a dictionary in a leading skippable frame) read as the same WARC gzipped,
and an odd frame costs that record only, as an odd gzip member does."""

from __future__ import annotations

import gzip
import sys
import uuid
from pathlib import Path

import orjson
import pytest
import zstandard
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.warc import OddRecord, WarcItem, WarcPage, read_warc
from tests.warc_files import Response, warc_record

# A skippable frame of magic 0x184D2A5D: the WARC zstd dictionary.
DICTIONARY_MAGIC = (0x184D2A5D).to_bytes(4, "little")


def _pages(count: int) -> list[Response]:
    return [Response(f"https://a.example/{i}",
                     f"<html><head><title>Page {i}</title></head><body><p>The words of "
                     f"page {i}, about item {i * 7 % 13}.</p></body></html>".encode()).with_id()
            for i in range(count)]


def _records(pages: list[Response]) -> list[bytes]:
    info = Response("", b"software: boilerbench tests\r\n", None, 0, f"<urn:uuid:{uuid.uuid4()}>")
    return [warc_record(info, record_type="warcinfo"), *(warc_record(p) for p in pages)]


def _write(path: Path, data: bytes) -> list[WarcItem]:
    path.write_bytes(data)
    return list(read_warc(path))


def _gzipped(tmp_path: Path, records: list[bytes]) -> list[WarcItem]:
    return _write(tmp_path / "same.warc.gz", b"".join(gzip.compress(r) for r in records))


def _dictionary_frame(dictionary: bytes) -> bytes:
    return DICTIONARY_MAGIC + len(dictionary).to_bytes(4, "little") + dictionary


def _trained(records: list[bytes]) -> zstandard.ZstdCompressionDict:
    """A dictionary trained on the records, as `zstd --train` makes one."""
    samples: list[bytes | bytearray | memoryview[int]] = [*records]
    return zstandard.train_dictionary(2048, samples)


@pytest.mark.parametrize("compressor", [
    zstandard.ZstdCompressor(level=3),
    zstandard.ZstdCompressor(level=19, write_checksum=True),
    zstandard.ZstdCompressor(write_content_size=False),
], ids=["plain", "checksum", "no-content-size"])
def test_a_zstd_warc_reads_as_the_same_warc_gzipped(
        tmp_path: Path, compressor: zstandard.ZstdCompressor) -> None:
    records = _records(_pages(6))
    items = _write(tmp_path / "crawl.warc.zst", b"".join(compressor.compress(r) for r in records))
    assert len([i for i in items if isinstance(i, WarcPage)]) == 6
    assert items == _gzipped(tmp_path, records)


def test_a_warc_compressed_whole_with_zstd_reads_too(tmp_path: Path) -> None:
    """`zstd crawl.warc` makes one frame of the whole file, as `gzip` makes one member."""
    records = _records(_pages(4))
    whole = zstandard.ZstdCompressor().compress(b"".join(records))
    assert _write(tmp_path / "crawl.warc.zst", whole) == _gzipped(tmp_path, records)


@pytest.mark.parametrize("layout", ["raw", "compressed", "frames-without-dict-id"])
def test_a_dictionary_in_the_leading_skippable_frame_decompresses_the_records(
        tmp_path: Path, layout: str) -> None:
    pages = _pages(300)
    records = _records(pages)
    dictionary = _trained(records)
    compressor = zstandard.ZstdCompressor(dict_data=dictionary,
                                          write_dict_id=layout != "frames-without-dict-id")
    stored = dictionary.as_bytes()
    if layout == "compressed":
        stored = zstandard.ZstdCompressor().compress(stored)
    data = _dictionary_frame(stored) + b"".join(compressor.compress(r) for r in records)
    items = _write(tmp_path / "crawl.warc.zst", data)
    assert [i.body for i in items if isinstance(i, WarcPage)] == [p.body for p in pages]
    assert items == _gzipped(tmp_path, records)


def test_records_needing_a_dictionary_the_file_lacks_are_malformed_and_say_so(
        tmp_path: Path) -> None:
    records = _records(_pages(300))
    dictionary = _trained(records)
    compressor = zstandard.ZstdCompressor(dict_data=dictionary)
    items = _write(tmp_path / "crawl.warc.zst", b"".join(compressor.compress(r)
                                                          for r in records[:3]))
    assert len(items) == 3
    for item in items:
        assert isinstance(item, OddRecord)
        assert item.kind == "malformed"
        assert "needs a dictionary" in item.detail


def test_an_odd_frame_costs_that_record_only(tmp_path: Path) -> None:
    """A frame that does not decompress, bytes that are no frame, a skippable frame
    between records: the records around them are read."""
    pages = _pages(4)
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    frames = [compressor.compress(r) for r in _records(pages)]
    broken = bytearray(frames[2])
    broken[len(broken) // 2] ^= 0xFF
    skippable = (0x184D2A50).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"notes"
    data = (frames[0] + frames[1] + bytes(broken) + b"no frame at all" + skippable
            + frames[3] + frames[4])
    items = _write(tmp_path / "crawl.warc.zst", data)
    assert [i.uri for i in items if isinstance(i, WarcPage)] == \
        [pages[0].uri, pages[2].uri, pages[3].uri]
    odd = [(i.kind, i.detail) for i in items if isinstance(i, OddRecord)]
    assert [kind for kind, _ in odd] == ["malformed", "malformed"]
    assert "a zstd frame does not decompress" in odd[0][1]
    assert odd[1][1] == "15 bytes that are no zstd frame"


def test_a_file_cut_inside_its_last_frame_has_a_truncated_record(tmp_path: Path) -> None:
    pages = _pages(3)
    page = Response("https://a.example/long", b"<html><body><p>" + uuid.uuid4().hex.encode()
                    * 4000 + b"</p></body></html>").with_id()
    frames = [zstandard.ZstdCompressor().compress(r) for r in [*_records(pages),
                                                              warc_record(page)]]
    data = b"".join(frames)[:-len(frames[-1]) // 2]
    items = _write(tmp_path / "crawl.warc.zst", data)
    assert [i.uri for i in items if isinstance(i, WarcPage)] == [p.uri for p in pages]
    (odd,) = [i for i in items if isinstance(i, OddRecord)]
    assert odd.kind == "truncated"


def test_a_frame_that_inflates_past_the_limit_is_skipped_and_reading_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A zstd block of a few bytes stands for 128 KiB: a small file can hold a bomb,
    whether its frame declares its size or not."""
    monkeypatch.setattr("orchestrator.warc.MAX_RECORD_BYTES", 100_000)
    pages = _pages(2)
    bomb = b"WARC/1.1\r\n" + b"\0" * 5_000_000
    frames = [zstandard.ZstdCompressor().compress(r) for r in _records(pages)]
    data = (frames[0] + frames[1]
            + zstandard.ZstdCompressor(write_content_size=False).compress(bomb)
            + zstandard.ZstdCompressor().compress(bomb) + frames[2])
    assert len(data) < 10_000
    items = _write(tmp_path / "bomb.warc.zst", data)
    assert [i.uri for i in items if isinstance(i, WarcPage)] == [p.uri for p in pages]
    assert [i.kind for i in items if isinstance(i, OddRecord)] == ["too_large", "too_large"]


def test_without_zstandard_a_zstd_warc_says_how_to_read_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if not installed
    data = b"".join(zstandard.ZstdCompressor().compress(r) for r in _records(_pages(1)))
    (item,) = _write(tmp_path / "crawl.warc.zst", data)
    assert isinstance(item, OddRecord)
    assert "zstd-compressed WARC" in item.detail
    assert "zstd -d" in item.detail


def test_extract_writes_a_row_per_page_of_a_zstd_warc(tmp_path: Path) -> None:
    pages = _pages(3)
    path = tmp_path / "crawl.warc.zst"
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(r) for r in _records(pages)))
    out = tmp_path / "rows.jsonl"
    done = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", "bte",
                                    "--out", str(out), "--workers", "1"], terminal_width=200)
    assert done.exit_code == 0, done.output
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert sorted(r["record_id"] for r in rows) == sorted(p.record_id for p in pages)
    assert all(r["error"] is None and "The words of page" in r["text"] for r in rows)
