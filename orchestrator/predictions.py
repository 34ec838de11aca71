"""Prediction files: extracted texts per page, in the article-extraction benchmark's layout.

A prediction file is JSON `{page id: {"articleBody": text}}`, or the same mapping
under `"output"` beside a `"version"` (both as the Zyte benchmark publishes them), or
plainly `{page id: text}`; null is no text; a file whose entries are objects none of
which has "articleBody" is of another layout and refused. An entry may also hold an
"error" (a string): the page failed in the run that wrote the file, and is scored as
that error again, empty output counted as an error (ErrorText). Every run writes one
per service (`outputs/<service>.json` in its output folder), and a run can score such
files beside its live services: each `<name>.json` of a folder, or one such file
named alone, is a row named `<name>` (`<name>.json` when a live service has that
name), scored from its texts without extracting again. In a run over several test
sets the keys are `<dataset>/<page id>`; a bare page id is accepted for any of them.
Keys are compared with page ids in Unicode normal form NFC, as test sets pair file
names. Some tools key their texts by the page's file name (`a.html`, `a.txt`):
match_pages reads such a key as the page id without its suffix, where the key itself
names no page.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.models import PageResult
from shared.pairing import GOLD_SUFFIX, HTML_SUFFIXES

OUTPUTS_FOLDER = "outputs"
MISSING = "the prediction file has no text for this page"
FILE_NAME_SUFFIXES = (*HTML_SUFFIXES, GOLD_SUFFIX, ".json")
"""The suffixes of a key that names a page by a file of it (matched in any case)."""


class PredictionsError(ValueError):
    """A prediction file or folder that cannot be used (one line saying why)."""


class ErrorText(str):
    """The text of a page that failed in the run that wrote the file, with its error: a
    run scores a failed page as empty output but counts it as an error, and its
    outputs/ re-scored must count it so too. A str (the page's text, mostly empty), so
    readers that want the texts only read them as before."""

    error: str

    def __new__(cls, text: str, error: str) -> ErrorText:
        made = super().__new__(cls, text)
        made.error = error
        return made

    def __reduce__(self) -> tuple[type[ErrorText], tuple[str, str]]:
        return ErrorText, (str(self), self.error)


def read_predictions(path: Path) -> dict[str, str]:
    """Page key -> extracted text of one prediction file (an ErrorText where the entry
    has an "error"). Entries of another layout (objects without "articleBody" or "error"
    all through the file) are refused, not read as empty texts that would score every
    page 0."""
    try:  # bytes: JSON's own detection takes a BOM and UTF-16, as for JSON test sets
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or text
        raise PredictionsError(f"{path}: not a readable JSON file ({exc})") from None
    if isinstance(data, dict) and "output" in data and isinstance(data["output"], dict):
        data = data["output"]
    if not isinstance(data, dict):
        raise PredictionsError(f"{path}: expected {{page id: {{\"articleBody\": text}}}}")
    texts: dict[str, str] = {}
    spelled: dict[str, str] = {}  # each key in NFC -> the key as the file spells it
    bodies = 0
    other_keys: set[str] = set()
    for key, entry in data.items():
        error = None
        if isinstance(entry, dict):
            bodies += "articleBody" in entry or "error" in entry
            other_keys.update(k for k in entry if k not in ("articleBody", "error"))
            error = entry.get("error")
            if error is not None and not isinstance(error, str):
                raise PredictionsError(f"{path}: page {key!r}: an \"error\" is a string, "
                                       f"not {json.dumps(error)[:60]}")
        body = entry.get("articleBody") if isinstance(entry, dict) else entry
        if body is not None and not isinstance(body, str):
            raise PredictionsError(f"{path}: page {key!r}: expected {{\"articleBody\": "
                                   f"text}} or the text, not {json.dumps(entry)[:60]}")
        text = _utf8(path, key, body or "")
        if error:
            text = ErrorText(text, _utf8(path, key, error))
        normal = unicodedata.normalize("NFC", str(key))
        if normal in spelled:  # one page, two texts: which one is meant is not ours to pick
            raise PredictionsError(
                f"{path}: the keys {spelled[normal]!a} and {key!a} are one page id "
                "in two Unicode normal forms (they print alike); keep one of them")
        spelled[normal] = key
        texts[normal] = text
    if other_keys and not bodies:
        raise PredictionsError(f"{path}: no page has an \"articleBody\" (the entries have "
                               f"{', '.join(sorted(other_keys)[:5])}); expected {{page id: "
                               f"{{\"articleBody\": text}}}}")
    return texts


def _utf8(path: Path, key: str, text: str) -> str:
    """The text, if UTF-8 can hold it: JSON may escape a lone surrogate (\\udce9, as
    tools that read undecodable bytes with surrogateescape write), which the store
    and the reports cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PredictionsError(f"{path}: page {key!r}: the text holds a lone surrogate "
                               f"(\\u{ord(text[exc.start]):04x}) at character {exc.start}, "
                               "which UTF-8 text cannot hold") from None
    return text


def prediction_rows(source: Path, live: Iterable[str] = ()) -> dict[str, str]:
    """Row name -> file path of every `*.json` in `source`, a folder, or of `source`
    itself, one prediction file (module docstring). In a folder the suffix matches in
    any case, and hidden files (`.x.json`, the `._x.json` that macOS copies leave) are
    not read, as in a test set's folders."""
    if source.is_dir():
        paths = sorted(path for path in source.iterdir() if path.is_file()
                       and path.suffix.lower() == ".json" and not path.name.startswith("."))
        if not paths:
            raise PredictionsError(f"{source}: no *.json prediction files")
    elif source.is_file():
        paths = [source]
    else:
        raise PredictionsError(f"{source}: no such prediction file or folder")
    taken = set(live)
    return {path.stem if path.stem not in taken else path.name: str(path.resolve())
            for path in paths}


def lookup(texts: Mapping[str, str], dataset: str, page_id: str) -> str | None:
    """The text of a page, keyed `<dataset>/<page id>` or by the page id alone (keys in
    NFC, as read_predictions gives them)."""
    page_id = unicodedata.normalize("NFC", page_id)
    found = texts.get(f"{unicodedata.normalize('NFC', dataset)}/{page_id}")
    return found if found is not None else texts.get(page_id)


@dataclass(frozen=True)
class PageTexts:
    """A prediction file's texts keyed as lookup finds them, and what was odd about its
    keys (for the run's warnings)."""

    texts: dict[str, str]
    warnings: list[str]


def match_pages(texts: Mapping[str, str], pages: Mapping[str, Iterable[str]], row: str,
                path: str) -> PageTexts:
    """Read keys that name a page by its file (`a.html`, `set/a.txt`: a page key and one
    of FILE_NAME_SUFFIXES) as that page's key, for the run's test sets (`pages`: each
    set's name and page ids). A key that names a page itself is always its page's: it
    is never read as a file name, and a file name is not read for a page that has it."""
    page_keys = {unicodedata.normalize("NFC", key) for name, ids in pages.items()
                 for page_id in ids for key in (page_id, f"{name}/{page_id}")}
    matched: dict[str, str] = {}
    read_as: dict[str, str] = {}  # file-name key -> the page key it was read as
    warnings: list[str] = []
    for key in sorted(texts):
        normal = unicodedata.normalize("NFC", key)
        page_key = next((normal[:-len(suffix)] for suffix in FILE_NAME_SUFFIXES
                         if normal.lower().endswith(suffix)
                         and normal[:-len(suffix)] in page_keys), None)
        if normal in page_keys or page_key is None:
            matched[normal] = texts[key]
        elif page_key in texts:
            warnings.append(f"{row}: the prediction file {path} has a text for page "
                            f"{page_key!r} and one for its file {key!r}; the page's is read")
        elif page_key in read_as.values():
            first = next(k for k, v in read_as.items() if v == page_key)
            warnings.append(f"{row}: the prediction file {path} keys two texts by files of "
                            f"page {page_key!r}, {first!r} and {key!r}; {first!r} is read")
        else:
            read_as[key] = page_key
            matched[page_key] = texts[key]
    if read_as:
        shown = ", ".join(f"{key!r} as {page!r}" for key, page in list(read_as.items())[:3])
        more = f" and {len(read_as) - 3} more" if len(read_as) > 3 else ""
        warnings.insert(0, f"{row}: the prediction file {path} names pages by file name: "
                           f"keys that name no page were read as file names, {shown}{more}")
    return PageTexts(matched, warnings)


def write_predictions(out_dir: Path, results: Iterable[PageResult]) -> dict[str, Path]:
    """`outputs/<row>.json` for every row of a run (skipped pages left out). A page that
    failed has its error beside its text (empty, as scored), so that re-scoring the file
    counts it as an error as the run did; other tools read the articleBody alone."""
    per_row: dict[str, dict[str, dict[str, str]]] = {}
    results = list(results)
    several = len({r.dataset for r in results}) > 1
    for r in results:
        if r.status == "skipped":
            continue
        key = f"{r.dataset}/{r.page_id}" if several else r.page_id
        entry = {"articleBody": r.text}
        if r.status == "error":
            entry["error"] = r.error or "error"
        per_row.setdefault(r.service, {})[key] = entry
    folder = out_dir / OUTPUTS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for row, pages in per_row.items():
        path = folder / f"{row}.json"
        path.write_text(json.dumps(pages, ensure_ascii=False, sort_keys=True, indent=0),
                        encoding="utf-8")
        paths[row] = path
    return paths
