"""Runs the binary's and this package's verifier on one log and puts the verdicts side by side."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from oracle_client import verify


def binary_verdict(oracle_bin: Path, log: Path, *extra: str) -> dict[str, Any]:
    """What ``oracle verify --json --threads 1`` says, reduced to what both must agree on."""
    proc = subprocess.run(
        [str(oracle_bin), "verify", "--json", "--threads", "1", *extra, str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = json.loads(proc.stdout)
    err = out.get("error") or {}
    return {
        "exit": proc.returncode,
        "ok": out["ok"],
        "events": out.get("events"),
        "head": out.get("head"),
        "kind": err.get("kind"),
        "seq": err.get("seq"),
        "offset": err.get("offset"),
        "reason": err.get("reason"),
    }


def python_verdict(log: Path, head: str | None = None) -> dict[str, Any]:
    """The same fields from :func:`oracle_client.verify`."""
    r = verify(log, head=head)
    return {
        "exit": r.exit_code,
        "ok": r.ok,
        "events": r.events if r.ok else None,
        "head": r.head if r.ok else None,
        "kind": r.kind,
        "seq": r.seq,
        "offset": r.offset,
        "reason": r.reason,
    }
