"""The canonical encoding, the hash domains and the LtHash state digest of docs/FORMAT.md.

Written from docs/FORMAT.md ("Values", "Hashes", "State") alone, so that a log can be checked
by code that shares nothing with the binary that wrote it. Every rule here is pinned by
``fixtures/golden/vectors.json`` (tests/test_canon.py).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import blake3

#: A JSON value as :func:`json.loads` gives it. Floats may appear in parsed text; they have no
#: canonical encoding and are refused by :func:`encode`.
Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None

U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)
#: Deepest nesting of lists and maps that has an encoding (FORMAT.md, "Values").
DEPTH_MAX = 128

PAYLOAD = "oracle v1 payload"
EVENT_BODY = "oracle v1 event body"
CHAIN = "oracle v1 chain"
STATE_ENTRY = "oracle v1 state entry"
STATE = "oracle v1 state"
VALUE = "oracle v1 value"

ZERO_HASH = bytes(32)

_U64 = struct.Struct(">Q")


class CanonError(ValueError):
    """A value without a canonical encoding (a float, or nesting past ``DEPTH_MAX``).

    The message names the JSON path as docs/FORMAT.md asks (``$.a[1].b``), so a verifier's
    report points at the value, as ``oracle verify`` does.
    """

    def __init__(self, message: str, path: str, deep: bool = False) -> None:
        super().__init__(message)
        self.path = path
        #: Nesting past the bound, rather than a float.
        self.deep = deep


def u64(n: int) -> bytes:
    """Big-endian u64: every length and integer in the encoding is one."""
    return _U64.pack(n)


def _key_segment(key: str) -> str:
    """The path segment of a map key: ``.key`` when plain, else ``["key"]`` as JSON text."""
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return "." + key
    return "[" + json.dumps(key, ensure_ascii=False) + "]"


def format_float(x: float) -> str:
    """A float as serde_json (ryu) prints it: shortest digits, ``1e16``, ``0.0001``, ``1.5e-7``.

    Needed only to name a float in an error message and to decide whether a record holding one
    is in the canonical textual form (it is when the text is exactly what serde_json writes).
    """
    if x != x or x in (float("inf"), float("-inf")):
        return "null"
    sign = "-" if str(x).startswith("-") else ""
    digits, exp = _shortest(abs(x))
    if digits == "0":
        return sign + "0.0"
    length = len(digits)
    kk = length + exp  # the decimal point sits after kk digits
    if exp >= 0 and kk <= 16:
        return sign + digits + "0" * exp + ".0"
    if 0 < kk <= 16:
        return sign + digits[:kk] + "." + digits[kk:]
    if -5 < kk <= 0:
        return sign + "0." + "0" * (-kk) + digits
    e = kk - 1
    mantissa = digits if length == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{e}"


def _shortest(x: float) -> tuple[str, int]:
    """The shortest round-trip digits of a non-negative float and the exponent of the last."""
    text = repr(x)
    if "e" in text:
        mant, _, e_text = text.partition("e")
        exp = int(e_text)
    else:
        mant, exp = text, 0
    if "." in mant:
        whole, _, frac = mant.partition(".")
    else:
        whole, frac = mant, ""
    if frac == "0":
        frac = ""
    digits = (whole + frac).lstrip("0") or "0"
    exp -= len(frac)
    stripped = digits.rstrip("0")
    if stripped:
        exp += len(digits) - len(stripped)
        digits = stripped
    else:
        digits = "0"
    return digits, exp


def encode(value: Json, depth_max: int = DEPTH_MAX) -> bytes:
    """The canonical encoding of ``value`` (FORMAT.md, "Canonical encoding").

    Raises :class:`CanonError` for a float or for nesting past ``depth_max`` lists and maps
    (``DEPTH_MAX``, unless a caller holds values to a tighter bound); the caller decides what
    that means (for a payload: an integrity failure of its record).
    """
    out = bytearray()
    _encode(value, out, 0, depth_max)
    return bytes(out)


_PACK = _U64.pack


def _encode(value: Json, out: bytearray, depth: int, depth_max: int) -> None:
    # Dispatch on the exact type: this is the verifier's inner loop, and `bool` is an `int`.
    t = type(value)
    if t is str:
        b = value.encode("utf-8")  # type: ignore[union-attr]
        out.append(0x05)
        out += _PACK(len(b))
        out += b
    elif t is int:
        n: int = value  # type: ignore[assignment]
        if 0 <= n <= U64_MAX:
            out.append(0x03)
            out += _PACK(n)
        elif I64_MIN <= n < 0:
            out.append(0x04)
            out += _PACK(-(n + 1))
        else:
            # Outside both ranges a JSON reader holds it as a float: it has no encoding.
            raise CanonError(_float_message(float(n), "$"), "$")
    elif t is dict:
        if depth >= depth_max:
            raise CanonError(_deep_message("$", depth_max), "$", deep=True)
        d: dict[str, Json] = value  # type: ignore[assignment]
        out.append(0x07)
        out += _PACK(len(d))
        # Code point order is UTF-8 byte order, so the keys sort as strings.
        for key in sorted(d):
            kb = key.encode("utf-8")
            out += _PACK(len(kb))
            out += kb
            try:
                _encode(d[key], out, depth + 1, depth_max)
            except CanonError as e:
                raise _prefixed(e, _key_segment(key)) from None
    elif t is list:
        if depth >= depth_max:
            raise CanonError(_deep_message("$", depth_max), "$", deep=True)
        items: list[Json] = value  # type: ignore[assignment]
        out.append(0x06)
        out += _PACK(len(items))
        for i, item in enumerate(items):
            try:
                _encode(item, out, depth + 1, depth_max)
            except CanonError as e:
                raise _prefixed(e, f"[{i}]") from None
    elif value is None:
        out.append(0x00)
    elif value is False:
        out.append(0x01)
    elif value is True:
        out.append(0x02)
    elif t is float:
        raise CanonError(_float_message(value, "$"), "$")  # type: ignore[arg-type]
    else:  # pragma: no cover - json.loads gives nothing else
        raise TypeError(f"not a JSON value: {t.__name__}")


def _float_message(x: float, path: str) -> str:
    return (
        f"float {format_float(x)} at {path}: hashed data has no floats "
        "(use an integer, a scaled integer or a string)"
    )


def _deep_message(path: str, depth_max: int = DEPTH_MAX) -> str:
    return f"value nested deeper than {depth_max} levels at {path}"


def _prefixed(e: CanonError, segment: str) -> CanonError:
    """The same error with its path one level further out (``$.b`` under ``a`` is ``$.a.b``)."""
    path = "$" + segment + e.path[1:]
    message = str(e)
    at = message.rfind(" at " + e.path)
    if at >= 0:
        message = message[:at] + " at " + path + message[at + 4 + len(e.path) :]
    return CanonError(message, path, e.deep)


def hash_in(context: str, data: bytes) -> bytes:
    """BLAKE3 ``derive_key`` mode in one domain, 32 bytes: equal bytes in two domains differ."""
    return blake3.blake3(data, derive_key_context=context).digest()


def payload_hash(value: Json) -> bytes:
    """The payload-domain hash of a payload's canonical encoding (``payload_hash``)."""
    return hash_in(PAYLOAD, encode(value))


def body_hash(
    seq: int,
    time: int,
    kind: str,
    parents: Iterable[int],
    payload_hash_: bytes,
    state_before: bytes,
    state_after: bytes,
) -> bytes:
    """The event-body hash over the fixed layout of FORMAT.md, "Events"."""
    parents = list(parents)
    kind_b = kind.encode("utf-8")
    body = b"".join(
        (
            _U64.pack(seq),
            _U64.pack(time),
            _U64.pack(len(kind_b)),
            kind_b,
            _U64.pack(len(parents)),
            b"".join(_U64.pack(p) for p in parents),
            payload_hash_,
            state_before,
            state_after,
        )
    )
    return hash_in(EVENT_BODY, body)


def chain_hash(prev: bytes, body: bytes) -> bytes:
    """``H_chain(prev ‖ body hash)``: the event's ``hash``, committing to every earlier event."""
    return hash_in(CHAIN, prev + body)


# LtHash16: 1024 little-endian u16 lanes. The accumulator is held as one Python integer of
# 2048 bytes (little-endian), and lanes are added without carries crossing lane boundaries by
# the usual SWAR trick, so one update is a few big-integer operations instead of 1024 steps.
_LANE_BYTES = 2048
_HIGH = int.from_bytes(b"\x00\x80" * 1024, "little")  # the top bit of every lane
_LOW = int.from_bytes(b"\xff\x7f" * 1024, "little")  # the other 15 bits of every lane


def _lanes_add(a: int, b: int) -> int:
    return ((a & _LOW) + (b & _LOW)) ^ ((a ^ b) & _HIGH)


def _lanes_neg(a: int) -> int:
    """The lane-wise negation mod 2^16 (so removal is the addition of it)."""
    ones = (1 << (8 * _LANE_BYTES)) - 1
    one_per_lane = int.from_bytes(b"\x01\x00" * 1024, "little")
    return _lanes_add(a ^ ones, one_per_lane)


def state_entry(key: str, value: Json) -> int:
    """The expansion of one state entry: 2048 bytes of XOF in the state-entry domain."""
    key_b = key.encode("utf-8")
    data = _U64.pack(len(key_b)) + key_b + encode(value)
    out = blake3.blake3(data, derive_key_context=STATE_ENTRY).digest(length=_LANE_BYTES)
    return int.from_bytes(out, "little")


class LtHash:
    """The state digest, updated per changed key whatever the state's size (FORMAT.md, "State")."""

    def __init__(self) -> None:
        self.acc = 0

    def add(self, key: str, value: Json) -> None:
        """Adds the entry ``(key, value)``."""
        self.acc = _lanes_add(self.acc, state_entry(key, value))

    def remove(self, key: str, value: Json) -> None:
        """Removes the entry ``(key, value)``, which must have been added."""
        self.acc = _lanes_add(self.acc, _lanes_neg(state_entry(key, value)))

    def digest(self) -> bytes:
        """The state-domain hash of the accumulator's 2048 bytes."""
        return hash_in(STATE, self.acc.to_bytes(_LANE_BYTES, "little"))


def state_hash(entries: Mapping[str, Json]) -> bytes:
    """The state hash of a whole map, from scratch."""
    h = LtHash()
    for k, v in entries.items():
        h.add(k, v)
    return h.digest()


EMPTY_STATE_HASH = LtHash().digest()
