"""A chain of N trivial pure steps in oracle: `oracle run`, then read the history back.

Usage: python oracle_chain.py N WORKDIR DURABILITY [ORACLE_BIN]

Read-back: `oracle replay` (re-executes every step against the log, checks every event and
state hash), `oracle verify` (checks the hash chain), `oracle log --json` (prints every event).

Step i counts the words of "a " + the previous step's count (`text.count`, a pure built-in),
so every step waits on the one before. The plan is generated; N up to `steps_max` (200,000)
needs no loop. Each command is timed as a whole process (start, plan compile, run, exit).
Prints one JSON line.
"""
import json
import os
import shutil
import subprocess
import sys
import time


def plan_text(n: int) -> str:
    lines = [f"plan chain{n} version 1", "", 's0 = text.count { text: "a" }']
    for i in range(1, n):
        lines.append(f's{i} = text.count {{ text: "a " + s{i - 1}.words }}')
    return "\n".join(lines) + "\n"


def timed(argv, cwd):
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return dt, p.stdout


def main() -> None:
    n = int(sys.argv[1])
    workdir = os.path.abspath(sys.argv[2])
    durability = sys.argv[3]
    oracle = sys.argv[4] if len(sys.argv) > 4 else os.environ.get("ORACLE_BIN", "oracle")
    base = os.path.join(workdir, f"oracle-{durability}-{n}")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    plan = os.path.join(base, "chain.plan")
    with open(plan, "w") as f:
        f.write(plan_text(n))
    home = os.path.join(base, "home")

    t_check, _ = timed([oracle, "plan", "check", plan], base)
    t_run, _ = timed([oracle, "run", plan, "--home", home, "--durability", durability], base)
    run_id = f"chain{n}-1"
    log = os.path.join(home, "runs", run_id, "events.jsonl")
    events = sum(1 for _ in open(log, "rb"))
    t_replay, _ = timed([oracle, "replay", run_id, "--home", home], base)
    t_verify, _ = timed([oracle, "verify", log], base)
    t_log, out = timed([oracle, "log", run_id, "--home", home, "--json"], base)
    assert out.count("\n") == events

    print(json.dumps({
        "framework": "oracle",
        "durability": durability,
        "steps": n,
        "check_s": t_check,
        "run_s": t_run,
        "steps_per_s": n / t_run,
        "replay_s": t_replay,
        "verify_s": t_verify,
        "log_s": t_log,
        "events": events,
        "log_bytes": os.path.getsize(log),
    }))


if __name__ == "__main__":
    main()
