"""Typed views of what the API returns: runs, events and the inbox.

Each model keeps the answer it was made from in ``raw``, so a field this SDK does not name yet
(the API grows by adding keys) is still at hand without a new release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Statuses a run can be listed with (docs/API.md, "GET /runs").
STATUSES = ("submitted", "running", "suspended", "completed", "failed", "cancelled", "damaged")
#: Statuses after which a run does nothing until someone acts (the default of ``wait``).
SETTLED = ("suspended", "completed", "failed", "cancelled")


@dataclass(frozen=True)
class Waiting:
    """What a suspended run waits for: the step, why, and after how many attempts."""

    step: str
    reason: str
    attempts: int

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> Waiting | None:
        """``None`` stays ``None``: only a suspended run waits."""
        if d is None:
            return None
        return cls(str(d.get("step", "")), str(d.get("reason", "")), int(d.get("attempts", 0)))


@dataclass(frozen=True)
class Run:
    """A run as ``GET /runs`` lists it; ``get_run`` adds ``head``, ``waiting_on``, ``answered``.

    ``existing`` is set only by ``start_run``: whether the key named a run started earlier.
    """

    id: str
    plan: str
    status: str
    events: int
    last_time: int
    live: bool
    waiting: Waiting | None
    reason: str | None
    models: dict[str, Any] | None
    head: str | None = None
    waiting_on: dict[str, Any] | None = None
    answered: dict[str, Any] | None = None
    existing: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sleeping(self) -> bool:
        """Whether the run is suspended on a ``sleep`` timer: it wakes by itself when the timer
        is due (the server's wheel, or a store's worker, fires it), with nobody to answer."""
        w = self.waiting_on or {}
        return self.status == "suspended" and w.get("kind") == "yield" and "timer" in w

    def settled_in(self, statuses: Sequence[str], through_sleeps: bool) -> bool:
        """Whether ``wait`` stops at this run: its status is one of ``statuses``, and it is not
        a sleep that will wake by itself (unless ``through_sleeps`` is false)."""
        return self.status in statuses and not (through_sleeps and self.sleeping)

    @classmethod
    def of(cls, d: dict[str, Any], existing: bool | None = None) -> Run:
        """A run from its JSON object."""
        reason = d.get("reason")
        return cls(
            id=str(d["run"]),
            plan=str(d.get("plan", "")),
            status=str(d.get("status", "")),
            events=int(d.get("events") or 0),
            last_time=int(d.get("last_time") or 0),
            live=bool(d.get("live", False)),
            waiting=Waiting.of(d.get("waiting")),
            reason=reason if isinstance(reason, str) else None,
            models=d.get("models"),
            head=d.get("head"),
            waiting_on=d.get("waiting_on"),
            answered=d.get("answered"),
            existing=existing,
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    """One event of a run's log, as stored (docs/FORMAT.md, "Events")."""

    seq: int
    time: int
    kind: str
    parents: list[int]
    payload: Any
    payload_hash: str
    state_before: str
    state_after: str
    prev: str
    hash: str

    @classmethod
    def of(cls, d: dict[str, Any]) -> Event:
        """An event from its record's JSON object."""
        return cls(
            seq=int(d["seq"]),
            time=int(d["time"]),
            kind=str(d["kind"]),
            parents=[int(p) for p in d.get("parents", [])],
            payload=d.get("payload"),
            payload_hash=str(d.get("payload_hash", "")),
            state_before=str(d.get("state_before", "")),
            state_after=str(d.get("state_after", "")),
            prev=str(d.get("prev", "")),
            hash=str(d.get("hash", "")),
        )


@dataclass(frozen=True)
class InboxItem:
    """One thing that waits on a person (``GET /inbox``).

    ``kind`` is ``question``, ``belief`` or ``yield`` for a suspended run (answer it with
    ``answer``; a ``belief`` takes a verdict) and ``adjudication`` for a pending request
    (``adjudicate`` with its ``handle``). ``question`` and ``schema`` are set for a question.
    """

    run: str
    kind: str
    step: str | None
    seq: int | None
    reason: str | None
    handle: str | None
    question: Any
    schema: Any
    link: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def suspended(cls, d: dict[str, Any]) -> InboxItem:
        """An item of ``suspended``: a run waiting on a step."""
        return cls(
            run=str(d["run"]),
            kind=str(d.get("kind", "question")),
            step=d.get("step"),
            seq=d.get("seq"),
            reason=d.get("reason"),
            handle=None,
            question=d.get("question"),
            schema=d.get("schema"),
            link=d.get("link"),
            raw=d,
        )

    @classmethod
    def adjudication(cls, d: dict[str, Any]) -> InboxItem:
        """An item of ``adjudications``: a conflict waiting for a verdict."""
        challenger = d.get("challenger")
        step = challenger.get("step") if isinstance(challenger, dict) else None
        return cls(
            run=str(d["run"]),
            kind="adjudication",
            step=step,
            seq=d.get("seq"),
            reason=d.get("reason"),
            handle=d.get("handle"),
            question=None,
            schema=None,
            link=d.get("link"),
            raw=d,
        )


@dataclass(frozen=True)
class Inbox:
    """The whole inbox, split as the API sends it."""

    suspended: list[InboxItem]
    adjudications: list[InboxItem]

    @classmethod
    def of(cls, d: dict[str, Any]) -> Inbox:
        """The inbox from ``GET /inbox``."""
        return cls(
            [InboxItem.suspended(x) for x in d.get("suspended", [])],
            [InboxItem.adjudication(x) for x in d.get("adjudications", [])],
        )

    def items(self) -> list[InboxItem]:
        """Every item, suspended runs first, each part in the API's (run) order."""
        return [*self.suspended, *self.adjudications]


@dataclass(frozen=True)
class StartedRun:
    """What ``POST /runs`` answered: the run's id, its status, and whether the key named an
    existing run (an idempotent retry) rather than a new one."""

    run: str
    status: str
    existing: bool
    key: str | None

    @classmethod
    def of(cls, d: dict[str, Any]) -> StartedRun:
        """From the answer of ``POST /runs``."""
        key = d.get("key")
        return cls(
            str(d["run"]),
            str(d.get("status", "")),
            bool(d.get("existing", False)),
            key if isinstance(key, str) else None,
        )
