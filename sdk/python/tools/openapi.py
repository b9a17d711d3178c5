"""Writes docs/openapi.json, the OpenAPI 3.1 description of ``oracle serve``'s ``/api/v1``.

The description is data, kept in the repository and served by the binary (``include_str!``);
this script is how it is edited, so the JSON stays uniform: change it here, run
``python sdk/python/tools/openapi.py``, commit both. docs/API.md is the prose; a Rust test
checks that the paths here are exactly the server's routes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Any], required: list[str] | None = None, **more: Any) -> dict[str, Any]:
    """An object schema; extra keys are allowed (the API grows by adding keys)."""
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    schema.update(more)
    return schema


STR = {"type": "string"}
INT = {"type": "integer", "minimum": 0}
BOOL = {"type": "boolean"}
HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
ANY: dict[str, Any] = {}


def nullable(s: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [s, {"type": "null"}]}


def json_ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERR = {"$ref": "#/components/responses/Error"}


def errors(*statuses: int) -> dict[str, Any]:
    return {str(s): ERR for s in statuses}


ID = {"name": "id", "in": "path", "required": True, "schema": ref("RunId")}
HANDLE = {"name": "handle", "in": "path", "required": True, "schema": STR}
PROPOSAL = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-fA-F]{4,64}$"},
    "description": "A proposal's id: a unique prefix (4 to 64 hex characters) of its hash.",
}
SEQ = {"name": "seq", "in": "path", "required": True, "schema": INT}
EVENT_NAME = {
    "name": "seq",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-z0-9._-]{1,64}$"},
    "description": "An event's name (the path's segment after `events/`, named `seq` by the "
    "GET of the same path).",
}
STORE = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-z0-9._-]{1,64}$"},
    "description": "A named belief store shared by runs (docs/MEMORY.md, Shared stores).",
}
SCHEDULE = {"name": "name", "in": "path", "required": True, "schema": STR}


def q(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


READ_ERRORS = errors(400, 401, 403, 404, 500, 503)
WRITE_ERRORS = errors(400, 401, 403, 404, 409, 413, 415, 422, 500, 503)

schemas: dict[str, Any] = {
    "Proposal": obj(
        {
            "id": STR,
            "proposal": HASH,
            "program": STR,
            "base": HASH,
            "plan_hash": HASH,
            "reason": STR,
            "status": {"enum": ["pending", "approved", "rejected"]},
            "recorded": {
                "type": "array",
                "items": obj(
                    {"run": ref("RunId"), "seq": INT, "step": STR, "model_call": nullable(INT)}
                ),
            },
        },
        ["id", "proposal", "base", "plan_hash", "status"],
    ),
    "ProposalDetail": {
        "allOf": [
            ref("Proposal"),
            obj(
                {
                    "plan": STR,
                    "diff": nullable(STR),
                    "decision": nullable(ref("LedgerEntry")),
                    "lineage": {"type": "array", "items": ref("LedgerEntry")},
                    "reports": {
                        "type": "array",
                        "items": obj(
                            {
                                "hash": HASH,
                                "file": STR,
                                "unchanged": INT,
                                "diverges": INT,
                                "cannot_check": INT,
                            }
                        ),
                    },
                }
            ),
        ]
    },
    "LedgerEntry": obj(
        {
            "entry": INT,
            "prev": HASH,
            "decision": {"enum": ["approved", "rejected", "policy", "checked"]},
            "proposal": HASH,
            "base": HASH,
            "plan_hash": HASH,
            "report": HASH,
            "require_approval": BOOL,
            "approvers": {"type": "array", "items": STR},
            "reason": STR,
            "by": STR,
            "public_key": STR,
            "signature": STR,
            "hash": HASH,
        },
        ["entry", "prev", "decision", "hash"],
        description="One line of the home's evolution ledger (docs/EVOLUTION.md).",
    ),
    "SignedApproval": {
        "type": "object",
        "properties": {
            "format": {"const": 1},
            "proposal": HASH,
            "base": HASH,
            "plan_hash": HASH,
            "report": HASH,
            "public_key": STR,
            "signature": STR,
            "by": STR,
        },
        "required": [
            "format",
            "proposal",
            "base",
            "plan_hash",
            "report",
            "public_key",
            "signature",
        ],
        "additionalProperties": False,
        "description": "The file `oracle evolve approve --out` writes: an Ed25519 signature over "
        "the proposal's, base plan's and report's hashes (docs/EVOLUTION.md).",
    },
    "RunId": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "description": "A run id as `oracle runs` lists it: one name under <home>/runs.",
    },
    "Error": obj(
        {
            "ok": {"const": False},
            "error": obj(
                {
                    "code": STR,
                    "exit": {"type": "integer"},
                    "message": STR,
                    "seq": nullable(INT),
                    "path": STR,
                },
                ["code", "exit", "message"],
                description="Other keys are details of the kind of failure (docs/API.md).",
            ),
        },
        ["ok", "error"],
    ),
    "Waiting": obj({"step": STR, "reason": STR, "attempts": INT}, ["step", "reason", "attempts"]),
    "Run": obj(
        {
            "run": ref("RunId"),
            "plan": STR,
            "status": {
                "enum": [
                    "submitted",
                    "running",
                    "suspended",
                    "completed",
                    "failed",
                    "cancelled",
                    "damaged",
                ]
            },
            "events": INT,
            "last_time": nullable(INT),
            "live": nullable(BOOL),
            "waiting": nullable(ref("Waiting")),
            "reason": nullable(STR),
            "models": nullable(obj({"calls": INT, "tokens": INT})),
        },
        ["run", "plan", "status", "events"],
    ),
    "RunDetail": {
        "allOf": [
            ref("Run"),
            obj(
                {
                    "head": nullable(HASH),
                    "waiting_on": nullable(
                        obj(
                            {
                                "step": STR,
                                "reason": STR,
                                "attempts": INT,
                                "seq": INT,
                                "kind": {"enum": ["question", "event", "belief", "yield"]},
                                "question": ANY,
                                "schema": ANY,
                                "timer": obj({"due_ms": INT, "due": STR}, ["due_ms", "due"]),
                            },
                            ["step", "kind"],
                        )
                    ),
                    "answered": nullable(obj({"step": STR, "seq": INT, "by": nullable(STR)})),
                    "forked_from": nullable(obj({"run": ref("RunId"), "shared": INT})),
                    "forks": {
                        "type": "array",
                        "items": obj({"run": ref("RunId"), "shared": INT}, ["run", "shared"]),
                    },
                    "wall_ms": nullable(INT),
                },
                ["head", "waiting_on", "answered"],
            ),
        ]
    },
    "RunsPage": obj(
        {"runs": {"type": "array", "items": ref("Run")}, "next": nullable(STR)}, ["runs", "next"]
    ),
    "Event": obj(
        {
            "seq": INT,
            "time": INT,
            "kind": STR,
            "parents": {"type": "array", "items": INT},
            "payload": ANY,
            "payload_hash": HASH,
            "state_before": HASH,
            "state_after": HASH,
            "prev": HASH,
            "hash": HASH,
        },
        [
            "seq",
            "time",
            "kind",
            "parents",
            "payload",
            "payload_hash",
            "state_before",
            "state_after",
            "prev",
            "hash",
        ],
        description='A record of the log exactly as stored (docs/FORMAT.md, "Events").',
    ),
    "EventsPage": obj(
        {
            "run": ref("RunId"),
            "from": INT,
            "events": {"type": "array", "items": ref("Event")},
            "next": nullable(INT),
            "total": INT,
        },
        ["run", "from", "events", "next", "total"],
    ),
    "State": obj(
        {
            "run": ref("RunId"),
            "seq": INT,
            "time": INT,
            "state": HASH,
            "keys": INT,
            "entries": {"type": "object"},
            "omitted": INT,
            "from_snapshot": nullable(INT),
        },
        ["run", "seq", "state", "entries"],
    ),
    "Verify": obj(
        {
            "run": ref("RunId"),
            "valid": BOOL,
            "events": INT,
            "bytes": INT,
            "head": HASH,
            "state": HASH,
            "last_time": INT,
            "error": obj({}),
        },
        ["run", "valid"],
    ),
    "Timeline": obj(
        {
            "wall_ms": nullable(INT),
            "tokens": INT,
            "cost": nullable(obj({"micro": INT, "unpriced": {"type": "array", "items": STR}})),
            "steps": {
                "type": "array",
                "items": obj(
                    {
                        "step": STR,
                        "attempts": INT,
                        "first_seq": INT,
                        "last_seq": INT,
                        "offset_ms": nullable(INT),
                        "wall_ms": nullable(INT),
                        "tokens": INT,
                        "cost": nullable(obj({"micro": INT, "unpriced": {"type": "array"}})),
                    },
                    ["step", "attempts", "first_seq", "last_seq", "tokens"],
                ),
            },
            "events_left_off": INT,
        },
        ["tokens", "steps"],
    ),
    "Diff": obj(
        {
            "a": obj({"run": STR, "events": INT}),
            "b": obj({"run": STR, "events": INT}),
            "reads": ANY,
            "verified": BOOL,
            "result": {"enum": ["identical", "prefix", "diverged"]},
            "common": INT,
            "plans_differ": obj({"a": HASH, "b": HASH}, ["a", "b"]),
        },
        ["a", "b", "result", "common"],
    ),
    "Beliefs": obj(
        {
            "run": ref("RunId"),
            "time": INT,
            "lines": {
                "type": "array",
                "items": obj({"subject": STR, "predicate": STR, "belief": ANY, "claims": ANY}),
            },
        },
        ["run", "lines"],
    ),
    "Adjudication": obj(
        {
            "run": ref("RunId"),
            "handle": STR,
            "subject": STR,
            "predicate": STR,
            "criticality": STR,
            "reason": STR,
            "expires_at": nullable(INT),
            "incumbent": ANY,
            "challenger": ANY,
            "seq": INT,
            "status": {"enum": ["pending", "resolved", "expired", "expired_not_swept"]},
            "outcome": ANY,
            "link": STR,
        },
        ["run", "handle"],
    ),
    "Adjudications": obj(
        {"run": ref("RunId"), "adjudications": {"type": "array", "items": ref("Adjudication")}},
        ["run", "adjudications"],
    ),
    "StoreHead": obj({"name": STR, "records": INT, "head": STR}, ["name", "records", "head"]),
    "StoreAdjudication": obj(
        {
            "handle": STR,
            "subject": STR,
            "predicate": STR,
            "status": STR,
            "criticality": STR,
            "reason": STR,
            "opened_at": INT,
            "store": STR,
            "challenger": obj({"claim": STR, "run": STR}, ["claim", "run"]),
            "incumbent": obj({"claim": STR, "run": STR}, ["claim", "run"]),
        },
        ["handle", "challenger", "incumbent"],
    ),
    "StoreAdjudications": obj(
        {
            "store": ref("StoreHead"),
            "adjudications": {"type": "array", "items": ref("StoreAdjudication")},
        },
        ["store", "adjudications"],
    ),
    "StoreVerdictResponse": obj(
        {
            "ok": {"const": True},
            "outcome": STR,
            "store": ref("StoreHead"),
            "handle": STR,
            "verdict": STR,
            "effects": ANY,
            "by": STR,
            "resumed": {"type": "array", "items": ref("RunId")},
        },
        ["ok", "store", "handle", "verdict", "resumed"],
    ),
    "Inbox": obj(
        {
            "suspended": {
                "type": "array",
                "items": obj(
                    {
                        "run": ref("RunId"),
                        "link": STR,
                        "step": STR,
                        "reason": STR,
                        "attempts": INT,
                        "seq": INT,
                        "kind": {"enum": ["question", "belief", "yield"]},
                    },
                    ["run", "step", "kind"],
                ),
            },
            "adjudications": {"type": "array", "items": ref("Adjudication")},
            "store_adjudications": {"type": "array", "items": ref("StoreAdjudication")},
        },
        ["suspended", "adjudications"],
    ),
    "StartRequest": {
        "type": "object",
        "properties": {
            "plan": {"type": "string", "description": "The plan's source text."},
            "inputs": {"type": "object", "description": "Run inputs by name (JSON values)."},
            "key": {
                "type": "string",
                "maxLength": 256,
                "description": "An idempotency key (at most 256 bytes, no control "
                "characters): the same key with the same plan, inputs and seed names the run "
                "it started.",
            },
            "seed": {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
            "queue": {
                "type": "string",
                "description": "The named queue the run waits its turn in (docs/PLAN.md, "
                '"Queues"); the plan\'s `queue` line when absent.',
            },
            "priority": {
                "type": "integer",
                "minimum": 0,
                "maximum": 9,
                "description": "The run's priority in its queue: higher goes first.",
            },
            "partition": {
                "type": "string",
                "maxLength": 128,
                "description": "The run's partition in its queue: partitions take turns.",
            },
        },
        "required": ["plan"],
        "additionalProperties": False,
    },
    "StartResponse": obj(
        {
            "ok": {"const": True},
            "run": ref("RunId"),
            "status": STR,
            "existing": BOOL,
            "key": nullable(STR),
            "by": nullable(STR),
            "warnings": {"type": "array", "items": STR},
        },
        ["ok", "run", "status", "existing"],
    ),
    "AnswerRequest": {
        "type": "object",
        "properties": {"step": STR, "value": ANY, "resume": BOOL},
        "required": ["step", "value"],
        "additionalProperties": False,
    },
    "AnswerResponse": obj(
        {
            "ok": {"const": True},
            "run": ref("RunId"),
            "step": STR,
            "seq": INT,
            "events": INT,
            "head": HASH,
            "by": nullable(STR),
            "resume": ANY,
        },
        ["ok", "run", "step", "seq"],
    ),
    "EventRequest": {
        "type": "object",
        "properties": {"value": ANY},
        "required": ["value"],
        "additionalProperties": False,
    },
    "EventResponse": obj(
        {
            "ok": {"const": True},
            "run": ref("RunId"),
            "event": STR,
            "n": INT,
            "by": nullable(STR),
            "resume": ANY,
        },
        ["ok", "run", "event", "n"],
    ),
    "VerdictRequest": {
        "type": "object",
        "properties": {
            "verdict": {"enum": ["affirm", "deny", "unknown"]},
            "evidence": STR,
            "note": STR,
            "now": INT,
            "resume": BOOL,
        },
        "required": ["verdict"],
        "additionalProperties": False,
    },
    "VerdictResponse": obj(
        {
            "ok": {"const": True},
            "outcome": STR,
            "run": ref("RunId"),
            "handle": STR,
            "verdict": STR,
            "seq": INT,
            "effects": ANY,
            "by": nullable(STR),
            "resume": ANY,
        },
        ["ok", "run", "handle", "seq"],
    ),
    "ClaimRequest": {
        "type": "object",
        "properties": {
            "subject": STR,
            "predicate": STR,
            "value": ANY,
            "provenance": {"enum": ["external_first_hand", "user_asserted"]},
            "criticality": STR,
            "valid": obj({"start": INT, "end": INT, "confidence_pct": INT}),
            "note": STR,
            "now": INT,
            "resume": BOOL,
        },
        "required": ["subject", "predicate", "value", "provenance"],
        "additionalProperties": False,
    },
    "ClaimResponse": obj(
        {
            "ok": {"const": True},
            "outcome": STR,
            "run": ref("RunId"),
            "seq": INT,
            "time": INT,
            "claim": STR,
            "disposition": STR,
            "by": nullable(STR),
            "resume": ANY,
        },
        ["ok", "run", "seq"],
    ),
    "Schedule": obj(
        {
            "name": STR,
            "plan": STR,
            "cron": STR,
            "timezone": STR,
            "inputs": {"type": "object", "additionalProperties": STR},
            "overlap": {"enum": ["skip", "queue", "allow"]},
            "catch_up": {"enum": ["none", "last", "all"]},
            "paused": BOOL,
            "next": nullable(STR),
            "last_tick": nullable(STR),
            "last_run": nullable(STR),
        },
        ["name", "cron", "timezone", "paused", "next"],
    ),
    "CancelRequest": {
        "type": "object",
        "properties": {"reason": STR},
        "additionalProperties": False,
    },
    "CancelResponse": obj(
        {
            "ok": {"const": True},
            "run": ref("RunId"),
            "status": {"enum": ["cancelled", "cancel_requested"]},
            "seq": INT,
            "head": HASH,
            "by": nullable(STR),
            "reason": STR,
        },
        ["ok", "run", "status"],
    ),
    "ResumeResponse": obj(
        {"ok": {"const": True}, "run": ref("RunId"), "resume": obj({"started": BOOL})},
        ["ok", "run", "resume"],
    ),
    "Queued": obj(
        {
            "ok": {"const": True},
            "run": ref("RunId"),
            "queued": obj(
                {"signal": INT, "kind": {"enum": ["resume", "adjudicate", "claim", "cancel"]}},
                ["signal", "kind"],
            ),
            "by": STR,
            "step": STR,
            "status": {"enum": ["cancel_queued"]},
            "reason": STR,
            "outcome": {"enum": ["queued"]},
            "checked": ANY,
            "resume": ANY,
        },
        ["ok", "run", "queued"],
        description="A write checked and queued for a store's workers (`oracle serve --store`): "
        "the signal that carries it; the worker that next holds the run records it.",
    ),
}

QUEUED = json_ok(
    ref("Queued"), "Accepted: checked and queued for the store's workers (`oracle serve --store`)"
)

SSE = {
    "description": "Server-Sent Events: `event: event`, `id: SEQ`, `data:` the record as "
    "stored; `event: error` with the error object ends the stream.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}

paths: dict[str, Any] = {
    "/whoami": {
        "get": {
            "operationId": "whoami",
            "summary": "The token's name (null for an open read).",
            "responses": {
                "200": json_ok(obj({"ok": {"const": True}, "name": nullable(STR)}, ["ok", "name"])),
                **errors(401, 403),
            },
        }
    },
    "/runs": {
        "get": {
            "operationId": "listRuns",
            "summary": "The runs, in natural order of ids.",
            "parameters": [
                q("status", STR, "Only runs with this status."),
                q("plan", STR, "Only runs of this plan (its name)."),
                q("after", STR, "Start after this id (the `next` of the previous page)."),
                q("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "Default 100."),
            ],
            "responses": {"200": json_ok(ref("RunsPage")), **READ_ERRORS},
        },
        "post": {
            "operationId": "startRun",
            "summary": "Starts a run of a plan in the background (idempotent under `key`).",
            "requestBody": body(ref("StartRequest")),
            "responses": {
                "201": json_ok(ref("StartResponse"), "A new run was started."),
                "200": json_ok(
                    ref("StartResponse"),
                    "The key named a run started earlier with the same plan and "
                    "inputs (`existing`: true).",
                ),
                "409": {
                    "description": "`key_conflict`: the key was used with another plan, "
                    "inputs or seed (`differs` lists which).",
                    "content": {"application/json": {"schema": ref("Error")}},
                },
                **errors(400, 401, 403, 413, 415, 422, 500, 503),
            },
        },
    },
    "/runs/{id}": {
        "get": {
            "operationId": "getRun",
            "summary": "A run, with its head and what it waits on.",
            "parameters": [ID],
            "responses": {"200": json_ok(ref("RunDetail")), **READ_ERRORS},
        }
    },
    "/runs/{id}/events": {
        "get": {
            "operationId": "listEvents",
            "summary": "A page of events, read through the index.",
            "parameters": [
                ID,
                q("from", INT, "First seq (default 0)."),
                q(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": 1000},
                    "Default 100; a page also ends before 4 MiB of records.",
                ),
            ],
            "responses": {"200": json_ok(ref("EventsPage")), **READ_ERRORS},
        }
    },
    "/runs/{id}/events/stream": {
        "get": {
            "operationId": "streamEvents",
            "summary": "Every event from `from`, then each new one (SSE).",
            "parameters": [
                ID,
                q("from", INT, "First seq (default 0)."),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": INT,
                    "description": "A reconnecting client's last seq: the stream goes on "
                    "from the next one (takes precedence over `from`).",
                },
            ],
            "responses": {"200": SSE, **READ_ERRORS},
        }
    },
    "/runs/{id}/events/{seq}": {
        "get": {
            "operationId": "getEvent",
            "summary": "One event (404 `seq_out_of_range` past the end).",
            "parameters": [ID, SEQ],
            "responses": {"200": json_ok(ref("Event")), **READ_ERRORS},
        },
        "post": {
            "operationId": "sendEvent",
            "summary": "An outside event for the run's `wait.event` steps (the segment is the "
            "event's name): checked against the plan (422 `event_unknown`, `bad_event`; "
            "nothing kept), kept until the run waits on it, and a run waiting on it now "
            "resumed in the background.",
            "parameters": [ID, EVENT_NAME],
            "requestBody": body(ref("EventRequest")),
            "responses": {"200": json_ok(ref("EventResponse")), "202": QUEUED, **WRITE_ERRORS},
        },
    },
    "/runs/{id}/state": {
        "get": {
            "operationId": "getState",
            "summary": "The state after event `seq` (default: the last).",
            "parameters": [ID, q("seq", INT, "The event."), q("prefix", STR, "Keys starting so.")],
            "responses": {"200": json_ok(ref("State")), **READ_ERRORS},
        }
    },
    "/runs/{id}/verify": {
        "get": {
            "operationId": "verifyRun",
            "summary": "The whole chain, as `oracle verify` (a damaged log is a finding: 200).",
            "parameters": [ID],
            "responses": {"200": json_ok(ref("Verify")), **READ_ERRORS},
        }
    },
    "/runs/{id}/timeline": {
        "get": {
            "operationId": "getTimeline",
            "summary": "Each step's attempts, wall time, tokens and cost (`inspect --steps`).",
            "parameters": [ID],
            "responses": {"200": json_ok(ref("Timeline")), **READ_ERRORS},
        }
    },
    "/runs/{id}/beliefs": {
        "get": {
            "operationId": "getBeliefs",
            "summary": "The belief memory, as `oracle memory`.",
            "parameters": [
                ID,
                q("subject", STR, ""),
                q("predicate", STR, ""),
                q("as_of", INT, "What was believed at this tick."),
            ],
            "responses": {"200": json_ok(ref("Beliefs")), **READ_ERRORS},
        }
    },
    "/runs/{id}/adjudications": {
        "get": {
            "operationId": "listAdjudications",
            "summary": "Adjudication requests, in order.",
            "parameters": [ID, q("status", {"enum": ["pending", "resolved", "expired"]}, "")],
            "responses": {"200": json_ok(ref("Adjudications")), **READ_ERRORS},
        }
    },
    "/runs/{id}/adjudications/{handle}": {
        "post": {
            "operationId": "adjudicate",
            "summary": "A verdict on a pending adjudication.",
            "parameters": [ID, HANDLE],
            "requestBody": body(ref("VerdictRequest")),
            "responses": {"200": json_ok(ref("VerdictResponse")), "202": QUEUED, **WRITE_ERRORS},
        }
    },
    "/memory/{name}/adjudications": {
        "get": {
            "operationId": "listStoreAdjudications",
            "summary": "A named store's adjudication requests, each naming the runs behind "
            "both claims.",
            "parameters": [STORE],
            "responses": {"200": json_ok(ref("StoreAdjudications")), **READ_ERRORS},
        }
    },
    "/memory/{name}/adjudications/{handle}": {
        "post": {
            "operationId": "adjudicateStore",
            "summary": "A verdict on a store's request, under the store's lock (a second is "
            "409); the runs waiting on the store resume in the background.",
            "parameters": [STORE, HANDLE],
            "requestBody": body(ref("VerdictRequest")),
            "responses": {"200": json_ok(ref("StoreVerdictResponse")), **WRITE_ERRORS},
        }
    },
    "/runs/{id}/answer": {
        "post": {
            "operationId": "answer",
            "summary": "The output of the step a suspended run waits on.",
            "parameters": [ID],
            "requestBody": body(ref("AnswerRequest")),
            "responses": {"200": json_ok(ref("AnswerResponse")), "202": QUEUED, **WRITE_ERRORS},
        }
    },
    "/runs/{id}/claims": {
        "post": {
            "operationId": "claim",
            "summary": "A claim from outside, through the memory's gate.",
            "parameters": [ID],
            "requestBody": body(ref("ClaimRequest")),
            "responses": {"200": json_ok(ref("ClaimResponse")), "202": QUEUED, **WRITE_ERRORS},
        }
    },
    "/runs/{id}/resume": {
        "post": {
            "operationId": "resume",
            "summary": "Resumes the run in the server's background.",
            "parameters": [ID],
            "responses": {"200": json_ok(ref("ResumeResponse")), "202": QUEUED, **WRITE_ERRORS},
        }
    },
    "/runs/{id}/cancel": {
        "post": {
            "operationId": "cancel",
            "summary": "Ends a run that has not finished (`cancelled`).",
            "parameters": [ID],
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": ref("CancelRequest")}},
            },
            "responses": {"200": json_ok(ref("CancelResponse")), "202": QUEUED, **WRITE_ERRORS},
        }
    },
    "/runs/{id}/fork": {
        "post": {
            "operationId": "fork",
            "summary": "Forks a run at a round boundary (`at`, a seq) or before a step's first "
            "call (`step`), optionally giving that step's output (`value`), and drives the fork "
            '(docs/FORMAT.md, "Forks and plan versions"). With `plan` (a plan\'s text) the fork '
            "follows that plan once it re-derives the shared events (`409 upgrade_refused` if "
            "not); no sub-plan it `use`s is read from the server.",
            "parameters": [ID],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "at": INT,
                                "step": STR,
                                "value": ANY,
                                "plan": STR,
                                "key": STR,
                            },
                            "additionalProperties": False,
                        }
                    }
                },
            },
            "responses": {
                "201": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "run": ref("RunId"),
                            "parent": ref("RunId"),
                            "shared": INT,
                            "status": STR,
                            "events": nullable(INT),
                            "head": nullable(HASH),
                            "by": nullable(STR),
                        },
                        ["ok", "run", "parent"],
                    ),
                    "Created: the fork, driven until it finished or suspended",
                ),
                "200": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "run": ref("RunId"),
                            "status": STR,
                            "existing": {"const": True},
                            "key": STR,
                            "by": nullable(STR),
                        },
                        ["ok", "run", "existing", "key"],
                    ),
                    "The fork this key made already: nothing was made or run",
                ),
                **WRITE_ERRORS,
            },
        }
    },
    "/proposals": {
        "get": {
            "operationId": "proposals",
            "summary": "The plan changes the home's runs proposed, with their status (as "
            "`oracle evolve list --json`; docs/EVOLUTION.md).",
            "responses": {
                "200": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "proposals": {"type": "array", "items": ref("Proposal")},
                        }
                    )
                ),
                **READ_ERRORS,
            },
        }
    },
    "/proposals/{id}": {
        "get": {
            "operationId": "proposal",
            "summary": "One proposal: its plan, its unified diff against the base plan (null "
            "when no copy of the base is kept), its decision (the ledger entry), lineage and "
            "the check reports kept in the home.",
            "parameters": [PROPOSAL],
            "responses": {
                "200": json_ok(obj({"ok": {"const": True}, "proposal": ref("ProposalDetail")})),
                **READ_ERRORS,
            },
        }
    },
    "/proposals/{id}/check": {
        "post": {
            "operationId": "checkProposal",
            "summary": "Re-derives recorded runs under the proposed plan (nothing is called "
            "or written to a run); the report is kept in the home and its BLAKE3 hash is what "
            "an approval signs.",
            "parameters": [PROPOSAL],
            "requestBody": body(
                {
                    "type": "object",
                    "properties": {
                        "corpus": {
                            "anyOf": [
                                {"type": "array", "items": ref("RunId")},
                                {"const": "all"},
                            ]
                        }
                    },
                    "required": ["corpus"],
                    "additionalProperties": False,
                }
            ),
            "responses": {
                "200": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "report": {"type": "object"},
                            "hash": HASH,
                            "file": STR,
                        },
                        ["ok", "report", "hash"],
                    )
                ),
                **WRITE_ERRORS,
            },
        }
    },
    "/proposals/{id}/reject": {
        "post": {
            "operationId": "rejectProposal",
            "summary": "Rejects a proposal (a ledger entry; `by` is the token's name).",
            "parameters": [PROPOSAL],
            "requestBody": body(
                {
                    "type": "object",
                    "properties": {"reason": STR},
                    "required": ["reason"],
                    "additionalProperties": False,
                }
            ),
            "responses": {
                "200": json_ok(obj({"ok": {"const": True}, "entry": ref("LedgerEntry")})),
                **WRITE_ERRORS,
            },
        }
    },
    "/proposals/{id}/approval": {
        "post": {
            "operationId": "approveProposal",
            "summary": "Appends an approval signed away from the server (`oracle evolve "
            "approve ID --key K --report F --out FILE`) once its hashes name this proposal, its "
            "signature verifies, its key is one the home's policy names (403 `not_an_approver`) "
            "and its report one a check here recorded (422 `report_not_recorded`); the key never "
            "reaches the server.",
            "parameters": [PROPOSAL],
            "requestBody": body(ref("SignedApproval")),
            "responses": {
                "200": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "entry": ref("LedgerEntry"),
                            "uploaded_by": nullable(STR),
                        }
                    )
                ),
                **WRITE_ERRORS,
            },
        }
    },
    "/schedules": {
        "get": {
            "operationId": "listSchedules",
            "summary": 'Every schedule with its next fire time (docs/PLAN.md, "Schedules").',
            "responses": {
                "200": json_ok(obj({"schedules": {"type": "array", "items": ref("Schedule")}})),
                **READ_ERRORS,
            },
        },
        "post": {
            "operationId": "addSchedule",
            "summary": "Adds a schedule: the plan's text started at every tick of `cron` in "
            "`timezone`, exactly once per tick, in the server's `--root`.",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "name": STR,
                                "plan": STR,
                                "cron": STR,
                                "timezone": STR,
                                "inputs": {"type": "object", "additionalProperties": STR},
                                "overlap": {"enum": ["skip", "queue", "allow"]},
                                "catch_up": {"enum": ["none", "last", "all"]},
                            },
                            "required": ["name", "plan", "cron"],
                            "additionalProperties": False,
                        }
                    }
                },
            },
            "responses": {"201": json_ok(ref("Schedule"), "Created"), **WRITE_ERRORS},
        },
    },
    "/schedules/{name}": {
        "delete": {
            "operationId": "removeSchedule",
            "summary": "Removes a schedule (its runs stay).",
            "parameters": [SCHEDULE],
            "responses": {
                "200": json_ok(obj({"ok": {"const": True}, "removed": STR})),
                **WRITE_ERRORS,
            },
        }
    },
    "/schedules/{name}/pause": {
        "post": {
            "operationId": "pauseSchedule",
            "summary": "Pauses a schedule: no tick fires until it is resumed.",
            "parameters": [SCHEDULE],
            "responses": {"200": json_ok(ref("Schedule")), **WRITE_ERRORS},
        }
    },
    "/schedules/{name}/resume": {
        "post": {
            "operationId": "resumeSchedule",
            "summary": "Resumes a schedule; ticks that came while it was paused do not fire.",
            "parameters": [SCHEDULE],
            "responses": {"200": json_ok(ref("Schedule")), **WRITE_ERRORS},
        }
    },
    "/schedules/{name}/trigger": {
        "post": {
            "operationId": "triggerSchedule",
            "summary": "Starts a run of the schedule now, outside its ticks (in the background; "
            "over a store, queued for the workers).",
            "parameters": [SCHEDULE],
            "responses": {
                "201": json_ok(
                    obj(
                        {
                            "ok": {"const": True},
                            "run": ref("RunId"),
                            "status": STR,
                            "existing": BOOL,
                        },
                        ["ok", "run"],
                    ),
                    "Created",
                ),
                **WRITE_ERRORS,
            },
        }
    },
    "/diff": {
        "get": {
            "operationId": "diff",
            "summary": "The first divergence of two runs.",
            "parameters": [
                {"name": "a", "in": "query", "required": True, "schema": ref("RunId")},
                {"name": "b", "in": "query", "required": True, "schema": ref("RunId")},
                q("verify", BOOL, "Verify both logs first (default true)."),
            ],
            "responses": {"200": json_ok(ref("Diff")), **READ_ERRORS},
        }
    },
    "/inbox": {
        "get": {
            "operationId": "inbox",
            "summary": "What waits on a person, across all runs.",
            "responses": {"200": json_ok(ref("Inbox")), **errors(401, 403, 500)},
        }
    },
    "/inbox/stream": {
        "get": {
            "operationId": "inboxStream",
            "summary": "Announcements of new inbox items (SSE, `event: announcement`).",
            "responses": {
                "200": {
                    "description": "Server-Sent Events.",
                    "content": {"text/event-stream": {"schema": STR}},
                },
                **errors(401, 403, 503),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This description.",
            "responses": {"200": json_ok({"type": "object"})},
        }
    },
}

doc = {
    "openapi": "3.1.0",
    "info": {
        "title": "oracle serve",
        "version": "1",
        "description": "The HTTP API of `oracle serve` (docs/API.md): runs, their events, "
        "state and beliefs, the inbox, and the answers, verdicts, claims, "
        "resumes, cancels and starts a person or service sends. Every failure "
        "is an `Error` with a stable `code`.",
    },
    "servers": [{"url": "/api/v1"}],
    "security": [{"bearer": []}],
    "paths": paths,
    "components": {
        "schemas": schemas,
        "responses": {
            "Error": {
                "description": "A failure, in the command line's error shape.",
                "content": {"application/json": {"schema": ref("Error")}},
            }
        },
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "A token of `oracle serve token add`.",
            }
        },
    },
}

if __name__ == "__main__":
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {OUT}")
