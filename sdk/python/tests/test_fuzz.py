"""Randomly damaged logs: the Python verifier and ``oracle verify`` give the same verdict.

Each case is seeded (``random.Random(n)``), so a failure names a case that can be replayed.
Damage comes in two sorts: blind damage to the bytes (flip a byte, truncate, swap, drop or
repeat a record, insert a newline) and forgeries that recompute every hash after the edit
(an unknown payload field, a missing or mistyped one, unsorted grants, a parent moved), which
only the payload-shape and parent checks can catch.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from _compare import binary_verdict, python_verdict
from conftest import FIXTURES
from oracle_client import _canon as canon
from test_verify import assert_same

BASES = [
    FIXTURES / "logs" / "quickstart.jsonl",
    FIXTURES / "logs" / "suspended.jsonl",
    FIXTURES / "demand" / "memory.jsonl",
    FIXTURES / "runs-v2" / "runs" / "adjudication-1" / "events.jsonl",
    FIXTURES / "runs-v1" / "runs" / "diamond-1" / "events.jsonl",
]

CASES = 240


def _records(data: bytes) -> list[bytes]:
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def damage(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One blind edit of the bytes."""
    recs = _records(data)
    what = rng.choice(["flip", "flip", "flip", "truncate", "swap", "drop", "repeat", "newline"])
    if what == "flip":
        i = rng.randrange(len(data))
        b = bytearray(data)
        b[i] ^= rng.choice([1, 2, 4, 8, 16, 32, 64, 128, rng.randrange(1, 256)])
        return f"flip byte {i}", bytes(b)
    if what == "truncate":
        n = rng.randrange(len(data))
        return f"truncate at {n}", data[:n]
    if what == "newline":
        i = rng.randrange(len(data))
        return f"newline at {i}", data[:i] + b"\n" + data[i:]
    i = rng.randrange(len(recs))
    j = rng.randrange(len(recs))
    if what == "swap":
        recs[i], recs[j] = recs[j], recs[i]
        return f"swap {i} {j}", b"".join(recs)
    if what == "drop":
        del recs[i]
        return f"drop {i}", b"".join(recs)
    recs.insert(j, recs[i])
    return f"repeat {i} at {j}", b"".join(recs)


def _encode(e: dict[str, Any]) -> bytes:
    payload = json.dumps(e["payload"], ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    head = (
        f'{{"seq":{e["seq"]},"time":{e["time"]},"kind":"{e["kind"]}","parents":'
        f'{json.dumps(e["parents"], separators=(",", ":"))},"payload":{payload}'
    )
    tail = "".join(
        f',"{k}":"{e[k]}"' for k in ("payload_hash", "state_before", "state_after", "prev", "hash")
    )
    return (head + tail + "}\n").encode()


def _relink(events: list[dict[str, Any]], skip: int | None = None) -> bytes:
    """Recomputes every payload hash and chain hash, as a forger would (all but the chain
    hash of event ``skip``, as a careless one would)."""
    prev = bytes(32)
    out = []
    for n, e in enumerate(events):
        if isinstance(e["payload"], dict) and "zz_float" in e["payload"]:
            # A float has no canonical encoding, so no payload hash: keep the recorded one.
            out.append(_encode(e).replace(b'"zz_float":"1.5"', b'"zz_float":1.5'))
            prev = bytes.fromhex(e["hash"])
            continue
        try:
            e["payload_hash"] = canon.payload_hash(e["payload"]).hex()
        except canon.CanonError:
            # Too deep to hash: no writer could have sealed it, so it keeps the old hashes.
            out.append(_encode(e))
            prev = bytes.fromhex(e["hash"])
            continue
        body = canon.body_hash(
            e["seq"],
            e["time"],
            e["kind"],
            e["parents"],
            bytes.fromhex(e["payload_hash"]),
            bytes.fromhex(e["state_before"]),
            bytes.fromhex(e["state_after"]),
        )
        e["prev"] = prev.hex()
        if n != skip:
            e["hash"] = canon.chain_hash(prev, body).hex()
        prev = bytes.fromhex(e["hash"])
        out.append(_encode(e))
    return b"".join(out)


def forge(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One edit of an event's fields with every hash recomputed after it."""
    events = [json.loads(r) for r in _records(data)]
    i = rng.randrange(len(events))
    e = events[i]
    p = e["payload"]
    what = rng.choice(
        [
            "unknown",
            "missing",
            "mistype",
            "null",
            "grants",
            "parent",
            "kind",
            "time",
            "first",
            "float",
            "state",
            "careless",
            "deep",
            "text",
        ]
    )
    skip = None
    if what == "unknown":
        p["zz_extra"] = 1
    elif what == "missing" and p:
        del p[rng.choice(sorted(p))]
    elif what == "mistype" and p:
        k = rng.choice(sorted(p))
        p[k] = "x" if not isinstance(p[k], str) else 7
    elif what == "null" and p:
        p[rng.choice(sorted(p))] = None
    elif what == "grants":
        events[0]["payload"]["grants"] = ["z:z:z", "a:a:a"]
    elif what == "parent":
        e["parents"] = [e["seq"]] if rng.random() < 0.5 else [1, 0]
    elif what == "kind":
        e["kind"] = rng.choice(["suspended", "resumed", "run_started", "tool_failed"])
    elif what == "time":
        e["time"] = max(0, e["time"] - 1) if rng.random() < 0.5 else e["time"] + 5
    elif what == "float":
        p["zz_float"] = "1.5"
    elif what == "state":
        e["state_before"] = rng.choice([e["state_after"], "ab" * 32])
    elif what == "careless":
        p["zz_extra"] = 2
        skip = i
    elif what == "deep":
        deep: Any = 0
        for _ in range(rng.choice([124, 125, 126, 127, 130])):
            deep = [deep]
        p["zz_deep"] = deep
    elif what == "text":
        # Every kind of character the record's string escaping treats differently.
        alphabet = ['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "😀", "a", "/"]
        p["zz_text"] = "".join(rng.choice(alphabet) for _ in range(12))
    else:
        events.insert(0, json.loads(json.dumps(events[rng.randrange(len(events))])))
        for n, ev in enumerate(events):
            ev["seq"] = n
    return f"forge {what} at {i}", _relink(events, skip)


@pytest.mark.parametrize("n", range(CASES))
def test_damaged_logs_get_the_binarys_verdict(oracle_bin: Path, tmp_path: Path, n: int) -> None:
    rng = random.Random(n)
    base = rng.choice(BASES)
    data = base.read_bytes()
    what, damaged = (forge if n % 3 == 2 else damage)(rng, data)
    log = tmp_path / "events.jsonl"
    log.write_bytes(damaged)
    b = binary_verdict(oracle_bin, log)
    p = python_verdict(log)
    try:
        assert_same(p, b)
    except AssertionError:
        raise AssertionError(f"case {n} ({base.name}, {what}):\npython {p}\nbinary {b}") from None
