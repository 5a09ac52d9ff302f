//! Claude Code session JSONL: `~/.claude/projects/<project>/<session>.jsonl`, and the
//! transcripts of the subagents it started, `<session>/subagents/agent-<id>.jsonl` next to it.
//!
//! # What maps to what
//!
//! | Claude Code | Canonical |
//! |---|---|
//! | first line of a session | `SessionStarted`, emitted just before the session's first event: model from the first real `message.model`, `cwd`, version, git branch and entrypoint in `extra` |
//! | `assistant` lines of one `message.id` | one `ModelResponseReceived`: its text blocks, all its `tool_use` blocks as tool calls, the last line's `usage`, `requestId` as `model_run_id`; `thinking` text in `extra.thinking` (kept for audit, never sent) |
//! | `user` text blocks / string content | `UserPromptSubmitted` (message id = line `uuid`); harness-written `isMeta` lines get actor `platform` and `extra.meta` |
//! | `tool_result` blocks | `ToolCallFinished` (text of a string or of an array of text blocks, `is_error`); paired by id, an orphan is kept |
//! | successful `Read` / `Write` / `Edit` / `MultiEdit` / `NotebookEdit` | `FileRead` / `FileWritten` (+ `DiffApplied` for an overwrite) / `DiffApplied` / `DiffApplied` / `FileWritten`, after the result: the diff from `toolUseResult.structuredPatch`, else from the call's old and new strings |
//! | `Task` / `Agent` call | `SubagentStarted` in the parent; the subagent's lines as their own child session; `SubagentFinished` at the call's result, the result text as report |
//! | `system` `compact_boundary` + the `isCompactSummary` user line | a `UserPromptSubmitted` of the summary (actor `platform`, `extra.compact_summary`, and the boundary's trigger and token count in `extra.compact_boundary`) |
//! | everything else | counted in [`crate::Report::unmapped`] by kind |
//!
//! # Decisions
//!
//! - **Grouping.** Claude Code writes one line per content block, so one API message spans
//!   several lines, and the results of its first calls may come between them. A message's lines
//!   are gathered until a line of another message (or a user line that is not one of its
//!   results) arrives; the results that came in between are held and emitted after the response,
//!   so every result follows its call. The group is the only thing held. The response's id
//!   comes from its first line's position and the bytes of all its lines
//!   ([`Anchor::with`]): a message that changed is a new event.
//! - **The model before the first event.** `SessionStarted` carries the model, which the first
//!   assistant line names; a session's lines are held until that line (at most [`HOLD`] lines,
//!   then the model is `unknown`).
//! - **Subagents, new layout.** `subagents/agent-<id>.jsonl` holds a subagent's lines (all
//!   `isSidechain`, with its `agentId`). Its first user line is the prompt of the `Task`/`Agent`
//!   call that started it: when that call's message is emitted, the file with that prompt is
//!   imported as the child session `<session>/agent-<id>` (`SubagentStarted` just before it).
//!   A call whose prompt matches no file, or several, is linked at its result by
//!   `toolUseResult.agentId` (its child's events then come just before the result).
//! - **Subagents, old layout (≤ 1.0.x).** Sidechain lines sit in the session file itself; a
//!   chain starts at a sidechain line without a parent and follows `parentUuid`. Each chain is the
//!   child session `<session>/sidechain-<root uuid>`, linked to the waiting `Task` call whose
//!   prompt is the chain's first text.
//! - **Forks.** Subagent files no call started (`agent-acompact-*`: the compaction call;
//!   `agent-aside_question-*`: a side question) repeat the parent's lines, then add their own.
//!   They are imported after the parent as child sessions (`extra.fork`) without the copied lines
//!   (counted), and without `SubagentStarted`/`SubagentFinished`: nothing of theirs reached the
//!   parent's context through a tool result.
//! - **Compaction.** `CompactionCompleted` is derived, so it is not emitted. The summary the
//!   harness sent after a compaction is what the model saw from then on, so it becomes a user
//!   prompt the assembler renders; the boundary is kept on it. Strata's own compaction may later
//!   treat the marked prompt as the point the history was cut.
//! - **Rewinds.** A `parentUuid` that points back (the user went back to an earlier message) is
//!   kept in file order: the file is the history of what happened. Each event keeps its line's
//!   `uuid` in `extra.source` for audit.
//! - Synthetic assistant lines (`model: "<synthetic>"`: API errors, usage limits) are not model
//!   responses: counted. So are images (no inline payload in the canonical model) and attachment,
//!   progress, snapshot, queue, title and summary lines.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use strata_core::payload::{
    DiffApplied, FileRead, FileWritten, ModelResponseReceived, SubagentFinished, SubagentStarted,
    ToolCall, UserPromptSubmitted,
};
use strata_core::Payload;

use crate::emit::{self, Anchor, Draft, SessionStart};
use crate::read::{self, Mode};
use crate::{Converter, Emitter, Error, Record, Source};

/// Lines a session holds back while its model is unknown.
pub const HOLD: usize = 64;

/// The tools that start a subagent.
const TASK_TOOLS: [&str; 2] = ["Task", "Agent"];

/// The tools whose successful result is a file event.
const FILE_TOOLS: [&str; 5] = ["Read", "Write", "Edit", "MultiEdit", "NotebookEdit"];

/// The Claude Code converter.
#[derive(Debug)]
pub struct ClaudeCode {
    transcript: Transcript,
}

impl ClaudeCode {
    pub fn new(source: &Source) -> Self {
        Self {
            transcript: Transcript::new(source.path.clone(), None),
        }
    }
}

impl Converter for ClaudeCode {
    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        self.transcript.record(record, out)
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        self.transcript.finish(out)
    }
}

/// A subagent transcript imported through its parent.
#[derive(Debug)]
struct ChildOf {
    session: String,
    /// `SessionStarted` fields: the parent, the agent id and what its `.meta.json` says.
    extra: Map<String, Value>,
    /// Uuids of the parent's lines: a fork repeats them.
    copied: HashSet<String>,
}

/// The file's own session.
#[derive(Debug)]
struct Own {
    session: String,
    /// The file is a subagent's (its own lines are sidechain lines).
    sidechain: bool,
}

/// One file's conversion: its own session, its inline sidechains, and (for a session file) the
/// subagent files next to it.
#[derive(Debug)]
struct Transcript {
    path: PathBuf,
    child: Option<ChildOf>,
    own: Option<Own>,
    threads: HashMap<String, Thread>,
    /// Sessions in the order they were seen (what `finish` walks).
    order: Vec<String>,
    /// `SessionStarted` of sessions whose first event is still to come.
    starts: HashMap<String, SessionStart>,
    /// The session of each inline sidechain line, by uuid (chains follow `parentUuid`).
    sidechain_of: HashMap<String, String>,
    /// Calls without a result yet, by session and emitted id.
    calls: HashMap<(String, String), Call>,
    calls_made: u64,
    /// The `subagents/` files of a session file (`None` until the first line).
    subagents: Option<Vec<SubagentFile>>,
    /// Uuids of this file's lines (what a fork copies).
    uuids: HashSet<String>,
}

/// One conversation thread of a file: the file's own, or an inline sidechain.
#[derive(Debug)]
struct Thread {
    session: String,
    /// The model is known: lines are converted as they come.
    ready: bool,
    held: Vec<Record>,
    /// `SessionStarted.extra` fields known before its first line.
    extra: Map<String, Value>,
    model: Option<String>,
    group: Option<Group>,
    /// A compaction boundary waiting for its summary.
    boundary: Option<Value>,
}

/// The lines of one assistant message, and the results that came between them.
#[derive(Debug)]
struct Group {
    message_id: String,
    anchor: Anchor,
    timestamp: Option<DateTime<Utc>>,
    uuid: Option<String>,
    request_id: Option<String>,
    model: Option<String>,
    text: Vec<String>,
    thinking: Vec<String>,
    calls: Vec<RawCall>,
    usage: Option<Value>,
    stop_reason: Option<String>,
    results: Vec<Record>,
}

#[derive(Debug)]
struct RawCall {
    id: String,
    name: String,
    input: Value,
}

/// A call waiting for its result.
#[derive(Debug)]
struct Call {
    seq: u64,
    id: String,
    name: String,
    /// The input of the tools whose result needs it (files, subagents); `Null` otherwise.
    input: Value,
    child: Option<ChildLink>,
}

impl Call {
    fn prompt(&self) -> Option<&str> {
        self.input.get("prompt").and_then(Value::as_str)
    }
}

/// The child session a `Task`/`Agent` call started.
#[derive(Debug)]
struct ChildLink {
    session: String,
    /// An inline sidechain of this file (a thread that may hold a message group).
    inline: bool,
    /// Its `SubagentStarted` was emitted.
    announced: bool,
}

/// A `subagents/agent-<id>.jsonl` file.
#[derive(Debug)]
struct SubagentFile {
    path: PathBuf,
    agent_id: String,
    prompt: Option<String>,
    /// `agentType` and `description` of its `.meta.json`.
    meta: Map<String, Value>,
    imported: bool,
}

impl Transcript {
    fn new(path: PathBuf, child: Option<ChildOf>) -> Self {
        Self {
            path,
            child,
            own: None,
            threads: HashMap::new(),
            order: Vec::new(),
            starts: HashMap::new(),
            sidechain_of: HashMap::new(),
            calls: HashMap::new(),
            calls_made: 0,
            subagents: None,
            uuids: HashSet::new(),
        }
    }

    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let obj = record.value.as_object().ok_or_else(|| {
            format!(
                "a line must be a JSON object, found {}",
                kind(&record.value)
            )
        })?;
        let ty = str_of(obj, "type").ok_or("no \"type\" field (a string)")?;
        match ty {
            "user" | "assistant" => {}
            "system" if str_of(obj, "subtype") == Some("compact_boundary") => {}
            "system" => {
                out.unmapped(match str_of(obj, "subtype") {
                    Some(s) => format!("system subtype {s:?}"),
                    None => "system line without a subtype".into(),
                });
                return Ok(());
            }
            "attachment" => {
                let what = obj
                    .get("attachment")
                    .and_then(|a| str_of(a.as_object()?, "type"))
                    .unwrap_or("untyped");
                out.unmapped(format!("attachment {what:?}"));
                return Ok(());
            }
            other => {
                out.unmapped(format!("line type {other:?}"));
                return Ok(());
            }
        }
        // Checked as it comes: the line may be held and converted later.
        check(obj, ty)?;
        let uuid = str_of(obj, "uuid");
        if let (Some(c), Some(u)) = (&self.child, uuid) {
            if c.copied.contains(u) {
                out.unmapped("line a fork copied from its parent");
                return Ok(());
            }
        }
        if self.child.is_none() {
            if self.subagents.is_none() {
                self.subagents = Some(subagent_files(&self.path)?);
            }
            if let Some(u) = uuid {
                self.uuids.insert(u.to_owned());
            }
        }
        let session = self.route(&record, out)?;
        let mut thread = self
            .threads
            .remove(&session)
            .ok_or_else(|| format!("internal: no thread for session {session}"))?;
        let result = self.feed(&mut thread, record, out);
        self.threads.insert(session, thread);
        result
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        for session in self.order.clone() {
            let Some(mut thread) = self.threads.remove(&session) else {
                continue;
            };
            let result = self.finish_thread(&mut thread, out);
            self.threads.insert(session, thread);
            result?;
        }
        // Subagent files no call started: forks of this session.
        let parent = match &self.own {
            Some(o) => o.session.clone(),
            None => out.main_session(None),
        };
        let forks: Vec<usize> = self
            .subagents
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, f)| !f.imported)
            .map(|(i, _)| i)
            .collect();
        for i in forks {
            self.import_subagent(i, &parent, true, out)?;
        }
        Ok(())
    }

    fn finish_thread(&mut self, t: &mut Thread, out: &mut Emitter<'_>) -> Result<(), String> {
        // Its model never showed: its lines ran out first.
        if let Some(first) = t.held.first().filter(|_| !t.ready) {
            let start = session_start(object(first)?, None, &t.extra, &t.session)?;
            self.begin(t, start, out)?;
        }
        self.flush(t, out)?;
        if t.boundary.take().is_some() {
            out.unmapped("compact_boundary without a summary");
        }
        Ok(())
    }

    /// The session a line belongs to (creating its thread).
    fn route(&mut self, record: &Record, out: &mut Emitter<'_>) -> Result<String, String> {
        let obj = object(record)?;
        let own = self.own_session(obj, out);
        let own_sidechain = self.own.as_ref().is_some_and(|o| o.sidechain);
        if !is_true(obj, "isSidechain") || own_sidechain {
            return Ok(own);
        }
        let parent = str_of(obj, "parentUuid").or_else(|| str_of(obj, "logicalParentUuid"));
        let session = match parent.and_then(|p| self.sidechain_of.get(p)) {
            Some(s) => s.clone(),
            None => self.start_sidechain(record, &own, out)?,
        };
        if let Some(u) = str_of(obj, "uuid") {
            self.sidechain_of.insert(u.to_owned(), session.clone());
        }
        Ok(session)
    }

    /// The file's own session, named by its first line.
    fn own_session(&mut self, obj: &Map<String, Value>, out: &mut Emitter<'_>) -> String {
        if let Some(o) = &self.own {
            return o.session.clone();
        }
        let mut extra = Map::new();
        let (session, sidechain) = match &self.child {
            Some(c) => {
                extra.clone_from(&c.extra);
                (c.session.clone(), true)
            }
            None => {
                let main = out.main_session(str_of(obj, "sessionId"));
                match (is_true(obj, "isSidechain"), str_of(obj, "agentId")) {
                    // A subagents/ file imported on its own: named as its parent would name it.
                    (true, Some(agent)) => {
                        extra.insert("parent_session_id".into(), main.clone().into());
                        extra.insert("agent_id".into(), agent.into());
                        (format!("{main}/agent-{agent}"), true)
                    }
                    _ => (main, false),
                }
            }
        };
        self.own = Some(Own {
            session: session.clone(),
            sidechain,
        });
        self.new_thread(session.clone(), extra);
        session
    }

    fn new_thread(&mut self, session: String, extra: Map<String, Value>) {
        self.order.push(session.clone());
        self.threads.insert(
            session.clone(),
            Thread {
                session,
                ready: false,
                held: Vec::new(),
                extra,
                model: None,
                group: None,
                boundary: None,
            },
        );
    }

    /// A new inline sidechain: its child session, linked to the `Task` call whose prompt it
    /// starts with.
    fn start_sidechain(
        &mut self,
        record: &Record,
        own: &str,
        out: &mut Emitter<'_>,
    ) -> Result<String, String> {
        let obj = object(record)?;
        let root = str_of(obj, "uuid")
            .map(str::to_owned)
            .unwrap_or_else(|| record.position.key());
        let session = format!("{own}/sidechain-{root}");
        // The call may still sit in the parent's message group.
        self.flush_session(own, out)?;
        let prompt = user_text(obj);
        let waiting = self
            .calls
            .iter()
            .filter(|((s, _), c)| s == own && c.child.is_none() && c.prompt().is_some())
            .filter(|(_, c)| c.prompt() == prompt.as_deref())
            .min_by_key(|(_, c)| c.seq)
            .map(|(k, _)| k.clone());
        let mut extra = Map::new();
        extra.insert("parent_session_id".into(), own.into());
        extra.insert("sidechain_root_uuid".into(), root.into());
        let started = waiting.and_then(|k| self.calls.get_mut(&k)).map(|call| {
            call.child = Some(ChildLink {
                session: session.clone(),
                inline: true,
                announced: true,
            });
            subagent_started(call, &session)
        });
        match started {
            Some(payload) => {
                let draft = Draft::new(own, payload).at(time_of(obj)?).actor("agent");
                self.emit(out, &record.anchor(), draft);
            }
            None => out.unmapped("sidechain without a waiting Task call"),
        }
        self.new_thread(session.clone(), extra);
        Ok(session)
    }

    fn flush_session(&mut self, session: &str, out: &mut Emitter<'_>) -> Result<(), String> {
        let Some(mut thread) = self.threads.remove(session) else {
            return Ok(());
        };
        let result = self.flush(&mut thread, out);
        self.threads.insert(session.to_owned(), thread);
        result
    }

    /// A line of a thread: held until the thread's model is known, then converted.
    fn feed(
        &mut self,
        t: &mut Thread,
        record: Record,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        if !t.ready {
            let model = assistant_model(&record.value);
            if model.is_none() && t.held.len() + 1 < HOLD {
                t.held.push(record);
                return Ok(());
            }
            let first = t.held.first().unwrap_or(&record);
            let start = session_start(object(first)?, model, &t.extra, &t.session)?;
            self.begin(t, start, out)?;
        }
        self.process(t, record, out)
    }

    /// Starts converting a thread's lines: what it held first. Its `SessionStarted` waits for
    /// its first event.
    fn begin(
        &mut self,
        t: &mut Thread,
        start: SessionStart,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        t.model.clone_from(&start.model);
        t.ready = true;
        self.starts.insert(t.session.clone(), start);
        for r in std::mem::take(&mut t.held) {
            self.process(t, r, out)?;
        }
        Ok(())
    }

    /// Emits an event, after its session's `SessionStarted` when it is the session's first.
    fn emit(&mut self, out: &mut Emitter<'_>, anchor: &Anchor, draft: Draft) {
        if let Some(mut start) = self.starts.remove(&draft.session) {
            // A first line without a time: the session starts with its first event.
            start.timestamp = start.timestamp.or(draft.timestamp);
            out.session_started(anchor, &draft.session, start);
        }
        out.emit(anchor, draft);
    }

    fn process(
        &mut self,
        t: &mut Thread,
        record: Record,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(&record)?;
        let ty = str_of(obj, "type").unwrap_or_default();
        if ty != "system" && !is_true(obj, "isCompactSummary") && t.boundary.take().is_some() {
            out.unmapped("compact_boundary without a summary");
        }
        match ty {
            "assistant" => self.assistant(t, record, out),
            "user" => self.user(t, record, out),
            _ => {
                self.flush(t, out)?;
                if t.boundary.replace(boundary_of(obj)).is_some() {
                    out.unmapped("compact_boundary without a summary");
                }
                Ok(())
            }
        }
    }

    fn assistant(
        &mut self,
        t: &mut Thread,
        record: Record,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(&record)?;
        let message = message_of(obj, "assistant")?;
        if str_of(message, "model") == Some("<synthetic>") || is_true(obj, "isApiErrorMessage") {
            out.unmapped("synthetic assistant message (API error or notice)");
            return Ok(());
        }
        let id = str_of(message, "id")
            .or_else(|| str_of(obj, "uuid"))
            .map(str::to_owned)
            .unwrap_or_else(|| record.position.key());
        if let Some(g) = t.group.as_mut().filter(|g| g.message_id == id) {
            // The response's id depends on every line of it.
            g.anchor = g.anchor.with(&record.anchor());
            return g.add(message, out);
        }
        self.flush(t, out)?;
        let mut group = Group {
            message_id: id,
            anchor: record.anchor(),
            timestamp: time_of(obj)?,
            uuid: str_of(obj, "uuid").map(str::to_owned),
            request_id: str_of(obj, "requestId").map(str::to_owned),
            model: None,
            text: Vec::new(),
            thinking: Vec::new(),
            calls: Vec::new(),
            usage: None,
            stop_reason: None,
            results: Vec::new(),
        };
        group.add(message, out)?;
        t.group = Some(group);
        Ok(())
    }

    fn user(
        &mut self,
        t: &mut Thread,
        record: Record,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(&record)?;
        let message = message_of(obj, "user")?;
        let content = message.get("content").unwrap_or(&Value::Null);
        if let Some(g) = t.group.as_mut() {
            if !is_true(obj, "isCompactSummary") && g.takes_results(content) {
                g.results.push(record);
                return Ok(());
            }
        }
        self.flush(t, out)?;
        self.user_line(t, &record, out)
    }

    /// Emits a message group: the response, the subagents its calls started, then the results
    /// that came between its lines.
    fn flush(&mut self, t: &mut Thread, out: &mut Emitter<'_>) -> Result<(), String> {
        let Some(g) = t.group.take() else {
            return Ok(());
        };
        let (tool_calls, spawned) = self.register_calls(&t.session, g.calls, out);
        let mut extra = Map::new();
        if !g.thinking.is_empty() {
            extra.insert("thinking".into(), g.thinking.join("\n\n").into());
        }
        if let Some(s) = g.stop_reason {
            extra.insert("stop_reason".into(), s.into());
        }
        if g.model.is_some() && g.model != t.model {
            extra.insert("model".into(), g.model.clone().into());
        }
        let payload = Payload::ModelResponseReceived(ModelResponseReceived {
            message_id: g.message_id,
            model_run_id: g.request_id,
            text: g.text.join("\n"),
            tool_calls,
            usage: emit::usage_of(g.usage.as_ref()),
            extra,
        });
        let draft = Draft::new(t.session.clone(), payload)
            .at(g.timestamp)
            .actor("model");
        self.emit(out, &g.anchor, with_source(draft, g.uuid.as_deref()));
        // Every SubagentStarted of the group before any child's events: the group's anchor
        // gives them their ids, in a row.
        let imports = self.start_subagents(&t.session, &spawned, &g.anchor, g.timestamp, out);
        for i in imports {
            self.import_subagent(i, &t.session, false, out)?;
        }
        for r in g.results {
            self.user_line(t, &r, out)?;
        }
        Ok(())
    }

    /// The calls of a response, with their emitted ids, kept until their results; and the ids
    /// of those that start subagents.
    fn register_calls(
        &mut self,
        session: &str,
        calls: Vec<RawCall>,
        out: &mut Emitter<'_>,
    ) -> (Vec<ToolCall>, Vec<String>) {
        let mut tool_calls = Vec::with_capacity(calls.len());
        let mut spawned = Vec::new();
        for c in calls {
            let id = out.new_call_id(session, &c.id);
            tool_calls.push(emit::tool_call(
                id.clone(),
                c.name.clone(),
                emit::arguments(Some(&c.input)),
            ));
            let spawns = TASK_TOOLS.contains(&c.name.as_str());
            if spawns {
                spawned.push(id.clone());
            }
            // Only the inputs a result needs are kept (file paths and edits, prompts).
            let keep = spawns || FILE_TOOLS.contains(&c.name.as_str());
            self.calls_made += 1;
            self.calls.insert(
                (session.to_owned(), id.clone()),
                Call {
                    seq: self.calls_made,
                    id,
                    name: c.name,
                    input: if keep { c.input } else { Value::Null },
                    child: None,
                },
            );
        }
        (tool_calls, spawned)
    }

    /// Links `Task`/`Agent` calls to the subagent files their prompts started, emitting their
    /// `SubagentStarted`; returns the files to import.
    fn start_subagents(
        &mut self,
        session: &str,
        spawned: &[String],
        anchor: &Anchor,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) -> Vec<usize> {
        let mut imports = Vec::new();
        for id in spawned {
            let key = (session.to_owned(), id.clone());
            let prompt = self.calls.get(&key).and_then(Call::prompt);
            let Some(i) = find_subagent(self.subagents.as_deref(), prompt) else {
                continue;
            };
            let (Some(file), Some(call)) = (
                self.subagents.as_mut().and_then(|f| f.get_mut(i)),
                self.calls.get_mut(&key),
            ) else {
                continue;
            };
            // Claimed now, so the group's next call does not take it too.
            file.imported = true;
            let child = format!("{session}/agent-{}", file.agent_id);
            call.child = Some(ChildLink {
                session: child.clone(),
                inline: false,
                announced: true,
            });
            let payload = subagent_started(call, &child);
            let draft = Draft::new(session, payload).at(at).actor("agent");
            self.emit(out, anchor, draft);
            imports.push(i);
        }
        imports
    }

    /// A user line: its tool results, then its text as a prompt.
    fn user_line(
        &mut self,
        t: &mut Thread,
        record: &Record,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(record)?;
        let message = message_of(obj, "user")?;
        let content = message.get("content").unwrap_or(&Value::Null);
        if is_true(obj, "isCompactSummary") {
            return self.compact_summary(t, record, content, out);
        }
        let blocks: &[Value] = match content {
            Value::Array(blocks) => blocks,
            Value::String(_) | Value::Null => &[],
            other => {
                return Err(format!(
                    "message.content must be a string or an array, found {}",
                    kind(other)
                ))
            }
        };
        let mut results = Vec::new();
        let mut texts = Vec::new();
        if let Value::String(s) = content {
            texts.push(s.as_str());
        }
        for block in blocks {
            let b = block
                .as_object()
                .ok_or("a content block is not an object")?;
            match str_of(b, "type") {
                Some("tool_result") => results.push(b),
                Some("text") => texts.extend(str_of(b, "text")),
                Some(other) => out.unmapped(format!("content block {other:?}")),
                None => return Err("a content block without a \"type\"".into()),
            }
        }
        // The structured result belongs to the line's one result.
        let structured = match results.len() {
            1 => obj.get("toolUseResult"),
            _ => None,
        };
        for r in &results {
            self.link_late(&t.session, r, structured, out)?;
        }
        for r in &results {
            self.tool_result(&t.session, record, r, structured, out)?;
        }
        let text = texts.join("\n");
        if !text.trim().is_empty() {
            let meta = is_true(obj, "isMeta");
            let mut extra = Map::new();
            if meta {
                extra.insert("meta".into(), true.into());
            }
            let payload = Payload::UserPromptSubmitted(UserPromptSubmitted {
                message_id: message_id(obj, record),
                text,
                extra,
            });
            let draft = Draft::new(t.session.clone(), payload)
                .at(time_of(obj)?)
                .actor(if meta { "platform" } else { "user" });
            self.emit(
                out,
                &record.anchor(),
                with_source(draft, str_of(obj, "uuid")),
            );
        }
        Ok(())
    }

    /// The summary a compaction left, with its boundary.
    fn compact_summary(
        &mut self,
        t: &mut Thread,
        record: &Record,
        content: &Value,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(record)?;
        for part in emit::non_text_parts(content) {
            out.unmapped(format!("content block {part:?}"));
        }
        let mut extra = Map::new();
        extra.insert("compact_summary".into(), true.into());
        if let Some(b) = t.boundary.take() {
            extra.insert("compact_boundary".into(), b);
        }
        let payload = Payload::UserPromptSubmitted(UserPromptSubmitted {
            message_id: message_id(obj, record),
            text: emit::content_text(content),
            extra,
        });
        let draft = Draft::new(t.session.clone(), payload)
            .at(time_of(obj)?)
            .actor("platform");
        self.emit(
            out,
            &record.anchor(),
            with_source(draft, str_of(obj, "uuid")),
        );
        Ok(())
    }

    /// Before a result's events: links a `Task`/`Agent` call to the subagent file its result
    /// names when its prompt found none (importing it), and emits what an inline child still
    /// holds.
    fn link_late(
        &mut self,
        session: &str,
        result: &Map<String, Value>,
        structured: Option<&Value>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let Some(source_id) = str_of(result, "tool_use_id") else {
            return Ok(());
        };
        let key = (session.to_owned(), out.call_id(session, source_id));
        let Some(call) = self.calls.get(&key) else {
            return Ok(());
        };
        if let Some(link) = &call.child {
            if link.inline {
                let child = link.session.clone();
                self.flush_session(&child, out)?;
            }
            return Ok(());
        }
        if !TASK_TOOLS.contains(&call.name.as_str()) {
            return Ok(());
        }
        let agent = structured
            .and_then(|s| s.get("agentId"))
            .and_then(Value::as_str);
        let found = self.subagents.as_ref().and_then(|files| {
            files
                .iter()
                .position(|f| !f.imported && Some(f.agent_id.as_str()) == agent)
        });
        let (Some(i), Some(agent)) = (found, agent) else {
            return Ok(());
        };
        let child = format!("{session}/agent-{agent}");
        self.import_subagent(i, session, false, out)?;
        if let Some(call) = self.calls.get_mut(&key) {
            call.child = Some(ChildLink {
                session: child,
                inline: false,
                announced: false,
            });
        }
        Ok(())
    }

    /// A tool result: `ToolCallFinished`, the file events of a successful file tool, and the
    /// end of a subagent.
    fn tool_result(
        &mut self,
        session: &str,
        record: &Record,
        result: &Map<String, Value>,
        structured: Option<&Value>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let obj = object(record)?;
        let source_id = str_of(result, "tool_use_id")
            .filter(|s| !s.is_empty())
            .ok_or("a tool_result block without a \"tool_use_id\"")?;
        let id = out.call_id(session, source_id);
        let call = self.calls.remove(&(session.to_owned(), id.clone()));
        let content = result.get("content").unwrap_or(&Value::Null);
        for part in emit::non_text_parts(content) {
            out.unmapped(format!("tool result block {part:?}"));
        }
        let output = emit::content_text(content);
        let is_error = result
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let at = time_of(obj)?;
        let anchor = record.anchor();
        let uuid = str_of(obj, "uuid");
        if let Some((call, link)) = call
            .as_ref()
            .and_then(|c| Some((c, c.child.as_ref()?)))
            .filter(|(_, l)| !l.announced)
        {
            let draft = Draft::new(session, subagent_started(call, &link.session))
                .at(at)
                .actor("agent");
            self.emit(out, &anchor, draft);
        }
        let payload = emit::tool_result(id.clone(), output.clone(), is_error, Map::new());
        let draft = Draft::new(session, payload).at(at).actor("tool");
        self.emit(out, &anchor, with_source(draft, uuid));
        let Some(call) = call else {
            return Ok(());
        };
        if !is_error {
            for payload in file_events(&call, structured) {
                let draft = Draft::new(session, payload).at(at).actor("agent");
                self.emit(out, &anchor, with_source(draft, uuid));
            }
        }
        if let Some(link) = &call.child {
            let payload = subagent_finished(&call, &link.session, output, is_error, structured);
            let draft = Draft::new(session, payload).at(at).actor("agent");
            self.emit(out, &anchor, draft);
        }
        Ok(())
    }

    /// Imports a subagent file as a child session of `parent`.
    fn import_subagent(
        &mut self,
        index: usize,
        parent: &str,
        fork: bool,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let Some(file) = self.subagents.as_mut().and_then(|f| f.get_mut(index)) else {
            return Ok(());
        };
        file.imported = true;
        let mut extra = Map::new();
        extra.insert("parent_session_id".into(), parent.into());
        extra.insert("agent_id".into(), file.agent_id.clone().into());
        extra.extend(file.meta.clone());
        if fork {
            extra.insert("fork".into(), true.into());
        }
        let child = ChildOf {
            session: format!("{parent}/agent-{}", file.agent_id),
            extra,
            copied: std::mem::take(&mut self.uuids),
        };
        let source = Source::new(file.path.clone());
        let mut transcript = Transcript::new(file.path.clone(), Some(child));
        let result = read::records(&source, Mode::Jsonl, &[], &mut |record| {
            out.report.records += 1;
            let position = record.position.clone();
            transcript
                .record(record, out)
                .map_err(|message| Error::Record {
                    file: source.name.clone(),
                    position,
                    message,
                })
        })
        .map_err(|e| format!("subagent transcript {e}"))
        .and_then(|()| {
            transcript
                .finish(out)
                .map_err(|e| format!("subagent transcript {}: {e}", source.name))
        });
        if let Some(c) = transcript.child.take() {
            self.uuids = c.copied;
        }
        result
    }
}

impl Group {
    /// Adds one line of the message.
    fn add(&mut self, message: &Map<String, Value>, out: &mut Emitter<'_>) -> Result<(), String> {
        if self.model.is_none() {
            self.model = str_of(message, "model").map(str::to_owned);
        }
        if let Some(u) = message.get("usage").filter(|u| u.is_object()) {
            // Every line of a streamed message carries the usage so far: the last is the total.
            self.usage = Some(u.clone());
        }
        if let Some(s) = str_of(message, "stop_reason") {
            self.stop_reason = Some(s.to_owned());
        }
        match message.get("content") {
            Some(Value::String(s)) => self.text.push(s.clone()),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    self.block(block, out)?;
                }
            }
            None | Some(Value::Null) => {}
            Some(other) => {
                return Err(format!(
                    "message.content must be a string or an array, found {}",
                    kind(other)
                ))
            }
        }
        Ok(())
    }

    fn block(&mut self, block: &Value, out: &mut Emitter<'_>) -> Result<(), String> {
        let b = block
            .as_object()
            .ok_or("a content block is not an object")?;
        match str_of(b, "type") {
            Some("text") => self.text.extend(str_of(b, "text").map(str::to_owned)),
            Some("thinking") => match str_of(b, "thinking").filter(|t| !t.is_empty()) {
                Some(t) => self.thinking.push(t.to_owned()),
                // Newer versions keep only the signature.
                None => out.unmapped("thinking block without text"),
            },
            Some("tool_use") => {
                let id = str_of(b, "id")
                    .filter(|s| !s.is_empty())
                    .ok_or("a tool_use block without an \"id\"")?;
                let name = str_of(b, "name")
                    .filter(|s| !s.is_empty())
                    .ok_or("a tool_use block without a \"name\"")?;
                self.calls.push(RawCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input: b.get("input").cloned().unwrap_or(Value::Null),
                });
            }
            Some(other) => out.unmapped(format!("content block {other:?}")),
            None => return Err("a content block without a \"type\"".into()),
        }
        Ok(())
    }

    /// Whether a user line is only tool results, which belong after this message: its own
    /// (Claude Code writes them between the message's lines, and sometimes a result before its
    /// call's line), or late ones of earlier messages.
    fn takes_results(&self, content: &Value) -> bool {
        let Value::Array(blocks) = content else {
            return false;
        };
        !blocks.is_empty()
            && blocks
                .iter()
                .all(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
    }
}

/// Whether a line has what its conversion needs (the errors a malformed line gives).
fn check(obj: &Map<String, Value>, ty: &str) -> Result<(), String> {
    time_of(obj)?;
    if ty == "system" {
        return Ok(());
    }
    let content = message_of(obj, ty)?.get("content").unwrap_or(&Value::Null);
    let blocks = match content {
        Value::Array(blocks) => blocks,
        Value::String(_) | Value::Null => return Ok(()),
        other => {
            return Err(format!(
                "message.content must be a string or an array, found {}",
                kind(other)
            ))
        }
    };
    for block in blocks {
        let b = block
            .as_object()
            .ok_or("a content block is not an object")?;
        let non_empty = |key: &str| str_of(b, key).is_some_and(|s| !s.is_empty());
        match str_of(b, "type") {
            None => return Err("a content block without a \"type\"".into()),
            Some("tool_use") if !non_empty("id") => {
                return Err("a tool_use block without an \"id\"".into())
            }
            Some("tool_use") if !non_empty("name") => {
                return Err("a tool_use block without a \"name\"".into())
            }
            Some("tool_result") if !non_empty("tool_use_id") => {
                return Err("a tool_result block without a \"tool_use_id\"".into())
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn object(record: &Record) -> Result<&Map<String, Value>, String> {
    record
        .value
        .as_object()
        .ok_or_else(|| "a line must be a JSON object".to_owned())
}

fn str_of<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

fn is_true(o: &Map<String, Value>, key: &str) -> bool {
    o.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn kind(v: &Value) -> &'static str {
    strata_core::event::kind_of(v)
}

fn message_of<'a>(obj: &'a Map<String, Value>, ty: &str) -> Result<&'a Map<String, Value>, String> {
    obj.get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("a {ty:?} line needs a \"message\" object"))
}

/// A line's time; a time that is there but unreadable is an error.
fn time_of(obj: &Map<String, Value>) -> Result<Option<DateTime<Utc>>, String> {
    match obj.get("timestamp") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => emit::parse_time(Some(v))
            .map(Some)
            .ok_or_else(|| format!("timestamp {v} is not an RFC 3339 time")),
    }
}

fn message_id(obj: &Map<String, Value>, record: &Record) -> String {
    str_of(obj, "uuid")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| record.position.key())
}

/// Keeps the line's uuid beside the envelope, for audit.
fn with_source(draft: Draft, uuid: Option<&str>) -> Draft {
    match uuid {
        Some(u) => draft.extra("source", json!({ "uuid": u })),
        None => draft,
    }
}

/// The model of an assistant line written by the model (not a synthetic one).
fn assistant_model(value: &Value) -> Option<String> {
    if value.get("type").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    value
        .get("message")?
        .get("model")?
        .as_str()
        .filter(|m| !m.is_empty() && *m != "<synthetic>")
        .map(str::to_owned)
}

/// The text a user line gives (what a sidechain's first line says: its task).
fn user_text(obj: &Map<String, Value>) -> Option<String> {
    if str_of(obj, "type") != Some("user") {
        return None;
    }
    let content = obj.get("message")?.get("content")?;
    let text = match content {
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        other => emit::content_text(other),
    };
    Some(text)
}

/// What `SessionStarted` says of a session, from its first line.
fn session_start(
    first: &Map<String, Value>,
    model: Option<String>,
    known: &Map<String, Value>,
    session: &str,
) -> Result<SessionStart, String> {
    let mut extra = known.clone();
    for (from, to) in [
        ("version", "claude_code_version"),
        ("gitBranch", "git_branch"),
        ("entrypoint", "entrypoint"),
    ] {
        if let Some(v) = str_of(first, from).filter(|v| !v.is_empty()) {
            extra.insert(to.into(), v.into());
        }
    }
    if let Some(s) = str_of(first, "sessionId").filter(|s| *s != session) {
        extra.insert("source_session_id".into(), s.into());
    }
    Ok(SessionStart {
        timestamp: time_of(first)?,
        model,
        cwd: str_of(first, "cwd").map(str::to_owned),
        extra,
        ..SessionStart::default()
    })
}

/// What a compaction boundary says.
fn boundary_of(obj: &Map<String, Value>) -> Value {
    let meta = obj.get("compactMetadata");
    let mut b = Map::new();
    for (key, value) in [
        ("uuid", obj.get("uuid")),
        ("timestamp", obj.get("timestamp")),
        ("logical_parent_uuid", obj.get("logicalParentUuid")),
        ("trigger", meta.and_then(|m| m.get("trigger"))),
        ("pre_tokens", meta.and_then(|m| m.get("preTokens"))),
    ] {
        if let Some(v) = value.filter(|v| !v.is_null()) {
            b.insert(key.into(), v.clone());
        }
    }
    Value::Object(b)
}

fn subagent_started(call: &Call, child: &str) -> Payload {
    let mut extra = Map::new();
    extra.insert("tool_call_id".into(), call.id.clone().into());
    for key in ["description", "subagent_type"] {
        if let Some(v) = call.input.get(key).filter(|v| v.is_string()) {
            extra.insert(key.into(), v.clone());
        }
    }
    Payload::SubagentStarted(SubagentStarted {
        child_session_id: child.to_owned(),
        task: call.prompt().map(str::to_owned),
        extra,
    })
}

fn subagent_finished(
    call: &Call,
    child: &str,
    report: String,
    is_error: bool,
    structured: Option<&Value>,
) -> Payload {
    let s = structured.and_then(Value::as_object);
    let status = if is_error {
        "failed".to_owned()
    } else if s
        .and_then(|s| s.get("wasInterrupted"))
        .and_then(Value::as_bool)
        == Some(true)
    {
        "cancelled".to_owned()
    } else {
        match s.and_then(|s| str_of(s, "status")) {
            None | Some("completed") => "succeeded".to_owned(),
            Some(other) => other.to_owned(),
        }
    };
    let mut extra = Map::new();
    extra.insert("tool_call_id".into(), call.id.clone().into());
    for (from, to) in [
        ("agentId", "agent_id"),
        ("totalTokens", "total_tokens"),
        ("totalDurationMs", "total_duration_ms"),
        ("totalToolUseCount", "total_tool_use_count"),
    ] {
        if let Some(v) = s.and_then(|s| s.get(from)).filter(|v| !v.is_null()) {
            extra.insert(to.into(), v.clone());
        }
    }
    Payload::SubagentFinished(SubagentFinished {
        child_session_id: child.to_owned(),
        report,
        artifacts: Vec::new(),
        status,
        extra,
    })
}

/// The file events of a successful file tool.
fn file_events(call: &Call, structured: Option<&Value>) -> Vec<Payload> {
    let input = &call.input;
    let s = structured.filter(|s| s.is_object());
    let path = input
        .get("file_path")
        .or_else(|| input.get("notebook_path"))
        .and_then(Value::as_str)
        .or_else(|| s.and_then(|s| s.get("filePath")).and_then(Value::as_str))
        .filter(|p| !p.is_empty());
    let Some(path) = path else {
        return Vec::new();
    };
    let mut extra = Map::new();
    extra.insert("tool_call_id".into(), call.id.clone().into());
    let patch = s
        .and_then(|s| s.get("structuredPatch"))
        .and_then(Value::as_array)
        .filter(|hunks| !hunks.is_empty())
        .map(|hunks| patch_diff(path, hunks));
    let diff = |diff: String| {
        Payload::DiffApplied(DiffApplied {
            path: path.to_owned(),
            diff,
            extra: extra.clone(),
        })
    };
    match call.name.as_str() {
        "Read" => vec![Payload::FileRead(FileRead {
            path: path.to_owned(),
            bytes: None,
            extra: extra.clone(),
        })],
        "Edit" => {
            let pairs = [(
                str_field(input, "old_string"),
                str_field(input, "new_string"),
            )];
            vec![diff(patch.unwrap_or_else(|| replace_diff(path, &pairs)))]
        }
        "MultiEdit" => {
            let pairs: Vec<(&str, &str)> = input
                .get("edits")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|e| (str_field(e, "old_string"), str_field(e, "new_string")))
                .collect();
            vec![diff(patch.unwrap_or_else(|| replace_diff(path, &pairs)))]
        }
        "Write" => {
            let kind = s.and_then(|s| s.get("type")).and_then(Value::as_str);
            let written = Payload::FileWritten(FileWritten {
                path: path.to_owned(),
                bytes: input
                    .get("content")
                    .and_then(Value::as_str)
                    .map(|c| c.len() as u64),
                summary: match kind {
                    Some("create") => Some("created".into()),
                    Some("update") => Some("overwritten".into()),
                    _ => None,
                },
                extra: extra.clone(),
            });
            match patch.filter(|_| kind == Some("update")) {
                Some(p) => vec![written, diff(p)],
                None => vec![written],
            }
        }
        "NotebookEdit" => vec![Payload::FileWritten(FileWritten {
            path: path.to_owned(),
            bytes: None,
            summary: Some(match str_field(input, "edit_mode") {
                "" => "notebook cell edited".to_owned(),
                mode => format!("notebook cell {mode}"),
            }),
            extra: extra.clone(),
        })],
        _ => Vec::new(),
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A unified diff of Claude Code's structured patch (hunks with their positions and lines).
fn patch_diff(path: &str, hunks: &[Value]) -> String {
    let mut diff = format!("--- {path}\n+++ {path}\n");
    for h in hunks {
        let n = |k: &str| h.get(k).and_then(Value::as_u64).unwrap_or(0);
        diff.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            n("oldStart"),
            n("oldLines"),
            n("newStart"),
            n("newLines")
        ));
        for line in h
            .get("lines")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            diff.push_str(line.as_str().unwrap_or_default());
            diff.push('\n');
        }
    }
    diff
}

/// A unified diff of string replacements whose place in the file is unknown: hunks without
/// line numbers (`@@ @@`), the lines the old and new strings share kept as context.
fn replace_diff(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut diff = format!("--- {path}\n+++ {path}\n");
    for (old, new) in pairs {
        let old: Vec<&str> = old.lines().collect();
        let new: Vec<&str> = new.lines().collect();
        let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        let tail = old[head..]
            .iter()
            .rev()
            .zip(new[head..].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        diff.push_str("@@ @@\n");
        let context = |line: &&str| format!(" {line}\n");
        diff.extend(old[..head].iter().map(context));
        diff.extend(
            old[head..old.len() - tail]
                .iter()
                .map(|l| format!("-{l}\n")),
        );
        diff.extend(
            new[head..new.len() - tail]
                .iter()
                .map(|l| format!("+{l}\n")),
        );
        diff.extend(old[old.len() - tail..].iter().map(context));
    }
    diff
}

/// The subagent file a call's prompt started: the one not yet imported whose first prompt is
/// the call's. When several are (the same task given twice), none is: the results name their
/// agents, and link them.
fn find_subagent(files: Option<&[SubagentFile]>, prompt: Option<&str>) -> Option<usize> {
    let prompt = prompt?;
    let mut matching = files?
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.imported && f.prompt.as_deref() == Some(prompt))
        .map(|(i, _)| i);
    match (matching.next(), matching.next()) {
        (Some(i), None) => Some(i),
        _ => None,
    }
}

/// The `subagents/agent-*.jsonl` files next to a session file (`<dir>/<session>/subagents/`),
/// ordered by their first line's time, with the prompt each starts with.
fn subagent_files(path: &Path) -> Result<Vec<SubagentFile>, String> {
    let dir = path.with_extension("").join("subagents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(agent_id) = name
            .strip_prefix("agent-")
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let path = entry.path();
        let (prompt, first_time) = first_prompt(&path)?;
        files.push((
            first_time,
            SubagentFile {
                meta: meta_of(&dir.join(format!("agent-{agent_id}.meta.json"))),
                agent_id: agent_id.to_owned(),
                prompt,
                path,
                imported: false,
            },
        ));
    }
    files.sort_by(|(ta, a), (tb, b)| (ta, &a.agent_id).cmp(&(tb, &b.agent_id)));
    Ok(files.into_iter().map(|(_, f)| f).collect())
}

/// The text of a transcript's first user line, and that line's time (read up to that line).
fn first_prompt(path: &Path) -> Result<(Option<String>, Option<String>), String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(&line) else {
            // A broken line is reported when the file is imported.
            continue;
        };
        if let Some(text) = user_text(&obj) {
            return Ok((Some(text), str_of(&obj, "timestamp").map(str::to_owned)));
        }
    }
    Ok((None, None))
}

/// `agentType` and `description` of a subagent's `.meta.json` (nothing when it is missing or
/// unreadable: it only annotates the child's `SessionStarted`).
fn meta_of(path: &Path) -> Map<String, Value> {
    let meta = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let mut out = Map::new();
    for (from, to) in [("agentType", "agent_type"), ("description", "description")] {
        if let Some(v) = meta
            .as_ref()
            .and_then(|m| m.get(from))
            .filter(|v| v.is_string())
        {
            out.insert(to.into(), v.clone());
        }
    }
    out
}
