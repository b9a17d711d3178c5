"""sdk/python/README.md's Python blocks run, in order, against a real ``oracle serve``.

The quickstart is what a newcomer copies first; if it stops working, this fails. The blocks
share one namespace, given ``URL``, ``TOKEN`` (of a token named ``alice``) and ``HOME``, and
run from the repository root (the plans' paths are relative to it).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO
from test_client import Server, _start_supported, serve

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    """Each Python block, preceded by as many blank lines as come before it in the file, so a
    failure's traceback names the README's own line."""
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, m.start(1))
        blocks.append("\n" * line + m.group(1))
    return blocks


@pytest.fixture(scope="module")
def alice(oracle_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(oracle_bin, tmp_path_factory.mktemp("home"), "alice")


@contextlib.contextmanager
def at(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def test_the_quickstart_runs(alice: Server) -> None:
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 2
    if not _start_supported(alice):
        pytest.skip("this oracle serve has no POST /api/v1/runs yet: the quickstart starts one")
    scope = {"URL": alice.url, "TOKEN": alice.token, "HOME": str(alice.home)}
    out = io.StringIO()
    with at(REPO), contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(README), "exec"), scope)
    assert "run_finished" in out.getvalue()
