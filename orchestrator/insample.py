"""Which test sets a learned service was trained on, so its figures there are flagged.

A model scored on the pages it was trained on measures memory, not extraction:
tables mark such rows as in-sample. The learned services keep their models as
JSON files in `services/<name>/model/`; a file names its training sets in
`metadata.trained_on` (a list of names) or `metadata.datasets[].name`, and a
service counts as trained on the union over its model files. A row whose options
bypass the model (density's thresholds other than `learned`) is not flagged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.service_options import options_model
from shared.registry import service_of

SERVICES_DIR = Path(__file__).resolve().parent.parent / "services"


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
def training_datasets(service: str) -> frozenset[str]:
    """Names of the test sets the service's shipped model files were trained on
    (empty for a service without model files, or a row that is not a service)."""
    folder = SERVICES_DIR / service / "model"
    names: set[str] = set()
    if not folder.is_dir():
        return frozenset()
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        metadata = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(metadata, dict):
            names.update(_names(metadata))
    return frozenset(names)


def in_sample(row: str, dataset: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether a run row's service, with the row's `options`, reads a model trained on
    pages of `dataset`. Options that bypass the model (Options.uses_model: density's
    fixed, mean and Gaussian thresholds) are never in-sample; options the service would
    refuse, or that cannot be read where its code is not installed, are taken as using
    it."""
    if dataset not in training_datasets(service_of(row)):
        return False
    model = options_model(row) if options else None
    if model is None:
        return True
    try:
        return model.model_validate(options).uses_model()
    except ValidationError:
        return True
