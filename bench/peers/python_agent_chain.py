"""A chain of N trivial steps as a Python code agent (docs/AGENTS.md): `oracle run agent.py`.

Usage: python python_agent_chain.py N WORKDIR ORACLE_BIN

The agent (written with `oracle_agent`, found through PYTHONPATH=sdk/python/src) makes N calls
`ctx.call("text.count", text="a " + previous count)`, each one decision the runtime gates,
executes and records, at the default durability. Each command is timed as a whole process.
The agent also times, inside itself, every round trip of the protocol: from the moment its reply
is written to stdin's next `decide` read, which is the runtime's cost of one decision over the
pipe (decode, gate, execute the built-in, record the events, encode the observation); the
median and 99th percentile are printed, with the SDK's own cost per call beside them.
Prints one JSON line.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AGENT = '''
import json, os, time
from oracle_agent import agent
from oracle_agent import _agent as sdk

# Round trips timed from the reply's write to the next `decide` read; calls timed whole.
trips, calls = [], []
_send, _receive = sdk._Channel.send, sdk._Channel.receive
_sent = [0]

def send(self, message):
    _send(self, message)
    _sent[0] = time.perf_counter_ns()

def receive(self, kind):
    got = _receive(self, kind)
    if _sent[0]:
        trips.append(time.perf_counter_ns() - _sent[0])
    return got

sdk._Channel.send, sdk._Channel.receive = send, receive

@agent(name="chain", version=1)
def chain(ctx, n: int = 1):
    words = 1
    for _ in range(n):
        t = time.perf_counter_ns()
        words = ctx.call("text.count", text="a " + str(words))["words"]
        calls.append(time.perf_counter_ns() - t)
    out = os.environ.get("CHAIN_TIMES")
    if out:
        with open(out, "w") as f:
            json.dump({"trips": trips, "calls": calls}, f)
    return {"words": words}

if __name__ == "__main__":
    chain.main()
'''


def timed(argv, cwd, env):
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return dt, p.stdout


def micros(ns):
    return round(ns / 1000, 1)


def main() -> None:
    n = int(sys.argv[1])
    workdir = os.path.abspath(sys.argv[2])
    oracle = sys.argv[3]
    base = os.path.join(workdir, f"oracle-agent-{n}")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    Path(base, "agent.py").write_text(AGENT)
    home = os.path.join(base, "home")
    times = os.path.join(workdir, f"agent-times-{n}.json")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "sdk/python/src"), CHAIN_TIMES=times)

    t_run, out = timed([oracle, "run", "agent.py", "--home", home, "--input", f"n={n}", "--json"],
                       base, env)
    run_id = json.loads(out)["run"]
    seen = json.loads(Path(times).read_text())
    os.remove(times)
    log = os.path.join(home, "runs", run_id, "events.jsonl")
    events = sum(1 for _ in open(log, "rb"))
    env.pop("CHAIN_TIMES")
    t_replay, _ = timed([oracle, "replay", run_id, "--home", home], base, env)
    t_verify, _ = timed([oracle, "verify", log], base, env)
    trips, calls = seen["trips"], seen["calls"]
    sdk = [c - t for c, t in zip(calls, trips[1:])]
    print(json.dumps({
        "framework": "oracle-python-agent",
        "steps": n,
        "events": events,
        "run_s": round(t_run, 3),
        "steps_per_s": round(n / t_run),
        "round_trip_median_us": micros(statistics.median(trips)),
        "round_trip_p99_us": micros(sorted(trips)[int(len(trips) * 0.99)]),
        "sdk_per_call_median_us": micros(statistics.median(sdk)) if sdk else None,
        "replay_s": round(t_replay, 3),
        "verify_s": round(t_verify, 3),
    }))


if __name__ == "__main__":
    main()
