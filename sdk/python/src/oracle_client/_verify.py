"""An independent verifier of oracle logs, written from docs/FORMAT.md alone.

An audit log is only as trustworthy as the verifier that checks it. This one shares no code with
the ``oracle`` binary: it parses each record, requires the canonical textual form, recomputes
the payload hash, the body hash and the chain link with the ``blake3`` package, checks each
payload's shape against its kind, the causal parents, logical time and the state hashes'
linkage, and reports the first bad record the way ``oracle verify`` does (seq, byte offset,
what failed, and the same exit code), in the order of FORMAT.md, "Verification order".

``python -m oracle_client.verify LOG [--json] [--head HASH] [--state]``.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from . import _canon as canon
from ._canon import Json

#: Exit codes shared by every oracle command (README, "Exit codes").
EXIT_OK = 0
EXIT_INPUT = 2
EXIT_INTEGRITY = 4

#: Largest record, in bytes (FORMAT.md, "The log file").
RECORD_BYTES_MAX = 64 << 20
#: Deepest payload serde_json reads inside a record (FORMAT.md, "Limits of a record").
PAYLOAD_DEPTH_MAX = 126

KINDS = (
    "run_started",
    "step_scheduled",
    "capability_allowed",
    "capability_denied",
    "tool_called",
    "tool_returned",
    "tool_failed",
    "state_changed",
    "suspended",
    "resumed",
    "run_finished",
    "adjudicated",
    "adjudications_expired",
    "claim_recorded",
    "reinstated",
    "forked",
    "plan_upgraded",
    "timer_set",
    "timer_fired",
    "patch_proposed",
)
_KIND_SET = frozenset(KINDS)
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Report:
    """What verifying one log found.

    ``ok`` is the verdict. For a valid log, ``events`` is its length and ``head`` the hash of
    its last event. For a bad one, ``kind`` is ``integrity``, ``torn_tail``,
    ``head_not_found``, ``no_events`` or ``input`` (as ``oracle verify --json`` names it),
    ``seq`` the first bad event (the torn record's seq for a torn tail), ``offset`` the byte
    where its record starts, and ``reason`` what failed; ``events`` then counts the events
    verified before it. ``exit_code`` is what ``oracle verify`` exits with.
    """

    ok: bool
    path: str
    events: int
    head: str | None
    state: str | None = None
    last_time: int = 0
    bytes: int = 0
    kind: str | None = None
    seq: int | None = None
    offset: int | None = None
    reason: str | None = None
    message: str | None = None
    exit_code: int = EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The report in the shape of ``oracle verify --json`` (without its timing fields)."""
        if self.ok:
            return {
                "ok": True,
                "path": self.path,
                "events": self.events,
                "bytes": self.bytes,
                "head": self.head,
                "state": self.state,
                "last_time": self.last_time,
            }
        code = self.kind or "integrity"
        return {
            "ok": False,
            "path": self.path,
            "error": {
                "code": code,
                "exit": self.exit_code,
                "message": self.message,
                "kind": self.kind,
                "path": self.path,
                "seq": self.seq,
                "offset": self.offset,
                "reason": self.reason,
            },
        }


class _Bad(Exception):
    """One event breaks a rule: ``reason`` is the sentence ``oracle verify`` would print."""

    def __init__(self, reason: str, malformed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.malformed = malformed


@dataclass
class _Head:
    next_seq: int = 0
    hash: bytes = canon.ZERO_HASH
    time: int = 0
    state: bytes = field(default_factory=lambda: canon.EMPTY_STATE_HASH)


@dataclass
class _Event:
    seq: int
    time: int
    kind: str
    parents: list[int]
    payload: Json
    payload_hash: bytes
    state_before: bytes
    state_after: bytes
    prev: bytes
    hash: bytes


# ---------------------------------------------------------------------------------------------
# Records: parse, require the canonical text.


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _json_text(value: Json) -> str:
    """A value without floats as serde_json writes it: sorted keys, no spaces, and the same
    escapes (``\\"``, ``\\\\``, ``\\n`` ..., other control characters as lowercase ``\\u00xx``,
    everything else raw UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _json_text_slow(value: Json) -> str:
    """:func:`_json_text` for values holding floats or integers that a JSON reader holds as
    floats (past the u64 and i64 ranges), which serde_json prints in its own way."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        if canon.I64_MIN <= value <= canon.U64_MAX:
            return str(value)
        return canon.format_float(float(value))
    if isinstance(value, float):
        return canon.format_float(value)
    if isinstance(value, list):
        return "[" + ",".join(_json_text_slow(v) for v in value) + "]"
    items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-8"))
    return (
        "{"
        + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _json_text_slow(v) for k, v in items)
        + "}"
    )


def _depth(value: Json) -> int:
    """Nesting of lists and maps (a scalar is 0), without recursion limits of its own."""
    deepest = 0
    stack: list[tuple[Json, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, list):
            d += 1
            deepest = max(deepest, d)
            stack.extend((x, d) for x in v)
        elif isinstance(v, dict):
            d += 1
            deepest = max(deepest, d)
            stack.extend((x, d) for x in v.values())
    return deepest


def _u64(value: object) -> int | None:
    if type(value) is int and 0 <= value <= canon.U64_MAX:
        return value
    return None


def _hash(value: object) -> bytes | None:
    """A hash field's bytes: 64 lowercase hex characters, nothing else (FORMAT.md, "Hashes")."""
    if type(value) is str and len(value) == 64:
        try:
            b = bytes.fromhex(value)
        except ValueError:
            return None
        # fromhex also takes uppercase and spaces; the one spelling is lowercase.
        if b.hex() == value:
            return b
    return None


_FIELDS = (
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
)


def _decode(line: bytes) -> tuple[_Event, bytes | None]:
    """Parses one record (without its ``\\n``) and checks its canonical form.

    Returns the event and its payload's canonical encoding, ``None`` when it has none (the
    caller reports that after the link checks, as the order of FORMAT.md requires).
    """
    if len(line) > RECORD_BYTES_MAX:
        raise _Bad(
            f"malformed record: record is {len(line)} bytes, over the "
            f"{RECORD_BYTES_MAX}-byte limit",
            malformed=True,
        )
    try:
        text = line.decode("utf-8")
        raw = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise _Bad(f"malformed record: not a valid event record: {e}", malformed=True) from None
    if not isinstance(raw, dict):
        raise _Bad("malformed record: not a valid event record: not a JSON object", malformed=True)
    for name in raw:
        if name not in _FIELDS:
            raise _Bad(
                f"malformed record: not a valid event record: unknown field `{name}`",
                malformed=True,
            )
    for name in _FIELDS:
        if name not in raw:
            raise _Bad(
                f"malformed record: not a valid event record: missing field `{name}`",
                malformed=True,
            )

    def bad(what: str) -> _Bad:
        return _Bad(f"malformed record: not a valid event record: invalid {what}", malformed=True)

    seq = _u64(raw["seq"])
    time = _u64(raw["time"])
    if seq is None:
        raise bad("seq")
    if time is None:
        raise bad("time")
    kind = raw["kind"]
    if not isinstance(kind, str) or kind not in _KIND_SET:
        raise bad(f"kind {kind!r}")
    parents_raw = raw["parents"]
    if not isinstance(parents_raw, list):
        raise bad("parents")
    parents: list[int] = []
    for p in parents_raw:
        q = _u64(p)
        if q is None:
            raise bad("parents")
        parents.append(q)
    hashes: list[bytes] = []
    for name in _FIELDS[5:]:
        h = _hash(raw[name])
        if h is None:
            raise bad(f"hash in `{name}`")
        hashes.append(h)
    payload: Json = raw["payload"]
    encoded: bytes | None
    try:
        encoded = canon.encode(payload, PAYLOAD_DEPTH_MAX)
        payload_text = _json_text(payload)
    except canon.CanonError as e:
        if e.deep or _depth(payload) > PAYLOAD_DEPTH_MAX:
            # serde_json stops reading past 127 levels (the record's object is one).
            raise _Bad(
                "malformed record: not a valid event record: recursion limit exceeded",
                malformed=True,
            ) from None
        encoded = None
        payload_text = _json_text_slow(payload)
    expected = (
        f'{{"seq":{seq},"time":{time},"kind":"{kind}","parents":['
        + ",".join(str(p) for p in parents)
        + '],"payload":'
        + payload_text
        + f',"payload_hash":"{raw["payload_hash"]}","state_before":"{raw["state_before"]}"'
        + f',"state_after":"{raw["state_after"]}","prev":"{raw["prev"]}","hash":"{raw["hash"]}"}}'
    )
    try:
        same = expected.encode("utf-8") == line
    except UnicodeEncodeError:  # a lone surrogate: no JSON reader of the format accepts it
        same = False
    if not same:
        raise _Bad(
            "malformed record: record is not in canonical form "
            "(re-encoding it gives different bytes)",
            malformed=True,
        )
    event = _Event(seq, time, kind, parents, payload, *hashes)
    return event, encoded


# ---------------------------------------------------------------------------------------------
# Payload shapes (FORMAT.md, "Kinds and payloads"): unknown fields refused; an optional field
# may be absent or null.

_Check = Callable[[object], str | None]


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{canon.format_float(value)}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def _string(v: object) -> str | None:
    return None if isinstance(v, str) else f"invalid type: {_describe(v)}, expected a string"


def _u64_check(v: object) -> str | None:
    if _u64(v) is not None:
        return None
    if type(v) is int:
        return f"invalid value: integer `{v}`, expected u64"
    return f"invalid type: {_describe(v)}, expected u64"


def _hash_check(v: object) -> str | None:
    """A hash inside a payload, with the words of oracle_core's ``Hash`` deserializer: a
    non-string is a type error; a string is measured in UTF-8 bytes, then read byte by byte."""
    if _hash(v) is not None:
        return None
    if not isinstance(v, str):
        return f"invalid type: {_describe(v)}, expected 64 lowercase hex characters"
    raw = v.encode("utf-8", "surrogatepass")
    if len(raw) != 64:
        return f"a hash is 64 hex characters, found {len(raw)}"
    at = next((i for i, c in enumerate(raw) if chr(c) not in _HEX), 0)
    return f"a hash is lowercase hex; character {at} is not"


def _any(_v: object) -> str | None:
    return None


def _map(v: object) -> str | None:
    return None if isinstance(v, dict) else f"invalid type: {_describe(v)}, expected a map"


def _list_of(item: _Check) -> _Check:
    def check(v: object) -> str | None:
        if not isinstance(v, list):
            return f"invalid type: {_describe(v)}, expected a sequence"
        for x in v:
            err = item(x)
            if err:
                return err
        return None

    return check


def _expected(names: list[str] | tuple[str, ...]) -> str:
    """serde's list of what was expected: ```a```, ```a` or `b```, ``one of `a`, `b`, `c```."""
    if not names:
        return "there are no fields"
    if len(names) == 1:
        return f"`{names[0]}`"
    if len(names) == 2:
        return f"`{names[0]}` or `{names[1]}`"
    return "one of " + ", ".join(f"`{n}`" for n in names)


def _one_of(*words: str) -> _Check:
    """A unit variant of a serde enum read from a JSON value, as serde_json reads one: a string
    names it; so does a map of one key, whose value must be null (``{"completed": null}`` is
    ``"completed"`` to ``oracle verify``, so it is here); anything else is a type error."""

    def check(v: object) -> str | None:
        if isinstance(v, dict):
            if len(v) != 1:
                return "invalid value: map, expected map with a single key"
            ((name, inner),) = v.items()
        elif isinstance(v, str):
            name, inner = v, None
        else:
            return f"invalid type: {_describe(v)}, expected string or map"
        if name not in words:
            return f"unknown variant `{name}`, expected {_expected(words)}"
        if inner is not None:
            return f"invalid type: {_describe(inner)}, expected unit"
        return None

    return check


def _struct(required: dict[str, _Check], optional: dict[str, _Check] | None = None) -> _Check:
    optional = optional or {}
    names = list(required) + list(optional)

    def check(v: object) -> str | None:
        if not isinstance(v, dict):
            return f"invalid type: {_describe(v)}, expected a struct"
        for key in sorted(v, key=lambda k: k.encode("utf-8")):
            value = v[key]
            if key in required:
                err = required[key](value)
            elif key in optional:
                err = None if value is None else optional[key](value)
            else:
                return f"unknown field `{key}`, expected {_expected(names)}"
            if err:
                return err
        for key in required:
            if key not in v:
                return f"missing field `{key}`"
        return None

    return check


_S, _U, _H, _V = _string, _u64_check, _hash_check, _any

_PIN = _struct(
    {"name": _S, "kind": _S, "version": _S, "effect": _S, "hash": _H},
    {"files": _list_of(_struct({"path": _S, "hash": _H}))},
)

_SHAPES: dict[str, _Check] = {
    "run_started": _struct(
        {"program": _S, "program_hash": _H, "seed": _U, "grants": _list_of(_S), "inputs": _map},
        {
            "memory": _V,
            "format": _U,
            "budget": _struct({}, {"model_calls_max": _U, "tokens_max": _U}),
            "tools": _list_of(_PIN),
            "domains": _map,
            "key": _S,
            "parent": _struct({"run": _S, "step": _S}),
        },
    ),
    "step_scheduled": _struct({"step": _S, "tool": _S, "attempt": _U}),
    "capability_allowed": _struct({"step": _S, "capability": _S, "grant": _S}),
    "capability_denied": _struct({"step": _S, "capability": _S, "reason": _S}),
    "tool_called": _struct(
        {"step": _S, "tool": _S, "tool_version": _S, "attempt": _U, "input": _V}
    ),
    "tool_returned": _struct({"step": _S, "tool": _S, "attempt": _U, "output": _V}),
    "tool_failed": _struct(
        {"step": _S, "tool": _S, "attempt": _U, "error": _S},
        {"usage": _struct({"prompt_tokens": _U, "completion_tokens": _U})},
    ),
    "state_changed": _struct({"set": _map, "delete": _list_of(_S)}),
    "suspended": _struct({"step": _S, "reason": _S, "attempts": _U}),
    "resumed": _struct({"step": _S, "value": _V}, {"by": _S}),
    "run_finished": _struct(
        {"status": _one_of("completed", "failed", "cancelled"), "reason": _S}, {"by": _S}
    ),
    "adjudicated": _struct(
        {"handle": _S, "verdict": _S, "evidence": _S, "note": _S, "effects": _V}, {"by": _S}
    ),
    "adjudications_expired": _struct({"now": _U, "expired": _V}, {"fired_ms": _U}),
    "claim_recorded": _struct({"assertion": _V, "note": _S}, {"by": _S}),
    "reinstated": _struct({"claim": _S, "evidence": _S, "note": _S, "effects": _V}),
    "forked": _struct(
        {"parent": _S, "seq": _U, "head": _H},
        {"by": _S, "step": _S, "value": _V, "key": _S, "reason": _S, "damaged": _H},
    ),
    "plan_upgraded": _struct({"from": _H, "to": _H, "program": _S}, {"by": _S}),
    "timer_set": _struct({"step": _S, "due_ms": _U, "due": _S, "set_ms": _U}),
    "timer_fired": _struct({"step": _S, "due_ms": _U, "fired_ms": _U, "fired": _S}),
    "patch_proposed": _struct(
        {"step": _S, "plan": _S, "plan_hash": _H, "program": _S, "base": _H, "reason": _S},
        {"model_call": _U},
    ),
}


def _strictly_increasing(items: list[str]) -> bool:
    keys = [s.encode("utf-8") for s in items]
    return all(a < b for a, b in itertools.pairwise(keys))


def _check_payload(kind: str, payload: Json) -> None:
    """The payload's shape, then the rules that keep one meaning to one encoding."""

    def fail(reason: str) -> _Bad:
        return _Bad(f"payload does not fit kind `{kind}`: {reason}")

    err = _SHAPES[kind](payload)
    if err:
        raise fail(err)
    assert isinstance(payload, dict)
    if kind == "run_started":
        grants = payload["grants"]
        assert isinstance(grants, list)
        if not _strictly_increasing([str(g) for g in grants]):
            raise fail("grants must be sorted and unique")
    elif kind == "state_changed":
        delete = payload["delete"]
        sets = payload["set"]
        assert isinstance(delete, list) and isinstance(sets, dict)
        if not _strictly_increasing([str(k) for k in delete]):
            raise fail("`delete` must be sorted and unique")
        for k in delete:
            if k in sets:
                raise fail(f"key `{k}` is both set and deleted")


# ---------------------------------------------------------------------------------------------
# The checks, in the order of FORMAT.md, "Verification order".


def _check_record(e: _Event, encoded: bytes | None) -> None:
    """Everything about one event that does not depend on its neighbours."""
    if encoded is None:
        try:
            encoded = canon.encode(e.payload)
        except canon.CanonError as err:
            raise _Bad(f"payload has no canonical encoding: {err}") from None
    computed = canon.hash_in(canon.PAYLOAD, encoded)
    if computed != e.payload_hash:
        raise _Bad(
            f"payload hash mismatch: recorded {e.payload_hash.hex()}, "
            f"payload hashes to {computed.hex()}"
        )
    _check_payload(e.kind, e.payload)
    body = canon.body_hash(
        e.seq, e.time, e.kind, e.parents, e.payload_hash, e.state_before, e.state_after
    )
    computed = canon.chain_hash(e.prev, body)
    if computed != e.hash:
        raise _Bad(f"hash mismatch: recorded {e.hash.hex()}, fields hash to {computed.hex()}")
    if any(a >= b for a, b in zip(e.parents, e.parents[1:], strict=False)):
        raise _Bad("parents are not strictly increasing")
    for p in e.parents:
        if p >= e.seq:
            raise _Bad(f"parent {p} is not earlier than the event")


def _push(head: _Head, e: _Event, encoded: bytes | None) -> None:
    """Links ``e`` to the verified head: link order first, then the record, then the rest."""
    seq = head.next_seq
    if e.seq != seq:
        raise _Bad(
            f"seq out of order: expected {seq}, found {e.seq} (gap, duplicate, swap or removal)"
        )
    if e.prev != head.hash:
        raise _Bad(
            f"prev mismatch: the previous event's hash is {head.hash.hex()}, "
            f"this event says {e.prev.hex()}"
        )
    _check_record(e, encoded)
    if seq == 0 and e.kind != "run_started":
        raise _Bad(f"the first event must be `run_started`, found `{e.kind}`")
    if seq > 0 and e.kind == "run_started":
        raise _Bad("`run_started` may only be the first event")
    if e.time < head.time:
        raise _Bad(f"time goes backwards: previous event at {head.time}, this one at {e.time}")
    if e.state_before != head.state:
        if seq == 0:
            raise _Bad(
                f"the first event's state_before must be the empty state {head.state.hex()}, "
                f"found {e.state_before.hex()}"
            )
        raise _Bad(
            f"state_before {e.state_before.hex()} is not the previous event's state_after "
            f"{head.state.hex()}"
        )
    head.next_seq = seq + 1
    head.hash = e.hash
    head.time = e.time
    head.state = e.state_after


class _Reducer:
    """Recomputes the state from ``state_changed`` events (``--state``: beyond ``oracle
    verify``, which checks integrity only; FORMAT.md, "State")."""

    def __init__(self) -> None:
        self.entries: dict[str, Json] = {}
        self.lt = canon.LtHash()

    def apply(self, e: _Event) -> None:
        if e.kind == "state_changed":
            assert isinstance(e.payload, dict)
            sets = e.payload["set"]
            delete = e.payload["delete"]
            assert isinstance(sets, dict) and isinstance(delete, list)
            for k, v in sets.items():
                if k in self.entries:
                    self.lt.remove(k, self.entries[k])
                self.entries[k] = v
                self.lt.add(k, v)
            for gone in delete:
                assert isinstance(gone, str)
                if gone in self.entries:
                    self.lt.remove(gone, self.entries.pop(gone))
        computed = self.lt.digest()
        if computed != e.state_after:
            raise _Bad(
                f"state_after {e.state_after.hex()} is not the state the events give "
                f"{computed.hex()}"
            )


def _records(f: BinaryIO) -> Iterator[tuple[int, bytes, bool]]:
    """Each line of a log with its offset and whether it ended with ``\\n`` (only the last may
    not: the torn tail). One line is held at a time, so a long log is never read whole."""
    offset = 0
    for line in f:
        whole = line.endswith(b"\n")
        yield offset, line[:-1] if whole else line, whole
        offset += len(line)


def verify_bytes(
    data: bytes, path: str = "-", head: str | None = None, check_state: bool = False
) -> Report:
    """Verifies a log held in memory; see :func:`verify`."""
    return _verify_file(io.BytesIO(data), path, head, check_state)


def _verify_file(
    f: BinaryIO, path: str, head: str | None = None, check_state: bool = False
) -> Report:
    """The verification of FORMAT.md, "Verification order", over an open log."""
    first = f.peek(1) if isinstance(f, io.BufferedReader) else f.read(1)
    if not isinstance(f, io.BufferedReader):
        f.seek(0)
    if not first:
        message = (
            f"{path}: no events: the log is empty, so it proves nothing (every run's log "
            "begins with run_started; a log cut to zero bytes looks the same)"
        )
        return Report(
            ok=False,
            path=path,
            events=0,
            head=None,
            kind="no_events",
            reason=message,
            message=message,
            exit_code=EXIT_INPUT,
        )
    expected = bytes.fromhex(head) if head is not None else None
    seen_expected = expected is None
    chain = _Head()
    reducer = _Reducer() if check_state else None
    tail_offset = 0
    tail_len = 0
    for offset, line, whole in _records(f):
        if not whole:
            tail_offset, tail_len = offset, len(line)
            break
        tail_offset = offset + len(line) + 1
        try:
            event, encoded = _decode(line)
            _push(chain, event, encoded)
            if reducer is not None:
                reducer.apply(event)
        except _Bad as bad:
            seq = chain.next_seq
            message = f"{path}: event {seq}: {bad.reason} (record at byte {offset})"
            return Report(
                ok=False,
                path=path,
                events=chain.next_seq,
                head=chain.hash.hex() if chain.next_seq else None,
                state=chain.state.hex(),
                last_time=chain.time,
                bytes=offset,
                kind="integrity",
                seq=seq,
                offset=offset,
                reason=bad.reason,
                message=message,
                exit_code=EXIT_INTEGRITY,
            )
        if not seen_expected and chain.hash == expected:
            seen_expected = True
    if tail_len:
        seq = chain.next_seq
        reason = (
            f"torn tail: the last {tail_len} bytes (from byte {tail_offset}, after {seq} "
            f"complete records) are not a complete record: the write of event {seq} was cut "
            "short; `oracle repair` moves them aside"
        )
        return Report(
            ok=False,
            path=path,
            events=seq,
            head=chain.hash.hex() if seq else None,
            state=chain.state.hex(),
            last_time=chain.time,
            bytes=tail_offset,
            kind="torn_tail",
            seq=seq,
            offset=tail_offset,
            reason=reason,
            message=f"{path}: {reason}",
            exit_code=EXIT_INTEGRITY,
        )
    if not seen_expected:
        assert head is not None
        last = max(chain.next_seq - 1, 0)
        reason = (
            f"the log ends at seq {last} with head {chain.hash.hex()}, but the expected head "
            f"{head} is not in it (events from seq {chain.next_seq} on are missing or the log "
            "was rewritten)"
        )
        return Report(
            ok=False,
            path=path,
            events=chain.next_seq,
            head=chain.hash.hex(),
            state=chain.state.hex(),
            last_time=chain.time,
            bytes=tail_offset,
            kind="head_not_found",
            seq=chain.next_seq,
            offset=None,
            reason=reason,
            message=f"{path}: {reason}",
            exit_code=EXIT_INTEGRITY,
        )
    return Report(
        ok=True,
        path=path,
        events=chain.next_seq,
        head=chain.hash.hex(),
        state=chain.state.hex(),
        last_time=chain.time,
        bytes=tail_offset,
    )


def _log_path(path: str | os.PathLike[str]) -> str:
    """A run directory names its ``events.jsonl``; anything else is the log itself."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return os.path.join(p, "events.jsonl")
    return p


def verify(
    path: str | os.PathLike[str], head: str | None = None, check_state: bool = False
) -> Report:
    """Verifies the log at ``path`` (a log file or a run directory) as ``oracle verify`` does.

    ``head``: a head hash (64 hex characters) kept from earlier; the log must contain it, which
    is what catches a log cut on a record boundary or relinked after an edit.
    ``check_state``: also recompute the state from the ``state_changed`` events and require
    each ``state_after`` (a check ``oracle verify`` leaves to replay).
    """
    log = _log_path(path)
    try:
        f = open(log, "rb")  # noqa: SIM115 - closed below, on every path
    except OSError as e:
        message = f"{log}: {e.strerror or e}"
        return Report(
            ok=False,
            path=log,
            events=0,
            head=None,
            kind="input",
            reason=message,
            message=message,
            exit_code=EXIT_INPUT,
        )
    with f:
        # An empty log is named as such before a --head prefix is looked for in it.
        if head is not None and f.peek(1):
            head = head.lower()
            if len(head) != 64 or not _HEX.issuperset(head):
                found = _find_head_prefix(f, head, log)
                if isinstance(found, Report):
                    return found
                head = found
                f.seek(0)
        return _verify_file(f, log, head, check_state)


def _find_head_prefix(f: BinaryIO, prefix: str, log: str) -> str | Report:
    """The one event hash starting with ``prefix`` (at least 8 hex characters), as ``--head``
    takes it; a prefix no event has is exit 4, an ambiguous or malformed one exit 2."""
    if len(prefix) < 8 or len(prefix) > 64 or not _HEX.issuperset(prefix):
        message = f"--head `{prefix}`: a head hash is 64 hex characters, or a prefix of at least 8"
        return Report(
            False, log, 0, None, kind="input", reason=message, message=message, exit_code=EXIT_INPUT
        )
    found = []
    for _, line, whole in _records(f):
        if not whole:
            break
        try:
            event, _enc = _decode(line)
        except _Bad:
            break
        if event.hash.hex().startswith(prefix):
            found.append(event.hash.hex())
            if len(found) > 1:
                break
    if len(found) == 1:
        return found[0]
    if not found:
        message = (
            f"{log}: no event's hash starts with `{prefix}`: the head you kept is not in this "
            "log (rewritten or cut since?)"
        )
        return Report(
            False,
            log,
            0,
            None,
            kind="head_not_found",
            reason=message,
            message=message,
            exit_code=EXIT_INTEGRITY,
        )
    message = (
        f"--head `{prefix}` is ambiguous: several events' hashes start with it "
        "(give more characters)"
    )
    return Report(
        False, log, 0, None, kind="input", reason=message, message=message, exit_code=EXIT_INPUT
    )
