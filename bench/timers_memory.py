"""The server's memory and CPU with N pending timers (issue 38): N entries in a home's timer
index (`timers/<due_ms>-<run>`, all due in 2100 so none fires), then `oracle serve` on that
home for 10 s; prints its resident memory (VmRSS, VmHWM) and the CPU its timer wheel takes.

    python3 bench/timers_memory.py --oracle target/debug/oracle 1000000
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

DUE_MS = 4_102_444_800_000  # 2100-01-01T00:00:00Z: never due while measured
MEASURE_S = 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default="target/debug/oracle")
    ap.add_argument("n", type=int)
    a = ap.parse_args()
    oracle = os.path.abspath(a.oracle)
    root = tempfile.mkdtemp(prefix="timers-bench-")
    try:
        timers = os.path.join(root, ".oracle", "timers")
        os.makedirs(timers)
        t0 = time.time()
        for i in range(a.n):
            open(os.path.join(timers, f"{DUE_MS + i:020}-bench-{i}"), "w").close()
        print(f"created {a.n} entries in {time.time() - t0:.1f} s", flush=True)
        p = subprocess.Popen(
            [oracle, "serve", "--listen", "127.0.0.1:0"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        print(p.stdout.readline().strip(), flush=True)
        tick = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = open(f"/proc/{p.pid}/stat").read().split(")")[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        time.sleep(2)
        c0, w0 = cpu(), time.time()
        time.sleep(MEASURE_S)
        c1, w1 = cpu(), time.time()
        status = open(f"/proc/{p.pid}/status").read().splitlines()
        mem = [line for line in status if line.startswith(("VmRSS", "VmHWM"))]
        share = 100 * (c1 - c0) / (w1 - w0)
        print(f"n={a.n} cpu {share:.1f}% of one core; " + "; ".join(mem), flush=True)
        p.terminate()
        p.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
