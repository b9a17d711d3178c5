"""Checks every answer the clients get against docs/openapi.json.

Installed as an httpx response hook on the clients under test, so each request a test makes
also tests the description: the path and method must be described, the status listed among
the operation's responses, and the JSON body valid against that response's schema. A route or
field the server sends that the description does not know fails the test that met it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from conftest import REPO

DOC: dict[str, Any] = json.loads((REPO / "docs" / "openapi.json").read_text())
_BASE = DOC["servers"][0]["url"]
_REGISTRY: Registry[Any] = Registry().with_resource("urn:openapi", DRAFT202012.create_resource(DOC))
# Literal segments win over parameters (`/events/stream` over `/events/{seq}`).
_TEMPLATES: list[str] = sorted(DOC["paths"], key=lambda p: (p.count("{"), p))
_PATTERNS = [(t, re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", t) + "$")) for t in _TEMPLATES]

#: (method, template, status) seen, for a test that wants to know what was covered.
SEEN: set[tuple[str, str, int]] = set()


def template_of(path: str) -> str | None:
    """The described path template a request path falls under."""
    if not path.startswith(_BASE):
        return None
    rest = path[len(_BASE) :]
    for template, pattern in _PATTERNS:
        if pattern.match(rest):
            return template
    return None


def _schema_of(response: dict[str, Any]) -> dict[str, Any] | None:
    if "$ref" in response:
        name = response["$ref"].split("/")[-1]
        response = DOC["components"]["responses"][name]
    content = response.get("content", {})
    media = content.get("application/json")
    if media is None:
        return None
    schema: dict[str, Any] = media["schema"]
    return schema


def check(response: httpx.Response) -> None:
    """The response hook: fails (AssertionError) on anything the description does not allow."""
    request = response.request
    path = request.url.path
    template = template_of(path)
    assert template is not None, f"{request.method} {path} is not described in docs/openapi.json"
    op = DOC["paths"][template].get(request.method.lower())
    assert op is not None, f"{request.method} {template} is not described"
    status = str(response.status_code)
    assert status in op["responses"], f"{request.method} {template}: status {status} not listed"
    SEEN.add((request.method, template, response.status_code))
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return
    schema = _schema_of(op["responses"][status])
    if schema is None:
        return
    response.read()
    body = response.json()
    wrapped = {"$ref": "urn:openapi" + schema["$ref"]} if "$ref" in schema else schema
    errors = sorted(Draft202012Validator(wrapped, registry=_REGISTRY).iter_errors(body), key=str)
    assert not errors, (
        f"{request.method} {template} {status}: at {errors[0].json_path}: {errors[0].message}"
    )


async def acheck(response: httpx.Response) -> None:
    """:func:`check` for the async client (the body is read before it is checked)."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        await response.aread()
    check(response)
