"""oracle_agent: write an oracle agent as ordinary Python, synchronous or ``async``.

The runtime starts the program's process and speaks the agent protocol (docs/AGENTS.md) over
its stdin and stdout; this package speaks the other side. Every effect is a call the runtime
gates, executes and records; the program only decides::

    from oracle_agent import agent

    @agent(name="triage", version=1, grants=["fs:read:data/**"])
    def triage(ctx, path: str = "data/ticket.txt"):
        text = ctx.call("fs.read", path=path, step="read")["text"]
        ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
        return {"text": text, "approved": ok}

    if __name__ == "__main__":
        triage.main()

A resume or replay runs the program again from the start in a fresh process, given the
recorded outcomes in order: it must make the same calls, so it may read nothing but its
inputs and what its calls return (``ctx.now()`` and ``ctx.random()`` instead of a clock or
``random``). An ``async def`` program is given an :class:`AsyncContext`, whose methods are the
same, awaited.

An :func:`adjudicator` is the other kind of program: the oracle a run's belief memory asks
when two claims contradict each other, run as ``--oracle-cmd`` and deciding each request with a
:class:`Verdict` (or leaving it to a person).
"""

from ._adjudicator import Adjudicator, Verdict, adjudicator
from ._agent import (
    PROTOCOL,
    SDK_NAME,
    SDK_VERSION,
    AgentError,
    AsyncContext,
    CallDenied,
    CallFailed,
    Context,
    Pending,
    Program,
    agent,
)

__all__ = [
    "PROTOCOL",
    "SDK_NAME",
    "SDK_VERSION",
    "Adjudicator",
    "AgentError",
    "AsyncContext",
    "CallDenied",
    "CallFailed",
    "Context",
    "Pending",
    "Program",
    "Verdict",
    "adjudicator",
    "agent",
]
