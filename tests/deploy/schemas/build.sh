#!/usr/bin/env bash
# Builds the JSON schemas in this directory, once, from pinned npm packages;
# the suite then validates offline against the committed files
# (tests/deploy/validate_schemas.py). Rebuild only to move to another
# Kubernetes or prometheus-operator version: change the pins below, run it,
# and review the diff.
#
#   kubernetes-models                  TypeScript declarations generated from the
#                                      Kubernetes OpenAPI definitions (5.x: Kubernetes v1.36.0)
#   @kubernetes-models/prometheus-operator   the same from the prometheus-operator CRDs
#                                      (monitoring.coreos.com/v1)
#   ts-json-schema-generator           declarations -> JSON Schema (draft-07); an
#                                      interface admits no property it does not
#                                      declare (additionalProperties: false), as
#                                      the API server's strict field validation
#
# Needs node and npm (scripts/setup.sh installs them) and the npm registry.
# Usage: tests/deploy/schemas/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pins=(kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0 ts-json-schema-generator@2.9.0)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --ignore-scripts "${pins[@]}" >/dev/null

# One exported alias per kind: file name -> type.
cat >kinds.ts <<'TS'
import type { IDaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import type { INamespace } from "kubernetes-models/v1/Namespace";
import type { IServiceAccount } from "kubernetes-models/v1/ServiceAccount";
import type { IConfigMap } from "kubernetes-models/v1/ConfigMap";
import type { IPodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import type { IPrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
export type DaemonSet = IDaemonSet;
export type Namespace = INamespace;
export type ServiceAccount = IServiceAccount;
export type ConfigMap = IConfigMap;
export type PodMonitor = IPodMonitor;
export type PrometheusRule = IPrometheusRule;
TS
cat >tsconfig.json <<'JSON'
{"compilerOptions": {"module": "nodenext", "moduleResolution": "nodenext", "strict": true, "skipLibCheck": true,
                     "target": "es2022"}, "files": ["kinds.ts"]}
JSON

versions="kubernetes-models $(node -p 'require("./node_modules/kubernetes-models/package.json").version'),"
versions+=" @kubernetes-models/prometheus-operator $(node -p 'require("./node_modules/@kubernetes-models/prometheus-operator/package.json").version'),"
versions+=" ts-json-schema-generator $(node -p 'require("./node_modules/ts-json-schema-generator/package.json").version')"
for entry in DaemonSet:daemonset-apps-v1 Namespace:namespace-v1 ServiceAccount:serviceaccount-v1 ConfigMap:configmap-v1 \
             PodMonitor:podmonitor-monitoring-v1 PrometheusRule:prometheusrule-monitoring-v1; do
  type=${entry%%:*} file=${entry##*:}
  node_modules/.bin/ts-json-schema-generator -p kinds.ts -f tsconfig.json -t "$type" -j none -o "$type.json"
  # Stable, reviewable output that says where it came from.
  python3 - "$type.json" "$here/$file.json" "$type" "$versions" <<'PY'
import json, sys
src, dst, kind, versions = sys.argv[1:]
schema = json.load(open(src))
schema["description"] = f"{kind}, strict (no undeclared property), built by tests/deploy/schemas/build.sh from {versions}"
with open(dst, "w") as out:
    json.dump(schema, out, indent=1, sort_keys=True)
    out.write("\n")
PY
  echo "build.sh: $file.json ($type)"
done
