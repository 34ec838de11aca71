"""Gold files in UTF-16 without a byte-order mark whose text is Chinese or Japanese: too
few NUL bytes to be told by them, sometimes valid UTF-8 as well, and read as UTF-16
all the same (shared.decoding.decode_gold), while UTF-8 and Latin-1 files keep their
reading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.decoding import decode_gold

ENCODINGS = ("utf-16-le", "utf-16-be")
CHINESE = [
    # Tao Yuanming, The Peach Blossom Spring (opening).
    "晋太元中，武陵人捕鱼为业。缘溪行，忘路之远近。忽逢桃花林，夹岸数百步，中无杂树，"
    "芳草鲜美，落英缤纷。渔人甚异之，复前行，欲穷其林。",
    "北京是中华人民共和国的首都，也是全国的政治、文化中心。这座城市有三千多年的建城史和"
    "八百多年的建都史。",
]
# Every character's UTF-16 bytes in either order are below 0x80: valid UTF-8 (ASCII
# letters, digits and two control characters from the full stops).
VALID_UTF8_JAPANESE = "田中の手は大きい。山田の手は小さい。"
_KANA = re.compile(r"[\u3041-\u30ff]")


def _note(encoding: str) -> str:
    order = "little" if encoding == "utf-16-le" else "big"
    return f"UTF-16 ({order}-endian) without a byte-order mark"


def _few_nuls(data: bytes) -> bool:
    """Under the share of NUL bytes by which UTF-16 was told before (1 in 32 characters)."""
    return data.count(0) * 32 < len(data) // 2


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("text", CHINESE, ids=["peach-blossom-spring", "beijing"])
def test_chinese_utf16_gold_without_a_bom_is_read_as_utf16(text: str, encoding: str) -> None:
    data = text.encode(encoding)
    assert _few_nuls(data)
    assert decode_gold(data) == (text, _note(encoding))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_japanese_utf16_gold_that_is_valid_utf8_too_is_read_as_utf16(encoding: str) -> None:
    data = VALID_UTF8_JAPANESE.encode(encoding)
    assert data.decode("utf-8").isascii()  # the reading it got before: ASCII garble
    assert decode_gold(data) == (VALID_UTF8_JAPANESE, _note(encoding))


@pytest.mark.dataset
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_japanese_lines_of_a_dataset_in_utf16_without_a_bom(scrapinghub: Path,
                                                            encoding: str) -> None:
    """Real Japanese gold (scrapinghub's pages in Japanese): each line of 40 characters
    or more, as a UTF-16 file of its own, reads back as itself."""
    lines = []
    for path in sorted((scrapinghub / "content").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        if len(_KANA.findall(text)) > len(text) / 5:
            lines += [line for line in text.splitlines() if len(line) >= 40]
    few_nuls = [line for line in lines if _few_nuls(line.encode(encoding))]
    assert len(few_nuls) >= 3, "no Japanese gold with lines of few NUL bytes found"
    for line in lines:
        assert decode_gold(line.encode(encoding)) == (line, _note(encoding)), line


@pytest.mark.parametrize(("text", "encoding"), [
    ("北京是中华人民共和国的首都。", "utf-8"),
    ("Le café déjà vu à l'école naïve, où l'on lit « Grüße aus Zürich ».", "utf-8"),
    ("Le café déjà vu à l'école naïve, où l'on lit « Grüße aus Zürich ».", "cp1252"),
    ("Plain English gold text of an article, two sentences long. Nothing odd in it.",
     "utf-8"),
], ids=["chinese-utf8", "french-utf8", "french-cp1252", "english-utf8"])
def test_utf8_and_latin1_gold_keep_their_reading_with_a_stray_control(text: str,
                                                                    encoding: str) -> None:
    """A DOS end-of-file mark or a pasted escape is one control character, not UTF-16."""
    data = text.encode(encoding)
    for stray in ("\x1a", "\x1b", "\x00"):
        tail = stray if len(data) % 2 else f" {stray}"  # an even length, as UTF-16 has
        assert decode_gold(data + tail.encode())[0] == text + tail


_CONTROLS = [chr(c) for c in (*range(0x09), 0x0B, *range(0x0E, 0x20), 0x7F)]


@given(st.text().filter(lambda t: not set(t) & set(_CONTROLS) and not t.startswith("\ufeff")),
       st.sampled_from(_CONTROLS), st.integers(min_value=0))
def test_utf8_text_with_one_control_character_reads_as_utf8(text: str, control: str,
                                                            where: int) -> None:
    """One control character is never taken for UTF-16: its readings need two at least."""
    where %= len(text) + 1
    marked = text[:where] + control + text[where:]
    assert decode_gold(marked.encode("utf-8")) == (marked, None)
