"""Does live span export slow a run when the collector is unreachable (issue 41: by at most 5%)?

Times `oracle run` of a generated N-step plan (default 10,000 steps of `text.contains` in a
chain, each waiting on the previous: 4 events and 2 spans per step) without `--otlp` and with
`--otlp http://127.0.0.1:9` (a closed loopback port: every export is refused), alternating the
two ROUNDS times in one invocation, each run in a fresh home, and prints each time, the medians
and the ratio. Wall time of the whole command, as an operator sees it (the export's last
flush included), and the child's CPU time (user + system, every thread), which other work on
the machine disturbs less. It first prints the machine line: CPU model and SIMD flags.

    python3 bench/otlp_overhead.py --oracle target/debug/oracle
    python3 bench/otlp_overhead.py --oracle target/release/oracle --steps 10000 --rounds 7
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

UNREACHABLE = "http://127.0.0.1:9"


def plan_text(n: int) -> str:
    lines = ["plan bench version 1", ""]
    for i in range(1, n + 1):
        step = f's{i} = text.contains {{ text: "ab", pattern: "a" }}'
        if i > 1:
            step += f" when s{i - 1}.found"
        lines.append(step)
    return "\n".join(lines) + "\n"


def machine() -> str:
    """The CPU model and its SIMD flags, from /proc/cpuinfo (empty off Linux)."""
    model, flags = "unknown CPU", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                if key.strip() in ("flags", "Features") and not flags:
                    wanted = ("sse4_2", "avx", "avx2", "avx512f", "avx512vl", "asimd", "sve")
                    flags = [w for w in value.split() if w in wanted]
    except OSError:
        pass
    return f"machine: {model}, {os.cpu_count()} CPUs, SIMD {' '.join(flags) or 'unknown'}"


def cpu_of_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(oracle: str, plan: str, otlp: bool) -> tuple[float, float, str]:
    """Runs the plan in a fresh home; its wall time, CPU time and stderr."""
    root = tempfile.mkdtemp(prefix="oracle-otlp-bench-")
    try:
        shutil.copy(plan, os.path.join(root, "bench.plan"))
        args = [oracle, "run", "bench.plan", "--durability", "none"]
        if otlp:
            args += ["--otlp", UNREACHABLE]
        c0 = cpu_of_children()
        t0 = time.perf_counter()
        done = subprocess.run(args, check=False, cwd=root, capture_output=True, text=True)
        took = time.perf_counter() - t0
        cpu = cpu_of_children() - c0
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr}")
        return took, cpu, done.stderr.strip()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--oracle", default="target/debug/oracle")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    oracle = os.path.abspath(a.oracle)
    work = tempfile.mkdtemp(prefix="oracle-otlp-plan-")
    plan = os.path.join(work, "bench.plan")
    with open(plan, "w") as f:
        f.write(plan_text(a.steps))
    without, with_, cpu0, cpu1 = [], [], [], []
    warning = ""
    print(machine(), flush=True)
    try:
        one(oracle, plan, False)  # warm the page cache and the binary
        for r in range(a.rounds):
            t, c, _ = one(oracle, plan, False)
            without.append(t)
            cpu0.append(c)
            t, c, err = one(oracle, plan, True)
            with_.append(t)
            cpu1.append(c)
            warning = err.splitlines()[-1] if err else "(no warning)"
            print(f"round {r + 1}: without {without[-1]:.3f} s ({cpu0[-1]:.3f} s CPU), with --otlp (unreachable) {with_[-1]:.3f} s ({cpu1[-1]:.3f} s CPU)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for what, x, y in (("wall", without, with_), ("CPU", cpu0, cpu1)):
        m0, m1 = statistics.median(x), statistics.median(y)
        print(f"{a.steps} steps, {a.rounds} rounds, {what}: median without {m0:.3f} s, with {m1:.3f} s, ratio {m1 / m0:.3f} ({(m1 / m0 - 1) * 100:+.1f}%)")
    print(f"the --otlp run's last stderr line: {warning}")


if __name__ == "__main__":
    main()
