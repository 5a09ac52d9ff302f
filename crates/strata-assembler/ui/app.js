// The Strata inspector: a page over the same authenticated HTTP API every client uses. The API
// key is kept in this tab's sessionStorage only; every request sends it; nothing is fetched
// from anywhere but this server. All text from the API goes into the page as text nodes.
"use strict";

const KEY = "strata.api-key";
const EVENTS_PAGE = 200;
const SESSIONS_PAGE = 50;

// Context-window sections: which segment kinds each one gathers, and its colour.
const SECTIONS = [
  ["system and tools", ["system_prompt", "tools"], "#6b7a99"],
  ["task state", ["task_state", "recovery_state", "decisions_and_facts",
    "participant_working_state", "subagent_state", "subagent_result"], "#2f9e6b"],
  ["memories", ["memory"], "#c48a1b"],
  ["compaction summary", ["compaction_summary"], "#8a4fc4"],
  ["recent turns", ["turn", "aged_turn", "turn_digest"], "#2f5bd3"],
  ["current turn", ["current_request", "user_message", "assistant_step", "aged_step",
    "pending_tool_calls"],
    "#d3582f"],
  ["history", ["said", "step", "left_out_note"], "#b3442f"],
  ["rehydrated bytes", ["rehydrated_artifact", "raw_tool_output"], "#1b9bb3"],
];
const OTHER = ["other", [], "#9aa3b2"];

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    // Styles through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    else if (k === "style") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const view = () => document.getElementById("view");
const key = () => sessionStorage.getItem(KEY);

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The error of a refused call: the API's message when the body is its JSON error, else the body. */
function refusal(status, text) {
  let message = text;
  try {
    const parsed = JSON.parse(text);
    message = parsed.error?.message || parsed.message || parsed.error || text;
  } catch {
    // not JSON: the body as it came
  }
  return new ApiError(status, `${status}: ${message}`);
}

/** Most bytes of an artifact shown on the page. */
const RAW_SHOWN_BYTES = 65536;

/** An artifact's raw bytes as text, when the server's privacy policy lets them out. */
async function artifactText(ref) {
  const sha = ref.replace(/^artifact:sha256:/, "");
  const response = await fetch(`/v1/artifacts/${encodeURIComponent(sha)}`, {
    headers: { Authorization: `Bearer ${key()}` },
  });
  const text = await response.text();
  if (!response.ok) throw refusal(response.status, text);
  return text.length > RAW_SHOWN_BYTES ? text.slice(0, RAW_SHOWN_BYTES) + " …" : text;
}

async function api(path, body) {
  const headers = { Authorization: `Bearer ${key()}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, body === undefined ? { headers }
    : { method: "POST", headers, body: JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw refusal(response.status, text);
  return text ? JSON.parse(text) : null;
}

function show(...nodes) {
  view().replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
  window.scrollTo(0, 0);
}

function crumbs(...links) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...links.flatMap((l, i) => (i ? [" / ", l] : [l])));
}

function failure(error) {
  if (error instanceof ApiError && error.status === 401) {
    sessionStorage.removeItem(KEY);
    return signIn("That key was refused: " + error.message);
  }
  show(h("section", {}, h("p", { class: "error", role: "alert" }, String(error.message || error))));
}

// ---- sign-in ----------------------------------------------------------------------------------

function signIn(message) {
  document.getElementById("sign-out").hidden = true;
  crumbs();
  const input = h("input", {
    id: "api-key", type: "password", placeholder: "sk_…", autocomplete: "off", size: 56,
    "aria-label": "API key",
  });
  const form = h("form", {
    onsubmit: async (e) => {
      e.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      try {
        await api("/v1/sessions?limit=1");
        location.hash = "#/";
        route();
      } catch (error) {
        failure(error);
      }
    },
  },
  h("div", { class: "row" }, input, h("button", { type: "submit" }, "Sign in")));
  show(h("section", {},
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Paste an API key. It is kept for this tab only and sent with " +
      "every request; a key sees only its tenant's sessions."),
    message ? h("p", { class: "error", role: "alert" }, message) : null,
    form));
  input.focus();
}

// ---- sessions ---------------------------------------------------------------------------------

/** A session's row: what it is, when it last moved, who took part, what is unfinished in it. */
function sessionRow(s) {
  const flag = (n, what) => (n ? h("span", { class: "tag warn" }, `${n} ${what}`) : null);
  return h("tr", {},
    h("td", {}, h("a", { href: `#/s/${encodeURIComponent(s.session_id)}` }, s.session_id)),
    h("td", {}, s.last_event_at || "–"),
    h("td", { class: "num" }, s.event_count),
    h("td", { class: "num" }, s.branches ?? "–"),
    h("td", {}, (s.participants || []).join(", ")),
    h("td", {}, s.model || ""),
    h("td", {}, flag(s.open_tool_calls, "open calls"), " ", flag(s.unresolved_errors, "errors"),
      " ", flag(s.subagents, "subagents")));
}

async function sessions(after, search) {
  crumbs(h("a", { href: "#/" }, "sessions"));
  const q = new URLSearchParams({ limit: SESSIONS_PAGE });
  if (after) q.set("after", after);
  if (search) q.set("q", search);
  const page = await api(`/v1/sessions?${q}`);
  const here = (extra) => `#/?${new URLSearchParams({ ...(search ? { q: search } : {}), ...extra })}`;
  const filter = h("form", {
    onsubmit: (e) => {
      e.preventDefault();
      location.hash = here({ q: e.target.elements.q.value.trim() });
    },
  }, h("input", { id: "filter", name: "q", value: search || "", placeholder: "id, model or participant",
    "aria-label": "search sessions by id, model or participant" }), " ", h("button", { type: "submit", class: "plain" }, "Search"));
  const open = h("form", {
    onsubmit: (e) => {
      e.preventDefault();
      const id = e.target.elements.open.value.trim();
      if (id) location.hash = `#/s/${encodeURIComponent(id)}`;
    },
  }, h("input", { name: "open", placeholder: "open a session by id", "aria-label": "session id" }),
  " ", h("button", { type: "submit", class: "plain" }, "Open"));
  const head = ["session", "last activity", "events", "branches", "participants", "model", ""];
  show(h("section", {},
    h("h1", {}, "Sessions"),
    h("div", { class: "row" }, filter, open),
    h("table", { id: "sessions" },
      h("thead", {}, h("tr", {}, head.map((t) => h("th", { class: t === "events" || t === "branches" ? "num" : null }, t)))),
      h("tbody", {}, page.sessions.map(sessionRow))),
    page.sessions.length === 0
      ? h("p", { class: "muted" }, search ? `No session id contains "${search}".` : "No sessions for this key.")
      : null,
    h("div", { class: "row" },
      after ? h("a", { href: here({}) }, "first page") : null,
      page.next_after ? h("a", { href: here({ after: page.next_after }) }, "next page") : null)));
}

// ---- one session ------------------------------------------------------------------------------

function sourced(items, session) {
  return h("ul", {}, (items || []).map((i) => h("li", {}, i.text, " ",
    i.source_event_id
      ? h("a", { class: "tag", href: `#/s/${encodeURIComponent(session)}?event=${encodeURIComponent(i.source_event_id)}` }, i.source_event_id)
      : null)));
}

function stateSection(state, session) {
  const s = state || {};
  const one = (x) => (x ? [x] : []);
  const fields = [
    ["goal", one(s.goal)], ["current task", one(s.current_task)],
    ["acceptance criteria", s.acceptance_criteria], ["plan", s.plan],
    ["constraints", s.constraints], ["decisions", s.decisions], ["facts", s.facts],
    ["open questions", s.open_questions], ["files read", s.files_read],
    ["files modified", s.files_modified], ["unresolved errors", s.errors],
  ];
  return h("section", { id: "task-state" }, h("h2", {}, "Task state"),
    h("dl", { class: "state" }, fields.filter(([, v]) => v && v.length)
      .flatMap(([name, v]) => [h("dt", {}, name), h("dd", {}, sourced(v, session))])));
}

function branchTree(summary) {
  const branches = summary.branches || [];
  const children = (parent) => branches.filter((b) => (b.parent_branch_id || null) === parent);
  const node = (b) => h("li", {},
    h("strong", {}, b.branch_id), ` (${b.kind}, ${b.events} events`,
    b.fork_seq !== null && b.fork_seq !== undefined ? `, forked at seq ${b.fork_seq}` : "", ")",
    children(b.branch_id).length ? h("ul", {}, children(b.branch_id).map(node)) : null);
  const subagents = summary.subagents || [];
  return h("section", { id: "branches" }, h("h2", {}, "Branches"),
    h("ul", {}, children(null).map(node)),
    subagents.length
      ? [h("h2", {}, "Subagents"), h("ul", {}, subagents.map((c) => h("li", {},
        h("a", { href: `#/s/${encodeURIComponent(c.child_session_id || c.session_id || "")}` },
          c.child_session_id || c.session_id || "?"), " ", c.status || "")))]
      : null);
}

function describe(e) {
  const p = e.payload || {};
  switch (e.type) {
    case "UserPromptSubmitted": return p.text;
    case "ModelResponseReceived":
      return [p.text, ...(p.tool_calls || []).map((c) => `→ ${c.name}(${JSON.stringify(c.args)})`)]
        .filter(Boolean).join("\n");
    case "ToolCallRequested": return `${p.name}(${JSON.stringify(p.args)})`;
    case "ToolCallFinished":
      return p.error ? `failed: ${p.error}`
        : (p.output ?? (p.output_ref ? `[${p.output_bytes ?? "?"} bytes in ${p.output_ref}; preview:]\n${p.output_preview ?? ""}` : ""));
    case "ContextBuilt": return `${p.context_tokens} tokens (transcript ${p.transcript_tokens})`;
    default: return JSON.stringify(p);
  }
}

/**
 * "Why?": asks the first recorded assembly after the event (of those loaded) why it did or did
 * not include it, and shows the answer under the event.
 */
function whyButton(e, assembliesAfter) {
  const out = h("div", { class: "why" });
  const ask = async (a, choices) => {
    out.replaceChildren(h("p", { class: "muted" }, "asking…"));
    try {
      const answer = await api(`/v1/assemblies/${encodeURIComponent(a.id)}?why_not=${encodeURIComponent(e.event_id)}`);
      // Any later recorded assembly can be asked: an event kept at one call may be aged at the next.
      const other = choices.length < 2 ? null : h("select", { "aria-label": "ask another assembly",
        onchange: (ev) => ask(choices[Number(ev.target.value)], choices) },
      choices.map((c, i) => h("option", { value: i, selected: c === a }, `seq ${c.seq}: ${c.id}`)));
      out.replaceChildren(h("p", { class: "muted row" }, h("span", {}, "in ",
        h("a", { href: `#/a/${encodeURIComponent(a.id)}` }, a.id), ` (seq ${a.seq}):`), other),
      h("pre", {}, (answer.explanation || []).join("\n")));
    } catch (error) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, error.message));
    }
  };
  const button = h("button", { type: "button", class: "plain why-button", onclick: async () => {
    out.replaceChildren(h("p", { class: "muted" }, "finding the next recorded assembly…"));
    try {
      const choices = await assembliesAfter(e.seq);
      if (!choices.length) {
        out.replaceChildren(h("p", { class: "muted" }, "No assembly was recorded after this event."));
        return;
      }
      await ask(choices[0], choices);
    } catch (error) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, error.message));
    }
  } }, "why?");
  return [button, out];
}

function eventRow(e, session, results, assembliesAfter, reveal) {
  const p = e.payload || {};
  const paired = e.type === "ToolCallRequested" || e.type === "ModelResponseReceived"
    ? [p.tool_call_id, ...(p.tool_calls || []).map((c) => c.tool_call_id)].filter(Boolean)
      .map((id) => results.get(id)).filter(Boolean)
    : [];
  const text = describe(e);
  const [why, answer] = e.type === "ContextBuilt" ? [null, null] : whyButton(e, assembliesAfter);
  return h("div", { class: "event", id: `ev-${e.event_id}`, "data-seq": e.seq },
    h("div", { class: "row" },
      h("span", { class: "tag" }, `#${e.seq}`),
      h("span", { class: "type" }, e.type),
      h("span", { class: "muted" }, e.participant_id || e.actor || ""),
      e.branch_id && e.branch_id !== "main" ? h("span", { class: "tag" }, e.branch_id) : null,
      e.type === "ContextBuilt"
        ? h("a", { class: "tag built", href: `#/a/${encodeURIComponent(p.assembly_id)}` }, "assembly")
        : null,
      paired.map((r) => h("a", { class: "tag", href: `#ev-${r.event_id}`, onclick: (ev) => {
        // In-page: the hash is the route, and the result's page may be detached.
        ev.preventDefault();
        showRow(reveal?.(r.event_id));
      } }, `result #${r.seq}${r.payload.error ? " (failed)" : ""}`)), why),
    text ? h("pre", {}, text.length > 4000 ? text.slice(0, 4000) + " …" : text) : null,
    e.type === "ToolCallFinished" && p.output_ref ? rawButton(p.output_ref) : null, answer);
}

/** "Raw bytes": the artifact as stored, fetched only when asked for (and refused when its
 * privacy class withholds it). */
function rawButton(ref) {
  const out = h("div", { class: "raw" });
  const button = h("button", { type: "button", class: "plain raw-bytes", onclick: async () => {
    button.disabled = true;
    try {
      out.replaceChildren(h("pre", {}, await artifactText(ref)));
    } catch (error) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, error.message));
    }
  } }, "Raw bytes");
  return h("div", {}, button, out);
}

/** Scroll a row to the middle of the screen, again once the rows around it have been laid out at
 * their real height (rows off screen stand in at an estimated one). */
function showRow(row) {
  if (!row) return;
  row.scrollIntoView({ block: "center" });
  requestAnimationFrame(() => requestAnimationFrame(() => row.scrollIntoView({ block: "center" })));
}

/**
 * The timeline, one block per loaded page. Only the blocks near the screen are in the document:
 * a block scrolled far away is detached (its rows kept outside the document, with whatever was
 * opened in them) and leaves a spacer of its height, so a 20,000-event session costs the page
 * about what a few hundred rows do. `keepAll` keeps every block in (find-in-page over all).
 */
function pagedTimeline(keepAll) {
  const root = h("div", { id: "timeline" });
  const rowsOf = new Map();
  const blockOf = new Map();
  let count = 0;
  const attach = (block) => {
    if (block.isConnected && block.childElementCount) return;
    block.style.height = "";
    block.append(...rowsOf.get(block));
  };
  const detach = (block) => {
    if (!block.childElementCount) return;
    block.style.height = `${block.offsetHeight}px`;
    block.replaceChildren();
  };
  const observer = keepAll ? null : new IntersectionObserver((entries) => {
    for (const entry of entries) (entry.isIntersecting ? attach : detach)(entry.target);
  }, { rootMargin: "2500px 0px" });
  return {
    root,
    get rows() { return count; },
    add(events, rows) {
      if (!rows.length) return;
      const block = h("div", { class: "page" }, rows);
      rowsOf.set(block, rows);
      for (const e of events) blockOf.set(e.event_id, block);
      root.append(block);
      count += rows.length;
      root.dataset.rows = String(count);
      observer?.observe(block);
    },
    has: (eventId) => blockOf.has(eventId),
    /** The row of an event, its block put back in the document first. */
    reveal(eventId) {
      const block = blockOf.get(eventId);
      if (!block) return null;
      attach(block);
      return document.getElementById(`ev-${eventId}`);
    },
  };
}

async function session(id, focus, keepAll) {
  crumbs(h("a", { href: "#/" }, "sessions"), h("span", {}, id));
  const [summary, state] = await Promise.all([
    api(`/v1/sessions/${encodeURIComponent(id)}`),
    api(`/v1/sessions/${encodeURIComponent(id)}/state`),
  ]);
  const main = (state.branches && (state.branches.main || Object.values(state.branches)[0])) || {};
  const timeline = pagedTimeline(keepAll);
  const built = h("tbody");
  const picked = [];
  const compare = h("button", { id: "compare", type: "button", class: "plain", disabled: true,
    onclick: () => { location.hash = `#/diff/${picked.map(encodeURIComponent).join("/")}`; } },
  "Compare the two picked");
  const recorded = (e) => {
    const box = h("input", { type: "checkbox", "aria-label": `pick ${e.payload.assembly_id}`,
      onchange: (ev) => {
        const id = e.payload.assembly_id;
        if (ev.target.checked) picked.push(id);
        else picked.splice(picked.indexOf(id), 1);
        while (picked.length > 2) {
          const dropped = picked.shift();
          built.querySelector(`input[data-id="${dropped}"]`).checked = false;
        }
        compare.disabled = picked.length !== 2;
      } });
    box.dataset.id = e.payload.assembly_id;
    return h("tr", {}, h("td", {}, box),
      h("td", {}, h("a", { href: `#/a/${encodeURIComponent(e.payload.assembly_id)}` }, e.payload.assembly_id)),
      h("td", { class: "num" }, `#${e.seq}`),
      h("td", { class: "num" }, e.payload.context_tokens),
      h("td", { class: "num" }, e.payload.transcript_tokens));
  };
  const more = h("button", { type: "button", class: "plain" }, "Load more events");
  const results = new Map();
  // Recorded assemblies by seq, as their pages load: what a "why?" asks.
  const assemblies = [];
  const ASKABLE = 100;
  const loadedAfter = (seq) => assemblies.filter((a) => a.seq > seq).slice(0, ASKABLE);
  // A "why?" loads on until a recorded assembly after its event is loaded (or the log ends).
  const assembliesAfter = async (seq) => {
    while (!loadedAfter(seq).length && !more.hidden) await load();
    return loadedAfter(seq);
  };
  let after = 0;
  const loadPage = async () => {
    const page = await api(`/v1/sessions/${encodeURIComponent(id)}/events?after_seq=${after}&limit=${EVENTS_PAGE}`);
    for (const e of page.events) {
      if (e.type === "ToolCallFinished" && e.payload) results.set(e.payload.tool_call_id, e);
    }
    assemblies.push(...page.events.filter((e) => e.type === "ContextBuilt" && e.payload?.assembly_id)
      .map((e) => ({ seq: e.seq, id: e.payload.assembly_id })));
    timeline.add(page.events,
      page.events.map((e) => eventRow(e, id, results, assembliesAfter, timeline.reveal)));
    built.append(...page.events.filter((e) => e.type === "ContextBuilt" && e.payload?.assembly_id)
      .map(recorded));
    if (page.events.length) after = page.events[page.events.length - 1].seq;
    more.hidden = page.events.length < EVENTS_PAGE;
    return page.events.length;
  };
  // One page at a time: a click and a "why?" loading on must not fetch the same page twice.
  let loading = Promise.resolve();
  const load = () => {
    loading = loading.catch(() => {}).then(loadPage);
    return loading;
  };
  more.addEventListener("click", () => load().catch(failure));
  show(
    h("h1", {}, id),
    h("section", {}, h("div", { class: "row" },
      h("span", {}, `status ${summary.status}`), h("span", {}, `${summary.event_count} events`),
      h("span", {}, `model ${summary.model?.model || "?"}`),
      h("span", {}, `${(summary.open_tool_calls || []).length} open calls`),
      summary.latest_compaction ? h("span", { class: "tag" }, "compacted") : null)),
    h("div", { class: "grid" }, stateSection(main.state, id), branchTree(summary)),
    h("section", {}, h("div", { class: "row" },
      h("button", { id: "assemble", type: "button", onclick: () => assembleNow(id).catch(failure) },
        "Assemble the next context"),
      h("span", { class: "muted" }, "what the next model call would get, traced; it is recorded " +
        "on the session's log as any assembly is"))),
    evalSection(id),
    h("section", { id: "assemblies" }, h("h2", {}, "Recorded assemblies"),
      h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, "assembly"),
        h("th", { class: "num" }, "seq"), h("th", { class: "num" }, "tokens"),
        h("th", { class: "num" }, "transcript"))), built),
      h("p", { class: "muted" }, "of the events loaded below; pick two to compare them"), compare),
    h("section", {}, h("h2", {}, "Events"), timeline.root, more));
  await load();
  // An event linked from the task state: load on until it is there.
  while (focus && !timeline.has(focus) && !more.hidden) await load();
  if (focus) showRow(timeline.reveal(focus));
}

// ---- evaluation -------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  el.append(...children.map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return el;
}

// The contexts an evaluation compares, in legend order.
const SIDES = [
  ["strata", "Strata", "#2f5bd3"],
  ["transcript", "transcript replay", "#9aa3b2"],
  ["last_n", "last-N observations", "#c48a1b"],
  ["truncated", "truncation at Strata's size", "#d3582f"],
];

const percent = (part, whole) => (whole ? `${((100 * part) / whole).toFixed(1)}%` : "–");

/**
 * One line chart over the call points: `value(point, side)` per side, null for no value. The
 * y axis runs from 0 to the largest value (or `top`).
 */
function lineChart(id, title, points, sides, value, top, unit) {
  const W = 760, H = 190, L = 56, R = 10, T = 26, B = 24;
  const values = points.flatMap((p) => sides.map(([s]) => value(p, s))).filter((v) => v !== null);
  const max = top ?? Math.max(1, ...values);
  const x = (i) => L + (points.length < 2 ? 0 : (i * (W - L - R)) / (points.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const chart = svg("svg", { id, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, class: "chart" },
    svg("text", { x: L, y: 12, class: "chart-title" }, title),
    svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: "#d9dee7" }),
    svg("text", { x: L - 6, y: y(max) + 4, "text-anchor": "end", class: "axis" }, `${Math.round(max)}${unit}`),
    svg("text", { x: L - 6, y: y(0) + 4, "text-anchor": "end", class: "axis" }, `0${unit}`),
    svg("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "axis" }, `${points.length} call points`));
  // Strata's line last, on top of a baseline it equals.
  for (const [side, label, colour] of [...sides].reverse()) {
    const path = points.map((p, i) => [i, value(p, side)]).filter(([, v]) => v !== null)
      .map(([i, v], n) => `${n ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    if (path) {
      chart.append(svg("path", { d: path, fill: "none", stroke: colour, "stroke-width": 1.6,
        "data-side": side }, svg("title", {}, label)));
    }
  }
  return chart;
}

function evalLegend(sides) {
  return h("div", { class: "legend" },
    sides.map(([, label, colour]) => h("span", {}, h("i", { style: { background: colour } }), label)));
}

function evalTotals(report) {
  const t = report.totals;
  return h("table", { id: "eval-totals" },
    h("thead", {}, h("tr", {}, h("th", {}, "context"), h("th", { class: "num" }, "tokens"),
      h("th", { class: "num" }, "vs transcript"), h("th", { class: "num" }, "evidence held"))),
    h("tbody", {}, SIDES.map(([side, label]) => h("tr", { "data-side": side },
      h("td", {}, side === "last_n" ? `last-${report.last_n} observations` : label),
      h("td", { class: "num" }, t[side].tokens),
      h("td", { class: "num" }, percent(t[side].tokens, t.transcript.tokens)),
      h("td", { class: "num" }, percent(t[side].present, t.evidence))))));
}

function evalPoints(report) {
  return h("details", {}, h("summary", {}, "Call points"),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "response"), h("th", { class: "num" }, "seq"),
      h("th", { class: "num" }, "tokens"), h("th", { class: "num" }, "transcript"),
      h("th", { class: "num" }, "evidence"), h("th", { class: "num" }, "held"), h("th", {}, "missing"))),
    h("tbody", {}, report.points.map((p) => h("tr", {},
      h("td", {}, h("a", { href: `#/s/${encodeURIComponent(report.session_id)}?event=${encodeURIComponent(p.event_id)}` }, p.event_id),
        " ", h("a", { class: "tag pdiff", href: `#/pdiff/${encodeURIComponent(report.session_id)}/${encodeURIComponent(p.event_id)}` }, "other policy")),
      h("td", { class: "num" }, `#${p.seq}`),
      h("td", { class: "num" }, p.sides.strata.tokens),
      h("td", { class: "num" }, p.sides.transcript.tokens),
      h("td", { class: "num" }, p.evidence),
      h("td", { class: "num" }, p.sides.strata.present),
      h("td", {}, p.missing.map((m) => h("code", { class: "tag" }, m.text)),
        p.missing_count > p.missing.length ? ` +${p.missing_count - p.missing.length}` : ""))))));
}

/** The `strata eval` yardstick for this session, run on request (it re-folds the session). */
function evalSection(id) {
  const out = h("div", { id: "eval-out" });
  const choice = h("select", { id: "eval-policy", "aria-label": "policy" },
    h("option", { value: "recorded" }, "each call's recorded policy"));
  const run = h("button", { id: "evaluate", type: "button", onclick: async () => {
    run.disabled = true;
    out.replaceChildren(h("p", { class: "muted" }, "evaluating…"));
    try {
      const report = await api(`/v1/sessions/${encodeURIComponent(id)}/eval?policy=${encodeURIComponent(choice.value)}`);
      if (choice.options.length === 1) {
        choice.append(...report.policies.map((p) => h("option", { value: p }, p)));
      }
      out.replaceChildren(...evalReport(report));
    } catch (error) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, String(error.message || error)));
    } finally {
      run.disabled = false;
    }
  } }, "Evaluate");
  return h("section", { id: "eval" }, h("h2", {}, "Evaluation"),
    h("div", { class: "row" }, run, choice, h("span", { class: "muted" },
      "each model call's context, re-assembled, against the evidence its response used")),
    out);
}

function evalReport(report) {
  if (!report.points.length) return [h("p", { class: "muted" }, "No call points: no model response has a state before it.")];
  const recall = (p, side) => (p.evidence ? (100 * p.sides[side].present) / p.evidence : null);
  return [
    h("p", {}, `${report.points.length} call points, ${report.totals.evidence} references of ` +
      `evidence, under ${report.policy}; ${report.elapsed_secs.toFixed(2)} s`),
    evalTotals(report),
    lineChart("eval-tokens", "context tokens per call point", report.points,
      SIDES.filter(([s]) => s !== "truncated"), (p, s) => p.sides[s].tokens, undefined, ""),
    lineChart("eval-recall", "evidence held per call point", report.points,
      SIDES.filter(([s]) => s !== "transcript"), recall, 100, "%"),
    evalLegend(SIDES),
    curveSection(report),
    evalPoints(report),
  ];
}

// ---- the cost/recall curve --------------------------------------------------------------------

// What the curve chart shows, in legend order.
const CURVE_SIDES = [
  ["strata", "Strata aimed at each size", "#2f5bd3"],
  ["own", "Strata, its own sizes", "#8a4fc4"],
  ["last_n", "last-N observations", "#c48a1b"],
  ["truncated", "truncation at the same sizes", "#9aa3b2"],
];

/** Sizes the curve is drawn at: around the policy's mean context per call point. */
function curveTargets(report) {
  const mean = report.totals.strata.tokens / Math.max(1, report.totals.points);
  const sizes = [0.25, 0.5, 1, 2].map((f) => Math.max(100, Math.round((mean * f) / 100) * 100));
  return [...new Set(sizes)];
}

/** The policy evaluated again at a few sizes, beside the baselines scored in the same runs. */
function curveSection(report) {
  const out = h("div", { id: "eval-curve-out" });
  const targets = curveTargets(report);
  const draw = h("button", { id: "eval-curve-draw", type: "button", onclick: async () => {
    draw.disabled = true;
    out.replaceChildren(h("p", { class: "muted" }, `evaluating at ${targets.join(", ")} tokens…`));
    try {
      const answer = await api(`/v1/sessions/${encodeURIComponent(report.session_id)}/eval?` +
        `policy=${encodeURIComponent(report.policy)}&targets=${targets.join(",")}`);
      out.replaceChildren(curveChart(answer), evalLegend(CURVE_SIDES));
    } catch (error) {
      out.replaceChildren(h("p", { class: "error", role: "alert" }, String(error.message || error)));
    } finally {
      draw.disabled = false;
    }
  } }, "Draw the cost/recall curve");
  return h("div", { id: "eval-curve" }, h("div", { class: "row" }, draw, h("span", { class: "muted" },
    `the session again at ${targets.join(", ")} tokens per call: is Strata above the baselines at equal size?`)), out);
}

/** Fewer tokens than transcript replay and evidence held, in percent, of one side's totals. */
function curvePoint(totals, side) {
  const fewer = totals.transcript.tokens ? 100 * (1 - totals[side].tokens / totals.transcript.tokens) : 0;
  const held = totals.evidence ? (100 * totals[side].present) / totals.evidence : 100;
  return [fewer, held];
}

function curveChart(answer) {
  const W = 760, H = 300, L = 56, R = 14, T = 26, B = 34;
  const runs = answer.curve;
  const series = {
    strata: runs.map((r) => curvePoint(r.totals, "strata")),
    truncated: runs.map((r) => curvePoint(r.totals, "truncated")),
    own: [curvePoint(answer.totals, "strata")],
    last_n: [curvePoint(answer.totals, "last_n")],
  };
  const all = Object.values(series).flat();
  const [x0, x1] = [Math.min(...all.map(([x]) => x)), Math.max(...all.map(([x]) => x))];
  const y0 = Math.max(0, Math.floor(Math.min(...all.map(([, y]) => y)) / 5) * 5 - 5);
  const span = Math.max(1, x1 - x0);
  const x = (v) => L + ((v - (x0 - span * 0.05)) * (W - L - R)) / (span * 1.1);
  const y = (v) => T + (H - T - B) * (1 - (v - y0) / Math.max(1, 100 - y0));
  const title = `evidence held against tokens saved, ${answer.points.length} call points`;
  const chart = svg("svg", { id: "eval-curve-chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, class: "chart" },
    svg("text", { x: L, y: 12, class: "chart-title" }, title),
    svg("line", { x1: L, y1: y(y0), x2: W - R, y2: y(y0), stroke: "#d9dee7" }),
    svg("text", { x: L - 6, y: y(100) + 4, "text-anchor": "end", class: "axis" }, "100%"),
    svg("text", { x: L - 6, y: y(y0) + 4, "text-anchor": "end", class: "axis" }, `${y0}%`),
    svg("text", { x: L, y: H - 8, class: "axis" }, `${x0.toFixed(0)}% fewer tokens than the transcript`),
    svg("text", { x: W - R, y: H - 8, "text-anchor": "end", class: "axis" }, `${x1.toFixed(0)}% fewer`));
  const label = (side, [fx, fy], extra) => `${side}${extra}: ${fx.toFixed(1)}% fewer tokens, ${fy.toFixed(1)}% of the evidence`;
  for (const [side, name, colour] of [...CURVE_SIDES].reverse()) {
    const points = series[side];
    if (points.length > 1) {
      const d = points.map(([px, py], n) => `${n ? "L" : "M"}${x(px).toFixed(1)},${y(py).toFixed(1)}`).join(" ");
      chart.append(svg("path", { d, fill: "none", stroke: colour, "stroke-width": 1.6, "data-side": side },
        svg("title", {}, name)));
    }
    points.forEach((p, i) => chart.append(svg("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1),
      r: side === "strata" || side === "truncated" ? 3.5 : 5, fill: colour, "data-side": side },
    svg("title", {}, label(name, p, runs[i] && points.length > 1 ? ` at ${runs[i].target_tokens} tokens` : "")))));
  }
  return chart;
}

// ---- one assembly -----------------------------------------------------------------------------

function sectionOf(kind) {
  return SECTIONS.find(([, kinds]) => kinds.includes(kind)) || OTHER;
}

/** The window of `a` by section; `scale` (tokens for the full width) puts two on one scale. */
function windowBar(a, suffix = "", scale = undefined) {
  const totals = new Map();
  for (const s of a.included || []) {
    const [name] = sectionOf(s.kind);
    totals.set(name, (totals.get(name) || 0) + s.tokens);
  }
  scale = scale || Math.max(a.budget_tokens || 0, a.transcript_tokens || 0, a.context_tokens || 1);
  const parts = [...SECTIONS, OTHER].filter(([name]) => totals.get(name));
  const pct = (t) => `${((100 * t) / scale).toFixed(2)}%`;
  return h("section", { id: `window${suffix}` }, h("h2", {}, `Context window ${a.assembly_id}`),
    h("div", { class: "bar", id: `context-bar${suffix}`, role: "img",
      "aria-label": `context ${a.context_tokens} of ${a.budget_tokens} budget tokens` },
    parts.map(([name, , colour]) => h("span", {
      title: `${name}: ${totals.get(name)} tokens`, "data-section": name,
      style: { width: pct(totals.get(name)), background: colour },
    }))),
    h("div", { class: "legend" }, parts.map(([name, , colour]) =>
      h("span", {}, h("i", { style: { background: colour } }), `${name} ${totals.get(name)}`))),
    h("p", { class: "muted" },
      `${a.context_tokens} tokens sent of a ${a.budget_tokens}-token budget; transcript replay ` +
      `would send ${a.transcript_tokens} (${a.transcript_tokens ? (100 - (100 * a.context_tokens) / a.transcript_tokens).toFixed(1) : "0"}% fewer).`),
    h("div", { class: "bar", title: "transcript replay" },
      h("span", { style: { width: pct(a.transcript_tokens || 0), background: "#c9ced8" } })),
    h("p", { class: "muted" }, "above: this context by section; below: transcript replay, to scale"));
}

function included(a) {
  return h("section", { id: "included" }, h("h2", {}, "Included"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["kind", "tier", "reason", "sources"].map((c) => h("th", {}, c)),
        h("th", { class: "num" }, "tokens"))),
      h("tbody", {}, (a.included || []).map((s) => h("tr", {},
        h("td", {}, s.kind), h("td", {}, s.tier), h("td", {}, s.reason),
        h("td", {}, (s.source_event_ids || []).slice(0, 6).map((e) => [h("a", {
          class: "tag", href: `#/s/${encodeURIComponent(a.session_id)}?event=${encodeURIComponent(e)}`,
        }, e), " "]), (s.source_event_ids || []).length > 6 ? `+${s.source_event_ids.length - 6}` : ""),
        h("td", { class: "num" }, s.tokens))))));
}

function omitted(a) {
  const counts = Object.entries(a.omitted || {});
  const items = a.omitted_items || [];
  return h("section", { id: "omitted" }, h("h2", {}, "Left out"),
    counts.length
      ? h("ul", {}, counts.map(([reason, n]) => h("li", { "data-reason": reason }, `${reason}: ${n}`)))
      : h("p", { class: "muted" }, "Nothing was left out."),
    items.length
      ? h("table", {}, h("tbody", {}, items.map((o) => h("tr", {},
        h("td", {}, o.kind), h("td", {}, o.reason), h("td", {}, (o.source_event_ids || []).join(", ")),
        h("td", { class: "num" }, o.tokens)))))
      : a.traced ? null : h("p", { class: "muted" }, "A compact record: counts by reason only " +
        "(assemble with \"trace\": true for every candidate). Ask about one below."));
}

function whyNot(a) {
  const out = h("div", { id: "why-not-answer" });
  const input = h("input", { name: "ref", size: 48, "aria-label": "reference",
    placeholder: "event id, tool call id or artifact ref" });
  return h("section", { id: "why-not" }, h("h2", {}, "Why / why not"),
    h("form", {
      onsubmit: async (e) => {
        e.preventDefault();
        const ref = input.value.trim();
        if (!ref) return;
        out.replaceChildren(h("p", { class: "muted" }, "asking…"));
        try {
          const answer = await api(`/v1/assemblies/${encodeURIComponent(a.assembly_id)}?why_not=${encodeURIComponent(ref)}`);
          out.replaceChildren(h("pre", {}, JSON.stringify(answer.explanation, null, 2)));
        } catch (error) {
          out.replaceChildren(h("p", { class: "error", role: "alert" }, error.message));
        }
      },
    }, h("div", { class: "row" }, input, h("button", { type: "submit" }, "Explain"))),
    out);
}

function providerRequest(payload) {
  return h("section", { id: "provider-request" }, h("h2", {}, "Provider request"),
    h("pre", {}, JSON.stringify(payload, null, 2)));
}

async function assembleNow(session) {
  const built = await api(`/v1/sessions/${encodeURIComponent(session)}/context`, { trace: true });
  await assembly(built.assembly.assembly_id, built.assembly, built.payload);
  history.replaceState(null, "", `#/a/${encodeURIComponent(built.assembly.assembly_id)}`);
}

async function assembly(id, record, payload) {
  const a = record || await api(`/v1/assemblies/${encodeURIComponent(id)}`);
  crumbs(h("a", { href: "#/" }, "sessions"),
    h("a", { href: `#/s/${encodeURIComponent(a.session_id)}` }, a.session_id), h("span", {}, id));
  show(h("h1", {}, `Assembly ${id}`),
    h("section", {}, h("div", { class: "row" },
      h("span", {}, `policy ${a.policy_version}`), h("span", {}, `provider ${a.provider}`),
      h("span", {}, `branch ${a.branch_id}`), h("span", {}, `participant ${a.participant_id}`),
      h("span", {}, `snapshot seq ${a.snapshot_seq}`))),
    windowBar(a), included(a), omitted(a), whyNot(a), payload ? providerRequest(payload) : null);
}

// ---- two assemblies side by side ---------------------------------------------------------------

/** A segment's identity across assemblies: its kind and the events it was made of. */
function segmentKey(s) {
  return `${s.kind} ${(s.source_event_ids || []).join(",")}`;
}

async function diff(left, right) {
  const [a, b] = await Promise.all([left, right].map((id) => api(`/v1/assemblies/${encodeURIComponent(id)}`)));
  crumbs(h("a", { href: "#/" }, "sessions"),
    h("a", { href: `#/s/${encodeURIComponent(a.session_id)}` }, a.session_id), h("span", {}, "compare"));
  const head = (x) => h("a", { href: `#/a/${encodeURIComponent(x.assembly_id)}` }, x.assembly_id);
  show(h("h1", {}, "Two assemblies"), ...diffView(a, b, head(a), head(b)));
}

/**
 * One call point of a session assembled under two policies (re-folded through the evaluation,
 * nothing recorded): the call's own policy against `other`, segment by segment.
 */
async function policyDiff(session, point, other) {
  crumbs(h("a", { href: "#/" }, "sessions"),
    h("a", { href: `#/s/${encodeURIComponent(session)}` }, session), h("span", {}, `${point}: two policies`));
  const at = (policy) => api(`/v1/sessions/${encodeURIComponent(session)}/eval?` +
    new URLSearchParams({ policy, point }));
  // One after the other: the server runs one evaluation at a time.
  const own = await at("recorded");
  const chosen = other || own.policies.find((p) => p !== own.assembly.policy_version);
  const theirs = await at(chosen);
  const choice = h("select", { id: "pdiff-policy", "aria-label": "policy to compare with",
    onchange: (e) => { location.hash = `#/pdiff/${encodeURIComponent(session)}/${encodeURIComponent(point)}?policy=${encodeURIComponent(e.target.value)}`; } },
  own.policies.map((p) => h("option", { value: p, selected: p === chosen }, p)));
  const score = (r) => r.points.find((p) => p.event_id === point);
  const held = (r) => { const p = score(r); return p ? `${p.sides.strata.present} of ${p.evidence}` : "–"; };
  show(h("h1", {}, `Call point ${point} under two policies`),
    h("section", {}, h("div", { class: "row" }, h("span", {}, "compare the call's own policy with"), choice),
      h("p", { class: "muted" }, "both re-assembled from the session's events as the evaluation does; " +
        `evidence the response used held: ${held(own)} against ${held(theirs)}`)),
    ...diffView(own.assembly, theirs.assembly, `${own.assembly.policy_version} (the call's own)`,
      theirs.assembly.policy_version));
}

/** The comparison of two assembly records: summary, both windows on one scale, the segments that differ. */
function diffView(a, b, headA, headB) {
  const inA = new Map((a.included || []).map((s) => [segmentKey(s), s]));
  const inB = new Map((b.included || []).map((s) => [segmentKey(s), s]));
  const rows = [];
  for (const [k, s] of inA) {
    const other = inB.get(k);
    if (!other) rows.push(["only in the first", s, null]);
    else if (other.tokens !== s.tokens || other.reason !== s.reason) rows.push(["changed", s, other]);
  }
  for (const [k, s] of inB) if (!inA.has(k)) rows.push(["only in the second", null, s]);
  const reasons = [...new Set([...Object.keys(a.omitted || {}), ...Object.keys(b.omitted || {})])];
  const scale = Math.max(...[a, b].flatMap((x) => [x.budget_tokens || 0, x.transcript_tokens || 0, 1]));
  return [
    h("section", { id: "diff-summary" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, headA), h("th", {}, headB))),
      h("tbody", {},
        [["policy", "policy_version"], ["snapshot seq", "snapshot_seq"], ["tokens", "context_tokens"],
          ["transcript replay", "transcript_tokens"], ["budget", "budget_tokens"]]
          .map(([label, field]) => h("tr", {}, h("td", {}, label), h("td", {}, a[field]), h("td", {}, b[field]))),
        reasons.map((r) => h("tr", {}, h("td", {}, `left out: ${r}`),
          h("td", {}, (a.omitted || {})[r] || 0), h("td", {}, (b.omitted || {})[r] || 0)))))),
    windowBar(a, "-first", scale), windowBar(b, "-second", scale),
    h("section", { id: "diff-segments" }, h("h2", {}, "Segments that differ"),
      rows.length
        ? h("table", {}, h("thead", {}, h("tr", {}, ["", "kind", "reason", "sources"].map((c) => h("th", {}, c)),
          h("th", { class: "num" }, "tokens"))),
        h("tbody", {}, rows.map(([what, x, y]) => {
          const s = x || y;
          return h("tr", {}, h("td", {}, what), h("td", {}, s.kind), h("td", {}, (y || x).reason),
            h("td", {}, (s.source_event_ids || []).slice(0, 4).join(", ")),
            h("td", { class: "num" }, x && y ? `${x.tokens} → ${y.tokens}` : s.tokens));
        })))
        : h("p", { class: "muted" }, "The same segments, with the same tokens.")),
  ];
}

// ---- routing ----------------------------------------------------------------------------------

async function route() {
  if (!key()) return signIn();
  document.getElementById("sign-out").hidden = false;
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "s" && parts[1]) await session(parts[1], params.get("event"), params.get("rows") === "all");
    else if (parts[0] === "a" && parts[1]) await assembly(parts[1]);
    else if (parts[0] === "diff" && parts[1] && parts[2]) await diff(parts[1], parts[2]);
    else if (parts[0] === "pdiff" && parts[1] && parts[2]) await policyDiff(parts[1], parts[2], params.get("policy"));
    else await sessions(params.get("after"), params.get("q"));
  } catch (error) {
    failure(error);
  }
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  location.hash = "#/";
  signIn();
});
window.addEventListener("hashchange", route);
route();
