"""OpenAPI documents that say what the bodies are, and a /docs page that works offline.

The /extract and POST /runs routes read their bodies themselves (raw bytes for
speed, JSON or multipart), so FastAPI cannot infer a request schema from their
signatures: `document_bodies` writes each route's request body into the schema
from the pydantic models that validate it. The services' POST /extract is not a
route at all (it is answered on the raw ASGI interface, shared/service.py), so its
whole operation is written in the same way (RawOperation). FastAPI's own /docs and /redoc load
their scripts from a CDN and stay blank without internet; `install_offline_docs`
replaces them with one page rendered here from the same OpenAPI document, with
no script and no external asset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from shared.contract import ExtractRequest, Options

REF_TEMPLATE = "#/components/schemas/{model}"
BodySchema = type[BaseModel] | dict[str, Any]
"""A request body: a pydantic model, or a JSON schema made with REF_TEMPLATE (its
`$defs` go to the document's components)."""


def _schema(body: BodySchema, components: dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, dict):
        schema = dict(body)
    else:
        schema = body.model_json_schema(ref_template=REF_TEMPLATE)
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    if isinstance(body, dict):
        return schema
    components[body.__name__] = schema
    return {"$ref": REF_TEMPLATE.format(model=body.__name__)}


@dataclass(frozen=True)
class RawOperation:
    """An operation served outside FastAPI's router, which FastAPI cannot list: what
    the document says of it besides its request body (which `bodies` gives)."""

    summary: str
    description: str
    replies: dict[int | str, tuple[str, BodySchema]] = field(default_factory=dict)
    """JSON replies by status (or "default", every status not listed): (description,
    schema)."""
    parameters: tuple[dict[str, Any], ...] = ()
    """OpenAPI parameter objects (query_parameters)."""

    def document(self, path: str, method: str, components: dict[str, Any]) -> dict[str, Any]:
        operation: dict[str, Any] = {
            "summary": self.summary,
            "description": self.description,
            "operationId": f"{path.strip('/').replace('/', '_')}_{method}",
            "responses": {str(status): {"description": description, "content": {
                "application/json": {"schema": _schema(body, components)}}}
                for status, (description, body) in self.replies.items()},
        }
        if self.parameters:
            operation["parameters"] = list(self.parameters)
        return operation


def document_bodies(app: FastAPI, bodies: dict[tuple[str, str], dict[str, BodySchema]],
                    raw: dict[tuple[str, str], RawOperation] | None = None) -> None:
    """Put each (path, method)'s request body, by media type, into the app's schema;
    `raw` adds the operations the router does not serve, ahead of the routes'."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        components = document.setdefault("components", {}).setdefault("schemas", {})
        served: dict[str, dict[str, Any]] = {}
        for (path, method), operation in (raw or {}).items():
            served.setdefault(path, {})[method] = operation.document(path, method, components)
        document["paths"] = {**served, **document.get("paths", {})}
        for (path, method), content in bodies.items():
            operation = document["paths"][path][method]
            operation["requestBody"] = {
                "required": True,
                "content": {media: {"schema": _schema(body, components)}
                            for media, body in content.items()},
            }
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def extract_body_schema(options_model: type[Options]) -> dict[str, Any]:
    """The JSON body of an algorithm's /extract, `options` typed by its own model."""
    schema = ExtractRequest.model_json_schema(ref_template=REF_TEMPLATE)
    options = options_model.model_json_schema(ref_template=REF_TEMPLATE)
    definitions = {**schema.pop("$defs", {}), **options.pop("$defs", {}),
                   options_model.__name__: options}
    schema["properties"]["options"] = {"$ref": REF_TEMPLATE.format(model=options_model.__name__)}
    schema["$defs"] = definitions
    return schema


HTML_BODY: dict[str, Any] = {"type": "string", "description": "The page itself (raw HTML); "
                             "options go in the query string."}


def query_parameters(options_model: type[Options]) -> tuple[dict[str, Any], ...]:
    """The query parameters of /extract's HTML body form: `url`, and each option a query
    string can carry, typed as in the JSON body (an option taking a list, or only null
    besides, goes in a JSON body alone), so that a generated client can send them."""
    schema = options_model.model_json_schema(ref_template=REF_TEMPLATE)
    parameters: list[dict[str, Any]] = [{
        "name": "url", "in": "query", "required": False, "schema": {"type": "string"},
        "description": "The page's URL (with a text/html body only)."}]
    for name, option in schema["properties"].items():
        kinds = [kind for kind in option.get("anyOf", [option])
                 if kind.get("type") not in ("array", "null")]
        if not kinds:
            continue
        typed = dict(kinds[0])
        if option.get("default") is not None:
            typed["default"] = option["default"]
        parameters.append({
            "name": name, "in": "query", "required": False, "schema": typed,
            "description": f"{option.get('description', option.get('title', name))} "
                           "(with a text/html body only)."})
    return tuple(parameters)


def _json(value: Any) -> str:
    return escape(json.dumps(value, indent=2, ensure_ascii=False))


def docs_html(document: dict[str, Any]) -> str:
    """The OpenAPI document as one readable HTML page."""
    info = document.get("info", {})
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(str(info.get('title', 'API')))}</title>",
             "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
             "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:12px}"
             "h2{border-top:1px solid #ccc;padding-top:.6em}code.m{font-weight:bold}</style>",
             "</head><body>",
             f"<h1>{escape(str(info.get('title', 'API')))} {escape(str(info.get('version', '')))}"
             "</h1>",
             f"<p>{escape(str(info.get('description') or ''))}</p>",
             '<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a>.</p>']
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            parts.append(f'<h2 id="{escape(method)}-{escape(path)}"><code class="m">'
                         f"{escape(method.upper())}</code> <code>{escape(path)}</code></h2>")
            summary = operation.get("description") or operation.get("summary") or ""
            parts.append(f"<p>{escape(str(summary))}</p>")
            for parameter in operation.get("parameters", []):
                parts.append(f"<p>parameter <code>{escape(str(parameter.get('name')))}</code> "
                             f"in {escape(str(parameter.get('in')))}</p>")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                parts.append(f"<h3>request body: {escape(media)}</h3>"
                             f"<pre>{_json(content.get('schema', {}))}</pre>")
            for status, response in operation.get("responses", {}).items():
                parts.append(f"<p>{escape(str(status))}: "
                             f"{escape(str(response.get('description', '')))}</p>")
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        parts.append("<h2>Schemas</h2>")
        for name, schema in schemas.items():
            parts.append(f'<h3 id="schema-{escape(name)}">{escape(name)}</h3>'
                         f"<pre>{_json(schema)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def install_offline_docs(app: FastAPI) -> None:
    """Serve docs_html at /docs (the app must be made with docs_url=None, redoc_url=None)."""

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(docs_html(app.openapi()))
