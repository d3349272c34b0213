#!/usr/bin/env python3
"""Offline checks of deploy/: no cluster, no network (python3 + python3-yaml).

Parses every deploy/*.yaml, checks kinds and apiVersions, cross-references
(namespace, service account, ConfigMap, ports, host paths) and pins the
DaemonSet's privileges to the documented set: capabilities add exactly
BPF, PERFMON, SYS_ADMIN, SYS_PTRACE, DAC_READ_SEARCH, drop ALL, not privileged, read-only root filesystem.
The embedded config.yaml is parsed here as YAML; the agent's own parser checks
it in tests/unit/daemon_config_test.cpp.

Usage: tests/deploy/validate_manifests.py [deploy-dir]   (exit 1 on any failure)
"""
import os
import re
import sys

from checklist import Checklist

try:
    import yaml
except ImportError:  # pragma: no cover
    print("validate_manifests: python3-yaml is missing (apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(2)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "deploy")

NAMESPACE = "infertap"
METRICS_PORT = 9464
CAPS_ADD = {"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"}
KINDS = {  # kind -> apiVersion
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "ConfigMap": "v1",
    "DaemonSet": "apps/v1",
    "Kustomization": "kustomize.config.k8s.io/v1beta1",
}
NAMESPACED = {"ServiceAccount", "ConfigMap", "DaemonSet"}
# host path -> (mount path, read-only)
HOST_PATHS = {
    "/sys/kernel/btf": ("/sys/kernel/btf", True),
    "/sys/kernel/tracing": ("/sys/kernel/tracing", True),
    "/sys/fs/cgroup": ("/sys/fs/cgroup", True),
    "/run/infertap": ("/run/infertap", False),
    "/var/log/pods": ("/var/log/pods", True),  # Kubernetes names of traced pods
    "/var/log/containers": ("/var/log/containers", True),
}

checklist = Checklist()
check = checklist.check


def get(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict) and p in obj:
            obj = obj[p]
        elif isinstance(obj, list) and isinstance(p, int) and p < len(obj):
            obj = obj[p]
        else:
            return default
    return obj


def load_all():
    docs = []  # (file, doc)
    files = sorted(f for f in os.listdir(DEPLOY) if f.endswith((".yaml", ".yml")))
    check(files, "deploy/ holds YAML manifests")
    for name in files:
        path = os.path.join(DEPLOY, name)
        try:
            with open(path) as f:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            check(False, f"{name}: YAML does not parse: {e}")
            continue
        check(loaded, f"{name}: holds a document")
        for d in loaded:
            docs.append((name, d))
    return files, docs


def check_kinds(docs):
    for name, d in docs:
        if not check(isinstance(d, dict), f"{name}: document is a mapping"):
            continue
        kind, api = d.get("kind"), d.get("apiVersion")
        if not check(kind in KINDS, f"{name}: kind {kind!r} is one of {sorted(KINDS)}"):
            continue
        check(api == KINDS[kind], f"{name}: {kind} apiVersion is {KINDS[kind]!r} (got {api!r})")
        if kind != "Kustomization":
            check(get(d, "metadata", "name"), f"{name}: {kind} has metadata.name")
        if kind in NAMESPACED:
            check(get(d, "metadata", "namespace") == NAMESPACE,
                  f"{name}: {kind} is in namespace {NAMESPACE!r} (got {get(d, 'metadata', 'namespace')!r})")
        if kind == "Namespace":
            check(get(d, "metadata", "name") == NAMESPACE, f"{name}: Namespace is {NAMESPACE!r}")


def by_kind(docs, kind):
    return [d for _, d in docs if isinstance(d, dict) and d.get("kind") == kind]


def check_kustomization(files, docs):
    for k in by_kind(docs, "Kustomization"):
        resources = k.get("resources") or []
        for r in resources:
            check(os.path.exists(os.path.join(DEPLOY, r)), f"kustomization: resource {r} exists")
        others = {f for f in files if f != "kustomization.yaml"}
        check(set(resources) == others, f"kustomization lists every manifest: {sorted(others)} (got {sorted(resources)})")


def check_caps_commented():
    """Each added capability carries its reason as a comment on its line."""
    with open(os.path.join(DEPLOY, "daemonset.yaml")) as f:
        lines = f.read().splitlines()
    in_add = False
    seen = set()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("add:"):
            in_add = True
            continue
        if in_add:
            m = re.match(r"-\s*([A-Z_]+)\s*(#.*)?$", stripped)
            if m:
                seen.add(m.group(1))
                check(m.group(2) and len(m.group(2)) > 10, f"daemonset.yaml: capability {m.group(1)} has its reason beside it")
            elif stripped and not stripped.startswith("#"):
                in_add = False
    check(seen == CAPS_ADD, f"daemonset.yaml: capabilities listed under add: are {sorted(CAPS_ADD)} (got {sorted(seen)})")


def check_daemonset(docs):
    sets = by_kind(docs, "DaemonSet")
    if not check(len(sets) == 1, "exactly one DaemonSet"):
        return
    ds = sets[0]
    spec = get(ds, "spec", "template", "spec", default={})
    tmeta = get(ds, "spec", "template", "metadata", default={})

    selector = get(ds, "spec", "selector", "matchLabels", default={})
    labels = tmeta.get("labels") or {}
    check(selector and all(labels.get(k) == v for k, v in selector.items()),
          "DaemonSet selector matches the pod template labels")

    check(spec.get("hostPID") is True, "hostPID: true")
    check(not spec.get("hostNetwork"), "hostNetwork false or absent")
    check(not spec.get("hostIPC"), "hostIPC false or absent")
    check(spec.get("priorityClassName") == "system-node-critical", "priorityClassName: system-node-critical")
    check(any(t.get("operator") == "Exists" and not t.get("key") and not t.get("effect")
              for t in spec.get("tolerations") or []), "tolerates every taint (operator: Exists)")
    check(spec.get("automountServiceAccountToken") is False, "service account token not mounted")
    check(spec.get("enableServiceLinks") is False, "no Service environment variables (enableServiceLinks: false)")

    sas = {get(d, "metadata", "name") for d in by_kind(docs, "ServiceAccount")}
    check(spec.get("serviceAccountName") in sas, f"serviceAccountName {spec.get('serviceAccountName')!r} is defined")

    ann = tmeta.get("annotations") or {}
    check(ann.get("prometheus.io/scrape") == "true", "annotation prometheus.io/scrape: \"true\"")
    check(ann.get("prometheus.io/port") == str(METRICS_PORT), f"annotation prometheus.io/port: \"{METRICS_PORT}\"")
    check(ann.get("prometheus.io/path") == "/metrics", "annotation prometheus.io/path: /metrics")

    containers = spec.get("containers") or []
    if not check(len(containers) == 1, "one container"):
        return
    c = containers[0]
    check(not spec.get("initContainers"), "no init containers (nothing else runs with privileges)")

    sc = c.get("securityContext") or {}
    check(sc.get("privileged") in (None, False), "container not privileged")
    check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true")
    caps = sc.get("capabilities") or {}
    check(caps.get("drop") == ["ALL"], f"capabilities drop: [ALL] (got {caps.get('drop')!r})")
    add = caps.get("add") or []
    check(sorted(add) == sorted(CAPS_ADD) and len(add) == len(set(add)),
          f"capabilities add exactly {sorted(CAPS_ADD)} (got {add!r})")
    check(get(spec, "securityContext", "capabilities") is None, "no pod-level capabilities")
    check(get(sc, "seccompProfile", "type") == "RuntimeDefault", "seccompProfile: RuntimeDefault")
    # Naming RuntimeDefault makes the kubelet refuse the pod on nodes without AppArmor (deploy/README.md).
    check(get(sc, "appArmorProfile") is None and get(spec, "securityContext", "appArmorProfile") is None,
          "appArmorProfile unset: the runtime's default where the node has AppArmor")

    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    check(ports.get("metrics") == METRICS_PORT, f"container port 'metrics' is {METRICS_PORT}")

    def probe_ok(probe, path):
        http = (probe or {}).get("httpGet") or {}
        port = http.get("port")
        port = ports.get(port, port)
        return http.get("path") == path and port == METRICS_PORT
    check(probe_ok(c.get("livenessProbe"), "/healthz"), f"livenessProbe GET /healthz on {METRICS_PORT}")
    check(probe_ok(c.get("readinessProbe"), "/readyz"), f"readinessProbe GET /readyz on {METRICS_PORT}")

    env = {e.get("name"): e for e in c.get("env") or []}
    check(get(env.get("NODE_NAME"), "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName",
          "env NODE_NAME from the downward API (spec.nodeName)")

    res = c.get("resources") or {}
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            check(get(res, kind, r) is not None, f"resources.{kind}.{r} set")

    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or []}
    for name in mounts:
        check(name in volumes, f"volumeMount {name!r} has a volume")
    host = {get(v, "hostPath", "path"): n for n, v in volumes.items() if v.get("hostPath")}
    check(set(host) == set(HOST_PATHS), f"hostPath volumes are exactly {sorted(HOST_PATHS)} (got {sorted(host)})")
    for path, (mount_path, ro) in HOST_PATHS.items():
        name = host.get(path)
        m = mounts.get(name) if name else None
        if not check(m is not None, f"hostPath {path} is mounted"):
            continue
        check(m.get("mountPath") == mount_path, f"hostPath {path} mounted at {mount_path}")
        check(bool(m.get("readOnly")) == ro, f"hostPath {path} mounted {'read-only' if ro else 'read-write'}")
        check(not m.get("mountPropagation") or m.get("mountPropagation") == "None",
              f"hostPath {path}: no mount propagation")

    cms = {get(d, "metadata", "name") for d in by_kind(docs, "ConfigMap")}
    cfg = [v for v in volumes.values() if v.get("configMap")]
    check(len(cfg) == 1 and get(cfg[0], "configMap", "name") in cms, "config volume refers to the ConfigMap")
    cfg_mount = [m for n, m in mounts.items() if volumes.get(n, {}).get("configMap")]
    check(len(cfg_mount) == 1 and cfg_mount[0].get("mountPath") == "/etc/infertap",
          "ConfigMap mounted at /etc/infertap")
    check(not c.get("command") and "--config" not in (c.get("args") or []),
          "no command/args override: the image ENTRYPOINT passes --config")


def check_configmap(docs):
    cms = by_kind(docs, "ConfigMap")
    if not check(len(cms) == 1, "exactly one ConfigMap"):
        return
    text = get(cms[0], "data", "config.yaml")
    if not check(isinstance(text, str) and text.strip(), "ConfigMap data has config.yaml"):
        return
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        check(False, f"embedded config.yaml parses: {e}")
        return
    check(isinstance(cfg, dict), "embedded config.yaml is a mapping")
    listen = str(get(cfg, "metrics", "listen", default="0.0.0.0:9464"))
    check(listen.rsplit(":", 1)[-1] == str(METRICS_PORT), f"metrics.listen uses port {METRICS_PORT} (got {listen})")
    sock = str(get(cfg, "api", "socket", default="/run/infertap/infertap.sock"))
    check(sock.startswith("/run/infertap/"), f"api.socket is under the /run/infertap hostPath (got {sock})")
    out_file = get(cfg, "output", "file")
    check(not out_file, "output.file unset: the root filesystem is read-only (records go to stdout)")


def check_dockerfile():
    path = os.path.join(DEPLOY, "Dockerfile")
    if not check(os.path.exists(path), "deploy/Dockerfile exists"):
        return
    with open(path) as f:
        text = f.read()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    check(froms[:1] == ["debian:12"] and froms[-1:] == ["debian:12-slim"],
          f"Dockerfile: debian:12 build stage, debian:12-slim runtime (got {froms})")
    check(re.search(r"make\b.*build/infertapd\s+build/infertap\b", text), "Dockerfile builds build/infertapd build/infertap")
    runtime = text.split("FROM debian:12-slim", 1)[-1]
    for pkg in ("libbpf1", "libelf1", "zlib1g", "libsimdjson14", "libyaml-cpp0.7", "libssl3"):
        check(re.search(rf"\b{re.escape(pkg)}\b", runtime), f"Dockerfile runtime installs {pkg}")
    check('ENTRYPOINT ["infertapd", "--config", "/etc/infertap/config.yaml"]' in text,
          "Dockerfile ENTRYPOINT infertapd --config /etc/infertap/config.yaml")


def main():
    if not os.path.isdir(DEPLOY):
        print(f"validate_manifests: no directory {DEPLOY}", file=sys.stderr)
        return 2
    files, docs = load_all()
    check_kinds(docs)
    check_kustomization(files, docs)
    check_daemonset(docs)
    check_caps_commented()
    check_configmap(docs)
    check_dockerfile()
    return checklist.summary("validate_manifests")


if __name__ == "__main__":
    sys.exit(main())
