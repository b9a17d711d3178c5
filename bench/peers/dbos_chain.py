"""A workflow of N trivial @DBOS.step calls in DBOS Transact (Python), on PostgreSQL.

Usage: python dbos_chain.py N DATABASE_URL

Each step's output is committed to the system database (one transaction per step, the
`operation_outputs` row) before the next step starts; with PostgreSQL's defaults (fsync=on,
synchronous_commit=on) every commit waits for its WAL flush. Prints one JSON line.
"""
import json
import sys
import time
import uuid

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID

N = int(sys.argv[1])
URL = sys.argv[2]

DBOS(config={"name": "peers-bench", "system_database_url": URL, "log_level": "WARNING"})


@DBOS.step()
def count(words: int) -> int:
    # The same trivial work as oracle's step: count the words of "a " + previous count.
    return len(("a " + str(words)).split())


@DBOS.workflow()
def chain(n: int) -> int:
    words = 0
    for _ in range(n):
        words = count(words)
    return words


def main() -> None:
    t0 = time.perf_counter()
    DBOS.launch()
    t_launch = time.perf_counter() - t0

    wf = f"chain-{N}-{uuid.uuid4()}"
    t1 = time.perf_counter()
    with SetWorkflowID(wf):
        out = chain(N)
    t_run = time.perf_counter() - t1
    assert out == 2, out

    t2 = time.perf_counter()
    steps = DBOS.list_workflow_steps(wf)
    t_history = time.perf_counter() - t2
    assert len(steps) == N, len(steps)

    engine = sa.create_engine(URL)  # the settings in force on the server
    with engine.connect() as c:
        settings = {k: c.execute(sa.text(f"SHOW {k}")).scalar() for k in
                    ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes")}

    engine.dispose()
    DBOS.destroy()
    print(json.dumps({
        "framework": "dbos",
        "steps": N,
        "launch_s": t_launch,
        "run_s": t_run,
        "steps_per_s": N / t_run,
        "history_s": t_history,
        "steps_read": len(steps),
        "postgres": settings,
    }))


if __name__ == "__main__":
    main()
