"""``python -m oracle_client.verify LOG [--json] [--head HASH] [--state]``.

The command-line face of :func:`oracle_client.verify`: it prints what ``oracle verify`` prints
and exits with the same code (0 valid, 4 integrity failure, 2 no events or unreadable input),
so a script can swap one for the other. The verifier itself lives in ``_verify``, so that
running this module with ``-m`` does not import it twice.

This module is callable too: ``import oracle_client.verify`` replaces the package's
``verify`` function with this module (as Python does for every submodule), and
``oracle_client.verify(path)`` must keep working after it.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from typing import Any

from ._verify import EXIT_INPUT, EXIT_INTEGRITY, EXIT_OK, Report, verify, verify_bytes

__all__ = ["EXIT_INPUT", "EXIT_INTEGRITY", "EXIT_OK", "Report", "main", "verify", "verify_bytes"]


def main(argv: list[str] | None = None) -> int:
    """Verifies one log as ``oracle verify`` does and returns its exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m oracle_client.verify",
        description="Verify an oracle log independently of the oracle binary.",
    )
    parser.add_argument("log", help="a log file (events.jsonl) or a run directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--head", help="a head hash kept from earlier: the log must contain it")
    parser.add_argument(
        "--state", action="store_true", help="also recompute every state_after from the events"
    )
    args = parser.parse_args(argv)
    report = verify(args.log, head=args.head, check_state=args.state)
    if args.json:
        print(json.dumps(report.to_json()))
    elif report.ok:
        print(f"valid  {report.path}")
        print(f"  events   {report.events}")
        print(f"  head     {report.head}")
        print(f"  state    {report.state}")
    if not report.ok:
        print(f"error: {report.message}", file=sys.stderr)
    return report.exit_code


class _CallableModule(types.ModuleType):
    """Keeps ``oracle_client.verify(path)`` working once this submodule has been imported."""

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        return verify(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CallableModule
