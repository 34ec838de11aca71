"""Reports: the four output files, their content, and report.html rendered offline
by headless Chromium with its plots visible."""

from __future__ import annotations

import csv
import json
import re
import shutil
import struct
import subprocess
import zlib
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from orchestrator.models import PageResult, RunInfo
from orchestrator.pagediff import page_diff, segments_html
from orchestrator.predictions import read_predictions
from orchestrator.report import (
    PALETTE,
    dataset_bars_svg,
    detail_rows,
    page_columns,
    precision_recall_svg,
    render_html,
    render_table,
    table_rows,
    write_outputs,
)
from orchestrator.scoring import prepare_page, score_empty, score_extraction
from orchestrator.statistics import MetricSummary, summarize
from shared.contract import Block

SERVICES = ("careful", "greedy", "shy", "broken")
DATASETS = ("alpha", "beta")
PAGES = 8


def make_results() -> list[PageResult]:
    """Real scores of hand-made pages: 'careful' keeps the article, 'greedy' keeps
    everything, 'shy' keeps a third, 'broken' fails or skips."""
    results = []
    for dataset in DATASETS:
        for i in range(PAGES):
            nav = [f"nav{j}" for j in range(5 + i)]
            article = [f"word{(7 * j + i) % 53}" for j in range(40 + 3 * i)]
            html = (f"<html><body><div>{' '.join(nav)}</div><p>{' '.join(article)}</p>"
                    "<div>footer links</div></body></html>")
            ref = prepare_page(html, " ".join(article))
            extracts = {
                "careful": " ".join(article[: len(article) - i]),
                "greedy": " ".join(nav + article + ["footer", "links"]),
                "shy": " ".join(article[: len(article) // 3 + i]),
            }
            blocks = [Block(text=" ".join(nav), is_content=i % 3 == 0),
                      Block(text=" ".join(article), is_content=True),
                      Block(text="footer links", is_content=False)]
            base = {"run_id": "run-1", "dataset": dataset, "page_id": f"page-{i}"}
            for service, text in extracts.items():
                results.append(PageResult(
                    **base, service=service, status="ok", elapsed_ms=float(10 + i), text=text,
                    scores=score_extraction(ref, text, blocks if service == "careful" else None)))
            if i % 2:
                results.append(PageResult(**base, service="broken", status="error",
                                          error="ConnectError: refused", scores=score_empty(ref)))
            else:
                results.append(PageResult(**base, service="broken", status="skipped",
                                          error="no feed"))
    return results


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], list[PageResult]]:
    results = make_results()
    run = RunInfo(id="run-1", datasets=list(DATASETS), services=list(SERVICES),
                  status="finished", counts={"total": len(results)},
                  options={"services": {"shy": {"min_share": 0.3, "note": "<b>"}}})
    return write_outputs(tmp_path_factory.mktemp("report"), run, results), results


def test_results_json(outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    paths, results = outputs
    document = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert document["run"]["id"] == "run-1"
    assert len(document["pages"]) == len(results)
    assert all("text" not in row for row in document["pages"])
    assert document["pages"][0]["text_chars"] == len(results[0].text)
    rows = {(r["service"], r["dataset"]): r for r in document["summary"]["services"]}
    # 4 services x (2 datasets + pooled)
    assert len(rows) == 12
    careful = rows[("careful", "alpha")]
    expected = np.mean([r.scores.word.f1 for r in results if r.scores and
                        r.service == "careful" and r.dataset == "alpha"])
    assert careful["levels"]["word"]["macro"]["f1"]["mean"] == pytest.approx(expected)
    assert "block" in careful["levels"]
    assert "block" not in rows[("greedy", "alpha")]["levels"]
    broken = rows[("broken", "(all)")]
    assert (broken["errors"], broken["skipped"], broken["levels"]["word"]["pages"]) == (8, 8, 8)
    assert document["summary"]["pairwise"]


def test_pages_csv(outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    paths, results = outputs
    with paths["csv"].open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == page_columns()
        rows = list(reader)
    assert len(rows) == len(results)
    for row, result in zip(rows, results, strict=True):
        assert (row["service"], row["page_id"], row["status"]) == (
            result.service, result.page_id, result.status)
        if result.scores is None:
            assert row["word_f1"] == ""
        else:
            assert int(row["word_tp"]) == result.scores.word.tp
            assert float(row["word_f1"]) == pytest.approx(result.scores.word.f1, abs=1e-6)
            assert float(row["bag_recall"]) == pytest.approx(result.scores.word_bag.recall,
                                                             abs=1e-6)
    assert {row["error"] for row in rows if row["status"] == "error"} == {"ConnectError: refused"}


def test_summary_markdown_and_terminal_table(
        outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    paths, results = outputs
    text = paths["markdown"].read_text(encoding="utf-8")
    table_lines = [line for line in text.splitlines() if line.startswith("| careful |")]
    assert len(table_lines) == 3  # alpha, beta, pooled
    assert "word F1 (95% CI)" in text
    assert "Wilcoxon" in text
    # A row's options are part of what its name means; rows without options list none.
    assert 'Options of `shy`: `{"min_share": 0.3, "note": "<b>"}`.' in text
    assert text.count("Options of") == 1
    summary = summarize(results)
    console = Console(record=True, width=200)
    table = render_table(summary)
    console.print(table)
    rendered = console.export_text()
    assert table.row_count == len(summary.services)
    assert len(table.columns) == 17
    assert table.caption is None
    for service in SERVICES:
        assert service in rendered


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_narrow_terminal_gets_fewer_columns_not_ellipses(
        outputs: tuple[dict[str, Path], list[PageResult]], width: int) -> None:
    """rich squeezes a table wider than the terminal until its cells are ellipses; the
    terminal table instead leaves out the least used columns and says so."""
    summary = summarize(outputs[1])
    table = render_table(summary, width=width)
    console = Console(record=True, width=width)
    console.print(table)
    rendered = console.export_text()
    names = [str(column.header) for column in table.columns]
    assert names[:3] == ["#", "row", "dataset"]
    assert "word F1 (95% CI)" in names
    assert "flags" in names
    assert 6 <= len(names) < 17
    assert "…" not in rendered
    assert max(len(line) for line in rendered.splitlines()) <= width
    assert f"{17 - len(names)} more columns in summary.md" in rendered
    for service in SERVICES:
        assert service in rendered


def test_report_html_is_self_contained(outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    html = outputs[0]["html"].read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert ("Options of <code>shy</code>: <code>{&quot;min_share&quot;: 0.3, "
            "&quot;note&quot;: &quot;&lt;b&gt;&quot;}</code>") in html
    for pattern in (r"<script", r"<link", r"@import", r"url\(", r"https?://", r"\bsrc\s*="):
        assert not re.search(pattern, html, re.IGNORECASE), pattern
    for plot in ("plot-f1-distribution", "plot-precision-recall", "plot-dataset-bars"):
        assert re.search(rf'<svg class="plot" id="{plot}"', html)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium binary on PATH (Debian package 'chromium')")


def _run_chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[bytes]:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
               *args]
    return subprocess.run(command, capture_output=True, timeout=120, check=True)


def _png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG (all five row filters) into a height x width x
    channels array: enough to look at a Chromium screenshot without Pillow."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            channels = {2: 3, 6: 4}[colour_type]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, -1)
    stride = width * channels
    out = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:
            row = (line + prior) & 0xFF
        elif kind == 1:
            row = line.copy()
            for c in range(channels):  # cumulative sum per channel
                row[c::channels] = np.cumsum(line[c::channels]) & 0xFF
        else:
            row = line.copy()
            for x in range(stride):
                left = row[x - channels] if x >= channels else 0
                up = prior[x]
                if kind == 3:
                    row[x] = (line[x] + ((left + up) >> 1)) & 0xFF
                else:
                    up_left = prior[x - channels] if x >= channels else 0
                    p = left + up - up_left
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                    pred = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                    row[x] = (line[x] + pred) & 0xFF
        out[y] = row
        prior = row
    return out.reshape(height, width, channels)


def test_report_renders_in_headless_chromium(
        outputs: tuple[dict[str, Path], list[PageResult]], tmp_path: Path) -> None:
    report = outputs[0]["html"]
    dom = _run_chromium(["--dump-dom", report.as_uri()], tmp_path / "profile-dom")
    rendered = dom.stdout.decode("utf-8")
    for plot in ("plot-f1-distribution", "plot-precision-recall", "plot-dataset-bars"):
        assert f'id="{plot}"' in rendered
    scored = sum(1 for r in outputs[1] if r.scores is not None)
    # every scored page is a dot in the distribution and in the scatter plot
    assert rendered.count('class="point"') == 2 * scored
    assert len(re.findall(r'class="bar( near-zero)?"', rendered)) == len(SERVICES) * len(DATASETS)
    assert rendered.count('class="box"') == len(SERVICES) * len(DATASETS)

    shot = tmp_path / "report.png"
    _run_chromium([f"--screenshot={shot}", "--window-size=1280,2400", report.as_uri()],
                  tmp_path / "profile-shot")
    pixels = _png_pixels(shot.read_bytes())[:, :, :3]
    assert pixels.shape[:2] == (2400, 1280)
    colours = {tuple(int(v) for v in px) for px in pixels.reshape(-1, 3)[::7]}
    assert len(colours) > 50  # text, table, plots: far from a blank page
    # the bars of the first three services are drawn in their palette colours
    for hex_colour in PALETTE[1:4]:
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        matches = np.all(pixels == np.array(rgb, dtype=np.uint8), axis=2).sum()
        assert matches > 500, (hex_colour, int(matches))


def test_page_diff_counts_are_the_word_fn_and_fp() -> None:
    diff = page_diff("東京は晴れです。明日も", "東京は晴れ")
    assert (diff.missed_words, diff.extra_words) == (5, 0)  # a strict prefix: nothing extra
    assert [s.kind for s in diff.gold] == ["same", "missed"]
    diff = page_diff("Hello, world! The cat sat.", "hello world the dog sat")
    assert (diff.missed_words, diff.extra_words) == (1, 1)  # case and punctuation are no words
    assert segments_html(diff.gold) == 'Hello, world! The <del class="missed">cat</del> sat.'


@pytest.mark.dataset
def test_page_diff_agrees_with_scoring_on_real_pages(scrapinghub: Path, published: Path
                                                     ) -> None:
    """On every scrapinghub page (Japanese and Russian ones among them), the diff's
    missed and extra words are the word FN and FP, and its segments give each text back."""
    texts = read_predictions(published / "html-text.json")
    for path in sorted((scrapinghub / "content").glob("*.txt")):
        gold, text = path.read_text(encoding="utf-8"), texts[path.stem]
        text = " ".join(text.split()[::3])  # keep a third: misses, and the rest in order
        html = (scrapinghub / "html" / f"{path.stem}.html").read_text(encoding="utf-8",
                                                                     errors="replace")
        word = score_extraction(prepare_page(html, gold), text, None).word
        diff = page_diff(gold, text)
        assert (diff.missed_words, diff.extra_words) == (word.fn, word.fp), path.stem
        assert "".join(s.text for s in diff.gold) == " ".join(gold.split()), path.stem


def test_a_block_mean_over_fewer_pages_says_over_how_many() -> None:
    """Block figures come from a service's own blocks, which an error has none of: a
    row that failed on most pages must not show a bare block F1 of its one good page."""
    html = "<html><body><div>menu home</div><p>alpha beta gamma delta</p></body></html>"
    ref = prepare_page(html, "alpha beta gamma delta")
    blocks = [Block(text="menu home", is_content=False),
              Block(text="alpha beta gamma delta", is_content=True)]
    results = [PageResult(run_id="r", dataset="d", page_id="good", service="flaky",
                          status="ok", text="alpha beta gamma delta",
                          scores=score_extraction(ref, "alpha beta gamma delta", blocks))]
    results += [PageResult(run_id="r", dataset="d", page_id=f"bad{i}", service="flaky",
                           status="error", error="ConnectError: refused",
                           scores=score_empty(ref)) for i in range(4)]
    rows = detail_rows(summarize(results))[1]
    assert rows[0][2] == "1.000 (1 of 5 pages)"
    assert detail_rows(summarize(results[:1]))[1][0][2] == "1.000"


def test_a_rouge_mean_over_fewer_pages_says_over_how_many_in_every_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ROUGE-LSum is not computed on a page too long for it: the printed, markdown and
    HTML tables say over how many of the row's scored pages the mean is, as results.json
    counts them, and a row that has it on every page shows the bare figure."""
    monkeypatch.setattr("orchestrator.field_metrics.ROUGE_MAX_CELLS", 100)
    short, long = "alpha beta gamma delta", " ".join(f"word{i}" for i in range(20))
    results = []
    for i, gold in enumerate([short, short, long]):
        ref = prepare_page(f"<html><body><p>{gold}</p></body></html>", gold)
        for service in ("wordy", "terse"):
            text = gold if service == "wordy" or gold == short else "word1 word2"
            results.append(PageResult(run_id="r", dataset="d", page_id=f"p{i}",
                                      service=service, status="ok", text=text,
                                      scores=score_extraction(ref, text, None)))
    summary = summarize(results)
    wordy, terse = summary.get("wordy", "d").rouge_lsum, summary.get("terse", "d").rouge_lsum
    assert wordy is not None
    assert wordy.n == 2  # 20 x 20 tokens: past the limit
    assert terse is not None
    assert terse.n == 3
    header, rows = table_rows(summary)
    cells = {row[1]: row[header.index("ROUGE-LSum")] for row in rows}
    assert cells == {"wordy": "1.000 (2 of 3 pages)", "terse": cells["terse"]}
    assert "of" not in cells["terse"]
    run = RunInfo(id="r", datasets=["d"], services=["wordy", "terse"])
    paths = write_outputs(tmp_path, run, results)
    document = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert {row["service"]: row["rouge_lsum"]["n"] for row in document["summary"]["services"]
            } == {"wordy": 2, "terse": 3}
    assert "| 1.000 (2 of 3 pages) |" in paths["markdown"].read_text(encoding="utf-8")
    assert '<td class=num>1.000 (2 of 3 pages)</td>' in paths["html"].read_text(
        encoding="utf-8")
    console = Console(width=400, record=True)
    console.print(render_table(summary, width=400))
    assert "1.000 (2 of 3 pages)" in console.export_text()


# Text a test set, a prediction file's name or a service's reply can carry into a report.
HOSTILE_ROWS = ("=cmd|' -C calc'!A0", '"><img src=x onerror=alert(1)>', "[blink][link=evil]x",
                "\x1b[2Jclear", "a|b\\", "new\nline", "[x](javascript:alert(1))",
                r"\input{x}", "]]>&<", "*em* _u_ ~~s~~ **b**")
HOSTILE_PAGE = "<script>alert(2)</script>"


def _hostile_outputs(tmp_path: Path) -> tuple[dict[str, Path], list[PageResult]]:
    gold = "gold </details></div><script>alert(3)</script> words"
    ref = prepare_page(f"<html><body><p>{gold}</p></body></html>", gold)
    results = [PageResult(run_id="r", dataset="set", page_id=f"{HOSTILE_PAGE}{i}",
                          service=row, status="ok", text=f"</div><svg onload=alert(4)> {gold}",
                          scores=score_extraction(ref, f"{row} {gold}", None))
               for row in HOSTILE_ROWS for i in range(3)]
    results.append(PageResult(run_id="r", dataset="set", page_id="\x1b]0;title\x07",
                              service=HOSTILE_ROWS[0], status="error",
                              error="HTTPStatusError: 500 </td><img src=x onerror=alert(5)>",
                              scores=score_empty(ref)))
    run = RunInfo(id="r", datasets=["set"], services=list(HOSTILE_ROWS), status="finished",
                  options={"services": {HOSTILE_ROWS[1]: {"x": "`<img src=x onerror=alert(6)>`"}},
                           "warnings": ["html/<b>x</b>\n# heading.html has no content"]})
    return write_outputs(tmp_path, run, results, gold=lambda dataset, page_id: gold), results


def test_hostile_labels_stay_text_in_every_report(tmp_path: Path) -> None:
    """Labels, ids, reasons and texts come from others: no report turns them into
    markup, formulas, LaTeX commands or terminal control, and every file still parses."""
    from lxml import etree
    from lxml import html as lxml_html
    from markdown_it import MarkdownIt

    paths, results = _hostile_outputs(tmp_path)
    page = lxml_html.document_fromstring(paths["html"].read_text(encoding="utf-8"))
    ours = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p",
            "code", "ul", "li", "i", "b", "table", "thead", "tbody", "tr", "th", "td", "div",
            "a", "details", "summary", "del", "ins", "svg", "rect", "line", "circle", "text"}
    elements = [el for el in page.iter() if isinstance(el.tag, str)]
    assert {el.tag for el in elements} <= ours
    assert not [name for el in elements for name in el.attrib if name.startswith("on")]
    assert all(el.get("href", "#").startswith("#") for el in elements)
    assert len(page.findall(".//style")) == 1
    # Plots as files are XML: a control character in a label would make them unreadable.
    for svg in (tmp_path / "plots").glob("*.svg"):
        assert not [el for el in etree.parse(svg).iter() if "script" in str(el.tag)]
    # CSV: no text cell a spreadsheet would run as a formula, in any table.
    for table in [tmp_path / "pages.csv", *(tmp_path / "tables").glob("*.csv")]:
        with table.open(newline="", encoding="utf-8") as handle:
            cells = [cell for row in csv.reader(handle) for cell in row]
        assert not [c for c in cells if len(c) > 1 and c[0] in "=+-@\t\r"], table
    assert any(c.startswith("'=cmd") for c in (tmp_path / "tables" / "results.csv").read_text(
        encoding="utf-8").split(","))
    # summary.md: rendered, nothing is HTML or a link, and each table row keeps its columns.
    summary = paths["markdown"].read_text(encoding="utf-8")
    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(summary)
    assert not re.search(r"<(img|script|a|em|strong|s)\b", rendered), rendered
    assert rendered.count("<h1>") == 1  # the run's title, not the warning's `# heading`
    assert "\x1b" not in summary
    for table in re.findall(r"<table>.*?</table>", rendered, re.DOTALL):
        widths = {row.count("<td") + row.count("<th") for row in re.findall(
            r"<tr>.*?</tr>", table, re.DOTALL)}
        assert len(widths) == 1, table
    assert 'onerror=alert(6)>`' in summary  # inside a code span whose fence the ` cannot end
    # LaTeX: every row has the header's cells, and no row starts with `[` (after `\\`,
    # an optional argument) or holds a bare command, brace or control character.
    for tex in (tmp_path / "tables").glob("*.tex"):
        lines = tex.read_text(encoding="utf-8").splitlines()
        body = lines[lines.index(r"\toprule") + 1:lines.index(r"\bottomrule")]
        rows = [line for line in body if line != r"\midrule"]
        assert all(line.endswith(r" \\") for line in rows), tex
        counts = {len(re.split(r"(?<!\\) & ", line)) for line in rows}
        assert len(counts) == 1, (tex, counts)
        for line in rows:
            assert not line.lstrip().startswith("[")
            assert r"\input" not in line
            assert "\x1b" not in line
    # The terminal table: rich markup and ESC sequences are shown, not obeyed.
    console = Console(record=True, width=300, force_terminal=True)
    console.print(render_table(summarize(results), width=300))
    shown = console.export_text(styles=False)
    assert "[blink][link=evil]x" in shown
    assert "\\x1b[2Jclear" in shown
    assert "\x1b[2J" not in console.export_text(styles=True)


def test_test_sets_whose_names_make_one_file_name_get_a_table_each(tmp_path: Path) -> None:
    """`a-b` and `a.b` both become `a_b` in a file name: each set keeps its own
    significance table."""
    results = [r.model_copy(update={"dataset": {"alpha": "a-b", "beta": "a.b"}[r.dataset]})
               for r in make_results()]
    run = RunInfo(id="run-2", datasets=["a-b", "a.b"], services=list(SERVICES),
                  status="finished", counts={"total": len(results)})
    paths = write_outputs(tmp_path, run, results)
    captions = [re.search(r"\\caption\{Significance on (\S+) ",
                          paths[name].read_text(encoding="utf-8"))
                for name in ("significance-a_b.tex", "significance-a_b-2.tex")]
    assert [c.group(1) if c else None for c in captions] == ["a-b", "a.b"]
    assert paths["significance-a_b-2.csv"].read_text(encoding="utf-8").startswith(",1,2,3")


@pytest.fixture(scope="module")
def sample_results() -> list[PageResult]:
    """The built-in sample extracted in-process by three services and scored as a run
    scores it: jusText finds no text on 12 of its 13 short pages
    (orchestrator/sample/README.md), so its per-page F1 is nearly all 0."""
    from orchestrator.testsets import SAMPLE_DIR, open_dataset_dir
    from shared.registry import get_service

    algorithms = {name: get_service(name).algorithm() for name in ("readability", "justext",
                                                                  "bte")}
    results = []
    for page in open_dataset_dir(SAMPLE_DIR).pages():
        html = page.html_text()
        ref = prepare_page(html, page.gold)
        for name, algorithm in algorithms.items():
            extraction = algorithm.extract(html, algorithm.options_model(), None)
            text = extraction.content_text()
            results.append(PageResult(run_id="sample-run", dataset="sample", page_id=page.id,
                                      service=name, status="ok", text=text,
                                      scores=score_extraction(ref, text, extraction.blocks)))
    return results


def _sample_run(results: list[PageResult]) -> RunInfo:
    return RunInfo(id="sample-run", datasets=["sample"], services=["readability", "justext",
                                                                   "bte"], status="finished")


def test_every_table_names_the_figure_it_ranks_by(sample_results: list[PageResult],
                                                  tmp_path: Path) -> None:
    """`--rank-by shingle_f1` orders the rows by the shingle F1, and the word F1 beside
    the rank then need not fall: every table that shows the rank says which figure it
    is, and that figure's column falls with the rank."""
    from orchestrator.statistics import ranked

    paths = write_outputs(tmp_path, _sample_run(sample_results), sample_results,
                          rank_by="shingle_f1")
    header, rows = table_rows(ranked(summarize(sample_results), "shingle_f1"))
    shingle = [float(cells[header.index("shingle F1 ± sd")].split()[0]) for cells in rows]
    assert [cells[0] for cells in rows] == ["1", "2", "3"]
    assert shingle == sorted(shingle, reverse=True)
    said = "ranked by shingle F1"
    assert said in paths["markdown"].read_text(encoding="utf-8")
    assert said in paths["html"].read_text(encoding="utf-8")
    assert said in paths["results.tex"].read_text(encoding="utf-8")
    console = Console(record=True, width=300)
    console.print(render_table(ranked(summarize(sample_results), "shingle_f1"), width=300))
    assert said in console.export_text()
    default = write_outputs(tmp_path / "default", _sample_run(sample_results), sample_results)
    assert "ranked by word F1" in default["markdown"].read_text(encoding="utf-8")


def test_an_interval_from_students_t_is_marked_as_one(sample_results: list[PageResult],
                                                       tmp_path: Path) -> None:
    """12 of jusText's 13 sample pages have F1 0; each page twice, 24 of 26: over 2.5% of
    the resamples have no spread, the bootstrap-t has no bounds, and the interval is
    Student's t (bootstrap_cis). Every table shows that interval marked `(t)`, the
    notes say what the mark means, and the bootstrap-t ones stay unmarked."""
    from scipy import stats

    sample_results = [r.model_copy(update={"page_id": f"{r.page_id}{copy}"})
                      for r in sample_results for copy in ("", "-again")]
    summary = summarize(sample_results)
    f1 = {name: [r.scores.word.f1 for r in sample_results if r.service == name and r.scores]
          for name in ("justext", "readability")}
    assert sum(v == 0 for v in f1["justext"]) == 24
    justext = summary.get("justext", "sample").levels["word"].macro["f1"]
    low, high = stats.t.interval(0.95, len(f1["justext"]) - 1, loc=np.mean(f1["justext"]),
                                 scale=stats.sem(f1["justext"]))
    assert (justext.ci_low, justext.ci_high) == pytest.approx((max(0.0, low), min(1.0, high)))
    assert justext.interval == "t"
    assert summary.get("readability", "sample").levels["word"].macro["f1"].interval == \
        "bootstrap-t"
    header, rows = table_rows(summary)
    cells = {row[1]: row[header.index("word F1 (95% CI)")] for row in rows}
    assert cells["justext"].endswith("] (t)")
    assert cells["readability"].endswith("]")
    paths = write_outputs(tmp_path, _sample_run(sample_results), sample_results)
    for name in ("markdown", "html", "results.csv", "results.tex"):
        text = paths[name].read_text(encoding="utf-8").replace("{]}", "]")  # LaTeX's ]
        assert "] (t)" in text, name
    for name in ("markdown", "html"):
        notes = unescape(paths[name].read_text(encoding="utf-8"))
        assert "(t)`: Student's t" in notes.replace("<code>", "`").replace("</code>", "`")
    bars = unescape(paths["dataset_bars.svg"].read_text(encoding="utf-8"))
    assert "bars: 95% interval" not in bars  # the bars are the means
    assert re.search(r"justext on sample: mean [\d.]+, 95% interval \[[\d.]+, [\d.]+\] "
                     r"\(Student's t\)", bars)


def test_report_fits_a_narrow_screen(outputs: tuple[dict[str, Path], list[PageResult]]
                                     ) -> None:
    """On a 400 px phone the page itself does not scroll sideways: wide tables scroll in
    their own box and the plots shrink to the screen."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or pytest.skip("no chromium binary on PATH")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 400, "height": 800},
                                          is_mobile=True)
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.startswith("file:") else route.abort())
            page = context.new_page()
            page.goto(outputs[0]["html"].as_uri())
            layout = page.evaluate("""() => {
                const table = document.getElementById('results-table');
                return {page: document.documentElement.scrollWidth,
                        box: table.parentElement.scrollWidth > table.parentElement.clientWidth,
                        plots: [...document.querySelectorAll('svg.plot')].map(
                            s => s.getBoundingClientRect().right)};
            }""")
        finally:
            browser.close()
    assert layout["page"] <= 400
    assert layout["box"]  # the results table scrolls within its box
    assert max(layout["plots"]) <= 400


def test_names_and_reasons_are_not_aligned_as_figures(
        outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    """Only figures sit flush right: a dataset, a flag or an error reason is text in
    every table (HTML, Markdown, LaTeX)."""
    paths = outputs[0]
    html = paths["html"].read_text(encoding="utf-8")
    first_row = re.search(r'<table id="results-table">.*?<tbody><tr>(.*?)</tr>', html)
    assert first_row
    cells = re.findall(r"<td( class=num)?>", first_row.group(1))
    assert [bool(c) for c in cells[:5]] == [True, False, False, False, True]
    details = html.split('<table id="details-table">')[1].split("</table>")[0]
    assert "<td>error: ConnectError (4)" in details
    assert "|---|---|---:|---:|---|" in paths["markdown"].read_text(encoding="utf-8")
    tex = (paths["html"].parent / "tables" / "details.tex").read_text(encoding="utf-8")
    assert r"\begin{tabular}{llrrl}" in tex


def test_a_cut_error_list_says_so() -> None:
    """The report lists the first errors only: its reader learns that, and where the
    rest are, instead of taking the list for all of them."""
    ref = prepare_page("<html><body><p>alpha beta</p></body></html>", "alpha beta")
    results = [PageResult(run_id="r", dataset="d", page_id=f"p{i}", service="down",
                          status="error", error="ConnectError: refused",
                          scores=score_empty(ref)) for i in range(201)]
    run = RunInfo(id="r", datasets=["d"], services=["down"], status="finished")
    html = render_html(run, summarize(results), results)
    assert "Errors (201)" in html
    assert "The first 200 of 201 errors; pages.csv has them all." in html
    assert "pages.csv has them all" not in render_html(run, summarize(results[:200]),
                                                       results[:200])


def test_plots_say_what_their_marks_are() -> None:
    """A reader of a plot alone learns which dot is a row's mean, and which interval
    each line is (the bootstrap-t, or Student's t where marked, as in the tables)."""
    metric = MetricSummary(n=3, mean=0.5, median=0.5, std=0.1, ci_low=0.3, ci_high=0.7,
                           interval="t")
    scatter = precision_recall_svg([("a", [(0.5, 0.5)], metric, metric)])
    assert "the row's mean" in unescape(scatter)
    bars = unescape(dataset_bars_svg(["d"], ["a"], {("a", "d"): metric}))
    assert "lines: bootstrap-t 95% interval; (t): Student's t" in bars
    assert re.search(r'<text class="t-mark"[^>]*>\(t\)</text>', bars)
    plain = dataset_bars_svg(["d"], ["a"], {("a", "d"): metric.model_copy(
        update={"interval": "bootstrap-t"})})
    assert 't-mark' not in plain


def test_a_mean_of_zero_is_a_visible_mark_the_key_explains(
        outputs: tuple[dict[str, Path], list[PageResult]]) -> None:
    """'broken' fails or skips every page, so its mean word F1 is 0: in the bar plot of
    the SVG file and of the report it is an outlined mark at the axis, not a bar of no
    height that reads as a missing row, and the key says what the mark is."""
    import xml.etree.ElementTree as ET

    paths = outputs[0]
    svg = paths["dataset_bars.svg"].read_text(encoding="utf-8")
    html = paths["html"].read_text(encoding="utf-8")
    plot = re.search(r'<svg class="plot" id="plot-dataset-bars".*?</svg>', html, re.DOTALL)
    assert plot
    for document in (svg, plot.group(0)):
        root = ET.fromstring(document.replace(' xmlns="http://www.w3.org/2000/svg"', ""))
        bars = {rect.findtext("title"): rect for rect in root.iter("rect")
                if "bar" in rect.get("class", "").split()}
        for dataset in DATASETS:
            zero, careful = (next(rect for title, rect in bars.items()
                                  if title and title.startswith(f"{service} on {dataset}: "))
                             for service in ("broken", "careful"))
            assert zero.findtext("title", "").startswith(f"broken on {dataset}: mean 0.000,")
            assert zero.get("class") == "bar near-zero"
            assert float(zero.get("height", 0)) >= 2.5
            assert zero.get("stroke") == "#000"
            assert careful.get("class") == "bar"
            assert careful.get("stroke") is None
        texts = [text.text for text in root.iter("text")]
        assert "mean under 0.01" in texts
    plain = dataset_bars_svg(["d"], ["a"], {("a", "d"): MetricSummary(
        n=2, mean=0.5, median=0.5, std=0.1, ci_low=0.3, ci_high=0.7)})
    assert "near-zero" not in plain
    assert "mean under" not in plain
