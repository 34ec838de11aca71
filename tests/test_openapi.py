"""The OpenAPI documents type the request bodies, and /docs works offline."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from shared.registry import SERVICES
from shared.service import create_service_app


def _resolve(document: dict[str, object], ref: str) -> dict[str, object]:
    name = ref.rsplit("/", 1)[1]
    schemas = document["components"]["schemas"]  # type: ignore[index]
    found: dict[str, object] = schemas[name]  # type: ignore[index]
    return found


def _assert_offline(html: str) -> None:
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["']https?://""", html)


def test_extract_body_is_typed_with_the_algorithms_options() -> None:
    client = TestClient(create_service_app(SERVICES["justext"].algorithm()))
    document = client.get("/openapi.json").json()
    content = document["paths"]["/extract"]["post"]["requestBody"]["content"]
    body = content["application/json"]["schema"]
    assert body["required"] == ["html"]
    options = _resolve(document, body["properties"]["options"]["$ref"])  # type: ignore[index]
    assert "language" in options["properties"]  # type: ignore[operator]
    assert content["text/html"]["schema"]["type"] == "string"
    # /extract is answered outside the router; the document still describes its replies.
    assert not [route for route in client.app.routes  # type: ignore[attr-defined]
                if getattr(route, "path", None) == "/extract"]
    replies = document["paths"]["/extract"]["post"]["responses"]
    reply = _resolve(document, replies["200"]["content"]["application/json"]["schema"]["$ref"])
    assert {"algorithm", "text", "blocks", "elapsed_ms"} <= set(reply["required"])  # type: ignore[arg-type]
    for status in ("401", "405", "413", "415", "422", "503", "504"):
        error = replies[status]["content"]["application/json"]["schema"]["$ref"]
        assert error.endswith("/ErrorReply")
    docs = client.get("/docs")
    assert docs.status_code == 200
    _assert_offline(docs.text)
    assert "/extract" in docs.text
    assert "stopwords_low" in docs.text


def test_post_runs_body_is_typed_and_docs_work_offline(tmp_path: Path) -> None:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        document = client.get("/openapi.json").json()
        docs = client.get("/docs")
    content = document["paths"]["/runs"]["post"]["requestBody"]["content"]
    body = _resolve(document, content["application/json"]["schema"]["$ref"])
    assert {"dataset", "pages", "services", "options"} <= set(body["properties"])  # type: ignore[arg-type]
    assert "DatasetIn" in document["components"]["schemas"]
    assert content["multipart/form-data"]["schema"]["required"] == ["archive"]
    assert docs.status_code == 200
    _assert_offline(docs.text)
    assert "RunRequest" in docs.text
