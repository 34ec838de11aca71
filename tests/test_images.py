"""Each algorithm service runs with only what its image holds.

services/Dockerfile installs pyproject's core dependencies and the service's own group
and copies shared/ and the service folders of its registry entry (`uses`). Here each
service runs as it is deployed (`python -m shared.serving services.<name>.app:app`)
with every other installed package made unimportable (tests/image_site), and answers a
page: a module imported from a package that its group does not bring, or from a
service folder it does not declare, fails here as it would fail in the image."""

from __future__ import annotations

import json
import tomllib
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from shared.registry import SERVICES
from tests.helpers import REPO, SAMPLE
from tests.servers import serve_process

SITE = Path(__file__).resolve().parent / "image_site"
# What `python -m venv` puts in every image's virtualenv besides the requirements.
VENV_BASE = ("pip", "setuptools")
PAGE = "news-harbour-ferry"  # the sample page that has an RSS feed


def image_distributions(group: str) -> set[str]:
    """The distributions an image installs: the core and `group`, with everything they
    require (markers and extras evaluated as pip would here)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [(Requirement(r), "") for r in
            [*project["dependencies"], *project["optional-dependencies"][group], *VENV_BASE]]
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        found.add(name)
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing of it can be imported either
        for line in requires:
            for wanted in sorted(requirement.extras) or [""]:
                todo.append((Requirement(line), wanted))
    return found


def blocked_modules(group: str) -> set[str]:
    """Top-level modules installed here that the image of `group` would not hold."""
    allowed = image_distributions(group)
    blocked = {module for module, names in metadata.packages_distributions().items()
               if not any(canonicalize_name(n) in allowed for n in names)}
    # The project's own folders: an algorithm image copies shared/ and services/ only.
    return (blocked | {"orchestrator", "benchmarks", "tests"}) - {"shared", "services"}


def test_the_image_check_catches_a_package_missing_from_a_group() -> None:
    """selectolax comes only with the groups that list it, and lxml with the core."""
    assert "selectolax" in blocked_modules("density")
    assert "selectolax" not in blocked_modules("bte")
    assert "lxml" not in blocked_modules("density")
    assert "trafilatura" in blocked_modules("readability")


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_a_service_answers_with_only_its_image_installed(name: str) -> None:
    entry = SERVICES[name]
    env = {"PYTHONPATH": str(SITE),
           "BOILERBENCH_IMAGE_BLOCKED": ",".join(sorted(blocked_modules(name))),
           "BOILERBENCH_IMAGE_FOLDERS": ",".join([name, *entry.uses]),
           "BOILERBENCH_WORKERS": "1"}
    html = (SAMPLE / "html" / f"{PAGE}.html").read_text()
    options = ({"feed": (SAMPLE / "feeds" / f"{PAGE}.xml").read_text()} if name == "rss"
               else {})
    with serve_process(f"services.{name}.app:app", env, timeout=90.0) as (url, _):
        reply = httpx.post(f"{url}/extract", json={"html": html, "options": options},
                           timeout=60.0)
    assert reply.status_code == 200, reply.text[:500]
    body = reply.json()
    assert body["algorithm"] == name
    assert "ferry" in body["text"].lower(), json.dumps(body)[:500]
