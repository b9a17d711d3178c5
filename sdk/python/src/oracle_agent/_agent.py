"""The agent protocol's program side (docs/AGENTS.md, version 1): the decorator, the context
a program calls, and the loop that answers the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import os
import random
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import IO, Any

PROTOCOL = 1
SDK_NAME = "oracle_agent"
SDK_VERSION = "0.1.0"

#: ``random.int``'s range for ``ctx.random()``: 53 bits, every one exactly a float's mantissa.
_RANDOM_BITS = 53

#: Python types of a program's parameters, as JSON Schema types in its ``hello``.
_SCHEMA_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    bool: "boolean",
    dict: "object",
    list: "array",
    "str": "string",
    "int": "integer",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
}

_HERE = Path(__file__).resolve().parent


class AgentError(Exception):
    """The runtime said something this SDK cannot follow (a protocol error)."""


class CallFailed(Exception):
    """A call's tool failed (``failed`` outcome): ``step`` and the tool's ``error``."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"step `{step}` failed: {error}")
        self.step = step
        self.error = error


class CallDenied(Exception):
    """No grant covers a call (``denied`` outcome): the tool was not run."""

    def __init__(self, step: str, capability: str, reason: str) -> None:
        super().__init__(f"step `{step}` was denied `{capability}`: {reason}")
        self.step = step
        self.capability = capability
        self.reason = reason


class _Closed(BaseException):
    """The runtime closed stdin (a suspended run, or a replay that has read enough): exit
    quietly. A ``BaseException`` so a program's ``except Exception`` does not swallow it."""


@dataclass
class Pending:
    """A call not yet made, for :meth:`Context.gather`."""

    tool: str
    args: dict[str, Any]
    step: str | None = None


@dataclass
class _Channel:
    """The protocol's two streams."""

    inp: IO[str]
    out: IO[str]

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n")
        self.out.flush()

    def receive(self, kind: str) -> dict[str, Any]:
        line = self.inp.readline()
        if not line:
            raise _Closed()
        message = json.loads(line)
        if not isinstance(message, dict) or message.get("type") != kind:
            raise AgentError(f"expected a `{kind}` message, got {line.strip()[:200]}")
        return message


#: A frame's file name as a path relative to the working directory (``None``: outside it, or
#: this SDK), resolved once per file: :func:`_site` runs on every call a program makes.
_RELATIVE: dict[str, str | None] = {}


def _relative(filename: str) -> str | None:
    if filename not in _RELATIVE:
        path = Path(filename).resolve()
        rel: str | None = None
        if path.parent != _HERE:
            with contextlib.suppress(ValueError):
                rel = path.relative_to(Path.cwd()).as_posix()
        _RELATIVE[filename] = rel
    return _RELATIVE[filename]


def _site(files: Sequence[str]) -> dict[str, Any] | None:
    """The innermost frame of the program's own files: the line that made a reply. Walks the
    live frames (no source lines read, unlike ``traceback.extract_stack``). Carries, and
    forgets, the direct clock and randomness reads seen since the previous reply."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        rel = _relative(frame.f_code.co_filename)
        if rel is not None and (not files or rel in files):
            return _with_unrecorded({"file": rel, "line": frame.f_lineno or 0})
        frame = frame.f_back
    return None


#: What a program should call instead of reading the clock or randomness directly: such a
#: read is not recorded, so a replay reads another value, and a decision made from it differs
#: (docs/AGENTS.md, "Resume and replay"). ``datetime.now`` is a method of a C type and cannot
#: be watched; it is listed in the docs.
_INSTEAD: dict[tuple[str, str], str] = {
    ("time", "time"): "ctx.now()",
    ("time", "time_ns"): "ctx.now()",
    ("random", "random"): "ctx.random()",
    ("random", "randint"): "ctx.random()",
    ("random", "randrange"): "ctx.random()",
    ("random", "uniform"): "ctx.random()",
    ("random", "choice"): "ctx.random()",
    ("random", "shuffle"): "ctx.random()",
    ("random", "sample"): "ctx.random()",
    ("os", "urandom"): "ctx.random()",
    ("uuid", "uuid4"): "ctx.random()",
}

#: The most direct reads a reply carries (the runtime shows three): a loop reading the clock
#: a million times must not grow a reply.
_UNRECORDED_MAX = 3

#: Direct reads by the program's own files since the previous reply.
_unrecorded: list[dict[str, Any]] = []


def _with_unrecorded(site: dict[str, Any]) -> dict[str, Any]:
    if _unrecorded:
        site["unrecorded"] = list(_unrecorded)
        _unrecorded.clear()
    return site


def _watch(module: Any, name: str, instead: str) -> None:
    """Replaces ``module.name`` with a function that notes a call from the program's own
    files (a library reading the clock is not the program deciding on it), then calls it."""
    original = getattr(module, name)

    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if len(_unrecorded) < _UNRECORDED_MAX:
            caller = sys._getframe(1)
            rel = _relative(caller.f_code.co_filename)
            if rel is not None:
                call = f"{module.__name__}.{name}"
                line = caller.f_lineno or 0
                _unrecorded.append({"call": call, "file": rel, "line": line, "instead": instead})
        return original(*args, **kwargs)

    setattr(module, name, watched)


def _watch_all() -> None:
    """Watches every function of :data:`_INSTEAD`, once, in a process the runtime started."""
    modules = {"time": time, "random": random, "os": os, "uuid": uuid}
    for (module, name), instead in _INSTEAD.items():
        _watch(modules[module], name, instead)


def _raised_at(e: BaseException, files: Sequence[str]) -> dict[str, Any] | None:
    """The innermost line of the program's own files that an exception passed through."""
    root = Path.cwd()
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        try:
            rel = Path(frame.filename).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if not files or rel in files:
            return _with_unrecorded({"file": rel, "line": frame.lineno or 0})
    return None


@dataclass
class Context:
    """What a program calls: each method is one or more tool calls the runtime records."""

    _channel: _Channel
    _files: list[str]
    _counts: dict[str, int] = field(default_factory=dict)

    def _step(self, tool: str, step: str | None) -> str:
        n = self._counts.get(tool, 0) + 1
        self._counts[tool] = n
        return step if step is not None else f"{tool}#{n}"

    def _round(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        site = _site(self._files)
        if site is not None:
            reply["at"] = site
        self._channel.send(reply)
        observations = self._channel.receive("decide").get("observations")
        if not isinstance(observations, list):
            raise AgentError("a `decide` without `observations`")
        return observations

    def _outcome(self, seen: dict[str, Any]) -> Any:
        step = str(seen.get("step"))
        outcome = seen.get("outcome")
        if outcome == "returned":
            return seen.get("output")
        if outcome == "answered":
            return seen.get("value")
        if outcome == "failed":
            raise CallFailed(step, str(seen.get("error")))
        if outcome == "denied":
            raise CallDenied(step, str(seen.get("capability")), str(seen.get("reason")))
        if outcome == "ask":
            # A person must answer: the run suspends; a resume shows the answer.
            again = self._round({"type": "suspend", "step": step, "reason": seen.get("question")})
            if len(again) != 1:
                raise AgentError(f"step `{step}`: expected its answer after suspending")
            return self._outcome(again[0])
        raise AgentError(f"step `{step}`: unknown outcome {outcome!r}")

    def gather(self, *calls: Pending) -> list[Any]:
        """Makes ``calls`` in one decision (the runtime may run them in parallel) and gives
        their outputs in order; the first that failed or was denied raises."""
        wire = []
        for c in calls:
            step = self._step(c.tool, c.step)
            wire.append({"step": step, "tool": c.tool, "input": c.args})
        seen = self._round({"type": "calls", "calls": wire})
        if len(seen) != len(wire):
            raise AgentError(f"{len(wire)} calls made, {len(seen)} outcomes shown")
        return [self._outcome(s) for s in seen]

    def call(self, tool: str, *, step: str | None = None, **args: Any) -> Any:
        """Calls ``tool`` (built in or declared) with ``args``: its output."""
        return self.gather(Pending(tool, args, step))[0]

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        step: str | None = None,
        **args: Any,
    ) -> Any:
        """One ``llm.chat`` of the model bound to ``model``: its text (its parsed JSON when
        ``schema=`` is given)."""
        out = self.call("llm.chat", step=step, model=model, messages=messages, **args)
        return out.get("parsed", out.get("content")) if "schema" in args else out.get("content")

    def ask(
        self, question: str, *, schema: dict[str, Any] | None = None, step: str | None = None
    ) -> Any:
        """Asks a person (``human.ask``): the run suspends until ``oracle resume RUN --step
        STEP --value V`` answers, then this returns V."""
        args: dict[str, Any] = {"question": question}
        if schema is not None:
            args["schema"] = schema
        return self.call("human.ask", step=step, **args)

    def now(self, *, step: str | None = None) -> datetime:
        """The wall clock, read once by the runtime and recorded (``clock.wall``)."""
        out = self.call("clock.wall", step=step)
        return datetime.fromtimestamp(int(out["unix_ms"]) / 1000, tz=timezone.utc)

    def random(self, *, step: str | None = None) -> float:
        """A number in [0, 1) drawn from the run's recorded seed (``random.int``)."""
        out = self.call("random.int", step=step, min=0, max=(1 << _RANDOM_BITS) - 1)
        return int(out["value"]) / float(1 << _RANDOM_BITS)

    def sleep(
        self, duration: str | None = None, *, until: str | None = None, step: str | None = None
    ) -> dict[str, Any]:
        """Waits on a durable timer (the ``sleep`` tool): ``duration`` as a plan's ``for``
        (``"10m"``) or ``until`` an RFC 3339 instant, exactly one. The run suspends; it goes on
        when the timer is woken (``oracle resume RUN --wake``, serve's wheel, a worker) and this
        returns ``{due, due_ms, fired, fired_ms}``, recorded."""
        if (duration is None) == (until is None):
            raise ValueError("sleep takes a duration or until=, exactly one")
        args = {"for": duration} if duration is not None else {"until": until}
        out: dict[str, Any] = self.call("sleep", step=step, **args)
        return out

    @property
    def memory(self) -> Memory:
        """The run's belief memory (docs/MEMORY.md): ``claim``, ``query``, ``history``."""
        return Memory(self)


@dataclass
class Memory:
    """The belief memory's tools, called through the context that made it."""

    _ctx: Context

    def claim(
        self,
        subject: str,
        predicate: str,
        value: Any,
        provenance: str,
        *,
        step: str | None = None,
        **more: Any,
    ) -> Any:
        """Records a claim (``memory.assert``); the gate decides its disposition. ``more``:
        ``cardinality``, ``criticality``, ``derived_from``, ``valid``."""
        args = {"subject": subject, "predicate": predicate, "value": value}
        return self._ctx.call("memory.assert", step=step, provenance=provenance, **args, **more)

    def query(self, subject: str, predicate: str, *, step: str | None = None, **more: Any) -> Any:
        """What the memory believes about a line (``memory.query``). ``more``: ``as_of``,
        ``valid_at``, ``require``, ``deadline``, ``on_timeout``."""
        return self._ctx.call(
            "memory.query", step=step, subject=subject, predicate=predicate, **more
        )

    def history(self, subject: str, *, step: str | None = None, **more: Any) -> Any:
        """The claims about ``subject`` (``memory.history``). ``more``: ``predicate``,
        ``as_of``."""
        return self._ctx.call("memory.history", step=step, subject=subject, **more)


class AsyncContext:
    """What an ``async def`` program calls: :class:`Context`'s methods, awaitable. The protocol
    is one decision at a time, so each call is made and answered before the next starts: for
    calls in one round use ``await ctx.gather(...)``, not ``asyncio.gather``."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def call(self, tool: str, *, step: str | None = None, **args: Any) -> Any:
        """:meth:`Context.call`."""
        return self._ctx.call(tool, step=step, **args)

    async def gather(self, *calls: Pending) -> list[Any]:
        """:meth:`Context.gather`: the calls in one decision."""
        return self._ctx.gather(*calls)

    async def chat(
        self, model: str, messages: list[dict[str, Any]], *, step: str | None = None, **args: Any
    ) -> Any:
        """:meth:`Context.chat`."""
        return self._ctx.chat(model, messages, step=step, **args)

    async def ask(
        self, question: str, *, schema: dict[str, Any] | None = None, step: str | None = None
    ) -> Any:
        """:meth:`Context.ask`."""
        return self._ctx.ask(question, schema=schema, step=step)

    async def now(self, *, step: str | None = None) -> datetime:
        """:meth:`Context.now`."""
        return self._ctx.now(step=step)

    async def random(self, *, step: str | None = None) -> float:
        """:meth:`Context.random`."""
        return self._ctx.random(step=step)

    async def sleep(
        self, duration: str | None = None, *, until: str | None = None, step: str | None = None
    ) -> dict[str, Any]:
        """:meth:`Context.sleep`."""
        return self._ctx.sleep(duration, until=until, step=step)

    @property
    def memory(self) -> AsyncMemory:
        """:attr:`Context.memory`, awaitable."""
        return AsyncMemory(self._ctx.memory)


@dataclass
class AsyncMemory:
    """:class:`Memory`'s tools, awaitable."""

    _memory: Memory

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`Memory.claim`."""
        return self._memory.claim(*args, **kwargs)

    async def query(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`Memory.query`."""
        return self._memory.query(*args, **kwargs)

    async def history(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`Memory.history`."""
        return self._memory.history(*args, **kwargs)


def _project_files(entry: str | None) -> list[str]:
    """The files the program is made of: its entry file and every module loaded from under
    the working directory (not this SDK, not an environment's installed packages)."""
    root = Path.cwd().resolve()
    skip = {Path(p).resolve() for p in {sys.prefix, sys.base_prefix}}
    found: set[str] = set()
    candidates = [entry] + [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    for name in candidates:
        if not name:
            continue
        path = Path(name).resolve()
        if path.parent == _HERE or any(s in path.parents for s in skip):
            continue
        if "site-packages" in path.parts or not path.is_file():
            continue
        try:
            found.add(path.relative_to(root).as_posix())
        except ValueError:
            continue
    return sorted(found)


class Program:
    """A function made an agent by :func:`agent`: ``main()`` serves the protocol."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        version: int,
        grants: Sequence[str],
    ) -> None:
        self.fn = fn
        self.name = name
        self.version = version
        self.grants = list(grants)

    def __call__(self, ctx: Context, *args: Any, **kwargs: Any) -> Any:
        return self.fn(ctx, *args, **kwargs)

    def inputs_schema(self) -> dict[str, Any]:
        """The JSON Schema of the function's parameters after ``ctx``."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        for p in params:
            ty = _SCHEMA_TYPES.get(p.annotation)
            properties[p.name] = {"type": ty} if ty else {}
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
        return {"type": "object", "properties": properties, "required": required}

    def hello(self, files: list[str]) -> dict[str, Any]:
        return {
            "type": "hello",
            "protocol": PROTOCOL,
            "sdk": {"name": SDK_NAME, "version": SDK_VERSION},
            "program": {"name": self.name, "version": self.version},
            "grants": self.grants,
            "inputs": self.inputs_schema(),
            "files": files,
        }

    def serve(self, channel: _Channel, files: list[str]) -> None:
        """Speaks the protocol over ``channel`` until the program returns or raises."""
        channel.send(self.hello(files))
        inputs = channel.receive("start").get("inputs") or {}
        channel.receive("decide")
        known = list(inspect.signature(self.fn).parameters)[1:]
        kwargs = {k: v for k, v in inputs.items() if k in known}
        ctx = Context(channel, files)
        try:
            if inspect.iscoroutinefunction(self.fn):
                output = asyncio.run(self.fn(AsyncContext(ctx), **kwargs))
            else:
                output = self.fn(ctx, **kwargs)
        except _Closed:
            return
        except Exception as e:
            reply: dict[str, Any] = {"type": "fail", "reason": f"{type(e).__name__}: {e}"}
            site = _raised_at(e, files)
            if site is not None:
                reply["at"] = site
            channel.send(reply)
            return
        reply = {"type": "done", "output": output}
        site = _site(files)
        if site is not None:
            reply["at"] = site
        channel.send(reply)

    def main(self) -> None:
        """Serves the protocol on stdin and stdout; the program's prints go to stderr."""
        out = sys.stdout
        sys.stdout = sys.stderr
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        files = _project_files(main_file)
        if os.environ.get("ORACLE_AGENT_PROTOCOL") is None:
            sys.stderr.write(
                f"{self.name}: an oracle agent; run it with `oracle run {main_file or ''}`\n"
            )
        with contextlib.suppress(_Closed):
            self.serve(_Channel(sys.stdin, out), files)


def agent(
    *, name: str, version: int = 1, grants: Sequence[str] = ()
) -> Callable[[Callable[..., Any]], Program]:
    """Makes a function ``fn(ctx, **inputs)`` an agent named ``name`` at ``version``, which
    declares ``grants`` (capabilities, as a plan's ``grants``)."""

    def wrap(fn: Callable[..., Any]) -> Program:
        return Program(fn, name, version, grants)

    return wrap


if os.environ.get("ORACLE_AGENT_PROTOCOL") is not None:
    # Only in a process the runtime started: a program imported by its own tests is left alone.
    _watch_all()
