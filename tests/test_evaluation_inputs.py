"""Nothing about a test set passes silently: unpaired files, empty gold texts and gold
files that are not UTF-8 are named in the command's output, summary.md and
report.html, and such gold is decoded by charset detection, not with replacement
characters; UTF-16 without a byte-order mark is read as UTF-16, not as UTF-8 with
NULs. The configuration file takes `mode: in-process` as the CLI does, POST /runs the
JSON forms the documentation gives, and a malformed upload gets one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app
from orchestrator.config import RunConfig, load_config
from orchestrator.testsets import open_folder
from shared.decoding import decode_gold
from tests.helpers import zip_bytes

PAGE = "<html><body><article><p>{}</p></article><nav>Home About</nav></body></html>"
GOLD = "Le café du coin ouvre à sept heures tous les matins de la semaine."


def _test_set(root: Path) -> Path:
    folder = root / "odd"
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    for page_id in ("latin", "empty", "fine", "alone"):
        (folder / "html" / f"{page_id}.html").write_text(PAGE.format(GOLD), encoding="utf-8")
    (folder / "content" / "latin.txt").write_bytes(GOLD.encode("cp1252"))
    (folder / "content" / "empty.txt").write_text("", encoding="utf-8")
    (folder / "content" / "fine.txt").write_text(GOLD, encoding="utf-8")
    (folder / "content" / "orphan.txt").write_text(GOLD, encoding="utf-8")
    return folder


def test_gold_that_is_not_utf8_is_detected_and_noted(tmp_path: Path) -> None:
    folder = _test_set(tmp_path)
    dataset = open_folder("odd", folder / "html", folder / "content")
    page = dataset.page("latin")
    assert page.gold == GOLD
    assert "\ufffd" not in page.gold
    assert "not valid UTF-8" in page.notes[0]
    assert dataset.page("fine").notes == ()


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("text", [
    GOLD,
    "Plain ASCII gold text.\nIts second line, with no accent at all.",
    "Правительство объявило о новых мерах поддержки бизнеса.",
])
def test_utf16_gold_without_a_bom_is_read_as_utf16(tmp_path: Path, text: str,
                                                   encoding: str) -> None:
    """Mostly ASCII, such a file is valid UTF-8 too, a NUL after every letter."""
    for folder in ("html", "content", "feeds"):
        (tmp_path / folder).mkdir()
    (tmp_path / "html" / "p.html").write_text(PAGE.format(text), encoding="utf-8")
    (tmp_path / "content" / "p.txt").write_bytes(text.encode(encoding))
    (tmp_path / "feeds" / "p.xml").write_bytes(f"<rss>{text}</rss>".encode(encoding))
    page = open_folder("set", tmp_path / "html", tmp_path / "content",
                       tmp_path / "feeds").page("p")
    assert (page.gold, page.feed) == (text, f"<rss>{text}</rss>")
    order = "little" if encoding == "utf-16-le" else "big"
    assert page.notes == (f"content/p.txt is UTF-16 ({order}-endian) without a byte-order "
                          "mark",)


# NUL and the other C0 controls but white space, and DEL: what UTF-16 read as bytes shows.
_CONTROLS = frozenset(chr(c) for c in (*range(0x09), 0x0B, *range(0x0E, 0x20), 0x7F))


@given(st.text().filter(lambda text: not _CONTROLS & set(text)
                        and not text.startswith("\ufeff")))
def test_utf8_gold_without_control_characters_reads_as_utf8(text: str) -> None:
    """The UTF-16 readings never take a UTF-8 file: UTF-8 text holds no NUL or other
    control character, which they need (a NUL byte, or controls where CJK text read as
    UTF-16 has its low bytes)."""
    assert decode_gold(text.encode("utf-8")) == (text, None)


@pytest.mark.dataset
def test_every_utf8_gold_file_of_the_datasets_reads_as_utf8(four_datasets: list[Path]
                                                             ) -> None:
    checked = 0
    for dataset in four_datasets:
        for path in sorted((dataset / "content").iterdir()):
            data = path.read_bytes()
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError:
                continue
            assert decode_gold(data) == (text, None), path
            checked += 1
    assert checked > 1000


def test_odd_inputs_are_named_in_the_output_summary_and_report(tmp_path: Path) -> None:
    folder = _test_set(tmp_path)
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    texts = {page_id: {"articleBody": GOLD} for page_id in ("latin", "empty", "fine")}
    (predictions / "copy.json").write_text(json.dumps(texts), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import app; app()", "score",
         "--predictions", str(predictions), "--dataset", str(folder), "--output", "out",
         "--store", "store.sqlite"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (out_dir,) = (tmp_path / "out").iterdir()
    summary = (out_dir / "summary.md").read_text(encoding="utf-8")
    report = (out_dir / "report.html").read_text(encoding="utf-8")
    for text in (done.stderr, summary, report):
        assert "html/alone.html has no content" in text
        assert "content/orphan.txt has no html" in text
        assert "odd/empty: the gold text is empty" in text
        assert "odd/latin: content/latin.txt is not valid UTF-8" in text
    # The detected gold scores the copied text as the exact match it is.
    rows = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["pages"]
    latin = next(r for r in rows if r["page_id"] == "latin")
    assert latin["word_f1"] == 1.0


def test_the_config_file_takes_mode_in_process(tmp_path: Path) -> None:
    config_file = tmp_path / "run.conf"
    config_file.write_text("mode: in-process;\n", encoding="utf-8")
    assert load_config(config_file).mode == "embedded"


def _api(tmp_path: Path) -> TestClient:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                       services=["justext"], mode="embedded")
    return TestClient(create_app(ApiSettings(resume=False), config))


def test_post_runs_takes_a_bare_list_of_pages(tmp_path: Path) -> None:
    pages = [{"id": "p1", "html": PAGE.format(GOLD), "gold": GOLD}]
    with _api(tmp_path) as client:
        listed = client.post("/runs", json={"pages": pages, "services": ["justext"]})
        named = client.post("/runs", json={"pages": {"name": "mine", "pages": pages}})
    assert listed.status_code == 202, listed.text
    assert named.status_code == 202, named.text


def test_malformed_uploads_get_one_clear_line(tmp_path: Path) -> None:
    archive = {"archive": ("set.zip", zip_bytes({"set/html/p1.html": PAGE.format(GOLD),
                                           "set/content/p1.txt": GOLD}), "application/zip")}
    with _api(tmp_path) as client:
        bad_options = client.post("/runs", files=archive, data={"options": "{justext"})
        bad_archive = client.post("/runs", files={
            "archive": ("set.zip", b"not an archive at all", "application/zip")})
        no_boundary = client.post("/runs", content=b"--x\r\n",
                                  headers={"content-type": "multipart/form-data"})
        bad_field = client.post("/runs", files=archive, data={"options": '{"justext": 3}'})
    for reply in (bad_options, bad_archive, no_boundary, bad_field):
        assert 400 <= reply.status_code < 500, reply.text
        detail = reply.json()["detail"]
        assert "\n" not in detail, detail
        assert "pydantic" not in detail
        assert "errors.pydantic.dev" not in detail
    assert "options" in bad_options.json()["detail"]


def _score(*args: str) -> Result:
    return CliRunner().invoke(app, ["score", *args], terminal_width=80)


def test_names_with_brackets_are_printed_as_they_are(tmp_path: Path) -> None:
    """Rich would read `[final]` as markup and drop it, and fail on `[/x]`."""
    folder = _test_set(tmp_path)
    odd = folder / "html" / "draft[bold].html"
    odd.write_text(PAGE.format(GOLD), encoding="utf-8")
    missing = _score("--predictions", str(tmp_path / "tool[final].json"), "--dataset",
                     str(folder), "--store", str(tmp_path / "store.sqlite"))
    assert missing.exit_code == 2, missing.output
    assert "tool[final].json: no such prediction file or folder" in missing.output
    (tmp_path / "tool[final].json").write_text(json.dumps({"fine": GOLD}), encoding="utf-8")
    done = _score("--predictions", str(tmp_path / "tool[final].json"), "--dataset",
                  str(folder), "--out", str(tmp_path / "out[/x]"),
                  "--store", str(tmp_path / "store.sqlite"))
    assert done.exit_code == 0, done.output
    assert "warning: odd: html/draft[bold].html has no content/draft[bold].txt" in done.output
    assert f"report.html: {tmp_path / 'out[/x]'}" in done.output


def test_control_characters_in_names_are_shown_not_obeyed(tmp_path: Path) -> None:
    """An ESC sequence in a file name would clear or retitle the terminal that prints
    the warning naming it; it is written out instead."""
    folder = _test_set(tmp_path)
    (folder / "html" / "draft\x1b[2J\x1b]0;owned\x07.html").write_text(PAGE.format(GOLD),
                                                                    encoding="utf-8")
    (tmp_path / "tool\x1b[31m.json").write_text(json.dumps({"fine": GOLD}), encoding="utf-8")
    done = _score("--predictions", str(tmp_path / "tool\x1b[31m.json"), "--dataset",
                  str(folder), "--out", str(tmp_path / "out"),
                  "--store", str(tmp_path / "store.sqlite"))
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.output
    assert "\x07" not in done.output
    assert "html/draft\\x1b[2J\\x1b]0;owned\\x07.html has no content" in done.output
    assert "tool\\x1b[31m" in done.output


def test_a_resumed_run_whose_prediction_file_is_gone_fails_in_one_line(tmp_path: Path
                                                                       ) -> None:
    from orchestrator.runner import RunSpec, create_run, folder_source
    from orchestrator.store import Store

    folder = _test_set(tmp_path)
    predictions = tmp_path / "tool.json"
    predictions.write_text(json.dumps({"fine": GOLD}), encoding="utf-8")
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], predictions={"tool": str(predictions)},
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, [folder_source("odd", folder / "html",
                                                    folder / "content", None)])
    store.close()
    predictions.unlink()
    done = CliRunner().invoke(app, ["run", "--resume", run_id, "--store",
                                    str(tmp_path / "store.sqlite")], terminal_width=80)
    assert done.exit_code == 2, done.output
    assert isinstance(done.exception, SystemExit)  # no traceback
    assert f"{predictions}: not a readable JSON file" in done.output


def test_a_test_set_folder_whose_name_is_not_utf8_is_scored(tmp_path: Path) -> None:
    """Python keeps the bytes as lone surrogates, which the store cannot hold."""
    folder = _test_set(tmp_path).rename(tmp_path / os.fsdecode(b"donn\xe9es"))
    (tmp_path / "tool.json").write_text(json.dumps({"fine": GOLD}), encoding="utf-8")
    done = _score("--predictions", str(tmp_path / "tool.json"), "--dataset", str(folder),
                  "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store.sqlite"))
    assert done.exit_code == 0, done.output
    assert "donn\ufffdes" in done.output
