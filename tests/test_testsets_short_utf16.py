"""Short gold files in UTF-16 without a byte-order mark (a word or a few, one character
repeated) read as their text through a test set folder, with the note saying so; gold
in a single-byte charset or UTF-8, or with a stray NUL byte, keeps its reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.testsets import open_folder

ENCODINGS = ("utf-16-le", "utf-16-be")
PAGE = b"<html><body><p>A page.</p></body></html>"


def read_gold(tmp_path: Path, data: bytes) -> tuple[str, tuple[str, ...]]:
    """The gold text and notes a test set folder gives a content file of `data`."""
    for folder in ("html", "content"):
        (tmp_path / folder).mkdir()
    (tmp_path / "html" / "p.html").write_bytes(PAGE)
    (tmp_path / "content" / "p.txt").write_bytes(data)
    page = open_folder("set", tmp_path / "html", tmp_path / "content").page("p")
    return page.gold, page.notes


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("text", ["aa", "...", "!!", "éé", "zzzz", "Hi", "Yes", "Home",
                                  "Read more", "Contact us\n", "The cat sat on it"])
def test_a_short_utf16_gold_reads_as_its_text(tmp_path: Path, text: str,
                                              encoding: str) -> None:
    order = "little" if encoding == "utf-16-le" else "big"
    assert read_gold(tmp_path, text.encode(encoding)) == (
        text, (f"content/p.txt is UTF-16 ({order}-endian) without a byte-order mark",))


@pytest.mark.parametrize(("data", "text"), [
    ("Café".encode("cp1252"), "Café"),
    ("Noël à Paris".encode("cp1252"), "Noël à Paris"),
    ("Caf\u00e9 au lait".encode(), "Café au lait"),
    ("Crème".encode(), "Crème"),
    (b"Hi", "Hi"),
    (b"Hello\x00", "Hello\x00"),
    (b"Home page\x00", "Home page\x00"),
    (b"ab\x00d", "ab\x00d"),
    (b"\x00\x00", "\x00\x00"),
    (b"a\x00", "a\x00"),  # "a" in UTF-16 too: one NUL is no evidence
], ids=["latin1-4", "latin1-12", "utf8-13", "utf8-6", "ascii-2", "stray-nul-6",
        "stray-nul-10", "stray-nul-inside", "nuls-only", "one-letter-and-a-nul"])
def test_single_byte_and_utf8_gold_is_never_taken_for_utf16(tmp_path: Path, data: bytes,
                                                            text: str) -> None:
    gold, notes = read_gold(tmp_path, data)
    assert gold == text
    assert not any("UTF-16" in note for note in notes), notes
