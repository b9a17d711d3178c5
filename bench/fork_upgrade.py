"""Forking a long run and checking a plan upgrade of one (issue 37): the release `oracle` as
a child process, wall time around it and peak resident memory from `wait4`.

A chain plan of N steps (each `json.get` reads the one before it; four events a step) ends in
a question (`ask = human.ask`), then one more step. `oracle run` records it up to the question
and suspends. Then, each command on its own copy of that home:

- fork: `oracle fork chain-1 --step ask` (the fork point is the question's round, after every
  chain step): the prefix is copied byte for byte, `forked` appended, and the fork driven to the
  question again; `--value` as well, which answers it and finishes the fork.
- upgrade: `oracle resume chain-1 --plan V2 --step ask --value '"yes"'`, where V2 changes only the
  step after the question, so the new plan must re-derive every recorded event first; beside it
  the same resume without `--plan` (the re-derivation a resume does anyway), so the difference
  is the upgrade check's own cost.

    python3 bench/fork_upgrade.py --oracle target/release/oracle   # 1M and 100k events
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

# The id `oracle run` gives the first run of `plan chain`.
RUN = "chain-1"


def chain_plan(steps: int, version: int, loop: int = 0) -> str:
    """`steps` chained steps, then (with `loop`) a `for` over `loop` items (a plan holds at most
    200,000 steps and a loop 100,000 iterations, so a million events need both), then the
    question and one more step."""
    lines = [f"plan chain version {version}", ""]
    if loop:
        lines += [f"input items: list = [{', '.join(str(i) for i in range(loop))}]", ""]
    lines.append('s0 = json.get { value: "x", path: "" }')
    for i in range(1, steps):
        lines.append(f's{i} = json.get {{ value: s{i - 1}, path: "value" }}')
    last = f"s{steps - 1}"
    if loop:
        lines += [
            f"each = for x in items max {loop} {{",
            '  v = json.get { value: x, path: "" }',
            "}",
        ]
    lines.append(f'ask = human.ask {{ question: "go on? " + {last}.value }}')
    if loop:
        lines.append("  after each")
    # The only line the upgrade changes: after the question, so the prefix re-derives.
    value = "ask" if version == 1 else '"answered: " + ask.answer'
    lines.append(f'tail = json.get {{ value: {value}, path: "" }}')
    return "\n".join(lines) + "\n"


def timed(cmd: list[str], cwd: str) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MiB (this child's own, from `wait4`), and its stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        # 3: suspended on the question, as the run and a fork without a value end.
        if p.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err.read().decode()}")
        return wall, usage.ru_maxrss // 1024, out.read().decode()


def log_bytes(home: str, run: str) -> int:
    return os.path.getsize(os.path.join(home, ".oracle", "runs", run, "events.jsonl"))


def prepared(root: str, oracle: str, steps: int, loop: int, name: str) -> str:
    """A home holding one run of a `steps`-step chain (and a `loop`), suspended at its question."""
    home = os.path.join(root, name)
    os.makedirs(home)
    for v in (1, 2):
        with open(os.path.join(home, f"v{v}.plan"), "w") as f:
            f.write(chain_plan(steps, v, loop))
    wall, rss, out = timed([oracle, "run", "v1.plan", "--json"], home)
    events = json.loads(out)["events"]
    print(f"{name}: {events} events recorded in {wall:.2f} s (peak RSS {rss} MiB)")
    return home


def measure(label: str, cmd: list[str], home: str, repeat: int) -> None:
    """Runs `cmd` in `home` `repeat` times, putting the home back as it was after each (a run
    records the directory it works in, so the home is restored in place, not copied away)."""
    kept = home + ".kept"
    shutil.copytree(home, kept, symlinks=True)
    walls, rsss = [], []
    for _ in range(repeat):
        wall, rss, _ = timed(cmd, home)
        walls.append(wall)
        rsss.append(rss)
        shutil.rmtree(home)
        shutil.copytree(kept, home, symlinks=True)
    shutil.rmtree(kept)
    walls.sort()
    print(f"  {label}: {walls[0]:.2f}-{walls[-1]:.2f} s over {repeat}, peak RSS {max(rsss)} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default="target/release/oracle")
    ap.add_argument("--fork-steps", type=int, default=150_000)
    ap.add_argument("--fork-loop", type=int, default=100_000)
    ap.add_argument("--upgrade-steps", type=int, default=25_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    oracle = os.path.abspath(a.oracle)
    root = tempfile.mkdtemp(prefix="fork-bench-")
    try:
        big = prepared(root, oracle, a.fork_steps, a.fork_loop, "fork")
        print(f"  log bytes: {log_bytes(big, RUN)}")
        measure("fork --step ask", [oracle, "fork", RUN, "--step", "ask", "--json"], big, a.repeat)
        measure("fork --step ask --value", [oracle, "fork", RUN, "--step", "ask", "--value",
                                            '"yes"', "--json"], big, a.repeat)
        shutil.rmtree(big)
        small = prepared(root, oracle, a.upgrade_steps, 0, "upgrade")
        answer = ["--step", "ask", "--value", '"yes"', "--json"]
        measure("resume", [oracle, "resume", RUN, *answer], small, a.repeat)
        measure("resume --plan v2", [oracle, "resume", RUN, "--plan", "v2.plan", *answer], small,
                a.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
