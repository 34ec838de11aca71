"""A page rendered to lines as a text-mode browser would, with the HTML each line took.

Seed 003 runs an HTML parser that reports its position in the source and gives
every line the bytes consumed since the previous text. lxml reports no source
offsets and the stdlib `html.parser` (which does) is several times slower than
lxml's whole parse, so this is one linear regex scan of the source instead:
markup tokens (tags, comments, declarations and whole invisible elements such as
<script>...</script>) are matched in C, the text between them goes to the
current line, and a block-level tag (shared.html.BLOCK_LEVEL) ends the line.

A line's "HTML bytes" are the characters of the decoded source it took: its own
text and the inline tags between its text, plus all markup since the previous
line's last text (end tags, block tags, scripts, comments), as in the seed.
Characters rather than encoded bytes, so that a line of plain text has density 1
whatever its script. Markup after the last line belongs to no line.
"""

from __future__ import annotations

import html as html_entities
import re
from dataclasses import dataclass

from shared.html import BLOCK_LEVEL, clean_text, normalize_space

# Elements whose content is never shown (shared.html.INVISIBLE less the void or
# container ones: <head> may lack its end tag, and meta/link/embed have no content).
# Their whole element is one markup token; unclosed, it runs to the end of the page
# as it does in a browser for <script> (keeps the scan linear).
_HIDDEN = ("script|style|noscript|template|title|iframe|object|svg|math|select|datalist"
           "|textarea|canvas|xmp|noembed|noframes")
# A tag runs to its ">", as in an HTML5 tokenizer: a quote opens a value only after
# "=" (so the stray quotes of real pages, class="x"", do not swallow the page), and
# a tag or value never closed runs to the end of the page. Possessive quantifiers and
# the end of page as a way out make every match linear, so the scan is too.
_ATTRS = (r"""(?:[^>=]++|=\s*+(?:"[^"]*+(?:"|\Z)|'[^']*+(?:'|\Z)|[^\s>]*+))*+"""
          r"(?:>|\Z)")
# Block-level names, most frequent first (the regex tries them in order).
_FREQUENT = ("div", "p", "td", "tr", "li", "br", "table", "tbody", "ul")
_BLOCK_NAMES = "|".join(sorted(BLOCK_LEVEL, key=lambda n: (n not in _FREQUENT, -len(n), n)))
_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"
    rf"|<(?P<hidden>{_HIDDEN})(?=[\s/>]){_ATTRS}.*?(?:</(?P=hidden)\s*>|\Z)"
    rf"|</?(?P<block>{_BLOCK_NAMES})(?=[\s/>]){_ATTRS}"
    rf"|</?[a-zA-Z][^\s/>]*+{_ATTRS}"
    r"|<[!?/][^>]*+>?",
    re.DOTALL | re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Line:
    """One rendered line: its text (whitespace-normalised) and the HTML it took."""

    text: str
    html_bytes: int

    @property
    def text_length(self) -> int:
        return len(self.text)

    @property
    def density(self) -> float:
        """Text length over HTML bytes, in (0, 1]."""
        return self.text_length / self.html_bytes


def render_lines(html: str) -> list[Line]:
    """The page's visible lines in document order (empty lines dropped)."""
    html = clean_text(html)
    lines: list[Line] = []
    parts: list[str] = []
    line_bytes = 0  # source characters of the line being built
    pending = 0  # markup characters waiting for the next text
    position = 0
    for match in _TOKEN.finditer(html):
        start, end = match.span()
        if start > position:  # text between two markup tokens
            parts.append(html[position:start])
            line_bytes += pending + start - position
            pending = 0
        position = end
        if parts and match.lastgroup == "block":
            raw = "".join(parts)
            parts.clear()
            text = "" if raw.isspace() else normalize_space(html_entities.unescape(raw))
            if text:
                lines.append(Line(text, line_bytes))
                line_bytes = 0
            else:  # whitespace only: its characters are markup for the next line
                pending += line_bytes
                line_bytes = 0
        pending += end - start
    if position < len(html):
        parts.append(html[position:])
        line_bytes += pending + len(html) - position
    text = normalize_space(html_entities.unescape("".join(parts)))
    if text:
        lines.append(Line(text, line_bytes))
    return lines
