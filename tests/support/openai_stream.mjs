// The official `openai` npm package streaming a chat completion from an
// OpenAI-compatible server over HTTPS, as a Node.js application would.
//
//   node openai_stream.mjs BASE_URL TOKENS [REQUESTS]
//
// NODE_PATH names the node_modules that holds `openai`; NODE_EXTRA_CA_CERTS
// the server's certificate. Prints one line per request:
// {"content_events":N,"first_ns":..,"last_ns":..} (process.hrtime, the
// CLOCK_MONOTONIC of the other logs); exits 1 on any failure.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const { default: OpenAI } = await import(require.resolve("openai"));

const [baseURL, tokens, requests = "1"] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0 });
for (let i = 0; i < Number(requests); i++) {
  const stream = await client.chat.completions.create({
    model: "infertap-sample",
    messages: [{ role: "user", content: "Write a short story about timestamps." }],
    max_tokens: Number(tokens),
    stream: true,
  });
  let content = 0, first = 0n, last = 0n;
  for await (const chunk of stream) {
    if (chunk.choices?.[0]?.delta?.content) {
      last = process.hrtime.bigint();
      if (!content++) first = last;
    }
  }
  console.log(JSON.stringify({ content_events: content, first_ns: String(first), last_ns: String(last) }));
}
