"""Logs of every event kind, made by the real binary: the Python verifier agrees with ``oracle
verify`` on each, and on seeded damage of each.

The fixture logs of ``test_verify`` were written before forks, plan upgrades, timers and
proposals existed, so a verifier that refused those kinds agreed with the binary on all of them.
Here the binary writes the logs: runs of fixture plans, a denied capability, questions
answered and a cancel, forks (with a value, and with a fixed plan), an upgrade by ``resume
--plan``, a sleep woken by ``--wake``, a schedule's trigger, proposals (one that compiles, one
that does not), verdicts, outside claims, a sweep and a reinstatement on a run's memory,
shared stores, and an agent step talking to the scripted model stub (``oracle dev llm-stub``).

The kinds the binary declares are read from the binary itself (``oracle log --kind`` lists
every kind of ``EventKind::ALL`` when given one that does not exist), and the generated logs
must hold each of them: a new kind the writer can produce fails this module until a scenario
makes it and the Python verifier has its rule.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _compare import binary_verdict, python_verdict
from conftest import FIXTURES
from oracle_client._verify import _SHAPES, KINDS
from test_fuzz import _records, _relink, damage, forge
from test_verify import assert_same

#: Kinds the writer cannot produce today, each with the reason. Empty: every kind of
#: ``EventKind::ALL`` comes out of a scenario below.
NOT_PRODUCED: dict[str, str] = {}

#: Blind and forged damage cases per generated log (seeded, so a failure names its case).
DAMAGE_PER_LOG = 12

#: Longest one command may take: a run here is a few fixture steps on loopback.
COMMAND_SECONDS = 120

#: Longest the model stub may take to start listening.
STUB_START_SECONDS = 30

PROPOSER = (
    "plan proposer version 1\n"
    "grant evolve:propose:self\n"
    'p = evolve.propose { source: "plan proposer version 2\\n'
    'x = text.count { text: \\"proposed\\" }\\n", reason: "count first" }\n'
)

BAD_PROPOSER = (
    "plan bad_proposer version 1\n"
    "grant evolve:propose:self\n"
    'p = evolve.propose { source: "plan broken version 1\\nx = nope {}", reason: "try" }\n'
    "  attempts 1\n"
    "  on failure continue\n"
)

TICK = 'plan tick version 1\n\ninput n: int = 1\n\ncount = text.count { text: "tick " + n }\n'

EFH = "external_first_hand"


class Home:
    """A sandbox like the Rust tests' ``Sandbox``: a copy of the fixture plans and data, the
    working directory (and so the ``.oracle`` home) of every command run in it."""

    def __init__(self, oracle_bin: Path, path: Path) -> None:
        self.bin = oracle_bin
        self.path = path
        for sub in ("data", "plans", "economy", "docs", "llm"):
            shutil.copytree(FIXTURES / sub, path / "fixtures" / sub)

    def write(self, rel: str, text: str) -> str:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return rel

    def oracle(self, *args: str, want: tuple[int, ...] = (0,)) -> str:
        """Runs ``oracle ARGS`` here; its stdout. An exit code not in ``want`` fails the test."""
        proc = subprocess.run(
            [str(self.bin), *args],
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode in want, f"oracle {' '.join(args)}: exit {proc.returncode}\n{proc}"
        return proc.stdout

    def json(self, *args: str, want: tuple[int, ...] = (0,)) -> Any:
        """A ``--json`` command's last stdout line, parsed."""
        lines = self.oracle(*args, "--json", want=want).strip().splitlines()
        return json.loads(lines[-1])

    def logs(self) -> list[Path]:
        return sorted(self.path.glob(".oracle/runs/*/events.jsonl"))


def _plain_runs(h: Home) -> None:
    """Fixture plans that need no model: steps, state, a denied capability, a failed expect."""
    for plan in ("quickstart", "diamond", "loops", "report"):
        h.oracle("run", f"fixtures/plans/{plan}.plan", want=(0, 1, 3))
    inputs = ("--input", "path=fixtures/data/invoice.txt", "--input", "min=1000000")
    h.oracle("run", "fixtures/plans/count-words.plan", *inputs, want=(1,))
    h.oracle("run", "fixtures/plans/denied.plan", want=(1,))


def _questions_forks_upgrades_cancel(h: Home) -> None:
    """Answers (``suspended``, ``resumed``), a fork with a value, a fork of a failed run with a
    fixed plan and an upgrade by ``resume --plan`` (``forked``, ``plan_upgraded``), a cancel."""
    escalation = "fixtures/plans/escalation.plan"
    run = h.json("run", escalation, want=(3,))["run"]
    total = '{"value":{"total":1250}}'
    h.oracle("resume", run, "--step", "total", "--value", total, want=(3,))
    h.oracle("resume", run, "--step", "confirm", "--value", '"approved"')
    fork = ("fork", run, "--step", "total", "--value", '{"value":{"total":1240}}', "--by", "ann")
    h.json(*fork, want=(0, 3))
    h.oracle("run", "fixtures/plans/fix-failed.plan", want=(1,))
    h.json(
        "fork", "notes-1", "--step", "stats", "--plan", "fixtures/plans/fix-fixed.plan", want=(0,)
    )
    source = (h.path / escalation).read_text()
    later = h.write("plans/later.plan", source.replace("Approve payment?", "Approve this one?"))
    upgraded = h.json("run", escalation, want=(3,))["run"]
    h.json("resume", upgraded, "--step", "total", "--value", total, "--plan", later, want=(3,))
    cancelled = h.json("run", escalation, want=(3,))["run"]
    h.json("cancel", cancelled, "--reason", "not needed")


def _recovery(h: Home) -> None:
    """A run damaged at event 6, recovered (``forked`` with ``reason`` and ``damaged``); then
    its log is put back as recorded, so every generated log verifies (the seeded-damage test
    damages each one anyway)."""
    run = h.json("run", "fixtures/plans/quickstart.plan")["run"]
    log = h.path / ".oracle" / "runs" / run / "events.jsonl"
    recorded = log.read_bytes()
    lines = recorded.split(b"\n")
    # Still JSON (the scenarios' logs are read as JSON lines), but not the event recorded.
    assert b'"seq":6,' in lines[6], lines[6]
    lines[6] = lines[6].replace(b'"seq":6,', b'"seq":7,', 1)
    log.write_bytes(b"\n".join(lines))
    h.json("recover", run, "--by", "ops")
    log.write_bytes(recorded)


def _timer_schedule_proposals(h: Home) -> None:
    """A sleep woken by hand (``timer_set``, ``timer_fired``), a schedule's trigger (a keyed
    run), and proposals: one that compiles (``patch_proposed``), one that does not
    (``tool_failed``)."""
    run = h.json("run", "fixtures/plans/reminder.plan", want=(3,))["run"]
    h.oracle("resume", run, "--wake")
    h.write("tick.plan", TICK)
    h.json("schedule", "add", "nightly", "tick.plan", "--cron", "0 6 * * *", "--input", "n=3")
    h.json("schedule", "trigger", "nightly")
    h.json("run", h.write("proposer.plan", PROPOSER))
    h.json("run", h.write("bad_proposer.plan", BAD_PROPOSER))


def _memory(h: Home) -> None:
    """A run's memory from outside: a verdict and a reinstatement on one run; a sweep of an
    expired request and an outside claim on another."""
    plan = "fixtures/plans/adjudication.plan"
    a = h.json("run", plan, want=(3,))["run"]
    verdict = ("--verdict", "deny", "--evidence", EFH)
    h.json("adjudicate", a, "adj-15", *verdict)
    line = h.json("memory", a, "--subject", "patient-17", "--predicate", "allergy")
    claim = next(c["id"] for c in line["claims"] if c["value"] == "none" and c["provenance"] == EFH)
    h.json("reinstate", a, claim[:12], "--evidence", EFH, "--resume")
    b = h.json("run", plan, "--adjudication-expiry", "10", want=(3,))["run"]
    h.json("sweep", b, "--now", "14")
    args = ("--subject", "patient-17", "--predicate", "allergy", "--provenance", EFH)
    h.json("claim", b, *args, "--value", '"none"')


def _shared_store(h: Home) -> None:
    """Two runs writing one shared belief store (``--memory NAME``)."""
    h.oracle("run", "fixtures/plans/allergy_assert.plan", "--memory", "alice")
    h.oracle("run", "fixtures/plans/allergy_contradict.plan", "--memory", "alice", want=(0, 3))


def _agent(h: Home) -> None:
    """An agent step whose model is the scripted stub: turns, tool calls, an answer."""
    url_file = h.path / "stub.url"
    script = h.path / "fixtures" / "llm" / "research.jsonl"
    stub = subprocess.Popen(
        [str(h.bin), "dev", "llm-stub", "--script", str(script), "--url-file", str(url_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + STUB_START_SECONDS
        while not url_file.exists():
            assert stub.poll() is None, "the model stub exited before listening"
            assert time.monotonic() < deadline, "the model stub did not start"
            time.sleep(0.05)
        url = url_file.read_text().strip()
        h.json("run", "fixtures/plans/research.plan", "--model", f"fast={url}")
    finally:
        stub.terminate()
        stub.wait(timeout=COMMAND_SECONDS)


SCENARIOS: list[Callable[[Home], None]] = [
    _plain_runs,
    _questions_forks_upgrades_cancel,
    _recovery,
    _timer_schedule_proposals,
    _memory,
    _shared_store,
    _agent,
]


@pytest.fixture(scope="module")
def generated(oracle_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every run log the scenarios leave in one home."""
    home = Home(oracle_bin, tmp_path_factory.mktemp("every-kind"))
    for scenario in SCENARIOS:
        scenario(home)
    logs = home.logs()
    assert len(logs) >= 20, logs
    return logs


def _kinds_of(log: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in log.read_bytes().splitlines()]


def declared_kinds(oracle_bin: Path) -> list[str]:
    """``EventKind::ALL``, as the binary lists it when asked for a kind that does not exist."""
    proc = subprocess.run(
        [str(oracle_bin), "log", "--kind", "no_such_kind", str(FIXTURES / "logs" / "denied.jsonl")],
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
    )
    assert proc.returncode == 2, proc
    found = re.search(r"known kinds: ([a-z_]+(?:, [a-z_]+)*)", proc.stderr)
    assert found, proc.stderr
    return found.group(1).split(", ")


def test_the_python_verifier_knows_every_kind_the_binary_declares(oracle_bin: Path) -> None:
    declared = declared_kinds(oracle_bin)
    assert len(declared) >= 20, declared
    assert sorted(KINDS) == sorted(declared)
    assert sorted(_SHAPES) == sorted(KINDS), "every kind has its payload rule"


def test_the_generated_logs_hold_every_kind_the_writer_can_produce(
    oracle_bin: Path, generated: list[Path]
) -> None:
    seen = {kind for log in generated for kind in _kinds_of(log)}
    declared = set(declared_kinds(oracle_bin))
    assert set(NOT_PRODUCED) <= declared, "a kind listed as not produced no longer exists"
    missing = declared - seen - set(NOT_PRODUCED)
    assert not missing, f"no scenario produces {sorted(missing)}: add one (or say why not)"
    produced_after_all = seen & set(NOT_PRODUCED)
    assert not produced_after_all, f"{sorted(produced_after_all)} are produced: unlist them"


def test_each_generated_log_gets_the_binarys_verdict(
    oracle_bin: Path, generated: list[Path]
) -> None:
    for log in generated:
        b = binary_verdict(oracle_bin, log)
        assert b["ok"], (log, b)
        assert_same(python_verdict(log), b)
        run_dir = log.parent
        assert_same(python_verdict(run_dir), b)


def test_seeded_damage_of_each_generated_log_gets_the_binarys_verdict(
    oracle_bin: Path, generated: list[Path], tmp_path: Path
) -> None:
    damaged = tmp_path / "events.jsonl"
    for n, log in enumerate(generated):
        data = log.read_bytes()
        for case in range(DAMAGE_PER_LOG):
            rng = random.Random(n * DAMAGE_PER_LOG + case)
            what, bad = (forge if case % 3 == 2 else damage)(rng, data)
            damaged.write_bytes(bad)
            p, b = python_verdict(damaged), binary_verdict(oracle_bin, damaged)
            try:
                assert_same(p, b)
            except AssertionError:
                where = f"{log.parent.name}, case {case} ({what})"
                raise AssertionError(f"{where}:\npython {p}\nbinary {b}") from None


def _payload_edits(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Edits of one payload that only its kind's shape rule can catch: an unknown field, each
    field missing, mistyped, null, and (for the strings and hashes) a bad hash."""
    edits: list[tuple[str, dict[str, Any]]] = [("unknown", {**payload, "zz_extra": 1})]
    for key in sorted(payload):
        rest = {k: v for k, v in payload.items() if k != key}
        value = payload[key]
        edits.append((f"missing {key}", rest))
        edits.append((f"null {key}", {**payload, key: None}))
        wrong: object = 7 if isinstance(value, str) else "x"
        edits.append((f"mistype {key}", {**payload, key: wrong}))
        if isinstance(value, int) and not isinstance(value, bool):
            edits.append((f"negative {key}", {**payload, key: -1}))
        if isinstance(value, str):
            for bad in ("ab" * 31, "AB" * 32, "é" + "a" * 62):
                edits.append((f"hash-like {key} {bad[:4]}", {**payload, key: bad}))
            # How serde reads an enum from a map: one key naming the variant, whose value
            # must be null for a unit variant (`run_finished.status`).
            for shape in ({value: None}, {value: 1}, {}, {value: None, "zz": None}):
                edits.append((f"map {key} {shape}", {**payload, key: shape}))
    return edits


def test_forged_payloads_of_every_kind_get_the_binarys_verdict(
    oracle_bin: Path, generated: list[Path], tmp_path: Path
) -> None:
    """One event of each kind, its payload edited and every hash recomputed after it: the
    verdict, and the reason, are the binary's."""
    first: dict[str, tuple[Path, int]] = {}
    for log in generated:
        for i, kind in enumerate(_kinds_of(log)):
            first.setdefault(kind, (log, i))
    assert set(first) == set(KINDS) - set(NOT_PRODUCED)
    damaged = tmp_path / "events.jsonl"
    for kind, (log, i) in sorted(first.items()):
        base = [json.loads(r) for r in _records(log.read_bytes())]
        for what, payload in _payload_edits(base[i]["payload"]):
            events = json.loads(json.dumps(base))
            events[i]["payload"] = payload
            damaged.write_bytes(_relink(events))
            p, b = python_verdict(damaged), binary_verdict(oracle_bin, damaged)
            try:
                assert_same(p, b)
            except AssertionError:
                where = f"{kind} (event {i} of {log.parent.name}), {what}"
                raise AssertionError(f"{where}:\npython {p}\nbinary {b}") from None
