#!/usr/bin/env bash
# Creates (or updates) the Secrets the Orbit overlays expect, in NAMESPACE (default orbit):
#
#   orbit-database       url              the PostgreSQL URL (ORBIT_DATABASE_URL)
#   orbit-identities     identities.yaml  a `service` identity (node certificate or service
#                                         token) and an `admin` identity (admin token)
#   orbit-service-token  token            the services' token for their calls to owners
#   orbit-tls            tls.crt, tls.key, ca.crt   the node certificate (overlays/plain)
#
#   ORBIT_DATABASE_URL=postgres://... deploy/kubernetes/create-secrets.sh [NAMESPACE]
#
# The certificates and tokens come from docker/init-certs.sh, run ONCE into
# ORBIT_SECRETS_DIR (default ./orbit-k8s-secrets; a directory that already holds
# identities.yaml is reused, so running this again only re-applies the Secrets). Keep that
# directory private: it holds the CA key (ca-key.pem, for more certificates) and the admin
# token (admin.token, for the CLI and workers). The node certificate names the addresses
# the services dial and are dialled at: orbit-frontend[.NAMESPACE[.svc]],
# *.orbit-owner.NAMESPACE.svc (each owner's advertised address) and localhost (port-forward);
# ORBIT_EXTRA_CERT_HOSTS adds more (space-separated, e.g. an ingress name).
#
# init-certs.sh needs openssl and the orbit binary: with ORBIT_BIN=/path/to/orbit it runs
# here, otherwise inside the image (ORBIT_IMAGE, default orbit:dev) with `docker run`.
# Needs kubectl with access to the cluster. Other secrets (a database CA, other identities):
# see docs/kubernetes.md.
set -euo pipefail

ns="${1:-orbit}"
: "${ORBIT_DATABASE_URL:?set ORBIT_DATABASE_URL to the PostgreSQL URL the services use}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${ORBIT_SECRETS_DIR:-$PWD/orbit-k8s-secrets}"
image="${ORBIT_IMAGE:-orbit:dev}"
hosts="orbit-frontend orbit-frontend.$ns orbit-frontend.$ns.svc *.orbit-owner.$ns.svc localhost"
hosts="$hosts ${ORBIT_EXTRA_CERT_HOSTS:-}"

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
if [ -f "$dir/identities.yaml" ]; then
  echo "create-secrets: reusing the certificates and tokens in $dir"
elif [ -n "${ORBIT_BIN:-}" ]; then
  # From an empty directory: init-certs.sh leaves the wildcard host unquoted.
  empty="$(mktemp -d)"
  (cd "$empty" && ORBIT_CERT_HOSTS="$hosts" ORBIT_BIN="$ORBIT_BIN" sh "$repo/docker/init-certs.sh" "$dir")
  rmdir "$empty"
else
  docker run --rm --user "$(id -u):$(id -g)" -e ORBIT_CERT_HOSTS="$hosts" \
    -v "$dir:/orbit/secrets" --entrypoint /bin/sh "$image" \
    /usr/local/bin/orbit-init-certs /orbit/secrets
fi

kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"
apply() { kubectl -n "$ns" create secret "$@" --dry-run=client -o yaml | kubectl -n "$ns" apply -f -; }
apply generic orbit-database --from-literal=url="$ORBIT_DATABASE_URL"
apply generic orbit-identities --from-file=identities.yaml="$dir/identities.yaml"
apply generic orbit-service-token --from-file=token="$dir/service.token"
apply generic orbit-tls --type=kubernetes.io/tls \
  --from-file=tls.crt="$dir/node.pem" --from-file=tls.key="$dir/node-key.pem" \
  --from-file=ca.crt="$dir/ca.pem"

cat <<EOF
create-secrets: the Secrets are in namespace $ns. For the CLI and workers:
  export ORBIT_TOKEN="\$(cat $dir/admin.token)"
  export ORBIT_TLS_CA=$dir/ca.pem      # overlays/plain only (the meshes serve plain text to port-forward)
EOF
