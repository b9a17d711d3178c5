#!/usr/bin/env python3
"""Runs started per second through `POST /api/v1/runs` on a file home (BENCHMARKS.md, "Starting
runs through the API"), and how long each start takes to answer.

A fresh home and a fresh `oracle serve --root ROOT` on 127.0.0.1 (ROOT is a scratch copy of
`fixtures/data` beside the plan). CLIENTS threads each send STARTS requests, one after another,
each with its own idempotency key; the plan is `fixtures/plans/quickstart.plan` (three steps,
16 events, completes). A start is answered once the run's first event is recorded, and the
run is then driven on a thread of the server; the script waits until every run has finished
(the home's runs all `completed`) and reports:

  - answered starts per second (201s over the wall time of the requests),
  - the median and 95th percentile time to the answer,
  - completed runs per second (until the last run finished),
  - then the same keys sent again: answers per second when every start finds its run (200).

Bounded: every request has a timeout, the wait for the runs to finish stops after WAIT_S_MAX,
the whole script is killed by SIGALRM after SCRIPT_S_MAX, and the server is stopped on the way
out, however the script ends.

    python3 bench/serve_start.py --oracle target/release/oracle [--clients 4 --starts 50]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SCRIPT_S_MAX = 900
WAIT_S_MAX = 600
REQUEST_TIMEOUT_S = 120


def post(url, token, body):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def get(url, token):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
        return json.load(r)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))]


def load(base, token, plan, clients, starts, tag):
    """CLIENTS threads, STARTS requests each: (statuses, latencies in seconds, wall seconds)."""
    statuses, latencies = [], []
    lock = threading.Lock()

    def client(c):
        for i in range(starts):
            t = time.monotonic()
            status, body = post(base + "/api/v1/runs", token, {"plan": plan, "key": f"{tag}-{c}-{i}"})
            dt = time.monotonic() - t
            if status not in (200, 201):
                print(f"client {c}: {status} {body}", file=sys.stderr)
            with lock:
                statuses.append(status)
                latencies.append(dt)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return statuses, latencies, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--starts", type=int, default=50, help="requests per client")
    a = ap.parse_args()
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("killed after SCRIPT_S_MAX"))
    signal.alarm(SCRIPT_S_MAX)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plan = open(os.path.join(repo, "fixtures/plans/quickstart.plan")).read()
    scratch = tempfile.mkdtemp(prefix="oracle-serve-start-")
    server = None
    try:
        root = os.path.join(scratch, "root")
        shutil.copytree(os.path.join(repo, "fixtures/data"), os.path.join(root, "fixtures/data"))
        home = os.path.join(scratch, "home")
        env = dict(os.environ, ORACLE_HOME=home)
        token = subprocess.run(
            [a.oracle, "serve", "token", "add", "bench"], env=env, check=True,
            capture_output=True, text=True,
        ).stdout.strip()
        server = subprocess.Popen(
            [a.oracle, "serve", "--listen", "127.0.0.1:0", "--root", root],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        base = server.stdout.readline().strip().removeprefix("listening ")
        statuses, lat, wall = load(base, token, plan, a.clients, a.starts, "k")
        n = len(statuses)
        created = statuses.count(201)
        t_done = time.monotonic()
        deadline = t_done + WAIT_S_MAX
        while time.monotonic() < deadline:
            runs = get(base + "/api/v1/runs?limit=1000", token)
            items = runs.get("runs", runs) if isinstance(runs, dict) else runs
            done = sum(1 for r in items if r.get("status") == "completed")
            if done >= created:
                break
            time.sleep(0.05)
        finished = time.monotonic() - t_done + wall
        again, lat2, wall2 = load(base, token, plan, a.clients, a.starts, "k")
        print(json.dumps({
            "clients": a.clients,
            "requests": n,
            "created": created,
            "starts_per_s": round(created / wall, 1),
            "answer_ms_p50": round(percentile(lat, 0.5) * 1000, 1),
            "answer_ms_p95": round(percentile(lat, 0.95) * 1000, 1),
            "completed_per_s": round(created / finished, 1),
            "existing_answers": again.count(200),
            "existing_per_s": round(len(again) / wall2, 1),
            "existing_ms_p50": round(percentile(lat2, 0.5) * 1000, 1),
        }, indent=2))
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
