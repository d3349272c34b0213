// An OTLP/HTTP receiver for the integration tests (tests/integration/otlp_test.cpp):
// every request to /v1/metrics or /v1/traces is decoded with the code
// protobufjs generated from the official opentelemetry-proto definitions
// (@opentelemetry/otlp-transformer's build/src/generated/root.js, pinned in
// package.json), protobuf or JSON by its Content-Type, and written as one JSON
// line to --out: what was received, decoded the way a collector would.
//
//   node receiver.cjs --out FILE [--port N] [--fail N --retry-after S] [--hang]
//
// --fail N: the first N requests are answered 503 with Retry-After: S.
// --hang: connections are accepted and requests read, never answered.
// Prints "listening PORT" once it accepts connections. Loopback only.
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');

const root = require(path.join(__dirname, 'node_modules/@opentelemetry/otlp-transformer/build/src/generated/root.js'));
const v1 = root.opentelemetry.proto.collector;
const kinds = {
  '/v1/metrics': { request: v1.metrics.v1.ExportMetricsServiceRequest, response: v1.metrics.v1.ExportMetricsServiceResponse },
  '/v1/traces': { request: v1.trace.v1.ExportTraceServiceRequest, response: v1.trace.v1.ExportTraceServiceResponse },
};

const args = { port: 0, fail: 0, retryAfter: 1, hang: false, out: '' };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === '--port') args.port = Number(process.argv[++i]);
  else if (a === '--out') args.out = process.argv[++i];
  else if (a === '--fail') args.fail = Number(process.argv[++i]);
  else if (a === '--retry-after') args.retryAfter = process.argv[++i];
  else if (a === '--hang') args.hang = true;
  else { console.error(`unknown argument ${a}`); process.exit(2); }
}
if (!args.out) { console.error('--out FILE is required'); process.exit(2); }

// Trace and span ids as hex, 64-bit integers as decimal strings, enums as numbers: the OTLP/JSON forms.
const asObject = (type, message) => {
  const o = type.toObject(message, { longs: String, enums: Number, bytes: String, defaults: false, arrays: true });
  return JSON.parse(JSON.stringify(o, (key, value) =>
    (key === 'traceId' || key === 'spanId' || key === 'parentSpanId') && typeof value === 'string'
      ? Buffer.from(value, 'base64').toString('hex') : value));
};

// OTLP/JSON carries ids as hex; protobufjs's fromObject takes bytes as base64.
const fromJson = (type, text) => {
  const plain = JSON.parse(text, function (key, value) {
    return (key === 'traceId' || key === 'spanId' || key === 'parentSpanId') && typeof value === 'string'
      ? Buffer.from(value, 'hex').toString('base64') : value;
  });
  // fromObject takes 64-bit integers as the decimal strings OTLP/JSON writes; verify then checks the message.
  const message = type.fromObject(plain);
  const problem = type.verify(message);
  if (problem) throw new Error(`not a valid ${type.name}: ${problem}`);
  return message;
};

let n = 0;
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const kind = kinds[req.url];
    const type = req.headers['content-type'] || '';
    const line = { n: n++, path: req.url, content_type: type, bytes: body.length, user_agent: req.headers['user-agent'] || '' };
    // Header names only: their values could be secrets the agent was given.
    line.header_names = Object.keys(req.headers).sort();
    if (req.headers['x-test-token'] !== undefined) line.x_test_token = req.headers['x-test-token'];
    let status = 200;
    try {
      if (!kind) throw new Error(`unknown path ${req.url}`);
      const message = type.startsWith('application/x-protobuf') ? kind.request.decode(body)
        : type.startsWith('application/json') ? fromJson(kind.request, body.toString('utf8'))
          : null;
      if (!message) { status = 415; throw new Error(`unsupported content type ${type}`); }
      line.request = asObject(kind.request, message);
    } catch (e) {
      if (status === 200) status = 400;
      line.error = String(e && e.message || e);
    }
    if (args.hang) { line.status = 0; fs.appendFileSync(args.out, JSON.stringify(line) + '\n'); return; }
    if (status === 200 && line.n < args.fail) status = 503;
    line.status = status;
    fs.appendFileSync(args.out, JSON.stringify(line) + '\n');
    if (status === 503) {
      res.writeHead(503, { 'Retry-After': String(args.retryAfter), 'Content-Type': 'text/plain' });
      res.end('unavailable\n');
    } else if (status !== 200) {
      res.writeHead(status, { 'Content-Type': 'text/plain' });
      res.end(line.error + '\n');
    } else if (type.startsWith('application/json')) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
    } else {
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' });
      res.end(Buffer.from(kind.response.encode(kind.response.create({})).finish()));
    }
  });
});
server.keepAliveTimeout = 60000;
server.listen(args.port, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
