"""Statistics: bootstrap-t intervals, macro against micro figures, Wilcoxon and Holm."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import orchestrator.statistics as statistics
from orchestrator.models import Counts, PageResult, PageScores
from orchestrator.report import table_rows
from orchestrator.statistics import (
    ALL_DATASETS,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    SMALL_SAMPLE,
    bootstrap_cis,
    describe,
    holm,
    summarize,
    wilcoxon_test,
)


def result(service: str, page: str, counts: Counts | None, *, dataset: str = "d",
           status: str = "ok", block: Counts | None = None) -> PageResult:
    scores = None if counts is None else PageScores(word=counts, word_bag=counts, block=block)
    return PageResult.model_validate({
        "run_id": "r", "dataset": dataset, "page_id": page, "service": service,
        "status": status, "scores": scores, "elapsed_ms": 5.0 if status == "ok" else None,
        "error": None if status == "ok" else "reason"})


def counts_with_f1(tp: int, fp: int, fn: int) -> Counts:
    return Counts(tp=tp, fp=fp, fn=fn, tn=1)


def test_bootstrap_interval_contains_the_mean_and_is_reproducible() -> None:
    rng = np.random.default_rng(7)
    for n in (2, 5, 40, 300):
        values = rng.beta(2, 1, size=n)
        low, high = bootstrap_cis(values)[0]
        assert 0.0 <= low <= values.mean() <= high <= 1.0  # clipped to a fraction's range
        assert bootstrap_cis(values)[0] == (low, high)  # fixed seed
    with pytest.raises(ValueError, match="two or more"):
        bootstrap_cis(np.array([0.4]))
    with pytest.raises(ValueError, match="no values"):
        bootstrap_cis(np.array([]))


def _studentized_interval(values: np.ndarray, indices: np.ndarray) -> tuple[float, float]:
    """The bootstrap-t interval computed resample by resample (no counts, no
    centring): the reference the vectorised one must equal."""
    n = len(values)
    resampled = values[indices]
    t_star = (resampled.mean(axis=1) - values.mean()) / (resampled.std(axis=1, ddof=1)
                                                          / np.sqrt(n))
    t_low, t_high = np.quantile(t_star, [0.025, 0.975], method="inverted_cdf")
    se = values.std(ddof=1) / np.sqrt(n)
    return float(values.mean() - t_high * se), float(values.mean() - t_low * se)


def _small_sample_interval(values: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """The small-sample bootstrap-t computed resample by resample: each resample's
    weighted mean and spread, t* of arcsin(sqrt(mean)) with the delta method's standard
    error, and the ends taken back from that scale."""
    n, mean = len(values), values.mean()
    shares = weights / weights.sum(axis=1, keepdims=True)
    means = shares @ values
    spreads = np.sqrt((shares * np.square(values - means[:, None])).sum(axis=1) / (n - 1))

    def angle(m: np.ndarray | float) -> np.ndarray:
        return np.asarray(np.arcsin(np.sqrt(m)))

    def slope(m: np.ndarray | float) -> np.ndarray:  # 1 / angle'(m)
        return np.asarray(2 * np.sqrt(np.multiply(m, 1 - np.asarray(m))))

    t_star = (angle(means) - angle(mean)) / (spreads / slope(means))
    t_low, t_high = np.quantile(t_star, [0.025, 0.975], method="inverted_cdf")
    se_angle = values.std(ddof=1) / np.sqrt(n) / slope(mean)
    return (float(np.sin(angle(mean) - t_high * se_angle) ** 2),
            float(np.sin(angle(mean) - t_low * se_angle) ** 2))


# Thirteen per-page F1 (the built-in sample's size): most near 1, two poor pages.
SKEWED = np.array([0.98, 0.95, 1.0, 0.31, 0.97, 0.92, 0.99, 0.88, 1.0, 0.55, 0.96, 0.94, 0.9])
# The same pages twice: enough for the plain bootstrap-t (SMALL_SAMPLE).
DOUBLED = np.concatenate([SKEWED, SKEWED])


def test_bootstrap_t_equals_a_resample_by_resample_computation() -> None:
    """Same draws (the module's seed), computed independently of the count matrices."""
    n = len(DOUBLED)
    assert n >= SMALL_SAMPLE
    indices = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    expected = _studentized_interval(DOUBLED, indices)
    assert bootstrap_cis(DOUBLED)[0] == pytest.approx(expected, rel=1e-9)
    # Skewed down: the interval reaches further below the mean than above it, and
    # further below than the percentile interval of the same resamples does.
    low, high = expected
    means = DOUBLED[indices].mean(axis=1)
    assert DOUBLED.mean() - low > 2 * (high - DOUBLED.mean())
    assert low < np.quantile(means, 0.025)


def test_small_sample_interval_equals_a_resample_by_resample_computation() -> None:
    """Below SMALL_SAMPLE pages: the same Beta(1/2, 3/2) weights (the module's seed),
    computed independently of the weight matrices; still skewed down."""
    n = len(SKEWED)
    assert n < SMALL_SAMPLE
    weights = np.random.default_rng(BOOTSTRAP_SEED).beta(0.5, 1.5, size=(BOOTSTRAP_RESAMPLES, n))
    expected = _small_sample_interval(SKEWED, weights)
    assert bootstrap_cis(SKEWED)[0] == pytest.approx(expected, rel=1e-9)
    low, high = expected
    assert SKEWED.mean() - low > 2 * (high - SKEWED.mean())


def test_bootstrap_t_agrees_with_scipy_resampling() -> None:
    """scipy.stats.bootstrap's own resamples of the studentized mean (another seed, so
    equal up to resampling noise): the quantiles of t* and their use are right. The
    low end rests on the few resamples without the 0.31 pages, whose t* is large, so
    its noise is a few tenths of a standard error."""
    n, mean = len(DOUBLED), DOUBLED.mean()
    se = DOUBLED.std(ddof=1) / np.sqrt(n)

    def studentized(sample: np.ndarray, axis: int = -1) -> np.ndarray:
        spread = sample.std(axis=axis, ddof=1) / np.sqrt(n)
        return np.asarray((sample.mean(axis=axis) - mean) / np.maximum(spread, 1e-12))

    t_star = stats.bootstrap((DOUBLED,), studentized, n_resamples=20_000, method="percentile",
                             rng=np.random.default_rng(0)).confidence_interval
    expected = (mean - t_star.high * se, mean - t_star.low * se)
    got = bootstrap_cis(DOUBLED, resamples=20_000)[0]
    assert got == pytest.approx(expected, abs=0.5 * se)


def test_bootstrap_t_covers_a_skewed_mean_at_thirteen_pages() -> None:
    """4,000 samples of 13 pages whose F1 follows Beta(10, 1) (mean 10/11, skewed
    down like real per-page F1): the 95% interval covers the mean 95% of the time
    (±0.7 points); the percentile interval it replaced covered it 89%."""
    samples = np.random.default_rng(5).beta(10, 1, size=(4000, 13))
    low, high = np.array(bootstrap_cis(samples)).T
    mean = 10 / 11
    covered = (low <= mean) & (mean <= high)
    assert 0.935 <= covered.mean() <= 0.965


def test_degenerate_samples_give_intervals_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for value, n in ((0.7, 9), (0.1, 3), (0.7, 50), (2 / 7, 13)):
            # No spread at all: zero width at the mean, which may be a rounding
            # error off the value.
            same = np.full((2, n), value)
            mean = float(same[0].mean())
            assert bootstrap_cis(same) == [(mean, mean)] * 2
        # Mostly one value: more than 2.5% of the resamples drawn whole have no spread
        # and an unbounded t*, so the interval is Student's t (clipped), not [0, 1].
        mostly_zero = np.array([0.0] * 24 + [0.97])
        expected = stats.t.interval(0.95, 24, loc=mostly_zero.mean(),
                                    scale=stats.sem(mostly_zero))
        assert bootstrap_cis(mostly_zero)[0] == pytest.approx((0.0, expected[1]), rel=1e-12)
        assert expected[1] < 0.12
        # Below SMALL_SAMPLE pages every page weighs in every resample: no resample is
        # without spread, and on the arcsine scale the interval stays near the values.
        low, high = bootstrap_cis(mostly_zero[12:])[0]
        assert 0.0 <= low < mostly_zero[12:].mean() < high < 0.3
        # Two pages say next to nothing.
        assert bootstrap_cis(np.array([0.2, 0.9]))[0] == pytest.approx((0.0, 1.0), abs=0.01)
        low, high = bootstrap_cis(np.array([-0.5, 0.1, 0.2, -0.3, 0.0, 0.4]),
                                  bounds=(-1.0, 1.0))[0]
        assert -1.0 <= low < 0.0 < high <= 1.0
        assert describe([1.0] * 13).ci_low == describe([1.0] * 13).ci_high == 1.0


def test_eight_pages_of_high_f1_get_an_interval_that_says_something() -> None:
    """The resamples of these 8 pages drawn whole include many of only the 1.0s and
    0.998s: tiny se*, t* in the dozens, and the plain bootstrap-t reached down to 0.38
    for pages all above 0.8."""
    values = np.array([0.818, 0.964, 0.991, 0.998, 0.998, 1.0, 1.0, 1.0])
    low, high = bootstrap_cis(values)[0]
    assert 0.75 < low < values.mean() < high < 1.0


def test_small_samples_of_skewed_f1_rarely_span_the_whole_range() -> None:
    """4,000 samples of 8 pages from a population shaped like a strong service's F1 (30%
    at 1, 1% at 0, the rest Beta(6, 1)): fewer than 1% of the intervals span 0.9 or
    more, where the bootstrap-t drawing pages whole gave 9% (3% exactly [0, 1]), and
    they still cover the mean more often than Student's t does (87%)."""
    rng = np.random.default_rng(5)
    shape = rng.uniform(size=(4000, 8))
    samples = np.where(shape < 0.3, 1.0, np.where(shape < 0.31, 0.0,
                                                  rng.beta(6, 1, size=shape.shape)))
    mean = 0.3 + 0.69 * 6 / 7
    low, high = np.array(bootstrap_cis(samples)).T
    assert np.mean(high - low >= 0.9) < 0.01
    student = stats.t.interval(0.95, 7, loc=samples.mean(axis=1),
                               scale=stats.sem(samples, axis=1))
    covered = np.mean((low <= mean) & (mean <= high))
    assert covered > np.mean((student[0] <= mean) & (mean <= student[1])) + 0.02
    assert covered > 0.89


def test_bootstrap_interval_narrows_with_more_pages() -> None:
    rng = np.random.default_rng(3)
    small, large = rng.uniform(size=20), rng.uniform(size=2000)
    width_small = np.subtract(*bootstrap_cis(small)[0][::-1])
    width_large = np.subtract(*bootstrap_cis(large)[0][::-1])
    assert width_large < width_small / 4


def test_bootstrap_chunking_draws_the_same_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(1).uniform(size=50)
    whole = bootstrap_cis(values)[0]
    monkeypatch.setattr(statistics, "_BOOTSTRAP_CHUNK_CELLS", 170)  # 3 resamples per call
    assert bootstrap_cis(values)[0] == pytest.approx(whole)


def test_describe_matches_numpy() -> None:
    values = [0.1, 0.5, 0.9, 0.7]
    summary = describe(values)
    assert summary.n == 4
    assert summary.mean == pytest.approx(np.mean(values))
    assert summary.median == pytest.approx(0.6)
    assert summary.std == pytest.approx(np.std(values, ddof=1))
    empty = describe([])
    assert (empty.n, empty.mean, empty.ci_low) == (0, None, None)
    one = describe([0.3])  # one page: a mean, but no spread and no interval
    assert (one.mean, one.std, one.ci_low, one.ci_high) == (0.3, None, None, None)


def test_micro_and_macro_figures_on_hand_data() -> None:
    results = [result("a", "p1", Counts(tp=1, fp=0, fn=9, tn=0)),
               result("a", "p2", Counts(tp=90, fp=10, fn=0, tn=0))]
    word = summarize(results).get("a", "d").levels["word"]
    assert word.pages == 2
    assert word.counts == Counts(tp=91, fp=10, fn=9, tn=0)
    f1_page1, f1_page2 = 2 * 0.1 / 1.1, 2 * 0.9 / 1.9
    assert word.macro["f1"].mean == pytest.approx((f1_page1 + f1_page2) / 2)
    assert word.macro["precision"].mean == pytest.approx(0.95)
    assert word.micro["f1"] == pytest.approx(182 / 201)
    assert word.micro["precision"] == pytest.approx(91 / 101)
    assert word.micro["recall"] == pytest.approx(0.91)


def test_errors_count_as_scored_empty_output_and_skips_are_left_out() -> None:
    empty = Counts(tp=0, fp=0, fn=10, tn=5)
    results = [result("a", "p1", Counts(tp=10, fp=0, fn=0, tn=5)),
               result("a", "p2", empty, status="error"),
               result("a", "p3", None, status="error"),
               result("a", "p4", None, status="skipped")]
    row = summarize(results).get("a", "d")
    assert (row.pages, row.ok, row.errors, row.skipped, row.unscored) == (4, 1, 2, 1, 1)
    assert row.levels["word"].pages == 2
    assert row.levels["word"].macro["f1"].mean == pytest.approx(0.5)
    assert row.elapsed_ms_median == 5.0
    assert "block" not in row.levels


def test_block_level_only_where_blocks_were_scored() -> None:
    results = [result("a", "p1", Counts(tp=1), block=Counts(tp=2, fp=2)),
               result("a", "p2", Counts(tp=1), block=None)]
    block = summarize(results).get("a", "d").levels["block"]
    assert block.pages == 1
    assert block.macro["precision"].mean == pytest.approx(0.5)


def test_pooled_rows_with_several_datasets() -> None:
    results = [result("a", "p1", Counts(tp=1), dataset="x"),
               result("a", "p1", Counts(fn=1), dataset="y")]
    summary = summarize(results)
    assert [(r.dataset, r.pages) for r in summary.services] == [
        ("x", 1), ("y", 1), (ALL_DATASETS, 2)]
    assert summary.get("a", ALL_DATASETS).levels["word"].macro["f1"].mean == pytest.approx(0.5)


def test_wilcoxon_matches_scipy_on_shared_pages() -> None:
    rng = np.random.default_rng(11)
    results = []
    f1_a, f1_b = {}, {}
    for i in range(30):
        a = Counts(tp=int(rng.integers(1, 50)), fp=int(rng.integers(0, 30)), fn=3)
        b = Counts(tp=int(rng.integers(1, 50)), fp=int(rng.integers(0, 10)), fn=9)
        results += [result("a", f"p{i}", a), result("b", f"p{i}", b)]
        f1_a[f"p{i}"], f1_b[f"p{i}"] = a.f1, b.f1
    results.append(result("a", "only-a", Counts(tp=5)))  # not shared: left out of the test
    (test,) = summarize(results).pairwise
    expected = stats.wilcoxon([f1_a[f"p{i}"] for i in range(30)],
                              [f1_b[f"p{i}"] for i in range(30)])
    assert (test.service_a, test.service_b, test.n) == ("a", "b", 30)
    assert test.p_value == pytest.approx(float(expected.pvalue))
    assert test.statistic == pytest.approx(float(expected.statistic))
    assert test.p_holm == pytest.approx(test.p_value)  # one test: Holm changes nothing


def test_a_row_without_scored_pages_has_no_micro_figures() -> None:
    (row,) = summarize([result("a", "p1", None, status="skipped")]).services
    word = row.levels["word"]
    assert word.pages == 0
    assert set(word.micro.values()) == {None}


def test_significance_follows_the_signed_ranks_not_the_means() -> None:
    """a is better on 20 of 22 pages by a little, b on two by a lot: b has the higher
    mean, but the signed-rank test finds a significantly better, and the matrix says so."""
    from orchestrator.report import significance_matrices

    f1_a = {f"p{i}": 0.9 for i in range(22)}
    f1_b = {f"p{i}": 0.9 - 0.005 - 0.001 * i for i in range(20)} | {"p20": 0.1, "p21": 0.1}
    f1_a |= {"p20": 0.0, "p21": 0.0}
    f1_b |= {"p20": 0.9, "p21": 0.9}
    test = wilcoxon_test("d", "a", "b", f1_a, f1_b)
    assert (test.mean_a or 0) < (test.mean_b or 0)
    assert test.favours == "a"
    one_sided = stats.wilcoxon(list(f1_a.values()), [f1_b[k] for k in f1_a],
                               alternative="greater")
    assert one_sided.pvalue < 0.01
    results = [result(name, page, counts_with_f1(round(100 * f1), 100 - round(100 * f1),
                                                 100 - round(100 * f1)))
               for name, f1s in (("a", f1_a), ("b", f1_b)) for page, f1 in f1s.items()]
    ((_, _, rows),) = significance_matrices(summarize(results))
    cells = {row[0].split()[1]: row[1:] for row in rows}
    assert cells["a"] == ["", "+"]
    assert cells["b"] == ["-", ""]


def test_wilcoxon_zero_differences_and_too_few_pages() -> None:
    same = {f"p{i}": 0.5 for i in range(10)}
    identical = wilcoxon_test("d", "a", "b", same, dict(same))
    assert (identical.p_value, identical.statistic, identical.n_nonzero) == (1.0, None, 0)
    assert "identical" in identical.note
    few = wilcoxon_test("d", "a", "b", {"p1": 0.1, "p2": 0.2}, {"p1": 0.3, "p2": 0.9})
    assert (few.p_value, few.n) == (None, 2)
    assert "too few" in few.note
    none = wilcoxon_test("d", "a", "b", {"p1": 0.1}, {"p2": 0.3})
    assert (none.n, none.p_value) == (0, None)
    assert "no pages" in none.note


def test_holm_adjustment_by_hand() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_rows_rank_best_first_by_the_chosen_figure_and_files_are_never_in_sample() -> None:
    results = []
    for page in ("p1", "p2"):
        results.append(result("wide", page, counts_with_f1(9, 9, 0)))  # recall 1, precision .5
        results.append(result("narrow", page, counts_with_f1(6, 0, 4)))  # precision 1, recall .6
        results.append(result("fusion", page, counts_with_f1(8, 1, 1), dataset="scrapinghub"))
    results.append(result("wide", "p3", None, status="error"))
    results.append(result("narrow", "p3", None, status="error"))
    summary = summarize(results, files={"narrow"})
    by_f1 = [r.service for r in statistics.ranked(summary, "f1").services if r.dataset == "d"]
    assert by_f1 == ["narrow", "wide"]  # F1 (0.75 + 0.75 + 0) / 3 against (0.667 + 0.667 + 0) / 3
    assert statistics.rank_value(summary.get("wide", "d"), "rouge_lsum") is None
    assert summary.get("narrow", "d").source == "file"
    assert summary.get("fusion", "scrapinghub").in_sample  # its model was trained there
    assert not summary.get("wide", "d").in_sample
    assert summary.get("wide", "d").error_reasons == {"error: reason": 1}
    with pytest.raises(KeyError, match="known: f1"):
        statistics.ranked(summary, "speed")


def test_a_setting_that_bypasses_the_model_is_not_in_sample() -> None:
    """density's fixed, mean and Gaussian thresholds read the page alone: on the datasets
    its classifier was trained on, only the learned threshold's rows are in-sample."""
    rows = ("density", "density@fixed", "density@learned", "density@typo")
    results = [result(row, "p1", counts_with_f1(8, 1, 1), dataset="scrapinghub") for row in rows]
    options: dict[str, dict[str, object]] = {
        "density@fixed": {"threshold": "fixed", "value": 0.4},
        "density@learned": {"threshold": "learned"},
        "density@typo": {"threshold": "fixd"}}  # refused by the service: taken as learned
    summary = summarize(results, options=options)
    flagged = {row: summary.get(row, "scrapinghub").in_sample for row in rows}
    assert flagged == {"density": True, "density@fixed": False, "density@learned": True,
                       "density@typo": True}
    # Without the options every row of the learned service is flagged.
    assert all(summarize(results).get(row, "scrapinghub").in_sample for row in rows)


def test_in_sample_without_the_services_code_takes_the_model_as_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The orchestrator's image lacks the services' libraries: a row's options that
    cannot be read there neither fail the tables nor drop the flag."""
    from orchestrator.insample import in_sample
    from shared.registry import ServiceEntry

    assert not in_sample("density@fixed", "scrapinghub", {"threshold": "fixed"})

    def not_installed(self: ServiceEntry) -> None:
        raise ImportError(f"no module for {self.name}")

    monkeypatch.setattr(ServiceEntry, "algorithm", not_installed)
    assert in_sample("density@fixed", "scrapinghub", {"threshold": "fixed"})
    assert not in_sample("density@fixed", "no-such-dataset", {"threshold": "fixed"})


def test_equal_f1_from_different_counts_is_a_tie_not_a_difference() -> None:
    """2/3 from (tp 3, fp 1, fn 2) and from (tp 1, fp 0, fn 1) differ in the last bit."""
    a_counts, b_counts = Counts(tp=3, fp=1, fn=2, tn=0), Counts(tp=1, fp=0, fn=1, tn=0)
    assert a_counts.f1 != b_counts.f1
    assert a_counts.f1 == pytest.approx(b_counts.f1)
    pages = [f"p{i}" for i in range(8)]
    test = wilcoxon_test("d", "a", "b", dict.fromkeys(pages, a_counts.f1),
                         dict.fromkeys(pages, b_counts.f1))
    assert (test.n_nonzero, test.p_value, test.favours) == (0, 1.0, None)
    assert test.note == "identical F1 on every shared page"


def test_a_runs_summary_knows_each_rows_options() -> None:
    """The CLI's table and the API's results: a row whose options bypass the model is
    not in-sample where the same service with its model is."""
    from orchestrator.runner import RunSpec, run_summary

    spec = RunSpec(datasets=[], services=["density", "density@fixed"],
                   options={"density@fixed": {"threshold": "fixed"}})
    results = [result(row, "p1", Counts(tp=1, fp=0, fn=0, tn=0), dataset="scrapinghub")
               for row in spec.services]
    summary = run_summary(results, spec)
    assert summary.get("density", "scrapinghub").in_sample
    assert not summary.get("density@fixed", "scrapinghub").in_sample


def test_a_row_that_skipped_pages_others_scored_is_listed_but_not_ranked() -> None:
    """A feed matcher that answers 1 of 3 pages perfectly has the best mean, over one
    page: it follows the rows scored on all three, without a rank."""
    results = [result("feeds", "p1", counts_with_f1(9, 0, 0)),
               result("feeds", "p2", None, status="skipped"),
               result("feeds", "p3", None, status="skipped")]
    for page in ("p1", "p2", "p3"):
        results.append(result("good", page, counts_with_f1(8, 1, 1)))
        results.append(result("poor", page, counts_with_f1(5, 5, 5)))
    rows = statistics.ranked(summarize(results)).services
    assert [(r.service, r.rank) for r in rows if r.dataset == "d"] == [
        ("good", 1), ("poor", 2), ("feeds", None)]
    _, cells = table_rows(statistics.ranked(summarize(results)))
    assert [(c[0], c[1]) for c in cells if c[2] == "d"] == [
        ("1", "good"), ("2", "poor"), ("–", "feeds")]


@pytest.fixture(scope="module")
def trafilatura_settings(cleanportaleval: Path) -> list[PageResult]:
    """trafilatura's extracts of cleanportaleval in three settings, scored by word: rows
    that differ from the default on a few of the 70 pages (comments left out) or on none
    (tables left out: no article of the set has a table), as settings side by side do."""
    from orchestrator.scoring import PageReference, score_extraction
    from orchestrator.testsets import open_dataset_dir
    from services.trafilatura.extractor import ALGORITHM
    from shared.html import parse_html, visible_text
    from shared.tokens import tokenize

    settings = {"trafilatura": {}, "trafilatura@nc": {"include_comments": False},
                "trafilatura@notables": {"include_tables": False}}
    results = []
    for page in open_dataset_dir(cleanportaleval).pages():
        html = page.html_text()
        ref = PageReference(tokenize(visible_text(parse_html(html))), tokenize(page.gold))
        for row, options in settings.items():
            extraction = ALGORITHM.extract(html, ALGORITHM.options_model(**options), None)
            results.append(PageResult(
                run_id="r", dataset="cleanportaleval", page_id=page.id, service=row,
                status="ok", text=extraction.content_text(),
                scores=score_extraction(ref, extraction.content_text(), extraction.blocks)))
    return results


def _exact_signed_rank_p(differences: np.ndarray) -> float:
    """Two-sided p of the signed-rank sum under its exact null distribution given the
    ranks (Wilcoxon 1945; zero differences dropped, tied ranks averaged): every sign
    pattern equally likely, counted by subset sums of the doubled (integral) ranks."""
    differing = differences[differences != 0]
    ranks = np.rint(2 * stats.rankdata(np.abs(differing))).astype(int)
    ways = np.zeros(ranks.sum() + 1)
    ways[0] = 1.0
    for rank in ranks:
        ways[rank:] = ways[rank:] + ways[:-rank].copy()
    positive = ranks[differing > 0].sum()
    centre = ranks.sum() / 2
    sums = np.arange(ranks.sum() + 1)
    return float(ways[np.abs(sums - centre) >= abs(positive - centre)].sum() / ways.sum())


@pytest.mark.dataset
def test_settings_that_differ_on_a_few_pages_get_the_exact_test(
        trafilatura_settings: list[PageResult]) -> None:
    """Two settings of one service tie on most pages: the test ranks only the pages where
    they differ, and over those few its p-value is the exact one. scipy's `auto` counts
    the tied pages too, and past 50 (or 13 with any tie) takes the normal approximation,
    which on 16 differing pages is off by a factor of ten."""
    f1 = {row: {r.page_id: r.scores.word.f1 for r in trafilatura_settings
                if r.service == row and r.scores}
          for row in ("trafilatura", "trafilatura@nc")}
    test = wilcoxon_test("cleanportaleval", "trafilatura", "trafilatura@nc",
                         f1["trafilatura"], f1["trafilatura@nc"])
    pages = sorted(f1["trafilatura"])
    differences = np.round([f1["trafilatura"][p] - f1["trafilatura@nc"][p] for p in pages], 12)
    assert statistics.MIN_PAIRS <= test.n_nonzero < test.n == len(pages)  # ties on most pages
    assert test.p_value == pytest.approx(_exact_signed_rank_p(differences), rel=1e-9)


@pytest.mark.dataset
def test_rows_with_the_same_figure_share_their_rank(
        trafilatura_settings: list[PageResult]) -> None:
    """Leaving out tables changes no extract of cleanportaleval: the two rows have the
    same F1 on every page, and a rank between them would order them by name. They share
    the place (standard competition ranking, 1-2-2-4), and the next row's rank counts
    both."""
    summary = statistics.ranked(summarize(trafilatura_settings))
    means = {r.service: statistics.rank_value(r, "f1") for r in summary.services}
    assert means["trafilatura"] == means["trafilatura@notables"] != means["trafilatura@nc"]
    ranks = {r.service: r.rank or 0 for r in summary.services}
    assert ranks["trafilatura"] == ranks["trafilatura@notables"]
    assert sorted(ranks.values()) in ([1, 1, 3], [1, 2, 2])  # the third counts both
    _, cells = table_rows(summary)
    assert {c[1]: c[0] for c in cells} == {row: str(rank) for row, rank in ranks.items()}
