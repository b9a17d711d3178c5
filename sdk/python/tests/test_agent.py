"""oracle_agent against a scripted runtime: this test plays the runtime's side of the agent
protocol (docs/AGENTS.md) over a real subprocess, so it needs no ``oracle`` binary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = """
from oracle_agent import agent, Pending
import helper

@agent(name="triage", version=2, grants=["fs:read:data/**", "llm:chat:fast"])
def triage(ctx, path: str = "data/ticket.txt", n: int = 1):
    print("a print goes to stderr")
    text = ctx.call("fs.read", path=path, step="read")["text"]
    reply = ctx.chat("fast", [{"role": "user", "content": text}])
    both = ctx.gather(Pending("text.count", {"text": text}), Pending("text.count", {"text": reply}))
    if helper.shout(reply) == "BOOM":
        raise ValueError("boom")
    ok = ctx.ask("send this reply?", schema={"type": "string"}, step="approve")
    return {"reply": reply, "approved": ok, "words": [b["words"] for b in both]}

if __name__ == "__main__":
    triage.main()
"""


class Runtime:
    """The runtime's side of one agent process."""

    def __init__(self, cwd: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(SRC), ORACLE_AGENT_PROTOCOL="1")
        self.proc = subprocess.Popen(
            [sys.executable, "triage.py"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        message = json.loads(self.proc.stdout.readline())
        assert isinstance(message, dict)
        return message

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def decide(self, n: int, *observations: dict[str, Any]) -> dict[str, Any]:
        self.send({"type": "decide", "round": n, "observations": list(observations)})
        return self.read()

    def close(self) -> str:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        return self.proc.stderr.read()


def returned(step: str, tool: str, output: Any) -> dict[str, Any]:
    return {"step": step, "tool": tool, "attempt": 1, "outcome": "returned", "output": output}


def project(tmp: Path) -> Path:
    (tmp / "triage.py").write_text(PROGRAM)
    (tmp / "helper.py").write_text("def shout(s):\n    return s.upper()\n")
    return tmp


def drive(rt: Runtime, reply: str) -> list[dict[str, Any]]:
    """Rounds up to the question: the replies in order."""
    hello = rt.read()
    assert hello["type"] == "hello"
    rt.send({"type": "start", "inputs": {"path": "data/t.txt"}})
    replies = [rt.decide(0)]
    replies.append(rt.decide(1, returned("read", "fs.read", {"text": "hi"})))
    chat = returned("llm.chat#1", "llm.chat", {"content": reply})
    replies.append(rt.decide(2, chat))
    counts = [returned(f"text.count#{i}", "text.count", {"words": i}) for i in (1, 2)]
    replies.append(rt.decide(3, *counts))
    return replies


def test_hello_names_the_program_its_grants_inputs_and_files(tmp_path: Path) -> None:
    rt = Runtime(project(tmp_path))
    hello = rt.read()
    assert hello["protocol"] == 1
    assert hello["program"] == {"name": "triage", "version": 2}
    assert hello["sdk"]["name"] == "oracle_agent"
    assert hello["grants"] == ["fs:read:data/**", "llm:chat:fast"]
    assert hello["inputs"]["properties"] == {"path": {"type": "string"}, "n": {"type": "integer"}}
    assert hello["inputs"]["required"] == []
    assert hello["files"] == ["helper.py", "triage.py"]
    rt.close()


def test_calls_default_steps_ask_and_done(tmp_path: Path) -> None:
    rt = Runtime(project(tmp_path))
    replies = drive(rt, "hello there")
    assert replies[0]["calls"] == [
        {"step": "read", "tool": "fs.read", "input": {"path": "data/t.txt"}}
    ]
    assert replies[0]["at"]["file"] == "triage.py"
    assert replies[1]["calls"][0]["step"] == "llm.chat#1"
    assert replies[1]["calls"][0]["input"]["model"] == "fast"
    assert [c["step"] for c in replies[2]["calls"]] == ["text.count#1", "text.count#2"]
    assert replies[3]["calls"][0]["tool"] == "human.ask"
    asked = {"step": "approve", "tool": "human.ask", "attempt": 1}
    suspend = rt.decide(4, dict(asked, outcome="ask", question="send this reply?"))
    assert suspend == {
        "type": "suspend",
        "step": "approve",
        "reason": "send this reply?",
        "at": suspend["at"],
    }
    done = rt.decide(5, dict(asked, outcome="answered", value="yes"))
    assert done["type"] == "done"
    assert done["output"] == {"reply": "hello there", "approved": "yes", "words": [1, 2]}
    assert "a print goes to stderr" in rt.close()


def test_a_fresh_process_makes_the_same_decisions(tmp_path: Path) -> None:
    first = drive(Runtime(project(tmp_path)), "hello there")
    again = drive(Runtime(project(tmp_path)), "hello there")
    assert first == again


def test_a_raise_is_a_fail_reply_naming_its_line(tmp_path: Path) -> None:
    rt = Runtime(project(tmp_path))
    replies = drive(rt, "boom")
    assert replies[3]["type"] == "fail"
    assert replies[3]["reason"] == "ValueError: boom"
    assert replies[3]["at"]["file"] == "triage.py"
    rt.close()


def test_a_denied_call_raises_in_the_program(tmp_path: Path) -> None:
    rt = Runtime(project(tmp_path))
    rt.read()
    rt.send({"type": "start", "inputs": {}})
    rt.decide(0)
    denied = {"step": "read", "tool": "fs.read", "attempt": 1, "outcome": "denied"}
    fail = rt.decide(1, dict(denied, capability="fs:read:data/ticket.txt", reason="no grant"))
    assert fail["type"] == "fail"
    assert fail["reason"].startswith("CallDenied: step `read` was denied")
    rt.close()


def test_a_closed_stdin_ends_the_program_quietly(tmp_path: Path) -> None:
    rt = Runtime(project(tmp_path))
    rt.read()
    rt.send({"type": "start", "inputs": {}})
    rt.decide(0)
    rt.close()
    assert rt.proc.returncode == 0
