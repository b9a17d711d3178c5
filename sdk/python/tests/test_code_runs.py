"""Code runs through the real binary, checked by this package's verifier: a Python agent
(oracle_agent, synchronous and ``async``) and a TypeScript one (sdk/typescript, run with
``node``) each suspend on a question, are answered with ``oracle resume``, complete, and their
logs verify here (state recomputed too) with the same verdict as ``oracle verify``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _compare import binary_verdict, python_verdict
from conftest import REPO
from oracle_client import verify

PYTHON_AGENT = """
from oracle_agent import agent

@agent(name="triage", version=1, grants=["fs:read:data/**"])
def triage(ctx, path: str = "data/ticket.txt"):
    text = ctx.call("fs.read", path=path, step="read")["text"]
    words = ctx.call("text.count", text=text)["words"]
    ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"words": words, "approved": ok}

if __name__ == "__main__":
    triage.main()
"""

ASYNC_AGENT = """
from oracle_agent import agent

@agent(name="triage", version=1, grants=["fs:read:data/**"])
async def triage(ctx, path: str = "data/ticket.txt"):
    text = (await ctx.call("fs.read", path=path, step="read"))["text"]
    words = (await ctx.call("text.count", text=text))["words"]
    ok = await ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"words": words, "approved": ok}

if __name__ == "__main__":
    triage.main()
"""

TS_AGENT = """
import { agent } from "oracle-agent";

const triage = agent(
  { name: "triage", grants: ["fs:read:data/**"], inputs: { path: "string" } },
  async (ctx, { path = "data/ticket.txt" }) => {
    const { text } = await ctx.call("fs.read", { path }, { step: "read" });
    const { words } = await ctx.call("text.count", { text });
    const ok = await ctx.ask("send this reply?", { schema: { type: "string" }, step: "approve" });
    return { words, approved: ok };
  },
);
triage.main();
"""


def oracle(bin: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "sdk" / "python" / "src"))
    return subprocess.run(
        [str(bin), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("entry", ["triage.py", "triage_async.py", "agent.mjs"])
def test_a_code_run_answered_and_completed_verifies_here(
    oracle_bin: Path, tmp_path: Path, entry: str
) -> None:
    if entry.endswith(".mjs"):
        if shutil.which("node") is None:
            pytest.skip("no node on PATH")
        (tmp_path / "node_modules").mkdir()
        (tmp_path / "node_modules" / "oracle-agent").symlink_to(REPO / "sdk" / "typescript")
    program = {"triage.py": PYTHON_AGENT, "triage_async.py": ASYNC_AGENT}.get(entry, TS_AGENT)
    (tmp_path / entry).write_text(program)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ticket.txt").write_text("the printer is on fire\n")
    started = oracle(oracle_bin, tmp_path, "run", entry, "--json")
    assert started.returncode == 3, started.stdout + started.stderr
    run = json.loads(started.stdout.strip().splitlines()[-1])["run"]
    answered = oracle(oracle_bin, tmp_path, "resume", run, "--step", "approve", "--value", '"yes"')
    assert answered.returncode == 0, answered.stdout + answered.stderr
    log = tmp_path / ".oracle" / "runs" / run / "events.jsonl"
    report = verify(log, check_state=True)
    assert report.ok, report.message
    assert python_verdict(log) == binary_verdict(oracle_bin, log)
    assert '"approved":"yes"' in log.read_text()


PYTHON_NAP = """
from oracle_agent import agent

@agent(name="nap", version=1)
def nap(ctx):
    ctx.memory.claim("ticket:1", "status", "open", "external_first_hand", step="remember")
    slept = ctx.sleep("1h", step="nap")
    belief = ctx.memory.query("ticket:1", "status", step="recall")
    return {"woke": slept["fired_ms"] >= slept["due_ms"] - 3600000, "belief": belief}

if __name__ == "__main__":
    nap.main()
"""

TS_NAP = """
import { agent } from "oracle-agent";

const nap = agent({ name: "nap" }, async (ctx) => {
  await ctx.memory.claim(
    { subject: "ticket:1", predicate: "status", value: "open", provenance: "external_first_hand" },
    { step: "remember" },
  );
  const slept = await ctx.sleep("1h", { step: "nap" });
  const line = { subject: "ticket:1", predicate: "status" };
  const belief = await ctx.memory.query(line, { step: "recall" });
  return { woke: slept.fired_ms >= slept.due_ms - 3600000, belief };
});
nap.main();
"""


@pytest.mark.parametrize("entry", ["nap.py", "nap.mjs"])
def test_a_code_run_sleeps_on_a_durable_timer_and_keeps_a_belief(
    oracle_bin: Path, tmp_path: Path, entry: str
) -> None:
    """``ctx.sleep`` suspends the run on a recorded timer that ``oracle resume --wake`` fires;
    ``ctx.memory`` claims and queries the run's belief memory; the run replays."""
    if entry.endswith(".mjs"):
        if shutil.which("node") is None:
            pytest.skip("no node on PATH")
        (tmp_path / "node_modules").mkdir()
        (tmp_path / "node_modules" / "oracle-agent").symlink_to(REPO / "sdk" / "typescript")
    (tmp_path / entry).write_text(PYTHON_NAP if entry.endswith(".py") else TS_NAP)
    started = oracle(oracle_bin, tmp_path, "run", entry, "--json")
    assert started.returncode == 3, started.stdout + started.stderr
    run = json.loads(started.stdout.strip().splitlines()[-1])["run"]
    early = oracle(oracle_bin, tmp_path, "resume", run, "--wake")
    assert early.returncode == 3, early.stdout + early.stderr  # not due: nothing recorded
    woken = oracle(oracle_bin, tmp_path, "resume", run, "--wake", "--force")
    assert woken.returncode == 0, woken.stdout + woken.stderr
    log = tmp_path / ".oracle" / "runs" / run / "events.jsonl"
    text = log.read_text()
    assert '"timer_set"' in text and '"timer_fired"' in text
    assert '"woke":true' in text and '"open"' in text
    assert verify(log, check_state=True).ok
    replayed = oracle(oracle_bin, tmp_path, "replay", run)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


CLOCK_AGENT = """
import time
from oracle_agent import agent

@agent(name="stamp", version=1)
def stamp(ctx):
    now = time.time_ns()
    return ctx.call("text.count", text=f"stamped at {now}", step="stamp")

if __name__ == "__main__":
    stamp.main()
"""


def test_a_direct_clock_read_is_named_with_its_line_when_the_replay_diverges(
    oracle_bin: Path, tmp_path: Path
) -> None:
    """``time.time_ns()`` called directly is not recorded: the replay reads another instant,
    the decision made from it differs, and the refusal names the line that read the clock
    and the recorded call to use instead."""
    (tmp_path / "stamp.py").write_text(CLOCK_AGENT)
    done = oracle(oracle_bin, tmp_path, "run", "stamp.py", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(done.stdout.strip().splitlines()[-1])["run"]
    replayed = oracle(oracle_bin, tmp_path, "replay", run)
    said = replayed.stdout + replayed.stderr
    assert replayed.returncode == 4, said
    assert "stamp.py:7 called time.time_ns() directly" in said, said
    assert "use ctx.now() instead" in said, said
