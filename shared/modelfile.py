"""Model files of the learned services (density, fusion): stable JSON with a checked header.

JSON loads without executing code (no pickle). Keys are sorted and separators fixed,
so one model gives one file byte for byte and a retrained model can be compared
with `cmp`. A file names its format, version and feature list; a loader refuses a
file whose header differs, since features computed by other code would silently
give wrong probabilities. Its metadata lists the digests of the pages it was trained
on (`page_digest`), so figures on those pages are flagged in-sample whatever the test
set is called (orchestrator.insample). A service loads its shipped file unless
BOILERBENCH_<SERVICE>_MODEL names one of the user's own (`load_model`), and its /info
names the file it loaded by the SHA-256 of its bytes (`model_info`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.contract import ModelInfo

LoadedModel = TypeVar("LoadedModel")

PAGE_DIGESTS = "page_sha256"
"""The metadata key of the sorted digests of a model's training pages (page_digest)."""
DIGEST_HEX = 12
"""Hex digits kept of each SHA-256: 48 bits. With about 1,300 training pages, an
unrelated test page matches one by chance with probability 1,300 / 2**48, about 5e-12
(a million test pages: 5e-6), and each page costs 15 bytes of the model file."""


def page_digest(html: bytes | str) -> str:
    """The digest a training page is recorded by: SHA-256 of its HTML file's bytes, as
    read, cut to DIGEST_HEX hex digits. A page that arrives as text (a JSON test set)
    is digested as UTF-8, so it matches only where its file was byte-identical UTF-8;
    another encoding or a re-serialised page counts as unseen."""
    data = html.encode("utf-8", "surrogatepass") if isinstance(html, str) else html
    return hashlib.sha256(data).hexdigest()[:DIGEST_HEX]


def check_header(data: dict[str, Any], format_name: str, version: int,
                 features: Sequence[str]) -> None:
    """Raise ValueError unless `data` is a `format_name` file of `version` over `features`."""
    if data.get("format") != format_name or data.get("version") != version:
        raise ValueError(f"not a {format_name} file of version {version}")
    if tuple(data["features"]) != tuple(features):
        raise ValueError(f"the model's features {data['features']} are not the "
                         f"{tuple(features)} this code computes")


def write_json(data: dict[str, Any], path: Path) -> None:
    """Write `data` as stable JSON (sorted keys, compact), creating the folder."""
    write_atomically(path, (json.dumps(data, sort_keys=True, separators=(",", ":"))
                            + "\n").encode("utf-8"))


def write_atomically(path: Path, data: bytes) -> None:
    """Write beside `path` and rename over it, creating the folder, so an interrupted
    or failed write leaves the previous file (or none), never half a model that a
    service would fail to load or half a cache that training would misread."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # as a plain write would (mkstemp makes 0600)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


class ModelFiles(BaseSettings):
    """Model files of one's own (`boilerbench train <service> --out FILE`) that the
    learned services load in place of their shipped ones, from the environment."""

    model_config = SettingsConfigDict(env_prefix="BOILERBENCH_", extra="ignore",
                                      env_ignore_empty=True)

    density_model: Path | None = Field(None, description="density's learned threshold.")
    fusion_model: Path | None = Field(None, description="fusion's block classifier.")
    ensemble_model: Path | None = Field(None, description="the ensemble's combiner.")


def configured_model(service: str) -> Path | None:
    """The model file BOILERBENCH_<SERVICE>_MODEL names, or None (the shipped one):
    what the service loads, and so what its in-sample flags must judge."""
    path: Path | None = getattr(ModelFiles(), f"{service}_model", None)
    return path


_LOADED: dict[str, ModelInfo] = {}
"""Service -> the model file this process last loaded for it (load_model)."""


def model_info(service: str, load: Callable[[], object]) -> Callable[[], ModelInfo]:
    """A learned service's Algorithm.model: `load` (its loader, cached per process)
    called, then the file it loaded named (its name, the SHA-256 of the bytes read, its
    recorded held-out figures): what its /info reports, so that a client of the service
    over HTTP judges its in-sample pages by that file, not by its own environment."""
    def loaded() -> ModelInfo:
        load()
        return _LOADED[service]
    return loaded


def _held_out_figures(data: Any) -> dict[str, float] | None:
    """metadata.leave_one_dataset_out.word_f1 of a model file, where it has that form."""
    metadata = data.get("metadata") if isinstance(data, dict) else None
    held_out = metadata.get("leave_one_dataset_out") if isinstance(metadata, dict) else None
    figures = held_out.get("word_f1") if isinstance(held_out, dict) else None
    try:
        return TypeAdapter(dict[str, float] | None).validate_python(figures)
    except ValidationError:  # a file of one's own may record them otherwise
        return None


def _load(service: str, path: Path, parse: Callable[[dict[str, Any]], LoadedModel]
          ) -> LoadedModel:
    """`parse` of the file's JSON, recorded with the digest of the very bytes parsed."""
    raw = path.read_bytes()
    data = json.loads(raw.decode("utf-8"))
    model = parse(data)
    _LOADED[service] = ModelInfo(file=path.name, sha256=hashlib.sha256(raw).hexdigest(),
                                 leave_one_dataset_out=_held_out_figures(data))
    return model


def load_model(service: str, shipped: Path, parse: Callable[[dict[str, Any]], LoadedModel]
               ) -> LoadedModel:
    """The service's model: `parse` of the configured file's JSON (configured_model),
    else of `shipped`'s (model_info then names it). A configured file that does not
    load (missing, cut short, another service's or version's) raises the
    ValidationError of a wrong setting, which stops a service at startup with one line
    naming the variable (shared.serving) instead of failing every page."""
    path = configured_model(service)
    if path is None:
        return _load(service, shipped, parse)
    try:
        return _load(service, path, parse)
    except OSError as exc:
        reason = f"cannot read {path}: {exc.strerror or exc}"
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        reason = f"{path} is no {service} model file ({type(exc).__name__}: {exc})"
    raise ValidationError.from_exception_data(ModelFiles.__name__, [{
        "type": "value_error", "loc": (f"{service}_model",), "input": str(path),
        "ctx": {"error": ValueError(" ".join(reason.split()))}}])
