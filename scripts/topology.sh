#!/usr/bin/env bash
# The production topology on one machine, with real processes on loopback:
# PostgreSQL (installed and started by scripts/pg.sh when needed), 2 frontends, 2 owners and
# 1 scheduler, each its own `orbit` process sharing one database.
#
#   scripts/topology.sh start [options]   start everything, wait until every node serves
#   scripts/topology.sh status [--dir D]  what runs (service, node id, pid, address, log)
#   scripts/topology.sh stop [--dir D]    stop every process it started (and PostgreSQL,
#                                         if this script started it)
#   scripts/topology.sh certs [--certs C] only generate the CA and certificates (see --certs)
#
# Secure by default: mutual TLS on every port and on the calls to owners, and an identities
# file enforced by every service. A CA and certificates are generated with openssl in
# D/tls (node.pem for the services, CN `node`; client.pem for clients and workers, CN
# `client`); D/identities.yaml holds a `service` identity matched by the node certificate
# and an `admin` identity matched by the client certificate or by a generated token. D/env
# then also holds ORBIT_TLS_CA, ORBIT_TLS_CLIENT_CERT, ORBIT_TLS_CLIENT_KEY and ORBIT_TOKEN
# (the token is $ORBIT_TOPOLOGY_TOKEN when set, else a fresh random one).
#
# Options of `start`:
#   --dir D          state and logs (default: target/topology)
#   --database NAME  database to create and use (default: orbit)
#   --frontends N    (default 2)   --owners N (default 2)   --schedulers N (default 1)
#   --ports auto     pick free ports (tests); default: frontends 7233, 7243, ...;
#                    owners 7234, 7244, ...; schedulers 7235, 7245, ...
#   --sslmode MODE   how services reach PostgreSQL: disable | require | verify-full
#                    (default: disable; verify-full uses the CA scripts/pg.sh made)
#   --bin PATH       the orbit binary (default: $ORBIT_BIN, else target/release/orbit,
#                    built when missing)
#   --insecure       the old plain mode: no TLS, no identities (services get --insecure)
#   --tls            accepted for old commands; TLS is the default
#   --certs C        take (or generate once) the CA and certificates in C instead of D/tls
#   -- ARGS          extra flags for every service (e.g. --node-timeout-ms 2000)
#
# After `start`, D/env holds ORBIT_DATABASE_URL, ORBIT_FRONTENDS (comma-separated
# host:port list for workers and clients) and ORBIT_METRICS (every process's admin
# host:port, for `orbit bench --metrics`), and D/nodes one line per process:
#   <service> <node-id> <pid> <host:port> <log file>
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

cmd="${1:-}"
[ $# -gt 0 ] && shift
dir="$repo/target/topology"
database="orbit"
frontends=2 owners=2 schedulers=1
ports="fixed"
sslmode="disable"
bin="${ORBIT_BIN:-}"
tls=1
certs=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --database) database="$2"; shift 2 ;;
    --frontends) frontends="$2"; shift 2 ;;
    --owners) owners="$2"; shift 2 ;;
    --schedulers) schedulers="$2"; shift 2 ;;
    --ports) ports="$2"; shift 2 ;;
    --sslmode) sslmode="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --tls) tls=1; shift ;;
    --insecure) tls=0; shift ;;
    --certs) certs="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "topology.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_for() { # service index
  if [ "$ports" = auto ]; then free_port; return; fi
  local base
  case "$1" in frontend) base=7233 ;; owner) base=7234 ;; scheduler) base=7235 ;; esac
  echo $((base + 10 * $2))
}

wait_serving() { # log pid
  local deadline=$((SECONDS + 60))
  until grep -q "serving on" "$1" 2>/dev/null; do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "topology.sh: process $2 exited; its log ($1):" >&2
      tail -n 30 "$1" >&2 || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "topology.sh: $1 did not say 'serving on' within 60 s" >&2
      return 1
    fi
    sleep 0.1
  done
}

make_certs() { # dir: ca, node (server and client auth, localhost/127.0.0.1), client
  local d="$1" ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  mkdir -p "$d"
  [ -f "$d/client.pem" ] && return 0
  (
    cd "$d"
    openssl req -x509 "${ec[@]}" -keyout ca-key.pem -out ca.pem -days 825 \
      -subj "/CN=Orbit topology CA" 2>/dev/null
    for leaf in node client; do
      if [ "$leaf" = node ]; then
        usage="serverAuth,clientAuth" san="DNS:localhost,IP:127.0.0.1"
      else
        usage="clientAuth" san="DNS:client"
      fi
      printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
        "$usage" "$san" >"$leaf.ext"
      openssl req "${ec[@]}" -keyout "$leaf-key.pem" -out "$leaf.csr" -subj "/CN=$leaf" 2>/dev/null
      openssl x509 -req -in "$leaf.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
        -days 825 -extfile "$leaf.ext" -out "$leaf.pem" 2>/dev/null
    done
    chmod 600 ./*-key.pem
  )
}

stop_all() {
  [ -f "$dir/nodes" ] || { echo "topology.sh: nothing recorded in $dir"; return 0; }
  local pids=()
  while read -r _service _node pid _addr _log; do pids+=("$pid"); done <"$dir/nodes"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$dir/nodes"
  if [ -f "$dir/started-pg" ]; then
    "$repo/scripts/pg.sh" stop
    rm -f "$dir/started-pg"
  fi
  echo "topology stopped"
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ -f "$dir/nodes" ]; then
      echo "topology.sh: $dir already has a running topology; stop it first" >&2
      exit 1
    fi
    if ! "$repo/scripts/pg.sh" status >/dev/null 2>&1; then
      "$repo/scripts/pg.sh" start
      touch "$dir/started-pg"
    fi
    admin_url="$("$repo/scripts/pg.sh" url)"
    psql "$admin_url" -qtAc "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1 \
      || psql "$admin_url" -qc "CREATE DATABASE \"$database\""
    url="${admin_url%/*}/$database"
    # Statement counts for `orbit bench --database-url` (pg.sh preloads the library; a
    # server that does not is fine, the bench then counts transactions only).
    psql "${url}" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 || true
    case "$sslmode" in
      disable | require) url="$url?sslmode=$sslmode" ;;
      verify-full)
        ca="$(eval "$("$repo/scripts/pg.sh" env)"; echo "${ORBIT_TEST_PG_CA:-}")"
        [ -n "$ca" ] || { echo "topology.sh: scripts/pg.sh printed no CA" >&2; exit 1; }
        url="$url?sslmode=verify-full&sslrootcert=$ca"
        ;;
      *) echo "topology.sh: --sslmode must be disable, require or verify-full" >&2; exit 2 ;;
    esac
    if [ -z "$bin" ]; then
      bin="$repo/target/release/orbit"
      [ -x "$bin" ] || (cd "$repo" && cargo build --release -p orbit)
    fi
    tls_flags=(--insecure)
    t="${certs:-$dir/tls}"
    if [ "$tls" = 1 ]; then
      make_certs "$t"
      token="${ORBIT_TOPOLOGY_TOKEN:-$(openssl rand -hex 32)}"
      hash="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
      cat >"$dir/identities.yaml" <<EOF_IDS
identities:
  - name: admin              # clients and workers: the client certificate or ORBIT_TOKEN
    kind: admin
    token_sha256: $hash
    cert_names: [client]
  - name: services           # frontends and schedulers calling owners, by node.pem
    kind: service
    cert_names: [node]
EOF_IDS
      tls_flags=(--tls-cert "$t/node.pem" --tls-key "$t/node-key.pem" --tls-client-ca "$t/ca.pem"
        --tls-ca "$t/ca.pem" --tls-client-cert "$t/node.pem" --tls-client-key "$t/node-key.pem"
        --identities "$dir/identities.yaml")
    fi
    : >"$dir/nodes"
    fe_list=""
    start_node() { # service index
      local service="$1" i="$2" port node log pid
      port="$(port_for "$service" "$i")"
      node="$service-$((i + 1))"
      log="$dir/$node.log"
      ORBIT_DATABASE_URL="$url" "$bin" "$service" --node-id "$node" \
        --listen "127.0.0.1:$port" ${tls_flags[@]+"${tls_flags[@]}"} \
        ${extra[@]+"${extra[@]}"} >"$log" 2>&1 &
      pid=$!
      echo "$service $node $pid 127.0.0.1:$port $log" >>"$dir/nodes"
      wait_serving "$log" "$pid"
      if [ "$service" = frontend ]; then fe_list="${fe_list:+$fe_list,}127.0.0.1:$port"; fi
    }
    trap 'stop_all >/dev/null 2>&1 || true' ERR
    # Owners first: frontends route starts to live owners.
    for ((i = 0; i < owners; i++)); do start_node owner "$i"; done
    for ((i = 0; i < schedulers; i++)); do start_node scheduler "$i"; done
    for ((i = 0; i < frontends; i++)); do start_node frontend "$i"; done
    trap - ERR
    # Every process's admin address (`orbit bench --metrics`), as each printed it.
    metrics=""
    while read -r _ _ _ _ log; do
      a="$(sed -n 's/.*admin http on \([^ ]*\).*/\1/p' "$log" | head -n 1)"
      if [ -n "$a" ]; then metrics="${metrics:+$metrics,}$a"; fi
    done <"$dir/nodes"
    {
      echo "ORBIT_DATABASE_URL='$url'"
      echo "ORBIT_FRONTENDS='$fe_list'"
      echo "ORBIT_METRICS='$metrics'"
      if [ "$tls" = 1 ]; then
        echo "ORBIT_TLS_CA='$t/ca.pem'"
        echo "ORBIT_TLS_CLIENT_CERT='$t/client.pem'"
        echo "ORBIT_TLS_CLIENT_KEY='$t/client-key.pem'"
        echo "ORBIT_TOKEN='$token'"
      fi
    } >"$dir/env"
    chmod 600 "$dir/env"
    cat "$dir/nodes"
    echo "frontends: $fe_list   (state in $dir; stop with: scripts/topology.sh stop --dir $dir)"
    ;;
  status)
    [ -f "$dir/nodes" ] || { echo "no topology in $dir"; exit 1; }
    while read -r service node pid addr log; do
      if kill -0 "$pid" 2>/dev/null; then state=up; else state=down; fi
      echo "$service $node $pid $addr $state $log"
    done <"$dir/nodes"
    ;;
  stop) stop_all ;;
  certs) make_certs "${certs:-$dir/tls}" ;;
  *)
    sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
