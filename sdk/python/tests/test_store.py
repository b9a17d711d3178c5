"""The client against ``oracle serve --store``: a throwaway PostgreSQL cluster, a worker and a
server over it, on loopback and a Unix socket only.

Runs are started, waited for, answered and cancelled through the API as on a file home; the
server checks each write before it queues it (a wrong answer has the file home's code), and
the worker records it. Skipped, loudly, where PostgreSQL's ``initdb`` is not installed, unless
``ORACLE_REQUIRE_POSTGRES=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import openapi_check
from conftest import REPO
from oracle_client import Client, OracleError, verify

ASK = """plan ask version 1

a = text.count { text: "release notes" }
q = human.ask { question: "Ship the release?", schema: { type: "string" } }
  after a
b = text.count { text: "answered" }
  after q
"""


def _pg_bin() -> Path | None:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and (Path(d) / "initdb").is_file():
            return Path(d)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


def _pg(tool: str, *args: str) -> list[str]:
    bin_dir = _pg_bin()
    assert bin_dir is not None
    exe = str(bin_dir / tool)
    return ["runuser", "-u", "postgres", "--", exe, *args] if os.geteuid() == 0 else [exe, *args]


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    """A throwaway cluster listening on a Unix socket only, with the store's schema."""
    if _pg_bin() is None:
        if os.environ.get("ORACLE_REQUIRE_POSTGRES") == "1":
            pytest.fail("ORACLE_REQUIRE_POSTGRES=1 but PostgreSQL's initdb is not installed")
        pytest.skip("no PostgreSQL (initdb): the store's client tests need it")
    # Under the system's temporary directory, as `oracle_pg::cluster` does: the cluster may
    # run as the `postgres` user, who cannot reach pytest's directories.
    base = Path(tempfile.mkdtemp(prefix="oracle-sdk-pg-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    subprocess.run(
        _pg("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"),
        check=True,
        capture_output=True,
    )
    opts = f"-c listen_addresses='' -k {base} -p 5432 -c fsync=off"
    subprocess.run(
        _pg("pg_ctl", "-D", str(data), "-l", str(base / "log"), "-o", opts, "-w", "start"),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@localhost:5432/postgres?host={base}"
    finally:
        subprocess.run(
            _pg("pg_ctl", "-D", str(data), "-m", "immediate", "stop"), capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def store_server(
    oracle_bin: Path, store_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    """A worker and ``oracle serve --store`` with a token named ``sdk``: (url, token, home)."""
    home = tmp_path_factory.mktemp("store-home")

    def oracle(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(oracle_bin), "--home", str(home), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )

    oracle("store", "init", "--store", store_url)
    token = oracle("serve", "token", "add", "sdk").stdout.strip().split()[-1]
    worker = subprocess.Popen(
        [str(oracle_bin), "worker", "--store", store_url, "--poll-ms", "100"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = subprocess.Popen(
        [
            *(str(oracle_bin), "--home", str(home), "serve", "--listen", "127.0.0.1:0"),
            *("--store", store_url, "--root", str(REPO)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline().strip()
    assert line.startswith("listening http://"), line
    threading.Thread(target=server.stdout.read, daemon=True).start()
    try:
        yield line.split()[1], token, home
    finally:
        for proc in (server, worker):
            proc.send_signal(signal.SIGTERM)
        for proc in (server, worker):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def client(store_server: tuple[str, str, Path]) -> Iterator[Client]:
    url, token, _ = store_server
    http = httpx.Client(timeout=30.0, event_hooks={"response": [openapi_check.check]})
    with http, Client(url, token=token, http=http) as c:
        yield c


def test_a_run_started_answered_and_cancelled_over_a_store(
    client: Client, store_server: tuple[str, str, Path]
) -> None:
    run = client.start_run(ASK, key="store-1")
    assert client.start_run(ASK, key="store-1").id == run.id
    r = client.wait(run.id, statuses=("suspended",), timeout=30)
    assert r.waiting is not None and r.waiting.step == "q"
    # Checked before it is queued: the file home's code.
    with pytest.raises(OracleError) as e:
        client.answer(run.id, "nope", "ship")
    assert (e.value.status, e.value.code) == (409, "wrong_step")
    queued = client.answer(run.id, "q", "ship")
    assert queued["queued"]["kind"] == "resume", queued
    r = client.wait(run.id, statuses=("completed", "failed"), timeout=30)
    assert r.status == "completed"
    answered = [e for e in client.events(run.id) if e.kind == "resumed"]
    assert [e.payload.get("by") for e in answered] == ["sdk"]
    _, _, home = store_server
    assert verify(home / "store-mirror" / "runs" / run.id).ok

    second = client.start_run(ASK, key="store-2")
    client.wait(second.id, statuses=("suspended",), timeout=30)
    assert client.cancel(second.id, reason="not needed")["status"] == "cancel_queued"
    r = client.wait(second.id, statuses=("cancelled",), timeout=30)
    assert r.status == "cancelled"
