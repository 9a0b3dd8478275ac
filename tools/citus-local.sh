#!/usr/bin/env bash
# citus-local.sh -- a local Citus cluster (1 coordinator + 2 workers on localhost, no Docker) on the
# system PostgreSQL 15, to try dpsql in front of Citus and to run the opt-in Citus test tier
# (docs/deploy.md, "Citus"; tests/citus).
#
# Citus itself comes from one of:
#   * Citus's own packages (https://docs.citusdata.com/, "Install"; e.g. postgresql-15-citus-13.2
#     from Citus's package repository): if PostgreSQL already has citus.so, nothing is built;
#   * its source, built here: download the release tarball yourself, e.g.
#       https://github.com/citusdata/citus/archive/refs/tags/v13.2.2.tar.gz
#     and run with CITUS_TARBALL=/path/to/citus-13.2.2.tar.gz (about 65 s of CPU on 2 cores).
#     The 13.2.2 tarball dpsql was tested with has sha256
#     c8fc76dc8294636a52b1a0dd75a20d8b4a36937df6443e30ca84d8d0464a6bb9 (printed when building).
#
# Usage:
#   citus-local.sh start [COORD_PORT [WORKER1_PORT [WORKER2_PORT]]]   build if needed, start, print DSN
#   citus-local.sh stop                                             stop the three nodes
#   citus-local.sh status                                           pg_ctl status + active workers
#   citus-local.sh dsn                                              print the coordinator DSN
#   citus-local.sh build                                            only build + install Citus
#   citus-local.sh destroy                                          stop and delete the data dirs
#
# Environment (all optional):
#   PG_BIN            PostgreSQL bin dir           (default /usr/lib/postgresql/15/bin)
#   CITUS_CACHE_DIR   build cache (source + objs)  (default ${TMPDIR:-/tmp}/citus-local-cache)
#   CITUS_DATA_DIR    data dirs of the 3 nodes     (default ${TMPDIR:-/tmp}/citus-local-data)
#   CITUS_TARBALL     Citus source tarball         (needed only when citus.so is not installed)
#   CITUS_PORTS       "COORD W1 W2"                (default: last start's, else "59432 59433 59434"; args win)
#   CITUS_DB          database to create/use       (default citus)
#   CITUS_OS_USER     OS user running postgres when invoked as root (default postgres)
#   CITUS_JOBS        make -j                       (default 2)
#   CITUS_MAKE_ARGS   extra make arguments          (default "with_llvm=no COPT=-g0": no LLVM
#                     bitcode, which only PostgreSQL's JIT inlining reads, and no debug info;
#                     half the build's CPU: 130 s -> 63 s. CITUS_MAKE_ARGS= builds as upstream does)
#   CITUS_FORCE_BUILD=1 rebuild from CITUS_TARBALL even if citus.so is installed
#   CITUS_PG_OPTIONS  server options for `start`    (default none; e.g. .ci/citus, a throwaway
#                     cluster: "-c fsync=off -c citus.shard_count=4")
#
# Install note: PostgreSQL 15 only loads extensions from its own sharedir/pkglibdir, so
# `make install` writes into /usr/lib/postgresql/15/lib and /usr/share/postgresql/15/extension
# (needs root, or write access there). The build itself stays in CITUS_CACHE_DIR.
#
# Build dependencies (Debian 12; what a traced build opened, .ci/install-system installs them):
#   apt-get update && apt-get install -y build-essential postgresql-server-dev-15 libpq-dev
#   libssl-dev libkrb5-dev libicu-dev libcurl4-openssl-dev liblz4-dev libzstd-dev
# Caveat: postgresql-server-dev-15 must match the installed server's version (apt-cache policy
# postgresql-15; e.g. apt-get install postgresql-server-dev-15=15.18-0+deb12u1): a newer one
# upgrades the postgresql-15 package itself, and a server started before the upgrade then fails to
# load plpgsql ("undefined symbol"): restart it.
#
# Patch applied: Debian PostgreSQL >= 15.1x exports have_createdb_privilege() (backport), which
# Citus 13.2.2 re-defines as a static inline for PG15 -> "static declaration follows non-static".
# If the server header declares it, the Citus copy is removed before building.
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=${PG_CONFIG:-$PG_BIN/pg_config}
TMPBASE=${TMPDIR:-/tmp}
CITUS_CACHE_DIR=${CITUS_CACHE_DIR:-$TMPBASE/citus-local-cache}
CITUS_DATA_DIR=${CITUS_DATA_DIR:-$TMPBASE/citus-local-data}
CITUS_TARBALL=${CITUS_TARBALL:-}
CITUS_DB=${CITUS_DB:-citus}
CITUS_OS_USER=${CITUS_OS_USER:-postgres}
CITUS_JOBS=${CITUS_JOBS:-2}
CITUS_PG_OPTIONS=${CITUS_PG_OPTIONS:-}
read -r -a MAKE_ARGS <<<"${CITUS_MAKE_ARGS-with_llvm=no COPT=-g0}"
NODES=(coord worker1 worker2)
# Ports: CITUS_PORTS, else those of the last `start` on this data dir, else the defaults.
if [ -z "${CITUS_PORTS:-}" ] && [ -f "$CITUS_DATA_DIR/ports" ]; then CITUS_PORTS=$(cat "$CITUS_DATA_DIR/ports"); fi
read -r -a PORTS <<<"${CITUS_PORTS:-59432 59433 59434}"

log() { printf '[citus-local] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Run a PostgreSQL binary as the OS user (initdb/postgres refuse to run as root).
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$CITUS_OS_USER" -- "$@"; else "$@"; fi
}
db_user() { if [ "$(id -u)" = 0 ]; then echo "$CITUS_OS_USER"; else id -un; fi; }
psql_on() { # port db sql...
  local port=$1 db=$2; shift 2
  PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$(db_user)" -d "$db" -Atc "$*"
}

build() {
  [ -x "$PG_CONFIG" ] || die "pg_config not found at $PG_CONFIG (apt-get install postgresql-server-dev-15)"
  local stamp="$CITUS_CACHE_DIR/.built-and-installed"
  local pkglib; pkglib=$("$PG_CONFIG" --pkglibdir)
  if [ -z "${CITUS_FORCE_BUILD:-}" ] && [ -f "$pkglib/citus.so" ]; then
    log "citus is installed ($pkglib/citus.so)"; return 0
  fi
  if [ -z "${CITUS_FORCE_BUILD:-}" ] && [ -f "$stamp" ] && [ -d "$(cat "$stamp")" ]; then
    log "cached build found, citus.so missing in $pkglib: make install"
    make -C "$(cat "$stamp")" install "${MAKE_ARGS[@]}" >"$CITUS_CACHE_DIR/install.log" 2>&1
    return 0
  fi
  [ -n "$CITUS_TARBALL" ] || die "Citus is not installed for $("$PG_CONFIG" --version): install Citus's \
package for PostgreSQL 15 (https://docs.citusdata.com/), or download its source tarball \
(https://github.com/citusdata/citus/archive/refs/tags/v13.2.2.tar.gz) and set CITUS_TARBALL=/path/to/it"
  [ -f "$CITUS_TARBALL" ] || die "Citus source tarball not found: $CITUS_TARBALL"
  log "building from $CITUS_TARBALL (sha256 $(sha256sum "$CITUS_TARBALL" | cut -d' ' -f1))"
  local t0=$SECONDS
  mkdir -p "$CITUS_CACHE_DIR"
  rm -rf "$CITUS_CACHE_DIR/src"; mkdir -p "$CITUS_CACHE_DIR/src"
  tar -xzf "$CITUS_TARBALL" -C "$CITUS_CACHE_DIR/src"
  local srcdir; srcdir=$(find "$CITUS_CACHE_DIR/src" -mindepth 1 -maxdepth 1 -type d | head -1)
  local inc; inc=$("$PG_CONFIG" --includedir-server)
  if grep -q 'have_createdb_privilege' "$inc/commands/dbcommands.h" 2>/dev/null \
     && grep -q '^have_createdb_privilege(void)' "$srcdir/src/include/pg_version_compat.h"; then
    log "patching pg_version_compat.h (server already exports have_createdb_privilege)"
    perl -0pi -e 's/\nstatic inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n/\n/s' \
      "$srcdir/src/include/pg_version_compat.h"
  fi
  log "configure + make -j$CITUS_JOBS in $srcdir (logs in $CITUS_CACHE_DIR)"
  (cd "$srcdir" && ./configure PG_CONFIG="$PG_CONFIG" >"$CITUS_CACHE_DIR/configure.log" 2>&1) \
    || { tail -n 30 "$CITUS_CACHE_DIR/configure.log" >&2; false; } || die "configure failed: see $CITUS_CACHE_DIR/configure.log (build deps: see this script's header)"
  make -C "$srcdir" -j"$CITUS_JOBS" "${MAKE_ARGS[@]}" >"$CITUS_CACHE_DIR/make.log" 2>&1 \
    || { tail -n 30 "$CITUS_CACHE_DIR/make.log" >&2; die "make failed: see $CITUS_CACHE_DIR/make.log"; }
  make -C "$srcdir" install "${MAKE_ARGS[@]}" >"$CITUS_CACHE_DIR/install.log" 2>&1 \
    || { tail -n 30 "$CITUS_CACHE_DIR/install.log" >&2
         die "make install failed (needs write access to $pkglib): see $CITUS_CACHE_DIR/install.log"; }
  echo "$srcdir" >"$stamp"
  log "built and installed citus in $((SECONDS - t0)) s"
}

node_dir() { echo "$CITUS_DATA_DIR/$1"; }

init_node() { # name port
  local d; d=$(node_dir "$1")
  if [ ! -f "$d/PG_VERSION" ]; then
    mkdir -p "$d"; chmod 700 "$d"
    [ "$(id -u)" = 0 ] && chown "$CITUS_OS_USER" "$CITUS_DATA_DIR" "$d"
    as_pg "$PG_BIN/initdb" -D "$d" -U "$(db_user)" --auth=trust -E UTF8 --locale=C.UTF-8 >"$d.initdb.log" 2>&1 \
      || die "initdb failed: $d.initdb.log"
    cat >>"$d/postgresql.conf" <<EOF
# citus-local.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$d'
shared_preload_libraries = 'citus'
max_connections = 200
shared_buffers = 256MB
citus.node_conninfo = 'sslmode=prefer'
max_worker_processes = 32
EOF
  fi
  sed -i "/^port = /d" "$d/postgresql.conf"; echo "port = $2" >>"$d/postgresql.conf"
}

start() {
  [ $# -ge 1 ] && PORTS[0]=$1; [ $# -ge 2 ] && PORTS[1]=$2; [ $# -ge 3 ] && PORTS[2]=$3
  build
  local t0=$SECONDS i
  mkdir -p "$CITUS_DATA_DIR"
  [ "$(id -u)" = 0 ] && chown "$CITUS_OS_USER" "$CITUS_DATA_DIR"
  for i in 0 1 2; do
    init_node "${NODES[$i]}" "${PORTS[$i]}"
    local d; d=$(node_dir "${NODES[$i]}")
    if as_pg "$PG_BIN/pg_ctl" -D "$d" status >/dev/null 2>&1; then
      log "${NODES[$i]} already running"
    else
      as_pg "$PG_BIN/pg_ctl" -D "$d" -l "$d.log" -w -t 60 ${CITUS_PG_OPTIONS:+-o "$CITUS_PG_OPTIONS"} start >/dev/null \
        || die "start failed: $d.log"
    fi
  done
  for i in 0 1 2; do
    if [ "$(psql_on "${PORTS[$i]}" postgres "SELECT count(*) FROM pg_database WHERE datname = '$CITUS_DB'")" = 0 ]; then
      psql_on "${PORTS[$i]}" postgres "CREATE DATABASE \"$CITUS_DB\""
    fi
    psql_on "${PORTS[$i]}" "$CITUS_DB" "CREATE EXTENSION IF NOT EXISTS citus"
  done
  psql_on "${PORTS[0]}" "$CITUS_DB" "SELECT citus_set_coordinator_host('127.0.0.1', ${PORTS[0]})" >/dev/null
  for i in 1 2; do
    psql_on "${PORTS[0]}" "$CITUS_DB" "SELECT citus_add_node('127.0.0.1', ${PORTS[$i]})" >/dev/null
  done
  log "cluster up in $((SECONDS - t0)) s: workers $(psql_on "${PORTS[0]}" "$CITUS_DB" \
    "SELECT string_agg(node_name || ':' || node_port, ',') FROM citus_get_active_worker_nodes()")"
  echo "${PORTS[*]}" >"$CITUS_DATA_DIR/ports"
  dsn
}

dsn() { echo "postgresql://$(db_user)@127.0.0.1:${PORTS[0]}/$CITUS_DB"; }

stop() {
  local n d
  for n in "${NODES[@]}"; do
    d=$(node_dir "$n")
    [ -f "$d/PG_VERSION" ] || continue
    if as_pg "$PG_BIN/pg_ctl" -D "$d" status >/dev/null 2>&1; then
      as_pg "$PG_BIN/pg_ctl" -D "$d" -m fast -w stop >/dev/null && log "stopped $n"
    fi
  done
}

status() {
  local n
  for n in "${NODES[@]}"; do
    as_pg "$PG_BIN/pg_ctl" -D "$(node_dir "$n")" status 2>&1 | head -1 | sed "s/^/$n: /"
  done
  psql_on "${PORTS[0]}" "$CITUS_DB" "SELECT * FROM citus_get_active_worker_nodes()" 2>/dev/null || true
}

cmd=${1:-start}; shift || true
case "$cmd" in
  start) start "$@" ;;
  stop) stop ;;
  status) status ;;
  dsn) dsn ;;
  build) build ;;
  destroy) stop; rm -rf "$CITUS_DATA_DIR" ;;
  *) die "unknown command '$cmd' (start|stop|status|dsn|build|destroy)" ;;
esac
