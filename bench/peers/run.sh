#!/usr/bin/env bash
# Peer comparison (issue 22, item 5): chains of trivial steps, every step durable before the
# next, in oracle, LangGraph (SqliteSaver) and DBOS Transact (PostgreSQL). Not part of the tests.
#
# Environment (all optional):
#   ORACLE_BIN  the oracle binary (default: target/release/oracle of this workspace, built if missing)
#   VENV        virtualenv for the Python peers (default /tmp/oracle-peers-venv; created from
#               requirements.txt if missing)
#   WORK        scratch directory (default: a new /tmp/oracle-peers.XXXXXX, removed at the end)
#   SIZES       chain lengths (default "1000 10000")
#   PEERS       which peers (default "langgraph dbos")
#   LG_CHAIN_MAX  largest N for LangGraph's N-distinct-node graph (default 1000: its checkpoints
#               grow with N, so 10,000 nodes write gigabytes; the loop shape runs every size)
#   OUT         results file, one JSON line per case (default /tmp/oracle-peers-results.jsonl)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
SIZES=${SIZES:-"1000 10000"}
PEERS=${PEERS:-"langgraph dbos"}
LG_CHAIN_MAX=${LG_CHAIN_MAX:-1000}
VENV=${VENV:-/tmp/oracle-peers-venv}
own_work=0
if [ -z "${WORK:-}" ]; then WORK=$(mktemp -d /tmp/oracle-peers.XXXXXX); own_work=1; fi
mkdir -p "$WORK"
chmod 755 "$WORK"  # the server (user postgres) must reach its cluster inside
OUT=${OUT:-/tmp/oracle-peers-results.jsonl}
: >"$OUT"

if [ -z "${ORACLE_BIN:-}" ]; then
  ORACLE_BIN=${CARGO_TARGET_DIR:-$root/target}/release/oracle
  [ -x "$ORACLE_BIN" ] || (cd "$root" && cargo build --release -p oracle_cli)
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$here/requirements.txt"
fi
py=$VENV/bin/python

pg=""
cleanup() {
  [ -n "$pg" ] && "$here/pg_cluster.sh" stop "$pg" || true
  [ $own_work = 1 ] && rm -rf "$WORK" || true
}
trap cleanup EXIT

echo "# $(date -u +%FT%TZ), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# oracle: $("$ORACLE_BIN" --version)" >&2

for n in $SIZES; do
  "$py" "$here/disk_probe.py" "$WORK" | tee -a "$OUT"
  for d in event effect; do
    echo "# oracle --durability $d, $n steps" >&2
    "$py" "$here/oracle_chain.py" "$n" "$WORK" "$d" "$ORACLE_BIN" | tee -a "$OUT"
    rm -rf "$WORK/oracle-$d-$n"
  done
  echo "# oracle, a Python code agent (oracle_agent), $n steps" >&2
  "$py" "$here/python_agent_chain.py" "$n" "$WORK" "$ORACLE_BIN" | tee -a "$OUT"
  rm -rf "$WORK/oracle-agent-$n"
  if [[ " $PEERS " == *" langgraph "* ]]; then
    echo "# langgraph loop, $n steps" >&2
    "$py" "$here/langgraph_chain.py" "$n" "$WORK" loop | tee -a "$OUT"
    if [ "$n" -le "$LG_CHAIN_MAX" ]; then
      echo "# langgraph chain of distinct nodes, $n steps" >&2
      "$py" "$here/langgraph_chain.py" "$n" "$WORK" chain | tee -a "$OUT"
    fi
    rm -f "$WORK"/langgraph-*
  fi
  if [[ " $PEERS " == *" dbos "* ]]; then
    if [ -z "$pg" ]; then
      pg=$WORK/pg
      url=$("$here/pg_cluster.sh" start "$pg")
    fi
    echo "# dbos, $n steps" >&2
    "$py" "$here/dbos_chain.py" "$n" "$url" | tee -a "$OUT"
  fi
done

"$py" "$here/disk_probe.py" "$WORK" | tee -a "$OUT"
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" "$here/report.py" "$OUT"
