"""The Python verifier agrees with ``oracle verify`` on every log in fixtures/.

Verdict, exit code, event count, head, the kind of failure, the first bad seq and its byte
offset must be equal; so must the reason, except for a malformed record, where the JSON
parser's own words differ (serde_json's and Python's) but the verdict does not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _compare import binary_verdict, python_verdict
from conftest import FIXTURES
from oracle_client import _canon as canon
from oracle_client import verify
from oracle_client._verify import verify_bytes

LOGS = sorted(FIXTURES.rglob("*.jsonl"))
RUN_DIRS = sorted(p.parent for p in FIXTURES.glob("runs-*/runs/*/events.jsonl"))


def assert_same(python: dict[str, Any], binary: dict[str, Any]) -> None:
    """Equal verdicts; a malformed record's reason is the JSON parser's and may differ."""
    if str(binary.get("reason") or "").startswith("malformed record") and str(
        python.get("reason") or ""
    ).startswith("malformed record"):
        python = {**python, "reason": None}
        binary = {**binary, "reason": None}
    assert python == binary


def test_golden_vectors() -> None:
    """Every byte rule of FORMAT.md, as fixtures/golden/vectors.json pins it."""
    v = json.loads((FIXTURES / "golden" / "vectors.json").read_text())
    assert canon.encode(v["payload"]).hex() == v["payload_canonical_hex"]
    assert canon.payload_hash(v["payload"]).hex() == v["payload_hash"]
    assert canon.EMPTY_STATE_HASH.hex() == v["empty_state_hash"]
    assert canon.state_hash(v["state_entries"]).hex() == v["state_hash"]
    r = verify_bytes("".join(v["events_jsonl"]).encode(), check_state=True)
    assert r.ok, r.reason
    assert r.head == v["head_hash"]
    assert r.state == v["state_hash"]


def test_there_are_fixture_logs_to_compare() -> None:
    """A move of fixtures/ must not silently empty the comparison below."""
    names = {p.name for p in LOGS}
    assert {"quickstart.jsonl", "torn-tail.jsonl", "swapped.jsonl"} <= names
    assert len(LOGS) >= 25
    assert len(RUN_DIRS) >= 6


@pytest.mark.parametrize("log", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_log_verdicts_match_the_binary(oracle_bin: Path, log: Path) -> None:
    assert_same(python_verdict(log), binary_verdict(oracle_bin, log))


@pytest.mark.parametrize("run", RUN_DIRS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_run_directories_verify_as_their_log(oracle_bin: Path, run: Path) -> None:
    assert_same(python_verdict(run), binary_verdict(oracle_bin, run / "events.jsonl"))


def test_a_kept_head_catches_the_relinked_forgery(oracle_bin: Path) -> None:
    """relinked.jsonl is self-consistent; only a head kept from before the forgery fails it."""
    log = FIXTURES / "logs" / "broken" / "relinked.jsonl"
    original = FIXTURES / "logs" / "quickstart.jsonl"
    kept = verify(original).head
    assert kept is not None
    for head in (kept, kept[:12]):
        b = binary_verdict(oracle_bin, log, "--head", head)
        p = python_verdict(log, head=head)
        assert (p["exit"], p["kind"]) == (b["exit"], b["kind"]) == (4, "head_not_found")
    # The head of the log itself, or of an event in it, is found.
    own = verify(log).head
    assert own is not None
    assert_same(python_verdict(log, head=own), binary_verdict(oracle_bin, log, "--head", own))


def test_an_empty_or_missing_log_is_exit_2(oracle_bin: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for log in (empty, tmp_path / "missing.jsonl"):
        b = binary_verdict(oracle_bin, log)
        p = python_verdict(log)
        assert (p["exit"], p["ok"], p["seq"]) == (b["exit"], b["ok"], b["seq"]) == (2, False, None)
    assert python_verdict(empty)["kind"] == binary_verdict(oracle_bin, empty)["kind"]


def test_the_module_exits_as_oracle_verify_does(oracle_bin: Path) -> None:
    """``python -m oracle_client.verify LOG [--json]``: same exit code, same first bad seq."""
    for log in (
        FIXTURES / "logs" / "quickstart.jsonl",
        FIXTURES / "logs" / "broken" / "swapped.jsonl",
        FIXTURES / "logs" / "broken" / "torn-tail.jsonl",
    ):
        py = subprocess.run(
            [sys.executable, "-m", "oracle_client.verify", "--json", str(log)],
            capture_output=True,
            text=True,
        )
        rs = subprocess.run(
            [str(oracle_bin), "verify", "--json", str(log)], capture_output=True, text=True
        )
        assert py.returncode == rs.returncode
        assert py.stderr.count("RuntimeWarning") == 0
        p, r = json.loads(py.stdout), json.loads(rs.stdout)
        assert p["ok"] == r["ok"]
        if p["ok"]:
            assert (p["events"], p["head"], p["state"]) == (r["events"], r["head"], r["state"])
        else:
            for key in ("kind", "seq", "offset", "code", "exit"):
                assert p["error"][key] == r["error"][key], key
        text = subprocess.run(
            [sys.executable, "-m", "oracle_client.verify", str(log)], capture_output=True
        )
        assert text.returncode == rs.returncode


def test_the_state_check_recomputes_every_state_after() -> None:
    """``check_state`` goes beyond ``oracle verify``: the nondeterministic-reducer fixture,
    valid for ``verify``, fails it where the recorded state stops matching the events."""
    good = FIXTURES / "logs" / "quickstart.jsonl"
    assert verify(good, check_state=True).ok
    bad = FIXTURES / "diff" / "state" / "b.jsonl"
    assert verify(bad).ok
    r = verify(bad, check_state=True)
    assert not r.ok and r.seq is not None and "state_after" in (r.reason or "")


def test_the_submodule_import_keeps_verify_callable() -> None:
    import oracle_client
    import oracle_client.verify as module

    assert module.main is not None
    assert oracle_client.verify(FIXTURES / "logs" / "denied.jsonl").events == 5
