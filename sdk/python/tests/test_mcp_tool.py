"""A tool written in Python (issue 36, item 4): the example MCP server in
``examples/units/tools/server.py``, written with the official SDK's FastMCP and declared by its
manifest, is called by an ``agent`` step of ``examples/units/weather.plan`` whose model is the
repository's scripted stub. The server is pinned (its name, version and tool list in the run's
first event), the call gated (a recorded capability check) and recorded, and the run replays
with no Python on ``PATH``.

Needs the ``mcp`` package (``pip install ./sdk/python[test]`` brings it); without it the test
is skipped, unless ``ORACLE_REQUIRE_BIN=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "units"


def _mcp_installed() -> bool:
    try:
        import mcp.server.fastmcp  # noqa: F401
    except ImportError:
        return False
    return True


def _events(home: Path, run: str) -> list[dict[str, Any]]:
    text = (home / "runs" / run / "events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_a_python_mcp_tool_is_pinned_gated_recorded_and_replayed_without_it(
    oracle_bin: Path, tmp_path: Path
) -> None:
    if not _mcp_installed():
        if os.environ.get("ORACLE_REQUIRE_BIN") == "1":
            pytest.fail("the mcp package is not installed: pip install ./sdk/python[test]")
        pytest.skip("the mcp package is not installed")
    work = tmp_path / "units"
    shutil.copytree(EXAMPLE, work)
    home = work / ".oracle"
    # This Python (the one with `mcp`) is the `python3` the manifest finds on PATH.
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "ORACLE_HOME": str(home),
        "HOME": str(tmp_path),
    }

    def oracle(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
        e = dict(env, PATH=path) if path is not None else env
        return subprocess.run(
            [str(oracle_bin), *args],
            cwd=work,
            env=e,
            capture_output=True,
            text=True,
            timeout=120,
        )

    checked = oracle("tools", "check", "tools")
    assert checked.returncode == 0, checked.stderr
    assert "mcp.units.convert" in checked.stdout
    stub = oracle(
        "dev",
        "llm-stub",
        "--script",
        "replies.jsonl",
        "--url-file",
        "llm.url",
        "--detach",
        "--exit-when-played",
    )
    assert stub.returncode == 0, stub.stderr
    url = (work / "llm.url").read_text().strip()
    ran = oracle("run", "weather.plan", "--model", f"fast={url}")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    events = _events(home, "weather-1")
    pins = events[0]["payload"]["tools"]
    assert [(p["name"], p["kind"], p["effect"]) for p in pins] == [("mcp.units", "mcp", "impure")]
    # What the server listed is kept beside the log: replay reads it instead of starting it.
    kept = json.loads((home / "runs" / "weather-1" / "tools" / "mcp.units.json").read_text())
    assert "convert" in json.dumps(kept)
    allowed = [
        e
        for e in events
        if e["kind"] == "capability_allowed" and e["payload"]["capability"] == "mcp:units:convert"
    ]
    assert len(allowed) == 1
    returned = [
        e["payload"]["output"]
        for e in events
        if e["kind"] == "tool_returned" and e["payload"]["tool"] == "mcp.units.convert"
    ]
    assert returned == [{"celsius_tenths": 215, "fahrenheit_tenths": 707}]
    assert events[-1]["payload"]["status"] == "completed"

    # Replay starts no server: nothing on PATH, and it reproduces every event.
    replayed = oracle("replay", "weather-1", path="/nonexistent")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    verified = oracle("verify", "weather-1", path="/nonexistent")
    assert verified.returncode == 0, verified.stdout + verified.stderr
