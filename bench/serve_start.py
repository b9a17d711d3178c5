#!/usr/bin/env python3
"""Runs started per second through `POST /api/v1/runs` on a file home or a PostgreSQL store
(BENCHMARKS.md, "Starting runs through the API"), how long each start takes to answer, and
(with --store) the latency from an answer posted to the server to the worker appending it.

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

With --store, a throwaway PostgreSQL cluster is started in the scratch directory (`initdb`
and `pg_ctl` from the distribution's packages, a Unix socket only, fsync on, as
`oracle_pg::cluster` does), `oracle store init`, WORKERS `oracle worker` processes and
`oracle serve --store`: a start is answered once it is submitted, and runs are completed by
the workers. Then SIGNALS runs of a plan that asks a person are submitted, each answered
through the server once suspended, one at a time; the time from the answer's request to the
run leaving `suspended` (the worker appended the `resumed` event, as the server's mirror sees
it, woken by the store's notification) is reported.

    python3 bench/serve_start.py --oracle target/release/oracle [--clients 4 --starts 50]
    python3 bench/serve_start.py --oracle target/release/oracle --store --workers 4
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
import glob
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


ASK = """plan ask version 1

a = text.count { text: "release notes" }
q = human.ask { question: "Ship?", schema: { type: "string" } }
  after a
b = text.count { text: "answered" }
  after q
"""


def pg_bin():
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isfile(os.path.join(d, "initdb")):
            return d
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        sys.exit("--store needs PostgreSQL's initdb and pg_ctl (apt-get install postgresql)")
    return os.path.dirname(found[-1])


def pg_cmd(tool, args):
    exe = os.path.join(pg_bin(), tool)
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", exe] + args
    return [exe] + args


def start_cluster(scratch):
    """A throwaway cluster in SCRATCH/pg (socket only); returns (url, data dir)."""
    base = os.path.join(scratch, "pg")
    os.makedirs(base)
    if os.geteuid() == 0:
        shutil.chown(scratch, "postgres", "postgres")
        shutil.chown(base, "postgres", "postgres")
    data = os.path.join(base, "data")
    subprocess.run(pg_cmd("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync",
                                     "-E", "UTF8", "--locale=C"]), check=True, capture_output=True)
    opts = f"-c listen_addresses='' -k {base} -p 5432 -c fsync=on -c max_connections=200 -c shared_buffers=64MB"
    subprocess.run(pg_cmd("pg_ctl", ["-D", data, "-l", os.path.join(base, "log"), "-o", opts, "-w", "start"]),
                   check=True, capture_output=True)
    return f"postgresql://postgres@localhost:5432/postgres?host={base}", data


def signal_latency(base, token, count):
    """COUNT runs asking a person, each answered through the server once suspended: seconds from
    the answer's request to the run leaving `suspended`."""
    out = []
    for i in range(count):
        status, body = post(base + "/api/v1/runs", token, {"plan": ASK, "key": f"ask-{i}"})
        run = body["run"]
        deadline = time.monotonic() + WAIT_S_MAX
        while get_quiet(base + f"/api/v1/runs/{run}", token).get("status") != "suspended":
            if time.monotonic() > deadline:
                sys.exit(f"run {run} never suspended")
            time.sleep(0.01)
        t = time.monotonic()
        status, body = post(base + f"/api/v1/runs/{run}/answer", token, {"step": "q", "value": "yes"})
        if status != 202:
            sys.exit(f"answer: {status} {body}")
        while get(base + f"/api/v1/runs/{run}", token).get("status") == "suspended":
            if time.monotonic() > deadline:
                sys.exit(f"run {run} was never resumed")
            time.sleep(0.002)
        out.append(time.monotonic() - t)
    return out


def get_quiet(url, token):
    try:
        return get(url, token)
    except urllib.error.HTTPError:
        return {}


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
    ap.add_argument("--store", action="store_true", help="serve a throwaway PostgreSQL store")
    ap.add_argument("--workers", type=int, default=1, help="`oracle worker` processes (--store)")
    ap.add_argument("--signals", type=int, default=50, help="answers timed one by one (--store)")
    a = ap.parse_args()
    a.oracle = os.path.abspath(a.oracle)
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("killed after SCRIPT_S_MAX"))
    signal.alarm(SCRIPT_S_MAX)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plan = open(os.path.join(repo, "fixtures/plans/quickstart.plan")).read()
    scratch = tempfile.mkdtemp(prefix="oracle-serve-start-")
    server, workers, data = None, [], None
    try:
        root = os.path.join(scratch, "root")
        shutil.copytree(os.path.join(repo, "fixtures/data"), os.path.join(root, "fixtures/data"))
        home = os.path.join(scratch, "home")
        env = dict(os.environ, ORACLE_HOME=home)
        token = subprocess.run(
            [a.oracle, "serve", "token", "add", "bench"], env=env, check=True,
            capture_output=True, text=True,
        ).stdout.strip()
        serve = [a.oracle, "serve", "--listen", "127.0.0.1:0", "--root", root]
        if a.store:
            url, data = start_cluster(scratch)
            subprocess.run([a.oracle, "store", "init", "--store", url], env=env, check=True,
                           capture_output=True)
            serve += ["--store", url]
            for _ in range(a.workers):
                workers.append(subprocess.Popen(
                    [a.oracle, "worker", "--store", url, "--poll-ms", "100"], env=env, cwd=root,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
        server = subprocess.Popen(
            serve, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        base = server.stdout.readline().strip().removeprefix("listening ")
        statuses, lat, wall = load(base, token, plan, a.clients, a.starts, "k")
        n = len(statuses)
        created = statuses.count(201)
        t_done = time.monotonic()
        deadline = t_done + WAIT_S_MAX
        while time.monotonic() < deadline:
            runs = get_quiet(base + "/api/v1/runs?limit=1000", token)
            items = runs.get("runs", runs) if isinstance(runs, dict) else runs
            done = sum(1 for r in items if r.get("status") == "completed")
            if done >= created:
                break
            time.sleep(0.05)
        finished = time.monotonic() - t_done + wall
        again, lat2, wall2 = load(base, token, plan, a.clients, a.starts, "k")
        signals = signal_latency(base, token, a.signals) if a.store else []
        print(json.dumps({
            "home": "store" if a.store else "file",
            "workers": a.workers if a.store else None,
            "signal_to_append_ms_p50": round(percentile(signals, 0.5) * 1000, 1) if signals else None,
            "signal_to_append_ms_p95": round(percentile(signals, 0.95) * 1000, 1) if signals else None,
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
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.kill()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        if data is not None:
            subprocess.run(pg_cmd("pg_ctl", ["-D", data, "-m", "immediate", "stop"]),
                           capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
