// Many concurrent chat-completion streams on ONE HTTP/2 connection, with
// Node's built-in http2 module (no npm package): the HTTP/2 integration tests'
// multiplexing client. One NDJSON line per stream on stdout, at its end:
//   {"index":0,"stream_id":1,"status":200,"events":18,"content_events":16,"bytes":4321,
//    "start_ns":..,"end_ns":..}
// `events` counts SSE events ("data: [DONE]" included), `content_events` those
// with a non-empty delta.content, `bytes` the DATA payload received; start_ns /
// end_ns: CLOCK_MONOTONIC (process.hrtime) at the request and at the stream's end.
//
//   node h2_streams.mjs URL STREAMS TOKENS [--ca FILE] [--pause-stream I --pause-after K --pause-ms MS]
//
// URL is https://host:port (h2 by ALPN; --ca trusts a test certificate) or
// http://host:port (h2c, prior knowledge). With --pause-stream, request I asks
// the server (sample-server's body fields) for one pause after content event K.
import http2 from 'node:http2';
import fs from 'node:fs';

function parseArgs(argv) {
  const [url, streams, tokens, ...rest] = argv;
  if (!url || !(Number(streams) > 0) || !(Number(tokens) > 0)) {
    console.error('usage: h2_streams.mjs URL STREAMS TOKENS [--ca FILE] [--pause-stream I --pause-after K --pause-ms MS]');
    process.exit(2);
  }
  const opt = { url, streams: Number(streams), tokens: Number(tokens), pauseStream: -1, pauseAfter: 0, pauseMs: 0 };
  for (let i = 0; i < rest.length; i += 2) {
    const v = rest[i + 1];
    if (rest[i] === '--ca') opt.ca = fs.readFileSync(v);
    else if (rest[i] === '--pause-stream') opt.pauseStream = Number(v);
    else if (rest[i] === '--pause-after') opt.pauseAfter = Number(v);
    else if (rest[i] === '--pause-ms') opt.pauseMs = Number(v);
    else { console.error(`unknown option ${rest[i]}`); process.exit(2); }
  }
  return opt;
}

// Counts complete SSE events in the text received so far; keeps the rest.
function countEvents(state, text) {
  state.pending += text;
  let cut;
  while ((cut = state.pending.indexOf('\n\n')) >= 0) {
    const event = state.pending.slice(0, cut);
    state.pending = state.pending.slice(cut + 2);
    if (!event.startsWith('data:')) continue;
    state.events += 1;
    const payload = event.slice(5).trim();
    if (payload === '[DONE]') continue;
    try {
      const content = JSON.parse(payload).choices?.[0]?.delta?.content;
      if (content) state.contentEvents += 1;
    } catch { /* not JSON: an event all the same */ }
  }
}

function runStream(session, opt, index) {
  const body = { model: 'h2-client', stream: true, max_tokens: opt.tokens, messages: [{ role: 'user', content: 'hi' }] };
  if (index === opt.pauseStream) Object.assign(body, { pause_after: opt.pauseAfter, pause_ms: opt.pauseMs });
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = session.request({
      ':method': 'POST', ':path': '/v1/chat/completions',
      'content-type': 'application/json', 'content-length': Buffer.byteLength(payload),
    });
    const startNs = process.hrtime.bigint();
    const state = { index, stream_id: 0, status: 0, events: 0, content_events: 0, bytes: 0, pending: '', contentEvents: 0 };
    req.on('ready', () => { state.stream_id = req.id; });
    req.on('response', (headers) => { state.status = headers[':status']; });
    req.setEncoding('utf8');
    req.on('data', (chunk) => { state.bytes += Buffer.byteLength(chunk); countEvents(state, chunk); });
    req.on('end', () => {
      resolve({ index, stream_id: state.stream_id || req.id, status: state.status, events: state.events,
                content_events: state.contentEvents, bytes: state.bytes,
                start_ns: Number(startNs), end_ns: Number(process.hrtime.bigint()) });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const opt = parseArgs(process.argv.slice(2));
const session = http2.connect(opt.url, opt.ca ? { ca: opt.ca } : {});
session.on('error', (e) => { console.error(`session error: ${e.message}`); process.exit(1); });
const runs = [];
for (let i = 0; i < opt.streams; i++) runs.push(runStream(session, opt, i));
try {
  for (const r of await Promise.all(runs)) console.log(JSON.stringify(r));
  session.close();
} catch (e) {
  console.error(`stream error: ${e.message}`);
  process.exit(1);
}
