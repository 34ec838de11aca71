"""The one tokenizer for scoring: NFKC, casefold, then `\\w+` runs.

Gold text and extracted text go through the same function, so a word counts the
same on both sides whatever its Unicode form or case.
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """Words of `text` in order, NFKC-normalised and casefolded."""
    return _WORD.findall(normalize(text))
