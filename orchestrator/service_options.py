"""Options checked against each service's own options model before a run starts.

Every service validates its options per request (its `/info` publishes the same
model as `options_schema`), so a misspelt or mistyped option would otherwise fail
every page of the run, one by one. The orchestrator checks them up front with the
algorithm's options model, and names the service and the option.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from shared.contract import Options
from shared.registry import SERVICES, service_of


class OptionsError(ValueError):
    """Options a service would refuse (the message names the service and the option)."""


def options_model(row: str) -> type[Options] | None:
    """The options model of a run row's service (a registered one); None where the
    service's code is not installed here (the orchestrator's image has only its own
    libraries), so the service judges its own options."""
    try:
        return SERVICES[service_of(row)].algorithm().options_model
    except ImportError:
        return None


def _not_called(given: Iterable[str], rows: Sequence[str]) -> list[str]:
    return [name for name in given if name not in rows]


def check_called(given: Iterable[str], rows: Sequence[str], label: str) -> None:
    """OptionsError where `label` (the flag or field) gives options for a row the run
    does not call: a row label misspelt would otherwise run with default options."""
    not_called = _not_called(given, rows)
    if not_called:
        raise OptionsError(f"{label} names {', '.join(not_called)}, which this run does "
                           f"not call (its rows: {', '.join(rows)})")


def unused_options(configured: Iterable[str], rows: Sequence[str]) -> str | None:
    """One line naming the rows the configuration (file or BOILERBENCH_OPTIONS) gives
    options for but the run does not call, else None. A warning, not a refusal as
    check_called's: a configuration file is shared by runs that narrow --services, but
    a misspelt row label in it must not pass unseen."""
    unused = _not_called(configured, rows)
    if not unused:
        return None
    return (f"the configuration gives options for {', '.join(unused)}, which this run "
            f"does not call (its rows: {', '.join(rows)}); they are not used")


def check_options(options: Mapping[str, Mapping[str, Any]], json_values: bool = True
                  ) -> dict[str, Options]:
    """Each row's options as its service's model reads them, or OptionsError for the
    first row (a service or a setting of one) whose options the model refuses:
    strictly, as a service reads a JSON body's ("70" is no number), or with
    `json_values` false as it reads a query string's. A service whose code is not
    installed here is left to judge its own options (and has no entry)."""
    checked: dict[str, Options] = {}
    for name, values in options.items():
        if service_of(name) not in SERVICES:
            raise OptionsError(f"options for unknown service {name!r}")
        model = options_model(name)
        if model is None:
            continue
        try:
            checked[name] = model.model_validate(dict(values), strict=json_values)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "(options)"
            raise OptionsError(f"{name}: option {where!r}: {error['msg']}") from None
    return checked
