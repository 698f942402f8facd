// The web page at / in Debian's chromium, headless, driven by playwright-core (started by
// tests/test_web_page.cpp against a live server). Usage: node web_page.mjs PORT API_KEY SCREENSHOT_DIR.
// Checks: no console errors and no request leaving the server's origin; a chat message streams an answer;
// the engine view's charts receive samples and draw, the cache's hit rate beside Belady's MIN (the server streams); keyboard switches views; a wrong key shows the error.
import { chromium } from "playwright-core";

const [port, apiKey, shots] = process.argv.slice(2);
const origin = `http://127.0.0.1:${port}`;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

function check(cond, what, detail) {
  if (!cond) {
    console.error(`FAIL: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

// Polls fn in the page from here (the page's CSP forbids the eval that waitForFunction's polling uses).
async function waitFor(page, fn, timeout) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn)) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + fn);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu"] });
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  await context.addInitScript((key) => sessionStorage.setItem("moestream-key", key), apiKey);
  const page = await context.newPage();
  const consoleErrors = [], foreign = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith(origin)) foreign.push(r.url()); });

  await page.goto(origin + "/");
  await waitFor(page, () => document.getElementById("model").textContent.length > 0, 10000);
  check(true, "page loads and names the model");

  // Chat: Enter sends; the answer streams into the last assistant bubble.
  await page.fill("#prompt", "Hello there");
  await page.press("#prompt", "Enter");
  await page.waitForSelector(".msg.assistant[data-done='1']", { timeout: 30000 });
  const answer = await page.textContent(".msg.assistant");
  check(answer.trim().length > 0, "a chat message streams an answer", answer);
  check(await page.isDisabled("#stop") && !(await page.isDisabled("#send")), "stop disabled and send enabled after the answer");
  check((await page.textContent("#error")).trim() === "", "no error shown", await page.textContent("#error"));

  // Keyboard: ArrowRight on the focused tab opens the engine view.
  await page.focus("#tab-chat");
  await page.keyboard.press("ArrowRight");
  check(await page.isVisible("#view-engine") && !(await page.isVisible("#view-chat")), "arrow key switches to the engine view");
  await waitFor(page, () => Number(document.getElementById("samples-received").textContent) >= 2, 15000);
  check(true, "the engine view receives samples");
  const drawn = await page.evaluate(() => {
    const c = document.getElementById("c-rss"), g = c.getContext("2d");
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) ink++;
    return ink;
  });
  check(drawn > 50, "the memory chart is drawn", drawn);
  const rows = await page.$$eval("#decisions tr", (trs) => trs.length);
  check(rows >= 6, "decisions table filled", rows);
  // The server streams experts: within a few samples the cache row shows its hit rate against MIN's.
  await waitFor(page, () => /against MIN's \d/.test(document.getElementById("decisions").textContent), 20000);
  check(true, "the cache's hit rate is shown against the best possible");
  await page.screenshot({ path: `${shots}/web-engine.png`, fullPage: true });
  await page.click("#tab-chat");
  await page.screenshot({ path: `${shots}/web-chat.png` });
  check(consoleErrors.length === 0, "no console errors", consoleErrors);
  check(foreign.length === 0, "no request leaves the server", foreign);

  // A wrong key: the page says so and asks for the key.
  const bad = await browser.newContext();
  await bad.addInitScript(() => sessionStorage.setItem("moestream-key", "wrong-key"));
  const badPage = await bad.newPage();
  await badPage.goto(origin + "/");
  await waitFor(badPage, () => document.getElementById("error").textContent.length > 0, 10000);
  const err = await badPage.textContent("#error");
  check(/API key/i.test(err), "a wrong key shows the error", err);
  check(await badPage.isVisible("#key-dialog"), "and asks for the key");
  console.log("all web page checks passed");
} finally {
  await browser.close();
}
