"""10,000 timers due in the same second fire within how long (issue 38): N runs of a plan that
sleeps until one instant D, suspended on the timer (see `create`), then
`oracle serve` on that home; prints how long after D the last wake ended (every run completed),
read from `<home>/serve-resume.log`, one line per wake, polled every 50 ms.

    python3 bench/timers_fire.py --oracle target/debug/oracle 10000

If creating the runs takes longer than `--due-in`, D is already past when the server starts
(the timers "came due while nothing ran"); then the time is counted from the server's start
and the script says so. `--keep DIR` keeps the home (and reuses it on the next call: its timers
are then past due, so that call measures a cold server waking them); `--create-only` makes
the runs and stops, e.g. to wake them with another binary.
"""

import argparse
import concurrent.futures
import datetime
import os
import shutil
import subprocess
import tempfile
import time

POLL_S = 0.05
CREATORS = 4  # `oracle run`s at once: each waits on the disk as much as on a core


def create(oracle: str, root: str, n: int, due_in: int) -> float:
    """Makes n runs sleeping until now + due_in seconds (whole seconds); returns D.

    Each is started with `oracle run` (it suspends on the timer and writes its entry in the
    timer index), CREATORS at a time. A copy of a run's directory is no shortcut: the home's
    key seals a run's bindings to its id, and a copy's wake is refused (`binding_unsealed`)."""
    due = int(time.time()) + due_in
    instant = datetime.datetime.fromtimestamp(due, datetime.timezone.utc)
    with open(os.path.join(root, "nap.plan"), "w") as f:
        f.write(f'plan nap version 1\n\nnap = sleep {{ until: "{instant:%Y-%m-%dT%H:%M:%SZ}" }}\n')
    t0 = time.time()

    def one(_: int) -> int:
        return subprocess.run(
            [oracle, "run", "nap.plan"], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode

    with concurrent.futures.ThreadPoolExecutor(CREATORS) as pool:
        codes = list(pool.map(one, range(n)))
    if any(c != 3 for c in codes):
        raise SystemExit(f"{sum(c != 3 for c in codes)} runs did not suspend (exit 3)")
    print(f"made {n} suspended runs in {time.time() - t0:.1f} s", flush=True)
    return float(due)


def wakes(log: str) -> int:
    try:
        with open(log) as f:
            return sum(1 for line in f if line.startswith("wake "))
    except FileNotFoundError:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default="target/debug/oracle")
    ap.add_argument("--due-in", type=int, default=900, help="seconds from now to the due instant")
    ap.add_argument("--keep", help="a directory to keep the home in (reused if it exists)")
    ap.add_argument("--create-only", action="store_true", help="make the runs in --keep, serve nothing")
    ap.add_argument("n", type=int)
    a = ap.parse_args()
    oracle = os.path.abspath(a.oracle)
    root = a.keep or tempfile.mkdtemp(prefix="timers-fire-")
    stamp = os.path.join(root, "due")
    try:
        if os.path.exists(stamp):
            due = float(open(stamp).read())
            print(f"reusing {root}: its {a.n} timers are due since {time.time() - due:.0f} s", flush=True)
        else:
            os.makedirs(root, exist_ok=True)
            due = create(oracle, root, a.n, a.due_in)
            open(stamp, "w").write(str(due))
        if a.create_only:
            return
        log = os.path.join(root, ".oracle", "serve-resume.log")
        if os.path.exists(log):
            os.remove(log)
        if time.time() < due:
            time.sleep(max(0.0, due - time.time() - 2))
        load = os.getloadavg()
        p = subprocess.Popen(
            [oracle, "serve", "--listen", "127.0.0.1:0"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        p.stdout.readline()
        started = time.time()
        origin, what = (due, "the due instant") if started < due else (started, "the server's start (due before it)")
        first = None
        while True:
            w = wakes(log)
            if w and first is None:
                first = time.time() - origin
            if w >= a.n:
                break
            if p.poll() is not None:
                print("the server exited", flush=True)
                break
            time.sleep(POLL_S)
        last = time.time() - origin
        p.terminate()
        p.wait()
        text = open(log).read()
        done = text.count(": completed")
        print(
            f"n={a.n} from {what}: first wake logged after {first:.2f} s, last after {last:.2f} s "
            f"({a.n / max(last - (first or 0), 1e-9):.0f} wakes/s); {done} completed; "
            f"load average at start {load[0]:.1f}",
            flush=True,
        )
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
