"""A chain of N trivial nodes in LangGraph, one durable SQLite checkpoint per step.

Usage: python langgraph_chain.py N WORKDIR [chain|loop] [--no-history] [--durability=sync|async]

chain: N distinct nodes s0 -> s1 -> ... (a checkpoint holds a version per channel, so it grows
       with the number of nodes already run); loop: one node and a conditional edge back to
       itself, taken N times (constant-size checkpoints). Both are one superstep, one
       checkpoint, per step.

Prints one JSON line: steps, run seconds, history read-back seconds, checkpoint count and
the SQLite settings actually in force (journal_mode, synchronous).
"""
import json
import operator
import os
import sqlite3
import sys
import time
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    # The same trivial work as oracle's step: count the words of "a " + previous count.
    words: int
    i: int


def make_node():
    def node(state: State) -> State:
        text = "a " + str(state["words"])
        return {"words": len(text.split()), "i": state["i"] + 1}

    return node


def build(n: int, saver: SqliteSaver):
    g = StateGraph(State)
    names = [f"s{i}" for i in range(n)]
    for name in names:
        g.add_node(name, make_node())
    g.add_edge(START, names[0])
    for a, b in zip(names, names[1:]):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g.compile(checkpointer=saver)


def build_loop(n: int, saver: SqliteSaver):
    g = StateGraph(State)
    g.add_node("step", make_node())
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["i"] < n else END, ["step", END])
    return g.compile(checkpointer=saver)


def main() -> None:
    n = int(sys.argv[1])
    workdir = sys.argv[2]
    shape = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else "chain"
    read_history = "--no-history" not in sys.argv
    # "sync" by default here (each checkpoint committed before the next step); LangGraph's own
    # default is "async" (written while the next step runs).
    durability = next(
        (a.split("=", 1)[1] for a in sys.argv if a.startswith("--durability=")), "sync"
    )
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"langgraph-{shape}-{n}.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)

    t0 = time.perf_counter()
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # PRAGMA journal_mode=WAL (LangGraph's own setup)
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]  # 2 = FULL
    graph = build(n, saver) if shape == "chain" else build_loop(n, saver)
    t_build = time.perf_counter() - t0

    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
    t1 = time.perf_counter()
    out = graph.invoke({"words": 0, "i": 0}, config, durability=durability)
    t_run = time.perf_counter() - t1
    assert out["words"] == 2 and out["i"] == n, out

    # Read back the whole history: every checkpoint, deserialised.
    t2 = time.perf_counter()
    history = 0
    if read_history:
        for snap in graph.get_state_history(config):
            history += 1
            _ = snap.values
    t_history = time.perf_counter() - t2 if read_history else None
    conn.close()

    print(json.dumps({
        "framework": "langgraph",
        "shape": shape,
        "durability": durability,
        "steps": n,
        "build_s": t_build,
        "run_s": t_run,
        "steps_per_s": n / t_run,
        "history_s": t_history,
        "checkpoints": history,
        "journal_mode": journal,
        "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(synchronous, synchronous),
        "db_bytes": sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s)),
    }))


if __name__ == "__main__":
    main()
