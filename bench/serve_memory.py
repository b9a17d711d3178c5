#!/usr/bin/env python3
"""Peak memory of `oracle serve` under two loads that used to make it follow the bytes it served
(BENCHMARKS.md, "Server memory under load"):

  (a) four clients at once page through a run of large events with `/events?limit=1000`,
      following `next` to the end of the run;
  (b) eight clients open `/events/stream?from=0` on that run and never read a byte.

The run is written by `oracle_serve/examples/big_log.rs` (EVENTS events of about BYTES bytes
each, in a temporary home that is removed afterwards). Each load gets a fresh server, listening
on 127.0.0.1 only. Its peak resident memory is read from /proc/PID/status (VmHWM), reset once
the server is ready by writing 5 to /proc/PID/clear_refs (Linux 4.0 and later), so each figure
is the peak of that load alone, not of the server's first look at the runs.

Bounded: every socket has a timeout, a load stops after LOAD_S_MAX seconds, the streams are
held at most SSE_HOLD_S_MAX, the whole script is killed by SIGALRM after SCRIPT_S_MAX, and every
server started is stopped on the way out, however the script ends.

    python3 bench/serve_memory.py --oracle target/debug/oracle \\
        --big-log target/debug/examples/big_log [--events 1000 --bytes 440000]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PAGE_CLIENTS = 4
SSE_CLIENTS = 8
LOAD_S_MAX = 300
SCRIPT_S_MAX = 1200
SOCKET_TIMEOUT_S = 120
# The streams are held until the peak has not grown for SSE_SETTLE_S, at most SSE_HOLD_S_MAX.
SSE_HOLD_S_MAX = 120
SSE_SETTLE_S = 10


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def http_get_tail(addr, path):
    """One GET on a fresh connection, read to its end without keeping it: (status, bytes of
    the response, its last 4 KiB)."""
    host, port = addr
    with socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S) as s:
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        first, tail, total = b"", b"", 0
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            if not first:
                first = b[:64]
            total += len(b)
            tail = (tail + b)[-4096:]
    return int(first.split()[1]), total, tail


def page_through(addr, run, deadline, out):
    """Pages through the whole run with limit=1000, following `next` (read from the end of
    each answer: its keys are sorted, so `next` comes after `events`)."""
    seq, pages, nbytes = 0, 0, 0
    while seq is not None and time.monotonic() < deadline:
        status, total, tail = http_get_tail(
            addr, f"/api/v1/runs/{run}/events?from={seq}&limit=1000"
        )
        if status != 200:
            raise RuntimeError(f"status {status}: {tail[-200:]!r}")
        m = re.search(rb'"next":(null|\d+)', tail)
        if m is None:
            raise RuntimeError(f"no next in {tail[-200:]!r}")
        pages += 1
        nbytes += total
        seq = None if m.group(1) == b"null" else int(m.group(1))
    out.append((pages, nbytes))


def stop(server):
    """SIGTERM, then SIGKILL if it has not exited within 20 s."""
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def start(oracle, home, servers):
    """A fresh `oracle serve --read-open` on 127.0.0.1, its peak reset once it is ready."""
    server = subprocess.Popen(
        [oracle, "--home", home, "serve", "--listen", "127.0.0.1:0", "--read-open"],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    servers.append(server)
    line = server.stdout.readline().decode().strip()
    if not line.startswith("listening http://"):
        raise RuntimeError(f"no listening line: {line!r}")
    host, port = line.removeprefix("listening http://").rsplit(":", 1)
    if host != "127.0.0.1":
        raise RuntimeError(f"not on loopback: {line}")
    pid = server.pid
    print(
        f"server ready: {status_kib(pid, 'VmRSS') / 1024:.0f} MiB resident, peak so far "
        f"{status_kib(pid, 'VmHWM') / 1024:.0f} MiB (its first look reads the log whole)"
    )
    reset_peak(pid)
    return server, (host, int(port))


def load_pages(oracle, home, servers):
    server, addr = start(oracle, home, servers)
    pid = server.pid
    base = status_kib(pid, "VmRSS")
    deadline = time.monotonic() + LOAD_S_MAX
    results = []
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=page_through, args=(addr, "big", deadline, results))
        for _ in range(PAGE_CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LOAD_S_MAX)
    took = time.monotonic() - t0
    if len(results) != PAGE_CLIENTS:
        raise RuntimeError(f"only {len(results)} of {PAGE_CLIENTS} clients finished")
    pages, nbytes = results[0]
    print(
        f"(a) {PAGE_CLIENTS} clients at once, /events?limit=1000 through the whole run: "
        f"{pages} pages, {nbytes / 1e6:.0f} MB each, {took:.1f} s; resident before "
        f"{base / 1024:.0f} MiB, peak {status_kib(pid, 'VmHWM') / 1024:.0f} MiB"
    )
    stop(server)


def load_streams(oracle, home, servers):
    server, addr = start(oracle, home, servers)
    pid = server.pid
    base = status_kib(pid, "VmRSS")
    socks = []
    try:
        for _ in range(SSE_CLIENTS):
            s = socket.create_connection(addr, timeout=SOCKET_TIMEOUT_S)
            s.sendall(
                f"GET /api/v1/runs/big/events/stream?from=0 HTTP/1.1\r\n"
                f"Host: {addr[0]}:{addr[1]}\r\n\r\n".encode()
            )
            socks.append(s)
        peak, grew, t0 = 0, time.monotonic(), time.monotonic()
        while (
            time.monotonic() - t0 < SSE_HOLD_S_MAX and time.monotonic() - grew < SSE_SETTLE_S
        ):
            now = status_kib(pid, "VmHWM")
            if now > peak:
                peak, grew = now, time.monotonic()
            time.sleep(0.5)
        print(
            f"(b) {SSE_CLIENTS} SSE clients that never read, held {time.monotonic() - t0:.0f} s: "
            f"resident before {base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, "
            f"at the end {status_kib(pid, 'VmRSS') / 1024:.0f} MiB"
        )
    finally:
        for s in socks:
            s.close()
    stop(server)


def on_alarm(_signum, _frame):
    # An exception, not the default action, so `finally` stops the servers.
    raise TimeoutError(f"the script ran past SCRIPT_S_MAX = {SCRIPT_S_MAX} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--big-log", required=True)
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--bytes", type=int, default=440_000)
    a = ap.parse_args()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SCRIPT_S_MAX)
    home = tempfile.mkdtemp(prefix="serve-memory-")
    servers = []
    try:
        subprocess.run(
            [a.big_log, home, "big", str(a.events), str(a.bytes)],
            check=True,
            timeout=LOAD_S_MAX,
        )
        log = os.path.join(home, "runs", "big", "events.jsonl")
        print(f"log: {a.events} events, {os.path.getsize(log) / 1e6:.0f} MB")
        load_pages(a.oracle, home, servers)
        load_streams(a.oracle, home, servers)
    finally:
        for server in servers:
            stop(server)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
