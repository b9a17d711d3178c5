"""Bounded memory of `oracle run` (issue 42, item 4): peak resident set of the real binary on
plans of growing size, and the bytes of growth per event between two sizes.

Workloads (each in a fresh temporary home, deleted after):

- wide N: a plan of N independent `text.contains` steps (4 events a step, plus the first and
  last), as `oracle_cli/benches/curves.rs` runs it;
- for N: one `for` over a literal list of N items whose body is one `text.contains` step
  (N iterations, each a child agent of the body's plan).

Peak RSS is `wait4`'s `ru_maxrss` for the child. Growth per event is the difference of two
sizes' peaks over the difference of their event counts, so the fixed cost (process, binary,
allocator) drops out. Prints the machine (CPU model, SIMD flags), then one line per run and
the growth lines. Asserts exit codes only, never a time or a size.

    python3 bench/run_memory.py --oracle target/release/oracle
    python3 bench/run_memory.py --oracle target/debug/oracle --wide 2500,25000 --for 10000
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time

SIMD = ("sse4_1", "sse4_2", "avx", "avx2", "avx512f", "avx512vl", "sha_ni", "neon", "asimd")


def machine() -> str:
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model == "unknown CPU":
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    simd = " ".join(f for f in SIMD if f in flags) or "none listed"
    return f"machine: {model}; {os.cpu_count()} CPUs; SIMD: {simd}"


def wide_plan(n: int) -> str:
    lines = ["plan wide version 1", ""]
    lines += [f's{i} = text.contains {{ text: "ab", pattern: "a" }}' for i in range(1, n + 1)]
    return "\n".join(lines) + "\n"


def for_plan(n: int) -> str:
    items = ",".join(str(i) for i in range(n))
    return (
        f"plan loop version 1\neach = for x in [{items}] max {n} {{\n"
        '  c = text.contains { text: "ab", pattern: "a" }\n}\n'
    )


def run(oracle: str, plan_text: str) -> tuple[int, float, int]:
    """Events, seconds and peak RSS (KiB) of one `oracle run` of `plan_text`."""
    root = tempfile.mkdtemp(prefix="run-memory-")
    try:
        plan = os.path.join(root, "bench.plan")
        with open(plan, "w") as f:
            f.write(plan_text)
        t0 = time.monotonic()
        p = subprocess.Popen(
            [oracle, "run", plan, "--home", os.path.join(root, "home"), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = p.communicate()
        secs = time.monotonic() - t0
        rss = children_maxrss()
        if p.returncode != 0:
            raise SystemExit(f"oracle run exited {p.returncode}: {err.decode()[-2000:]}")
        report = json.loads(out)
        assert report["status"] == "completed", report
        return int(report["events"]), secs, rss
    finally:
        shutil.rmtree(root, ignore_errors=True)


def children_maxrss() -> int:
    """The peak RSS of the child just reaped: RUSAGE_CHILDREN's maximum is over all children
    so far, so each workload runs in its own Python process (see main)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def measure_one(oracle: str, kind: str, n: int) -> None:
    text = wide_plan(n) if kind == "wide" else for_plan(n)
    events, secs, rss = run(oracle, text)
    print(json.dumps({"kind": kind, "n": n, "events": events, "secs": secs, "rss_kib": rss}))


def sizes(s: str) -> list[int]:
    return [int(x.replace("_", "")) for x in s.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default="target/release/oracle")
    ap.add_argument("--wide", default="25000,200000", help="step counts of the wide plans")
    ap.add_argument("--for", dest="loop", default="10000,100000", help="iterations of the for")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    oracle = os.path.abspath(a.oracle)
    if a.one:
        measure_one(oracle, a.one[0], int(a.one[1]))
        return
    print(machine(), flush=True)
    for kind, ns in (("wide", sizes(a.wide)), ("for", sizes(a.loop))):
        rows = []
        for n in ns:
            # A process of its own per run: RUSAGE_CHILDREN's peak is over all children.
            out = subprocess.run(
                ["python3", __file__, "--oracle", oracle, "--one", kind, str(n)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            row = json.loads(out)
            rows.append(row)
            print(
                f"{kind} {n}: {row['events']} events, {row['secs']:.2f} s, "
                f"peak RSS {row['rss_kib'] / 1024:.1f} MiB",
                flush=True,
            )
        for lo, hi in zip(rows, rows[1:]):
            grown = (hi["rss_kib"] - lo["rss_kib"]) * 1024
            per = grown / max(1, hi["events"] - lo["events"])
            print(
                f"{kind} growth {lo['events']} -> {hi['events']} events: "
                f"{per:.0f} bytes an event",
                flush=True,
            )


if __name__ == "__main__":
    main()
