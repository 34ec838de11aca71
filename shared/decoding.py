"""From page bytes to text, the same way for every service and the orchestrator.

Order: a byte-order mark wins; then the charset the transport gives (the charset
parameter of an HTTP Content-Type), where the bytes decode under it; then strict
UTF-8; then a charset the page declares
(<meta charset>, HTTP-equiv meta, or an XML declaration), kept only if the bytes
decode under it without errors; then, for text in a Latin script (its non-ASCII
bytes mostly stand alone, between ASCII letters), windows-1252, the default of
browsers; else charset-normalizer's best guess. Strict UTF-8 goes before the
declaration because real pages often declare Latin-1 over UTF-8 bytes, while text in
a legacy charset almost never passes as valid UTF-8. A declared label means what it
means to browsers (WHATWG Encoding Standard): latin1 and us-ascii are windows-1252,
and a UTF-16 label inside the bytes themselves is UTF-8. Where nothing fits at all, a
page that is UTF-8 but for a few pasted windows-1252 bytes keeps its UTF-8 and reads
those bytes as windows-1252 (pages that are binary then fail check_html).

Why windows-1252 before the detector: on pages that are neither UTF-8 nor declared
(mostly English text with a few accents and curly quotes), charset-normalizer costs
several times an lxml parse and guesses cp1250, latin-1 or cp775 as often as
windows-1252, where the gold text reads as windows-1252. A few isolated bytes cannot
tell the Latin charsets apart; text in Cyrillic, Greek or CJK charsets comes in runs
of non-ASCII bytes, where the detector has evidence, and gets it.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import unicodedata

from charset_normalizer import from_bytes

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_DECLARED = re.compile(
    rb"""(?:<meta[^>]{0,200}?charset\s*=\s*["']?\s*|<\?xml[^>]{0,100}?encoding\s*=\s*["'])"""
    rb"""([A-Za-z0-9_.:-]{1,40})""",
    re.IGNORECASE,
)
# C0 controls other than tab, newline, form feed, carriage return; and NUL.
_CONTROL_CODES = frozenset([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
# Every byte but those: deleting them leaves the controls, counted in C (a regex
# scan took as long as half an lxml parse). The controls are ASCII, so they are the
# same single bytes in UTF-8, and no multi-byte UTF-8 sequence holds a byte < 0x80.
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL_CODES)
_TAG = re.compile(r"<[A-Za-z!?/]")
# A page whose text is more than this share control characters is binary, not HTML.
_MAX_CONTROL_SHARE = 0.05
# Controls are counted on the first _SAMPLE characters: binary data shows its control
# bytes from the start, and counting costs per character (over whole pages, the dearest
# step of decoding a UTF-8 page: more than the decode itself).
_SAMPLE = 8192


# A run of non-ASCII bytes (_latin_script).
_NON_ASCII_RUN = re.compile(rb"[\x80-\xff]+")


class NotHTMLError(ValueError):
    """The input is empty, binary or has no markup at all (reported as 400)."""


# Labels browsers read as another encoding (WHATWG Encoding Standard, "get an
# encoding" and the meta prescan's UTF-16 rule), by Python's codec names.
_AS_BROWSERS_READ = {"iso8859-1": "cp1252", "ascii": "cp1252", "iso8859-9": "cp1254",
                     "iso8859-11": "cp874", "tis-620": "cp874", "utf-16": "utf-8",
                     "utf-16-le": "utf-8", "utf-16-be": "utf-8"}


# The encodings of the WHATWG Encoding Standard, by Python's codec names (what a label
# becomes after _AS_BROWSERS_READ). Python knows more codecs (utf-7, rot13, base64,
# undefined, ...): browsers know no such label and neither do we.
_BROWSER_ENCODINGS = frozenset({
    "utf-8", "cp866", *(f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)),
    "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic", "cp874",
    *(f"cp{n}" for n in range(1250, 1259)), "gbk", "gb2312", "gb18030", "big5", "big5hkscs",
    "euc_jp", "iso2022_jp", "shift_jis", "cp932", "euc_kr", "cp949",
})


# Labels of the Encoding Standard that Python's codec registry does not know.
_LABELS_PYTHON_LACKS = {"windows-874": "cp874", "x-mac-cyrillic": "mac-cyrillic",
                        "x-mac-ukrainian": "mac-cyrillic", "windows-31j": "cp932",
                        "windows-949": "cp949", "x-sjis": "shift_jis", "x-euc-jp": "euc_jp",
                        "x-gbk": "gbk", **{f"x-cp{n}": f"cp{n}" for n in range(1250, 1258)}}


def browser_codec(label: str) -> str | None:
    """Python's codec for an encoding label as browsers read it; None for a label
    that names no encoding of the Encoding Standard (a browser ignores it too)."""
    label = label.strip().lower()
    try:
        codec = codecs.lookup(_LABELS_PYTHON_LACKS.get(label, label)).name
    except LookupError:
        return None
    codec = _AS_BROWSERS_READ.get(codec, codec)
    return codec if codec in _BROWSER_ENCODINGS else None


# The charset parameter of a Content-Type (RFC 9110, 8.3.2), quoted or not.
_CHARSET_PARAMETER = re.compile(r';\s*charset\s*=\s*"?([A-Za-z0-9_.:-]{1,40})', re.IGNORECASE)


def charset_parameter(content_type: str) -> str | None:
    """The charset label a Content-Type value gives, if any."""
    match = _CHARSET_PARAMETER.search(content_type)
    return match.group(1) if match else None


def _declared_charset(data: bytes) -> str | None:
    match = _DECLARED.search(data[:4096])
    if not match:
        return None
    return browser_codec(match.group(1).decode("ascii", "replace"))


def _windows_1252_bytes(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: the bytes UTF-8 cannot read, read as windows-1252."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    stray = error.object[error.start:error.end]
    return bytes(stray).decode("cp1252", errors="replace"), error.end


codecs.register_error("boilerbench-windows-1252", _windows_1252_bytes)


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 pages without a BOM show NUL bytes beside every ASCII character."""
    head = data[:200]
    if len(head) >= 8 and head.count(0) * 3 > len(head):
        le = head[1::2].count(0) > head[0::2].count(0)
        return "utf-16-le" if le else "utf-16-be"
    return None


# Of the characters of UTF-16 text without a BOM, at least this share (and this many)
# must have a NUL byte (U+0000-U+00FF: ASCII letters, spaces, line ends) for the NULs to
# say UTF-16: a text of a few words has dozens, a stray NUL in other text is one.
_UTF16_MIN_NUL_SHARE = 1 / 32
_UTF16_MIN_NULS = 4


def _utf16_from_nul_bytes(data: bytes) -> str | None:
    """The codec of UTF-16 text without a byte-order mark, where its NUL bytes say so:
    the characters U+0000-U+00FF have a NUL high byte, at odd offsets in little-endian
    and even ones in big-endian, and (but for rare characters such as U+0100) on that
    side only. Such text is also valid UTF-8 when it is mostly ASCII, NULs and all;
    text really in UTF-8 or a legacy charset holds no NUL byte, so this never reads it."""
    if (b"\x00" not in data or len(data) % 2
            or any(data.startswith(bom) for bom, _ in _BOMS)):
        return None
    even, odd = data[0::2].count(0), data[1::2].count(0)
    nuls, other_side = max(even, odd), min(even, odd)
    if (nuls < max(_UTF16_MIN_NULS, _UTF16_MIN_NUL_SHARE * (len(data) // 2))
            or 4 * other_side > nuls):
        return None
    codec = "utf-16-le" if odd > even else "utf-16-be"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:  # a lone surrogate: not UTF-16 after all
        return None
    controls = len(text.encode("utf-8", "surrogatepass").translate(None, _NOT_CONTROL))
    return codec if controls <= _MAX_CONTROL_SHARE * len(text) else None


# Read as UTF-8 or a legacy charset, UTF-16 text in a CJK script shows control bytes:
# about one ideograph in nine has a low byte below 0x20 (so do the ideographic comma and
# full stop, U+3001 and U+3002) and each ASCII character a NUL. Text really in those
# encodings holds none but a stray one (a DOS end-of-file mark, a pasted escape), so
# controls are evidence from two on and at this share of the UTF-16 characters.
_UTF16_MIN_CONTROLS = 2
_UTF16_MIN_CONTROL_SHARE = 1 / 16
# The C0 controls but NUL and the white space: as bytes of UTF-16 text they are the low
# bytes of characters (a high byte among them would make a character of U+0100-U+1FFF,
# Latin Extended to Greek Extended, rare in CJK text).
_C0_CODES = frozenset(_CONTROL_CODES - {0x00, 0x7F})
_NOT_C0 = bytes(b for b in range(256) if b not in _C0_CODES)
# What a UTF-16 reading of other text shows and text written in UTF-16 does not hold:
# controls (but tab, line ends, form feed), unassigned code points, private use,
# surrogates, and format characters but those text carries (soft hyphen, zero-width
# space and joiners, direction marks, word joiner, BOM). ASCII read as UTF-16 gives
# U+2061-U+206F (invisible operators, bidi isolates) or unassigned U+2065, U+2072,
# U+2073 for most word ends before a space.
_NOT_TEXT = frozenset({"Cc", "Cn", "Co", "Cs"})
_TEXT_CONTROLS = frozenset("\t\n\x0c\r")
_TEXT_FORMATS = frozenset("\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\ufeff")


def _plausible_text(data: bytes, codec: str) -> bool:
    """Whether `data` decodes under `codec` to text a person wrote (_NOT_TEXT)."""
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        return False
    for char in set(text):
        category = unicodedata.category(char)
        if ((category in _NOT_TEXT and char not in _TEXT_CONTROLS)
                or (category == "Cf" and char not in _TEXT_FORMATS)):
            return False
    return True


def _utf16_from_controls(data: bytes) -> str | None:
    """The codec of UTF-16 text without a byte-order mark and with too few NUL bytes for
    _utf16_from_nul_bytes (CJK text: no ideograph or kana has one), told by the control
    bytes it shows when read as UTF-8 or a legacy charset (_UTF16_MIN_CONTROL_SHARE).
    Its C0 controls are low bytes of characters, so they stand on one side (four to
    one at least, as _utf16_from_nul_bytes asks of NULs), and the reading must be
    plausible text (_NOT_TEXT). Where both byte orders pass (a short text), the high
    bytes are the side of fewer distinct values: a script fills few blocks of 256 code
    points; where they tie (one character repeated), the side that is all NUL, as the
    high bytes of Latin-1 text are. Such text may be valid UTF-8 too, so this goes
    before UTF-8."""
    if len(data) < 2 or len(data) % 2 or any(data.startswith(bom) for bom, _ in _BOMS):
        return None
    controls = len(data.translate(None, _NOT_CONTROL))
    if controls < max(_UTF16_MIN_CONTROLS, _UTF16_MIN_CONTROL_SHARE * (len(data) // 2)):
        return None
    even = len(data[0::2].translate(None, _NOT_C0))
    odd = len(data[1::2].translate(None, _NOT_C0))
    plausible = [codec for codec, low, high in (("utf-16-le", even, odd),
                                                ("utf-16-be", odd, even))
                 if 4 * high <= low and _plausible_text(data, codec)]
    if len(plausible) < 2:
        return plausible[0] if plausible else None
    even_values, odd_values = set(data[0::2]), set(data[1::2])
    if len(even_values) == len(odd_values):  # one character repeated ("aa", "..."):
        if odd_values == {0}:  # the side of NULs holds the high bytes
            return "utf-16-le"
        return "utf-16-be" if even_values == {0} else None
    return "utf-16-le" if len(odd_values) < len(even_values) else "utf-16-be"


def _latin_script(data: bytes) -> bool:
    """Whether most non-ASCII bytes stand alone or in pairs (accents and quotes in
    Latin-script text in a single-byte charset: "café", "Grüße") rather than in longer
    runs (words of a non-Latin script, or multi-byte characters). Counted on runs of
    three or more bytes, so that two accented letters side by side do not make a
    German or Finnish word look foreign: on a few words charset-normalizer's guess is
    no better than chance (it reads "Grüße!" as UTF-16)."""
    non_ascii = _NON_ASCII_RUN.findall(data)
    in_long_runs = sum(len(run) for run in non_ascii if len(run) > 2)
    return 4 * in_long_runs < sum(map(len, non_ascii))


def decode_html(data: bytes, charset: str | None = None) -> str:
    """Decode page bytes to text (`charset`: the transport's label, if any); raise
    NotHTMLError for empty or binary input."""
    if not data or data.isspace():
        raise NotHTMLError("the body is empty")
    text = decode_text(data, charset)
    check_html(text)
    return text


def decode_text(data: bytes, charset: str | None = None) -> str:
    """Decode bytes to text in the order of the module docstring (HTML or not;
    `charset`: the transport's label). Always some text: whether it is a page is
    check_html's question."""
    text: str | None = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            text = data[len(bom):].decode(encoding, errors="replace")
            break
    transport = browser_codec(charset) if text is None and charset else None
    if transport is not None:
        with contextlib.suppress(UnicodeError):
            text = data.decode(transport)
    if text is None:
        utf16 = _utf16_without_bom(data)
        candidates = [c for c in (utf16, "utf-8", _declared_charset(data)) if c]
        for encoding in candidates:
            try:
                text = data.decode(encoding)
                break
            except UnicodeError:  # every candidate is a codec Python has
                continue
    if text is None and _latin_script(data):
        text = data.decode("cp1252", errors="replace")  # 5 bytes it leaves undefined
    if text is None:
        best = from_bytes(data).best()
        text = (str(best) if best is not None
                else data.decode("utf-8", errors="boilerbench-windows-1252"))
    return text


def decode_gold(data: bytes) -> tuple[str, str | None]:
    """A gold (or feed) file's text, and a note when it was not valid UTF-8: such a file
    is decoded as pages are (declared or detected charset), never with replacement
    characters that would count as words missed. A UTF-8 file with a few bytes of
    another charset pasted in keeps its UTF-8 (the detector would take the whole file
    for another charset, every word garbled) and reads those bytes as windows-1252.
    UTF-16 without a byte-order mark is told before UTF-8 is tried: by its NUL bytes
    (mostly ASCII, it would pass as UTF-8 with a NUL after every letter), else, for CJK
    text, by the control characters its bytes hold when read otherwise, which may be
    valid UTF-8 too, or by a NUL beside each where it is one character repeated
    (_utf16_from_controls)."""
    utf16 = _utf16_from_nul_bytes(data) or _utf16_from_controls(data)
    if utf16 is not None:
        order = "little" if utf16 == "utf-16-le" else "big"
        return data.decode(utf16), f"UTF-16 ({order}-endian) without a byte-order mark"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        where = f"not valid UTF-8 (byte {exc.start})"
    body = data.removeprefix(codecs.BOM_UTF8)
    if _utf8_but_for_stray_bytes(body):
        return (body.decode("utf-8", errors="boilerbench-windows-1252"),
                f"{where}; read as UTF-8 with the stray bytes as windows-1252")
    return decode_text(data), f"{where}; decoded by charset detection"


def _utf8_but_for_stray_bytes(data: bytes) -> bool:
    """Whether the text is UTF-8 but for a few stray bytes: its valid multi-byte
    characters outnumber the runs of bytes that are not UTF-8. Text in a legacy
    charset (or UTF-16/32 with a BOM) next to never forms valid multi-byte sequences."""
    if any(data.startswith(bom) for bom, _ in _BOMS):
        return False
    text = data.decode("utf-8", errors="replace")
    stray = text.count("\ufffd")
    multibyte = len(text) - len(text.encode("ascii", errors="ignore")) - stray
    return 0 < stray < multibyte


def check_html(text: str) -> None:
    """Refuse text that cannot be an HTML page: empty, binary-looking, or without tags."""
    if not text or text.isspace():
        raise NotHTMLError("the page is empty")
    sample = text[:_SAMPLE].encode("utf-8", errors="surrogatepass")
    controls = len(sample.translate(None, _NOT_CONTROL))
    if controls > _MAX_CONTROL_SHARE * min(len(text), _SAMPLE):
        raise NotHTMLError(
            f"the body looks binary: {controls} control characters in its first "
            f"{min(len(text), _SAMPLE)} characters"
        )
    if not _TAG.search(text):
        raise NotHTMLError("the body holds no HTML markup")
