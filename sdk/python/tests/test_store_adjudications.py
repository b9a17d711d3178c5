"""A named belief store's adjudications through the client (``store_adjudications``,
``adjudicate_store``) against a real ``oracle serve`` (file home): two runs publish
contradicting critical claims to the store ``alice``, a third waits for the line to be
resolved; the client lists the request with both runs, a verdict applies once (a second is
``already_resolved``), the waiting run is resumed and completes, and it replays offline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import openapi_check
from oracle_client import AsyncClient, Client, OracleError
from test_client import Server, serve

ASSERT = (
    "plan allergy_assert version 1\n\n"
    'said = memory.assert { subject: "alice", predicate: "allergy", value: "penicillin", '
    'provenance: "user_asserted", criticality: "critical" }\n'
)
CONTRADICT = (
    "plan allergy_contradict version 1\n\n"
    'said = memory.assert { subject: "alice", predicate: "allergy", value: "none", '
    'provenance: "external_first_hand", criticality: "critical" }\n'
)
WAIT = (
    "plan allergy_wait version 1\n\n"
    'allergy = memory.query { subject: "alice", predicate: "allergy", require: "resolved" }\n'
)


@pytest.fixture(scope="module")
def server(oracle_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(oracle_bin, tmp_path_factory.mktemp("home"), "sdk")


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    http = httpx.Client(timeout=30.0, event_hooks={"response": [openapi_check.check]})
    with http, Client(server.url, token=server.token, http=http) as c:
        yield c


def start(server: Server, tmp: Path, name: str, text: str) -> str:
    plan = tmp / f"{name}.plan"
    plan.write_text(text)
    proc = server.oracle("run", "--json", str(plan), "--memory", "alice")
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out.get("ok"), proc.stdout + proc.stderr
    return str(out["run"])


def test_a_stores_request_is_listed_decided_once_and_wakes_the_waiting_run(
    server: Server, client: Client, tmp_path: Path
) -> None:
    start(server, tmp_path, "assert", ASSERT)
    start(server, tmp_path, "contradict", CONTRADICT)
    waiting = start(server, tmp_path, "wait", WAIT)
    assert client.get_run(waiting).status == "suspended"
    # The server resumes the runs its watcher has seen waiting on the store: wait for that.
    deadline = time.monotonic() + 20
    while waiting not in [i.run for i in client.inbox()]:
        assert time.monotonic() < deadline, "the waiting run never reached the inbox"
        time.sleep(0.1)

    listed = client.store_adjudications("alice")
    assert listed["store"]["name"] == "alice"
    request = listed["adjudications"][0]
    assert (request["handle"], request["status"]) == ("adj-1", "pending")
    assert request["challenger"]["run"] == "allergy_contradict-1"
    assert request["incumbent"]["run"] == "allergy_assert-1"
    with pytest.raises(OracleError) as e:
        client.store_adjudications("nobody")
    assert (e.value.status, e.value.code) == (404, "unknown_store")

    out = client.adjudicate_store("alice", "adj-1", "deny", note="the chart says penicillin")
    assert (out["outcome"], out["verdict"], out["by"]) == ("applied", "deny", "sdk")
    assert waiting in out["resumed"]

    async def again() -> None:
        async with AsyncClient(server.url, token=server.token) as c:
            assert (await c.store_adjudications("alice"))["adjudications"][0]["status"] != "pending"
            with pytest.raises(OracleError) as e:
                await c.adjudicate_store("alice", "adj-1", "affirm")
            assert (e.value.status, e.value.code) == (409, "already_resolved")

    asyncio.run(again())
    run = client.wait(waiting, statuses=("completed", "failed"), timeout=30)
    assert run.status == "completed"
    proc = server.oracle("replay", waiting, "--json")
    assert json.loads(proc.stdout.splitlines()[-1])["ok"], proc.stdout + proc.stderr
