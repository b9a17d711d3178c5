"""The clients against a real ``oracle serve`` (file home) on a free loopback port.

Runs are made with the ``oracle run`` command line on the repository's plans (escalation
suspends twice: a step that yields to a person, then a question), then read, streamed, waited
for, answered and cancelled through the API.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import openapi_check
from conftest import FIXTURES, REPO
from oracle_client import AsyncClient, Client, InboxItem, OracleError, verify


@dataclass
class Server:
    """A running ``oracle serve`` and what a test needs to use it."""

    url: str
    token: str
    home: Path
    bin: Path

    def oracle(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Runs the command line on the same home, from the repository root (the plans'
        paths are relative to it)."""
        return subprocess.run(
            [str(self.bin), "--home", str(self.home), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def run_plan(self, plan: str, *args: str) -> str:
        """Starts a run of fixtures/plans/PLAN with ``oracle run`` and returns its id."""
        proc = self.oracle("run", "--json", str(FIXTURES / "plans" / plan), *args)
        out = json.loads(proc.stdout)
        assert out.get("ok"), proc.stdout + proc.stderr
        return str(out["run"])


def serve(oracle_bin: Path, home: Path, name: str) -> Iterator[Server]:
    """Starts ``oracle serve`` on ``home`` with a token named ``name``; stops it after."""
    add = subprocess.run(
        [str(oracle_bin), "--home", str(home), "serve", "token", "add", name],
        capture_output=True,
        text=True,
        check=True,
    )
    token = add.stdout.strip().split()[-1]
    assert len(token) == 64, add.stdout
    args = [str(oracle_bin), "--home", str(home), "serve", "--listen", "127.0.0.1:0"]
    helptext = subprocess.run(
        [str(oracle_bin), "serve", "--help"], capture_output=True, text=True
    ).stdout
    if "--root" in helptext:
        # Runs started through the API work in the repository, as `oracle run` from its root.
        args += ["--root", str(REPO)]
    proc = subprocess.Popen(
        args,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening http://"), line
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    try:
        yield Server(line.split()[1], token, home, oracle_bin)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(oracle_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(oracle_bin, tmp_path_factory.mktemp("home"), "sdk")


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    """A client whose every answer is also checked against docs/openapi.json."""
    http = httpx.Client(timeout=30.0, event_hooks={"response": [openapi_check.check]})
    with http, Client(server.url, token=server.token, http=http) as c:
        yield c


def inbox_item(client: Client, run: str, step: str) -> InboxItem:
    """The run's inbox item for ``step``: the server's watcher adds it within a poll interval
    of the suspension, so it may take a moment to appear."""
    deadline = time.monotonic() + 10
    while True:
        for i in client.inbox():
            if (i.run, i.step) == (run, step):
                return i
        assert time.monotonic() < deadline, f"{run} {step} never reached the inbox"
        time.sleep(0.05)


def test_whoami_and_errors_carry_the_apis_code(server: Server, client: Client) -> None:
    assert client.whoami() == "sdk"
    with pytest.raises(OracleError) as e:
        client.get_run("no-such-run-1")
    assert (e.value.code, e.value.status) == ("not_found", 404)
    assert e.value.message
    with Client(server.url, token="0" * 64) as bad, pytest.raises(OracleError) as e:
        bad.runs()
    assert e.value.code == "bad_token" and e.value.status == 401
    with Client(server.url) as anonymous, pytest.raises(OracleError) as e:
        anonymous.runs()
    assert e.value.code == "unauthorized"
    with Client("http://127.0.0.1:9", token="x") as nowhere, pytest.raises(OracleError) as e:
        nowhere.runs()
    assert e.value.code == "connection" and e.value.status == 0


def test_runs_events_and_the_offline_verifier_agree(server: Server, client: Client) -> None:
    run = server.run_plan("quickstart.plan")
    r = client.get_run(run)
    assert (r.id, r.plan, r.status, r.events) == (run, "quickstart", "completed", 16)
    assert run in {x.id for x in client.runs()}
    assert run in {x.id for x in client.runs(status="completed", plan="quickstart")}
    assert run not in {x.id for x in client.runs(status="suspended")}
    events = list(client.events(run, limit=5))
    assert [e.seq for e in events] == list(range(16))
    assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
    assert [e.seq for e in client.events(run, from_seq=10)] == list(range(10, 16))
    assert client.event(run, 3) == events[3]
    # The server's head, the events' head and an offline verification are one hash.
    report = verify(server.home / "runs" / run)
    assert report.ok and report.head == r.head == events[-1].hash
    assert client.verify_run(run)["head"] == r.head
    timeline = client.timeline(run)
    assert [s["step"] for s in timeline["steps"]] == ["read", "stats", "summary"]
    assert timeline["tokens"] == 0 and timeline["cost"] is None
    with pytest.raises(OracleError) as e:
        client.event(run, 99)
    assert e.value.code == "seq_out_of_range"


def test_stream_replays_the_log_then_follows_it(server: Server, client: Client) -> None:
    run = server.run_plan("escalation.plan")
    before = client.get_run(run)
    assert before.status == "suspended" and before.waiting is not None
    seen: list[int] = []
    for e in client.stream(run, from_seq=before.events - 3):
        seen.append(e.seq)
        if e.seq == before.events - 1:
            break
    assert seen == [before.events - 3, before.events - 2, before.events - 1]


def test_wait_answer_inbox_and_resume_through_the_api(server: Server, client: Client) -> None:
    run = server.run_plan("escalation.plan")
    r = client.wait(run, timeout=10)
    assert r.status == "suspended" and r.waiting is not None and r.waiting.step == "total"
    assert inbox_item(client, run, "total").kind == "yield"
    client.answer(run, "total", {"value": {"total": 1250}})
    r = client.wait(run, statuses=("suspended", "completed", "failed"), timeout=30)
    # The background resume runs to the question and suspends again.
    deadline = time.monotonic() + 30
    while (r.waiting is None or r.waiting.step != "confirm") and time.monotonic() < deadline:
        r = client.wait(run, timeout=30)
    assert r.waiting is not None and r.waiting.step == "confirm"
    item = inbox_item(client, run, "confirm")
    assert item.kind == "question" and "1250" in str(item.question)
    client.answer(run, "confirm", "approved")
    r = client.wait(run, statuses=("completed", "failed"), timeout=30)
    assert r.status == "completed"
    answered = [e for e in client.events(run) if e.kind == "resumed"]
    assert [e.payload.get("by") for e in answered] == ["sdk", "sdk"]
    assert verify(server.home / "runs" / run).ok


def test_a_wrong_answer_is_refused_with_its_code(server: Server, client: Client) -> None:
    run = server.run_plan("escalation.plan")
    with pytest.raises(OracleError) as e:
        client.answer(run, "confirm", "approved")
    assert e.value.status == 409 and e.value.code == "wrong_step"
    with pytest.raises(OracleError) as e:
        client.adjudicate(run, "adj-1", "affirm")
    assert e.value.code == "unknown_handle" and e.value.exit == 5


def test_wait_times_out(server: Server, client: Client) -> None:
    run = server.run_plan("escalation.plan")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        client.wait(run, statuses=("completed",), timeout=1.0)
    assert time.monotonic() - started < 5


def test_cancel_records_who_and_why(server: Server, client: Client) -> None:
    run = server.run_plan("escalation.plan")
    out = client.cancel(run, reason="not needed")
    assert out["status"] == "cancelled" and out["by"] == "sdk"
    r = client.wait(run, timeout=5)
    assert r.status == "cancelled"
    with pytest.raises(OracleError) as e:
        client.cancel(run)
    assert e.value.code == "finished"


def test_the_async_client_does_the_same(server: Server) -> None:
    run = server.run_plan("escalation.plan")

    async def go() -> list[Any]:
        hooks = {"response": [openapi_check.acheck]}
        async with (
            httpx.AsyncClient(timeout=30.0, event_hooks=hooks) as http,
            AsyncClient(server.url, token=server.token, http=http) as c,
        ):
            assert await c.whoami() == "sdk"
            r = await c.wait(run, timeout=10)
            assert r.status == "suspended"
            assert run in {x.id for x in await c.runs(status="suspended")}
            seqs = [e.seq async for e in c.events(run, limit=7)]
            assert seqs == list(range(r.events))
            streamed = []
            async for e in c.stream(run, from_seq=r.events - 2):
                streamed.append(e.seq)
                if e.seq == r.events - 1:
                    break
            assert isinstance(await c.inbox(), list)
            with pytest.raises(OracleError) as err:
                await c.get_run("nope-1")
            assert err.value.code == "not_found"
            out = await c.cancel(run)
            assert out["status"] == "cancelled"
            return streamed

    assert len(asyncio.run(go())) == 2


def _start_supported(server: Server) -> bool:
    """Whether this server has ``POST /api/v1/runs`` (the platform issue adds it)."""
    r = httpx.post(
        server.url + "/api/v1/runs",
        json={},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    return r.status_code not in (404, 405)


def test_start_run_is_idempotent_under_a_key(server: Server, client: Client) -> None:
    if not _start_supported(server):
        pytest.skip("this oracle serve has no POST /api/v1/runs yet")
    plan = (FIXTURES / "plans" / "escalation.plan").read_text()
    first = client.start_run(plan, key="sdk-key-1")
    assert first.existing is False and first.plan == "escalation"
    again = client.start_run(plan, key="sdk-key-1")
    assert again.id == first.id and again.existing is True
    with pytest.raises(OracleError) as e:
        client.start_run(plan, inputs={"invoice": "fixtures/data/notes.txt"}, key="sdk-key-1")
    assert e.value.code == "key_conflict" and e.value.status == 409
    assert e.value.details["differs"] == ["inputs"]
    r = client.wait(first.id, timeout=30)
    assert r.status == "suspended"
    refused = httpx.post(
        server.url + "/api/v1/runs",
        json={"plan": plan, "bogus": 1},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "usage"


def test_the_server_serves_its_description(server: Server, client: Client) -> None:
    """``GET /api/v1/openapi.json`` is docs/openapi.json, byte for byte (compiled in)."""
    r = httpx.get(
        server.url + "/api/v1/openapi.json",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.content == (REPO / "docs" / "openapi.json").read_bytes()
    assert r.json() == openapi_check.DOC


def test_every_read_answers_as_described(server: Server) -> None:
    """The endpoints the SDK has no method for, read raw through the description's check:
    state, verify, beliefs, adjudications, diff (on a copy of a recorded run with a pending
    adjudication), and a refused write."""
    src = FIXTURES / "runs-v2" / "runs" / "adjudication-1"
    dst = server.home / "runs" / "adjudication-1"
    if not dst.exists():
        shutil.copytree(src, dst)
    quick = server.run_plan("quickstart.plan")
    hooks = {"response": [openapi_check.check]}
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url + "/api/v1", headers=auth, event_hooks=hooks) as h:
        for path in (
            "/runs/adjudication-1",
            "/runs/adjudication-1/state",
            f"/runs/{quick}/state?prefix=step/",
            "/runs/adjudication-1/verify",
            "/runs/adjudication-1/beliefs",
            "/runs/adjudication-1/adjudications",
            "/runs/adjudication-1/adjudications?status=pending",
            f"/diff?a={quick}&b={quick}",
            "/inbox",
            "/runs?limit=1",
        ):
            assert h.get(path).status_code == 200, path
        assert h.get("/runs?limit=0").status_code == 400
        r = h.post(f"/runs/{quick}/answer", json={"step": "x", "value": 1, "bogus": True})
        assert r.status_code == 400 and r.json()["error"]["code"] == "usage"
        r = h.post(f"/runs/{quick}/answer", content=b"{}", headers={"content-type": "text/plain"})
        assert r.status_code == 415


NAP_PLAN = """plan nap version 1

ok = human.ask { question: "Nap?" }

nap = sleep { for: "1s" }
  after ok

note = text.count { text: "woke at " + nap.fired }
"""


def test_wait_after_an_answer_goes_through_a_sleep_to_the_end(
    server: Server, client: Client
) -> None:
    # Issue 58: `answer(); wait()` stopped at the run's timer, which the server wakes by itself.
    run = client.start_run(NAP_PLAN).id
    assert client.wait(run).status == "suspended"
    client.answer(run, "ok", "yes", resume=True)
    done = client.wait(run, timeout=60.0)
    assert done.status == "completed", done
    # Asked to, it stops at the timer (or later, when the wheel was quicker).
    run2 = client.start_run(NAP_PLAN).id
    client.wait(run2)
    client.answer(run2, "ok", "yes", resume=True)
    at = client.wait(run2, through_sleeps=False, timeout=60.0)
    assert at.sleeping or at.status == "completed", at


def test_async_wait_goes_through_a_sleep(server: Server) -> None:
    async def go() -> str:
        async with AsyncClient(server.url, token=server.token) as c:
            run = (await c.start_run(NAP_PLAN)).id
            await c.wait(run)
            await c.answer(run, "ok", "yes", resume=True)
            return (await c.wait(run, timeout=60.0)).status

    assert asyncio.run(go()) == "completed"
