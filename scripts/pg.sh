#!/usr/bin/env bash
# A local PostgreSQL server for Orbit's tests (and for trying the PostgreSQL backend by hand).
#
#   scripts/pg.sh start           initdb (first time) and start; prints the admin URL
#   scripts/pg.sh stop [--purge]  fast shutdown (bounded); --purge also removes the cluster
#   scripts/pg.sh status          whether the server runs
#   scripts/pg.sh url             the admin URL
#   scripts/pg.sh env             `export ORBIT_TEST_DATABASE_URL=...` and `ORBIT_TEST_PG_CA=...`
#                                 (use as: eval "$(scripts/pg.sh env)")
#
# The cluster lives in ${ORBIT_PG_DIR:-<repo>/target/pg} and listens on 127.0.0.1 only, port
# ${ORBIT_PG_PORT:-55432}, with its unix socket in the data directory. Trust authentication
# on loopback for the user `postgres`. TLS is on with a self-signed CA and a server
# certificate (localhost, 127.0.0.1) generated with openssl into the data directory, so
# every sslmode can be tested; ca.crt there is the CA to verify against. fsync stays on.
#
# PostgreSQL refuses to run as root: as root the server runs as the `postgres` system user.
# When no PostgreSQL binaries are installed the script installs Debian's `postgresql`
# package (root only). Idempotent: starting a running server is fine.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${ORBIT_PG_DIR:-$repo/target/pg}"
port="${ORBIT_PG_PORT:-55432}"
url="postgres://postgres@127.0.0.1:${port}/postgres"
start_timeout=60

die() {
  echo "pg.sh: $*" >&2
  exit 1
}

# As root the server runs as `postgres`, which must be able to reach the directory. A
# checkout under a private home (/root is mode 700) is out of its reach: then the cluster
# goes to /tmp instead, under a name derived from the requested path (so every subcommand
# finds the same place).
if [[ "$(id -u)" == 0 ]] && id postgres >/dev/null 2>&1; then
  case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
  probe="$dir"
  while [[ ! -e "$probe" ]]; do probe="$(dirname "$probe")"; done
  if ! runuser -u postgres -- test -x "$probe" 2>/dev/null; then
    dir="/tmp/orbit-pg-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
  fi
fi
log="$dir/server.log"

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

install_postgres() {
  if [[ "$(id -u)" != 0 ]]; then
    die "no PostgreSQL found under /usr/lib/postgresql/*/bin; install it (apt-get install postgresql) or run this script as root"
  fi
  echo "pg.sh: installing PostgreSQL (apt-get install postgresql)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql openssl >&2
}

# Runs a command as the user that owns the server (postgres when we are root).
as_server() {
  if [[ "$(id -u)" == 0 ]]; then
    if command -v runuser >/dev/null 2>&1; then
      runuser -u postgres -- "$@"
    else
      su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}

bin="$(find_bin || true)"

running() {
  [[ -n "$bin" && -f "$dir/PG_VERSION" ]] && as_server "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1
}

make_certs() {
  # A CA and a server certificate signed by it, valid for localhost and 127.0.0.1.
  local tmp
  tmp="$(mktemp -d)"
  openssl req -new -x509 -nodes -days 3650 -newkey rsa:2048 -subj "/CN=orbit test CA" \
    -keyout "$tmp/ca.key" -out "$tmp/ca.crt" >/dev/null 2>&1
  openssl req -new -nodes -newkey rsa:2048 -subj "/CN=localhost" \
    -keyout "$tmp/server.key" -out "$tmp/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    >"$tmp/ext.cnf"
  openssl x509 -req -days 3650 -in "$tmp/server.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
    -CAcreateserial -extfile "$tmp/ext.cnf" -out "$tmp/server.crt" >/dev/null 2>&1
  cp "$tmp/ca.crt" "$tmp/server.crt" "$tmp/server.key" "$dir/"
  rm -rf "$tmp"
  chmod 600 "$dir/server.key"
  chmod 644 "$dir/ca.crt" "$dir/server.crt"
  if [[ "$(id -u)" == 0 ]]; then
    chown postgres:postgres "$dir/ca.crt" "$dir/server.crt" "$dir/server.key"
  fi
}

init_cluster() {
  command -v openssl >/dev/null 2>&1 || die "openssl is needed to make the test certificates"
  echo "pg.sh: initdb in $dir" >&2
  mkdir -p "$dir"
  if [[ "$(id -u)" == 0 ]]; then
    id postgres >/dev/null 2>&1 || die "the postgres system user is missing (install the postgresql package)"
    chown postgres:postgres "$dir"
  fi
  chmod 700 "$dir"
  as_server "$bin/initdb" -D "$dir" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
    >"$dir.initdb.log" 2>&1 || {
    cat "$dir.initdb.log" >&2
    die "initdb failed"
  }
  make_certs
  cat >>"$dir/postgresql.conf" <<EOF

# --- orbit test server (scripts/pg.sh) ---
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.crt'
fsync = on
EOF
  cat >"$dir/pg_hba.conf" <<EOF
# orbit test server: trust on loopback and the unix socket, user postgres only.
local all postgres trust
host  all postgres 127.0.0.1/32 trust
EOF
}

start() {
  if [[ -z "$bin" ]]; then
    install_postgres
    bin="$(find_bin)" || die "PostgreSQL was installed but no initdb found under /usr/lib/postgresql/*/bin"
  fi
  [[ -f "$dir/PG_VERSION" ]] || init_cluster
  if running; then
    echo "pg.sh: already running on port $port" >&2
  else
    # Another server (another checkout's pg.sh, a system PostgreSQL) on the port would make
    # this one fail after a long wait: say so at once.
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
      die "port $port is taken by another server; stop it or set ORBIT_PG_PORT"
    fi
    # Left over from a crash: a stale pid file makes pg_ctl refuse to start.
    rm -f "$dir/postmaster.pid"
    if [[ "$(id -u)" == 0 ]]; then touch "$log" && chown postgres:postgres "$log"; fi
    # The port on the command line wins over the one initdb wrote into postgresql.conf: a
    # cluster kept between runs starts on whatever port it is asked for now. So do the
    # preloaded libraries: pg_stat_statements (part of the server package) counts every
    # statement per database, which is how cluster_idle.rs measures an idle cluster.
    local opts="-p $port -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=20000"
    as_server "$bin/pg_ctl" -D "$dir" -l "$log" -w -t "$start_timeout" -o "$opts" start >/dev/null || {
      tail -n 30 "$log" >&2 || true
      die "the server did not start within ${start_timeout}s (log: $log)"
    }
  fi
  local i
  for ((i = 0; i < start_timeout * 5; i++)); do
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
      echo "pg.sh: PostgreSQL ready at $url (CA: $dir/ca.crt)" >&2
      echo "$url"
      return 0
    fi
    sleep 0.2
  done
  die "the server is not accepting connections after ${start_timeout}s (log: $log)"
}

stop() {
  if running; then
    as_server "$bin/pg_ctl" -D "$dir" -m fast -w -t 30 stop >/dev/null ||
      die "the server did not stop within 30s"
    echo "pg.sh: stopped" >&2
  else
    echo "pg.sh: not running" >&2
  fi
  if [[ "${1:-}" == "--purge" ]]; then
    rm -rf "$dir" "$dir.initdb.log"
    echo "pg.sh: removed $dir" >&2
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  status)
    if running; then
      echo "running on port $port ($dir)"
    else
      echo "not running ($dir)"
      exit 3
    fi
    ;;
  url) echo "$url" ;;
  env)
    echo "export ORBIT_TEST_DATABASE_URL='$url'"
    echo "export ORBIT_TEST_PG_CA='$dir/ca.crt'"
    ;;
  *)
    echo "usage: $0 {start|stop [--purge]|status|url|env}" >&2
    exit 2
    ;;
esac
