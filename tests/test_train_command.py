"""`boilerbench train ...` reproduces a model file byte for byte.

The shipped models take minutes to train on the four datasets, so this runs the same
commands on the first pages of each dataset and compares the files with reference
files written by those commands (tests/data/*-limit4.json, regenerated with the
commands in REFERENCES when the training code changes on purpose). The full commands
(without --limit) reproduce the shipped model files the same way: see README.

The commands run as a user runs them, in a process of their own started without the
numeric pins (orchestrator/commands_train.py), which the command then sets itself: on
a machine with AVX2 or AVX-512, numpy's own tanh differs from the pinned one, so a
command that trained unpinned would write another network.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands_train import NUMERIC_PINS
from tests.helpers import write_test_set

DATA = Path(__file__).parent / "data"
LIMIT = 4
REFERENCES = {
    "density": DATA / f"density-limit{LIMIT}.json",
    "fusion": DATA / f"fusion-limit{LIMIT}.json",
}


def train_command(service: str, datasets: list[Path], out: Path) -> list[str]:
    return ["train", service, *(arg for d in datasets for arg in ("--dataset", str(d))),
            "--limit", str(LIMIT), "--workers", "1", "--out", str(out)]


@pytest.mark.dataset
@pytest.mark.parametrize("service", sorted(REFERENCES))
def test_train_command_reproduces_its_reference_file(service: str, four_datasets: list[Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / f"{service}.json"
    env = {k: v for k, v in os.environ.items() if k not in NUMERIC_PINS}
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli",
                             *train_command(service, four_datasets, out)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == REFERENCES[service].read_bytes()


@pytest.mark.parametrize("service", ["density", "fusion", "ensemble"])
def test_train_refuses_what_it_cannot_train_on(service: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # usage errors in one line
    page = "<html><body><p>Some words of a page.</p></body></html>"
    one = write_test_set(tmp_path / "one", {"a": (page, "Some words")})
    two = write_test_set(tmp_path / "two", {"b": (page, "Some words")})
    gold_missing = write_test_set(tmp_path / "three", {"c": (page, "Some words")})
    (gold_missing / "html" / "d.html").write_text(page, encoding="utf-8")
    cases = {"at least two datasets": [one],
             "named twice": [one, one],
             "a page without gold text": [one, two, gold_missing]}
    for message, folders in cases.items():
        args = ["train", service, *(a for d in folders for a in ("--dataset", str(d))),
                "--out", str(tmp_path / "model.json")]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output
    assert not (tmp_path / "model.json").exists()


PAGE = "<html><body><p>Some words of a page.</p></body></html>"


def two_sets(tmp_path: Path) -> list[Path]:
    return [write_test_set(tmp_path / name, {name: (PAGE, "Some words of a page.")})
            for name in ("one", "two")]


def refusal(args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The output of a command that must stop with a usage error, before any traceback."""
    from services.ensemble import cache

    monkeypatch.setenv("COLUMNS", "300")  # usage errors in one line
    # Were the refusal missing, ensemble training would store the members' answers.
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.output


@pytest.mark.parametrize("service", ["density", "fusion", "ensemble"])
def test_train_refuses_an_out_path_or_option_it_cannot_use(
        service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked before any page is labelled, not found when the model is written."""
    datasets = [a for d in two_sets(tmp_path) for a in ("--dataset", str(d))]
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("", encoding="utf-8")
    out = str(tmp_path / "model.json")
    cases = {"exists and is not a file": ["--out", str(tmp_path / "folder")],
             "file is not a folder": ["--out", str(tmp_path / "file" / "sub" / "m.json")],
             "'--seed'": ["--out", out, "--seed", "-1"],
             "'--workers'": ["--out", out, "--workers", "0"]}
    for message, options in cases.items():
        output = refusal(["train", service, *datasets, *options], monkeypatch, tmp_path)
        assert message in output, output
    assert not (tmp_path / "model.json").exists()


@pytest.mark.parametrize("service", ["density", "fusion"])
def test_train_refuses_datasets_it_cannot_learn_from(
        service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset left with no HTML page, or whose gold labels no unit as content, would
    give a model scored on nothing or one that keeps nothing."""
    good = two_sets(tmp_path)[0]
    not_html = write_test_set(tmp_path / "plain", {"p": ("plain text, no markup", "plain")})
    no_gold = write_test_set(tmp_path / "empty", {"e": (PAGE, "")})
    other_gold = write_test_set(tmp_path / "other", {"o": (PAGE, "nothing of the page")})
    cases = {"plain: no page to train on": not_html,
             "empty: none of its": no_gold,
             "other: none of its": other_gold}
    out = tmp_path / "model.json"
    for message, folder in cases.items():
        args = ["train", service, "--dataset", str(good), "--dataset", str(folder),
                "--workers", "1", "--out", str(out)]
        output = refusal(args, monkeypatch, tmp_path)
        assert message in output, output
    assert not out.exists()


def test_train_ensemble_refuses_costs_from_a_file_without_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read before the members' answers are computed, not after."""
    datasets = [a for d in two_sets(tmp_path) for a in ("--dataset", str(d))]
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    fusion_model = Path(__file__).parent.parent / "services/fusion/model/fusion-v2.json"
    for costs in (broken, fusion_model):
        output = refusal(["train", "ensemble", *datasets, "--costs-from", str(costs),
                          "--out", str(tmp_path / "model.json")], monkeypatch, tmp_path)
        assert "is not an ensemble model file" in output, output
    assert not (tmp_path / "model.json").exists()


def test_an_interrupted_model_write_leaves_the_previous_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while a model file is written must not leave half a model behind."""
    import shared.modelfile

    out = tmp_path / "model.json"
    out.write_text('{"old": true}\n', encoding="utf-8")

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        shared.modelfile.write_json({"new": list(range(1000))}, out)
    assert out.read_text(encoding="utf-8") == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]


def test_train_pairs_pages_as_a_test_set_and_prints_their_warnings_as_they_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gold file named in NFD with an upper-case suffix is a page's gold, as a run
    pairs it, not a page "without gold text"; a gold file without its page is said in
    a warning that shows its name as it is, brackets included."""
    import unicodedata

    monkeypatch.setenv("COLUMNS", "300")
    sets = [write_test_set(tmp_path / name, {f"{name}{i}": (PAGE, "Some words of a page.")
                                             for i in range(3)})
            for name in ("one", "two")]
    (sets[0] / "html" / "café.html").write_text(PAGE, encoding="utf-8")
    (sets[0] / "content" / unicodedata.normalize("NFD", "café.TXT")).write_text(
        "Some words", encoding="utf-8")
    (sets[1] / "content" / "notes[red].txt").write_text("words", encoding="utf-8")
    args = ["train", "density", *(a for d in sets for a in ("--dataset", str(d))),
            "--workers", "1", "--out", str(tmp_path / "model.json")]
    result = CliRunner().invoke(app, args)
    assert "without gold text" not in result.output, result.output
    assert "two: content/notes[red].txt has no html/notes[red].html" in result.output, \
        result.output
    assert "one: 4 pages" in result.output, result.output


def test_train_ensemble_limit_takes_the_first_pages_of_each_dataset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As density's and fusion's --limit: the members are asked on those pages alone, a
    stored file of every page serves a limited run, and a limited one never stands in
    for every page."""
    import json

    from services.ensemble import cache, training

    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(training, "TRAINING_MEMBERS", ("bte",))  # one member: quick
    monkeypatch.setattr(training, "LEARNED_MEMBERS", ())
    words = "Some words of a page about its subject, and more words after them."
    sets = [write_test_set(tmp_path / name, {
        f"{name}{i}": (f"<html><body><p>{words}</p><p>Menu Home</p></body></html>", words)
        for i in range(3)}) for name in ("one", "two")]
    out = tmp_path / "model.json"

    def train(*limit: str) -> tuple[str, dict[str, int]]:
        args = ["train", "ensemble", *(a for d in sets for a in ("--dataset", str(d))),
                *limit, "--workers", "1", "--out", str(out)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        metadata = json.loads(out.read_text(encoding="utf-8"))["metadata"]
        return result.output, {d["name"]: d["pages"] for d in metadata["datasets"]}

    output, pages = train("--limit", "1")
    assert pages == {"one": 1, "two": 1}
    assert "one: computing bte on 1 pages" in output, output
    output, pages = train()
    assert pages == {"one": 3, "two": 3}
    assert "one: computing bte on 3 pages" in output, output
    output, pages = train("--limit", "2")
    assert pages == {"one": 2, "two": 2}
    assert "computing" not in output, output


def test_train_ensemble_says_when_it_asks_no_member_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small datasets can leave the cheapest set as good as any: no member at all."""
    from types import SimpleNamespace

    from services.ensemble import training

    def trained(*_: object, **__: object) -> SimpleNamespace:
        return SimpleNamespace(default_members=(), metadata={
            "evaluation": {"default_members": {"one": 0.9, "two": 0.8}}})

    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(training, "train", trained)
    args = ["train", "ensemble", *(a for d in two_sets(tmp_path) for a in ("--dataset", str(d))),
            "--out", str(tmp_path / "model.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "(default members none)" in result.output, result.output


@pytest.mark.parametrize("service", ["density", "fusion"])
def test_train_warns_when_two_datasets_hold_the_same_pages(
        service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A set of one's own copied from one it is trained beside: leaving either out still
    trains on its pages, which the held-out figures must not hide."""
    monkeypatch.setenv("COLUMNS", "300")
    words = "Some words of a page about its subject."
    page = f"<html><body><p>{words}</p><p>Menu Home</p></body></html>"
    sets = [write_test_set(tmp_path / "one", {"a": (page, words), "b": (PAGE, words)}),
            write_test_set(tmp_path / "two", {"renamed": (page, words)}),
            write_test_set(tmp_path / "three", {"c": (PAGE + " ", words)})]
    args = ["train", service, *(a for d in sets for a in ("--dataset", str(d))),
            "--workers", "1", "--out", str(tmp_path / "model.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "one and two hold 1 of the same pages" in result.output, result.output
    assert result.output.count("of the same pages") == 1, result.output  # not three's
