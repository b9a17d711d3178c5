"""An adjudicator written in Python: the oracle a run's belief memory asks when two claims of
one line contradict each other (docs/MEMORY.md, "The adjudication oracle").

The runtime starts the program once per pending request (``--oracle-cmd adjudicator.py``),
with the request as one JSON object on stdin. The function decides: a :class:`Verdict`, which
the program prints and the runtime records as ``oracle adjudicate`` would (the same checks, one
``adjudicated`` event naming the program as ``by``), or ``None``, which leaves the request to a
person (``oracle adjudications``, the inbox). A verdict is recorded once; a replay reads it
from the log and never starts the program.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The verdicts docs/MEMORY.md defines.
VERDICTS = ("affirm", "deny", "unknown")


@dataclass(frozen=True)
class Verdict:
    """A decision on a request: ``affirm`` makes the challenger the belief, ``deny`` keeps
    the incumbent, ``unknown`` leaves both contested. ``evidence`` is the verdict's
    provenance; ``note`` (at most 4 KiB) is recorded with it."""

    verdict: str
    evidence: str = "external_first_hand"
    note: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}: expected one of {', '.join(VERDICTS)}")

    def to_json(self) -> dict[str, str]:
        return {"verdict": self.verdict, "evidence": self.evidence, "note": self.note}


Decide = Callable[[dict[str, Any]], "Verdict | None"]


class Adjudicator:
    """A function from a request to a verdict, run as an ``--oracle-cmd`` program."""

    def __init__(self, fn: Decide) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def request(self, request: dict[str, Any]) -> Verdict | None:
        """Decides ``request`` (as the runtime sends it: ``run``, ``handle``, ``subject``,
        ``predicate``, ``incumbent``, ``challenger``, ...)."""
        verdict = self.fn(request)
        if verdict is not None and not isinstance(verdict, Verdict):
            raise TypeError(f"an adjudicator returns a Verdict or None, not {verdict!r}")
        return verdict

    def main(self) -> None:
        """Reads one request from stdin and prints the verdict, if any, on stdout; the
        function's own prints go to stderr, which the runtime does not read as a verdict."""
        out = sys.stdout
        sys.stdout = sys.stderr
        request = json.loads(sys.stdin.readline())
        verdict = self.request(request)
        if verdict is not None:
            out.write(json.dumps(verdict.to_json()) + "\n")
            out.flush()


def adjudicator(fn: Decide) -> Adjudicator:
    """Makes ``fn(request) -> Verdict | None`` an adjudicator; call ``.main()`` under
    ``if __name__ == "__main__":``."""
    return Adjudicator(fn)
