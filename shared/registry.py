"""Every algorithm service of the ensemble: name, default port, where its code lives.

The launcher, the contract tests, the deployment checks and the orchestrator all
read this one list, so a new service is added here once and gets the rest for free.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from shared.contract import Algorithm


@dataclass(frozen=True)
class ServiceEntry:
    name: str
    port: int

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


ORCHESTRATOR_PORT = 8000

SERVICES: dict[str, ServiceEntry] = {
    entry.name: entry
    for entry in (
        ServiceEntry("justext", 8001),
        ServiceEntry("boilerpipe", 8002),
        ServiceEntry("bte", 8003),
        ServiceEntry("cetd", 8004),
        ServiceEntry("density", 8005),
        ServiceEntry("rss", 8006),
        ServiceEntry("trafilatura", 8007),
        ServiceEntry("readability", 8008),
        ServiceEntry("resiliparse", 8009),
        ServiceEntry("fusion", 8010),
        ServiceEntry("ensemble", 8011),
    )
}


def get_service(name: str) -> ServiceEntry:
    try:
        return SERVICES[name]
    except KeyError:
        known = ", ".join(SERVICES)
        raise KeyError(f"unknown service {name!r}; known: {known}") from None
