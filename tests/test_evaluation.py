"""Evaluation a researcher can publish, through the real `boilerbench` command.

A run of two live services (in-process) beside the 15 published prediction files on
a few scrapinghub pages: one ranked table with every metric filled, fusion flagged
in-sample (its model was trained on scrapinghub), outputs/<service>.json that
`boilerbench score` re-scores to the same figures, CSV/LaTeX/SVG exports that parse,
and a report whose per-page view Chromium renders with the diff marked. Then the
fail-fast cases: a bad option (exit 2, before any extraction, API 422) and a
service that fails every page (exit 1).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from fastapi.testclient import TestClient

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from tests.helpers import SAMPLE

PAGES = 4
LIVE = ["readability", "fusion"]
METRIC_COLUMNS = ["word P", "word R", "word F1 (95% CI)", "micro F1", "bag F1",
                  "shingle F1 ± sd", "shingle P", "shingle R", "exact", "ROUGE-LSum"]


def boilerbench(*args: str, cwd: Path, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from orchestrator.cli import app; app()", *args]
    return subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory, scrapinghub: Path) -> Path:
    """A few scrapinghub pages in a temporary folder of the same name."""
    folder = tmp_path_factory.mktemp("sets") / "scrapinghub"
    ids = sorted(p.stem for p in (scrapinghub / "content").glob("*.txt"))[:PAGES]
    for sub, suffix in (("html", ".html"), ("content", ".txt")):
        (folder / sub).mkdir(parents=True)
        for page_id in ids:
            shutil.copy(scrapinghub / sub / f"{page_id}{suffix}", folder / sub)
    return folder


@pytest.fixture(scope="module")
def run(small_set: Path, published: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    work = small_set.parent
    done = boilerbench("run", "--in-process", "--dataset", str(small_set), "--services",
                       ",".join(LIVE), "--predictions", str(published), "--output", "out",
                       "--store", "store.sqlite", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    (out_dir,) = (work / "out").iterdir()
    return done, out_dir


def _table(out_dir: Path) -> list[dict[str, str]]:
    with (out_dir / "tables" / "results.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.dataset
def test_one_ranked_table_of_live_services_and_published_files(
        run: tuple[subprocess.CompletedProcess[str], Path], published: Path) -> None:
    done, out_dir = run
    files = sorted(p.stem for p in published.glob("*.json"))
    rows = {row["row"]: row for row in _table(out_dir)}
    expected = [*LIVE, *[f if f not in LIVE else f"{f}.json" for f in files]]
    assert sorted(rows) == sorted(expected)
    for name in expected:
        assert name in done.stdout
        assert all(rows[name][c] not in ("", "–") for c in METRIC_COLUMNS), rows[name]
    assert rows["fusion"]["flags"] == "in-sample"
    assert rows["readability"]["flags"] == ""
    assert rows["readability.json"]["flags"] == "file"
    f1 = [float(row["word F1 (95% CI)"].split()[0]) for row in _table(out_dir)]
    assert f1 == sorted(f1, reverse=True)
    # Competition ranking: a row with the same mean as the one above (readability and
    # the published readability.json extract alike) shares its rank.
    summary = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["summary"]
    mean = {row["service"]: row["levels"]["word"]["macro"]["f1"]["mean"]
            for row in summary["services"]}
    names = [row["row"] for row in _table(out_dir)]
    ranks = [1]
    for i in range(1, len(names)):
        ranks.append(ranks[-1] if mean[names[i]] == mean[names[i - 1]] else i + 1)
    assert [row["#"] for row in _table(out_dir)] == [str(rank) for rank in ranks]
    assert ranks[names.index("readability.json")] == ranks[names.index("readability")]


@pytest.mark.dataset
def test_written_outputs_rescore_to_the_live_figures(
        run: tuple[subprocess.CompletedProcess[str], Path], small_set: Path) -> None:
    _, out_dir = run
    outputs = json.loads((out_dir / "outputs" / "fusion.json").read_text(encoding="utf-8"))
    assert len(outputs) == PAGES
    assert all("articleBody" in v for v in outputs.values())
    work = small_set.parent
    done = boilerbench("score", "--predictions", str(out_dir / "outputs"), "--dataset",
                       str(small_set), "--output", "rescored", "--store", "store.sqlite",
                       cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    (rescored,) = (work / "rescored").iterdir()

    def figures(folder: Path) -> dict[str, tuple[object, ...]]:
        summary = json.loads((folder / "results.json").read_text(encoding="utf-8"))["summary"]
        return {row["service"]: (row["shingle"]["f1"], row["shingle"]["precision"],
                                 row["shingle"]["recall"], row["shingle"]["accuracy"],
                                 row["levels"]["word"]["macro"]["f1"]["mean"],
                                 row["rouge_lsum"]["mean"])
                for row in summary["services"]}

    live, again = figures(out_dir), figures(rescored)
    for name in LIVE:
        assert again[name] == live[name]


@pytest.mark.dataset
def test_exports_parse(run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, out_dir = run
    svgs = sorted((out_dir / "plots").glob("*.svg"))
    assert len(svgs) == 3
    for svg in svgs:
        root = ElementTree.parse(svg).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.findall(".//{http://www.w3.org/2000/svg}circle") or "bars" in svg.name
    for tex in sorted((out_dir / "tables").glob("*.tex")):
        text = tex.read_text(encoding="utf-8")
        assert text.count(r"\begin{") == text.count(r"\end{") == 2
        body = text.split(r"\toprule")[1].split(r"\bottomrule")[0]
        lines = [line for line in body.splitlines() if line.endswith(r"\\")]
        assert len({line.count(" & ") for line in lines}) == 1, tex.name
    matrix = (out_dir / "tables" / "significance-scrapinghub.csv").read_text(encoding="utf-8")
    assert len(matrix.splitlines()) == 18  # a header and one line per row


@pytest.mark.dataset
def test_report_shows_the_per_page_diff_in_chromium(
        run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/setup --test installs it)")
    _, out_dir = run
    report = out_dir / "report.html"
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", report.as_uri()], capture_output=True, text=True,
                          timeout=120, check=False)
    dom = done.stdout
    assert "Pages, worst first" in dom, done.stderr[-1000:]
    details = dom.split('<details class="page" id="detail-page--readability--scrapinghub--')
    assert len(details) == 1 + PAGES
    assert any('<del class="missed">' in d or '<ins class="extra">' in d for d in details[1:])
    # Every dot of the plots links to its page in the per-page view.
    assert dom.count('<a href="#page--fusion--scrapinghub--') >= 2 * PAGES


@pytest.mark.dataset
def test_a_bad_option_stops_the_run_before_extracting(small_set: Path, tmp_path: Path) -> None:
    done = boilerbench("run", "--in-process", "--dataset", str(small_set), "--services",
                       "justext", "--option", 'justext={"languag": "German"}', "--output",
                       "out", "--store", "store.sqlite", cwd=tmp_path)
    assert done.returncode == 2
    assert "justext" in done.stderr
    assert "languag" in done.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "store.sqlite").exists()


def test_the_api_refuses_a_bad_option_with_422(tmp_path: Path) -> None:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False), config)
    with TestClient(app) as client:
        reply = client.post("/runs", json={"dataset": str(SAMPLE), "services": ["justext"],
                                           "options": {"justext": {"length_low": "short"}}})
    assert reply.status_code == 422
    assert reply.json()["error"] == "invalid_options"
    assert "justext" in reply.json()["detail"]
    assert "length_low" in reply.json()["detail"]


def test_the_api_refuses_a_number_given_as_a_string_as_the_service_would(tmp_path: Path
                                                                          ) -> None:
    """Options go to the services in JSON bodies, which take them only in the types the
    schema states: "70" for a number would fail every page of the run."""
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False), config)
    with TestClient(app) as client:
        reply = client.post("/runs", json={"dataset": str(SAMPLE), "services": ["justext"],
                                           "options": {"justext": {"length_low": "70"}}})
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"].startswith("justext: option 'length_low'")
    assert '"70"' in reply.json()["detail"]


def test_the_api_checks_a_settings_row_and_its_options(tmp_path: Path) -> None:
    """`justext@german` is justext with that row's options: checked by justext's own
    options model; a label that is no label, or no service before the mark, is a 422."""
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False), config)
    with TestClient(app) as client:
        refused = client.post("/runs", json={
            "dataset": str(SAMPLE), "services": ["justext", "justext@german"],
            "options": {"justext@german": {"languag": "German"}}})
        bad_label = client.post("/runs", json={"dataset": str(SAMPLE),
                                               "services": ["justext@a b"]})
        no_service = client.post("/runs", json={"dataset": str(SAMPLE),
                                                "services": ["nosuch@german"]})
    assert refused.status_code == 422
    assert refused.json()["error"] == "invalid_options"
    assert refused.json()["detail"].startswith("justext@german: option 'languag'")
    assert bad_label.status_code == no_service.status_code == 422
    assert "a setting's label" in bad_label.json()["detail"]
    assert "unknown service 'nosuch'" in no_service.json()["detail"]


@pytest.mark.dataset
def test_a_service_that_fails_every_page_fails_the_command(small_set: Path,
                                                          tmp_path: Path) -> None:
    """The run's own service is up, but refuses every page (a body limit below any
    page's size): the run is recorded, and the command fails."""
    done = boilerbench("run", "--local", "--dataset", str(small_set), "--services", "bte",
                       "--retries", "0", "--output", "out", "--store", "store.sqlite",
                       cwd=tmp_path, env={"BOILERBENCH_MAX_BODY_BYTES": "64"})
    assert done.returncode == 1, done.stderr
    assert "bte failed every page" in done.stderr


@pytest.mark.dataset
def test_the_api_serves_a_page_with_its_diff(
        run: tuple[subprocess.CompletedProcess[str], Path], small_set: Path) -> None:
    _, out_dir = run
    work = small_set.parent
    config = RunConfig(store=work / "store.sqlite", output_folder=work / "out")
    page_id = sorted(p.stem for p in (small_set / "content").glob("*.txt"))[0]
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        reply = client.get(f"/runs/{out_dir.name}/pages/{page_id}")
        missing = client.get(f"/runs/{out_dir.name}/pages/no-such-page")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    gold = (small_set / "content" / f"{page_id}.txt").read_text(encoding="utf-8")
    assert body["gold"] == gold
    rows = {row["row"]: row for row in body["rows"]}
    assert set(LIVE) <= set(rows)
    assert len(rows) == 17
    diff = rows["html-text"]["diff"]
    assert diff["extra_words"] > 0  # the whole page's text holds more than the article
    assert any(s["kind"] == "extra" for s in diff["extract"])
    assert missing.status_code == 404


def test_pages_answered_without_text_are_counted_and_named(tmp_path: Path) -> None:
    """jusText keeps nothing on a page without a paragraph of `length_high` characters
    (most of the sample's): its row says so beside its low score, bte's row does not."""
    done = boilerbench("run", "--in-process", "--dataset", str(SAMPLE), "--services",
                       "justext,bte", "--output", "out", "--store", "store.sqlite",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (out_dir,) = (tmp_path / "out").iterdir()
    results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    rows = {row["service"]: row for row in results["summary"]["services"]}
    outputs = json.loads((out_dir / "outputs" / "justext.json").read_text(encoding="utf-8"))
    empty = sum(not page["articleBody"].strip() for page in outputs.values())
    assert 0 < empty < len(outputs)
    assert rows["justext"]["empty"] == empty
    assert rows["bte"]["empty"] == 0
    assert f"justext on sample: no text extracted ({empty})" in " ".join(done.stderr.split())
    assert f"no text extracted ({empty})" in (out_dir / "summary.md").read_text(encoding="utf-8")


def test_a_json_test_set_and_an_archive_score_as_their_folder(tmp_path: Path) -> None:
    """`--dataset` takes the test-set formats POST /runs takes: the sample as a folder,
    as a zip of it and as a JSON list of its pages gives one figure three times."""
    import zipfile

    from orchestrator.testsets import open_dataset_dir

    with zipfile.ZipFile(tmp_path / "zipped.zip", "w") as archive:
        for path in sorted(SAMPLE.rglob("*")):
            if path.is_file() and path.parent.name in ("html", "content", "feeds"):
                archive.write(path, f"zipped/{path.relative_to(SAMPLE)}")
    pages = [{"id": page.id, "html": page.html_text(), "gold": page.gold}
             for page in open_dataset_dir(SAMPLE).pages()]
    (tmp_path / "listed.json").write_text(json.dumps(pages), encoding="utf-8")
    done = boilerbench("run", "--in-process", "--services", "bte", "--dataset", str(SAMPLE),
                       "--dataset", "zipped.zip", "--dataset", "listed.json",
                       "--output", "out", "--store", "store.sqlite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (out_dir,) = (tmp_path / "out").iterdir()
    results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    rows = {row["dataset"]: row for row in results["summary"]["services"]}
    f1 = {name: rows[name]["levels"]["word"]["macro"]["f1"]["mean"]
          for name in ("sample", "zipped", "listed")}
    assert rows["listed"]["pages"] == rows["zipped"]["pages"] == rows["sample"]["pages"] > 10
    assert f1["zipped"] == f1["listed"] == f1["sample"] > 0.5


def test_the_api_refuses_a_dataset_name_no_folder_can_have_and_options_for_no_row(
        tmp_path: Path) -> None:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False), config)
    with TestClient(app) as client:
        for name in ("sam\u0000ple", "x" * 5000):
            reply = client.post("/runs", json={"dataset": name, "services": ["bte"]})
            assert reply.status_code == 422, reply.text[:200]
            assert reply.json()["error"] == "invalid_dataset"
        misspelt = client.post("/runs", json={"dataset": str(SAMPLE), "services": ["bte@fast"],
                                              "options": {"bte@fsat": {}}})
    assert misspelt.status_code == 422
    assert misspelt.json()["error"] == "invalid_options"
    assert "bte@fsat" in misspelt.json()["detail"]


def test_the_api_answers_a_body_that_is_no_json_with_400_as_the_services_do(
        tmp_path: Path) -> None:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False), config)
    with TestClient(app) as client:
        headers = {"content-type": "application/json"}
        empty = client.post("/runs", content=b"", headers=headers)
        broken = client.post("/runs", content=b'{"dataset": ', headers=headers)
        wrong = client.post("/runs", json={"dataset": 3})
        no_rows = client.post("/runs", json={"dataset": str(SAMPLE), "services": []})
    assert (no_rows.status_code, no_rows.json()["detail"]) == (422, "`services` names no service")
    assert (empty.status_code, empty.json()["error"]) == (400, "empty_body")
    assert (broken.status_code, broken.json()["error"]) == (400, "malformed_json")
    assert (wrong.status_code, wrong.json()["error"]) == (422, "invalid_request")
