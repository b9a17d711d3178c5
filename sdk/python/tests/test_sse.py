"""The event stream's reconnection, without a server: a transport that ends the stream early.

A real server ends a stream only when it shuts down, so the resumption with ``Last-Event-ID``
is tested here against httpx's mock transport: the first connection sends events 0 and 1 and
ends, the second must ask for what comes after 1 and gets event 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from oracle_client import Client, OracleError


def record(seq: int) -> str:
    return json.dumps(
        {
            "seq": seq,
            "time": seq,
            "kind": "run_started" if seq == 0 else "state_changed",
            "parents": [],
            "payload": {},
            "payload_hash": "0" * 64,
            "state_before": "0" * 64,
            "state_after": "0" * 64,
            "prev": "0" * 64,
            "hash": f"{seq:064x}",
        }
    )


def sse(*seqs: int) -> bytes:
    parts = [": keep-alive\n\n"]
    for s in seqs:
        parts.append(f"event: event\nid: {s}\ndata: {record(s)}\n\n")
    return "".join(parts).encode()


def mock(handler: Callable[[httpx.Request], httpx.Response], token: str | None = None) -> Client:
    """A client whose requests go to ``handler`` instead of a server."""
    return Client(
        "http://oracle.test", token=token, http=httpx.Client(transport=httpx.MockTransport(handler))
    )


def test_a_dropped_stream_resumes_after_the_last_event_id() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        assert request.headers["Authorization"] == "Bearer t"
        assert request.url.path == "/api/v1/runs/r-1/events/stream"
        body = sse(0, 1) if len(seen) == 1 else sse(2)
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    with mock(handler, "t") as c:
        got = []
        for e in c.stream("r-1"):
            got.append(e.seq)
            if e.seq == 2:
                break
    assert got == [0, 1, 2]
    assert seen == [None, "1"]


def test_an_error_event_ends_the_stream_with_its_code() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        err = json.dumps({"code": "torn_tail", "exit": 4, "message": "torn", "seq": 3})
        body = sse(0) + f"event: error\ndata: {err}\n\n".encode()
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    with mock(handler) as c:
        it = c.stream("r-1")
        assert next(it).seq == 0
        with pytest.raises(OracleError) as e:
            next(it)
    assert (e.value.code, e.value.exit, e.value.details.get("seq")) == ("torn_tail", 4, 3)


def test_a_refused_stream_raises_the_apis_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, json={"ok": False, "error": {"code": "busy", "exit": 2, "message": "full"}}
        )

    with (
        mock(handler) as c,
        pytest.raises(OracleError) as e,
    ):
        next(iter(c.stream("r-1")))
    assert (e.value.code, e.value.status) == ("busy", 503)
