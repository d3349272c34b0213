#!/usr/bin/env python3
"""The deploy manifests on a real API server's terms, offline.

  1. `kubectl kustomize` builds deploy/ (the agent) and
     deploy/prometheus-operator/ (its PodMonitor), and each build holds
     exactly the kinds expected.
  2. Every document validates against the JSON schema of its kind in
     tests/deploy/schemas/ (Kubernetes v1.36, prometheus-operator
     monitoring.coreos.com/v1; strict: a property the API does not declare is
     refused, as by the API server's strict field validation), and so does
     the PrometheusRule deploy/prometheus/infertap-prometheusrule.yaml, or,
     while that file is absent, the minimal sample tests/deploy/samples/.
  3. The same documents through the validators kubernetes-models compiles
     from the OpenAPI definitions and CRDs (node, validate_openapi.mjs): the
     patterns and formats the JSON schemas do not carry.
  4. Every container of the built DaemonSet has requests and limits, both
     probes and a locked-down securityContext.
  5. Both validators refuse what an API server refuses (an unknown field, a
     wrong type, a missing required field, a malformed duration): without
     that, their passing would prove nothing.

Needs kubectl (Debian kubernetes-client), python3-jsonschema, python3-yaml,
node and the npm packages scripts/setup.sh installs (INFERTAP_NODE_MODULES,
default /opt/infertap-test/node_modules).

Usage: validate_schemas.py [--rules FILE]   exit 1 on a failure, 2 when a tool is missing
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

from checklist import Checklist

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMAS = os.path.join(ROOT, "tests", "deploy", "schemas")
RULES = os.path.join(ROOT, "deploy", "prometheus", "infertap-prometheusrule.yaml")
SAMPLE_RULES = os.path.join(ROOT, "tests", "deploy", "samples", "prometheusrule.yaml")
NODE_MODULES = os.environ.get("INFERTAP_NODE_MODULES", "/opt/infertap-test/node_modules")

SCHEMA_FILES = {  # (apiVersion, kind) -> schema file
    ("apps/v1", "DaemonSet"): "daemonset-apps-v1.json",
    ("v1", "Namespace"): "namespace-v1.json",
    ("v1", "ServiceAccount"): "serviceaccount-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
}
AGENT_KINDS = ["ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]
BUILDS = {  # kustomization directory -> the kinds its build holds, sorted
    "deploy": AGENT_KINDS,
    "deploy/prometheus-operator": ["PodMonitor", "PrometheusRule"],
}


def missing_tool(message):
    print(f"validate_schemas: {message}", file=sys.stderr)
    sys.exit(2)


try:
    import jsonschema
    import yaml
except ImportError as e:  # pragma: no cover
    missing_tool(f"{e.name} is missing: scripts/setup.sh installs python3-jsonschema and python3-yaml")

checklist = Checklist()
check = checklist.check


def kustomize(directory):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        missing_tool("kubectl is missing: scripts/setup.sh installs it (Debian kubernetes-client)")
    run = subprocess.run([kubectl, "kustomize", os.path.join(ROOT, directory)], capture_output=True, text=True)
    if not check(run.returncode == 0, f"kubectl kustomize {directory} builds: {run.stderr.strip()}"):
        return []
    return [d for d in yaml.safe_load_all(run.stdout) if d is not None]


def validator_for(doc):
    name = SCHEMA_FILES.get((doc.get("apiVersion"), doc.get("kind")))
    if name is None:
        return None
    with open(os.path.join(SCHEMAS, name)) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(doc):
    """The schema's complaints about doc (['no schema'] for a kind without one)."""
    v = validator_for(doc)
    if v is None:
        return [f"no schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(document)'}: {e.message}" for e in v.iter_errors(doc)]


def label(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def openapi_results(named_docs):
    """{name: 'ok' | error} from validate_openapi.mjs."""
    node = shutil.which("node")
    if not node:
        missing_tool("node is missing: scripts/setup.sh installs nodejs")
    if not os.path.isdir(os.path.join(NODE_MODULES, "kubernetes-models")):
        missing_tool(f"{NODE_MODULES}/kubernetes-models is missing: run scripts/setup.sh (npm kubernetes-models)")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"name": n, "doc": d} for n, d in named_docs], f)
        path = f.name
    try:
        script = os.path.join(ROOT, "tests", "deploy", "validate_openapi.mjs")
        run = subprocess.run([node, script, NODE_MODULES, path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if run.returncode == 2:
        missing_tool(run.stderr.strip())
    results = {}
    for line in run.stdout.splitlines():
        r = json.loads(line)
        results[r["name"]] = "ok" if r["ok"] else r["error"]
    return results


def check_containers(docs):
    for ds in (d for d in docs if d.get("kind") == "DaemonSet"):
        pod = ds["spec"]["template"]["spec"]
        for c in (pod.get("initContainers") or []) + pod.get("containers", []):
            where = f"{label(ds)} container {c.get('name')}"
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    check(r in (res.get(kind) or {}), f"{where}: resources.{kind}.{r}")
            check(c.get("livenessProbe") and c.get("readinessProbe"), f"{where}: liveness and readiness probes")
            sc = c.get("securityContext") or {}
            check(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem")
            check(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false")
            check(not sc.get("privileged"), f"{where}: not privileged")
            check((sc.get("capabilities") or {}).get("drop") == ["ALL"], f"{where}: capabilities drop ALL")
            check((sc.get("seccompProfile") or {}).get("type"), f"{where}: a seccomp profile")


def broken_copies(daemonset, rule):
    """Documents an API server refuses, each with what is wrong with it."""
    typo = copy.deepcopy(daemonset)
    c = typo["spec"]["template"]["spec"]["containers"][0]
    c["securityContext"]["capabilites"] = c["securityContext"].pop("capabilities")
    wrong_type = copy.deepcopy(daemonset)
    wrong_type["spec"]["template"]["spec"]["hostPID"] = "yes"
    no_containers = copy.deepcopy(daemonset)
    del no_containers["spec"]["template"]["spec"]["containers"]
    bad_duration = copy.deepcopy(rule)
    bad_duration["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    return [("unknown field capabilites", typo, True), ("hostPID: \"yes\"", wrong_type, True),
            ("no containers", no_containers, True), ("for: 5 minutes", bad_duration, False)]


def main(argv):
    rules_file = argv[argv.index("--rules") + 1] if "--rules" in argv else RULES
    named = []  # (name, document) of everything validated
    for directory, kinds in BUILDS.items():
        docs = kustomize(directory)
        check(sorted(d.get("kind") for d in docs) == kinds,
              f"kubectl kustomize {directory} holds exactly {kinds} (got {sorted(d.get('kind') for d in docs)})")
        check_containers(docs)
        named += [(f"{directory}: {label(d)}", d) for d in docs]
    if not os.path.exists(rules_file):
        print(f"note: {os.path.relpath(rules_file, ROOT)} is absent: validating the minimal sample "
              f"{os.path.relpath(SAMPLE_RULES, ROOT)} instead")
        rules_file = SAMPLE_RULES
    with open(rules_file) as f:
        rules = [d for d in yaml.safe_load_all(f) if d is not None]
    check(rules and all(r.get("kind") == "PrometheusRule" for r in rules), f"{rules_file} holds PrometheusRules")
    named += [(f"{os.path.relpath(rules_file, ROOT)}: {label(r)}", r) for r in rules]

    for name, doc in named:
        errors = schema_errors(doc)
        check(not errors, f"{name} against tests/deploy/schemas: " + "; ".join(errors[:5]))
    daemonset = next(d for n, d in named if d.get("kind") == "DaemonSet")
    broken = broken_copies(daemonset, rules[0])
    for what, doc, schema_sees_it in broken:
        if schema_sees_it:
            check(schema_errors(doc), f"the JSON schema refuses a DaemonSet with {what}")
    openapi = openapi_results(named + [(f"broken: {what}", doc) for what, doc, _ in broken])
    for name, _ in named:
        check(openapi.get(name) == "ok", f"{name} against the OpenAPI validators: {openapi.get(name)}")
    for what, _, _ in broken:
        result = openapi.get(f"broken: {what}")
        # kubernetes-models admits unknown fields (the OpenAPI does not forbid them): the JSON schema refuses those.
        if what != "unknown field capabilites":
            check(result not in (None, "ok"), f"the OpenAPI validators refuse {what} (got {result})")
    return checklist.summary("validate_schemas", f"{len(named)} documents, ")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
