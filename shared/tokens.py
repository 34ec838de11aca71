"""The one tokenizer for scoring: NFKC, casefold, then words.

Gold text and extracted text go through the same function, so a word counts the
same on both sides whatever its Unicode form or case.

Words are `\\w+` runs, except in scripts written without spaces between words:
there every character is a token of its own (Chinese and Japanese ideographs and
kana, Thai, Lao, Khmer, Myanmar), so a missed or extra phrase costs its length in
characters instead of one whole run that differs. This is character-level
scoring, not word segmentation: figures on such text are not comparable with
figures on space-separated text, and a combining vowel or tone mark of Thai counts
as a character of its own. Korean, written with spaces, keeps its words.
"""

from __future__ import annotations

import re
import unicodedata

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
_WORD = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+")


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """Words of `text` in order, NFKC-normalised and casefolded (module docstring)."""
    return _WORD.findall(normalize(text))
