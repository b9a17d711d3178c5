#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL cluster on a Unix socket in a temp dir (no TCP).
# Usage: pg_cluster.sh start DIR   -> prints the SQLAlchemy URL for DBOS
#        pg_cluster.sh stop DIR
# PostgreSQL's defaults are kept: fsync=on, synchronous_commit=on, wal_sync_method=fdatasync.
set -euo pipefail
cmd=$1 dir=$2
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
start)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust >"$dir/initdb.log" 2>&1
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-c listen_addresses='' -k $dir -c shared_buffers=64MB" start >/dev/null
  echo "postgresql+psycopg://postgres@/dbos_peers?host=$dir"
  ;;
stop)
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  rm -rf "$dir"
  ;;
esac
