"""The one exception every failure of the API is raised as.

``oracle serve`` answers every failure with one JSON shape (docs/API.md, "Errors"):
``{"ok": false, "error": {"code", "exit", "message", ...details}}``. Callers branch on
``code``, a stable name, never on the HTTP status or the message, so the SDK raises one class
carrying it instead of httpx's exceptions.
"""

from __future__ import annotations

from typing import Any


class OracleError(Exception):
    """A request the API refused, or that could not reach it.

    ``code`` is the API's stable name (``not_found``, ``already_resolved``, ``key_conflict``,
    ...), ``status`` the HTTP status (0 when no answer came: ``code`` is then ``connection`` or
    ``timeout``), ``message`` the API's sentence, ``exit`` the code ``oracle`` would exit with
    for the same failure, and ``details`` every other key of the error object (``seq``,
    ``handle``, ``differs``, ...). ``body`` is the whole answer, for keys beside ``error``
    (``original`` of an already resolved adjudication).
    """

    def __init__(
        self,
        code: str,
        status: int,
        message: str,
        details: dict[str, Any] | None = None,
        exit: int | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{code} ({status}): {message}")
        self.code = code
        self.status = status
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.exit = exit
        self.body = body

    @classmethod
    def from_response(cls, status: int, body: Any, text: str = "") -> OracleError:
        """The error an answer with a failure status carries (or a plain one when it carries
        none: a proxy's page, say)."""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = dict(body["error"])
            code = str(err.pop("code", "http"))
            message = str(err.pop("message", ""))
            exit_code = err.pop("exit", None)
            return cls(
                code,
                status,
                message,
                err,
                exit_code if isinstance(exit_code, int) else None,
                body,
            )
        return cls("http", status, text[:300] or f"HTTP {status}", body=body)
