"""Print the results of run.sh (one JSON object per line) as a Markdown table."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
probes = [r for r in rows if r["framework"] == "disk_probe"]
rows = [r for r in rows if r["framework"] != "disk_probe"]


def name(r):
    if r["framework"] == "oracle-python-agent":
        return "oracle, Python code agent (default durability)"
    if r["framework"] == "oracle":
        return f"oracle `--durability {r['durability']}`"
    if r["framework"] == "langgraph":
        return f"LangGraph, {r['shape']} (SqliteSaver, `durability=\"{r.get('durability', 'sync')}\"`)"
    return "DBOS (PostgreSQL)"


def history(r):
    if r["framework"] == "oracle-python-agent":
        return (f"replay {r['replay_s']:.2f} s; verify {r['verify_s']:.2f} s ({r['events']} events); "
                f"round trip median {r['round_trip_median_us']} µs, p99 {r['round_trip_p99_us']} µs")
    if r["framework"] == "oracle":
        return (f"replay {r['replay_s']:.2f} s; verify {r['verify_s']:.2f} s; "
                f"log --json {r['log_s']:.2f} s ({r['events']} events)")
    if r["framework"] == "langgraph":
        if r["history_s"] is None:
            return "not read"
        return f"get_state_history {r['history_s']:.2f} s ({r['checkpoints']} checkpoints)"
    return f"list_workflow_steps {r['history_s']:.3f} s ({r['steps_read']} steps)"


print("| framework | steps | total s | steps/s | history read-back |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {name(r)} | {r['steps']:,} | {r['run_s']:.2f} | {r['steps_per_s']:,.0f} | {history(r)} |")
print()
print("disk probe (write + fdatasync of a 552-byte record, syncs/s): "
      + ", ".join(f"{p['syncs_per_s']:,.0f}" for p in probes))
