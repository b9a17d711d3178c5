#!/usr/bin/env python3
"""End to end at engine speed (issue 42, item 3; BENCHMARKS.md, "End to end at engine speed"):
`oracle run` of a chain of N trivial steps as a child process, beside the engine loop inside
that same process and the process floor, in one run.

The plan is the engine bench's `chain` shape (`oracle_runtime/benches/engine.rs`,
`run/chain/*`): N steps of `text.contains { text: "ab", pattern: "a" }`, each `when` the
previous one's `found`, so one call per decision and 4 events a step (4N + 2 in all). For each
N (default 10k and 100k), REPEAT times, in a fresh file home, default durability:

  - process: wall time of `oracle --home H run PLAN` (stdout and stderr to /dev/null), and its
    CPU time (user + sys) and peak resident set from `wait4`, which other builders' load on
    the machine changes far less than the wall time;
  - engine: the span from the first to the last event of that run by the run's own times file
    (`events.jsonl.times`, one wall-clock millisecond per event): the engine loop inside the
    process, recording included; the rest of the wall time is start (arguments, home, plan
    compile, registry) and finish (close, index, summary, exit);
  - floor: `oracle --version`, the cost of starting and ending the process at all.

With --callgrind, the first size is also run once under `valgrind --tool=callgrind` and the
instructions of the whole process are printed beside those of the engine loop inside it
(`Engine::drive`, inclusive; the binary needs its symbols): a count that the load other
builders put on the machine does not change.

With --criterion, the engine-only rate of the existing criterion bench (`cargo bench -p
oracle_runtime --bench engine -- run/chain`, the engine driving a compiled plan into a new
log, nothing else) is run first and printed beside it (it builds that bench in release: minutes).

The first line printed is the machine line (`oracle dev machine`: CPU model, SIMD features,
cores). Asserts exit codes and event counts only, never a time.

    python3 bench/e2e_chain.py --oracle target/release/oracle [--sizes 10000,100000 --repeat 5]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ENTRY_BYTES = 16  # one times-file entry: seq and unix ms, little-endian u64s
SCRIPT_S_MAX = 1800


def plan_text(n):
    """The engine bench's chain of n steps, byte for byte."""
    lines = ["plan bench version 1\n\n"]
    for i in range(1, n + 1):
        s = f's{i} = text.contains {{ text: "ab", pattern: "a" }}'
        lines.append(s + (f" when s{i - 1}.found\n" if i > 1 else "\n"))
    return "".join(lines)


def timed(argv):
    """Runs argv; (wall seconds, cpu seconds, peak RSS MiB). Fails on a non-zero exit."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(argv)}: exit {code}: {p.stderr.read().decode(errors='replace')}")
    p.stderr.close()
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def engine_span(home):
    """(events, seconds from the first event's time to the last's) of the home's one run."""
    runs = os.path.join(home, "runs")
    (run,) = [d for d in os.listdir(runs) if os.path.isdir(os.path.join(runs, d))]
    with open(os.path.join(runs, run, "events.jsonl.times"), "rb") as f:
        data = f.read()
    n = len(data) // ENTRY_BYTES
    ms = [int.from_bytes(data[i * ENTRY_BYTES + 8 : (i + 1) * ENTRY_BYTES], "little") for i in (0, n - 1)]
    return n, (ms[1] - ms[0]) / 1000.0


def machine_line(oracle):
    out = subprocess.run([oracle, "dev", "machine"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def criterion_rates(sizes):
    """steps/s (middle estimate) of `run/chain/N` from the engine bench, by N."""
    out = subprocess.run(
        ["cargo", "bench", "-p", "oracle_runtime", "--bench", "engine", "--", "run/chain"],
        capture_output=True, text=True, check=True,
    ).stdout
    rates = {}
    for m in re.finditer(r"run/chain/(\d+)\s+time:.*?\n\s+thrpt:\s+\[\S+ \S+ (\S+) (\S+)", out, re.S):
        value, unit = float(m.group(2)), m.group(3)
        scale = {"elem/s": 1, "Kelem/s": 1e3, "Melem/s": 1e6}[unit]
        rates[int(m.group(1))] = value * scale
    return {n: rates.get(n) for n in sizes}


def callgrind(oracle, n, scratch):
    """(instructions of the process, instructions in `Engine::drive`) of one run of chain n."""
    plan = os.path.join(scratch, f"chain{n}.plan")
    home = tempfile.mkdtemp(dir=scratch)
    out = os.path.join(scratch, "callgrind.out")
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", oracle, "--home", home, "run", plan],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
        capture_output=True, text=True, check=True,
    ).stdout
    total = re.search(r"^\s*([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", text, re.M)
    drive = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*engine\.rs:oracle_runtime::engine::Engine<A>::drive \[", text, re.M)
    shutil.rmtree(home)
    num = lambda m: int(m.group(1).replace(",", "")) if m else None
    return num(total), num(drive)


def measure(oracle, n, repeat, scratch):
    plan = os.path.join(scratch, f"chain{n}.plan")
    with open(plan, "w") as f:
        f.write(plan_text(n))
    rows = []
    for _ in range(repeat):
        home = tempfile.mkdtemp(dir=scratch)
        wall, cpu, rss = timed([oracle, "--home", home, "run", plan])
        events, span = engine_span(home)
        if events != 4 * n + 2:
            sys.exit(f"chain {n}: {events} times entries, expected {4 * n + 2}")
        rows.append((wall, cpu, span, rss))
        shutil.rmtree(home)
    return rows


def report(n, rows, floor, engine_rate):
    wall = statistics.median(r[0] for r in rows)
    cpu = statistics.median(r[1] for r in rows)
    span = statistics.median(r[2] for r in rows)
    rss = max(r[3] for r in rows)
    best = min(r[0] for r in rows)
    print(f"chain {n}: process wall median {wall:.3f} s (best {best:.3f}), cpu {cpu:.3f} s, "
          f"peak RSS {rss:.0f} MiB; {n / wall:,.0f} steps/s end to end ({n / cpu:,.0f}/s of cpu)")
    print(f"  engine loop in the process (times file): {span:.3f} s, {n / max(span, 1e-3):,.0f} steps/s; "
          f"outside it: {wall - span:.3f} s (floor {floor[0]:.3f} s wall, {floor[1]:.3f} s cpu)")
    if engine_rate:
        print(f"  engine only (criterion run/chain/{n}): {engine_rate:,.0f} steps/s; "
              f"end to end is {engine_rate / (n / wall):.2f}x slower")
    print(f"  end to end vs the engine loop in the process: {wall / max(span, 1e-3):.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default="target/release/oracle")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--criterion", action="store_true")
    ap.add_argument("--callgrind", action="store_true")
    a = ap.parse_args()
    signal_alarm()
    sizes = [int(s) for s in a.sizes.split(",")]
    print(machine_line(a.oracle))
    rates = criterion_rates(sizes) if a.criterion else {n: None for n in sizes}
    with tempfile.TemporaryDirectory() as scratch:
        floors = [timed([a.oracle, "--version"])[:2] for _ in range(max(a.repeat, 5))]
        floor = (statistics.median(f[0] for f in floors), statistics.median(f[1] for f in floors))
        print(f"floor (`oracle --version`): {floor[0]:.4f} s wall, {floor[1]:.4f} s cpu (median)")
        for n in sizes:
            report(n, measure(a.oracle, n, a.repeat, scratch), floor, rates[n])
        if a.callgrind:
            total, drive = callgrind(a.oracle, sizes[0], scratch)
            ratio = f"{total / drive:.2f}x" if total and drive else "unknown"
            print(f"chain {sizes[0]} under callgrind: {total:,} instructions in the process, "
                  f"{drive or 0:,} in the engine loop (Engine::drive): {ratio}")


def signal_alarm():
    """The whole script ends after SCRIPT_S_MAX, however stuck a child is."""
    import signal

    signal.alarm(SCRIPT_S_MAX)


if __name__ == "__main__":
    main()
