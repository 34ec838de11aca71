"""Figures per service and dataset, and pairwise significance tests (Rolli 2014, B.4.5).

Macro figures are means over pages of the per-page figures, with median, sample
standard deviation and a bootstrap-t 95% interval of the mean (bootstrap_cis says
why that method); micro figures come from the counts summed over pages. Pages with
status "error" count as empty output (the runner scores them with
scoring.score_empty); "skipped" pages are left out and counted, as are errors that
carry no scores.

Services are compared by a Wilcoxon signed-rank test of per-page word F1 on the
pages both scored, with Holm's correction over all the tests of a summary. The test
ranks the pages whose F1 differ; its p-value is exact over up to 50 of them (13 where
two differences tie in size), the normal approximation beyond.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field
from scipy import stats

from orchestrator.field_metrics import ShingleSummary, summarize_shingles
from orchestrator.insample import TrainedPages, in_sample_pages, in_sample_unknown
from orchestrator.models import METRICS, RANK_KEYS, Counts, PageResult

ALL_DATASETS = "(all)"
"""Dataset name of the rows that pool every dataset of a run (when there are several)."""

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240601
"""Fixed, so a report's intervals are the same on every run of the same results."""
FIGURE_RANGE = (0.0, 1.0)
"""Every figure the intervals are of is a fraction (precision, recall, F1, ...)."""
SMALL_SAMPLE = 20
"""Below this many pages the interval is the small-sample bootstrap-t (_bootstrap_t)."""
MIN_PAIRS = 6
"""Fewest non-zero paired differences for a Wilcoxon test: with 5 or fewer, the
smallest two-sided exact p-value is 2/2^5 = 0.0625, so no test could reject."""
DIFFERENCE_DECIMALS = 12
"""Paired F1 differences are rounded to this many decimals before testing."""

_BOOTSTRAP_CHUNK_CELLS = 4_000_000  # resamples x pages drawn per numpy call (memory bound)
_ROUNDING = 1e-12
"""A resample's variance this small next to its mean square about the sample's mean
is rounding error: the resample has no spread."""

LEVELS: tuple[str, ...] = ("word", "word_bag", "block")


class MetricSummary(BaseModel):
    """Distribution of one per-page figure over the pages of a service and dataset."""

    n: int
    mean: float | None
    median: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    interval: Literal["bootstrap-t", "t"] | None = None
    """How ci_low and ci_high were found: the bootstrap-t, or Student's t where the
    bootstrap-t interval is unbounded (bootstrap_cis), which the tables mark."""


class LevelSummary(BaseModel):
    """Figures of one level (word, word_bag or block): macro and micro."""

    pages: int
    counts: Counts
    micro: dict[str, float | None]
    """Figures of the summed counts; None each where no page was scored."""
    macro: dict[str, MetricSummary]


class ServiceSummary(BaseModel):
    """One service on one dataset."""

    service: str
    dataset: str
    pages: int
    """Page results of any status."""
    ok: int
    empty: int = 0
    """Pages answered without error but with blank text (nothing but whitespace): a
    low score that is an empty answer, not a wrong one."""
    errors: int
    skipped: int
    unscored: int
    """Errors without scores, left out of the figures."""
    elapsed_ms_median: float | None
    elapsed_ms_mean: float | None
    levels: dict[str, LevelSummary]
    """'word', 'word_bag' and, where any page has blocks, 'block'."""
    source: Literal["service", "file"] = "service"
    """A live service, or a prediction file scored without extracting."""
    in_sample: bool = False
    """The service's model was trained on pages of this row (insample.py)."""
    in_sample_pages: int = 0
    """How many of `pages` it was trained on (insample.in_sample_pages)."""
    in_sample_unknown: bool = False
    """Which pages its model was trained on is unknown: a service over HTTP loading a
    model file the orchestrator has not got (insample.in_sample_unknown)."""
    shingle: ShingleSummary | None = None
    """The article-extraction benchmark's shingle metric (field_metrics)."""
    rouge_lsum: MetricSummary | None = None
    """ROUGE-LSum F1 per page: mean, spread and bootstrap-t interval."""
    error_reasons: dict[str, int] = Field(default_factory=dict)
    """Errors and skips by reason (the reason's first part), most frequent first."""
    rank: int | None = None
    """Place among the dataset's rows, best first (`ranked`); None for a row without
    the figure, or one that skipped pages the dataset's best-covered rows scored: its
    means are over other pages, so they do not compare."""


class PairwiseTest(BaseModel):
    """Wilcoxon signed-rank test of per-page word F1, service_a against service_b."""

    dataset: str
    service_a: str
    service_b: str
    n: int
    """Pages both services scored."""
    n_nonzero: int
    """Of those, pages where the two F1 differ (the ones the test ranks)."""
    mean_a: float | None
    mean_b: float | None
    median_difference: float | None
    """Median of F1(a) - F1(b) over the shared pages."""
    favours: str | None = None
    """The service the signed ranks favour (the larger of the rank sums W+ and W-, the
    side the test's significance is about; a mean can point the other way), None on a
    tie or where nothing was tested."""
    statistic: float | None
    p_value: float | None
    p_holm: float | None
    note: str = ""


class Summary(BaseModel):
    services: list[ServiceSummary]
    pairwise: list[PairwiseTest]
    rank_by: str | None = None
    """The figure (a RANK_KEYS key) the rows' `rank` is by, once `ranked`."""

    def get(self, service: str, dataset: str) -> ServiceSummary:
        for row in self.services:
            if row.service == service and row.dataset == dataset:
                return row
        raise KeyError(f"no summary for service {service!r} on dataset {dataset!r}")


def _draw_counts(rng: np.random.Generator, rows: int, n: int) -> NDArray[np.float64]:
    """`rows` resamples of n pages, each as every page's weight, the weights summing to
    n: how often the page was drawn, or below SMALL_SAMPLE pages independent
    Beta(1/2, 3/2) draws scaled to that sum (_bootstrap_t says why)."""
    if n < SMALL_SAMPLE:
        weights: NDArray[np.float64] = rng.beta(0.5, 1.5, size=(rows, n))
        weights *= n / weights.sum(axis=1, keepdims=True)
        return weights
    draws = rng.integers(0, n, size=(rows, n))
    draws += np.arange(rows)[:, None] * n  # one bincount for all rows
    return np.bincount(draws.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float64)


@functools.lru_cache(maxsize=8)
def _shared_counts(n: int, resamples: int, seed: int) -> NDArray[np.float64]:
    """The resample weights for n pages, drawn once and shared by every figure and
    service with that many pages (common random numbers; read-only)."""
    counts = _draw_counts(np.random.default_rng(seed), resamples, n)
    counts.flags.writeable = False
    return counts


def _resample_counts(n: int, resamples: int,
                     seed: int) -> Iterator[tuple[int, int, NDArray[np.float64]]]:
    """(start, stop, counts) blocks of the resamples: cached whole when small,
    drawn in chunks of bounded memory otherwise (the same draws either way)."""
    chunk = max(1, _BOOTSTRAP_CHUNK_CELLS // n)
    if resamples <= chunk:
        yield 0, resamples, _shared_counts(n, resamples, seed)
        return
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        yield start, stop, _draw_counts(rng, stop - start, n)


def bootstrap_cis(values: NDArray[np.float64], *, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED, level: float = 0.95,
                  bounds: tuple[float, float] = FIGURE_RANGE) -> list[tuple[float, float]]:
    """Bootstrap-t 95% intervals of the means of the rows of `values`, whose values lie
    in `bounds` (see _bootstrap_t, which also says which rows fell back to Student's
    t)."""
    low, high, _ = _bootstrap_t(values, resamples=resamples, seed=seed, level=level,
                                bounds=bounds)
    return [(float(low[i]), float(high[i])) for i in range(len(low))]


def _bootstrap_t(values: NDArray[np.float64], *, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = 0.95,
                 bounds: tuple[float, float] = FIGURE_RANGE
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Bootstrap-t intervals of the means of k figures over the same n >= 2 pages
    (values: k x n): the mean minus the quantiles of the resamples' studentized mean
    t* = (mean* - mean) / se* times the sample's standard error (Efron and Tibshirani
    1993, An Introduction to the Bootstrap, chapter 12.5; Hall 1988, Annals of
    Statistics 16(3)). Per-page F1 is skewed, with rare pages near 0: a small sample
    that lacks them overestimates the mean, and an interval must reach down to cover
    it. t* follows that skew; the percentile interval, BCa, the expanded percentile
    and Student's t allow too little for it, and at 10 pages cover a service's mean
    76-91% of the time where bootstrap-t covers 89-95% (benchmarks/interval_coverage.py;
    scipy has no bootstrap-t, hence the hand-written one).

    Below SMALL_SAMPLE pages that t* is erratic: a resample that drew only a few pages
    of nearly equal F1 (the 1.0s and 0.998s of 0.818, 0.964, 0.991, 0.998, 0.998, 1, 1,
    1) has a tiny se*, its t* runs to dozens, and the interval reaches down to 0.38 for
    those pages, to 0 (spanning [0, 1]) for others as high. Two remedies, both measured
    on small n (benchmarks/results/interval_coverage.md): the pages are weighted by
    independent Beta(1/2, 3/2) draws instead of drawn whole, so no resample leaves pages
    out (Owen 2025, "Better bootstrap t confidence intervals for the mean",
    arXiv:2508.10083: second-order accurate like the bootstrap-t, never an interval of
    infinite length), and t* is taken of arcsin(sqrt(p)), p the mean scaled to [0, 1]
    by `bounds`, with the delta method's standard error: the scale on which a fraction's
    variance, at most p(1 - p), does not shrink as its mean nears a bound (Efron and
    Tibshirani 12.6: the bootstrap-t works best on a variance-stabilised scale), so a
    resample near 1 is not taken for a precise one. At 8 pages 1-4% of the intervals
    then span 90% of [0, 1] or more (9-45% of the plain bootstrap-t's), and they cover a
    service's mean 84-89% of the time (the plain bootstrap-t 87-92%, BCa and Student's t
    79-86%, which would never span so much).

    A resample with no spread (all its pages equal) has an unbounded t*. Where more than
    (1 - level) / 2 of them lie on one side, as with nearly every page at one value (24
    at F1 0 and one at 0.97; below SMALL_SAMPLE pages, whose resamples leave no page
    out, only values that differ by a rounding error), the interval would be unbounded
    too, and Student's t interval is given instead: the third array returned says for
    which figures. Values all equal give a zero-width interval. Intervals are clipped to
    `bounds`, which holds every value and so every mean, so clipping never uncovers one.

    Vectorised: each resample is a row of page weights, shared by the k figures (and,
    cached, by every service with n pages), and the means and spreads come from
    matrix products."""
    data = np.atleast_2d(np.asarray(values, dtype=np.float64))
    k, n = data.shape
    if n == 0:
        raise ValueError("bootstrap of no values")
    if n == 1:
        raise ValueError("an interval needs two or more values")
    mean = data.mean(axis=1)
    centred = data - mean[:, None]
    se = np.sqrt(np.square(centred).sum(axis=1) / (n - 1) / n)
    shift = np.empty((resamples, k), dtype=np.float64)  # mean* - mean
    spread = np.empty((resamples, k), dtype=np.float64)  # mean* of (value - mean)^2
    for start, stop, counts in _resample_counts(n, resamples, seed):
        shift[start:stop] = counts @ centred.T / n
        spread[start:stop] = counts @ np.square(centred).T / n
    variance = spread - np.square(shift)  # the resample's, up to rounding
    no_spread = variance <= _ROUNDING * spread
    se_star = np.sqrt(np.where(no_spread, 1.0, variance) / (n - 1))
    if n < SMALL_SAMPLE:  # on the arcsine scale
        width = bounds[1] - bounds[0]
        place = np.clip((mean - bounds[0]) / width, 0.0, 1.0)
        place_star = np.clip(place + shift / width, 0.0, 1.0)
        slope_star = 2.0 * np.sqrt(place_star * (1.0 - place_star)) * width  # 1 / g'
        no_spread |= slope_star == 0.0  # a resample all at a bound
        t_star = ((np.arcsin(np.sqrt(place_star)) - np.arcsin(np.sqrt(place)))
                  / se_star * np.where(no_spread, 1.0, slope_star))
    else:
        t_star = shift / se_star
    t_star[no_spread] = np.copysign(np.inf, shift[no_spread])
    t_star[no_spread & (shift == 0)] = 0.0
    alpha = round((1.0 - level) / 2.0, 12)  # not 0.025000000000000022, a rank too far
    # Order statistics, as Efron and Tibshirani define the quantiles of t*: an
    # interpolated one would blend an infinite t* into a finite end.
    t_low, t_high = np.quantile(t_star, [alpha, 1.0 - alpha], axis=0, method="inverted_cdf")
    unbounded = ~(np.isfinite(t_low) & np.isfinite(t_high))
    t_level = float(stats.t.ppf(1.0 - alpha, n - 1))
    low, high = mean - t_level * se, mean + t_level * se
    if n < SMALL_SAMPLE:
        angle = np.arcsin(np.sqrt(place))
        slope = 2.0 * np.sqrt(place * (1.0 - place)) * width
        se_angle = se / np.where(slope == 0.0, 1.0, slope)  # at a bound only if flat

        def back(t_end: NDArray[np.float64]) -> NDArray[np.float64]:
            """The end on the arcsine scale, back on the figure's."""
            end = np.clip(angle - np.where(unbounded, 0.0, t_end) * se_angle, 0.0, np.pi / 2)
            figure: NDArray[np.float64] = bounds[0] + width * np.square(np.sin(end))
            return figure

        low = np.where(unbounded, low, back(t_high))
        high = np.where(unbounded, high, back(t_low))
    else:
        low = np.where(unbounded, low, mean - t_high * se)
        high = np.where(unbounded, high, mean - t_low * se)
    # Equal values: their mean can be off the value by a rounding error.
    flat = np.ptp(data, axis=1) == 0
    low, high = np.where(flat, mean, low), np.where(flat, mean, high)
    low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    return low, high, unbounded & ~flat


def describe_many(values: NDArray[np.float64]) -> list[MetricSummary]:
    """Mean, median, sample standard deviation and bootstrap-t 95% interval
    (bootstrap_cis) of each row of a k x n matrix of per-page figures."""
    k, n = values.shape
    if n == 0:
        return [MetricSummary(n=0, mean=None, median=None, std=None, ci_low=None, ci_high=None)
                for _ in range(k)]
    means, medians = values.mean(axis=1), np.median(values, axis=1)
    if n == 1:  # one page has no spread and no interval to speak of
        return [MetricSummary(n=1, mean=float(means[i]), median=float(medians[i]), std=None,
                              ci_low=None, ci_high=None) for i in range(k)]
    low, high, student = _bootstrap_t(values)
    stds = values.std(axis=1, ddof=1)
    return [MetricSummary(n=n, mean=float(means[i]), median=float(medians[i]),
                          std=float(stds[i]), ci_low=float(low[i]), ci_high=float(high[i]),
                          interval="t" if student[i] else "bootstrap-t")
            for i in range(k)]


def describe(values: Sequence[float]) -> MetricSummary:
    """Mean, median, sample standard deviation and bootstrap-t 95% interval."""
    return describe_many(np.asarray(values, dtype=np.float64).reshape(1, -1))[0]


def summarize_level(counts: Sequence[Counts]) -> LevelSummary:
    """Macro (per-page) and micro (summed counts) figures of one level."""
    total = Counts(tp=sum(c.tp for c in counts), fp=sum(c.fp for c in counts),
                   fn=sum(c.fn for c in counts), tn=sum(c.tn for c in counts))
    figures = np.array([[c.metric(name) for c in counts] for name in METRICS],
                       dtype=np.float64).reshape(len(METRICS), len(counts))
    return LevelSummary(
        pages=len(counts),
        counts=total,
        micro=(dict(total.figures()) if counts
               else dict.fromkeys(total.figures(), None)),
        macro=dict(zip(METRICS, describe_many(figures), strict=True)),
    )


def _level_counts(results: Iterable[PageResult], level: str) -> list[Counts]:
    found: list[Counts] = []
    for result in results:
        if result.scores is None or result.status == "skipped":
            continue
        counts: Counts | None = getattr(result.scores, level)
        if counts is not None:
            found.append(counts)
    return found


def reason_key(error: str) -> str:
    """An error's reason without its page-specific detail (for counting)."""
    return error.split(": ", 1)[0].strip()[:80] or "unknown"


def summarize_service(service: str, dataset: str, results: Sequence[PageResult],
                      source: Literal["service", "file"] = "service",
                      trained: int = 0, trained_unknown: bool = False) -> ServiceSummary:
    """The figures of one service over the given page results (one dataset or pooled);
    `trained`: how many of those pages its model was trained on; `trained_unknown`:
    which ones is unknown."""
    scored = [r.scores for r in results if r.scores is not None and r.status != "skipped"]
    shingles = [s.shingle for s in scored if s.shingle is not None]
    rouge = [s.rouge_lsum for s in scored if s.rouge_lsum is not None]
    reasons: dict[str, int] = defaultdict(int)
    for r in results:
        if r.status != "ok":
            reasons[f"{r.status}: {reason_key(r.error or 'no reason given')}"] += 1
    elapsed = [r.elapsed_ms for r in results if r.status == "ok" and r.elapsed_ms is not None]
    levels = {}
    for level in LEVELS:
        counts = _level_counts(results, level)
        if counts or level != "block":
            levels[level] = summarize_level(counts)
    return ServiceSummary(
        service=service,
        dataset=dataset,
        pages=len(results),
        ok=sum(r.status == "ok" for r in results),
        empty=sum(r.status == "ok" and not r.text.strip() for r in results),
        errors=sum(r.status == "error" for r in results),
        skipped=sum(r.status == "skipped" for r in results),
        unscored=sum(r.status == "error" and r.scores is None for r in results),
        elapsed_ms_median=float(np.median(elapsed)) if elapsed else None,
        elapsed_ms_mean=float(np.mean(elapsed)) if elapsed else None,
        levels=levels,
        source=source,
        in_sample=trained > 0,
        in_sample_pages=trained,
        in_sample_unknown=trained_unknown,
        shingle=summarize_shingles(shingles) if shingles else None,
        rouge_lsum=describe(rouge) if rouge else None,
        error_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def wilcoxon_test(dataset: str, service_a: str, service_b: str,
                  f1_a: dict[str, float], f1_b: dict[str, float]) -> PairwiseTest:
    """Paired test on the pages present in both mappings (page key -> word F1)."""
    shared = sorted(f1_a.keys() & f1_b.keys())
    a = np.array([f1_a[k] for k in shared], dtype=np.float64)
    b = np.array([f1_b[k] for k in shared], dtype=np.float64)
    # The same F1 reached from different counts (2/3 from 2 of 3 words or from 1 of 1
    # and a miss) can differ in the last bit: such pages are ties, not differences.
    diff = np.round(a - b, DIFFERENCE_DECIMALS)
    n_nonzero = int(np.count_nonzero(diff))
    base = PairwiseTest(
        dataset=dataset, service_a=service_a, service_b=service_b, n=len(shared),
        n_nonzero=n_nonzero,
        mean_a=float(a.mean()) if shared else None,
        mean_b=float(b.mean()) if shared else None,
        median_difference=float(np.median(diff)) if shared else None,
        statistic=None, p_value=None, p_holm=None,
    )
    if not shared:
        return base.model_copy(update={"note": "no pages scored by both"})
    if n_nonzero == 0:
        return base.model_copy(update={"p_value": 1.0,
                                       "note": "identical F1 on every shared page"})
    if n_nonzero < MIN_PAIRS:
        return base.model_copy(update={
            "note": f"too few pages with differing F1 ({n_nonzero} < {MIN_PAIRS})"})
    # Only the differing pages: the test drops the ties (zero_method "wilcox") either
    # way, but scipy's `auto` counts them in choosing its method, and would take the
    # normal approximation for 10 differing pages among 60 tied ones (two settings of
    # one service) where the exact distribution over those 10 is at hand.
    differing = diff[diff != 0]
    result = stats.wilcoxon(differing, zero_method="wilcox", alternative="two-sided")
    ranks = stats.rankdata(np.abs(differing))
    above, below = float(ranks[differing > 0].sum()), float(ranks[differing < 0].sum())
    favours = service_a if above > below else service_b if below > above else None
    return base.model_copy(update={"statistic": float(result.statistic),
                                   "p_value": float(result.pvalue), "favours": favours})


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m, dtype=np.float64)
    out[order] = np.minimum(adjusted, 1.0)
    return [float(x) for x in out]


def pairwise_tests(results: Sequence[PageResult], datasets: Sequence[str]) -> list[PairwiseTest]:
    """Every pair of services on each dataset (and pooled, keyed by dataset/page),
    Holm-corrected over the tests that ran (a pair with identical F1 on every page, or
    too few pages that differ, is reported untested: p_holm None)."""
    per_dataset: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in results:
        if r.status == "skipped" or r.scores is None:
            continue
        f1 = r.scores.word.f1
        per_dataset[r.dataset][r.service][r.page_id] = f1
        if len(datasets) > 1:
            per_dataset[ALL_DATASETS][r.service][f"{r.dataset}/{r.page_id}"] = f1
    tests: list[PairwiseTest] = []
    for dataset in [*datasets, ALL_DATASETS]:
        services = per_dataset.get(dataset)
        if not services:
            continue
        for a, b in combinations(sorted(services), 2):
            tests.append(wilcoxon_test(dataset, a, b, services[a], services[b]))
    tested = [i for i, t in enumerate(tests) if t.statistic is not None and t.p_value is not None]
    adjusted = holm([tests[i].p_value or 0.0 for i in tested])
    for i, p in zip(tested, adjusted, strict=True):
        tests[i] = tests[i].model_copy(update={"p_holm": p})
    return tests


def summarize(results: Sequence[PageResult], files: Collection[str] = (),
              options: Mapping[str, Mapping[str, Any]] | None = None,
              trained: TrainedPages | None = None,
              unknown: Collection[str] = ()) -> Summary:
    """Figures per service and dataset (plus pooled rows when there are several
    datasets) and the pairwise tests, in a stable order. `files`: the rows that
    are prediction files (never flagged in-sample: their training is unknown);
    `options`: each row's service options; `trained`: the pages each service's model
    was trained on, matched by content (None: by the test set's name); `unknown`: the
    services whose model's training pages are unknown. They decide the in-sample flags
    (orchestrator.insample)."""
    groups: dict[tuple[str, str], list[PageResult]] = defaultdict(list)
    for r in results:
        groups[(r.service, r.dataset)].append(r)
    datasets = sorted({r.dataset for r in results})
    services = sorted({r.service for r in results})

    def row(service: str, dataset: str, pages: Sequence[PageResult]) -> ServiceSummary:
        is_file = service in files
        seen = 0 if is_file else in_sample_pages(
            service, [(r.dataset, r.page_id) for r in pages], (options or {}).get(service),
            trained)
        untraced = not is_file and in_sample_unknown(service, (options or {}).get(service),
                                                     unknown)
        return summarize_service(service, dataset, pages, "file" if is_file else "service",
                                 seen, untraced)

    rows = [row(s, d, groups[(s, d)]) for s in services for d in datasets if (s, d) in groups]
    if len(datasets) > 1:
        for s in services:
            rows.append(row(s, ALL_DATASETS, [r for r in results if r.service == s]))
    return Summary(services=rows, pairwise=pairwise_tests(results, datasets))


def rank_value(row: ServiceSummary, key: str) -> float | None:
    """A row's figure for ranking by `key` (one of RANK_KEYS); None when it has none."""
    word, bag, block = (row.levels.get(level) for level in LEVELS)
    if key == "f1":
        return word.macro["f1"].mean if word else None
    if key == "micro_f1":
        return word.micro["f1"] if word and word.pages else None
    if key == "bag_f1":
        return bag.macro["f1"].mean if bag else None
    if key == "block_f1":
        return block.macro["f1"].mean if block else None
    if key == "shingle_f1":
        return row.shingle.f1 if row.shingle else None
    if key == "rouge_lsum":
        return row.rouge_lsum.mean if row.rouge_lsum else None
    raise KeyError(f"unknown ranking {key!r}; known: {', '.join(RANK_KEYS)}")


def ranked(summary: Summary, key: str = "f1") -> Summary:
    """The summary with its rows ordered by dataset (pooled last), then best first by
    `key`, each with its `rank`. Only rows scored on as many pages as the dataset's
    best-covered row are ranked: one that skipped pages (rss where a page has no feed)
    has means over fewer, often easier, pages. Rows with the same figure share a rank.
    Unranked rows follow, best first, and rows without the figure go last, by name."""
    if key not in RANK_KEYS:
        raise KeyError(f"unknown ranking {key!r}; known: {', '.join(RANK_KEYS)}")
    order = {d: i for i, d in enumerate(sorted({r.dataset for r in summary.services}
                                               - {ALL_DATASETS}))}
    most_scored: dict[str, int] = {}
    for row in summary.services:
        most_scored[row.dataset] = max(most_scored.get(row.dataset, 0),
                                       row.pages - row.skipped)

    def sort_key(row: ServiceSummary) -> tuple[int, int, bool, float, str]:
        value = rank_value(row, key)
        return (order.get(row.dataset, len(order)), value is None,
                row.pages - row.skipped < most_scored[row.dataset], -(value or 0.0),
                row.service)

    # Rows with the same figure share a place (competition ranking, 1-2-2-4): two
    # settings that extract alike would otherwise be ordered by their names. Means of
    # the same page figures summed apart can differ in the last bit: not a difference.
    rows, counted = [], dict.fromkeys(most_scored, 0)
    last: dict[str, tuple[float, int]] = {}
    for row in sorted(summary.services, key=sort_key):
        rank = None
        value = rank_value(row, key)
        if value is not None and row.pages - row.skipped == most_scored[row.dataset]:
            counted[row.dataset] += 1
            figure = round(value, DIFFERENCE_DECIMALS)
            previous = last.get(row.dataset)
            rank = previous[1] if previous and previous[0] == figure else counted[row.dataset]
            last[row.dataset] = (figure, rank)
        rows.append(row.model_copy(update={"rank": rank}))
    return summary.model_copy(update={"services": rows, "rank_by": key})
