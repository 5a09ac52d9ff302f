// The inspector on a long session, timed (a benchmark, not a test: scripts/ui-bench.sh runs it).
// A synthetic coding session of $EVENTS events (default 10,000; team-written, generated here) is
// imported into a scratch `strata dev`; Chromium opens its page and loads the whole timeline
// page by page, then scrolls to its end and back down by jumps of five screens; three runs each
// with the timeline's windowing (only the pages near the screen in the document) and, as the
// baseline, with every row kept in (`?rows=all`, the page before windowing). Prints one JSON
// line per run and a side-by-side table.
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

async function run(keepAll) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${url}/ui`);
  await page.fill("#api-key", key);
  await page.click("button[type=submit]");
  await page.locator("#sessions a").first().waitFor();
  const t0 = Date.now();
  await page.goto(`${url}/ui#/s/${SESSION}${keepAll ? "?rows=all" : ""}`);
  await page.locator("#timeline .event").first().waitFor();
  const first = Date.now() - t0;
  // Timed inside the page: a driver's selectors over 20,000 rows would cost more than the page.
  const r = await page.evaluate(async () => {
    const more = [...document.querySelectorAll("button")].find((b) => b.textContent === "Load more events");
    const rows = () => Number(document.getElementById("timeline").dataset.rows);
    const frame = () => new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));
    const times = [];
    const t = performance.now();
    while (!more.hidden) {
      const n = rows();
      const s = performance.now();
      more.click();
      while (rows() === n && !more.hidden) await new Promise((ok) => setTimeout(ok, 2));
      await frame();
      times.push(performance.now() - s);
    }
    const total = performance.now() - t;
    await frame();
    const nodes = document.getElementsByTagName("*").length;
    const s = performance.now();
    window.scrollTo(0, document.body.scrollHeight);
    await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
    const scrolled = performance.now() - s;
    // Back to the top and down again by screenfuls: what reading the timeline costs per step.
    window.scrollTo(0, 0);
    await frame();
    const steps = [];
    for (let y = 0; y < document.body.scrollHeight && steps.length < 200; y += 5 * window.innerHeight) {
      const s = performance.now();
      window.scrollTo(0, y);
      await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
      steps.push(performance.now() - s);
    }
    times.sort((a, b) => a - b);
    steps.sort((a, b) => a - b);
    return { pages: times.length + 1, rows: rows(), nodes_in_page: nodes,
      js_heap_mb: Math.round((performance.memory?.usedJSHeapSize ?? 0) / 1e6),
      all_pages_ms: Math.round(total),
      page_p50_ms: Math.round(times[times.length >> 1] ?? 0), page_max_ms: Math.round(times.at(-1) ?? 0),
      scroll_to_end_ms: Math.round(scrolled),
      jump_p50_ms: Math.round(steps[steps.length >> 1] ?? 0), jump_max_ms: Math.round(steps.at(-1) ?? 0) };
  });
  await context.close();
  return { first_page_ms: first, ...r };
}

const WINDOWED = "pages near the screen only";
const ALL = "every row in the page (baseline)";

try {
  const results = { [WINDOWED]: [], [ALL]: [] };
  for (let i = 0; i < 3; i++) {
    for (const [name, all] of (i % 2 ? [[WINDOWED, false], [ALL, true]] : [[ALL, true], [WINDOWED, false]])) {
      const r = await run(all);
      console.log(JSON.stringify({ variant: name, ...r }));
      results[name].push(r);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  console.log(`\n${events} events imported (${results[WINDOWED][0].rows} with what the services derived); medians of 3 runs`);
  const columns = [["first page", "first_page_ms", " ms"], ["all pages", "all_pages_ms", " ms"],
    ["page p50", "page_p50_ms", " ms"], ["page max", "page_max_ms", " ms"],
    ["to end", "scroll_to_end_ms", " ms"], ["jump p50", "jump_p50_ms", " ms"],
    ["jump max", "jump_max_ms", " ms"], ["nodes", "nodes_in_page", ""], ["JS heap", "js_heap_mb", " MB"]];
  console.log(`${"variant".padEnd(34)}${columns.map(([t]) => t.padStart(11)).join("")}`);
  for (const [name, rs] of Object.entries(results)) {
    console.log(name.padEnd(34) + columns.map(([, k, unit]) =>
      `${median(rs.map((r) => r[k]))}${unit}`.padStart(11)).join(""));
  }
} finally {
  await browser.close();
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}
