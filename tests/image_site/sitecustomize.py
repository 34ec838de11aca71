"""Loaded by every Python process started with this folder on PYTHONPATH (the site
module imports `sitecustomize`): modules that a service's image would not hold cannot
be imported, so the process behaves as it would in that image.

BOILERBENCH_IMAGE_BLOCKED lists top-level modules installed here but not in the image
(comma-separated), BOILERBENCH_IMAGE_FOLDERS the service folders the image copies."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

_BLOCKED = frozenset(filter(None, os.environ.get("BOILERBENCH_IMAGE_BLOCKED", "").split(",")))
_FOLDERS = frozenset(filter(None, os.environ.get("BOILERBENCH_IMAGE_FOLDERS", "").split(",")))


class _NotInImage(MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        parts = name.split(".")
        if parts[0] in _BLOCKED or (parts[0] == "services" and len(parts) > 1
                                    and parts[1] not in _FOLDERS):
            raise ModuleNotFoundError(f"No module named {name!r} in this image", name=name)
        return None


if _BLOCKED or _FOLDERS:
    sys.meta_path.insert(0, _NotInImage())
