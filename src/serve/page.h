#pragma once
// The page at `/`: a chat that streams the answer and colours each piece by
// who produced it (an accepted draft token or the target's own), with live
// tokens/s and, when the answer is done, τ and α from the response's timings.
// Plain HTML and JavaScript, no build step. `/?prompt=TEXT` sends TEXT at once
// (the browser test uses it; also max_tokens=N, temperature=T).
namespace parspec {

inline constexpr const char* kChatPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>parspec</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f6f6f4; color: #222; }
  header { padding: 10px 16px; background: #20242c; color: #eee; display: flex; gap: 16px;
           align-items: baseline; flex-wrap: wrap; }
  header b { font-size: 17px; }
  #stats span { margin-right: 14px; font-variant-numeric: tabular-nums; }
  main { max-width: 860px; margin: 0 auto; padding: 12px 16px 120px; }
  .turn { margin: 10px 0; padding: 10px 12px; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #dde7f3; }
  .assistant { background: #fff; border: 1px solid #ddd; }
  .draft { background: #c9f0c9; }
  .target { background: #fff0c2; }
  .legend span { padding: 1px 6px; border-radius: 4px; margin-left: 6px; color: #222; }
  form { position: fixed; bottom: 0; left: 0; right: 0; background: #eee; padding: 10px;
         display: flex; gap: 8px; border-top: 1px solid #ccc; }
  textarea { flex: 1; height: 48px; font: inherit; }
  input { width: 90px; }
  .err { color: #b00; }
</style>
</head>
<body>
<header>
  <b>parspec</b><span id="model">…</span>
  <span class="legend">tokens: <span class="draft">accepted draft</span><span class="target">target</span></span>
  <span id="stats"><span id="tps">tok/s –</span><span id="tau">τ –</span><span id="alpha">α –</span><span id="status">idle</span></span>
</header>
<main id="log"></main>
<form id="form">
  <textarea id="prompt" placeholder="Ask something (Enter sends, Shift+Enter: new line)"></textarea>
  <label>max <input id="max" type="number" value="128" min="1"></label>
  <label>temp <input id="temp" type="number" value="0" step="0.1" min="0" max="2"></label>
  <label>key <input id="key" type="password" placeholder="API key"></label>
  <button id="send">Send</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let modelId = "", chat = true;
$("key").value = localStorage.getItem("parspec-key") || "";

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) { h["Authorization"] = "Bearer " + key; localStorage.setItem("parspec-key", key); }
  return h;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    const m = j.data[0];
    modelId = m.id;
    chat = !!(m.meta && m.meta.chat_template);
    $("model").textContent = m.id + " · " + m.meta.strategy +
        (chat ? " · chat (" + m.meta.chat_template + ")" : " · completion (no chat template)");
  } catch (e) { $("model").textContent = "cannot read /v1/models: " + e; }
}

function addTurn(cls, text) {
  const d = document.createElement("div");
  d.className = "turn " + cls;
  d.textContent = text;
  $("log").appendChild(d);
  return d;
}

async function send(text) {
  const out = addTurn("user", text);
  const answer = addTurn("assistant", "");
  answer.id = "answer-" + history.length;
  history.push({ role: "user", content: text });
  const body = { model: modelId, stream: true, max_tokens: Number($("max").value),
                 temperature: Number($("temp").value) };
  let url;
  if (chat) { url = "/v1/chat/completions"; body.messages = history; }
  else { url = "/v1/completions"; body.prompt = text; }
  $("status").textContent = "generating";
  const t0 = performance.now();
  let pieces = 0, targetPieces = 0, full = "", tFirst = 0;
  try {
    const r = await fetch(url, { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!r.ok) { const j = await r.json(); throw new Error(j.error ? j.error.message : r.status); }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "", done = false;
    while (!done) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buf += decoder.decode(chunk.value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 2);
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") { done = true; break; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const c = j.choices && j.choices[0];
        if (!c) continue;
        const piece = chat ? (c.delta && c.delta.content) : c.text;
        if (piece) {
          if (!tFirst) tFirst = performance.now();
          const s = document.createElement("span");
          s.className = j.source === "draft" ? "draft" : "target";
          s.textContent = piece;
          answer.appendChild(s);
          full += piece;
          pieces++;
          if (j.source !== "draft") targetPieces++;
          const secs = (performance.now() - t0) / 1000;
          $("tps").textContent = "tok/s " + (pieces / secs).toFixed(1);
          $("tau").textContent = "τ ≈ " + (pieces / Math.max(1, targetPieces)).toFixed(2);
        }
        if (j.timings) {
          const t = j.timings;
          $("tps").textContent = "tok/s " + t.predicted_per_second.toFixed(1);
          $("tau").textContent = "τ " + t.tau.toFixed(2);
          $("alpha").textContent = "α " + (t.drafted > 0 ? t.alpha.toFixed(3) : "–");
        }
      }
    }
    history.push({ role: "assistant", content: full });
    $("status").textContent = "done";
  } catch (e) {
    answer.classList.add("err");
    answer.textContent += " [error: " + e.message + "]";
    $("status").textContent = "error";
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("prompt").value;
  if (!text.trim()) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});

(async () => {
  await loadModel();
  const q = new URLSearchParams(location.search);
  if (q.get("max_tokens")) $("max").value = q.get("max_tokens");
  if (q.get("temperature")) $("temp").value = q.get("temperature");
  if (q.get("prompt")) send(q.get("prompt"));
})();
</script>
</body>
</html>
)PAGE";

}  // namespace parspec
