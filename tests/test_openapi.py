"""The OpenAPI documents type the request bodies, and /docs works offline."""

from __future__ import annotations

import re
import time
from pathlib import Path

from fastapi.testclient import TestClient

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from orchestrator.launcher import DEFAULT_PORT_BASE, free_port
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
    assert {"dataset", "pages", "services", "options", "backend"} <= set(body["properties"])  # type: ignore[arg-type]
    assert "DatasetIn" in document["components"]["schemas"]
    assert content["multipart/form-data"]["schema"]["required"] == ["archive"]
    assert docs.status_code == 200
    _assert_offline(docs.text)
    assert "RunRequest" in docs.text


PAGE = {"id": "p", "gold": "Hello world",
        "html": "<html><body><p>Hello world, and a sentence of content.</p></body></html>"}


def _config_without_services(tmp_path: Path) -> RunConfig:
    """Run defaults that call the services over HTTP where nothing listens: bte's
    port under this port base is free."""
    port = free_port()
    return RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                     mode="http", port_base=port - (SERVICES["bte"].port - DEFAULT_PORT_BASE))


def _wait_finished(client: TestClient, run_id: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status: str = client.get(f"/runs/{run_id}").json()["status"]
        if status not in ("pending", "running"):
            return status
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish")


def test_every_status_post_runs_answers_is_documented(tmp_path: Path) -> None:
    """The document lists what POST /runs really answers: 202 for a run accepted (not
    FastAPI's default 200), and each error as an ErrorReply."""
    settings = ApiSettings(resume=False, max_body_bytes=4096, max_queued_runs=0,
                           max_running_runs=1)
    with TestClient(create_app(settings, _config_without_services(tmp_path))) as client:
        document = client.get("/openapi.json").json()
        replies = [
            client.post("/runs", content=b"", headers={"content-type": "application/json"}),
            client.post("/runs", content=b"x" * 5000,
                        headers={"content-type": "application/json"}),
            client.post("/runs", content=b"<p>", headers={"content-type": "text/html"}),
            client.post("/runs", json={"pages": [PAGE], "services": ["nope"]}),
            client.post("/runs", json={"pages": [PAGE], "services": ["bte"]}),
            client.post("/runs", json={"pages": [PAGE], "services": ["bte"],
                                       "backend": "embedded"}),
        ]
        _wait_finished(client, replies[-1].json()["id"])
        # A run being recorded by another request fills the one place (no queue).
        client.app.state.api.reserved.add("elsewhere")  # type: ignore[attr-defined]
        replies.append(client.post("/runs", json={"pages": [PAGE], "services": ["bte"],
                                                  "backend": "embedded"}))
    statuses = [reply.status_code for reply in replies]
    assert statuses == [400, 413, 415, 422, 503, 202, 429]
    documented = document["paths"]["/runs"]["post"]["responses"]
    for reply in replies:
        assert str(reply.status_code) in documented, reply.status_code
        if reply.status_code >= 400:
            schema = documented[str(reply.status_code)]["content"]["application/json"]["schema"]
            assert _resolve(document, schema["$ref"])["required"] == ["error", "detail"]
            assert set(reply.json()) == {"error", "detail"}
    assert "200" not in documented
    assert "HTTPValidationError" not in document["components"]["schemas"]
    report = document["paths"]["/runs/{run_id}/report"]["get"]["responses"]
    assert "text/html" in report["200"]["content"]
    assert set(report["409"]["content"]) == {"application/json"}


def test_a_run_refused_for_want_of_services_names_the_real_settings(tmp_path: Path) -> None:
    """The 503 names settings that exist, and its way out without services works."""
    with TestClient(create_app(ApiSettings(resume=False),
                               _config_without_services(tmp_path))) as client:
        refused = client.post("/runs", json={"pages": [PAGE], "services": ["bte"]})
        accepted = client.post("/runs", json={"pages": [PAGE], "services": ["bte"],
                                              "backend": "embedded"})
        status = _wait_finished(client, accepted.json()["id"])
        results = client.get(f"/runs/{accepted.json()['id']}").json()["per_service"]
    assert refused.status_code == 503
    detail = refused.json()["detail"]
    assert "nothing answers at http://127.0.0.1:" in detail
    assert "`service.bte.url`" in detail
    assert "BOILERBENCH_URLS" in detail
    assert '"backend": "embedded"' in detail
    assert "(`urls`)" not in detail
    assert (accepted.status_code, status) == (202, "finished")
    assert results["bte"]["ok"] == 1
