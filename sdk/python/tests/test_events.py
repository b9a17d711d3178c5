"""``send_event`` against a real ``oracle serve`` (file home): the door the command line's
``oracle signal`` and ``POST /api/v1/runs/{id}/events/{name}`` share. A refused event (a
value its wait's schema refuses, a name no wait declares) raises the API's code and keeps
nothing; one sent before its wait is kept; one sent after wakes the run, which completes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import openapi_check
from oracle_client import AsyncClient, Client, OracleError, verify
from test_client import Server, serve


@pytest.fixture(scope="module")
def server(oracle_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(oracle_bin, tmp_path_factory.mktemp("home"), "sdk")


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    http = httpx.Client(timeout=30.0, event_hooks={"response": [openapi_check.check]})
    with http, Client(server.url, token=server.token, http=http) as c:
        yield c


def kept(server: Server, run: str) -> list[str]:
    inbox = server.home / "runs" / run / "inbox"
    return sorted(p.name for p in inbox.iterdir()) if inbox.exists() else []


def test_send_event_is_refused_kept_and_delivered(server: Server, client: Client) -> None:
    run = server.run_plan("order.plan")
    r = client.wait(run, timeout=10)
    assert r.status == "suspended" and r.waiting is not None and r.waiting.step == "paid"

    with pytest.raises(OracleError) as e:
        client.send_event(run, "payment", {"amount": "five"})
    assert (e.value.status, e.value.code, e.value.exit) == (422, "bad_event", 2)
    with pytest.raises(OracleError) as e:
        client.send_event(run, "refund", {"amount": 5})
    assert (e.value.status, e.value.code) == (422, "event_unknown")
    assert kept(server, run) == []

    out = client.send_event(run, "shipped", "ups")
    assert out["n"] == 1 and out["by"] == "sdk" and out["resume"] is None
    out = client.send_event(run, "payment", {"amount": 7})
    assert out["n"] == 2 and out["resume"] == {"started": True}
    r = client.wait(run, statuses=("completed", "failed"), timeout=30)
    assert r.status == "completed"
    resumed = [e.payload for e in client.events(run) if e.kind == "resumed"]
    assert [(p["step"], p["value"], p["by"]) for p in resumed] == [
        ("paid", {"amount": 7}, "event payment #2"),
        ("shipped", "ups", "event shipped #1"),
    ]
    assert verify(server.home / "runs" / run).ok
    proc = server.oracle("replay", run, "--json")
    assert json.loads(proc.stdout.splitlines()[-1])["ok"], proc.stdout + proc.stderr


def test_the_async_client_sends_events_too(server: Server) -> None:
    run = server.run_plan("order.plan")

    async def go() -> None:
        async with AsyncClient(server.url, token=server.token) as c:
            with pytest.raises(OracleError) as e:
                await c.send_event(run, "refund", 1)
            assert e.value.code == "event_unknown"
            await c.send_event(run, "payment", {"amount": 1})
            await c.send_event(run, "shipped", "dhl")

    asyncio.run(go())
    with Client(server.url, token=server.token) as c:
        assert c.wait(run, statuses=("completed", "failed"), timeout=30).status == "completed"
