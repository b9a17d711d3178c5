"""oracle-client: the Python SDK of oracle, a runtime of deterministic, replayable agents.

Two halves that need nothing from each other:

- :class:`Client` and :class:`AsyncClient` speak the HTTP API of ``oracle serve``
  (docs/API.md): start runs, wait for them, answer what they ask, read and stream their events;
- :func:`verify` checks a run's log offline, written from docs/FORMAT.md alone, so an auditor
  need not trust the binary that wrote the log to trust the log.
"""

from ._verify import Report, verify
from .client import AsyncClient, Client
from .errors import OracleError
from .models import Event, Inbox, InboxItem, Run, StartedRun, Waiting

__all__ = [
    "AsyncClient",
    "Client",
    "Event",
    "Inbox",
    "InboxItem",
    "OracleError",
    "Report",
    "Run",
    "StartedRun",
    "Waiting",
    "verify",
]
