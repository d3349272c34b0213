// A Realtime API client as a Node.js application writes it: the official
// `openai` SDK's OpenAIRealtimeWS over `ws` (GA: openai 6.x's
// openai/realtime/ws, pinned in package.json beside this file; --beta: openai
// 4.x's openai/beta/realtime/ws from the tests' node_modules, beta event names),
// driving the sample server (server.mjs) or any Realtime-style endpoint.
//
//   node client.mjs --url BASE_URL [--responses 1] [--model gpt-realtime]
//                   [--deflate on|off] [--ca FILE] [--append N]
//                   [--stop-reading-after K [--pause-ms 2000]]
//                   [--log FILE] [--timeout-ms 30000]
//                   [--beta [--beta-modules DIR]]
//
// BASE_URL is the SDK's baseURL, e.g. http://127.0.0.1:PORT/v1 (plain) or
// https://127.0.0.1:PORT/v1 (TLS); ws:// and wss:// are taken as http:// and
// https://. The SDK connects to BASE_URL + "/realtime?model=MODEL" and always
// makes the scheme wss: (OpenAIRealtimeWS sets url.protocol = 'wss'), so for a
// plain base URL this client passes ws a createConnection that opens a plain
// TCP socket (the request, headers and frames are the same; only TLS is left
// out). TLS trust: --ca FILE (ws's `ca` option, handed to tls.connect), or
// NODE_EXTRA_CA_CERTS=FILE in the environment (Node's own, no code).
//
// Deflate: OpenAIRealtimeWS passes `options` through to new WebSocket(url,
// options), so --deflate sets ws's perMessageDeflate: on (default, as ws
// offers it to every server): offer permessage-deflate, compress our own
// messages from 0 bytes up; off: no offer. It is used only when the server
// accepts it too (server.mjs --deflate on); context takeover is what the
// server's answer says (server.mjs --no-context-takeover).
//
// What it does: on open, session.update (instructions); --append N
// input_audio_buffer.append messages of 100 ms PCM16 each; then --responses
// times: conversation.item.create (a user message) + response.create, the next
// once the previous response.done arrived. After the last response.done it
// closes (1000) and exits 0 once the close handshake completed; 1 on any error,
// an `error` event, or the timeout.
//
// --stop-reading-after K: after K output deltas (text deltas, or audio deltas
// with an audio server; transcript deltas not counted) of the first response,
// pause the socket (ws's WebSocket.pause(): the TCP socket stops being read, so
// the kernel's receive buffer fills and the server's send side backs up; events
// already read into Node may still be delivered), resume after --pause-ms.
// Run it against server.mjs --audio --audio-bytes large enough that the
// kernel's buffers (several MB on loopback) fill during the pause.
//
// --log FILE: one JSON line per message received,
//   {"seq":5,"type":"response.output_text.delta","response_id":"resp_0_0","t_ns":...}
// (t_ns: process.hrtime.bigint(), CLOCK_MONOTONIC, in the SDK's `event`
// callback; response.done lines also carry "usage": response.usage as received),
// one per message sent {"sent":"response.create","t_ns":...}, and
// the pause {"marker":"pause"|"resume","t_ns":...}.
// Stdout at exit: one JSON summary line {"ok":true,"responses":R,"counts":{type:n},
// "extensions":"permessage-deflate; ...","url":"wss://...","local_port":41234,"close_code":1000,...}
// (extensions: the server's accepted Sec-WebSocket-Extensions, "" for none;
// local_port: the client side's TCP port).
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

function usage(msg) {
  process.stderr.write(`client.mjs: ${msg}\n`);
  process.exit(2);
}

const opt = { url: "", responses: 1, model: "gpt-realtime", deflate: "on", ca: "", append: 0, stopReadingAfter: -1,
  pauseMs: 2000, log: "", timeoutMs: 30000, beta: false,
  betaModules: process.env.INFERTAP_NODE_MODULES || "/opt/infertap-test/node_modules" };
{
  const values = { "--url": ["url", String], "--responses": ["responses", Number], "--model": ["model", String],
    "--deflate": ["deflate", String], "--ca": ["ca", String], "--append": ["append", Number],
    "--stop-reading-after": ["stopReadingAfter", Number], "--pause-ms": ["pauseMs", Number], "--log": ["log", String],
    "--timeout-ms": ["timeoutMs", Number], "--beta-modules": ["betaModules", String] };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--beta") opt.beta = true;
    else if (values[a] && i + 1 < argv.length) {
      const [key, conv] = values[a];
      opt[key] = conv(argv[++i]);
      if (conv === Number && !Number.isFinite(opt[key])) usage(`${a}: not a number`);
    } else usage(`unknown or incomplete option ${a}`);
  }
  if (!opt.url) usage("--url BASE_URL is required (e.g. http://127.0.0.1:PORT/v1)");
  if (!["on", "off"].includes(opt.deflate)) usage("--deflate on|off");
  if (opt.responses < 1) usage("--responses: at least 1");
}

// ---- the SDK -----------------------------------------------------------------------------

const here = path.dirname(fileURLToPath(import.meta.url));
let OpenAI, OpenAIRealtimeWS;
if (opt.beta) {
  // openai 4.x's beta realtime client requires `ws`, which the tests' shared
  // node_modules do not hold: let its require() find the one pinned beside this
  // file, through NODE_PATH (read at start-up; _initPaths re-reads it).
  const Module = createRequire(import.meta.url)("node:module");
  const mine = path.join(here, "node_modules");
  const paths = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
  if (!paths.includes(mine)) {
    process.env.NODE_PATH = [...paths, mine].join(path.delimiter);
    Module._initPaths();
  }
  const req = createRequire(path.join(opt.betaModules, "noop.js"));
  try {
    OpenAI = req("openai").OpenAI;
    ({ OpenAIRealtimeWS } = req("openai/beta/realtime/ws"));
  } catch (e) {
    usage(`--beta: openai/beta/realtime/ws from ${opt.betaModules}: ${e.message}`);
  }
} else {
  ({ OpenAI } = await import("openai"));
  ({ OpenAIRealtimeWS } = await import("openai/realtime/ws"));
}
const sdkVersion = JSON.parse(fs.readFileSync(
  opt.beta ? path.join(opt.betaModules, "openai/package.json") : path.join(here, "node_modules/openai/package.json"),
  "utf8")).version;

// ---- the connection ----------------------------------------------------------------------

const baseURL = opt.url.replace(/^ws:/, "http:").replace(/^wss:/, "https:").replace(/\/realtime\/?$/, "");
const tls = baseURL.startsWith("https:");
const wsOptions = {
  perMessageDeflate: opt.deflate === "on" ? { threshold: 0 } : false,
  handshakeTimeout: opt.timeoutMs,
};
if (!tls) wsOptions.createConnection = (o) => net.connect({ host: o.host, port: o.port });
if (opt.ca) wsOptions.ca = fs.readFileSync(opt.ca);

const logFd = opt.log ? fs.openSync(opt.log, "w") : -1;
const log = (line) => { if (logFd >= 0) fs.writeSync(logFd, line + "\n"); };
const now = () => process.hrtime.bigint();

const counts = {};
let seq = 0, done = 0, outputDeltas = 0, paused = false, finished = false, closeCode = null, localPort = null;
let extensions = "";  // the server's Sec-WebSocket-Extensions answer (ws's .extensions has the names only)
const deltaTypes = opt.beta ? new Set(["response.text.delta", "response.audio.delta"])
                            : new Set(["response.output_text.delta", "response.output_audio.delta"]);

const client = new OpenAI({ apiKey: "test", baseURL, maxRetries: 0 });
const rt = new OpenAIRealtimeWS({ model: opt.model, options: wsOptions }, client);

function finish(ok, why) {
  if (finished) return;
  finished = true;
  const summary = { ok, sdk: `openai@${sdkVersion}`, mode: opt.beta ? "beta" : "ga", url: String(rt.url),
    local_port: localPort, responses: done, counts, extensions, close_code: closeCode };
  if (why) summary.error = why;
  process.stdout.write(JSON.stringify(summary) + "\n");
  if (logFd >= 0) fs.closeSync(logFd);
  process.exit(ok ? 0 : 1);
}
const timer = setTimeout(() => finish(false, `timeout after ${opt.timeoutMs} ms`), opt.timeoutMs);

function send(ev) {
  log(`{"sent":${JSON.stringify(ev.type)},"t_ns":${now()}}`);
  rt.send(ev);
}

function askResponse(i) {
  send({ type: "conversation.item.create", item: { type: "message", role: "user",
    content: [{ type: "input_text", text: `Say ${i + 1} thing(s) about timestamps.` }] } });
  send({ type: "response.create" });
}

rt.socket.on("upgrade", (res) => { extensions = res.headers["sec-websocket-extensions"] ?? ""; });
rt.socket.on("open", () => {
  localPort = rt.socket._socket?.localPort ?? null;  // the TCP connection's client port (ws keeps the net.Socket there)
  send({ type: "session.update", session: opt.beta ? { instructions: "Be brief." }
                                                  : { type: "realtime", instructions: "Be brief." } });
  if (opt.append > 0) {
    const chunk = Buffer.alloc(4800).toString("base64");  // 100 ms of PCM16 24 kHz silence
    for (let i = 0; i < opt.append; i++) send({ type: "input_audio_buffer.append", audio: chunk });
  }
  askResponse(0);
});

rt.on("event", (ev) => {
  const t = now();
  const rid = ev.response?.id ?? ev.response_id ?? null;
  const usage = ev.type === "response.done" && ev.response?.usage ? `,"usage":${JSON.stringify(ev.response.usage)}` : "";
  log(`{"seq":${seq++},"type":${JSON.stringify(String(ev.type))},"response_id":${rid ? JSON.stringify(rid) : "null"},"t_ns":${t}${usage}}`);
  counts[ev.type] = (counts[ev.type] || 0) + 1;
  if (deltaTypes.has(ev.type) && done === 0 && ++outputDeltas === opt.stopReadingAfter && !paused) {
    paused = true;
    rt.socket.pause();
    log(`{"marker":"pause","t_ns":${now()}}`);
    setTimeout(() => {
      log(`{"marker":"resume","t_ns":${now()}}`);
      rt.socket.resume();
    }, opt.pauseMs);
  }
  if (ev.type === "response.done") {
    if (++done < opt.responses) askResponse(done);
    else rt.close({ code: 1000, reason: "done" });
  }
});

rt.on("error", (err) => finish(false, `error: ${err.message}`));
rt.socket.on("close", (code) => {
  closeCode = code;
  clearTimeout(timer);
  if (done < opt.responses) finish(false, `closed (${code}) after ${done} of ${opt.responses} responses`);
  else finish(code === 1000, code === 1000 ? undefined : `close code ${code}`);
});
