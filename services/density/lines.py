"""A page rendered to lines as a text-mode browser would, with the HTML each line took.

Champandard's article runs an HTML parser that reports its position in the source and gives
every line the bytes consumed since the previous text. lxml reports no source
offsets and the stdlib `html.parser` (which does) is several times slower than
lxml's whole parse, so this is one linear regex scan of the source instead:
markup tokens (tags, comments, declarations and whole invisible elements such as
<script>...</script>) are matched in C, the text between them goes to the
current line, and a block-level tag (shared.html.BLOCK_LEVEL) ends the line.

A line's "HTML bytes" are the characters of the decoded source it took: its own
text and the inline tags between its text, plus all markup since the previous
line's last text (end tags, block tags, scripts, comments), as in the article.
Characters rather than encoded bytes, so that a line of plain text has density 1
whatever its script. Markup after the last line belongs to no line.
"""

from __future__ import annotations

import html as html_entities
import re
from collections.abc import Iterable
from typing import NamedTuple

from shared.html import BLOCK_LEVEL, clean_text


def _letter(char: str) -> str:
    """One character of a tag name, either case of an ASCII letter (as HTML compares names)."""
    return f"[{char}{char.upper()}]" if char.isascii() and char.isalpha() else re.escape(char)


def _names(names: Iterable[str]) -> str:
    """A regex matching exactly `names` in any ASCII case, factored on common prefixes.

    Tried at every "<", so it is written for sre: a flat `a|abbr|b|...` costs one
    failed attempt per name, a prefix tree one per distinct first letter, which a
    lookahead on the first letter skips too; case classes ([dD]) rather than the
    IGNORECASE flag, because sre lowercases every character it compares under the
    flag (Unicode case rules, under which U+017F matches "s") and skips a branch
    quickly only on a plain literal or class. Which name matches cannot change:
    every use is followed by a lookahead for the end of the name, which at most
    one name passes.
    """
    tails: dict[str, list[str]] = {}
    ends_here = False
    for name in names:
        if name:
            tails.setdefault(name[0], []).append(name[1:])
        else:
            ends_here = True
    branches = [_letter(first) + _names(rest) for first, rest in sorted(tails.items())]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 and not ends_here else f"(?:{'|'.join(branches)})"
    return body + "?" if ends_here else body


def _first_letters(names: Iterable[str]) -> str:
    """A lookahead for the first letter of one of `names`, in either case."""
    letters = sorted({name[0] for name in names})
    return f"(?=[{''.join(letters)}{''.join(letters).upper()}])"


# Elements whose content is never shown (shared.html.INVISIBLE less the void or
# container ones: <head> may lack its end tag, and meta/link/embed have no content).
# Their whole element is one markup token; unclosed, it runs to the end of the page
# as it does in a browser for <script> (keeps the scan linear).
_HIDDEN = ("script", "style", "noscript", "template", "title", "iframe", "object", "svg",
           "math", "select", "datalist", "textarea", "canvas", "xmp", "noembed", "noframes")
# Characters the scan takes for whitespace: Unicode whitespace and the characters
# shared.html.clean_text turns into spaces (C0 controls, surrogates, U+FFFE/U+FFFF).
# Treating them as spaces here gives the tokens of the cleaned page without a
# cleaning pass over the whole page, which costs a good part of a parse; only the
# text of the lines is cleaned.
_BLANK = r"\s\x00-\x08\x0e-\x1f\ud800-\udfff\ufffe\uffff"
# A tag runs to its ">", as in an HTML5 tokenizer: a quote opens a value only after
# "=" (so the stray quotes of real pages, class="x"", do not swallow the page), and
# a tag or value never closed runs to the end of the page. Possessive quantifiers and
# the end of page as a way out make every match linear, so the scan is too.
_ATTRS = (rf"""(?:[^>=]++|=[{_BLANK}]*+(?:"[^"]*+(?:"|\Z)|'[^']*+(?:'|\Z)|[^{_BLANK}>]*+))*+"""
          r"(?:>|\Z)")
# The bodies of comments and hidden elements run to the first end mark (or the end
# of the page), written as "unrolled loops" (a run of characters that cannot start
# the mark, then one that does not) rather than `.*?(?:-->|\Z)`: a lazy dot before
# an alternation makes sre try the alternation at every character of a long script.
_COMMENT_BODY = r"[^-]*+(?:-(?!->)[^-]*+)*+(?:-->|\Z)"
# The end tag repeats the start tag's name in any ASCII case: (?ai:...).
_HIDDEN_BODY = (rf"[^<]*+(?:<(?!/(?ai:(?P=hidden))[{_BLANK}]*>)[^<]*+)*+"
                rf"(?:</(?ai:(?P=hidden))[{_BLANK}]*>|\Z)")
# One "<" starts every token, so it is matched once before the kinds of token, which
# are tried in this order: comment, hidden element, block-level tag, other tag,
# declaration or processing instruction. A "<" that starts none of them is text.
_TOKEN = re.compile(
    r"<(?:"
    rf"!--{_COMMENT_BODY}"
    rf"|{_first_letters(_HIDDEN)}(?P<hidden>{_names(_HIDDEN)})(?=[{_BLANK}/>])"
    rf"{_ATTRS}{_HIDDEN_BODY}"
    rf"|/?{_first_letters(BLOCK_LEVEL)}(?P<block>{_names(BLOCK_LEVEL)})(?=[{_BLANK}/>]){_ATTRS}"
    rf"|/?[a-zA-Z][^{_BLANK}/>]*+{_ATTRS}"
    r"|[!?/][^>]*+>?"
    r")",
    re.DOTALL,
)


class Line(NamedTuple):
    """One rendered line: its text (whitespace-normalised) and the HTML it took.

    A named tuple rather than a dataclass: a page makes hundreds of them, and a
    tuple is the cheapest immutable record to build."""

    text: str
    html_bytes: int

    @property
    def text_length(self) -> int:
        return len(self.text)

    @property
    def density(self) -> float:
        """Text length over HTML bytes, in (0, 1]."""
        return len(self.text) / self.html_bytes


def _line_text(raw: str) -> str:
    """Entities decoded, whitespace runs as one space, trimmed.

    The same as shared.html.normalize_space(html.unescape(clean_text(raw))):
    str.split() and a regex `\\s` both use Python's Unicode whitespace, but split and
    join cost a fraction of a regex substitution on a line of many words."""
    return " ".join(html_entities.unescape(clean_text(raw)).split())


def render_lines(html: str) -> list[Line]:
    """The page's visible lines in document order (empty lines dropped).

    Every character of the page is either markup (a token) or text (between two
    tokens), so a line's HTML characters are the source from the end of the
    previous line's last text to the end of its own last text; only those two
    positions are tracked. Text that is whitespace only (or becomes empty) makes
    no line, and its characters count for the next one.
    """
    lines: list[Line] = []
    parts: list[str] = []  # text of the line being built
    position = 0  # end of the last token
    text_end = 0  # end of the last text seen
    line_start = 0  # end of the previous line's last text
    for match in _TOKEN.finditer(html):
        start, end = match.span()
        if start > position:
            parts.append(html[position:start])
            text_end = start
        position = end
        if parts and match.lastgroup == "block":
            raw = "".join(parts)
            parts.clear()
            if not raw.isspace():
                text = _line_text(raw)
                if text:
                    lines.append(Line(text, text_end - line_start))
                    line_start = text_end
    if position < len(html):
        parts.append(html[position:])
        text_end = len(html)
    text = _line_text("".join(parts))
    if text:
        lines.append(Line(text, text_end - line_start))
    return lines
