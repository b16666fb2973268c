#!/usr/bin/env bash
# Throw-away PostgreSQL 15 test server with pg_cron + pgvector, on a free loopback port.
# Two databases: memori_cron, where pg_cron lives (cron.database_name), and
# memori_mem, without pg_cron: the managed-service layout, where jobs for other
# databases are made with cron.schedule_in_database from the cron database.
#   server.sh start DIR   # initdb DIR/data if absent, start, print DSN (only stdout line)
#   server.sh stop DIR    # fast-stop the cluster in DIR/data
#   server.sh dsn DIR     # print DIR/dsn
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DB=memori_cron
OTHER_DB=memori_mem

die() { echo "server.sh: $1" >&2; exit "${2:-1}"; }
[[ $# -eq 2 && $1 =~ ^(start|stop|dsn)$ ]] || die "usage: $0 start|stop|dsn DIR" 2
cmd=$1
dir=$(realpath -m "$2")
data=$dir/data

# PostgreSQL refuses to run as root: as root, run the server as the `postgres` user.
if [[ $(id -u) == 0 ]]; then as_pg() { runuser -u postgres -- "$@"; }; else as_pg() { "$@"; }; fi

case $cmd in
dsn)
    cat "$dir/dsn"
    exit ;;
stop)
    if [[ -f $data/postmaster.pid ]] && (cd "$dir" && as_pg "$PGBIN/pg_ctl" -D "$data" status >/dev/null); then
        (cd "$dir" && as_pg "$PGBIN/pg_ctl" -D "$data" -m fast -w stop >&2)
    else
        echo "server.sh: no server running in $data" >&2
    fi
    exit ;;
esac

# ---- start ----
for f in "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/psql" "$PGBIN/../lib/pg_cron.so" \
         /usr/share/postgresql/15/extension/vector.control; do
    [[ -e $f ]] || die "missing $f: run scripts/pgcron/install-deps.sh (as root) first" 3
done

mkdir -p "$dir"
if [[ $(id -u) == 0 ]]; then
    chown postgres: "$dir"
    # The postgres user must be able to traverse every parent (e.g. 0700 pytest tmp dirs).
    p=$dir
    while [[ $p != / ]]; do
        p=$(dirname "$p")
        as_pg test -x "$p" || { echo "server.sh: chmod o+x $p" >&2; chmod o+x "$p"; }
    done
fi
cd "$dir"   # initdb/pg_ctl fail if run as postgres from a cwd it cannot read (e.g. /root)

if (as_pg "$PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1); then
    echo "server.sh: already running in $data" >&2
    cat "$dir/dsn"
    exit
fi

if [[ ! -f $data/PG_VERSION ]]; then
    as_pg "$PGBIN/initdb" -D "$data" -U postgres -E UTF8 --locale=C --auth=trust >&2
    cat >>"$data/postgresql.conf" <<CONF

# --- pymemdb test server (scripts/pgcron/server.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_cron'
cron.database_name = '$DB'
cron.use_background_workers = on
cron.timezone = 'UTC'  # no-op placeholder on pg_cron 1.4 (always GMT); real GUC from 1.5
max_worker_processes = 20
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    printf '%s\n' 'local all all trust' 'host all all 127.0.0.1/32 trust' >"$data/pg_hba.conf"
fi

# The port is passed on the command line, chosen fresh each start. A port freed by
# python may be grabbed by someone else before postgres binds it: retry a few times.
for attempt in 1 2 3; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if as_pg "$PGBIN/pg_ctl" -D "$data" -l "$dir/postgres.log" -o "-p $port" -w -t 60 start >&2; then
        break
    fi
    [[ $attempt == 3 ]] && die "server failed to start, see $dir/postgres.log"
done

psql() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
psql -d postgres -tAc "select 1 from pg_database where datname = '$DB'" | grep -q 1 ||
    psql -d postgres -c "create database $DB" >&2
psql -d "$DB" -c 'create extension if not exists pg_cron' -c 'create extension if not exists vector' >&2
psql -d postgres -tAc "select 1 from pg_database where datname = '$OTHER_DB'" | grep -q 1 ||
    psql -d postgres -c "create database $OTHER_DB" >&2
psql -d "$OTHER_DB" -c 'create extension if not exists vector' >&2

dsn="postgresql://postgres@127.0.0.1:$port/$DB"
echo "$dsn" >"$dir/dsn"
echo "$dsn"
