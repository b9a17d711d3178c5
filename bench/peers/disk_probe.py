"""This disk's sync ceiling: N appends of a 552-byte record, each followed by fdatasync.

Usage: python disk_probe.py DIR [N]. Prints one JSON line (no framework code involved).
"""
import json
import os
import sys
import time

d, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3000
path = os.path.join(d, "disk-probe.bin")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
rec = b"x" * 551 + b"\n"
t = time.perf_counter()
for _ in range(n):
    os.write(fd, rec)
    os.fdatasync(fd)
dt = time.perf_counter() - t
os.close(fd)
os.remove(path)
print(json.dumps({"framework": "disk_probe", "syncs": n, "s": dt, "syncs_per_s": n / dt}))
