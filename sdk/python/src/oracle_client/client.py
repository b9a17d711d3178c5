"""Clients of the HTTP API of ``oracle serve`` (docs/API.md), synchronous and asynchronous.

Both speak the same requests, built once by :class:`_Api`; only the transport differs. Every
failure is raised as :class:`~oracle_client.errors.OracleError` with the API's stable ``code``,
never as an httpx exception, so callers handle one class.

``wait`` follows the run's Server-Sent Events tail rather than polling: the server pushes each
event as it is appended, so a run that suspends is seen within one of the server's poll
intervals, and nothing is asked of the server while nothing happens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from .errors import OracleError
from .models import SETTLED, Event, Inbox, InboxItem, Run, StartedRun

#: Kinds after which a run's status may have changed (what ``wait`` looks again at).
_STATUS_KINDS = frozenset({"suspended", "resumed", "timer_fired", "run_finished"})
#: How long ``start_run`` waits for a run started in the background to show its first event.
_START_VISIBLE_S = 5.0
#: Consecutive failed reconnections after which ``stream`` gives up.
_RECONNECTS_MAX = 5


@dataclass
class _Sse:
    """One Server-Sent Event (``None`` fields: not sent)."""

    event: str
    id: str | None
    data: str


class _SseParser:
    """The event-stream format (WHATWG HTML, "Server-sent events"), one line at a time.

    ``feed`` returns an event when a blank line ends one; comments (``:``) return ``None`` and
    are what the server sends to keep a quiet connection open.
    """

    def __init__(self) -> None:
        self._event = ""
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> _Sse | None:
        if line == "":
            if not self._data and not self._event:
                return None
            ev = _Sse(self._event or "message", self._id, "\n".join(self._data))
            self._event, self._data = "", []
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None


def _json_or_none(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _checked(resp: httpx.Response) -> Any:
    """The answer's JSON, or the :class:`OracleError` it carries."""
    body = _json_or_none(resp)
    if resp.status_code >= 400:
        raise OracleError.from_response(resp.status_code, body, resp.text)
    return body


def _transport_error(e: httpx.HTTPError) -> OracleError:
    code = "timeout" if isinstance(e, httpx.TimeoutException) else "connection"
    return OracleError(code, 0, f"{type(e).__name__}: {e}")


def _stream_error(data: str) -> OracleError:
    """The ``event: error`` that ends a stream whose log cannot be read."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" not in body and "code" in body:
        body = {"error": body}
    return OracleError.from_response(500, body, data)


class _Api:
    """What both clients share: the base URL, the token, and the shape of each request."""

    def __init__(self, base_url: str, token: str | None) -> None:
        base = base_url.rstrip("/")
        if not base.endswith("/api/v1"):
            base += "/api/v1"
        self.base = base
        self.token = token

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        h = {"Accept": "application/json"}
        if self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    def url(self, path: str) -> str:
        return self.base + path

    @staticmethod
    def start_body(
        plan: str,
        inputs: Mapping[str, Any] | None,
        key: str | None,
        seed: int | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"plan": plan}
        if inputs is not None:
            body["inputs"] = dict(inputs)
        if key is not None:
            body["key"] = key
        if seed is not None:
            body["seed"] = seed
        return body

    @staticmethod
    def adjudicate_body(
        verdict: str, evidence: str, note: str, resume: bool, now: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "verdict": verdict,
            "evidence": evidence,
            "note": note,
            "resume": resume,
        }
        if now is not None:
            body["now"] = now
        return body

    @staticmethod
    def runs_params(status: str | None, plan: str | None, after: str | None) -> dict[str, str]:
        params: dict[str, str] = {"limit": "1000"}
        if status is not None:
            params["status"] = status
        if plan is not None:
            params["plan"] = plan
        if after is not None:
            params["after"] = after
        return params


def _plan_text(plan: str) -> str:
    """The plan's source. A path is not read here: the server starts what it is sent."""
    return plan


class Client:
    """A synchronous client of ``oracle serve``.

    ``Client("http://127.0.0.1:7420", token=SECRET)``; the ``/api/v1`` prefix is added when the
    URL lacks it. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._api = _Api(base_url, token)
        self._http = http or httpx.Client(timeout=timeout)
        self._owns_http = http is None

    def close(self) -> None:
        """Closes the connections (only those this client opened)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        try:
            resp = self._http.request(
                method,
                self._api.url(path),
                params=params,
                json=body,
                headers=self._api.headers(),
            )
        except httpx.HTTPError as e:
            raise _transport_error(e) from e
        return _checked(resp)

    # Reads --------------------------------------------------------------------------------

    def whoami(self) -> str | None:
        """The token's name (``None`` for an open read)."""
        name = self._request("GET", "/whoami").get("name")
        return name if isinstance(name, str) else None

    def get_run(self, id: str) -> Run:
        """One run, with its head hash and what it waits on (``GET /runs/{id}``)."""
        return Run.of(self._request("GET", f"/runs/{id}"))

    def runs(self, status: str | None = None, plan: str | None = None) -> list[Run]:
        """Every run (all pages), optionally only those with ``status`` or of ``plan``."""
        out: list[Run] = []
        after: str | None = None
        while True:
            page = self._request("GET", "/runs", params=_Api.runs_params(status, plan, after))
            out.extend(Run.of(r) for r in page.get("runs", []))
            after = page.get("next")
            if not after:
                return out

    def events(self, run: str, from_seq: int = 0, limit: int = 1000) -> Iterator[Event]:
        """The run's events from ``from_seq`` to the end of the log as it is now, a page at a
        time (so a long log is never held whole)."""
        seq: int | None = from_seq
        while seq is not None:
            page = self._request(
                "GET", f"/runs/{run}/events", params={"from": str(seq), "limit": str(limit)}
            )
            for e in page.get("events", []):
                yield Event.of(e)
            nxt = page.get("next")
            seq = nxt if isinstance(nxt, int) else None

    def event(self, run: str, seq: int) -> Event:
        """One event (404 ``seq_out_of_range`` past the end)."""
        return Event.of(self._request("GET", f"/runs/{run}/events/{seq}"))

    def verify_run(self, run: str) -> dict[str, Any]:
        """The server's verification of the run's whole chain (``GET /runs/{id}/verify``)."""
        result: dict[str, Any] = self._request("GET", f"/runs/{run}/verify")
        return result

    def timeline(self, run: str) -> dict[str, Any]:
        """Each step's attempts, wall time, tokens and cost (``GET /runs/{id}/timeline``)."""
        result: dict[str, Any] = self._request("GET", f"/runs/{run}/timeline")
        return result

    def inbox(self) -> list[InboxItem]:
        """What waits on a person across all runs: suspended steps, then adjudications."""
        return Inbox.of(self._request("GET", "/inbox")).items()

    # Streams ------------------------------------------------------------------------------

    def stream(self, run: str, from_seq: int = 0) -> Iterator[Event]:
        """Every event from ``from_seq``, then each new one as it is appended (SSE).

        Runs until the caller stops iterating. A dropped connection is opened again with
        ``Last-Event-ID`` (the last seq received), so no event is missed or repeated; after
        several failed attempts in a row an :class:`OracleError` (``connection``) is raised.
        """
        for e in self._tail(run, from_seq, None):
            if e is not None:
                yield e

    def _tail(
        self, run: str, from_seq: int, deadline: float | None
    ) -> Generator[Event | None, None, None]:
        """The SSE tail, yielding ``None`` at every keep-alive so a caller can watch a clock."""
        last: int | None = None
        failures = 0
        while True:
            headers = self._api.headers({"Accept": "text/event-stream"})
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            read = 30.0 if deadline is None else max(0.05, deadline - time.monotonic())
            try:
                with self._http.stream(
                    "GET",
                    self._api.url(f"/runs/{run}/events/stream"),
                    params={"from": str(from_seq)},
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=read),
                ) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        raise OracleError.from_response(
                            resp.status_code, _json_or_none(resp), resp.text
                        )
                    failures = 0
                    parser = _SseParser()
                    for line in resp.iter_lines():
                        ev = parser.feed(line)
                        if ev is None:
                            yield None
                            continue
                        if ev.event == "error":
                            raise _stream_error(ev.data)
                        if ev.event == "event":
                            e = Event.of(json.loads(ev.data))
                            last = e.seq
                            yield e
            except httpx.ReadTimeout:
                if deadline is not None:
                    yield None
                    continue
                failures += 1
            except httpx.HTTPError as err:
                failures += 1
                if failures >= _RECONNECTS_MAX:
                    raise _transport_error(err) from err
            if failures >= _RECONNECTS_MAX:
                raise OracleError("connection", 0, f"the event stream of {run} keeps ending")
            time.sleep(min(0.1 * 2**failures, 2.0))

    def wait(
        self,
        id: str,
        statuses: Sequence[str] = SETTLED,
        timeout: float = 60.0,
        through_sleeps: bool = True,
    ) -> Run:
        """Waits until the run's status is one of ``statuses`` and returns it.

        Follows the run's event stream (not polling) and looks at the run again after each
        event that can change its status. A run suspended on a ``sleep`` timer wakes by itself,
        so it is waited through unless ``through_sleeps`` is false (``answer(...)`` then
        ``wait()`` ends where a person is needed or the run ends, not at a timer). Raises
        :class:`TimeoutError` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        run = self.get_run(id)
        if run.settled_in(statuses, through_sleeps):
            return run
        tail = self._tail(id, run.events, deadline)
        try:
            for e in tail:
                if e is not None and e.kind in _STATUS_KINDS:
                    run = self.get_run(id)
                    if run.settled_in(statuses, through_sleeps):
                        return run
                if time.monotonic() >= deadline:
                    break
        finally:
            tail.close()
        raise TimeoutError(f"run {id} is still {run.status} after {timeout} s")

    # Writes -------------------------------------------------------------------------------

    def start_run(
        self,
        plan: str,
        inputs: Mapping[str, Any] | None = None,
        key: str | None = None,
        seed: int | None = None,
    ) -> Run:
        """Starts a run of ``plan`` (its source text) in the background and returns it.

        With ``key``, starting again with the same plan and inputs returns the run the key
        started (``existing`` true) instead of a second one; the same key with another plan,
        inputs or seed raises ``key_conflict`` (``details["differs"]``).
        """
        started = self.start(plan, inputs, key, seed)
        deadline = time.monotonic() + _START_VISIBLE_S
        while True:
            try:
                run = self.get_run(started.run)
                # Started in the background: the server answers once the first event is
                # recorded, or after its own wait when binding the run's tools takes longer.
                if run.events > 0 or time.monotonic() >= deadline:
                    return Run.of(run.raw, existing=started.existing)
            except OracleError as e:
                if e.code != "not_found" or time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)

    def start(
        self,
        plan: str,
        inputs: Mapping[str, Any] | None = None,
        key: str | None = None,
        seed: int | None = None,
    ) -> StartedRun:
        """``POST /runs`` itself: what :meth:`start_run` does before it reads the run."""
        body = _Api.start_body(_plan_text(plan), inputs, key, seed)
        return StartedRun.of(self._request("POST", "/runs", body=body))

    def answer(self, run: str, step: str, value: Any, resume: bool = True) -> dict[str, Any]:
        """Records ``value`` as the output of the step the run waits on (for a question, the
        answer), with this token's name as ``by``; ``resume`` goes on from it in the
        background."""
        body = {"step": step, "value": value, "resume": resume}
        result: dict[str, Any] = self._request("POST", f"/runs/{run}/answer", body=body)
        return result

    def adjudicate(
        self,
        run: str,
        handle: str,
        verdict: str,
        evidence: str = "external_first_hand",
        resume: bool = True,
        note: str = "",
        now: int | None = None,
    ) -> dict[str, Any]:
        """Gives a verdict (``affirm``, ``deny``, ``unknown``) on a pending adjudication."""
        body = _Api.adjudicate_body(verdict, evidence, note, resume, now)
        result: dict[str, Any] = self._request(
            "POST", f"/runs/{run}/adjudications/{handle}", body=body
        )
        return result

    def store_adjudications(self, store: str) -> dict[str, Any]:
        """The adjudication requests of the named belief store ``store`` shared by runs
        (``GET /memory/{store}/adjudications``): ``{"store": {...}, "adjudications": [...]}``,
        each request naming the runs that published both claims."""
        result: dict[str, Any] = self._request("GET", f"/memory/{store}/adjudications")
        return result

    def adjudicate_store(
        self,
        store: str,
        handle: str,
        verdict: str,
        evidence: str = "external_first_hand",
        note: str = "",
        now: int | None = None,
    ) -> dict[str, Any]:
        """Gives a verdict on a named store's request, under the store's lock (of two racing
        verdicts one applies, the other raises ``already_resolved``); the server resumes the
        runs it saw waiting on that store (``resumed``)."""
        body = _Api.adjudicate_body(verdict, evidence, note, False, now)
        result: dict[str, Any] = self._request(
            "POST", f"/memory/{store}/adjudications/{handle}", body=body
        )
        return result

    def cancel(self, run: str, reason: str | None = None) -> dict[str, Any]:
        """Ends a run that has not finished, recorded as ``cancelled`` with this token's name."""
        body: dict[str, Any] = {} if reason is None else {"reason": reason}
        result: dict[str, Any] = self._request("POST", f"/runs/{run}/cancel", body=body)
        return result

    def send_event(self, run: str, name: str, value: Any = None) -> dict[str, Any]:
        """Sends outside event ``name`` with ``value`` to the run, for its ``wait.event``
        steps: refused (``event_unknown``, ``bad_event``; nothing kept) when no step of the
        run's plan waits on the name or the value does not meet their ``schema``; else kept
        until the run waits on it, and a run waiting on it now is resumed in the background."""
        result: dict[str, Any] = self._request(
            "POST", f"/runs/{run}/events/{name}", body={"value": value}
        )
        return result

    def resume(self, run: str) -> dict[str, Any]:
        """Resumes the run in the server's background (after an answer without ``resume``)."""
        result: dict[str, Any] = self._request("POST", f"/runs/{run}/resume", body={})
        return result


class AsyncClient:
    """The asynchronous twin of :class:`Client` (same methods, awaited; iterators are async)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._api = _Api(base_url, token)
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http is None

    async def aclose(self) -> None:
        """Closes the connections (only those this client opened)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        try:
            resp = await self._http.request(
                method,
                self._api.url(path),
                params=params,
                json=body,
                headers=self._api.headers(),
            )
        except httpx.HTTPError as e:
            raise _transport_error(e) from e
        return _checked(resp)

    async def whoami(self) -> str | None:
        """The token's name (``None`` for an open read)."""
        name = (await self._request("GET", "/whoami")).get("name")
        return name if isinstance(name, str) else None

    async def get_run(self, id: str) -> Run:
        """One run, with its head hash and what it waits on."""
        return Run.of(await self._request("GET", f"/runs/{id}"))

    async def runs(self, status: str | None = None, plan: str | None = None) -> list[Run]:
        """Every run (all pages), optionally filtered."""
        out: list[Run] = []
        after: str | None = None
        while True:
            page = await self._request("GET", "/runs", params=_Api.runs_params(status, plan, after))
            out.extend(Run.of(r) for r in page.get("runs", []))
            after = page.get("next")
            if not after:
                return out

    async def events(self, run: str, from_seq: int = 0, limit: int = 1000) -> AsyncIterator[Event]:
        """The run's events from ``from_seq`` to the end of the log as it is now, paged."""
        seq: int | None = from_seq
        while seq is not None:
            page = await self._request(
                "GET", f"/runs/{run}/events", params={"from": str(seq), "limit": str(limit)}
            )
            for e in page.get("events", []):
                yield Event.of(e)
            nxt = page.get("next")
            seq = nxt if isinstance(nxt, int) else None

    async def event(self, run: str, seq: int) -> Event:
        """One event."""
        return Event.of(await self._request("GET", f"/runs/{run}/events/{seq}"))

    async def verify_run(self, run: str) -> dict[str, Any]:
        """The server's verification of the run's whole chain."""
        result: dict[str, Any] = await self._request("GET", f"/runs/{run}/verify")
        return result

    async def timeline(self, run: str) -> dict[str, Any]:
        """Each step's attempts, wall time, tokens and cost."""
        result: dict[str, Any] = await self._request("GET", f"/runs/{run}/timeline")
        return result

    async def inbox(self) -> list[InboxItem]:
        """What waits on a person across all runs."""
        return Inbox.of(await self._request("GET", "/inbox")).items()

    async def stream(self, run: str, from_seq: int = 0) -> AsyncIterator[Event]:
        """Every event from ``from_seq``, then each new one (SSE, resumed with
        ``Last-Event-ID``)."""
        async for e in self._tail(run, from_seq, None):
            if e is not None:
                yield e

    async def _tail(
        self, run: str, from_seq: int, deadline: float | None
    ) -> AsyncGenerator[Event | None, None]:
        last: int | None = None
        failures = 0
        while True:
            headers = self._api.headers({"Accept": "text/event-stream"})
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            read = 30.0 if deadline is None else max(0.05, deadline - time.monotonic())
            try:
                async with self._http.stream(
                    "GET",
                    self._api.url(f"/runs/{run}/events/stream"),
                    params={"from": str(from_seq)},
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=read),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise OracleError.from_response(
                            resp.status_code, _json_or_none(resp), resp.text
                        )
                    failures = 0
                    parser = _SseParser()
                    async for line in resp.aiter_lines():
                        ev = parser.feed(line)
                        if ev is None:
                            yield None
                            continue
                        if ev.event == "error":
                            raise _stream_error(ev.data)
                        if ev.event == "event":
                            e = Event.of(json.loads(ev.data))
                            last = e.seq
                            yield e
            except httpx.ReadTimeout:
                if deadline is not None:
                    yield None
                    continue
                failures += 1
            except httpx.HTTPError as err:
                failures += 1
                if failures >= _RECONNECTS_MAX:
                    raise _transport_error(err) from err
            if failures >= _RECONNECTS_MAX:
                raise OracleError("connection", 0, f"the event stream of {run} keeps ending")
            await asyncio.sleep(min(0.1 * 2**failures, 2.0))

    async def wait(
        self,
        id: str,
        statuses: Sequence[str] = SETTLED,
        timeout: float = 60.0,
        through_sleeps: bool = True,
    ) -> Run:
        """Waits (on the event stream) until the run's status is one of ``statuses``, through
        ``sleep`` timers unless ``through_sleeps`` is false (as :meth:`Client.wait`)."""
        deadline = time.monotonic() + timeout
        run = await self.get_run(id)
        if run.settled_in(statuses, through_sleeps):
            return run
        tail = self._tail(id, run.events, deadline)
        try:
            async for e in tail:
                if e is not None and e.kind in _STATUS_KINDS:
                    run = await self.get_run(id)
                    if run.settled_in(statuses, through_sleeps):
                        return run
                if time.monotonic() >= deadline:
                    break
        finally:
            await tail.aclose()
        raise TimeoutError(f"run {id} is still {run.status} after {timeout} s")

    async def start_run(
        self,
        plan: str,
        inputs: Mapping[str, Any] | None = None,
        key: str | None = None,
        seed: int | None = None,
    ) -> Run:
        """Starts a run of ``plan`` (its source text); see :meth:`Client.start_run`."""
        started = await self.start(plan, inputs, key, seed)
        deadline = time.monotonic() + _START_VISIBLE_S
        while True:
            try:
                run = await self.get_run(started.run)
                if run.events > 0 or time.monotonic() >= deadline:
                    return Run.of(run.raw, existing=started.existing)
            except OracleError as e:
                if e.code != "not_found" or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.05)

    async def start(
        self,
        plan: str,
        inputs: Mapping[str, Any] | None = None,
        key: str | None = None,
        seed: int | None = None,
    ) -> StartedRun:
        """``POST /runs`` itself."""
        body = _Api.start_body(_plan_text(plan), inputs, key, seed)
        return StartedRun.of(await self._request("POST", "/runs", body=body))

    async def send_event(self, run: str, name: str, value: Any = None) -> dict[str, Any]:
        """Sends outside event ``name`` to the run; see :meth:`Client.send_event`."""
        result: dict[str, Any] = await self._request(
            "POST", f"/runs/{run}/events/{name}", body={"value": value}
        )
        return result

    async def answer(self, run: str, step: str, value: Any, resume: bool = True) -> dict[str, Any]:
        """Records the output of the step the run waits on; see :meth:`Client.answer`."""
        body = {"step": step, "value": value, "resume": resume}
        result: dict[str, Any] = await self._request("POST", f"/runs/{run}/answer", body=body)
        return result

    async def adjudicate(
        self,
        run: str,
        handle: str,
        verdict: str,
        evidence: str = "external_first_hand",
        resume: bool = True,
        note: str = "",
        now: int | None = None,
    ) -> dict[str, Any]:
        """Gives a verdict on a pending adjudication."""
        body = _Api.adjudicate_body(verdict, evidence, note, resume, now)
        result: dict[str, Any] = await self._request(
            "POST", f"/runs/{run}/adjudications/{handle}", body=body
        )
        return result

    async def store_adjudications(self, store: str) -> dict[str, Any]:
        """:meth:`Client.store_adjudications`."""
        result: dict[str, Any] = await self._request("GET", f"/memory/{store}/adjudications")
        return result

    async def adjudicate_store(
        self,
        store: str,
        handle: str,
        verdict: str,
        evidence: str = "external_first_hand",
        note: str = "",
        now: int | None = None,
    ) -> dict[str, Any]:
        """:meth:`Client.adjudicate_store`."""
        body = _Api.adjudicate_body(verdict, evidence, note, False, now)
        result: dict[str, Any] = await self._request(
            "POST", f"/memory/{store}/adjudications/{handle}", body=body
        )
        return result

    async def cancel(self, run: str, reason: str | None = None) -> dict[str, Any]:
        """Ends a run that has not finished."""
        body: dict[str, Any] = {} if reason is None else {"reason": reason}
        result: dict[str, Any] = await self._request("POST", f"/runs/{run}/cancel", body=body)
        return result

    async def resume(self, run: str) -> dict[str, Any]:
        """Resumes the run in the server's background."""
        result: dict[str, Any] = await self._request("POST", f"/runs/{run}/resume", body={})
        return result
