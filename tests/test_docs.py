"""The user's documents: README opens with the two-command quick start, every
`boilerbench` command line they show names a command and options that exist, and no
file of the product speaks of how its work was organised or of material outside the
repository (papers and specifications are cited instead)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import typer.main

from orchestrator.cli import app

ROOT = Path(__file__).resolve().parent.parent

# Built from pieces, so that this file does not match its own patterns.
_OUTSIDE = r"\.\./" + r"shared/(?:DESIGN|seeds)"
_SEED = r"\bseeds?[ /]" + r"0\d\d\b"
_ISSUE = r"\bissues?[ -]?#?" + r"\d+\b"
_SESSION = (r"\b(?:this|that|earlier|previous|last|next|later) " + r"sessions?\b"
            + r"|\bsessions? " + r"(?:before|after)\b")
FORBIDDEN = re.compile("|".join((_OUTSIDE, _SEED, _ISSUE, _SESSION)), re.IGNORECASE)

# Binary or generated data that is not prose or code.
SKIPPED_SUFFIXES = {".json", ".npz", ".png", ".gz", ".zip", ".warc"}


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    files = [ROOT / name for name in listed]
    return [f for f in files if f.is_file() and f.suffix not in SKIPPED_SUFFIXES
            and "sample" not in f.parts]


def test_readme_starts_with_the_two_command_quick_start() -> None:
    head = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:30]
    assert any(line.strip().lower() == "## quick start" for line in head)
    commands = [line for line in head if line.startswith("scripts/")]
    assert [c.split()[0] for c in commands] == ["scripts/demo", "scripts/test"]
    for command in commands:
        assert (ROOT / command.split()[0]).is_file()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^exec scripts/test\b", ci, re.MULTILINE)


def test_no_product_file_speaks_of_the_work_or_outside_material() -> None:
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_the_pattern_catches_what_it_is_for() -> None:
    for bad in ("see iss" + "ue 8", "the iss" + "ue-8 targets", "as in the previous ses" + "sion",
                "../" + "shared/DESIGN.md", "Seed " + "003 says", "see" + "ds/002"):
        assert FORBIDDEN.search(bad), bad
    for good in ("../shared/datasets/scrapinghub", "seed=0", "--seed 0", "a session cookie"):
        assert not FORBIDDEN.search(good), good


def documented_command_lines() -> list[tuple[str, str]]:
    """(file, line) of every `boilerbench ...` line in the code blocks of README, docs/
    and CONTRIBUTING, continuation lines joined and comments dropped."""
    found = []
    documents = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(ROOT.glob("docs/*.md"))]
    for path in documents:
        for block in re.findall(r"```[a-z]*\n(.*?)```", path.read_text(), re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip().removeprefix("$ ")
                if line.startswith("boilerbench "):
                    found.append((path.name, line))
    return found


def test_documented_commands_and_options_exist() -> None:
    lines = documented_command_lines()
    assert len(lines) > 30
    root = typer.main.get_command(app)
    for source, line in lines:
        words = shlex.split(line)[1:]
        command = root
        while words and (sub := getattr(command, "commands", {}).get(words[0])) is not None:
            command = sub
            words.pop(0)
        assert not hasattr(command, "commands"), f"{source}: no such command: {line}"
        options = {name for param in command.params
                   for name in (*param.opts, *param.secondary_opts)}
        for word in (word.strip("[]") for word in words):  # [--json]: optional
            if word.startswith("-") and word != "-":
                assert word.split("=")[0] in options, f"{source}: {word} unknown: {line}"
