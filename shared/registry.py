"""Every algorithm service of the ensemble: name, default port, where its code lives,
and what its image and its requests need beyond the common case.

The launcher, the contract tests, the deployment files (services/Dockerfile's build
arguments and docker-compose.yml, checked against this list by tests/test_deploy.py),
the Kubernetes generator and the orchestrator all read this one list, so a new
service is added here once (CONTRIBUTING.md's checklist) and gets the rest for free.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from shared.contract import Algorithm
from shared.datasets import REPO_ROOT


class InputPage(Protocol):
    """What an input hook may read of a test page besides its HTML."""

    @property
    def id(self) -> str: ...

    @property
    def feed(self) -> str | None: ...


class InputSet(Protocol):
    """What an input hook may read of the test set a page belongs to."""

    @property
    def name(self) -> str: ...

    @property
    def has_feeds(self) -> bool: ...


class MissingInputError(Exception):
    """A test page lacks what a service needs besides the HTML (the message says
    what): the page is skipped for that service, not scored."""


PageOptionsHook = Callable[[InputPage, InputSet], dict[str, Any]]


@dataclass(frozen=True)
class ServiceEntry:
    name: str
    """The folder under services/, the optional-dependency group of pyproject.toml
    its image installs, and its name in the compose file and in Kubernetes."""
    port: int
    debian_packages: tuple[str, ...] = ()
    """Debian packages its code needs at run time (its image installs them, and so
    does scripts/setup, without the version pins)."""
    uses: tuple[str, ...] = ()
    """Other service folders whose modules its code imports (its image copies them)."""
    init: str | None = None
    """A Debian package run as the image's PID 1 in front of the server (tini reaps
    the orphans left by a killed worker, such as its browser processes)."""
    members: tuple[str, ...] = ()
    """Services it asks over HTTP (BOILERBENCH_MEMBER_URLS in its deployments)."""
    input_hook: str | None = None
    """`module:function` (a PageOptionsHook) giving the request options it needs from
    a test page besides the HTML, such as a feed; raises MissingInputError."""
    start_period_s: int = 60
    """How long its container may take to start before a failed health check counts."""
    text_peer: bool = False
    """A library that returns text: its blocks are that text mapped onto the page's
    visible blocks (shared.blockmap), and its options take `blocks: false` for the text
    alone, which a caller that maps the text itself (the ensemble) asks for."""

    @property
    def module(self) -> str:
        """Dotted path of the pure extractor module (it defines ALGORITHM)."""
        return f"services.{self.name}.extractor"

    @property
    def app_path(self) -> str:
        """uvicorn's `module:attribute` path of the service's ASGI app."""
        return f"services.{self.name}.app:app"

    def algorithm(self) -> Algorithm:
        algorithm: Algorithm = importlib.import_module(self.module).ALGORITHM
        return algorithm

    def build_args(self) -> dict[str, str]:
        """services/Dockerfile's build arguments for this service's image (the ones
        left at their empty default are omitted)."""
        args = {"SERVICE": self.name, "PORT": str(self.port),
                "DEBIAN_PACKAGES": " ".join(self.debian_packages),
                "USES": ",".join(self.uses), "INIT": self.init or ""}
        return {key: value for key, value in args.items() if value}


ORCHESTRATOR_PORT = 8000

SERVICES: dict[str, ServiceEntry] = {
    entry.name: entry
    for entry in (
        ServiceEntry("justext", 8001),
        # The JVM and Debian's Boilerpipe 1.2 jars (with nekohtml and xerces) for JPype;
        # the jars' version never moves in bookworm, the JRE's does with every security
        # release (an exact pin would stop building within weeks). The JVM starts slowly.
        ServiceEntry("boilerpipe", 8002,
                     debian_packages=("default-jre-headless", "libboilerpipe-java=1.2.0-2"),
                     start_period_s=90),
        ServiceEntry("bte", 8003),
        # Debian's chromium lays pages out for the measure htd (Playwright drives it).
        ServiceEntry("cetd", 8004, debian_packages=("chromium",), init="tini"),
        ServiceEntry("density", 8005),
        ServiceEntry("rss", 8006, input_hook="services.rss.inputs:feed_options"),
        ServiceEntry("trafilatura", 8007, text_peer=True),
        ServiceEntry("readability", 8008, text_peer=True),
        ServiceEntry("resiliparse", 8009, text_peer=True),
        # fusion computes the bte and cetd measures and reads jusText's stoplists.
        ServiceEntry("fusion", 8010, uses=("bte", "cetd", "justext")),
        # The ensemble computes fusion's block features and asks its members over HTTP
        # (services/ensemble/members.py's TRAINING_MEMBERS, which a test compares).
        ServiceEntry("ensemble", 8011, uses=("bte", "cetd", "justext", "fusion"),
                     members=("justext", "boilerpipe", "bte", "cetd", "trafilatura",
                              "readability", "resiliparse")),
    )
}


# shared/ modules only training runs: no service's answers depend on them.
TRAINING_ONLY = frozenset({"training.py", "learners.py"})


def code_digest(service: str | None, root: Path = REPO_ROOT) -> str:
    """sha256 (hex) over the files under `root` that a service's answers depend on: its
    folder and the folders it uses (code and model files), and shared/ but its
    training-only modules; for None, shared/ alone. Compiled files are left out. Caches
    of answers key on it, since a retrained model or edited code keeps the version."""
    names = () if service is None else (service, *SERVICES[service].uses)
    digest = hashlib.sha256()
    for folder in (*(Path("services") / name for name in names), Path("shared")):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts \
                    and not (folder.name == "shared" and path.name in TRAINING_ONLY):
                digest.update(f"{path.relative_to(root)}\n".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def get_service(name: str) -> ServiceEntry:
    try:
        return SERVICES[name]
    except KeyError:
        known = ", ".join(SERVICES)
        raise KeyError(f"unknown service {name!r}; known: {known}") from None


SETTING_MARK = "@"
"""A run row `<service>@<label>` is the service run with that row's own options, so
one run can score two settings of one service side by side (`trafilatura` and
`trafilatura@no-comments`), each a row of its own, both calling the one service."""

_SETTING_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")


def service_of(row: str) -> str:
    """The service a run row calls: `trafilatura@no-comments` -> `trafilatura`."""
    return row.partition(SETTING_MARK)[0]


def check_row(row: str) -> None:
    """Raise ValueError unless `row` is a service's name, or one with `@label` after it."""
    service, mark, label = row.partition(SETTING_MARK)
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
    if mark and not _SETTING_LABEL.fullmatch(label):
        raise ValueError(f"{row!r}: a setting's label after {SETTING_MARK!r} is 1-40 "
                         "letters, digits, '_' or '-', starting with a letter or digit")


@functools.cache
def _hook(path: str) -> PageOptionsHook:
    module, _, attribute = path.partition(":")
    hook: PageOptionsHook = getattr(importlib.import_module(module), attribute)
    return hook


def page_options(row: str, page: InputPage, test_set: InputSet) -> dict[str, Any]:
    """The request options a run row's service needs from `page` besides its HTML, from
    its registry entry's hook ({} for a service without one, or a row that is no
    service). Raises MissingInputError when the page lacks them."""
    entry = SERVICES.get(service_of(row))
    if entry is None or entry.input_hook is None:
        return {}
    return _hook(entry.input_hook)(page, test_set)
