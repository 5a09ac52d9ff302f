// The inspector on a long session, timed (a benchmark, not a test: scripts/ui-bench.sh runs it).
// A synthetic coding session of $EVENTS events (default 10,000; team-written, generated here) is
// imported into a scratch `strata dev`; Chromium opens its page and loads the whole timeline
// page by page, three runs each with the page's rule that rows off screen are not laid out
// (`content-visibility: auto`) and, as the baseline, without it. Prints one JSON line per run
// and a side-by-side table.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const root = resolve(import.meta.dirname, "../..");
const strata = resolve(root, process.env.STRATA_BIN ?? "target/release/strata");
const events = Number(process.env.EVENTS ?? 10000);
const SESSION = "bench-long-session";

function session(n) {
  const lines = [];
  const at = (i) => new Date(Date.UTC(2026, 5, 3, 10) + i * 1000).toISOString().replace(".000", "");
  const ev = (i, type, payload) => lines.push(JSON.stringify({ event_id: `${SESSION}-${i}`,
    session_id: SESSION, timestamp: at(i), type, actor: "agent", payload }));
  ev(0, "SessionStarted", { model: { provider: "openai", model: "gpt-4o" }, context_window_tokens: 128000,
    reserved_output_tokens: 8000, system_prompt: "You are a careful engineer.",
    tools: [{ name: "bash", description: "run a command", schema: { type: "object" } }] });
  ev(1, "UserPromptSubmitted", { message_id: "u1", text: "Make the parser tests pass." });
  for (let i = 2, step = 1; i < n; step++) {
    const call = `call-${step}`;
    ev(i++, "ModelResponseReceived", { message_id: `m${step}`, text: `Step ${step}: reading src/mod_${step % 40}.py`,
      tool_calls: [{ tool_call_id: call, name: "bash", args: { cmd: `sed -n 1,80p src/mod_${step % 40}.py` } }] });
    if (i >= n) break;
    const body = Array.from({ length: 40 }, (_, k) => `${k}: def fn_${step}_${k}(x): return x + ${k}`).join("\n");
    ev(i++, "ToolCallFinished", { tool_call_id: call, output: body });
  }
  return lines.join("\n") + "\n";
}

const freePort = () => new Promise((ok) => {
  const s = createServer().listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => ok(port)); });
});

const dir = mkdtempSync(join(tmpdir(), "strata-ui-bench-"));
const file = join(dir, "session.jsonl");
writeFileSync(file, session(events));
execFileSync(strata, ["demo", "--data-dir", dir], { stdio: "ignore" });
execFileSync(strata, ["import", file, "--data-dir", dir], { stdio: "ignore" });
const port = await freePort();
const url = `http://127.0.0.1:${port}`;
const server = spawn(strata, ["dev", "--data-dir", dir, "--listen", `127.0.0.1:${port}`, "--fsync", "never"],
  { stdio: "ignore" });
for (let i = 0; i < 300; i++) {
  try { if ((await fetch(`${url}/readyz`)).ok) break; } catch { /* not yet */ }
  await new Promise((r) => setTimeout(r, 100));
}
const key = readFileSync(join(dir, "dev-api-key"), "utf8").trim();
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });

async function run(layoutAll) {
  // A fresh tab each run: the baseline's change to the stylesheet must not outlive its run.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${url}/ui`);
  await page.fill("#api-key", key);
  await page.click("button[type=submit]");
  await page.locator("#sessions a").first().waitFor();
  const t0 = Date.now();
  await page.goto(`${url}/ui#/s/${SESSION}`);
  await page.locator("#timeline .event").first().waitFor();
  const first = Date.now() - t0;
  if (layoutAll) {
    // The baseline: every row laid out (the stylesheet's rule removed through the CSSOM, which
    // the page's Content-Security-Policy allows).
    await page.evaluate(() => {
      for (const sheet of document.styleSheets) {
        for (let i = sheet.cssRules.length - 1; i >= 0; i--) {
          if (sheet.cssRules[i].cssText.includes("content-visibility")) sheet.deleteRule(i);
        }
      }
    });
  }
  // Timed inside the page: a driver's selectors over 20,000 rows would cost more than the page.
  const r = await page.evaluate(async () => {
    const more = [...document.querySelectorAll("button")].find((b) => b.textContent === "Load more events");
    const rows = () => document.getElementById("timeline").childElementCount;
    const times = [];
    const t = performance.now();
    while (!more.hidden) {
      const n = rows();
      const s = performance.now();
      more.click();
      while (rows() === n) await new Promise((ok) => setTimeout(ok, 2));
      await new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));
      times.push(performance.now() - s);
    }
    const total = performance.now() - t;
    const s = performance.now();
    window.scrollTo(0, document.body.scrollHeight);
    await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
    times.sort((a, b) => a - b);
    return { pages: times.length + 1, rows: rows(), all_pages_ms: Math.round(total),
      page_p50_ms: Math.round(times[times.length >> 1] ?? 0), page_max_ms: Math.round(times.at(-1) ?? 0),
      scroll_to_end_ms: Math.round(performance.now() - s) };
  });
  await context.close();
  return { first_page_ms: first, ...r };
}

try {
  const results = { "rows off screen skipped": [], "every row laid out (baseline)": [] };
  for (let i = 0; i < 3; i++) {
    for (const [name, all] of [["rows off screen skipped", false], ["every row laid out (baseline)", true]]) {
      const r = await run(all);
      console.log(JSON.stringify({ variant: name, ...r }));
      results[name].push(r);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  console.log(`\n${events} events imported (${results["rows off screen skipped"][0].rows} with what the services derived); medians of 3 runs`);
  console.log("variant                          first page  all pages  page p50  page max  scroll to end");
  for (const [name, rs] of Object.entries(results)) {
    const m = (k) => `${median(rs.map((r) => r[k]))} ms`;
    console.log(`${name.padEnd(32)} ${m("first_page_ms").padStart(10)} ${m("all_pages_ms").padStart(10)} ` +
      `${m("page_p50_ms").padStart(9)} ${m("page_max_ms").padStart(9)} ${m("scroll_to_end_ms").padStart(14)}`);
  }
} finally {
  await browser.close();
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}
