"""Shared fixtures: the development datasets (skipped with a reason where absent)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from shared.datasets import dataset_dir, datasets_root


def require_dataset(name: str) -> Path:
    path = dataset_dir(name)
    if path is None:
        pytest.skip(f"dataset {name!r} not found under {datasets_root()} "
                    "(set BOILERBENCH_DATASETS or place ../shared/datasets beside the repo)")
    return path


@pytest.fixture(scope="session")
def scrapinghub() -> Path:
    return require_dataset("scrapinghub")


@pytest.fixture(scope="session")
def published(scrapinghub: Path) -> Path:
    """scrapinghub's published/ folder: other tools' outputs as prediction files."""
    published = scrapinghub / "published"
    if not published.is_dir():
        pytest.skip(f"no published/ prediction files in {scrapinghub}")
    return published


@pytest.fixture(scope="session")
def cleaneval() -> Path:
    return require_dataset("cleaneval")


@pytest.fixture(scope="session")
def chaos() -> Path:
    return require_dataset("chaos")


@pytest.fixture(scope="session")
def cleanportaleval() -> Path:
    return require_dataset("cleanportaleval")


@pytest.fixture(scope="session")
def four_datasets(scrapinghub: Path, cleaneval: Path, chaos: Path, cleanportaleval: Path
                  ) -> list[Path]:
    """The four development datasets, in the order training lists them."""
    return [scrapinghub, cleaneval, chaos, cleanportaleval]


# Figures that tests measure and report, printed at the end of the pytest run. A test's
# lines travel on its call report, so they reach the summary from pytest-xdist's workers.
REPORTED: list[str] = []
SHOWN: list[str] = []


def report(line: str) -> None:
    """Record a measured figure for the terminal summary of this test run."""
    REPORTED.append(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    test_report = yield
    test_report.user_properties.extend(("measured figure", line) for line in REPORTED)
    REPORTED.clear()
    return test_report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    SHOWN.extend(str(value) for key, value in report.user_properties if key == "measured figure")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SHOWN:
        terminalreporter.section("measured figures")
        for line in SHOWN:
            terminalreporter.write_line(line)
