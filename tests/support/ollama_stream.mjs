// The official `ollama` npm package streaming from an Ollama-format server,
// as a Node.js application would: ollama.chat and ollama.generate with
// stream: true.
//
//   node ollama_stream.mjs HOST TOKENS [REQUESTS]
//
// NODE_PATH names the node_modules that holds `ollama` (scripts/setup.sh
// installs it). Prints one line per request:
// {"api":"chat"|"generate","content_events":N,"eval_count":N,"done_reason":"..","first_ns":..,"last_ns":..}
// (process.hrtime: CLOCK_MONOTONIC, the clock of the other logs); requests
// alternate chat and generate; exits 1 on any failure.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { Ollama } = await import(require.resolve("ollama"));

const [host, tokens, requests = "2"] = process.argv.slice(2);
const ollama = new Ollama({ host });
try {
  for (let i = 0; i < Number(requests); i++) {
    const api = i % 2 === 0 ? "chat" : "generate";
    const options = { num_predict: Number(tokens) };
    const stream =
      api === "chat"
        ? await ollama.chat({ model: "llama3.2", messages: [{ role: "user", content: "Why is the sky blue?" }], stream: true, options })
        : await ollama.generate({ model: "llama3.2", prompt: "Why is the sky blue?", stream: true, options });
    let content = 0, first = 0n, last = 0n, evalCount = null, doneReason = null;
    for await (const part of stream) {
      const text = api === "chat" ? part.message?.content : part.response;
      if (text) {
        last = process.hrtime.bigint();
        if (!content++) first = last;
      }
      if (part.done) {
        evalCount = part.eval_count;
        doneReason = part.done_reason;
      }
    }
    console.log(JSON.stringify({ api, content_events: content, eval_count: evalCount, done_reason: doneReason,
                                 first_ns: String(first), last_ns: String(last) }));
  }
} catch (e) {
  console.error(`ollama_stream: ${e?.stack ?? e}`);
  process.exit(1);
}
