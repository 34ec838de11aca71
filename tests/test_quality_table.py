"""benchmarks/quality.py's headline table: a learned service's leave-one-dataset-out row
comes from its model file, and its in-process figures on its training datasets are
marked in-sample."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from orchestrator.models import PageResult
from orchestrator.scoring import prepare_page, score_extraction
from orchestrator.statistics import summarize
from services.fusion.model import default_model
from tests.helpers import write_test_set

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import quality

DATASETS = ["scrapinghub", "chaos"]


def result(service: str, dataset: str, text: str, page_id: str = "p") -> PageResult:
    ref = prepare_page("<p>the gold text here</p>", "the gold text here")
    return PageResult(run_id="t", dataset=dataset, page_id=page_id, service=service,
                      status="ok", elapsed_ms=1.0, text="",
                      scores=score_extraction(ref, text, None))


def test_learned_rows_come_from_the_model_file() -> None:
    lodo, trained = quality.learned_rows(["fusion", "readability"])
    figures = default_model().metadata["leave_one_dataset_out"]["word_f1"]
    assert lodo == {"fusion" + quality.LODO_SUFFIX: figures}
    assert trained == {"fusion": set(default_model().metadata["trained_on"])}


def test_headline_marks_in_sample_cells_and_adds_the_lodo_row() -> None:
    """A cell is in-sample when the row's model was trained on the dataset, as the detail
    table decides it (orchestrator.insample): density's learned threshold is, its fixed
    threshold (no model) is not; the leave-one-dataset-out row never is."""
    services = ("fusion", "readability", "density:threshold=learned", "density:threshold=fixed")
    summary = summarize([result(s, d, "the gold text") for s in services for d in DATASETS])
    lines = quality.headline(summary, DATASETS, {"fusion (leave-one-dataset-out)":
                                                 {"scrapinghub": 0.5, "chaos": 0.7}})
    assert lines[0] == "| service | scrapinghub | chaos | mean |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert rows["fusion"].startswith("| fusion | 0.857* | 0.857* |")
    assert rows["readability"].startswith("| readability | 0.857 | 0.857 |")
    assert rows["density:threshold=learned"].startswith(
        "| density:threshold=learned | 0.857* | 0.857* |")
    assert rows["density:threshold=fixed"].startswith(
        "| density:threshold=fixed | 0.857 | 0.857 |")
    assert rows["fusion (leave-one-dataset-out)"] == \
        "| fusion (leave-one-dataset-out) | 0.500 | 0.700 | 0.600 |"


@pytest.mark.dataset
def test_in_sample_cells_are_matched_by_the_pages_html(
        scrapinghub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The datasets are folders under BOILERBENCH_DATASETS: one named chaos that holds a
    page of our own is not in-sample, one named scrapinghub that holds two of its pages
    beside ours is, on those two."""
    own = {"own": ("<html><body><p>Words of our own.</p></body></html>", "Words of our own.")}
    write_test_set(tmp_path / "chaos", own)
    sample = write_test_set(tmp_path / "scrapinghub", own)
    for html in sorted((scrapinghub / "html").glob("*.html"))[:2]:
        shutil.copy(html, sample / "html")
        shutil.copy(scrapinghub / "content" / f"{html.stem}.txt", sample / "content")
    monkeypatch.setenv("BOILERBENCH_DATASETS", str(tmp_path))
    services = ("fusion", "readability", "density:threshold=fixed")
    results = [result(s, d, "the gold text", html.stem) for s in services for d in DATASETS
               for html in (tmp_path / d / "html").glob("*.html")]

    counts = quality.in_sample_counts(results, DATASETS)
    assert {key: n for key, n in counts.items() if n} == {("fusion", "scrapinghub"): 2}
    summary = summarize(results)
    text = quality.markdown(summary, {}, "quality.py", 0.0, DATASETS, {}, None, counts)
    assert "| fusion (in-sample on 2 of 3 pages) | scrapinghub | 3 |" in text
    assert "| fusion | chaos | 1 |" in text
    assert "| fusion | 0.857* | 0.857 |" in text
