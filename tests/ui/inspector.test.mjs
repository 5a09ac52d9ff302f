// The inspector (/ui) end to end: Debian's Chromium, driven by playwright-core, against a real
// `strata dev` loaded with the demo (tenant `dev`) and two of the team's scenario sessions
// (tenant `acme`: a session forked into branches, and a debate of several participants), and a
// long agent turn generated here (tenant `dev`).
// Screenshots go to $STRATA_UI_SCREENSHOTS (default target/ui-screenshots) for a person to see.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const root = resolve(import.meta.dirname, "../..");
const strata = resolve(root, process.env.STRATA_BIN ?? "target/debug/strata");
const shots = resolve(root, process.env.STRATA_UI_SCREENSHOTS ?? "target/ui-screenshots");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

let dataDir, server, url, devKey, acmeKey, browser, log = "";

// A long agent turn (tenant `dev`): a task, then a call and its result per step.
const LONG = "ui-long-session";
const LONG_EVENTS = 900;

function longSession() {
  const lines = [];
  const at = (i) => new Date(Date.UTC(2026, 5, 3, 10) + i * 1000).toISOString().replace(".000", "");
  const ev = (i, type, payload) => lines.push(JSON.stringify({ event_id: `${LONG}-${i}`,
    session_id: LONG, timestamp: at(i), type, actor: "agent", payload }));
  ev(0, "SessionStarted", { model: { provider: "openai", model: "gpt-4o" },
    context_window_tokens: 128000, reserved_output_tokens: 8000, system_prompt: "You are careful.",
    tools: [{ name: "bash", description: "run a command", schema: { type: "object" } }] });
  ev(1, "UserPromptSubmitted", { message_id: "u1", text: "Make the parser tests pass." });
  for (let i = 2, step = 1; i + 1 < LONG_EVENTS; step++) {
    ev(i++, "ModelResponseReceived", { message_id: `m${step}`, text: `Step ${step}: reading mod_${step}.py`,
      tool_calls: [{ tool_call_id: `call-${step}`, name: "bash", args: { cmd: `cat src/mod_${step}.py` } }] });
    ev(i++, "ToolCallFinished", { tool_call_id: `call-${step}`, output: `def fn_${step}(x):\n    return x` });
  }
  return lines.join("\n") + "\n";
}

function cli(...args) {
  return execFileSync(strata, [...args, "--data-dir", dataDir], { encoding: "utf8" }).trim();
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

async function ready(base) {
  for (let i = 0; i < 300; i++) {
    if (server.exitCode !== null) throw new Error(`strata dev exited:\n${log}`);
    try {
      if ((await fetch(`${base}/readyz`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`strata dev not ready in 30 s:\n${log}`);
}

before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "strata-ui-"));
  mkdirSync(shots, { recursive: true });
  cli("demo");
  cli("import", resolve(root, "tests/scenarios/branch_isolation.jsonl"),
    resolve(root, "tests/scenarios/debate_speaker_attribution.jsonl"));
  const long = join(dataDir, "long.jsonl");
  writeFileSync(long, longSession());
  cli("import", long);
  acmeKey = cli("keys", "create", "--tenant", "acme");
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  server = spawn(strata, ["dev", "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`,
    "--fsync", "never"], { stdio: ["ignore", "pipe", "pipe"] });
  server.stdout.on("data", (d) => (log += d));
  server.stderr.on("data", (d) => (log += d));
  await ready(url);
  devKey = readFileSync(join(dataDir, "dev-api-key"), "utf8").trim();
  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  server?.kill("SIGTERM");
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** A fresh tab (its own sessionStorage) that fails the test on any request off this server. */
async function tab() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const offsite = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(url)) offsite.push(r.url());
  });
  const errors = [];
  page.on("pageerror", (e) => {
    errors.push(String(e));
    console.error(`script error in the page: ${e}`);
  });
  page.done = async () => {
    assert.deepEqual(offsite, [], "requests left the server");
    assert.deepEqual(errors, [], "script errors");
    await context.close();
  };
  return page;
}

async function signIn(page, key) {
  await page.goto(`${url}/ui`);
  await page.fill("#api-key", key);
  await page.click("button[type=submit]");
}

test("a refused key is told so and nothing is shown", async () => {
  const page = await tab();
  await signIn(page, "sk_not_a_key");
  await page.getByRole("alert").waitFor();
  assert.match(await page.getByRole("alert").innerText(), /refused/);
  assert.equal(await page.locator("#sessions").count(), 0);
  await page.done();
});

test("a tenant sees its sessions, their branch tree and participants, and never another's", async () => {
  const page = await tab();
  await signIn(page, acmeKey);
  await page.locator("#sessions a").first().waitFor();
  const listed = await page.locator("#sessions a").allInnerTexts();
  assert.ok(listed.includes("scn-branches"), listed.join(", "));
  assert.ok(!listed.includes("demo-invoice-fix"), "another tenant's session is listed");
  await page.screenshot({ path: join(shots, "sessions.png") });
  // Each row says when it last moved, its branches and who took part.
  const row = await page.locator("#sessions tr", { hasText: "scn-branches" }).evaluate((r) =>
    [...r.cells].map((c) => c.innerText));
  assert.match(row[1], /^\d{4}-\d\d-\d\dT/, row.join(" | "));
  assert.ok(Number(row[3]) >= 2, `branches: ${row.join(" | ")}`);
  assert.ok(row[4].length > 0, `participants: ${row.join(" | ")}`);
  // A search asks the server, so it reaches past the page loaded.
  await page.fill("#filter", "branch");
  await page.press("#filter", "Enter");
  await page.waitForFunction(() => document.querySelectorAll("#sessions tbody tr").length === 1);
  assert.deepEqual(await page.locator("#sessions a").allInnerTexts(), ["scn-branches"]);
  // By a participant: only the debate had a moderator.
  await page.fill("#filter", "moderator");
  await page.press("#filter", "Enter");
  await page.waitForFunction(() => document.querySelector("#sessions a")?.textContent === "scn-debate");
  assert.deepEqual(await page.locator("#sessions a").allInnerTexts(), ["scn-debate"]);
  await page.fill("#filter", "demo");
  await page.press("#filter", "Enter");
  await page.locator("#sessions + p.muted").waitFor();
  assert.equal(await page.locator("#sessions tbody tr").count(), 0, "another tenant's session is found");
  await page.goto(`${url}/ui#/`);
  await page.locator("#sessions a").first().waitFor();

  await page.click("text=scn-branches");
  await page.locator("#branches").waitFor();
  const tree = await page.locator("#branches").innerText();
  assert.match(tree, /main/);
  assert.match(tree, /forked at seq \d+/, tree);
  await page.locator("#timeline .event").first().waitFor();
  assert.ok((await page.locator("#timeline .event").count()) > 10);
  await page.screenshot({ path: join(shots, "session-branches.png"), fullPage: true });

  // The debate's speakers are its participants, each event labelled with its own.
  await page.goto(`${url}/ui#/`);
  const debate = listed.find((s) => s !== "scn-branches");
  await page.click(`text=${debate}`);
  await page.locator("#timeline .event").first().waitFor();
  // textContent: rows off screen are not rendered, so they have no innerText.
  const speakers = new Set(await page.locator("#timeline .event .row > .muted").evaluateAll((l) =>
    l.map((e) => e.textContent)));
  assert.ok(speakers.size >= 3, [...speakers].join(", "));

  // Another tenant's session by its id: refused, and none of its content on the page.
  await page.goto(`${url}/ui#/s/demo-invoice-fix`);
  await page.getByRole("alert").waitFor();
  assert.match(await page.getByRole("alert").innerText(), /404/);
  assert.doesNotMatch(await page.locator("main").innerText(), /invoice bug|round_cents|half-even/);
  await page.done();
});

test("an assembly shows its window by section, what it left out and why", async () => {
  const page = await tab();
  await signIn(page, devKey);
  await page.click("text=demo-invoice-fix");
  await page.locator("#task-state").waitFor();
  assert.match(await page.locator("#task-state").innerText(), /invoice bug/);
  // An offloaded output: its preview inline, its raw bytes only when asked for.
  const offloaded = page.locator("#timeline .event", { has: page.locator("button.raw-bytes") }).first();
  // Rows off screen are not rendered (content-visibility), so their text is read on screen.
  await offloaded.scrollIntoViewIfNeeded();
  const preview = await offloaded.locator("pre").first().innerText();
  assert.match(preview, /bytes in artifact:sha256:[0-9a-f]{64}; preview:/);
  await offloaded.locator("button.raw-bytes").click();
  await offloaded.locator(".raw pre").waitFor();
  const raw = await offloaded.locator(".raw pre").innerText();
  assert.ok(raw.length > 0 && !raw.includes("preview:"), raw.slice(0, 200));
  // "Why?" on an event of the timeline: the first recorded assembly after it answers.
  const event = page.locator("#ev-demo-invoice-fix-0010");
  await event.scrollIntoViewIfNeeded();
  await event.locator(".why-button").click();
  await event.locator(".why pre").waitFor();
  const because = await event.locator(".why pre").innerText();
  assert.match(because, /superseded|included|left out/i, because);
  assert.ok(await event.locator(".why a[href^='#/a/']").count() === 1, "it names the assembly");
  await page.click("#timeline a.built");
  await page.locator("#context-bar").waitFor();
  const sections = await page.locator("#context-bar span").evaluateAll((s) =>
    s.map((e) => [e.dataset.section, parseFloat(e.style.width)]));
  const names = sections.map(([n]) => n);
  for (const expected of ["system and tools", "task state"]) {
    assert.ok(names.includes(expected), names.join(", "));
  }
  // The default policy sends the history line by line; the long-turn policies by turn.
  assert.ok(names.includes("history") || names.includes("current turn"), names.join(", "));
  assert.ok(!names.includes("other"), `a segment kind with no section: ${names.join(", ")}`);
  assert.ok(sections.every(([, w]) => w > 0 && w <= 100), JSON.stringify(sections));
  assert.match(await page.locator("#window").innerText(), /transcript replay would send \d+/);
  assert.ok((await page.locator("#included tbody tr").count()) >= 3);
  const reasons = await page.locator("#omitted [data-reason]").evaluateAll((l) =>
    l.map((e) => e.dataset.reason));
  assert.ok(reasons.includes("superseded"), reasons.join(", "));
  await page.screenshot({ path: join(shots, "assembly.png"), fullPage: true });

  // Why not: the first read of a file the demo read again later.
  await page.fill("#why-not input", "demo-invoice-fix-0010");
  await page.click("#why-not button");
  await page.locator("#why-not-answer pre").waitFor();
  const answer = await page.locator("#why-not-answer pre").innerText();
  assert.match(answer, /demo-invoice-fix-0010|verdict|included|omitted/i, answer);
  await page.screenshot({ path: join(shots, "why-not.png"), fullPage: true });

  // Assembling now: the provider request as it would be sent, and the traced record with
  // every candidate left out.
  await page.goto(`${url}/ui#/s/demo-invoice-fix`);
  await page.locator("#assemble").waitFor();
  await page.screenshot({ path: join(shots, "session.png") });
  await page.click("#assemble");
  await page.locator("#provider-request").waitFor();
  const request = JSON.parse(await page.locator("#provider-request pre").innerText());
  assert.ok(Array.isArray(request.messages) && request.messages.length > 3);
  assert.equal(request.messages[0].role, "system");
  assert.ok((await page.locator("#omitted tbody tr").count()) > 0, "a traced record lists its omissions");

  // The two recorded assemblies side by side: the demo's and the one just made.
  await page.goto(`${url}/ui#/s/demo-invoice-fix`);
  await page.locator("#assemblies tbody tr").nth(1).waitFor();
  const boxes = page.locator("#assemblies tbody input[type=checkbox]");
  assert.equal(await boxes.count(), 2);
  assert.ok(await page.locator("#compare").isDisabled());
  await boxes.nth(0).check();
  await boxes.nth(1).check();
  await page.click("#compare");
  await page.locator("#diff-summary").waitFor();
  const summary = await page.locator("#diff-summary").innerText();
  assert.match(summary, /strata\.assembly\/12/);
  assert.match(summary, /tokens/);
  await page.locator("#context-bar-first").waitFor();
  await page.locator("#context-bar-second").waitFor();
  await page.locator("#diff-segments").waitFor();
  await page.screenshot({ path: join(shots, "diff.png"), fullPage: true });

  // Signing out forgets the key: the next view asks for one again.
  await page.click("#sign-out");
  await page.locator("#api-key").waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await page.done();
});

/** Clicks "Load more events" until the timeline has every page. */
async function loadAll(page) {
  await page.evaluate(async () => {
    const more = [...document.querySelectorAll("button")].find((b) => b.textContent === "Load more events");
    const rows = () => document.getElementById("timeline").dataset.rows;
    while (!more.hidden) {
      const n = rows();
      more.click();
      while (rows() === n && !more.hidden) await new Promise((ok) => setTimeout(ok, 5));
    }
  });
}

test("a long timeline keeps only the pages near the screen in the page, and finds any event", async () => {
  // Two recorded assemblies after every event (two budgets: an assembly's id is its content's),
  // so a "why?" can ask either.
  for (const budget of [60000, 30000]) {
    const r = await fetch(`${url}/v1/sessions/${LONG}/context`, { method: "POST",
      headers: { Authorization: `Bearer ${devKey}`, "Content-Type": "application/json" },
      body: JSON.stringify({ budget }) });
    assert.equal(r.status, 200, await r.text());
  }
  const page = await tab();
  await signIn(page, devKey);
  await page.locator("#sessions a").first().waitFor();
  await page.goto(`${url}/ui#/s/${LONG}`);
  await page.locator("#timeline .event").first().waitFor();
  await loadAll(page);
  const rows = Number(await page.locator("#timeline").getAttribute("data-rows"));
  assert.ok(rows >= LONG_EVENTS, `rows loaded: ${rows}`);
  // Pages far below the screen leave the document (their rows are kept for when they return).
  await page.waitForFunction((n) => document.querySelectorAll("#timeline .event").length < n / 2, rows);
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  await page.locator("#timeline .page:last-child .event").last().waitFor({ state: "attached" });
  await page.waitForFunction(() => !document.getElementById("ev-ui-long-session-0"));
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.locator(`#ev-${LONG}-0`).waitFor();

  // A link to an event far down the log loads on to it and shows it.
  await page.goto(`${url}/ui#/s/${LONG}?event=${LONG}-${LONG_EVENTS - 2}`);
  const far = page.locator(`#ev-${LONG}-${LONG_EVENTS - 2}`);
  await far.waitFor();
  await page.waitForFunction((id) => {
    const r = document.getElementById(id).getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight;
  }, `ev-${LONG}-${LONG_EVENTS - 2}`);

  // "Why?" asks the first assembly after the event, and any other later one on request.
  const step = page.locator(`#ev-${LONG}-3`);
  await page.goto(`${url}/ui#/s/${LONG}`);
  await step.locator(".why-button").click();
  await step.locator(".why pre").waitFor();
  // It loaded on to the first assembly; with every page loaded, both are offered.
  await loadAll(page);
  await step.locator(".why-button").click();
  await step.locator(".why select").waitFor();
  const first = await step.locator(".why a[href^='#/a/']").getAttribute("href");
  const choice = step.locator(".why select");
  assert.equal(await choice.locator("option").count(), 2);
  await choice.selectOption({ index: 1 });
  await page.waitForFunction(([id, before]) =>
    document.querySelector(`#${id} .why a[href^='#/a/']`)?.getAttribute("href") !== before,
  [`ev-${LONG}-3`, first]);
  assert.match(await step.locator(".why pre").innerText(),
    /included|left out|aged|superseded|not among the selected/i);

  // Every row kept in the page on request (find-in-page over all of them).
  await page.goto(`${url}/ui#/s/${LONG}?rows=all`);
  const allIn = () => document.querySelectorAll("#timeline .event").length ===
    Number(document.getElementById("timeline")?.dataset.rows);
  await page.waitForFunction(allIn);
  await loadAll(page);
  await page.waitForFunction((n) => Number(document.getElementById("timeline").dataset.rows) === n, rows);
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(await page.evaluate(allIn), "rows=all left rows out of the page");
  await page.done();
});

test("a session's evaluation charts every call point against the baselines, under any policy", async () => {
  const page = await tab();
  await signIn(page, devKey);
  await page.click("text=demo-invoice-fix");
  await page.click("#evaluate");
  await page.locator("#eval-totals").waitFor();
  const rows = await page.locator("#eval-totals tbody tr").evaluateAll((r) =>
    r.map((e) => [e.dataset.side, ...[...e.cells].slice(1).map((c) => c.innerText)]));
  assert.deepEqual(rows.map(([side]) => side), ["strata", "transcript", "last_n", "truncated"]);
  const tokens = Object.fromEntries(rows.map(([side, n]) => [side, Number(n)]));
  assert.ok(tokens.strata > 0 && tokens.strata <= tokens.transcript, JSON.stringify(rows));
  assert.equal(rows[1][3], "100.0%", "transcript replay holds all the evidence");
  const drawn = await page.locator("#eval-tokens path").evaluateAll((p) => p.map((e) => e.dataset.side));
  assert.deepEqual(drawn.sort(), ["last_n", "strata", "transcript"]);
  assert.equal(await page.locator("#eval-recall path[data-side=strata]").count(), 1);
  const points = await page.locator("#eval-out details tbody tr").count();
  assert.ok(points >= 3, `${points} call points`);
  await page.locator("#eval").screenshot({ path: join(shots, "eval.png") });

  // The cost/recall curve: the policy at each size beside truncation at the same sizes and the
  // masking baseline's point, scored in the same runs.
  await page.click("#eval-curve-draw");
  await page.locator("#eval-curve-chart").waitFor();
  const sizes = await page.locator("#eval-curve-chart circle[data-side=strata]").count();
  assert.ok(sizes >= 2, `${sizes} sizes on the curve`);
  assert.equal(await page.locator("#eval-curve-chart path[data-side=strata]").count(), 1);
  assert.equal(await page.locator("#eval-curve-chart circle[data-side=last_n]").count(), 1);
  assert.equal(await page.locator("#eval-curve-chart circle[data-side=truncated]").count(), sizes);
  const tip = await page.locator("#eval-curve-chart circle[data-side=strata] title").first().textContent();
  assert.match(tip, /at \d+ tokens: -?\d+\.\d% fewer tokens, \d+\.\d% of the evidence/, tip);
  await page.locator("#eval").screenshot({ path: join(shots, "eval-curve.png") });

  // The same points under an older policy: the yardstick of a change before it ships.
  await page.selectOption("#eval-policy", "strata.assembly/3");
  await page.click("#evaluate");
  await page.locator("#eval-out p", { hasText: "under strata.assembly/3" }).waitFor();
  assert.equal(await page.locator("#eval-out details tbody tr").count(), points);

  // One call point under the call's own policy and another, segment by segment.
  await page.click("#eval-out summary");
  await page.locator("#eval-out a.pdiff").last().click();
  await page.locator("#diff-summary").waitFor();
  const heads = await page.locator("#diff-summary thead th").allInnerTexts();
  assert.match(heads[1], /strata\.assembly\/12 \(the call's own\)/, heads.join(" | "));
  assert.match(heads[2], /strata\.assembly\/\d/, heads.join(" | "));
  await page.selectOption("#pdiff-policy", "strata.assembly/3");
  await page.locator("#diff-summary thead th", { hasText: /^strata\.assembly\/3$/ }).waitFor();
  await page.locator("#context-bar-first").waitFor();
  await page.locator("#context-bar-second").waitFor();
  const differs = await page.locator("#diff-segments tbody tr").count();
  assert.ok(differs > 0, "policy 3 keeps the current turn verbatim where 8 ages it");
  await page.screenshot({ path: join(shots, "policy-diff.png"), fullPage: true });
  await page.done();
});
