"""Shared fixtures: where the repository and the ``oracle`` binary are.

The tests compare this package with the real binary, so they need one: ``ORACLE_BIN`` names
it (CI points it at the ``target/debug/oracle`` it already built); otherwise the repository's
``target/debug/oracle`` is used when present. Without a binary the comparisons are skipped,
loudly, unless ``ORACLE_REQUIRE_BIN=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"


def _find_bin() -> Path | None:
    env = os.environ.get("ORACLE_BIN")
    if env:
        # Resolved against the directory pytest was started from: the tests run the binary from
        # other directories, where a relative path would name nothing.
        return Path(env).resolve()
    candidate = REPO / "target" / "debug" / "oracle"
    return candidate if candidate.exists() else None


@pytest.fixture(scope="session")
def oracle_bin() -> Path:
    """The ``oracle`` binary the package is checked against."""
    found = _find_bin()
    if found is None or not found.exists():
        if os.environ.get("ORACLE_REQUIRE_BIN") == "1":
            pytest.fail("ORACLE_REQUIRE_BIN=1 but no oracle binary (set ORACLE_BIN)")
        pytest.skip("no oracle binary: set ORACLE_BIN or build target/debug/oracle")
    return found
