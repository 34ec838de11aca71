"""The /extract contract: the JSON shapes every algorithm service speaks.

One definition, used by the services (to build replies), the orchestrator and
clients (to validate them) and the contract tests (to check every service).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic_core import PydanticCustomError


@dataclass(slots=True)
class Block:
    """One run of visible text on the page, classified as content or boilerplate.

    A plain dataclass rather than a pydantic model: extractors build hundreds per
    page, and a dataclass costs a quarter of a model's validation each. Pydantic still
    checks blocks wherever they arrive from outside (ExtractReply, with unknown keys
    refused), and orjson encodes them natively."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    text: str
    is_content: bool
    score: Annotated[float | None, Field(
        description="The algorithm's figure for the block; its meaning and range are in the "
        "service's /info (`score`, `score_range`).")] = None
    path: Annotated[str | None, Field(
        description="XPath of the element that holds the block, in lxml's getpath form: "
        "/html/body/div[2]/p, a step's position given only where its parent has several "
        "children of that name; a tag no XPath name test can spell is matched by name(): "
        "/html/body/*[name()='fb:like'][2]/div. It names an element of the parse /info's "
        "`path_tree` says (or the reply's `details.path_tree`, where the service parsed "
        "this page otherwise).")
    ] = None
    label: Annotated[str | None, Field(
        description="The algorithm's own class name for the block, where it has one.")] = None


class ExtractRequest(BaseModel):
    """JSON body of POST /extract. `options` is validated by the algorithm's own model."""

    model_config = ConfigDict(extra="forbid")

    html: str
    url: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class ExtractReply(BaseModel):
    """200 reply of POST /extract. `elapsed_ms`: the service's time on the request
    (decoding, validation, extraction), not counting a wait for a free worker.
    `details`: optional facts about how this reply was made, in the algorithm's own
    keys (the ensemble names the members that answered), and `path_tree` where block
    paths name elements of another parse than /info's; absent for most replies."""

    model_config = ConfigDict(extra="forbid")

    algorithm: str
    version: str
    text: str
    blocks: list[Block]
    elapsed_ms: float
    details: dict[str, Any] | None = None


class ErrorReply(BaseModel):
    """Every non-2xx reply of every service and of the orchestrator."""

    error: str
    detail: str


class HealthReply(BaseModel):
    """200 reply of GET /health: the service is ready to extract."""

    status: Literal["ok"]


START_FAILED = "start_failed"
"""The error of GET /health once a service's extraction workers have failed to start:
the service will never be ready, so a launcher waiting for it can stop at once."""


def bearer_header(token: str | None) -> dict[str, str]:
    """The header a client sends to a service (or the API) started with a token; none
    without one (an empty token is none)."""
    return {"authorization": f"Bearer {token}"} if token else {}


# A block path's form (see Block.path): steps of a tag name, or of any element whose name()
# is a quoted string (shared.html.xpath_step), each with a position where needed.
_QUOTED = r"""(?:'[^']*'|"[^"]*")"""
_NAME_STEP = rf"\*\[name\(\)=(?:{_QUOTED}|concat\({_QUOTED}(?:, {_QUOTED})*\))\]"
BLOCK_PATH_PATTERN = rf"(/(?:[^/\[\]\s]+|{_NAME_STEP})(\[[1-9][0-9]*\])?)+"
# Which parse of the page block paths name elements of: libxml2's HTML parser (lxml.html)
# or HTML5 tree construction (as browsers build it: a <tbody> in every table, ...).
PathTree = Literal["libxml2", "html5"]


class ModelInfo(BaseModel):
    """The model file a learned service loaded, named by its bytes: a client (the
    orchestrator's in-sample flags) tells it from another file of the same name."""

    file: str = Field(description="The file's name, without its folder: the shipped "
                      "model's, or that of the file BOILERBENCH_<NAME>_MODEL names.")
    sha256: str = Field(description="SHA-256 of the file's bytes as loaded, in hex.")
    leave_one_dataset_out: dict[str, float] | None = Field(
        None, description="The word F1 its training recorded on each dataset with the "
        "model fitted on the other datasets (metadata.leave_one_dataset_out.word_f1); null "
        "where the file records none.")


class ServiceInfo(BaseModel):
    """GET /info: what runs behind a service."""

    name: str
    version: str
    description: str
    reference: str
    options_schema: dict[str, Any]
    score: str = Field(description="What a block's `score` is for this algorithm: a "
                       "probability of being content where the algorithm has one, otherwise "
                       "the figure it decides by.")
    score_range: tuple[float, float | None] = Field(
        description="Lowest and highest score a block can get (null: no upper bound).")
    path_tree: PathTree | None = Field(
        description="The parse of the page whose elements block paths name: 'libxml2' "
        "(lxml.html's parser) or 'html5' (HTML5 tree construction, as in a browser); null "
        "where blocks carry no path. A reply's `details.path_tree` overrides it for a page "
        "the service had to parse otherwise (lxml for a page the HTML5 parser would take "
        "quadratic time on).")
    engine: str | None = None
    details: dict[str, Any] | None = Field(
        None, description="What else the algorithm tells about itself (the ensemble: its "
        "members, their versions, its model's leave-one-dataset-out figures).")
    model: ModelInfo | None = Field(
        None, description="The model file the service loaded (a learned service: density, "
        "fusion, the ensemble); null for a service without one.")


# pydantic's errors for a value of another kind than the option's, whose message names only
# the kind expected; and the magnitude from which a float stands for no 64-bit integer.
_KIND_ERRORS = frozenset({"int_type", "float_type", "bool_type", "string_type", "list_type"})
_INT64_LIMIT = 2.0**63


def _json_kind(value: Any) -> str:
    """What a value is, as a JSON client would call it (a string shown, quoted and cut)."""
    if isinstance(value, str):
        return f"a string ({json.dumps(value[:40])})"
    if isinstance(value, float):
        return f"a float ({value!r})"
    kinds = ((bool, "a boolean"), (int, "an integer"), (list, "an array"), (dict, "an object"),
             (type(None), "null"))
    return next((name for kind, name in kinds if isinstance(value, kind)),
                type(value).__name__)


class Options(BaseModel):
    """Base of every algorithm's options model: unknown keys are refused (422), and so is
    a boolean for a number (pydantic's lax mode, which query strings need, would read
    JSON true as 1), and inf or nan, which a query string can spell and no JSON number
    (so no schema) can. A JSON body's options are validated strictly (shared.answer), as
    the schema states them: "70" is no number there."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(get_args(annotation)) or {annotation}
            if bool not in kinds and kinds & {int, float}:
                raise ValueError("a number is expected, not a boolean")
        return value

    @field_validator("*", mode="wrap")
    @classmethod
    def _as_json_schema_reads(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Strict validation (a JSON body's) refuses 70.0 for an integer, which JSON Schema
        counts as one; pydantic names only the kind it expected ("Input should be a valid
        integer", for "70" too), and calls a number too large for an integer an
        unparsable string (JSON parsing hands integers past 64 bits over as floats): take
        the one, and say what was given for the others, so the client sees what to change."""
        try:
            return handler(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            if error["loc"] or len(exc.errors()) > 1:
                raise
            whole_float = isinstance(value, float) and value.is_integer()
            if error["type"] == "int_type" and whole_float and abs(value) < _INT64_LIMIT:
                return handler(int(value))
            if error["type"] == "int_parsing_size" or (error["type"] == "int_type"
                                                       and whole_float):
                raise PydanticCustomError(
                    "int_out_of_range",
                    "Input is out of range: too large a number to read as an integer"
                ) from None
            if error["type"] in _KIND_ERRORS:
                raise PydanticCustomError(error["type"], f"{error['msg']}, not {{given}}",
                                          {"given": _json_kind(value)}) from None
            raise

    def missing(self) -> str | None:
        """What a request with these options lacks that the algorithm needs (rss: a
        feed), as the refusal's message naming the options; None where nothing is
        missing. A check of its own, not a validation error: options checked before a
        run lack what the orchestrator adds to each page's request."""
        return None

    def uses_model(self) -> bool:
        """Whether an extraction with these options reads the service's trained model, so
        that figures on the model's training pages are in-sample (orchestrator.insample).
        A service whose settings can bypass its model says so; one without a model never
        reads this."""
        return True


@dataclass(frozen=True)
class Extraction:
    """What a pure extractor returns. `text` defaults to the content blocks joined by
    newlines; an algorithm whose own output differs from its blocks (a peer library
    that normalises whitespace, say) passes its text explicitly. `details` becomes the
    reply's `details` (JSON values only)."""

    blocks: list[Block]
    text: str | None = None
    details: dict[str, Any] | None = None

    def content_text(self) -> str:
        if self.text is not None:
            return self.text
        return "\n".join(b.text for b in self.blocks if b.is_content)


class PageError(ValueError):
    """The page cannot be processed by this algorithm (reported as 422, never as 500).

    An extractor raises it for input it refuses on purpose, for example an RSS
    request without a feed or a page that matches no feed item.
    """


ExtractFn = Callable[[str, Any, "str | None"], Extraction]


@dataclass(frozen=True)
class Algorithm:
    """A pure extractor plus what the service kit needs to serve it.

    `extract(html, options, url)` takes decoded HTML text, an instance of
    `options_model` and the page URL (or None), and returns an Extraction. It must
    not touch the network or global state beyond caches, so that the same function
    runs in-process, in a worker process behind HTTP, or on a cluster.
    `score`, `score_range` and `path_tree` tell clients what a block's score and path
    are (ServiceInfo). `engine` names what actually runs (for example Boilerpipe's
    `java` or `python`); `warm_up` is called once per worker process before it is marked
    ready; `details` gives /info's optional `details`; `model` loads a learned service's
    model file (once per process) and names the file loaded, /info's `model`, so that a
    service built from this Algorithm reports it and stops at start on a file that does
    not load.
    """

    name: str
    version: str
    description: str
    reference: str
    options_model: type[Options]
    extract: ExtractFn
    score: str
    score_range: tuple[float, float | None]
    path_tree: PathTree | None
    engine: Callable[[], str | None] = field(default=lambda: None)
    warm_up: Callable[[], None] = field(default=lambda: None)
    details: Callable[[], dict[str, Any] | None] = field(default=lambda: None)
    model: Callable[[], ModelInfo | None] = field(default=lambda: None)

    def info(self) -> ServiceInfo:
        return ServiceInfo(
            name=self.name,
            version=self.version,
            description=self.description,
            reference=self.reference,
            options_schema=self.options_model.model_json_schema(),
            score=self.score,
            score_range=self.score_range,
            path_tree=self.path_tree,
            engine=self.engine(),
            details=self.details(),
            model=self.model(),
        )

    def run(self, html: str, options: dict[str, Any] | Options | None = None,
            url: str | None = None) -> ExtractReplyBody:
        """Validate options and run the extractor in this process (no HTTP). A dict is
        read as a JSON body's options are, strictly ("70" is no integer, 70.0 is one), so a
        Python caller meets the rule and the refusals an HTTP client does; text read as
        each option's type (a query string's) is validated by the caller,
        `options_model.model_validate(values)`, and passed as the model."""
        opts = options if isinstance(options, Options) else self.options_model.model_validate(
            options or {}, strict=True
        )
        extraction = self.extract(html, opts, url)
        return ExtractReplyBody(text=extraction.content_text(), blocks=extraction.blocks,
                                details=extraction.details)


@dataclass(frozen=True)
class ExtractReplyBody:
    """The algorithm-dependent part of a reply (text and blocks)."""

    text: str
    blocks: list[Block]
    details: dict[str, Any] | None = None
