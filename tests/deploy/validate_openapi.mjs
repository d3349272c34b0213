// Kubernetes documents through the validators that kubernetes-models and
// @kubernetes-models/prometheus-operator compile from the Kubernetes OpenAPI
// definitions (v1.36) and the prometheus-operator CRDs: the patterns,
// formats and enums that the JSON schemas of tests/deploy/schemas/ (built
// from the same packages' declarations) do not carry, e.g. a PrometheusRule
// `for: 5 minutes` instead of `5m`. Run by tests/deploy/validate_schemas.py.
//
// Usage: node validate_openapi.mjs NODE_MODULES DOCS.json
//   DOCS.json: [{"name": "...", "doc": {...}}, ...]
// Prints one JSON line per document, {"name", "ok", "error"}; exits 1 when
// one is invalid or of a kind it has no validator for, 2 when the packages
// are missing.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const MODELS = {
  "apps/v1 DaemonSet": ["kubernetes-models/apps/v1/DaemonSet.js", "DaemonSet"],
  "v1 Namespace": ["kubernetes-models/v1/Namespace.js", "Namespace"],
  "v1 ServiceAccount": ["kubernetes-models/v1/ServiceAccount.js", "ServiceAccount"],
  "v1 ConfigMap": ["kubernetes-models/v1/ConfigMap.js", "ConfigMap"],
  "monitoring.coreos.com/v1 PodMonitor": [
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor.js", "PodMonitor"],
  "monitoring.coreos.com/v1 PrometheusRule": [
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule.js", "PrometheusRule"],
};

const [modules, docsFile] = process.argv.slice(2);
if (!modules || !docsFile) {
  console.error("usage: node validate_openapi.mjs NODE_MODULES DOCS.json");
  process.exit(2);
}

async function modelOf(doc) {
  const entry = MODELS[`${doc.apiVersion} ${doc.kind}`];
  if (!entry) return null;
  const file = path.join(modules, entry[0]);
  if (!fs.existsSync(file)) {
    console.error(`validate_openapi: ${file} is missing: run scripts/setup.sh (npm kubernetes-models)`);
    process.exit(2);
  }
  return (await import(pathToFileURL(file).href))[entry[1]];
}

let failed = 0;
for (const { name, doc } of JSON.parse(fs.readFileSync(docsFile, "utf8"))) {
  const Model = await modelOf(doc);
  let error = Model ? null : `no validator for ${doc.apiVersion} ${doc.kind}`;
  try {
    if (Model) new Model(doc).validate();
  } catch (e) {
    error = e.message;
  }
  console.log(JSON.stringify({ name, ok: error === null, error }));
  if (error !== null) failed++;
}
process.exit(failed ? 1 : 0);
