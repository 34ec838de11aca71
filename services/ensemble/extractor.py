"""ensemble: a learned combiner over the other extractors' answers.

For each page the members (other algorithm services) are asked for their extraction,
every answer is mapped onto the page's text blocks next to fusion's block measures
(services/ensemble/features.py), and gradient-boosted trees (services/ensemble/model.py,
trained by `boilerbench train ensemble`, leave-one-dataset-out) decide each block.

Members are reached over HTTP where a URL is configured for them
(BOILERBENCH_MEMBER_URLS: every request written first, the page's own features computed
while the members work, the replies read within BOILERBENCH_MEMBER_TIME_LIMIT_S)
and run inside this process otherwise (one after the other; those not started within
that time are left out). A member that is missing, down, slow or failing is a missing
feature: the trees were trained with members dropped at random. The reply's `details`
names the members asked, those that answered and why the others did not; `fallback` is
true when none answered and the blocks were decided on the page's own features alone.
"""

from __future__ import annotations

import functools
import logging
import time
from importlib.metadata import version
from typing import Any

from pydantic import Field, field_validator
from pydantic.config import JsonDict

from services.ensemble.features import MemberFigures, figures_matrix, member_figures
from services.ensemble.members import (
    HttpMembers,
    MemberAnswer,
    ask_in_process,
    member_algorithm,
)
from services.ensemble.model import default_model
from services.fusion.features import PageFeatures, page_features, stoplists
from shared.contract import Algorithm, Block, Extraction, Options
from shared.flatpage import tree_details
from shared.modelfile import model_info
from shared.registry import SERVICES
from shared.settings import ServiceSettings

# Pages past these sizes (ten times the largest labelled page's) get no in-process
# members: the ensemble then costs what fusion does, and stays within its time limit.
MAX_BLOCKS = 10_000
MAX_WORDS = 300_000
# How long this worker steps aside once the requests to its members are out, before
# its own features: a member's server woken on this worker's core would otherwise wait
# behind that CPU-bound work (off the page's critical path) on a machine of few cores,
# and start on the page late (benchmarks/results/speed-history.md measures it).
MEMBERS_FIRST_S = 0.0005


def _member_names(schema: JsonDict) -> None:
    """The names `members` takes (the model's), listed in /info's schema."""
    kinds = schema.get("anyOf")
    for kind in kinds if isinstance(kinds, list) else []:
        if isinstance(kind, dict) and kind.get("type") == "array":
            kind["items"] = {"enum": list(default_model().members), "type": "string"}


class EnsembleOptions(Options):
    members: list[str] | None = Field(
        None, description="Ask only these members (a subset of the model's; an empty list "
        "asks none). Default: the model's default members, the cheapest set that kept its "
        "leave-one-dataset-out accuracy.", json_schema_extra=_member_names)

    @field_validator("members")
    @classmethod
    def _known(cls, members: list[str] | None) -> list[str] | None:
        if members is None:
            return None
        known = default_model().members
        unknown = [m for m in members if m not in known]
        if unknown:
            raise ValueError(f"not members of the model: {unknown}; known: {list(known)}")
        return [m for m in known if m in members]


@functools.cache
def member_time_limit() -> float:
    """How long the members may take on a page: BOILERBENCH_MEMBER_TIME_LIMIT_S, at most
    half the service's time limit (over HTTP: each member's; in this process: all of
    them together, the members not started by then count as missing)."""
    settings = ServiceSettings()
    return min(settings.member_time_limit_s, settings.time_limit_s / 2)


@functools.cache
def http_members() -> HttpMembers | None:
    """The members configured with a URL, or None (every member in-process)."""
    settings = ServiceSettings()
    urls = {name: url.rstrip("/") for name, url in settings.member_urls.items()
            if name in default_model().members}
    if not urls:
        return None
    return HttpMembers(urls, member_time_limit(), settings.token, settings.max_reply_bytes)


def extract(html: str, options: EnsembleOptions, url: str | None = None) -> Extraction:
    started = time.perf_counter()
    model = default_model()
    names = list(model.default_members if options.members is None else options.members)
    http = http_members()
    remote = [n for n in names if http is not None and n in http.urls]
    pending = http.send(remote, html, url) if http is not None and remote else None
    if pending is not None and pending.sent:
        time.sleep(MEMBERS_FIRST_S)
    page = page_features(html)  # while the members over HTTP work
    answers: dict[str, MemberAnswer] = {}
    figures: dict[str, MemberFigures | None] = {}

    def take(answer: MemberAnswer) -> None:  # mapped at once, while slower members work
        answers[answer.member] = answer
        figures[answer.member] = member_figures(page, answer)

    budget_end = started + member_time_limit()
    unsafe = _unsafe_in_process(page)
    for name in names:
        if name in remote:
            continue
        if unsafe:
            take(MemberAnswer(name, None, None, error=unsafe))
        elif time.perf_counter() > budget_end:
            take(MemberAnswer(name, None, None, error="the page's time for members in "
                              "this process was spent"))
        else:
            take(ask_in_process(name, html, url))
    if pending is not None:
        pending.collect(take)
    smoothed, keep = model.decide(figures_matrix(page, figures, model.members,
                                                 model.fusion_columns))
    blocks = [
        Block(text=block.text, is_content=bool(kept), score=round(float(p), 4), path=block.path)
        for block, p, kept in zip(page.blocks, smoothed, keep, strict=True)
    ]
    answered = [n for n in names if answers[n].answered]
    details: dict[str, Any] = {
        "members_asked": names,
        "members_answered": answered,
        "members_missing": {n: answers[n].error or "no answer" for n in names
                            if not answers[n].answered},
        "fallback": not answered,
        **(tree_details(page.tree) or {}),
    }
    return Extraction(blocks, details=details)


def _unsafe_in_process(page: PageFeatures) -> str | None:
    """Why no member may run in this process on the page, if one may not: each parses
    the page again, and one started here cannot be stopped, so a page too large, or one
    lexbor would take quadratic time on (parsed by lxml here, shared.flatpage), would
    spend the service's time limit inside one member."""
    if len(page.blocks) > MAX_BLOCKS or sum(map(len, page.tokens)) > MAX_WORDS:
        return "the page is too large to run members in this process"
    if page.tree != "html5":
        return ("the page is nested too deeply (or has too many <option>s) to run members "
                "in this process")
    return None


def _warm_up() -> None:
    """Load the model, fusion's stoplists and the in-process default members."""
    model = default_model()
    stoplists()
    http = http_members()
    for name in model.default_members:
        if http is None or name not in http.urls:
            try:
                member_algorithm(name)
            except ImportError as exc:  # the ensemble's image holds no member's code
                logging.getLogger("boilerbench.ensemble").warning(
                    "default member %s is not installed here (%s) and has no URL in "
                    "BOILERBENCH_MEMBER_URLS: every page is answered without it", name, exc)
                continue
            ask_in_process(name, "<html><body><p>warm up</p></body></html>", None)


def _details() -> dict[str, Any]:
    """/info's details: the members (version where installed here, URL where asked over
    HTTP, whether asked by default) and the model's leave-one-dataset-out figures."""
    model = default_model()
    urls = ServiceSettings().member_urls
    members: dict[str, dict[str, Any]] = {}
    for name in model.members:
        try:
            member_version: str | None = SERVICES[name].algorithm().version
        except Exception:  # not installed here: reached over HTTP or missing
            member_version = None
        members[name] = {"version": member_version, "url": urls.get(name),
                         "default": name in model.default_members}
    evaluation = model.metadata.get("evaluation", {})
    held_out = model.metadata.get("leave_one_dataset_out", {})
    return {"members": members,
            "leave_one_dataset_out": {**{k: evaluation.get(k) for k in
                                         ("metric", "default_members", "all_members",
                                          "no_member")}, "mean": held_out.get("mean")},
            "learned_members": model.metadata.get("learned_members"),
            "trained_on": [d["name"] for d in model.metadata.get("datasets", [])]}


def _description() -> str:
    return ("A learned combiner over the other services: each member's extraction mapped "
            "onto the page's text blocks, with fusion's block measures, decided by "
            "gradient-boosted trees trained leave-one-dataset-out with members dropped at "
            "random. Reply `details`: members asked, answered, missing, and `fallback` when "
            "none answered. Block score: the smoothed probability of being content.")


ALGORITHM = Algorithm(
    name="ensemble",
    version=version("boilerbench"),
    description=_description(),
    reference="boilerbench (services/ensemble); stacked generalisation (Wolpert, Neural "
    "Networks 1992) over the project's extractors",
    options_model=EnsembleOptions,
    extract=extract,
    score="The combiner's probability that the block is content, smoothed over neighbouring "
    "blocks with the model's kernel.",
    score_range=(0.0, 1.0),
    path_tree="html5",
    warm_up=_warm_up,
    model=model_info("ensemble", default_model),
    details=_details,
)
