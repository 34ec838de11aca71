"""Options in a JSON body are JSON values of the types the options schema states; in a
query string they are text read as each option's type. Refusals say what was wrong."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from shared.answer import answer_page
from shared.registry import SERVICES

PAGE = "<html><body><p>The harbour bridge opened again on Monday morning.</p></body></html>"


def json_reply(options: dict[str, Any] | bytes, service: str = "justext") -> dict[str, Any]:
    """The reply to a JSON body with these options (bytes: the options' JSON text)."""
    text = options if isinstance(options, bytes) else orjson.dumps(options)
    body = b'{"html": %b, "options": %b}' % (orjson.dumps(PAGE), text)
    return answer_page(SERVICES[service].algorithm(), body, {}, "application/json")


def query_reply(query: dict[str, str], service: str = "justext") -> dict[str, Any]:
    return answer_page(SERVICES[service].algorithm(), PAGE.encode(), query)


@pytest.mark.parametrize(("options", "message"), [
    ({"length_low": "70"}, 'length_low: Input should be a valid integer, not a string ("70")'),
    ({"length_low": 70.5}, "length_low: Input should be a valid integer, not a float (70.5)"),
    ({"stopwords_low": "0.3"},
     'stopwords_low: Input should be a valid number, not a string ("0.3")'),
    ({"no_headings": "true"},
     'no_headings: Input should be a valid boolean, not a string ("true")'),
    ({"no_headings": 1}, "no_headings: Input should be a valid boolean, not an integer"),
    ({"language": 5}, "language: Input should be a valid string, not an integer"),
])
def test_a_json_body_takes_options_only_in_their_json_types(options: dict[str, Any],
                                                             message: str) -> None:
    assert json_reply(options)["error"] == f"invalid_options: {message}"


def test_a_query_string_reads_its_text_as_each_options_type() -> None:
    query = {"length_low": "70", "stopwords_low": "0.3", "no_headings": "true"}
    assert "error" not in query_reply(query)


def test_a_whole_float_is_an_integer_as_json_schema_counts_one() -> None:
    """JSON Schema's `integer` takes 70.0 (and 7e1): the service does too."""
    assert "error" not in json_reply(b'{"length_low": 70.0, "length_high": 2e2}')


@pytest.mark.parametrize("number", [b"18446744073709551616", b"-9223372036854775809",
                                    b"1e19", b"1" + b"0" * 30])
def test_an_integer_past_64_bits_is_refused_as_out_of_range(number: bytes) -> None:
    reply = json_reply(b'{"length_low": %b}' % number)
    assert reply["error"] == ("invalid_options: length_low: Input is out of range: too large "
                              "a number to read as an integer")


def test_an_integer_too_long_for_a_query_string_is_refused_as_out_of_range() -> None:
    reply = query_reply({"length_low": "9" * 5000})
    assert reply["error"] == ("invalid_options: length_low: Input is out of range: too large "
                              "a number to read as an integer")


def test_a_number_past_a_floats_range_is_refused_as_out_of_range() -> None:
    """1e400 is valid JSON, so not 400 malformed_json; no option can take it."""
    reply = json_reply(b'{"stopwords_low": 1e400}')
    assert re.fullmatch(r"invalid_request: a number is out of range at line 1 column \d+: "
                        r"numbers are read as 64-bit floats, up to about 1\.8e308",
                        reply["error"]), reply
