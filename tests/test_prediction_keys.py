"""How the keys of a prediction file name a run's pages: page ids compared in Unicode
NFC, as test sets pair file names, and keys that are a page's file name (`a.html`,
`a.txt`, as some tools write them) read as its id where they name no page themselves."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.predictions import PredictionsError, lookup, match_pages, read_predictions

CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")  # as macOS writes file names
PAGE = "<html><body><article><p>{}</p></article><nav>Home About</nav></body></html>"
GOLD = "Le café du coin ouvre à sept heures tous les matins de la semaine."


def _file(folder: Path, texts: dict[str, object]) -> Path:
    path = folder / "tool.json"
    path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_key_in_nfd_names_the_page_whose_id_is_in_nfc(tmp_path: Path) -> None:
    texts = read_predictions(_file(tmp_path, {CAFE_NFD: {"articleBody": "text"},
                                              f"set/{CAFE_NFD}x": "other"}))
    assert lookup(texts, "set", CAFE_NFC) == "text"
    assert lookup(texts, "set", f"{CAFE_NFC}x") == "other"
    assert lookup(texts, "set", CAFE_NFD) == "text"  # a JSON test set's id, as written


def test_one_key_in_two_normal_forms_is_refused_spelled_out(tmp_path: Path) -> None:
    """The two keys print alike, and which of the two texts is meant is not ours to say."""
    path = _file(tmp_path, {CAFE_NFC: "one", CAFE_NFD: "two"})
    with pytest.raises(PredictionsError, match=r"the keys 'caf\\xe9' and 'cafe\\u0301' are "
                                               "one page id in two Unicode normal forms"):
        read_predictions(path)


def test_a_folder_in_nfd_and_nfc_is_scored_from_a_file_keyed_in_nfd(tmp_path: Path) -> None:
    """The html file's name in NFC, the gold's and the prediction file's key in NFD (as
    a tool on macOS writes them): one page, scored from the file's text."""
    folder = tmp_path / "set"
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    (folder / "html" / f"{CAFE_NFC}.html").write_text(PAGE.format(GOLD), encoding="utf-8")
    (folder / "content" / f"{CAFE_NFD}.txt").write_text(GOLD, encoding="utf-8")
    if f"{CAFE_NFD}.txt" not in [p.name for p in (folder / "content").iterdir()]:
        pytest.skip("this file system normalises names")
    predictions = _file(tmp_path, {CAFE_NFD: {"articleBody": GOLD}})
    done = CliRunner().invoke(app, [
        "score", "--predictions", str(predictions), "--dataset", str(folder),
        "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store.sqlite")],
        terminal_width=200)
    assert done.exit_code == 0, done.output
    assert "warning" not in done.output
    (out_dir,) = (tmp_path / "out").iterdir()
    (row,) = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["pages"]
    assert (row["page_id"], row["status"], row["word_f1"]) == (CAFE_NFC, "ok", 1.0)


def test_keys_that_are_file_names_are_read_as_page_ids_and_said_so(tmp_path: Path) -> None:
    texts = read_predictions(_file(tmp_path, {
        "a.html": {"articleBody": "A"}, "b.TXT": {"articleBody": "B"},
        f"set/{CAFE_NFD}.htm": {"articleBody": "C"}, "d.json": {"articleBody": "D"},
        "elsewhere.html": {"articleBody": "none of ours"}}))
    matched = match_pages(texts, {"set": ["a", "b", CAFE_NFC, "d"]}, "tool", "tool.json")
    assert [lookup(matched.texts, "set", page) for page in ("a", "b", CAFE_NFC, "d")] == [
        "A", "B", "C", "D"]
    assert matched.texts["elsewhere.html"] == "none of ours"  # names no page: left as it is
    (warning,) = matched.warnings
    assert warning == ("tool: the prediction file tool.json names pages by file name: keys "
                       "that name no page were read as file names, 'a.html' as 'a', 'b.TXT' "
                       "as 'b', 'd.json' as 'd' and 1 more")


def test_a_key_that_names_a_page_is_never_read_as_a_file_name(tmp_path: Path) -> None:
    """A JSON test set may have ids with suffixes: `a.html` is then that page's, not a's;
    and where a file has both `a` and `a.html`, the page's own key is read."""
    texts = read_predictions(_file(tmp_path, {"a.html": "the page a.html"}))
    matched = match_pages(texts, {"set": ["a", "a.html"]}, "tool", "tool.json")
    assert lookup(matched.texts, "set", "a.html") == "the page a.html"
    assert lookup(matched.texts, "set", "a") is None
    assert matched.warnings == []
    both = read_predictions(_file(tmp_path, {"a": "by id", "a.html": "by file name"}))
    matched = match_pages(both, {"set": ["a"]}, "tool", "tool.json")
    assert lookup(matched.texts, "set", "a") == "by id"
    assert matched.warnings == ["tool: the prediction file tool.json has a text for page 'a' "
                                "and one for its file 'a.html'; the page's is read"]


def test_two_file_names_of_one_page_are_named_and_the_first_is_read(tmp_path: Path) -> None:
    texts = read_predictions(_file(tmp_path, {"a.html": "html", "a.htm": "htm"}))
    matched = match_pages(texts, {"set": ["a"]}, "tool", "tool.json")
    assert lookup(matched.texts, "set", "a") == "htm"
    assert matched.warnings[1] == ("tool: the prediction file tool.json keys two texts by "
                                   "files of page 'a', 'a.htm' and 'a.html'; 'a.htm' is read")


def test_a_file_keyed_by_file_names_scores_its_pages_with_a_warning(tmp_path: Path) -> None:
    """`score` with a tool's file keyed `a.html`: the page is scored from its text, not
    recorded as an error, and the run says how the keys were read."""
    folder = tmp_path / "set"
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    (folder / "html" / "a.html").write_text(PAGE.format(GOLD), encoding="utf-8")
    (folder / "content" / "a.txt").write_text(GOLD, encoding="utf-8")
    predictions = _file(tmp_path, {"a.html": {"articleBody": GOLD}})
    done = CliRunner().invoke(app, [
        "score", "--predictions", str(predictions), "--dataset", str(folder),
        "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store.sqlite")],
        terminal_width=300)
    assert done.exit_code == 0, done.output
    assert "keys that name no page were read as file names, 'a.html' as 'a'" in done.output
    (out_dir,) = (tmp_path / "out").iterdir()
    (row,) = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["pages"]
    assert (row["page_id"], row["status"], row["word_f1"]) == ("a", "ok", 1.0)
