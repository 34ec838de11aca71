"""Which test pages a learned service was trained on, so its figures there are flagged.

A model scored on the pages it was trained on measures memory, not extraction:
tables mark such rows as in-sample, with how many of their pages are. The learned
services keep their models as JSON files in `services/<name>/model/`, or load the one
file BOILERBENCH_<NAME>_MODEL names (shared.modelfile.configured_model), which then
alone counts (this process's environment decides: a run's local and in-process
services inherit it). A file lists the digests of its training pages' HTML bytes in
`metadata.page_sha256` (shared.modelfile.page_digest), and a test page counts as
trained on when its own HTML's digest is among them, whatever the test set is called:
a renamed copy or a subset of a training set is flagged, and another set that merely
shares its name is not. A file without digests (an older model) names its training sets instead
(`metadata.trained_on`, `metadata.datasets[].name`), and then every page of a test
set of such a name counts. A service counts as trained on the union over its model
files. A row whose options bypass the model (density's thresholds other than
`learned`) is not flagged.

A run matches its pages when it is created (`trained_pages`, kept in its spec);
where the pages are not at hand (a run recorded before, benchmarks/quality.py on the
development datasets themselves) the test set's name decides (`in_sample`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.service_options import options_model
from orchestrator.testsets import Dataset, DatasetError
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


def training(service: str) -> Training:
    """What the model files the service loads were trained on: the configured file
    (BOILERBENCH_<SERVICE>_MODEL), else its shipped ones (nothing for a service without
    model files, or a row that is not a service). A file that cannot be read counts
    for nothing here; the service refuses to start on it."""
    configured = configured_model(service)
    folder = SERVICES_DIR / service / "model"
    paths = [configured] if configured is not None else \
        sorted(folder.glob("*.json")) if folder.is_dir() else []
    files = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((path, stat.st_mtime_ns, stat.st_size))
    return _training(tuple(files))


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


def trained_pages(rows: Iterable[str], datasets: Iterable[Dataset]
                  ) -> dict[str, dict[str, list[str]]]:
    """For each service the rows call that has a model: test set -> ids of its pages the
    model was trained on (sets and services without any left out). A page's HTML is
    digested as given: a file's bytes, or the UTF-8 of a page given as text (so a
    JSON test set's page matches only if its file was byte-identical UTF-8). A page
    that cannot be read counts as unseen; the run reports it."""
    services = {s: training(s) for s in dict.fromkeys(service_of(r) for r in rows)}
    services = {s: t for s, t in services.items() if t.digests or t.names}
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
