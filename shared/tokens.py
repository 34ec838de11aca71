"""The one tokenizer for scoring: NFKC, casefold, then words.

Gold text and extracted text go through the same function, so a word counts the
same on both sides whatever its Unicode form or case.

Words are runs of word characters (`\\w`) and the combining marks written on them
(Unicode categories Mn, Mc, Me: Devanagari vowel signs and viramas, Arabic and Hebrew
points, accents NFKC cannot compose), so "हिन्दी" is one word and not three letters.
Scripts written without spaces between words are the exception: there every letter
with its marks is a token of its own (Chinese and Japanese ideographs and kana, Thai,
Lao, Khmer, Myanmar), so a missed or extra phrase costs its length in letters
instead of one whole run that differs. This is character-level scoring, not word
segmentation: figures on such text are not comparable with figures on
space-separated text. Korean, written with spaces, keeps its words. Punctuation and
symbols, of any script, are never tokens, except the underscore: `\\w` counts it a
word character, so `snake_case` is one word and a rule of underscores one token.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from array import array

# Scripts without spaces between words (Unicode blocks).
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0003134f"  # CJK Unified Ideographs Extensions B-G
)


# The planes that hold combining marks: the Basic Multilingual and the Supplementary
# Multilingual Plane, and the Supplementary Special-purpose Plane's variation
# selectors (tests check this against a scan of every code point).
_MARK_PLANES = (range(0x20000), range(0xE0000, 0xF0000))


def combining_marks(planes: tuple[range, ...] = _MARK_PLANES) -> list[str]:
    """The combining marks (categories M*) of this Python's Unicode database in
    `planes`, in code point order. Only characters that are neither word characters
    nor whitespace are asked for their category (marks are neither)."""
    chars = "".join(array("I", plane).tobytes().decode("utf-32-le", "surrogatepass")
                    for plane in planes)
    category = unicodedata.category
    return [c for c in re.sub(r"[\w\s]+", "", chars) if category(c)[0] == "M"]


def _character_class(characters: list[str]) -> str:
    """A regex class body of ranges for sorted characters."""
    ranges: list[list[int]] = []
    for code in map(ord, characters):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "")
                   for a, b in ranges)


@functools.cache
def word_pattern() -> re.Pattern[str]:
    """The tokens' regex, built on first use (listing the marks takes some 40 ms, which
    a process that never scores should not pay at import).

    A mark of the Basic Multilingual Plane is one class (a bitmap in re); the few
    beyond it are asked only of characters beyond it, since re scans a list of astral
    ranges one by one, and every word's end would pay for it."""
    marks = combining_marks()
    bmp = _character_class([c for c in marks if c <= "\uffff"])
    astral = _character_class([c for c in marks if c > "\uffff"])
    mark = rf"(?:[{bmp}]|[\U00010000-\U0010ffff](?<=[{astral}]))"
    return re.compile(rf"[^\W{_UNSPACED}]+(?:{mark}+[^\W{_UNSPACED}]*)*"
                      rf"|(?=\w)[{_UNSPACED}]{mark}*")


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """Words of `text` in order, NFKC-normalised and casefolded (module docstring)."""
    return word_pattern().findall(normalize(text))
