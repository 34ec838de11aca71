"""The OpenAPI documents type the request bodies, and /docs works offline."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from orchestrator.launcher import DEFAULT_PORT_BASE, free_port
from shared.registry import SERVICES
from shared.service import create_service_app
from shared.settings import ServiceSettings
from tests.helpers import tar_bytes
from tests.servers import serve_service


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    found: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
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
    options = _resolve(document, body["properties"]["options"]["$ref"])
    assert "language" in options["properties"]
    assert content["text/html"]["schema"]["type"] == "string"
    # /extract is answered outside the router; the document still describes its replies.
    assert not [route for route in client.app.routes  # type: ignore[attr-defined]
                if getattr(route, "path", None) == "/extract"]
    replies = document["paths"]["/extract"]["post"]["responses"]
    reply = _resolve(document, replies["200"]["content"]["application/json"]["schema"]["$ref"])
    assert {"algorithm", "text", "blocks", "elapsed_ms"} <= set(reply["required"])
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
    assert {"dataset", "pages", "services", "options", "backend"} <= set(body["properties"])
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


def test_a_run_whose_configured_url_is_another_service_is_refused(tmp_path: Path) -> None:
    """The server's configuration gives bte's URL, but cetd answers there: the run
    would score cetd under bte's name, so it is refused before it is recorded."""
    with serve_service("cetd", ServiceSettings()) as (url, _):
        config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                           mode="http", urls={"bte": url})
        with TestClient(create_app(ApiSettings(resume=False), config)) as client:
            refused = client.post("/runs", json={"pages": [PAGE], "services": ["bte"]})
            runs = client.get("/runs").json()["runs"]
    assert refused.status_code == 503, refused.text
    assert "cetd" in refused.json()["detail"]
    assert runs == []


def _archive() -> dict[str, tuple[str, bytes, str]]:
    """A form's `archive`: a tar of one test set holding PAGE."""
    data = tar_bytes([("set/html/p.html", PAGE["html"].encode()),
                      ("set/content/p.txt", PAGE["gold"].encode())])
    return {"archive": ("set.tar.gz", data, "application/gzip")}


def test_an_upload_takes_the_run_choices_of_a_json_body(tmp_path: Path) -> None:
    """A form chooses the backend, services and options as a JSON body does, checked
    the same way: with no service running, `backend=embedded` lets an upload run."""
    with TestClient(create_app(ApiSettings(resume=False),
                               _config_without_services(tmp_path))) as client:
        accepted = client.post("/runs", files=_archive(),
                               data={"services": "bte", "backend": "embedded"})
        assert accepted.status_code == 202, accepted.text
        status = _wait_finished(client, accepted.json()["id"])
        counts = client.get(f"/runs/{accepted.json()['id']}").json()["per_service"]
        refused = client.post("/runs", files=_archive(), data={"services": "bte"})
        # Each wrong choice as a form's text field and as a JSON body's value.
        wrong_choices: list[tuple[dict[str, str], dict[str, Any]]] = [
            ({"backend": "grpc"}, {"backend": "grpc"}),
            ({"services": " , "}, {"services": []}),
            ({"services": "nope"}, {"services": ["nope"]}),
            ({"options": '{"bte": 1}'}, {"options": {"bte": 1}}),
            ({"options": '{"bte": {"nope": 1}}'}, {"options": {"bte": {"nope": 1}}}),
            ({"urls": "http://127.0.0.1:1"}, {"urls": "http://127.0.0.1:1"}),
        ]
        for by_form, by_json in wrong_choices:
            form_reply = client.post("/runs", files=_archive(),
                                     data={"backend": "embedded", **by_form})
            json_reply = client.post("/runs", json={"pages": [PAGE], "backend": "embedded",
                                                    **by_json})
            assert form_reply.status_code == 422, (by_form, form_reply.text)
            assert form_reply.json() == json_reply.json(), by_form
        runs = client.get("/runs").json()["runs"]
    assert (status, counts["bte"]["ok"]) == ("finished", 1)
    assert refused.status_code == 503  # without the choice, the server's http mode
    assert len(runs) == 1


def test_the_upload_form_documents_the_run_choices(tmp_path: Path) -> None:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        document = client.get("/openapi.json").json()
    content = document["paths"]["/runs"]["post"]["requestBody"]["content"]
    body = _resolve(document, content["application/json"]["schema"]["$ref"])
    form = content["multipart/form-data"]["schema"]
    choices = {"services", "options", "backend"}
    properties = body["properties"]
    assert isinstance(properties, dict)
    assert choices <= properties.keys()
    assert set(form["properties"]) == {"archive", *choices}
    assert form["properties"]["backend"]["enum"] == ["http", "embedded"]
    assert form["additionalProperties"] is False


def test_the_api_answers_head_as_get(tmp_path: Path) -> None:
    """HEAD /health and HEAD /runs answer as GET does, without a body (monitors probe
    so); a path that takes no GET still names its methods."""
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        for path in ("/health", "/runs"):
            got, head = client.get(path), client.head(path)
            assert head.status_code == got.status_code == 200, (path, head.text)
            assert head.content == b""
            assert head.headers["content-length"] == str(len(got.content))
        refused = client.head("/runs/abc/report")
        other = client.put("/health")
    assert refused.status_code == 404
    assert other.status_code == 405
    assert set(other.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


def _service_document(name: str) -> tuple[TestClient, dict[str, Any]]:
    client = TestClient(create_service_app(SERVICES[name].algorithm()))
    document: dict[str, Any] = client.get("/openapi.json").json()
    return client, document


def _reply_validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator of one reply schema of the document, its $refs resolved in it."""
    return Draft202012Validator({**schema, "components": document["components"]})


def _documented_reply(document: dict[str, Any], path: str, method: str,
                      status: int) -> dict[str, Any]:
    """The JSON schema the document gives for `status` (or its `default`) of an operation."""
    replies = document["paths"][path][method]["responses"]
    reply = replies.get(str(status), replies.get("default"))
    assert reply is not None, f"{method.upper()} {path}: {status} is not documented"
    schema: dict[str, Any] = reply["content"]["application/json"]["schema"]
    return schema


def test_info_and_health_replies_are_described() -> None:
    """A client generated from the document reads /info and /health typed: /info's 200
    is ServiceInfo (the ensemble's with `details`), /health's 200 and its 503 while the
    workers start are described, and the real replies validate against them."""
    for name in ("bte", "ensemble"):
        client, document = _service_document(name)
        info, health = client.get("/info"), client.get("/health")  # workers never started
        assert (info.status_code, health.status_code) == (200, 503)
        for path, reply in (("/info", info), ("/health", health)):
            schema = _documented_reply(document, path, "get", reply.status_code)
            _reply_validator(document, schema).validate(reply.json())
        assert document["components"]["schemas"]["ServiceInfo"]["required"]
        ok = _documented_reply(document, "/health", "get", 200)
        _reply_validator(document, ok).validate({"status": "ok"})


def test_every_operation_documents_its_other_errors() -> None:
    """Errors no operation lists one by one (404, 408, 431, 500: the server's, not the
    route's) are still ErrorReply: each operation has a `default` reply saying so."""
    _, document = _service_document("justext")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            default = operation["responses"].get("default")
            assert default is not None, (method, path)
            assert default["content"]["application/json"]["schema"]["$ref"].endswith(
                "/ErrorReply")


def test_the_html_body_forms_query_parameters_are_listed() -> None:
    """The text/html form takes `url` and the options in the query string: the document
    lists each option a query string can carry (typed as the option is), and not those
    only a JSON body can (lists). XHTML is an HTML body too."""
    for name in sorted(SERVICES):
        _, document = _service_document(name)
        operation = document["paths"]["/extract"]["post"]
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        assert all(p["in"] == "query" and not p["required"] for p in parameters.values())
        assert parameters.pop("url")["schema"] == {"type": "string"}
        options = SERVICES[name].algorithm().options_model.model_json_schema()
        for option, schema in options["properties"].items():
            kinds = schema.get("anyOf", [schema])
            scalar = [k for k in kinds if k.get("type") not in ("array", "null")]
            if scalar:
                assert parameters[option]["schema"]["type"] == scalar[0]["type"], (name, option)
                assert parameters[option]["schema"].get("enum") == scalar[0].get("enum")
            else:
                assert option not in parameters, (name, option)
        assert set(parameters) <= set(options["properties"])
    assert set(document["paths"]["/extract"]["post"]["requestBody"]["content"]) == {
        "application/json", "text/html", "application/xhtml+xml"}
