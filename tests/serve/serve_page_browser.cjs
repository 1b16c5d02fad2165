// Drives headless Chromium over the DevTools protocol (--remote-debugging-pipe):
// opens URL (serve's page with ?prompt=...), waits until the page's status says
// done or error (the streamed answer is complete), saves a screenshot and prints
// the page's HTML. Used by tests/serve/test_serve_clients.cpp.
// usage: node serve_page_browser.cjs URL SCREENSHOT.png PROFILE_DIR
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const [url, shotPath, profile] = process.argv.slice(2);

const chrome = spawn("chromium", [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
  "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank",
], { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
const toChrome = chrome.stdio[3], fromChrome = chrome.stdio[4];
let nextId = 0, buffer = "";
const pending = new Map();
fromChrome.on("data", (data) => {
  buffer += data.toString();
  let end;
  while ((end = buffer.indexOf("\0")) >= 0) {
    const msg = JSON.parse(buffer.slice(0, end));
    buffer = buffer.slice(end + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    }
  }
});
function send(method, params = {}, sessionId) {
  return new Promise((resolve, reject) => {
    const msg = { id: ++nextId, method, params };
    if (sessionId) msg.sessionId = sessionId;
    pending.set(msg.id, { resolve, reject });
    toChrome.write(JSON.stringify(msg) + "\0");
  });
}
const evaluate = async (expression, session) =>
  (await send("Runtime.evaluate", { expression, returnByValue: true }, session)).result.value;

async function main() {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  await send("Page.enable", {}, sessionId);
  await send("Emulation.setDeviceMetricsOverride",
             { width: 1000, height: 700, deviceScaleFactor: 1, mobile: false }, sessionId);
  await send("Page.navigate", { url }, sessionId);
  const deadline = Date.now() + 240000;
  for (;;) {
    const status = await evaluate(
        "document.getElementById('status') ? document.getElementById('status').textContent : ''",
        sessionId);
    if (status === "done" || status === "error" || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const html = await evaluate("document.documentElement.outerHTML", sessionId);
  const shot = await send("Page.captureScreenshot", { format: "png" }, sessionId);
  fs.writeFileSync(shotPath, Buffer.from(shot.data, "base64"));
  process.stdout.write(html);
  await send("Browser.close").catch(() => {});
}

main().then(() => process.exit(0), (e) => {
  console.error("browser driver failed:", e);
  chrome.kill();
  process.exit(1);
});
