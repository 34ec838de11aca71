"""The LaTeX tables of a report compile with pdflatex in the document
docs/evaluation.md describes, with rows, test sets and error reasons named in Latin
letters beyond ASCII and LaTeX's special characters."""

from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex is not installed (scripts/setup --test installs it with booktabs)")

# What docs/evaluation.md says a document that \input's the tables needs.
PREAMBLE = "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"

# Test sets and rows named as people name them: prediction files named after a
# service's setting, Latin letters beyond ASCII, LaTeX's special characters, and a
# name whose accent is a combining mark, as file names made on macOS have it.
DATASETS = ("news_v1.2-de", "walk-sh_é–50% & #1")
ROWS = ("density:threshold=learned", "trafilatura@no-comments", "Łódź «ą» – 50% & #2",
        "a~b^c$d{e}_f\\g [1] |x| <y>", unicodedata.normalize("NFD", "résumé"))
# An error reason is counted by what comes before its first ": ".
REASON = "„timeout“ at 100% & #3 {x} \\input{x}: HTTP 500"
PAGES = 6


def _article(page: int) -> list[str]:
    return [f"word{(7 * j + page) % 53}" for j in range(40 + 3 * page)]


def _write_inputs(root: Path) -> tuple[Path, list[Path]]:
    """Test set folders and one prediction file per row, each row keeping less of the
    article than the one before; the last row's first page failed with REASON."""
    sets = []
    for dataset in DATASETS:
        folder = root / "sets" / dataset
        (folder / "html").mkdir(parents=True)
        (folder / "content").mkdir()
        for page in range(PAGES):
            words = " ".join(_article(page))
            (folder / "html" / f"p{page}.html").write_text(
                f"<html><body><div>menu links</div><p>{words}</p></body></html>",
                encoding="utf-8")
            (folder / "content" / f"p{page}.txt").write_text(words, encoding="utf-8")
        sets.append(folder)
    predictions = root / "predictions"
    predictions.mkdir()
    for k, row in enumerate(ROWS):
        entries: dict[str, dict[str, str]] = {}
        for dataset in DATASETS:
            for page in range(PAGES):
                article = _article(page)
                entries[f"{dataset}/p{page}"] = {
                    "articleBody": " ".join(article[:len(article) - k * page])}
        if row == ROWS[-1]:
            entries[f"{DATASETS[0]}/p0"] = {"articleBody": "", "error": REASON}
        (predictions / f"{row}.json").write_text(json.dumps(entries), encoding="utf-8")
    return predictions, sets


def _compile(run_folder: Path, table: Path, build: Path) -> tuple[int, str]:
    """pdflatex on a document that \\input's the table from the run's folder, as a
    paper beside it would: its exit status and log."""
    document = build / f"{table.stem}-document.tex"
    document.write_text(f"{PREAMBLE}\\begin{{document}}\n\\input{{tables/{table.stem}}}\n"
                        "\\end{document}\n", encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           f"-output-directory={build}", str(document)],
                          cwd=run_folder, capture_output=True, timeout=300, check=False)
    return done.returncode, document.with_suffix(".log").read_text(encoding="utf-8",
                                                                   errors="replace")


def test_every_table_of_a_scored_run_compiles_with_pdflatex(tmp_path: Path) -> None:
    predictions, sets = _write_inputs(tmp_path)
    out, store = tmp_path / "out", tmp_path / "runs.sqlite"
    result = CliRunner().invoke(app, ["score", "--predictions", str(predictions),
                                      *[arg for folder in sets for arg in ("--dataset",
                                                                           str(folder))],
                                      "--out", str(out), "--store", str(store)],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    (run_folder,) = out.iterdir()
    tables = sorted((run_folder / "tables").glob("*.tex"))
    assert {table.stem for table in tables} == {
        "results", "details", "pairwise", "significance-news_v1_2_de",
        "significance-walk_sh_é_50_____1", "significance-_all_"}
    details = (run_folder / "tables" / "details.tex").read_text(encoding="utf-8")
    assert r"\textbackslash{}input\{x\}" in details  # the reason is in a table it compiles
    build = tmp_path / "build"
    build.mkdir()
    failures = {}
    for table in tables:
        status, log = _compile(run_folder, table, build)
        errors = [line for line in log.splitlines() if line.startswith("!")
                  or "Undefined control sequence" in line or "Missing" in line]
        if status != 0 or errors:
            failures[table.name] = errors or log[-2000:]
    assert not failures
