"""Which test pages a learned service was trained on, so its figures there are flagged.

A model scored on the pages it was trained on measures memory, not extraction:
tables mark such rows as in-sample, with how many of their pages are. The learned
services keep their models as JSON files in `services/<name>/model/`, or load the one
file BOILERBENCH_<NAME>_MODEL names (shared.modelfile.configured_model), which then
alone counts (this process's environment decides: a run's local and in-process
services inherit it). A service called over HTTP at an address the run does not start
it on may load another file: its /info names the file by the SHA-256 of its bytes, and
the flags follow the file here with that digest, the configured or a shipped one
(`served_trainings`); where none has it, which pages are in-sample is unknown, and the
rows say so (`in_sample_unknown`) instead of guessing.

A file lists the digests of its training pages' HTML bytes in `metadata.page_sha256`
(shared.modelfile.page_digest), and a test page counts as trained on when its own
HTML's digest is among them, whatever the test set is called: a renamed copy or a
subset of a training set is flagged, and another set that merely shares its name is
not. A file without digests (an older model) names its training sets instead
(`metadata.trained_on`, `metadata.datasets[].name`), and then every page of a test
set of such a name counts. A service counts as trained on the union over its model
files. A row whose options bypass the model (density's thresholds other than
`learned`) is not flagged.

A run matches its pages when it is created (`trained_pages`, kept in its spec);
where the pages are not at hand (a run recorded before, benchmarks/quality.py on the
development datasets themselves) the test set's name decides (`in_sample`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from orchestrator.service_options import options_model
from orchestrator.testsets import Dataset, DatasetError
from shared.contract import bearer_header
from shared.modelfile import PAGE_DIGESTS, configured_model, page_digest
from shared.registry import service_of

SERVICES_DIR = Path(__file__).resolve().parent.parent / "services"

TrainedPages = Mapping[str, Mapping[str, Collection[str]]]
"""Service -> test set -> ids of its pages the service's model was trained on."""


@dataclass(frozen=True)
class Training:
    """What a service's model files say they were trained on."""

    digests: frozenset[str]
    """The pages of the files that list them (page_digest)."""
    names: frozenset[str]
    """The test sets of the files that list no pages: every page of a set so named."""
    all_names: frozenset[str]
    """Every file's test sets: what decides where a test set's pages are unknown."""


def _names(metadata: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    trained_on = metadata.get("trained_on")
    if isinstance(trained_on, list):
        names.update(str(n) for n in trained_on)
    elif isinstance(trained_on, str):
        names.add(trained_on)
    for entry in metadata.get("datasets") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            names.add(entry["name"])
    return names


@cache
def _training(files: tuple[tuple[Path, int, int], ...]) -> Training:
    """What the model files were trained on, kept while each file's (path, mtime, size)
    stays: a model retrained under a running API is read again."""
    digests: set[str] = set()
    names: set[str] = set()
    all_names: set[str] = set()
    for path, *_ in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        metadata = data.get("metadata") if isinstance(data, dict) else None
        if not isinstance(metadata, dict):
            continue
        named = _names(metadata)
        all_names.update(named)
        listed = metadata.get(PAGE_DIGESTS)
        if isinstance(listed, list):
            digests.update(str(d) for d in listed)
        else:
            names.update(named)
    return Training(frozenset(digests), frozenset(names), frozenset(all_names))


def _stamped(paths: Iterable[Path]) -> tuple[tuple[Path, int, int], ...]:
    """Each file that can be found, with its mtime and size (what the caches key on)."""
    files = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((path, stat.st_mtime_ns, stat.st_size))
    return tuple(files)


def _shipped(service: str) -> list[Path]:
    folder = SERVICES_DIR / service / "model"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def training(service: str) -> Training:
    """What the model files the service loads were trained on: the configured file
    (BOILERBENCH_<SERVICE>_MODEL), else its shipped ones (nothing for a service without
    model files, or a row that is not a service). A file that cannot be read counts
    for nothing here; the service refuses to start on it."""
    configured = configured_model(service)
    return _training(_stamped([configured] if configured is not None else _shipped(service)))


@cache
def _sha256(path: Path, mtime_ns: int, size: int) -> str | None:
    """The file's SHA-256 (what /info names a model by), kept while it is unchanged."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def served_training(service: str, info: Mapping[str, Any] | None) -> Training | None:
    """What the model a service names in its /info (`info`; None where it could not be
    read) was trained on: that of the model file here (this environment's configured
    one, or a shipped one) with the SHA-256 the service names; nothing where it names no
    model. None, unknown, where it names a file none here has, or no model at all (an
    /info without `model`: an older service)."""
    if info is not None and "model" in info and info["model"] is None:
        return _training(())
    model = info.get("model") if info is not None else None
    digest = model.get("sha256") if isinstance(model, Mapping) else None
    if not isinstance(digest, str):
        return None
    here = [path for path in (configured_model(service), *_shipped(service)) if path]
    for stamp in _stamped(here):
        if _sha256(*stamp) == digest:
            return _training((stamp,))
    return None


def _unknown_model(service: str, url: str, info: Mapping[str, Any] | None) -> str:
    """The run's warning for a service whose model served_training does not know."""
    model = info.get("model") if info is not None else None
    variable = f"BOILERBENCH_{service.upper()}_MODEL"
    hint = ""
    if isinstance(model, Mapping):
        said = (f"loads the model file {model.get('file')!r} (sha256 "
                f"{str(model.get('sha256'))[:12]}...), which is not here (the shipped one, "
                f"or {variable}'s)")
        hint = f"; {variable} naming that file here would flag them"
    elif info is None:
        said = "did not answer /info with its model file"
    else:
        said = "names no model file in its /info (a service older than this orchestrator)"
    return (f"{service} at {url} {said}: which test pages it was trained on is unknown, so "
            f"its rows are flagged `in-sample unknown`{hint}")


def served_trainings(urls: Mapping[str, str], token: str | None = None,
                     timeout: float = 10.0, infos: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> tuple[dict[str, Training | None], list[str]]:
    """For each learned service (one with model files here) at its URL, the training of
    the model it reports in /info (served_training; None: unknown), and a warning for
    each unknown one. A service called over HTTP runs where this process's environment
    does not reach, perhaps with a model file of its own. `infos`: the /info replies
    already read, by service (the run's check of its services); only a service without
    one is asked."""
    learned = {service: url for service, url in urls.items()
               if configured_model(service) is not None or _shipped(service)}
    infos = infos or {}
    found: dict[str, Training | None] = {}
    warnings: list[str] = []
    if not learned:
        return found, warnings
    with httpx.Client(headers=bearer_header(token), timeout=timeout) as client:
        for service, url in learned.items():
            info = infos[service] if service in infos else _read_info(client, url)
            found[service] = served_training(service, info)
            if found[service] is None:
                warnings.append(_unknown_model(service, url, info))
    return found, warnings


def _read_info(client: httpx.Client, url: str) -> dict[str, Any] | None:
    """The service's /info, or None where it could not be read."""
    try:
        reply = client.get(f"{url}/info")
        info = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        info = None
    return info if isinstance(info, dict) else None


def uses_model(row: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether a run row's service, with the row's `options`, reads its model. Options
    that bypass it (Options.uses_model: density's fixed, mean and Gaussian thresholds)
    do not; options the service would refuse, or that cannot be read where its code is
    not installed, are taken as using it."""
    model = options_model(row) if options else None
    if model is None:
        return True
    try:
        return model.model_validate(options).uses_model()
    except ValidationError:
        return True


def in_sample(row: str, dataset: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether the row reads a model trained on a test set named `dataset`: the rule
    where the test set's pages are not at hand (module docstring)."""
    return dataset in training(service_of(row)).all_names and uses_model(row, options)


def trained_pages(rows: Iterable[str], datasets: Iterable[Dataset],
                  served: Mapping[str, Training | None] | None = None
                  ) -> dict[str, dict[str, list[str]]]:
    """For each service the rows call that has a model: test set -> ids of its pages the
    model was trained on (sets and services without any left out). A page's HTML is
    digested as given: a file's bytes, or the UTF-8 of a page given as text (so a
    JSON test set's page matches only if its file was byte-identical UTF-8). A page
    that cannot be read counts as unseen; the run reports it. `served`: the training of
    the models services called over HTTP report (served_trainings), in place of this
    environment's (training); a service whose model is unknown (None) is left out."""
    served = served or {}
    services: dict[str, Training] = {}
    for service in dict.fromkeys(service_of(r) for r in rows):
        trained = served[service] if service in served else training(service)
        if trained is not None and (trained.digests or trained.names):
            services[service] = trained
    found: dict[str, dict[str, list[str]]] = {}
    if not services:
        return found
    for dataset in datasets:
        digests: dict[str, str] = {}
        for page_id in dataset.ids:
            try:
                digests[page_id] = page_digest(dataset.page(page_id).html)
            except (DatasetError, OSError):
                continue
        for service, trained in services.items():
            ids = list(dataset.ids) if dataset.name in trained.names else \
                [i for i, digest in digests.items() if digest in trained.digests]
            if ids:
                found.setdefault(service, {})[dataset.name] = sorted(ids)
    return found


def in_sample_pages(row: str, pages: Iterable[tuple[str, str]],
                    options: Mapping[str, Any] | None = None,
                    trained: TrainedPages | None = None) -> int:
    """How many of `pages` ((test set, page id) pairs) the row's model was trained on:
    those `trained` lists for its service (trained_pages), or, where that is None (the
    pages were not matched), those of a test set named as a training set (in_sample).
    0 where the row's options bypass the model."""
    service = service_of(row)
    if trained is None:
        names = training(service).all_names
        count = sum(dataset in names for dataset, _ in pages)
    else:
        mine = trained.get(service, {})
        sets = {name: set(ids) for name, ids in mine.items()}
        count = sum(page_id in sets.get(dataset, set()) for dataset, page_id in pages)
    return count if count and uses_model(row, options) else 0


def in_sample_unknown(row: str, options: Mapping[str, Any] | None,
                      unknown: Collection[str]) -> bool:
    """Whether the row reads a model whose training pages are unknown: its service is
    among `unknown` (served_trainings found no model file here with the SHA-256 its
    /info names) and its options do not bypass the model."""
    return service_of(row) in unknown and uses_model(row, options)
