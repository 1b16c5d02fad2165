// OpenAI's own Node client against `parspec serve` (tests/serve/test_serve_clients.cpp):
// a completion, a chat completion, and both streamed; prints what it received as JSON.
// usage: node serve_openai_client.cjs NODE_MODULES_DIR BASE_URL API_KEY
"use strict";
const [modules, baseURL, apiKey] = process.argv.slice(2);
const mod = require(modules + "/openai");
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  const out = {};
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);
  const model = out.models[0];

  const completion = await client.completions.create({
    model, prompt: "def add(a, b):", max_tokens: 32, temperature: 0 });
  out.completion = completion.choices[0].text;
  out.completion_usage = completion.usage;

  let streamed = "";
  const stream = await client.completions.create({
    model, prompt: "def add(a, b):", max_tokens: 32, temperature: 0, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0] ? chunk.choices[0].text : "";
  out.completion_stream = streamed;

  const messages = [{ role: "user", content: "What is 2 + 3?" }];
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 32, temperature: 0 });
  out.chat = chat.choices[0].message.content;
  out.chat_finish = chat.choices[0].finish_reason;

  let chatStreamed = "";
  const chatStream = await client.chat.completions.create({
    model, messages, max_tokens: 32, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  for await (const chunk of chatStream) {
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content)
      chatStreamed += chunk.choices[0].delta.content;
    if (chunk.usage) out.chat_stream_usage = chunk.usage;
  }
  out.chat_stream = chatStreamed;

  try {
    await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
    out.unknown_model_status = 200;
  } catch (e) {
    out.unknown_model_status = e.status;
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error("client failed:", e);
  process.exit(1);
});
