"""A run's outputs: results.json, pages.csv, summary.md, one offline report.html, and
the tables and plots as files a paper can take (tables/*.csv, tables/*.tex, plots/*.svg).

Tables rank the rows of each dataset best first (statistics.ranked), flag models
scored on their own training pages as in-sample and prediction files as files,
print p-values below 1e-4 as `< 1e-4`, and give the pairwise tests as a compact
matrix as well as in full. The report's per-page view lists each row's pages
worst first, and shows the worst pages' gold and extract side by side with the
missed and extra words marked (orchestrator.pagediff); the dots of the plots
link to their page.

The HTML report is a single file with its CSS inline and its plots drawn here as
inline SVG (no script, no font, no CDN), so it opens anywhere, offline, and
survives being mailed or archived beside the figures.
"""

from __future__ import annotations

import csv
import json
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from orchestrator.models import METRICS, RANK_KEYS, Counts, PageResult, RunInfo
from orchestrator.pagediff import page_diff, segments_html
from orchestrator.statistics import (
    ALL_DATASETS,
    LevelSummary,
    MetricSummary,
    PairwiseTest,
    ServiceSummary,
    Summary,
    ranked,
    summarize,
)

GoldLookup = Callable[[str, str], str | None]
"""(dataset, page id) -> the page's gold text, for the per-page view."""
DETAIL_PAGES = 10
"""Pages per row shown with their gold and extract side by side (the worst ones)."""
SIGNIFICANCE = 0.05
ERROR_ROWS = 200
"""Errors listed in report.html (pages.csv has every one)."""

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
_LEVEL_PREFIX = {"word": "word", "word_bag": "bag", "block": "block"}
_COUNT_FIELDS = ("tp", "fp", "fn", "tn")


# ---------------------------------------------------------------- per-page rows

def page_columns() -> list[str]:
    """Column names of pages.csv (and keys of the page rows of results.json)."""
    columns = ["run_id", "dataset", "page_id", "service", "status", "error", "elapsed_ms",
               "text_chars"]
    for prefix in _LEVEL_PREFIX.values():
        columns += [f"{prefix}_{name}" for name in (*_COUNT_FIELDS, *METRICS)]
    return columns


def page_row(result: PageResult) -> dict[str, Any]:
    """One page and service as a flat record, without the extracted text."""
    row: dict[str, Any] = {
        "run_id": result.run_id, "dataset": result.dataset, "page_id": result.page_id,
        "service": result.service, "status": result.status, "error": result.error,
        "elapsed_ms": result.elapsed_ms, "text_chars": len(result.text),
    }
    for level, prefix in _LEVEL_PREFIX.items():
        counts: Counts | None = getattr(result.scores, level) if result.scores else None
        for name in _COUNT_FIELDS:
            row[f"{prefix}_{name}"] = getattr(counts, name) if counts else None
        for name in METRICS:
            row[f"{prefix}_{name}"] = round(counts.metric(name), 6) if counts else None
    return row


# Characters that make a spreadsheet program read a cell as a formula (OWASP, "CSV
# Injection"): a cell starting with one is written after a single quote.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "|")


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell no spreadsheet evaluates: text (never a number) that starts like a
    formula gets a leading `'`, which spreadsheets show as text and do not run. A lone
    sign (the significance matrices' `+`, `-`, `=`) is no formula and stays as it is."""
    if isinstance(value, str) and len(value) > 1 and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


# C0 and C1 control characters but tab and newline, and the two non-characters XML
# refuses: none is text a report can show.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def printable(text: str) -> str:
    """The text with its control characters written out (`\\x1b`): an ESC sequence in
    a page id, a file name or a service's reply would otherwise restyle or clear the
    terminal it is printed to, break a LaTeX table, and make an SVG file unreadable."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


# ---------------------------------------------------------------- tables

def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def format_p(value: float | None) -> str:
    """A p-value for a table: four decimals, `< 1e-4` below that."""
    if value is None:
        return "–"
    return "< 1e-4" if value < 1e-4 else f"{value:.4f}"


def _pm(value: float | None, spread: float | None) -> str:
    return "–" if value is None else f"{value:.3f} ± {_fmt(spread)}"


def _mean_ci(metric: MetricSummary | None) -> str:
    """Mean and 95% interval; `(t)` after Student's t interval, which a table's notes
    say is given where the bootstrap-t has no bounds (statistics.bootstrap_cis)."""
    if metric is None or metric.mean is None:
        return "–"
    mark = " (t)" if metric.interval == "t" else ""
    return f"{metric.mean:.3f} [{_fmt(metric.ci_low)}, {_fmt(metric.ci_high)}]{mark}"


STUDENT_T_NOTE = ("Student's t interval, where the bootstrap-t has no bounds (nearly every "
                  "page at one value, from 20 pages up)")


def ranked_by(summary: Summary) -> str:
    """What the `#` column ranks by, for the tables' notes and captions ('' unranked)."""
    return f"ranked by {RANK_KEYS[summary.rank_by]}" if summary.rank_by else ""


def _level(row: ServiceSummary, level: str) -> LevelSummary | None:
    return row.levels.get(level)


def _flags(row: ServiceSummary) -> str:
    flags = []
    if row.source == "file":
        flags.append("file")
    if row.in_sample:
        flags.append("in-sample" if row.in_sample_pages >= row.pages
                     else f"in-sample ({row.in_sample_pages} of {row.pages} pages)")
    if row.in_sample_unknown:
        flags.append("in-sample unknown")
    return ", ".join(flags)


def table_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """The results table as text cells: one row per service (or prediction file) and
    dataset, in the order of the summary with its rank (statistics.ranked)."""
    header = ["#", "row", "dataset", "flags", "pages", "errors", "skipped", "word P",
              "word R", "word F1 (95% CI)", "micro F1", "bag F1", "shingle F1 ± sd",
              "shingle P", "shingle R", "exact", "ROUGE-LSum"]
    rows = []
    for row in summary.services:
        word, bag = _level(row, "word"), _level(row, "word_bag")
        shingle = row.shingle
        rows.append([
            "–" if row.rank is None else str(row.rank), row.service, row.dataset,
            _flags(row), str(row.pages), str(row.errors), str(row.skipped),
            _fmt(word.macro["precision"].mean) if word else "–",
            _fmt(word.macro["recall"].mean) if word else "–",
            _mean_ci(word.macro["f1"]) if word else "–",
            _fmt(word.micro["f1"]) if word and word.pages else "–",
            _fmt(bag.macro["f1"].mean) if bag else "–",
            _pm(shingle.f1, shingle.f1_std) if shingle else "–",
            _fmt(shingle.precision) if shingle else "–",
            _fmt(shingle.recall) if shingle else "–",
            _fmt(shingle.accuracy) if shingle else "–",
            _rouge_lsum(row),
        ])
    return header, rows


def detail_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """What only some rows have: block F1 and time (live services), the reasons of
    their errors and skips, and the pages they answered without text."""
    header = ["row", "dataset", "block F1", "median ms",
              "errors, skips and empty answers by reason"]
    rows = []
    for row in summary.services:
        notes = [f"{reason} ({n})" for reason, n in row.error_reasons.items()]
        if row.empty:
            notes.append(f"no text extracted ({row.empty})")
        reasons = "; ".join(notes)
        rows.append([row.service, row.dataset, _block_f1(row), _fmt(row.elapsed_ms_median, 1),
                     reasons or "–"])
    return header, rows


def _block_f1(row: ServiceSummary) -> str:
    """Block F1 is measured on the service's own blocks, so a page it answered with
    none (an error, a prediction file) has no block figures: the cell says over how
    many of its scored pages the mean is, where that is not all of them."""
    block = _level(row, "block")
    if block is None:
        return "–"
    scored = row.pages - row.skipped - row.unscored
    figure = _fmt(block.macro["f1"].mean)
    return figure if block.pages >= scored else f"{figure} ({block.pages} of {scored} pages)"


def _rouge_lsum(row: ServiceSummary) -> str:
    """ROUGE-LSum is not computed on a page too long for it (field_metrics.ROUGE_MAX_CELLS),
    so its mean can cover fewer pages than the row's other figures: the cell says over
    how many of the scored pages, where that is not all of them (as _block_f1 does)."""
    scored = row.pages - row.skipped - row.unscored
    covered = row.rouge_lsum.n if row.rouge_lsum else 0
    figure = _fmt(row.rouge_lsum.mean) if row.rouge_lsum else "–"
    return figure if covered >= scored else f"{figure} ({covered} of {scored} pages)"


def pairwise_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    header = ["dataset", "A", "B", "pages", "differing", "mean F1 A", "mean F1 B", "p",
              "p (Holm)", "note"]
    rows = [[t.dataset, t.service_a, t.service_b, str(t.n), str(t.n_nonzero),
             _fmt(t.mean_a), _fmt(t.mean_b), format_p(t.p_value), format_p(t.p_holm), t.note]
            for t in summary.pairwise]
    return header, rows


def _verdict(test: PairwiseTest, row_is_a: bool) -> str:
    """One matrix cell: `+` the row is significantly better (Holm p < 0.05), `-`
    worse, `=` no significant difference, `?` not testable."""
    if test.p_holm is None and test.p_value != 1.0:
        return "?"
    if test.p_holm is None or test.p_holm >= SIGNIFICANCE or test.favours is None:
        return "="
    better_a = test.favours == test.service_a
    return "+" if better_a == row_is_a else "-"


def significance_matrices(summary: Summary) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per dataset, the pairwise tests as a square matrix in ranking order:
    (dataset, header, rows), each cell as `_verdict` says."""
    matrices = []
    for dataset in dict.fromkeys(r.dataset for r in summary.services):
        names = [r.service for r in summary.services if r.dataset == dataset]
        tests = {(t.service_a, t.service_b): t for t in summary.pairwise if t.dataset == dataset}
        if not tests:
            continue
        rows = []
        for a in names:
            cells = [a]
            for b in names:
                if a == b:
                    cells.append("")
                elif (a, b) in tests:
                    cells.append(_verdict(tests[(a, b)], True))
                elif (b, a) in tests:
                    cells.append(_verdict(tests[(b, a)], False))
                else:
                    cells.append("?")
            rows.append(cells)
        matrices.append((dataset, ["", *[str(i + 1) for i in range(len(names))]],
                         [[f"{i + 1} {cells[0]}", *cells[1:]] for i, cells in enumerate(rows)]))
    return matrices


# `[` and `]` in braces: a cell starting with `[` right after `\\` would be read as
# the row's optional spacing argument.
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$",
                  "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "[": "{[}", "]": "{]}", ">": r"\textgreater{}",
                  "|": r"\textbar{}"}


def _latex(text: str) -> str:
    """A cell as LaTeX text: special characters escaped, line breaks and control
    characters (a blank line ends a tabular cell with an error) made plain, and accents
    composed (NFC): pdflatex sets `é` but stops at an `e` with a combining accent, as
    file names made on macOS spell it."""
    plain = " ".join(printable(unicodedata.normalize("NFC", text)).split())
    out = "".join(_LATEX_SPECIAL.get(c, c) for c in plain)
    return out.replace("±", r"$\pm$").replace("–", "--").replace("<", r"$<$")


def latex_table(header: list[str], rows: list[list[str]], caption: str, label: str) -> str:
    """A booktabs table (\\usepackage{booktabs}; docs/evaluation.md says what else a
    document that takes it needs)."""
    numeric = numeric_columns(header)
    spec = "".join("r" if i in numeric else "l" for i in range(len(header)))
    lines = [r"\begin{table}", r"\centering", rf"\caption{{{_latex(caption)}}}",
             rf"\label{{{label}}}", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(_latex(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(_latex(c) for c in cells) + r" \\" for cells in rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


# The columns a narrow terminal loses first; the rank, row, dataset, flags, errors and
# word F1 stay (about 75 characters).
_NARROWING = ("shingle R", "shingle P", "exact", "micro F1", "skipped", "ROUGE-LSum",
              "shingle F1 ± sd", "bag F1", "pages", "word P", "word R")


def render_table(summary: Summary, title: str = "Results", width: int | None = None) -> Table:
    """The results table for the terminal (rich). Given the terminal's `width`, the
    columns of _NARROWING are left out, in that order, until the table fits: rich would
    otherwise squeeze every column to an ellipsis. The caption says columns were left out."""
    header, rows = table_rows(summary)
    keep = list(range(len(header)))

    def needed() -> int:  # each column: its widest cell, a space each side, a border
        return 1 + sum(3 + max(len(cells[i]) for cells in [header, *rows]) for i in keep)

    left_out = []
    for name in _NARROWING:
        if width is None or needed() <= width:
            break
        keep.remove(header.index(name))
        left_out.append(name)
    caption = (f"narrowed to the terminal: {len(left_out)} more columns in summary.md"
               if left_out else None)
    ranking = ranked_by(summary)
    table = Table(title=f"{title}, {ranking}" if ranking else title, caption=caption)
    for i in keep:
        table.add_column(header[i], justify="left" if i < 2 else "right", no_wrap=i < 3)
    for cells in rows:
        # Text, not str: a label is never read as rich markup ([link=...], [/]).
        table.add_row(*(Text(printable(cells[i])) for i in keep))
    return table


def _warnings(run: RunInfo) -> list[str]:
    warnings = run.options.get("warnings") or []
    return [str(w) for w in warnings]


def _row_options(run: RunInfo) -> list[tuple[str, str]]:
    """Each row run with options, and those options as JSON: what a row's name, such as
    `trafilatura@plain`, stands for."""
    given = run.options.get("services") or {}
    return [(row, json.dumps(given[row], sort_keys=True, ensure_ascii=False))
            for row in run.services if given.get(row)]


# Enough to keep text literal: no HTML or autolink without `<`, no link without `[`,
# no cell split without `|`, no escape of the cell's closing `|` without `\`, no code
# without a backtick, no emphasis without `*` or a `_` that starts or ends a word (one
# within a word is none, so `walk_sh` stays as it is), no strikethrough without `~`.
_MD_SPECIAL = re.compile(r"[\\`|<\[*~]|(?<![^\W_])_|_(?![^\W_])")


def _md(text: str) -> str:
    """Text for summary.md as it is, on one line: labels, reasons and warnings come from
    test sets, file names and service replies, and must not become HTML, a link or a
    table column of their own where the markdown is shown."""
    return _MD_SPECIAL.sub(lambda found: "\\" + found[0], " ".join(printable(text).split()))


def _md_code(text: str) -> str:
    """A code span that holds any text: its fence is longer than any run of backticks
    inside (CommonMark), so a backtick in the text cannot end it early."""
    text = " ".join(printable(text).split())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_TEXT_COLUMNS = frozenset({"", "row", "dataset", "flags", "A", "B", "note", "service", "page",
                           "reason", "errors, skips and empty answers by reason"})


def numeric_columns(header: list[str]) -> set[int]:
    """The columns set right-aligned in every table: all but those of names and reasons,
    which read as text and would otherwise sit flush right beside the figures."""
    return {i for i, h in enumerate(header) if h not in _TEXT_COLUMNS}


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    numeric = numeric_columns(header)
    return ["| " + " | ".join(header) + " |",
            "|" + "|".join("---:" if i in numeric else "---" for i in range(len(header))) + "|",
            *["| " + " | ".join(_md(c) for c in cells) + " |" for cells in rows]]


def markdown_summary(run: RunInfo, summary: Summary) -> str:
    """summary.md: the ranked results table, details, warnings and the pairwise tests."""
    header, rows = table_rows(summary)
    lines = [f"# Run {_md(run.id)}", "",
             f"Created {run.created.isoformat()}; status {run.status}; "
             f"datasets: {_md(', '.join(run.datasets)) or '–'}; "
             f"rows: {_md(', '.join(run.services)) or '–'}.",
             *[f"Options of {_md_code(row)}: {_md_code(options)}."
               for row, options in _row_options(run)],
             "",
             *([f"`#`: {ranked_by(summary)}, best first per dataset; rows with the same "
                "figure share a rank."] if summary.rank_by else []),
             "Word figures: per-page means (macro) with a bootstrap-t 95% interval (`(t)`: "
             f"{STUDENT_T_NOTE}); micro F1 from "
             "counts summed over pages. Shingle figures: the article-extraction benchmark's "
             "metric (4-token shingles; F1 of the precision and recall means, ± the bootstrap "
             "standard deviation; exact: share of pages whose tokens equal the gold's). "
             "ROUGE-LSum: per-page mean F1, `(n of m pages)` where pages too long for it are "
             "left out. Errors count as empty output; skipped pages are left out, and a row "
             "that skipped pages others scored is not ranked (`–`). Flags: `file` a "
             "prediction file; `in-sample` a model scored on the pages it was trained on "
             "(matched by their HTML bytes), `(n of m pages)` where only some of the row's "
             "pages are; `in-sample unknown` a service whose model file the run has not got "
             "(see the warnings).",
             "", *_md_table(header, rows)]
    detail_header, details = detail_rows(summary)
    lines += ["", "## Details", "", *_md_table(detail_header, details)]
    warnings = _warnings(run)
    if warnings:
        lines += ["", f"## Warnings ({len(warnings)})", "", *[f"- {_md(w)}" for w in warnings]]
    for dataset, matrix_header, matrix in significance_matrices(summary):
        lines += ["", f"## Significance on {_md(dataset)} (Wilcoxon, Holm-corrected, word F1)", "",
                  "`+`: the row is significantly better than the column (p < 0.05), `-` "
                  "worse, `=` no significant difference, `?` not testable.", "",
                  *_md_table(matrix_header, matrix)]
    if summary.pairwise:
        pair_header, pair_rows = pairwise_rows(summary)
        lines += ["", "## Pairwise Wilcoxon signed-rank tests (per-page word F1)", "",
                  *_md_table(pair_header, pair_rows)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- SVG plots

def _colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _jitter(i: int) -> float:
    """Deterministic spread in [-0.5, 0.5) (golden-ratio sequence): same plot every time."""
    return ((i * 0.6180339887498949) % 1.0) - 0.5


def _svg_open(plot_id: str, width: int, height: int, title: str, heading: str,
              centre: float) -> list[str]:
    """A plot's opening: the svg element, its title (for screen readers), a white
    background and the visible bold `heading` centred at x = `centre`."""
    return [f'<svg class="plot" id="{plot_id}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(title)}">',
            f'<title>{escape(title)}</title>',
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="{centre}" y="18" text-anchor="middle" font-size="14" '
            f'font-weight="bold">{heading}</text>']


def _x_axis(x0: float, x1: float, y: float, label: str) -> list[str]:
    """A 0..1 axis from x0 to x1 at height y, ticks every 0.2."""
    parts = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#333"/>']
    for k in range(6):
        v = k / 5
        x = x0 + v * (x1 - x0)
        parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#333"/>')
        parts.append(f'<text x="{x:.1f}" y="{y + 18}" text-anchor="middle" '
                     f'font-size="11">{v:.1f}</text>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + 34}" text-anchor="middle" '
                 f'font-size="12">{escape(label)}</text>')
    return parts


def _y_axis(y0: float, y1: float, x: float, label: str) -> list[str]:
    """A 0..1 axis from y0 (value 0, bottom) to y1 (value 1, top) at x."""
    parts = [f'<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="#333"/>']
    for k in range(6):
        v = k / 5
        y = y0 - v * (y0 - y1)
        parts.append(f'<line x1="{x - 5}" y1="{y:.1f}" x2="{x}" y2="{y:.1f}" stroke="#333"/>')
        parts.append(f'<text x="{x - 8}" y="{y + 4:.1f}" text-anchor="end" '
                     f'font-size="11">{v:.1f}</text>')
    parts.append(f'<text x="{x - 40}" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" '
                 f'font-size="12" transform="rotate(-90 {x - 40} {(y0 + y1) / 2:.1f})">'
                 f'{escape(label)}</text>')
    return parts


def _quantiles(values: Sequence[float]) -> tuple[float, float, float, float, float]:
    ordered = sorted(values)

    def q(p: float) -> float:
        pos = p * (len(ordered) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return ordered[0], q(0.25), q(0.5), q(0.75), ordered[-1]


def _linked(circle: str, link: str | None) -> str:
    return f'<a href="#{escape(link)}">{circle}</a>' if link else circle


def f1_distribution_svg(groups: list[tuple[str, int, list[float]]],
                        links: list[list[str]] | None = None) -> str:
    """Box plot with every page as a dot, one row per service and dataset
    (groups: label, colour index of the service, per-page F1; links: each dot's
    anchor in the per-page view)."""
    row_h, left, right, top = 36, 220, 40, 30
    width = 900
    height = top + row_h * max(1, len(groups)) + 50
    x0, x1 = left, width - right
    parts = _svg_open("plot-f1-distribution", width, height, "Word F1 per page",
                      "Word F1 per page (box: quartiles; dots: pages)", width / 2)
    for i, (name, colour_index, values) in enumerate(groups):
        cy = top + row_h * i + row_h / 2
        colour = _colour(colour_index)
        parts.append(f'<text x="{left - 10}" y="{cy + 4}" text-anchor="end" '
                     f'font-size="12">{escape(name)}</text>')
        if not values:
            continue
        lo, q1, med, q3, hi = _quantiles(values)

        def sx(v: float) -> float:
            return x0 + v * (x1 - x0)

        parts.append(f'<line class="whisker" x1="{sx(lo):.1f}" y1="{cy}" x2="{sx(hi):.1f}" '
                     f'y2="{cy}" stroke="{colour}"/>')
        parts.append(f'<rect class="box" x="{sx(q1):.1f}" y="{cy - 10}" '
                     f'width="{max(1.0, sx(q3) - sx(q1)):.1f}" height="20" fill="{colour}" '
                     f'fill-opacity="0.25" stroke="{colour}"/>')
        parts.append(f'<line class="median" x1="{sx(med):.1f}" y1="{cy - 10}" '
                     f'x2="{sx(med):.1f}" y2="{cy + 10}" stroke="{colour}" stroke-width="3"/>')
        for j, v in enumerate(values):
            link = links[i][j] if links else None
            parts.append(_linked(f'<circle class="point" cx="{sx(v):.1f}" '
                                 f'cy="{cy + _jitter(j) * 14:.1f}" r="2.2" fill="{colour}" '
                                 f'fill-opacity="0.6"/>', link))
    parts += _x_axis(x0, x1, top + row_h * max(1, len(groups)) + 4, "word F1")
    parts.append("</svg>")
    return "\n".join(parts)


def precision_recall_svg(series: list[tuple[str, list[tuple[float, float]], MetricSummary | None,
                                            MetricSummary | None]],
                         links: list[list[str]] | None = None) -> str:
    """Per-page precision against recall, coloured by service; a ringed marker at
    each service's mean."""
    width, height, left, right, top, bottom = 620, 560, 70, 170, 30, 70
    x0, x1, y0, y1 = left, width - right, height - bottom, top
    parts = _svg_open("plot-precision-recall", width, height, "Precision against recall",
                      "Word precision against recall", (x0 + x1) / 2)
    parts += _x_axis(x0, x1, y0, "recall")
    parts += _y_axis(y0, y1, x0, "precision")

    def px(r: float) -> float:
        return x0 + r * (x1 - x0)

    def py(p: float) -> float:
        return y0 - p * (y0 - y1)

    for i, (name, points, mean_p, mean_r) in enumerate(series):
        colour = _colour(i)
        for j, (precision, recall) in enumerate(points):
            parts.append(_linked(f'<circle class="point" cx="{px(recall):.1f}" '
                                 f'cy="{py(precision):.1f}" r="2.5" fill="{colour}" '
                                 f'fill-opacity="0.45"/>', links[i][j] if links else None))
        if mean_p is not None and mean_r is not None and mean_p.mean is not None \
                and mean_r.mean is not None:
            parts.append(f'<circle class="mean" cx="{px(mean_r.mean):.1f}" '
                         f'cy="{py(mean_p.mean):.1f}" r="7" fill="{colour}" stroke="#000" '
                         f'stroke-width="1.5"/>')
        ly = top + 10 + 20 * i
        parts.append(f'<circle cx="{x1 + 20}" cy="{ly}" r="6" fill="{colour}"/>')
        parts.append(f'<text x="{x1 + 32}" y="{ly + 4}" font-size="12">{escape(name)}</text>')
    # The key to the two marker sizes: without it a row's mean reads as one more page.
    ly = top + 10 + 20 * len(series) + 10
    parts.append(f'<circle cx="{x1 + 20}" cy="{ly}" r="2.5" fill="#777"/>')
    parts.append(f'<text x="{x1 + 32}" y="{ly + 4}" font-size="12">a page</text>')
    parts.append(f'<circle cx="{x1 + 20}" cy="{ly + 20}" r="7" fill="#777" stroke="#000" '
                 'stroke-width="1.5"/>')
    parts.append(f'<text x="{x1 + 32}" y="{ly + 24}" font-size="12">the row\'s mean</text>')
    parts.append("</svg>")
    return "\n".join(parts)


NEAR_ZERO_MEAN = 0.01
"""A bar plot's mean below this is drawn as an outlined mark as tall as this mean's bar:
its own bar would be too thin to see, and the row would look missing."""


def dataset_bars_svg(datasets: list[str], services: list[str],
                     means: dict[tuple[str, str], MetricSummary]) -> str:
    """Mean word F1 per dataset, one bar per service, with its 95% interval as a line
    (each bar's title gives both, and says where the interval is Student's t); a mean
    near 0 is an outlined mark at the axis (NEAR_ZERO_MEAN), which the key explains."""
    width, height, left, right, top, bottom = 900, 380, 70, 170, 30, 70
    x0, x1, y0, y1 = left, width - right, height - bottom, top
    parts = _svg_open("plot-dataset-bars", width, height, "Mean word F1 per dataset",
                      "Mean word F1 per dataset (lines: bootstrap-t 95% interval; "
                      "(t): Student's t)", (x0 + x1) / 2)
    parts += _y_axis(y0, y1, x0, "mean word F1")
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/>')
    group_w = (x1 - x0) / max(1, len(datasets))
    bar_w = group_w * 0.8 / max(1, len(services))

    def py(v: float) -> float:
        return y0 - v * (y0 - y1)

    near_zero = False
    for g, dataset in enumerate(datasets):
        gx = x0 + g * group_w + group_w * 0.1
        parts.append(f'<text x="{x0 + (g + 0.5) * group_w:.1f}" y="{y0 + 18}" '
                     f'text-anchor="middle" font-size="12">{escape(dataset)}</text>')
        for s, service in enumerate(services):
            metric = means.get((service, dataset))
            if metric is None or metric.mean is None:
                continue
            bx = gx + s * bar_w
            colour = _colour(s)
            interval = ""
            if metric.ci_low is not None and metric.ci_high is not None:
                interval = (f", 95% interval [{metric.ci_low:.3f}, {metric.ci_high:.3f}]"
                            + (" (Student's t)" if metric.interval == "t" else ""))
            mark = metric.mean < NEAR_ZERO_MEAN
            near_zero |= mark
            top_y = py(max(metric.mean, NEAR_ZERO_MEAN))
            outline = ' stroke="#000" stroke-width="1"' if mark else ""
            parts.append(f'<rect class="bar{" near-zero" if mark else ""}" x="{bx:.1f}" '
                         f'y="{top_y:.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{y0 - top_y:.1f}" fill="{colour}"{outline}><title>'
                         f'{escape(service)} on {escape(dataset)}: mean {metric.mean:.3f}'
                         f'{escape(interval)}</title></rect>')
            if metric.ci_low is not None and metric.ci_high is not None:
                cx = bx + bar_w * 0.45
                parts.append(f'<line class="ci" x1="{cx:.1f}" y1="{py(metric.ci_low):.1f}" '
                             f'x2="{cx:.1f}" y2="{py(metric.ci_high):.1f}" stroke="#000"/>')
                if metric.interval == "t":  # marked where it shows, as in the tables
                    parts.append(f'<text class="t-mark" x="{cx:.1f}" '
                                 f'y="{py(metric.ci_high) - 4:.1f}" text-anchor="middle" '
                                 'font-size="11">(t)</text>')
    for s, service in enumerate(services):
        ly = top + 10 + 20 * s
        parts.append(f'<rect x="{x1 + 14}" y="{ly - 6}" width="12" height="12" '
                     f'fill="{_colour(s)}"/>')
        parts.append(f'<text x="{x1 + 32}" y="{ly + 4}" font-size="12">{escape(service)}</text>')
    if near_zero:  # the key to the outlined mark, which is no bar of its height
        ly = top + 10 + 20 * len(services) + 10
        parts.append(f'<rect x="{x1 + 14}" y="{ly - 2}" width="12" height="4" fill="#777" '
                     'stroke="#000" stroke-width="1"/>')
        parts.append(f'<text x="{x1 + 32}" y="{ly + 4}" font-size="12">mean under '
                     f'{NEAR_ZERO_MEAN}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


# ---------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg.plot { display: block; margin: 1.5em 0; border: 1px solid #ddd; max-width: 100%;
  height: auto; }
.note { color: #555; font-size: 13px; }
.scroll { overflow-x: auto; max-width: 100%; }
.pages { max-height: 24em; overflow: auto; display: inline-block; max-width: 100%; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
.side > div { border: 1px solid #ccc; padding: 0.5em; max-height: 30em; overflow-y: auto;
  font-size: 13px; line-height: 1.5; }
del.missed { background: #fdd; color: #900; }
ins.extra { background: #dfd; color: #060; text-decoration: none; }
:target { outline: 3px solid #f90; }
@media (max-width: 600px) { body { margin: 0.5em; } .side { grid-template-columns: 1fr; } }
"""


def _html_table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    """A table in a box of its own that scrolls sideways, so a wide table on a narrow
    screen scrolls by itself instead of pushing the whole page off the screen."""
    numeric = numeric_columns(header)
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td{" class=num" if i in numeric else ""}>{escape(cell)}</td>'
            for i, cell in enumerate(cells)) + "</tr>"
        for cells in rows)
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _scored(results: Sequence[PageResult]) -> list[PageResult]:
    return [r for r in results if r.status != "skipped" and r.scores is not None]


def page_anchor(result: PageResult) -> str:
    """The per-page view's anchor of one page of one row."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in
                   f"{result.service}--{result.dataset}--{result.page_id}")
    return f"page--{safe}"


def _page_view(results: Sequence[PageResult], gold: GoldLookup | None) -> list[str]:
    """Each row's pages worst first (word F1), and the worst DETAIL_PAGES of each
    with gold and extract side by side (when the gold texts are at hand)."""
    scored = _scored(results)
    parts = ['<h2 id="pages">Pages, worst first</h2>',
             '<p class="note">Per row, its pages by word F1, worst first. The worst '
             f"{DETAIL_PAGES} of each row open to the gold (left) and the extract (right): "
             '<del class="missed">missed words</del> and <ins class="extra">extra words'
             "</ins> are marked. Every dot of the plots links here.</p>"]
    for service in sorted({r.service for r in scored}):
        pages = sorted((r for r in scored if r.service == service),
                       key=lambda r: (r.scores.word.f1 if r.scores else 0.0, r.page_id))
        rows = []
        details = []
        for i, r in enumerate(pages):
            anchor = page_anchor(r)
            word = r.scores.word if r.scores else None
            shingle = r.scores.shingle if r.scores else None
            target = f"detail-{anchor}" if gold is not None and i < DETAIL_PAGES else anchor
            rows.append(f'<tr id="{anchor}"><td><a href="#{target}">{escape(r.page_id)}</a>'
                        f"</td><td>{escape(r.dataset)}</td><td>{escape(r.status)}</td>"
                        f'<td class=num>{_fmt(word.f1 if word else None)}</td>'
                        f'<td class=num>{_fmt(word.precision if word else None)}</td>'
                        f'<td class=num>{_fmt(word.recall if word else None)}</td>'
                        f'<td class=num>{_fmt(shingle.recall if shingle else None)}</td></tr>')
            text = gold(r.dataset, r.page_id) if gold is not None and i < DETAIL_PAGES else None
            if text is not None:
                diff = page_diff(text, r.text)
                opened = " open" if i == 0 else ""  # each row's worst page shows at once
                details.append(
                    f'<details class="page" id="detail-{anchor}"{opened}><summary>'
                    f"{escape(service)} on "
                    f"{escape(r.dataset)}/{escape(r.page_id)}: word F1 "
                    f"{_fmt(word.f1 if word else None)}, {diff.missed_words} missed and "
                    f"{diff.extra_words} extra words</summary>"
                    f'<div class="side"><div class="gold"><h4>gold</h4>'
                    f"{segments_html(diff.gold)}</div><div class=\"extract\"><h4>extract</h4>"
                    f"{segments_html(diff.extract)}</div></div></details>")
        parts += [f"<h3>{escape(service)}</h3>",
                  '<div class="pages"><table><thead><tr><th>page</th><th>dataset</th>'
                  "<th>status</th><th>word F1</th><th>word P</th><th>word R</th>"
                  "<th>shingle R</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
                  "</div>", *details]
    return parts


def _plots(summary: Summary, results: Sequence[PageResult]) -> dict[str, str]:
    """The report's plots as SVG documents, by file stem."""
    scored = _scored(results)
    datasets = sorted({r.dataset for r in results})
    services = sorted({r.service for r in results})
    several = len(datasets) > 1
    groups: list[tuple[str, int, list[float]]] = []
    group_links: list[list[str]] = []
    for index, service in enumerate(services):
        for dataset in datasets:
            mine = [r for r in scored if r.scores and r.service == service and r.dataset == dataset]
            if mine:
                groups.append((f"{service} · {dataset}" if several else service, index,
                               [r.scores.word.f1 for r in mine if r.scores]))
                group_links.append([page_anchor(r) for r in mine])
    pooled = ALL_DATASETS if several else (datasets[0] if datasets else "")
    series = []
    series_links: list[list[str]] = []
    for service in services:
        mine = [r for r in scored if r.scores and r.service == service]
        points = [(r.scores.word.precision, r.scores.word.recall) for r in mine if r.scores]
        series_links.append([page_anchor(r) for r in mine])
        try:
            word = summary.get(service, pooled).levels.get("word")
        except KeyError:
            word = None
        series.append((service, points, word.macro["precision"] if word else None,
                       word.macro["recall"] if word else None))
    means = {(row.service, row.dataset): row.levels["word"].macro["f1"]
             for row in summary.services if "word" in row.levels}
    return {"f1_distribution": f1_distribution_svg(groups, group_links),
            "precision_recall": precision_recall_svg(series, series_links),
            "dataset_bars": dataset_bars_svg(datasets, services, means)}


def render_html(run: RunInfo, summary: Summary, results: Sequence[PageResult],
                gold: GoldLookup | None = None) -> str:
    """The self-contained report: run, ranked results, plots, significance, pages."""
    header, rows = table_rows(summary)
    detail_header, details = detail_rows(summary)
    pair_header, pair_rows = pairwise_rows(summary)
    errors = [r for r in results if r.status == "error"]
    error_rows = [[r.service, r.dataset, r.page_id, r.error or ""]
                  for r in errors[:ERROR_ROWS]]
    warnings = _warnings(run)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>boilerbench run {escape(run.id)}</title>", f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>boilerbench run {escape(run.id)}</h1>",
        f'<p class="note">Created {escape(run.created.isoformat())}; status '
        f"{escape(run.status)}; datasets: {escape(', '.join(run.datasets) or '–')}; "
        f"rows: {escape(', '.join(run.services) or '–')}; "
        f"{len(results)} page results.</p>",
        *[f'<p class="note">Options of <code>{escape(row)}</code>: '
          f"<code>{escape(options)}</code>.</p>" for row, options in _row_options(run)],
    ]
    if warnings:
        parts += [f'<h2 id="warnings">Warnings ({len(warnings)})</h2><ul>',
                  *[f"<li>{escape(w)}</li>" for w in warnings], "</ul>"]
    parts += [
        "<h2>Results</h2>",
        f'<p class="note"><code>#</code>: {escape(ranked_by(summary) or "ranked")}, best '
        "first per dataset; rows with the same figure share a rank. Word figures by token "
        "alignment (LCS): per-page means with a bootstrap-t 95% interval (<code>(t)</code>: "
        f"{escape(STUDENT_T_NOTE)}); micro F1 from counts summed "
        "over pages; bag F1 by bag of words. Shingle figures: the article-extraction "
        "benchmark's metric (4-token shingles; F1 of the precision and recall means ± the "
        "bootstrap standard deviation; exact: share of pages whose tokens equal the gold's). "
        "ROUGE-LSum: per-page mean F1, <i>(n of m pages)</i> where pages too long for it "
        "are left out. Flags: <i>file</i> a prediction file, <i>in-sample</i> "
        "a model scored on the pages it was trained on (matched by their HTML bytes), "
        "<i>(n of m pages)</i> where only some of the row's pages are, <i>in-sample "
        "unknown</i> a service whose model file the run has not got (see the warnings). "
        "Errors count as "
        "empty output; skipped pages are left out, and a row that skipped pages others "
        "scored is not ranked (–).</p>",
        _html_table(header, rows, "results-table"),
        "<h2>Plots</h2>", *_plots(summary, results).values(),
        "<h2>Details</h2>", _html_table(detail_header, details, "details-table"),
    ]
    for dataset, matrix_header, matrix in significance_matrices(summary):
        parts += [f"<h2>Significance on {escape(dataset)}</h2>",
                  '<p class="note">Wilcoxon signed-rank tests of per-page word F1, '
                  "Holm-corrected: <b>+</b> the row is significantly better than the column "
                  "(p &lt; 0.05), <b>-</b> worse, <b>=</b> no significant difference, "
                  "<b>?</b> not testable.</p>",
                  _html_table(matrix_header, matrix, f"significance-{escape(dataset)}")]
    if pair_rows:
        parts += ["<h2>Pairwise Wilcoxon signed-rank tests (per-page word F1)</h2>",
                  _html_table(pair_header, pair_rows, "pairwise-table")]
    if error_rows:
        parts += [f'<h2 id="errors">Errors ({len(errors)})</h2>',
                  *([f'<p class="note">The first {ERROR_ROWS} of {len(errors)} errors; '
                     "pages.csv has them all.</p>"] if len(errors) > ERROR_ROWS else []),
                  _html_table(["service", "dataset", "page", "reason"], error_rows,
                              "errors-table")]
    parts += _page_view(results, gold)
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------- all outputs

def write_outputs(out_dir: Path, run: RunInfo, results: list[PageResult],
                  summary: Summary | None = None, gold: GoldLookup | None = None,
                  rank_by: str = "f1") -> dict[str, Path]:
    """Write results.json, pages.csv, summary.md, report.html, the tables as CSV and
    LaTeX (tables/) and the plots as SVG (plots/) into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = run.options.get("predictions") or {}
    summary = ranked(summary if summary is not None
                     else summarize(results, files, run.options.get("services")), rank_by)
    rows = [page_row(r) for r in results]
    paths = {
        "json": out_dir / "results.json",
        "csv": out_dir / "pages.csv",
        "markdown": out_dir / "summary.md",
        "html": out_dir / "report.html",
    }
    document = {
        "run": run.model_dump(mode="json"),
        "summary": summary.model_dump(mode="json"),
        "pages": rows,
    }
    paths["json"].write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=page_columns())
        writer.writeheader()
        writer.writerows({key: spreadsheet_safe(value) for key, value in row.items()}
                         for row in rows)
    paths["markdown"].write_text(markdown_summary(run, summary), encoding="utf-8")
    paths["html"].write_text(render_html(run, summary, results, gold), encoding="utf-8")
    paths.update(write_exports(out_dir, summary, results))
    return paths


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([spreadsheet_safe(cell) for cell in cells] for cells in rows)
    return path


def write_exports(out_dir: Path, summary: Summary, results: Sequence[PageResult]
                  ) -> dict[str, Path]:
    """tables/{results,details,pairwise,significance-<dataset>}.{csv,tex} and
    plots/<plot>.svg (standalone SVG documents)."""
    tables, plots = out_dir / "tables", out_dir / "plots"
    tables.mkdir(exist_ok=True)
    plots.mkdir(exist_ok=True)
    ranking = f"Results, {ranked_by(summary)}, best first per dataset" if summary.rank_by \
        else "Results, ranked per dataset"
    named = {"results": (*table_rows(summary), ranking),
             "details": (*detail_rows(summary), "Block F1, time, error reasons and empty answers"),
             "pairwise": (*pairwise_rows(summary), "Pairwise Wilcoxon signed-rank tests")}
    for dataset, header, rows in significance_matrices(summary):
        base = "significance-" + "".join(c if c.isalnum() else "_" for c in dataset)
        # `a-b` and `a.b` (or `A` and `a`, on a file system that ignores case) would
        # share a file: the later set gets a number
        stem, n = base, 1
        while stem.casefold() in {name.casefold() for name in named}:
            n += 1
            stem = f"{base}-{n}"
        named[stem] = (header, rows, f"Significance on {dataset} (+ better, - worse, "
                       "= no significant difference; Holm-corrected Wilcoxon, p < 0.05)")
    paths: dict[str, Path] = {}
    for stem, (header, rows, caption) in named.items():
        paths[f"{stem}.csv"] = _write_csv(tables / f"{stem}.csv", header, rows)
        tex = tables / f"{stem}.tex"
        tex.write_text(latex_table(header, rows, caption, f"tab:{stem}"), encoding="utf-8")
        paths[f"{stem}.tex"] = tex
    for stem, svg in _plots(summary, results).items():
        path = plots / f"{stem}.svg"
        document = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" '
                               'xmlns:xlink="http://www.w3.org/1999/xlink" ', 1)
        # printable: a control character in a label would make the file no XML at all.
        path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + printable(document),
                        encoding="utf-8")
        paths[f"{stem}.svg"] = path
    return paths
