// A sample OpenAI Realtime-style server for the integration tests: the `ws`
// package (pinned in package.json beside this file) answering WebSocket
// upgrades on /v1/realtime, plain or TLS, with the server messages of the
// Realtime API (GA names, or the beta names with --names beta) on a schedule
// the test chooses, and a ground-truth log of when each message was handed to
// ws.send.
//
//   node server.mjs [--host 127.0.0.1] [--port 0] [--tls-cert FILE --tls-key FILE]
//                   [--deflate on|off] [--no-context-takeover]
//                   [--names ga|beta] [--tokens 20] [--ttft-ms MS] [--interval-ms 10]
//                   [--stall-ms S --stall-at K [--stall-response R]]
//                   [--hold-file FILE --hold-at K]
//                   [--audio] [--audio-bytes 4800] [--noise] [--input-tokens 12]
//                   [--model NAME] [--log FILE]
//
// Prints `PORT <n>` on stdout once listening (the chosen port when --port 0).
// Runs until SIGTERM/SIGINT (exit 0, log complete).
//
// Per connection: session.created (with the session's audio formats) at once;
// session.update -> session.updated; conversation.item.create ->
// conversation.item.added + conversation.item.done (beta: conversation.item.created);
// input_audio_buffer.append -> nothing (as the API); input_audio_buffer.commit ->
// input_audio_buffer.committed; response.create -> one response, responses of
// a connection one after the other in the order asked (a response.create during
// a response is queued, not refused):
//   response.created, then --tokens deltas: response.output_text.delta (beta
//   response.text.delta), or with --audio per token a response.output_audio.delta
//   (beta response.audio.delta; base64 of --audio-bytes of PCM16 24 kHz mono,
//   4800 = 100 ms, a tone plus noise, different in every delta) followed by a response.output_audio_transcript.delta (beta
//   response.audio_transcript.delta); the first after --ttft-ms (default
//   --interval-ms), the others --interval-ms apart; then response.done with
//   response.usage {input_tokens, output_tokens: tokens, total_tokens}.
//   --stall-ms S --stall-at K: one extra pause of S ms before token K (0-based:
//   after K tokens were sent) of response R (0-based per connection, default 0).
//   --hold-file FILE --hold-at K: the first response of each connection waits
//   before its token K until FILE exists (checked every 5 ms): a test starts
//   the agent meanwhile, so that it joins the session with a response in
//   flight.
//   --noise: rate_limits.updated after response.created and between tokens
//   (every 3rd gap: rate_limits.updated, every 5th: session.updated), and after
//   response.done, as the API sends it.
//
// --log FILE: one JSON line per server message (ground truth, no payload text):
//   {"conn":0,"seq":3,"type":"response.output_text.delta","response_id":"resp_0_0",
//    "token":0,"bytes":187,"buffered":0,"t_ns":...,"written_ns":...}
// seq: the message's index among the connection's server messages; token: the
// token index of a delta (absent otherwise); bytes: the JSON text's length (the
// uncompressed payload); buffered: ws.bufferedAmount just before the send;
// t_ns: process.hrtime.bigint() (CLOCK_MONOTONIC) just before ws.send;
// written_ns: when ws's send callback ran (the frame was handed to the kernel:
// late when TCP backpressure held it in Node), null when it never did. A line is
// written when its send completes, or at exit for those still pending.
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import { WebSocketServer } from "ws";

function parseArgs(argv) {
  const o = {
    host: "127.0.0.1", port: 0, tlsCert: "", tlsKey: "", deflate: "off", contextTakeover: true, names: "ga",
    tokens: 20, ttftMs: -1, intervalMs: 10, stallMs: 0, stallAt: -1, stallResponse: 0, holdFile: "", holdAt: -1,
    audio: false,
    audioBytes: 4800, noise: false, inputTokens: 12, model: "gpt-realtime", log: "",
  };
  const flags = { "--audio": "audio", "--noise": "noise" };
  const values = {
    "--host": ["host", String], "--port": ["port", Number], "--tls-cert": ["tlsCert", String],
    "--tls-key": ["tlsKey", String], "--deflate": ["deflate", String], "--names": ["names", String],
    "--tokens": ["tokens", Number], "--ttft-ms": ["ttftMs", Number], "--interval-ms": ["intervalMs", Number],
    "--stall-ms": ["stallMs", Number], "--stall-at": ["stallAt", Number], "--stall-response": ["stallResponse", Number],
    "--hold-file": ["holdFile", String], "--hold-at": ["holdAt", Number],
    "--audio-bytes": ["audioBytes", Number], "--input-tokens": ["inputTokens", Number], "--model": ["model", String],
    "--log": ["log", String],
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--no-context-takeover") o.contextTakeover = false;
    else if (flags[a]) o[flags[a]] = true;
    else if (values[a] && i + 1 < argv.length) {
      const [key, conv] = values[a];
      o[key] = conv(argv[++i]);
      if (conv === Number && !Number.isFinite(o[key])) usage(`${a}: not a number`);
    } else usage(`unknown or incomplete option ${a}`);
  }
  if (!["on", "off"].includes(o.deflate)) usage("--deflate on|off");
  if (!["ga", "beta"].includes(o.names)) usage("--names ga|beta");
  if (!o.tlsCert !== !o.tlsKey) usage("--tls-cert and --tls-key go together");
  if (o.audioBytes % 2) usage("--audio-bytes: PCM16 samples, an even count");
  if (!o.holdFile !== (o.holdAt < 0)) usage("--hold-file and --hold-at go together");
  if (o.ttftMs < 0) o.ttftMs = o.intervalMs;
  return o;
}

function usage(msg) {
  process.stderr.write(`server.mjs: ${msg}\n`);
  process.exit(2);
}

const opt = parseArgs(process.argv.slice(2));
const beta = opt.names === "beta";
const T = beta
  ? { text: "response.text.delta", audio: "response.audio.delta", transcript: "response.audio_transcript.delta" }
  : { text: "response.output_text.delta", audio: "response.output_audio.delta",
      transcript: "response.output_audio_transcript.delta" };

// Audio deltas: PCM16 LE mono at 24 kHz, base64: a 440 Hz tone plus noise,
// different in every delta (as speech is: permessage-deflate compresses it
// about as little as real audio, and no delta repeats an earlier one).
let noiseState = 0x9e3779b9;
function audioB64() {
  const pcm = Buffer.alloc(opt.audioBytes);
  for (let i = 0; i < opt.audioBytes / 2; i++) {
    noiseState ^= noiseState << 13; noiseState ^= noiseState >>> 17; noiseState ^= noiseState << 5;
    const noise = (noiseState & 0x1fff) - 0x1000;
    pcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 24000)) + noise, 2 * i);
  }
  return pcm.toString("base64");
}

// ---- the ground-truth log ----------------------------------------------------------------

const logFd = opt.log ? fs.openSync(opt.log, "w") : -1;
const pending = new Set();  // entries whose send callback has not run
function logLine(e) {
  if (logFd < 0) return;
  const tok = e.token === undefined ? "" : `,"token":${e.token}`;
  const err = e.error ? `,"error":${JSON.stringify(e.error)}` : "";
  // t_ns / written_ns written as integers from the bigint (no double rounding).
  fs.writeSync(logFd, `{"conn":${e.conn},"seq":${e.seq},"type":${JSON.stringify(e.type)},"response_id":` +
    `${e.responseId ? JSON.stringify(e.responseId) : "null"}${tok},"bytes":${e.bytes},"buffered":${e.buffered},` +
    `"t_ns":${e.tNs},"written_ns":${e.writtenNs ?? "null"}${err}}\n`);
}
function flushAndExit(code) {
  for (const e of pending) logLine(e);
  pending.clear();
  if (logFd >= 0) fs.closeSync(logFd);
  process.exit(code);
}
process.on("SIGTERM", () => flushAndExit(0));
process.on("SIGINT", () => flushAndExit(0));

// ---- sessions ----------------------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function holdUntil(file) {
  while (!fs.existsSync(file)) await sleep(5);
}
let connCount = 0;

function sessionObject(s) {
  if (beta) {
    return { id: s.id, object: "realtime.session", model: s.model, modalities: s.modalities, voice: "alloy",
      input_audio_format: "pcm16", output_audio_format: "pcm16", instructions: s.instructions,
      turn_detection: null, tools: [], tool_choice: "auto", temperature: 0.8, max_response_output_tokens: "inf" };
  }
  return { type: "realtime", object: "realtime.session", id: s.id, model: s.model, output_modalities: s.modalities,
    instructions: s.instructions, tools: [], tool_choice: "auto", max_output_tokens: "inf",
    audio: { input: { format: { type: "audio/pcm", rate: 24000 }, turn_detection: null },
             output: { format: { type: "audio/pcm", rate: 24000 }, voice: "alloy", speed: 1.0 } } };
}

function rateLimits(s) {
  return { type: "rate_limits.updated", rate_limits: [
    { name: "requests", limit: 5000, remaining: 4999 - s.responses, reset_seconds: 0.012 },
    { name: "tokens", limit: 400000, remaining: 400000 - s.outputTokens, reset_seconds: 0.06 }] };
}

class Session {
  constructor(ws, req) {
    this.ws = ws;
    this.conn = connCount++;
    this.id = `sess_${this.conn}`;
    this.model = new URL(req.url, "http://x").searchParams.get("model") || opt.model;
    this.modalities = opt.audio ? ["audio"] : ["text"];
    if (beta && opt.audio) this.modalities = ["text", "audio"];
    this.instructions = "";
    this.seq = 0;
    this.events = 0;
    this.items = 0;
    this.responses = 0;      // responses started
    this.outputTokens = 0;
    this.queue = [];         // response.create events waiting
    this.busy = false;
    this.closed = false;
    ws.on("message", (data, isBinary) => this.onMessage(data, isBinary));
    ws.on("close", () => { this.closed = true; });
    ws.on("error", (e) => process.stderr.write(`server.mjs: conn ${this.conn}: ${e.message}\n`));
    this.send({ type: "session.created", session: sessionObject(this) });
  }

  send(msg, responseId = null, token = undefined) {
    if (this.closed || this.ws.readyState !== 1) return false;
    const text = JSON.stringify({ event_id: `event_${this.conn}_${this.events++}`, ...msg });
    const e = { conn: this.conn, seq: this.seq++, type: msg.type, responseId, token, bytes: Buffer.byteLength(text),
      buffered: this.ws.bufferedAmount, tNs: 0n, writtenNs: null };
    pending.add(e);
    e.tNs = process.hrtime.bigint();
    this.ws.send(text, (err) => {
      e.writtenNs = process.hrtime.bigint();
      if (err) e.error = err.message;
      pending.delete(e);
      logLine(e);
    });
    return true;
  }

  onMessage(data, isBinary) {
    let ev;
    try {
      ev = JSON.parse(data.toString());
    } catch {
      this.send({ type: "error", error: { type: "invalid_request_error", code: "invalid_json", message: "bad JSON" } });
      return;
    }
    switch (ev.type) {
      case "session.update": {
        if (ev.session?.instructions !== undefined) this.instructions = ev.session.instructions;
        const mods = ev.session?.output_modalities ?? ev.session?.modalities;
        if (Array.isArray(mods)) this.modalities = mods;
        this.send({ type: "session.updated", session: sessionObject(this) });
        break;
      }
      case "conversation.item.create": {
        const item = { id: ev.item?.id ?? `item_${this.conn}_${this.items++}`, object: "realtime.item",
          type: ev.item?.type ?? "message", role: ev.item?.role ?? "user", status: "completed",
          content: (ev.item?.content ?? []).map((c) => ({ type: c.type })) };
        if (beta) this.send({ type: "conversation.item.created", previous_item_id: null, item });
        else {
          this.send({ type: "conversation.item.added", previous_item_id: null, item });
          this.send({ type: "conversation.item.done", previous_item_id: null, item });
        }
        break;
      }
      case "input_audio_buffer.append": break;
      case "input_audio_buffer.commit":
        this.send({ type: "input_audio_buffer.committed", previous_item_id: null, item_id: `item_${this.conn}_${this.items++}` });
        break;
      case "response.create":
        this.queue.push(ev);
        if (!this.busy) this.run();
        break;
      case "response.cancel": break;
      default:
        this.send({ type: "error", error: { type: "invalid_request_error", code: "unknown_event",
          message: `unknown client event ${String(ev.type)}`, event_id: ev.event_id ?? null } });
    }
  }

  async run() {
    this.busy = true;
    while (this.queue.length && !this.closed) {
      this.queue.shift();
      await this.respond(this.responses++);
    }
    this.busy = false;
  }

  async respond(r) {
    const id = `resp_${this.conn}_${r}`;
    const itemId = `item_${this.conn}_${this.items++}`;
    const n = opt.tokens;
    const base = { id, object: "realtime.response", conversation_id: `conv_${this.conn}`,
      output_modalities: this.modalities, max_output_tokens: "inf", metadata: null };
    if (beta) { delete base.output_modalities; delete base.conversation_id; base.modalities = this.modalities; }
    this.send({ type: "response.created", response: { ...base, status: "in_progress", status_details: null, output: [],
      usage: null } }, id);
    if (opt.noise) this.send(rateLimits(this), id);
    const ids = { response_id: id, item_id: itemId, output_index: 0, content_index: 0 };
    let text = "";
    for (let k = 0; k < n; k++) {
      if (r === 0 && k === opt.holdAt) await holdUntil(opt.holdFile);
      let wait = k === 0 ? opt.ttftMs : opt.intervalMs;
      if (k === opt.stallAt && r === opt.stallResponse) wait += opt.stallMs;
      if (opt.noise && k > 0) {  // between the tokens: in the middle of the gap
        await sleep(wait / 2);
        if (k % 3 === 0) this.send(rateLimits(this), id);
        else if (k % 5 === 0) this.send({ type: "session.updated", session: sessionObject(this) }, id);
        await sleep(wait / 2);
      } else await sleep(wait);
      if (this.closed) return;
      const word = (k ? " " : "") + `word${k}`;
      text += word;
      if (opt.audio) {
        this.send({ type: T.audio, ...ids, delta: audioB64() }, id, k);
        this.send({ type: T.transcript, ...ids, delta: word }, id, k);
      } else {
        this.send({ type: T.text, ...ids, delta: word }, id, k);
      }
    }
    this.outputTokens += n;
    const audioTokens = opt.audio ? n : 0;
    const usage = { total_tokens: opt.inputTokens + n, input_tokens: opt.inputTokens, output_tokens: n,
      input_token_details: { text_tokens: opt.inputTokens, audio_tokens: 0, cached_tokens: 0 },
      output_token_details: { text_tokens: n - audioTokens, audio_tokens: audioTokens } };
    const content = opt.audio ? [{ type: beta ? "audio" : "output_audio", transcript: text }]
                              : [{ type: beta ? "text" : "output_text", text }];
    this.send({ type: "response.done", response: { ...base, status: "completed", status_details: null,
      output: [{ id: itemId, object: "realtime.item", type: "message", status: "completed", role: "assistant", content }],
      usage } }, id);
    if (opt.noise) this.send(rateLimits(this), id);
  }
}

// ---- listening ---------------------------------------------------------------------------

const onRequest = (req, res) => {
  res.writeHead(426, { "content-type": "application/json", connection: "close" });
  res.end(JSON.stringify({ error: { message: "WebSocket upgrade required on /v1/realtime" } }) + "\n");
};
const server = opt.tlsCert
  ? https.createServer({ cert: fs.readFileSync(opt.tlsCert), key: fs.readFileSync(opt.tlsKey) }, onRequest)
  : http.createServer(onRequest);
const perMessageDeflate = opt.deflate === "on"
  ? { threshold: 0, serverNoContextTakeover: !opt.contextTakeover, clientNoContextTakeover: !opt.contextTakeover }
  : false;
const wss = new WebSocketServer({ server, path: "/v1/realtime", perMessageDeflate, maxPayload: 64 << 20 });
wss.on("connection", (ws, req) => new Session(ws, req));
server.on("error", (e) => usage(`listen: ${e.message}`));
server.listen(opt.port, opt.host, () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});
