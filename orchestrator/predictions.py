"""Prediction files: extracted texts per page, in the article-extraction benchmark's layout.

A prediction file is JSON `{page id: {"articleBody": text}}`, or the same mapping
under `"output"` beside a `"version"` (both as the Zyte benchmark publishes them), or
plainly `{page id: text}`; null is no text; a file whose entries are objects none of
which has "articleBody" is of another layout and refused. Every run writes one per
service (`outputs/<service>.json` in its output folder), and a run can score such
files beside its live services: each `<name>.json` of a folder, or one such file
named alone, is a row named `<name>` (`<name>.json` when a live service has that
name), scored from its texts without extracting again. In a run over several test
sets the keys are `<dataset>/<page id>`; a bare page id is accepted for any of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from orchestrator.models import PageResult

OUTPUTS_FOLDER = "outputs"
MISSING = "the prediction file has no text for this page"


class PredictionsError(ValueError):
    """A prediction file or folder that cannot be used (one line saying why)."""


def read_predictions(path: Path) -> dict[str, str]:
    """Page key -> extracted text of one prediction file. Entries of another layout (objects
    without "articleBody" all through the file) are refused, not read as empty texts that
    would score every page 0."""
    try:  # bytes: JSON's own detection takes a BOM and UTF-16, as for JSON test sets
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or text
        raise PredictionsError(f"{path}: not a readable JSON file ({exc})") from None
    if isinstance(data, dict) and "output" in data and isinstance(data["output"], dict):
        data = data["output"]
    if not isinstance(data, dict):
        raise PredictionsError(f"{path}: expected {{page id: {{\"articleBody\": text}}}}")
    texts: dict[str, str] = {}
    bodies = 0
    other_keys: set[str] = set()
    for key, entry in data.items():
        if isinstance(entry, dict):
            bodies += "articleBody" in entry
            other_keys.update(k for k in entry if k != "articleBody")
        body = entry.get("articleBody") if isinstance(entry, dict) else entry
        if body is not None and not isinstance(body, str):
            raise PredictionsError(f"{path}: page {key!r}: expected {{\"articleBody\": "
                                   f"text}} or the text, not {json.dumps(entry)[:60]}")
        texts[str(key)] = _utf8(path, key, body or "")
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
    """The text of a page, keyed `<dataset>/<page id>` or by the page id alone."""
    found = texts.get(f"{dataset}/{page_id}")
    return found if found is not None else texts.get(page_id)


def write_predictions(out_dir: Path, results: Iterable[PageResult]) -> dict[str, Path]:
    """`outputs/<row>.json` for every row of a run (errors as empty text, as scored;
    skipped pages left out)."""
    per_row: dict[str, dict[str, dict[str, str]]] = {}
    results = list(results)
    several = len({r.dataset for r in results}) > 1
    for r in results:
        if r.status == "skipped":
            continue
        key = f"{r.dataset}/{r.page_id}" if several else r.page_id
        per_row.setdefault(r.service, {})[key] = {"articleBody": r.text}
    folder = out_dir / OUTPUTS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for row, pages in per_row.items():
        path = folder / f"{row}.json"
        path.write_text(json.dumps(pages, ensure_ascii=False, sort_keys=True, indent=0),
                        encoding="utf-8")
        paths[row] = path
    return paths
