"""Algorithm.run reads a dict of options as a JSON body's options are read: in the JSON
types the options schema states, with the same refusals; text read as each option's type
(a query string's) is the caller's choice, made by passing the validated model."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from shared.answer import answer_page, validation_message
from shared.registry import SERVICES
from tests.helpers import REPO, SAMPLE

PAGE = "<html><body><p>The harbour bridge opened again on Monday morning.</p></body></html>"
JUSTEXT = SERVICES["justext"].algorithm()


def json_body_error(options: dict[str, Any]) -> str:
    """What the service answers to a JSON body with these options."""
    body = orjson.dumps({"html": PAGE, "options": options})
    return str(answer_page(JUSTEXT, body, {}, "application/json")["error"])


@pytest.mark.parametrize("options", [
    {"length_low": "70"}, {"stopwords_low": "0.3"}, {"no_headings": "true"},
    {"no_headings": 1}, {"length_low": 70.5}, {"language": 5},
])
def test_a_dict_is_refused_as_a_json_body_refuses_it(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as refused:
        JUSTEXT.run(PAGE, options)
    assert f"invalid_options: {validation_message(refused.value)}" == json_body_error(options)


def test_a_whole_float_is_an_integer_in_a_dict_too() -> None:
    """JSON Schema's `integer` takes 70.0, and so does a JSON body."""
    assert JUSTEXT.run(PAGE, {"length_low": 70.0}).text == JUSTEXT.run(
        PAGE, {"length_low": 70}).text


def test_text_values_are_read_laxly_only_when_the_caller_validates_them() -> None:
    query = {"length_low": "70", "stopwords_low": "0.3", "no_headings": "true"}
    options = JUSTEXT.options_model.model_validate(query)
    assert JUSTEXT.run(PAGE, options).text == JUSTEXT.run(
        PAGE, {"length_low": 70, "stopwords_low": 0.3, "no_headings": True}).text


def test_the_quality_benchmark_reads_its_command_line_options_as_text() -> None:
    """`trafilatura:include_comments=false` (one of its own modes) gives the text "false":
    read as a query string's, not refused as a JSON body's would be."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import quality

    task = quality.PageTask("sample", "blog-sourdough", SAMPLE / "html" / "blog-sourdough.html",
                            SAMPLE / "content" / "blog-sourdough.txt",
                            ("trafilatura:include_comments=false", "justext:length_low=50"))
    rows = {row.service: (row.status, row.error) for row in quality.evaluate_page(task)}
    assert {service: rows[service] for service in task.services} == dict.fromkeys(
        task.services, ("ok", None))
