"""The field's figures: the article-extraction benchmark's shingle metric reproduces
the figures upstream publishes for its 15 prediction files, and ROUGE-LSum; prediction
files are read in each layout, as a folder or one file alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.field_metrics import (
    GoldShingles,
    ShingleCounts,
    rouge_lsum_f1,
    shingle_counts,
    shingles,
    summarize_shingles,
)
from orchestrator.predictions import read_predictions
from shared.tokens import tokenize


def _upstream_table(readme: Path) -> dict[str, tuple[float, float, float]]:
    """tool -> (F1, precision, recall) from the table of published/README.md."""
    rows = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| (\S+)[^|]* \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
        if match:
            rows[match[1]] = (float(match[2]), float(match[3]), float(match[4]))
    return rows


@pytest.mark.dataset
def test_published_files_reproduce_upstream_figures(scrapinghub: Path, published: Path
                                                    ) -> None:
    expected = _upstream_table(published / "README.md")
    files = sorted(published.glob("*.json"))
    assert len(expected) == len(files) == 15
    gold = {p.stem: GoldShingles(p.read_text(encoding="utf-8"))
            for p in (scrapinghub / "content").glob("*.txt")}
    for path in files:
        texts = read_predictions(path)
        summary = summarize_shingles([shingle_counts(g, texts.get(page, ""))
                                      for page, g in sorted(gold.items())])
        got = (summary.f1, summary.precision, summary.recall)
        assert all(value is not None for value in got)
        assert [round(v or 0.0, 3) for v in got] == list(expected[path.stem]), path.stem
        assert summary.f1_std is not None
        assert 0 < summary.f1_std < 0.05


def test_short_texts_are_one_shingle_and_case_counts() -> None:
    assert shingles(["a", "b"]) == {("a", "b"): 1}
    assert shingles([]) == {}
    assert sum(shingles(["a", "b", "c", "d", "e"]).values()) == 2
    counts = shingle_counts(GoldShingles("The cat sat"), "the cat sat")
    assert counts.tp == 0
    assert counts.fp == counts.fn == 0.5
    assert not counts.exact
    same = shingle_counts(GoldShingles("One, two; three four five."), "One two three four five")
    assert same.exact
    assert same.tp == 1.0
    assert same.precision == same.recall == 1.0


def test_means_leave_out_pages_with_nothing_to_measure() -> None:
    empty_extract = ShingleCounts(tp=0.0, fp=0.0, fn=1.0, exact=False)  # no precision
    half = ShingleCounts(tp=0.5, fp=0.5, fn=0.0, exact=False)
    summary = summarize_shingles([empty_extract, half], resamples=50)
    assert summary.precision == 0.5  # the empty extract has no precision to average
    assert summary.recall == 0.5  # (0 + 1) / 2
    assert summary.f1 == pytest.approx(0.5)
    assert summary.accuracy == 0.0


@pytest.mark.dataset
def test_rouge_lsum_equals_rouge_score(scrapinghub: Path, published: Path) -> None:
    """The same figure as Google's rouge-score (the reference implementation), on real
    gold texts against extracts that miss, add and reorder lines."""
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")

    class Tokenizer:
        def tokenize(self, text: str) -> list[str]:
            return tokenize(text)

    reference = rouge_scorer.RougeScorer(["rougeLsum"], tokenizer=Tokenizer())
    golds = sorted((scrapinghub / "content").glob("*.txt"))[::45]
    for name in ("readability", "justext", "goose3"):
        texts = read_predictions(published / f"{name}.json")
        for path in golds:
            gold, text = path.read_text(encoding="utf-8"), texts[path.stem]
            expected = reference.score(gold, text)["rougeLsum"].fmeasure
            assert rouge_lsum_f1(gold, text) == pytest.approx(expected, abs=1e-12), path.stem
    for path in golds:  # no gold line whole in one extract line
        gold = path.read_text(encoding="utf-8")
        words = gold.split()
        recut = ["\n".join(" ".join(words[i:i + 7]) for i in range(0, len(words), 7)),
                 "\n".join(" ".join(words[::-1][i:i + 40]) for i in range(0, len(words), 40)),
                 "\n".join(" ".join(line.split()[:len(line.split()) // 2]
                                     + line.split()[len(line.split()) // 2 + 1:])
                           for line in gold.splitlines())]  # each line's middle word gone
        for text in recut:
            expected = reference.score(gold, text)["rougeLsum"].fmeasure
            assert rouge_lsum_f1(gold, text) == pytest.approx(expected, abs=1e-12), path.stem


def test_rouge_lsum_scores_lines_in_any_script() -> None:
    gold = "第一行的文字\n这是第二行"
    assert rouge_lsum_f1(gold, gold) == pytest.approx(1.0)
    partial = rouge_lsum_f1(gold, "这是第二行\n菜单 首页")
    assert partial is not None
    assert 0 < partial < 1
    assert rouge_lsum_f1("Alpha beta gamma.\nDelta epsilon.", "navigation only") == 0.0
    assert rouge_lsum_f1("", "") == 1.0


def test_prediction_files_in_each_layout_and_one_file_alone(tmp_path: Path) -> None:
    from orchestrator.predictions import PredictionsError, prediction_rows

    layouts = {
        "benchmark": {"p1": {"articleBody": "One."}, "p2": {"articleBody": None}},
        "versioned": {"version": 1, "output": {"p1": {"articleBody": "One."}, "p2": {}}},
        "plain": {"p1": "One.", "p2": None},
    }
    for name, data in layouts.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
        assert read_predictions(tmp_path / f"{name}.json") == {"p1": "One.", "p2": ""}, name
    assert set(prediction_rows(tmp_path)) == set(layouts)
    assert prediction_rows(tmp_path / "plain.json") == {
        "plain": str((tmp_path / "plain.json").resolve())}
    assert set(prediction_rows(tmp_path / "plain.json", live=["plain"])) == {"plain.json"}
    (tmp_path / "odd.json").write_text('{"p1": 1}', encoding="utf-8")
    with pytest.raises(PredictionsError, match="page 'p1': expected"):
        read_predictions(tmp_path / "odd.json")
    with pytest.raises(PredictionsError, match="no such prediction file or folder"):
        prediction_rows(tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PredictionsError, match=re.escape("no *.json prediction files")):
        prediction_rows(tmp_path / "empty")


def test_a_prediction_folder_reads_any_case_of_json_and_no_hidden_file(tmp_path: Path
                                                                        ) -> None:
    from orchestrator.predictions import prediction_rows

    (tmp_path / "tool.JSON").write_text('{"p1": "One."}', encoding="utf-8")
    (tmp_path / "other.json").write_text('{"p1": "Two."}', encoding="utf-8")
    (tmp_path / "._other.json").write_bytes(b"\x00\x05\x16\x07 AppleDouble")  # macOS copy
    (tmp_path / "folder.json").mkdir()
    assert set(prediction_rows(tmp_path)) == {"tool", "other"}


def test_a_prediction_file_that_names_no_page_of_the_run_is_a_warning(tmp_path: Path) -> None:
    from orchestrator.runner import RunSpec, create_run
    from orchestrator.store import Store
    from orchestrator.testsets import LabelledPage, in_memory

    (tmp_path / "other.json").write_text(json.dumps({"q1": "One."}), encoding="utf-8")
    (tmp_path / "ours.json").write_text(json.dumps({"p1": "One."}), encoding="utf-8")
    pages = [LabelledPage("set", "p1", "<p>One.</p>", "One.")]
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], predictions={"other": str(tmp_path / "other.json"),
                                             "ours": str(tmp_path / "ours.json")})
    run_id = create_run(store, spec, memory=[in_memory("set", pages)])
    warnings = store.details(run_id)["warnings"]
    store.close()
    assert [w.split(":")[0] for w in warnings] == ["other"]
    assert "names none of the run's pages" in warnings[0]


def test_prediction_files_in_other_encodings_or_shapes_say_why(tmp_path: Path) -> None:
    from orchestrator.predictions import PredictionsError

    texts = {"p1": {"articleBody": "One."}}
    for name, data in (("bom", b"\xef\xbb\xbf" + json.dumps(texts).encode()),
                       ("utf16", json.dumps(texts).encode("utf-16"))):
        (tmp_path / f"{name}.json").write_bytes(data)  # as gold files and JSON test sets
        assert read_predictions(tmp_path / f"{name}.json") == {"p1": "One."}, name
    refused = {
        # another tool's layout: every page would score 0 without a word
        "layout": ('{"p1": {"text": "One."}, "p2": {"content": "Two."}}',
                   r'no page has an "articleBody" \(the entries have content, text\)'),
        # what tools that read bytes with surrogateescape write: the store cannot hold it
        "surrogate": ('{"p1": "caf\\udce9"}', r"page 'p1': the text holds a lone surrogate"),
        "deep": ("[" * 100_000 + "]" * 100_000, "not a readable JSON file"),
        "number": ('{"p1": ' + "9" * 5000 + "}", "not a readable JSON file"),
    }
    for name, (text, message) in refused.items():
        (tmp_path / f"{name}.json").write_text(text, encoding="utf-8")
        with pytest.raises(PredictionsError, match=message):
            read_predictions(tmp_path / f"{name}.json")


def _scored_rows(folder: Path, predictions: dict[str, dict[str, str]]
                 ) -> dict[tuple[str, str], tuple[str, str | None]]:
    """(row, page) -> (status, error) of a run scoring prediction files on two pages,
    one with a feed."""
    import asyncio

    from orchestrator.runner import RunSpec, create_run, execute_run
    from orchestrator.store import Store
    from orchestrator.testsets import LabelledPage, in_memory

    folder.mkdir(exist_ok=True)
    paths = {}
    for row, texts in predictions.items():
        paths[row] = str(folder / f"{row}.json")
        Path(paths[row]).write_text(json.dumps(texts), encoding="utf-8")
    pages = [LabelledPage("set", "fed", "<p>One.</p>", "One.", feed="<rss/>"),
             LabelledPage("set", "plain", "<p>Two.</p>", "Two.")]
    store = Store(folder / "store.sqlite")
    spec = RunSpec(datasets=[], predictions=paths, scoring_processes=1,
                   output_folder=str(folder / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", pages)])
    try:
        results = asyncio.run(execute_run(store, run_id))
    finally:
        store.close()
    return {(r.service, r.page_id): (r.status, r.error) for r in results}


def test_a_prediction_file_named_like_a_service_scores_every_text_it_has(tmp_path: Path
                                                                          ) -> None:
    """rss.json is a file, not the rss service: a page without a feed is scored from
    its text; a page the file lacks is skipped where rss would skip it, as in the
    outputs/ of the run that wrote the file."""
    rows = _scored_rows(tmp_path / "tool", {"rss": {"fed": "One.", "plain": "Two."}})
    assert rows == {("rss", "fed"): ("ok", None), ("rss", "plain"): ("ok", None)}
    rows = _scored_rows(tmp_path / "outputs", {"rss": {"fed": "One."}})
    assert rows[("rss", "plain")] == ("skipped", "the page has no feed")


def test_a_prediction_file_gone_when_its_run_resumes_fails_the_run(tmp_path: Path) -> None:
    import asyncio

    from orchestrator.predictions import PredictionsError
    from orchestrator.runner import RunSpec, create_run, execute_run
    from orchestrator.store import Store
    from orchestrator.testsets import LabelledPage, in_memory

    path = tmp_path / "tool.json"
    path.write_text(json.dumps({"p1": "One."}), encoding="utf-8")
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], predictions={"tool": str(path)}, scoring_processes=1,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[
        in_memory("set", [LabelledPage("set", "p1", "<p>One.</p>", "One.")])])
    path.unlink()
    with pytest.raises(PredictionsError, match=r"tool\.json: not a readable JSON file"):
        asyncio.run(execute_run(store, run_id))
    assert store.status(run_id) == "failed"  # not "running" for ever
    store.close()
