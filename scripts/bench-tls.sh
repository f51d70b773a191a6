#!/usr/bin/env bash
# One `orbit bench` run against `orbit dev` as its own process, in one of four modes, to
# compare plain text, TLS, mutual TLS and mutual TLS + identities side by side
# (docs/benchmarks.md, "TLS and identities"). Certificates (P-256) are generated once in DIR.
#
#   scripts/bench-tls.sh MODE [EXECUTIONS] [CONCURRENCY]
#     MODE: plain | tls | mtls | mtls-auth
#   env: ORBIT_BIN (default target/release/orbit), BENCH_DIR (default target/bench-tls)
#
# Example (alternate the modes, as the figures in docs/benchmarks.md were taken):
#   for m in plain tls mtls mtls-auth; do scripts/bench-tls.sh $m 2000 64; done
set -euo pipefail
mode=${1:?mode: plain | tls | mtls | mtls-auth}; n=${2:-2000}; c=${3:-64}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ORBIT_BIN:-$root/target/release/orbit}
d=${BENCH_DIR:-$root/target/bench-tls}
mkdir -p "$d"; cd "$d"
if [ ! -f ca.pem ]; then
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout ca-key.pem -out ca.pem -days 30 -subj /CN=bench-ca 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
  for leaf in server client; do
    openssl req "${ec[@]}" -keyout $leaf-key.pem -out $leaf.csr -subj /CN=$leaf 2>/dev/null
    openssl x509 -req -in $leaf.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out $leaf.pem \
      -days 30 -extfile ext.cnf 2>/dev/null
  done
fi
srv=(); cli=()
case $mode in
  plain) ;;
  tls) srv=(--tls-cert server.pem --tls-key server-key.pem); cli=(--tls-ca ca.pem) ;;
  mtls|mtls-auth)
    srv=(--tls-cert server.pem --tls-key server-key.pem --tls-client-ca ca.pem)
    cli=(--tls-ca ca.pem --tls-client-cert client.pem --tls-client-key client-key.pem)
    if [ "$mode" = mtls-auth ]; then
      out=$("$bin" token new bench --kind admin)
      { echo "identities:"; echo "$out" | sed -n '/^  - name/,$p'; } > ids.yaml
      srv+=(--identities ids.yaml)
      cli+=(--token "$(echo "$out" | sed -n 's/^token: //p')")
    fi ;;
  *) echo "unknown mode $mode (plain | tls | mtls | mtls-auth)" >&2; exit 2 ;;
esac
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rm -f dev.db dev.db-*
"$bin" dev --db dev.db --listen "127.0.0.1:$port" "${srv[@]}" > dev.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q "serving on 127.0.0.1:$port" dev.log && break; sleep 0.1; done
scheme=http; [ "$mode" != plain ] && scheme=https
echo "== $mode"
"$bin" bench --address "$scheme://127.0.0.1:$port" --executions "$n" --concurrency "$c" "${cli[@]}"
