//! Codex CLI rollout JSONL: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`.
//!
//! Two layouts: `{timestamp, type, payload}` lines (Codex 0.3x and later), and the older one —
//! a first line of session metadata (`{id, timestamp, instructions, git}`), then bare response
//! items and `{"record_type": "state"}` lines.
//!
//! # What maps to what
//!
//! | Codex | Canonical |
//! |---|---|
//! | `session_meta` (or the old first line) | `SessionStarted`, emitted just before the first event: `id` (the session id), `cwd`, `base_instructions` as the system prompt, `model_provider` as provider; the rest (`instructions`, `git`, `originator`, `cli_version`, `source`, the fork and subagent links, `dynamic_tools`) in `extra` |
//! | first `turn_context` | the session's model (later ones: the model of the responses after them); a turn boundary |
//! | consecutive `reasoning`, assistant `message`, `function_call`, `custom_tool_call`, `local_shell_call` items | one `ModelResponseReceived`: the messages' text, every call; reasoning (summary, text, encrypted content) in `extra.reasoning`, kept for audit and never sent; usage from the call's `token_count` event |
//! | `function_call_output` / `custom_tool_call_output` | `ToolCallFinished`: a `{"output", "metadata"}` JSON string is unwrapped to its output, the metadata kept in `extra`; `is_error` from a nonzero exit code (or Codex's own failure messages) |
//! | a successful `apply_patch` (custom tool, function, or a shell command running it) | also one `DiffApplied` per file of the patch |
//! | `message` of role `user` | `UserPromptSubmitted` (actor `platform` for the context Codex injects: environment, AGENTS.md) |
//! | `message` of role `developer` / `system` | `UserPromptSubmitted` with `extra.role`, actor `platform` |
//! | `compacted` | `UserPromptSubmitted` of its summary, `extra.compact_summary` |
//! | `event_msg` | UI copies of the items: counted by type, except `token_count` (the usage of the response it follows) |
//! | everything else (`ghost_snapshot`, `state` lines, images...) | counted in [`crate::Report::unmapped`] |
//!
//! # Decisions
//!
//! - **One response per model call.** The Responses API returns reasoning, text and calls as
//!   separate items, and Codex writes them one per line; the items between two inputs (a result,
//!   a user or developer message, a turn context, a compaction) are one call's. A `reasoning`
//!   item after text or calls starts the next call, and so does a message after calls. Reasoning
//!   with nothing after it is counted, not sent as an empty response. The response's id comes
//!   from its first item's position and the bytes of all its items ([`Anchor::with`]).
//! - **Developer messages are prompts.** They come mid-session (permissions, model switches,
//!   collaboration modes) and were sent to the model as messages, so they are rendered as user
//!   text with `extra.role = "developer"`, not folded into the system prompt.
//! - **The system prompt.** Only newer rollouts record it (`base_instructions`). The old
//!   `instructions` are the user's instructions, which the history also carries as a
//!   `<user_instructions>` message: kept as `extra.user_instructions`, not made a system prompt
//!   the model would see twice. `dynamic_tools` stay in `extra` too: they are only the extra
//!   tools, and a partial tool list would be sent as the whole one.
//! - **Forks and subagents.** A rollout with `forked_from_id` (Codex's spawned agents) starts
//!   with the parent's history, replayed after a second `session_meta` (the parent's). Its
//!   parent's events live in another file, imported on its own, so there is no event id in this
//!   import to fork a branch from: the rollout is its own session, with `parent_session_id` (the
//!   parent's id: its session id when imported) and `forked_from_id` in `SessionStarted`. The
//!   replayed history stays in the child: it is what the child's model was given. The parent's
//!   `session_meta` is counted.
//! - **The model before the first event.** `SessionStarted` carries the model, which the first
//!   `turn_context` names; items before it are held (at most [`HOLD`] records). The old layout
//!   names no model (`unknown`).
//! - **Compaction.** `CompactionCompleted` is derived, so it is not emitted: the summary the
//!   harness replaced the history with is what the model saw, so it is a prompt the assembler
//!   renders, marked.
//! - Lines of the old layout have no time: their events take the session's last time (the
//!   metadata's, at first).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use strata_core::payload::{DiffApplied, Usage, UserPromptSubmitted};
use strata_core::Payload;

use crate::emit::{self, Anchor, Draft, SessionStart};
use crate::{Converter, Emitter, Record, Source};

/// Records held back while the session's model is unknown.
pub const HOLD: usize = 64;

/// The Codex converter.
#[derive(Debug, Default)]
pub struct Codex {
    layout: Option<Layout>,
    session: Option<String>,
    /// The session's `SessionStarted`, until its first event.
    start: Option<SessionStart>,
    announced: bool,
    /// The id of the first `session_meta` and the session it was forked from.
    meta_id: Option<String>,
    forked_from: Option<String>,
    ready: bool,
    held: Vec<Record>,
    /// The model of the `SessionStarted`, and the current one.
    session_model: Option<String>,
    model: Option<String>,
    group: Option<Group>,
    /// The last usage counted, and one waiting for the next model call.
    last_usage: Option<Usage>,
    next_usage: Option<Usage>,
    /// Calls without a result yet, by emitted id.
    calls: HashMap<String, Call>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `{timestamp, type, payload}` lines.
    Wrapped,
    /// A metadata line, then bare items.
    Legacy,
}

/// The items of one model call.
#[derive(Debug)]
struct Group {
    anchor: Anchor,
    message_id: String,
    timestamp: Option<DateTime<Utc>>,
    text: Vec<String>,
    reasoning: Vec<Value>,
    calls: Vec<RawCall>,
    phase: Option<String>,
    usage: Option<Usage>,
}

#[derive(Debug)]
struct RawCall {
    id: String,
    name: String,
    args: Value,
    /// The patch an `apply_patch` call applies.
    patch: Option<String>,
}

/// A call waiting for its result.
#[derive(Debug)]
struct Call {
    patch: Option<String>,
}

/// One line, by what it is.
enum Line<'a> {
    Meta(&'a Map<String, Value>),
    TurnContext(&'a Map<String, Value>),
    Item(&'a Map<String, Value>),
    Event(&'a Map<String, Value>),
    Compacted(&'a Map<String, Value>),
    /// An old-layout `record_type` line.
    State(String),
    /// A line type this importer does not know.
    Other(String),
}

impl Codex {
    pub fn new(_source: &Source) -> Self {
        Self::default()
    }
}

impl Converter for Codex {
    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let (line, at) = self.parse(&record)?;
        match line {
            Line::Meta(meta) => {
                self.meta(meta, at, out);
                return Ok(());
            }
            Line::TurnContext(ctx) => return self.turn_context(ctx, out),
            _ => {}
        }
        if !self.ready {
            if self.held.len() + 1 < HOLD {
                self.held.push(record);
                return Ok(());
            }
            self.make_ready(out)?;
        }
        self.process(&record, out)
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        self.make_ready(out)?;
        self.flush(out);
        self.drop_waiting_usage(out);
        Ok(())
    }
}

impl Codex {
    /// What a record is; everything its conversion needs is checked here, as it comes (it may
    /// be held and converted later).
    fn parse<'a>(
        &mut self,
        record: &'a Record,
    ) -> Result<(Line<'a>, Option<DateTime<Utc>>), String> {
        let obj = record.value.as_object().ok_or_else(|| {
            format!(
                "a line must be a JSON object, found {}",
                kind(&record.value)
            )
        })?;
        let layout = *self.layout.get_or_insert_with(|| {
            if obj.contains_key("payload") {
                Layout::Wrapped
            } else {
                Layout::Legacy
            }
        });
        match layout {
            Layout::Wrapped => wrapped(obj),
            Layout::Legacy => legacy(obj, self.session.is_none()),
        }
    }

    /// The session's metadata: the first one names the session; a later one is the parent's of
    /// a fork (or a repeat).
    fn meta(
        &mut self,
        meta: &Map<String, Value>,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) {
        let id = str_of(meta, "id").filter(|s| !s.is_empty());
        if self.meta_id.is_some() || self.announced {
            out.unmapped(match (id, self.forked_from.as_deref()) {
                (Some(id), Some(parent)) if id == parent => {
                    "session_meta of the session it was forked from"
                }
                _ => "repeated session_meta",
            });
            return;
        }
        self.meta_id = id.map(str::to_owned);
        self.forked_from = str_of(meta, "forked_from_id").map(str::to_owned);
        let session = out.main_session(id);
        self.session = Some(session.clone());
        self.start = Some(session_start(meta, at, &session));
        if self.layout == Some(Layout::Legacy) {
            // The old layout names no model: nothing to wait for.
            self.ready = true;
        }
    }

    /// A turn's context: the model of what follows (the session's, for the first), and the end
    /// of the previous model call.
    fn turn_context(
        &mut self,
        ctx: &Map<String, Value>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let model = str_of(ctx, "model").filter(|m| !m.is_empty());
        if !self.announced {
            // A rollout without metadata still gets its model.
            let start = self.start.get_or_insert_with(SessionStart::default);
            if start.model.is_none() {
                start.model = model.map(str::to_owned);
                self.session_model.clone_from(&start.model);
            }
            for key in ["approval_policy", "sandbox_policy"] {
                if let Some(v) = ctx.get(key) {
                    start.extra.entry(key).or_insert_with(|| v.clone());
                }
            }
        }
        if let Some(m) = model {
            self.model = Some(m.to_owned());
        }
        self.make_ready(out)?;
        self.flush(out);
        Ok(())
    }

    /// Converts what was held: the model is known, or will not be.
    fn make_ready(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        if self.ready {
            return Ok(());
        }
        self.ready = true;
        for record in std::mem::take(&mut self.held) {
            self.process(&record, out)?;
        }
        Ok(())
    }

    fn session(&mut self, out: &Emitter<'_>) -> String {
        self.session
            .get_or_insert_with(|| out.main_session(None))
            .clone()
    }

    /// Emits an event, after the session's `SessionStarted` when it is the first.
    fn emit(&mut self, out: &mut Emitter<'_>, anchor: &Anchor, draft: Draft) {
        if !self.announced {
            self.announced = true;
            let mut start = self.start.take().unwrap_or_default();
            // Without metadata, the session starts with its first event.
            start.timestamp = start.timestamp.or(draft.timestamp);
            self.session_model.clone_from(&start.model);
            out.session_started(anchor, &draft.session, start);
        }
        out.emit(anchor, draft);
    }

    fn process(&mut self, record: &Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let (line, at) = self.parse(record)?;
        match line {
            Line::Item(item) => self.item(record, item, at, out),
            Line::Event(event) => {
                self.event(event, out);
                Ok(())
            }
            Line::Compacted(c) => {
                self.flush(out);
                self.drop_waiting_usage(out);
                self.compacted(record, c, at, out);
                Ok(())
            }
            Line::State(kind) => {
                out.unmapped(format!("record_type {kind:?}"));
                Ok(())
            }
            Line::Other(kind) => {
                out.unmapped(format!("line type {kind:?}"));
                Ok(())
            }
            // Handled as they come.
            Line::Meta(_) | Line::TurnContext(_) => Ok(()),
        }
    }

    fn item(
        &mut self,
        record: &Record,
        item: &Map<String, Value>,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let ty = str_of(item, "type").unwrap_or_default();
        match ty {
            "message" => match str_of(item, "role").unwrap_or_default() {
                "assistant" => {
                    if self.group.as_ref().is_some_and(|g| !g.calls.is_empty()) {
                        self.flush(out);
                    }
                    let text = emit::content_text(item.get("content").unwrap_or(&Value::Null));
                    let group = self.group_for(record, item, at);
                    group.text.push(text);
                    if let Some(p) = str_of(item, "phase") {
                        group.phase = Some(p.to_owned());
                    }
                    count_parts(item, out);
                }
                role => {
                    self.flush(out);
                    self.drop_waiting_usage(out);
                    self.prompt(record, item, role, at, out);
                }
            },
            "reasoning" => {
                if self
                    .group
                    .as_ref()
                    .is_some_and(|g| !g.text.is_empty() || !g.calls.is_empty())
                {
                    self.flush(out);
                }
                let reasoning = reasoning_of(item);
                self.group_for(record, item, at).reasoning.push(reasoning);
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => {
                let call = raw_call(item)?;
                self.group_for(record, item, at).calls.push(call);
            }
            "function_call_output" | "custom_tool_call_output" => {
                self.flush(out);
                self.drop_waiting_usage(out);
                self.result(record, item, at, out);
            }
            other => out.unmapped(format!("response_item {other:?}")),
        }
        Ok(())
    }

    /// The group of the model call an item belongs to (a new one for its first item).
    fn group_for(
        &mut self,
        record: &Record,
        item: &Map<String, Value>,
        at: Option<DateTime<Utc>>,
    ) -> &mut Group {
        let waiting = &mut self.next_usage;
        let group = self.group.get_or_insert_with(|| Group {
            anchor: record.anchor(),
            message_id: item_id(item, record),
            timestamp: at,
            text: Vec::new(),
            reasoning: Vec::new(),
            calls: Vec::new(),
            phase: None,
            usage: waiting.take(),
        });
        // The response's id depends on every item of it.
        group.anchor = group.anchor.with(&record.anchor());
        group
    }

    /// Emits the pending model call.
    fn flush(&mut self, out: &mut Emitter<'_>) {
        let Some(g) = self.group.take() else {
            return;
        };
        let text = g.text.join("\n");
        if text.trim().is_empty() && g.calls.is_empty() {
            for _ in &g.reasoning {
                out.unmapped("reasoning without a model output");
            }
            return;
        }
        let session = self.session(out);
        let mut tool_calls = Vec::with_capacity(g.calls.len());
        for c in g.calls {
            let id = out.new_call_id(&session, &c.id);
            self.calls.insert(id.clone(), Call { patch: c.patch });
            tool_calls.push(emit::tool_call(id, c.name, c.args));
        }
        let mut extra = Map::new();
        if !g.reasoning.is_empty() {
            extra.insert("reasoning".into(), Value::Array(g.reasoning));
        }
        if let Some(p) = g.phase {
            extra.insert("phase".into(), p.into());
        }
        if self.model.is_some() && self.model != self.session_model && self.announced {
            extra.insert("model".into(), self.model.clone().into());
        }
        let payload = emit::model_response(g.message_id, text, tool_calls, g.usage, extra);
        let draft = Draft::new(session, payload).at(g.timestamp).actor("model");
        self.emit(out, &g.anchor, draft);
    }

    fn prompt(
        &mut self,
        record: &Record,
        item: &Map<String, Value>,
        role: &str,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) {
        count_parts(item, out);
        let text = emit::content_text(item.get("content").unwrap_or(&Value::Null));
        if text.trim().is_empty() {
            out.unmapped(format!("{role} message without text"));
            return;
        }
        let mut extra = Map::new();
        let actor = if role == "user" {
            if injected(&text) {
                "platform"
            } else {
                "user"
            }
        } else {
            extra.insert("role".into(), role.into());
            "platform"
        };
        let payload = Payload::UserPromptSubmitted(UserPromptSubmitted {
            message_id: item_id(item, record),
            text,
            extra,
        });
        let session = self.session(out);
        let draft = Draft::new(session, payload).at(at).actor(actor);
        self.emit(out, &record.anchor(), draft);
    }

    fn compacted(
        &mut self,
        record: &Record,
        c: &Map<String, Value>,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) {
        let text = str_of(c, "message").unwrap_or_default();
        if text.trim().is_empty() {
            out.unmapped("compacted without a summary");
            return;
        }
        let mut extra = Map::new();
        extra.insert("compact_summary".into(), true.into());
        if let Some(h) = c.get("replacement_history").and_then(Value::as_array) {
            extra.insert("replacement_history_items".into(), h.len().into());
        }
        let payload = Payload::UserPromptSubmitted(UserPromptSubmitted {
            message_id: format!("compacted-{}", record.position.key()),
            text: text.to_owned(),
            extra,
        });
        let session = self.session(out);
        let draft = Draft::new(session, payload).at(at).actor("platform");
        self.emit(out, &record.anchor(), draft);
    }

    fn result(
        &mut self,
        record: &Record,
        item: &Map<String, Value>,
        at: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) {
        let session = self.session(out);
        let source_id = str_of(item, "call_id").unwrap_or_default();
        let id = out.call_id(&session, source_id);
        let call = self.calls.remove(&id);
        let (output, metadata) = output_of(item.get("output").unwrap_or(&Value::Null));
        let exit = metadata
            .as_ref()
            .and_then(|m| m.get("exit_code"))
            .and_then(Value::as_i64)
            .or_else(|| exit_code(&output));
        let is_error = match exit {
            Some(code) => code != 0,
            None => harness_failure(&output),
        };
        let mut extra = Map::new();
        if let Some(m) = metadata {
            extra.insert("metadata".into(), Value::Object(m));
        }
        let payload = emit::tool_result(id.clone(), output, is_error, extra);
        let anchor = record.anchor();
        let draft = Draft::new(session.clone(), payload).at(at).actor("tool");
        self.emit(out, &anchor, draft);
        let Some(patch) = call.and_then(|c| c.patch).filter(|_| !is_error) else {
            return;
        };
        for file in patch_files(&patch) {
            let mut extra = Map::new();
            extra.insert("tool_call_id".into(), id.clone().into());
            extra.insert("operation".into(), file.operation.into());
            if let Some(to) = &file.move_to {
                extra.insert("move_to".into(), to.clone().into());
            }
            let payload = Payload::DiffApplied(DiffApplied {
                diff: file.diff(),
                path: file.path,
                extra,
            });
            let draft = Draft::new(session.clone(), payload).at(at).actor("agent");
            self.emit(out, &anchor, draft);
        }
    }

    fn event(&mut self, event: &Map<String, Value>, out: &mut Emitter<'_>) {
        let ty = str_of(event, "type").unwrap_or("untyped");
        let usage = event
            .get("info")
            .and_then(|i| i.get("last_token_usage"))
            .and_then(|u| emit::usage_of(Some(u)))
            .filter(|_| ty == "token_count");
        match usage {
            Some(u) => self.token_count(u, out),
            None => out.unmapped(format!("event_msg {ty:?}")),
        }
    }

    /// A model call's usage: the only place Codex records it. Newer versions write it after the
    /// call's items, older ones just before them, and both repeat the last one at a turn's
    /// start; so a repeat is dropped, a count during a call is the call's, and one between calls
    /// waits for the next call.
    fn token_count(&mut self, usage: Usage, out: &mut Emitter<'_>) {
        if self.last_usage.as_ref() == Some(&usage) {
            out.unmapped("event_msg \"token_count\" (a repeat)");
            return;
        }
        self.last_usage = Some(usage.clone());
        let replaced = match self.group.as_mut() {
            Some(g) => g.usage.replace(usage),
            None => self.next_usage.replace(usage),
        };
        if replaced.is_some() {
            out.unmapped("event_msg \"token_count\"");
        }
    }

    /// A new input: a count waiting for the next call is not its.
    fn drop_waiting_usage(&mut self, out: &mut Emitter<'_>) {
        if self.next_usage.take().is_some() {
            out.unmapped("event_msg \"token_count\"");
        }
    }
}

/// A `{timestamp, type, payload}` line.
fn wrapped(obj: &Map<String, Value>) -> Result<(Line<'_>, Option<DateTime<Utc>>), String> {
    let at = time_of(obj.get("timestamp"))?;
    let ty = str_of(obj, "type").ok_or("no \"type\" field (a string)")?;
    let payload = || {
        obj.get("payload")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("a {ty:?} line needs a \"payload\" object"))
    };
    let line = match ty {
        "session_meta" => Line::Meta(payload()?),
        "turn_context" => Line::TurnContext(payload()?),
        "response_item" => Line::Item(checked_item(payload()?)?),
        "event_msg" => Line::Event(payload()?),
        "compacted" => Line::Compacted(payload()?),
        other => Line::Other(other.to_owned()),
    };
    Ok((line, at))
}

/// A line of the old layout: the metadata first, then items and state lines.
fn legacy(
    obj: &Map<String, Value>,
    first: bool,
) -> Result<(Line<'_>, Option<DateTime<Utc>>), String> {
    if let Some(kind) = obj.get("record_type") {
        return Ok((
            Line::State(kind.as_str().unwrap_or("untyped").to_owned()),
            None,
        ));
    }
    if first && obj.contains_key("id") && !obj.contains_key("type") {
        return Ok((Line::Meta(obj), time_of(obj.get("timestamp"))?));
    }
    Ok((Line::Item(checked_item(obj)?), None))
}

/// An item with what its conversion needs.
fn checked_item(item: &Map<String, Value>) -> Result<&Map<String, Value>, String> {
    let ty = str_of(item, "type").ok_or("an item without a \"type\"")?;
    let needs = |key: &str| -> Result<(), String> {
        match str_of(item, key) {
            Some(s) if !s.is_empty() => Ok(()),
            _ => Err(format!("a {ty:?} item without a {key:?}")),
        }
    };
    match ty {
        "message" => needs("role")?,
        "function_call" | "custom_tool_call" => {
            needs("call_id")?;
            needs("name")?;
        }
        "function_call_output" | "custom_tool_call_output" => needs("call_id")?,
        "local_shell_call" if str_of(item, "call_id").is_none() => needs("id")?,
        _ => {}
    }
    Ok(item)
}

/// A call as the response asked for it.
fn raw_call(item: &Map<String, Value>) -> Result<RawCall, String> {
    let ty = str_of(item, "type").unwrap_or_default();
    let id = str_of(item, "call_id")
        .filter(|s| !s.is_empty())
        .or_else(|| str_of(item, "id"))
        .ok_or_else(|| format!("a {ty:?} item without a \"call_id\""))?
        .to_owned();
    let (name, args) = match ty {
        "local_shell_call" => (
            "local_shell".to_owned(),
            item.get("action").cloned().unwrap_or(Value::Null),
        ),
        // A custom tool's input is free text.
        "custom_tool_call" => (
            str_of(item, "name").unwrap_or_default().to_owned(),
            json!({ "input": str_of(item, "input").unwrap_or_default() }),
        ),
        _ => (
            str_of(item, "name").unwrap_or_default().to_owned(),
            emit::arguments(item.get("arguments")),
        ),
    };
    let patch = patch_of(&name, &args);
    Ok(RawCall {
        id,
        name,
        args: match args {
            Value::Object(_) => args,
            other => emit::arguments(Some(&other)),
        },
        patch,
    })
}

/// The patch an `apply_patch` call applies: the custom tool's input, the function's, or the
/// patch a shell command passes to `apply_patch` (Codex runs those itself).
fn patch_of(name: &str, args: &Value) -> Option<String> {
    let text = match name {
        "apply_patch" => ["input", "patch"]
            .iter()
            .find_map(|k| args.get(*k).and_then(Value::as_str))
            .map(str::to_owned)?,
        _ => {
            let command = ["command", "cmd"].iter().find_map(|k| args.get(*k))?;
            let text = match command {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return None,
            };
            if !text.contains("apply_patch") {
                return None;
            }
            text
        }
    };
    let start = text.find("*** Begin Patch")?;
    let end = text[start..]
        .find("*** End Patch")
        .map_or(text.len(), |e| start + e + "*** End Patch".len());
    Some(text[start..end].to_owned())
}

/// One file of a patch.
#[derive(Debug, PartialEq)]
struct PatchFile {
    operation: &'static str,
    path: String,
    move_to: Option<String>,
    lines: Vec<String>,
}

impl PatchFile {
    /// A unified diff of the file's part of the patch (Codex's hunks carry context, not line
    /// numbers: their `@@` lines are kept as they are).
    fn diff(&self) -> String {
        let (from, to) = match self.operation {
            "add" => ("/dev/null".to_owned(), self.path.clone()),
            "delete" => (self.path.clone(), "/dev/null".to_owned()),
            _ => (
                self.path.clone(),
                self.move_to.clone().unwrap_or_else(|| self.path.clone()),
            ),
        };
        let mut diff = format!("--- {from}\n+++ {to}\n");
        if self.operation == "add" {
            diff.push_str(&format!("@@ -0,0 +1,{} @@\n", self.lines.len()));
        }
        for line in &self.lines {
            diff.push_str(line);
            diff.push('\n');
        }
        diff
    }
}

/// The files of a Codex patch (`*** Add File:`, `*** Update File:` with an optional
/// `*** Move to:`, `*** Delete File:`).
fn patch_files(patch: &str) -> Vec<PatchFile> {
    let mut files: Vec<PatchFile> = Vec::new();
    for line in patch.lines() {
        let header = [
            ("*** Add File: ", "add"),
            ("*** Update File: ", "update"),
            ("*** Delete File: ", "delete"),
        ]
        .iter()
        .find_map(|(prefix, op)| line.strip_prefix(prefix).map(|p| (p, *op)));
        if let Some((path, operation)) = header {
            files.push(PatchFile {
                operation,
                path: path.trim().to_owned(),
                move_to: None,
                lines: Vec::new(),
            });
        } else if let Some(to) = line.strip_prefix("*** Move to: ") {
            if let Some(f) = files.last_mut() {
                f.move_to = Some(to.trim().to_owned());
            }
        } else if line.starts_with("*** ") {
            // Begin, End, End of File.
        } else if let Some(f) = files.last_mut() {
            f.lines.push(line.to_owned());
        }
    }
    files.retain(|f| !f.path.is_empty());
    files
}

/// A result's text and metadata: a JSON string `{"output": ..., "metadata": ...}` is unwrapped.
fn output_of(output: &Value) -> (String, Option<Map<String, Value>>) {
    match output {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(mut o)) if o.get("output").is_some_and(Value::is_string) => {
                let text = match o.remove("output") {
                    Some(Value::String(t)) => t,
                    _ => String::new(),
                };
                let metadata = match o.remove("metadata") {
                    Some(Value::Object(m)) => Some(m),
                    _ => None,
                };
                (text, metadata)
            }
            _ => (s.clone(), None),
        },
        Value::Object(o) => match o.get("content").or_else(|| o.get("output")) {
            Some(c) => (emit::content_text(c), None),
            None => (output.to_string(), None),
        },
        other => (emit::content_text(other), None),
    }
}

/// The exit code a shell result's text starts with (`Exit code: N`, or unified exec's
/// `Process exited with code N` in its header).
fn exit_code(text: &str) -> Option<i64> {
    for line in text.lines().take(8) {
        if line == "Output:" {
            break;
        }
        let code = line
            .strip_prefix("Exit code: ")
            .or_else(|| line.strip_prefix("Process exited with code "));
        if let Some(n) = code.and_then(|c| c.trim().parse().ok()) {
            return Some(n);
        }
    }
    None
}

/// Whether a result without an exit code is one of Codex's own failure messages.
fn harness_failure(text: &str) -> bool {
    const PREFIXES: [&str; 4] = [
        "apply_patch verification failed",
        "failed in sandbox",
        "exec_command failed",
        "error: ",
    ];
    PREFIXES.iter().any(|p| text.starts_with(p))
        || text.lines().take(3).any(|l| l == "aborted by user")
}

/// What a reasoning item says: its summary and text when it has them, its encrypted content.
fn reasoning_of(item: &Map<String, Value>) -> Value {
    let mut r = Map::new();
    for key in ["summary", "content"] {
        let text = emit::content_text(item.get(key).unwrap_or(&Value::Null));
        if !text.is_empty() {
            r.insert(key.into(), text.into());
        }
    }
    if let Some(e) = item.get("encrypted_content").filter(|e| e.is_string()) {
        r.insert("encrypted_content".into(), e.clone());
    }
    Value::Object(r)
}

/// Counts the parts of a message that carry no text (images).
fn count_parts(item: &Map<String, Value>, out: &mut Emitter<'_>) {
    for part in emit::non_text_parts(item.get("content").unwrap_or(&Value::Null)) {
        out.unmapped(format!("content part {part:?}"));
    }
}

/// Whether a user message is context Codex wrote, not the user.
fn injected(text: &str) -> bool {
    let t = text.trim_start();
    [
        "<environment_context>",
        "<user_instructions>",
        "# AGENTS.md instructions",
    ]
    .iter()
    .any(|p| t.starts_with(p))
}

fn item_id(item: &Map<String, Value>, record: &Record) -> String {
    str_of(item, "id")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("item-{}", record.position.key()))
}

/// What `SessionStarted` says of a session, from its metadata.
fn session_start(
    meta: &Map<String, Value>,
    at: Option<DateTime<Utc>>,
    session: &str,
) -> SessionStart {
    let mut extra = Map::new();
    if let Some(id) = str_of(meta, "id").filter(|id| *id != session) {
        extra.insert("source_session_id".into(), id.into());
    }
    let spawned_by = meta
        .get("source")
        .and_then(|s| s.get("subagent"))
        .and_then(|s| s.get("thread_spawn"))
        .and_then(|s| s.get("parent_thread_id"))
        .and_then(Value::as_str);
    if let Some(parent) = str_of(meta, "forked_from_id").or(spawned_by) {
        extra.insert("parent_session_id".into(), parent.into());
    }
    for (from, to) in [
        ("instructions", "user_instructions"),
        ("forked_from_id", "forked_from_id"),
        ("originator", "originator"),
        ("cli_version", "cli_version"),
        ("source", "source"),
        ("agent_nickname", "agent_nickname"),
        ("agent_role", "agent_role"),
        ("git", "git"),
        ("dynamic_tools", "dynamic_tools"),
    ] {
        if let Some(v) = meta.get(from).filter(|v| !v.is_null()) {
            extra.insert(to.into(), v.clone());
        }
    }
    let system_prompt = match meta.get("base_instructions") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => str_of(o, "text").map(str::to_owned),
        _ => None,
    };
    SessionStart {
        timestamp: time_of(meta.get("timestamp")).ok().flatten().or(at),
        model: None,
        provider: str_of(meta, "model_provider")
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        system_prompt,
        tools: Vec::new(),
        cwd: str_of(meta, "cwd").map(str::to_owned),
        project_id: None,
        extra,
    }
}

fn str_of<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

fn kind(v: &Value) -> &'static str {
    strata_core::event::kind_of(v)
}

/// A line's time; a time that is there but unreadable is an error.
fn time_of(value: Option<&Value>) -> Result<Option<DateTime<Utc>>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => emit::parse_time(Some(v))
            .map(Some)
            .ok_or_else(|| format!("timestamp {v} is not an RFC 3339 time")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_split_by_file() {
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+one\n*** Update File: b.rs\n*** Move to: c.rs\n@@ fn main\n-old\n+new\n*** Delete File: d.md\n*** End Patch";
        let files = patch_files(patch);
        assert_eq!(files.len(), 3);
        assert_eq!(
            files[0].diff(),
            "--- /dev/null\n+++ a.txt\n@@ -0,0 +1,1 @@\n+one\n"
        );
        assert_eq!(
            files[1].diff(),
            "--- b.rs\n+++ c.rs\n@@ fn main\n-old\n+new\n"
        );
        assert_eq!(files[2].diff(), "--- d.md\n+++ /dev/null\n");
    }

    #[test]
    fn patches_run_by_a_shell() {
        let args = json!({"command": ["bash", "-lc", "apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: x\n*** End Patch\nEOF"]});
        assert_eq!(
            patch_of("shell", &args).as_deref(),
            Some("*** Begin Patch\n*** Delete File: x\n*** End Patch")
        );
        assert_eq!(patch_of("shell", &json!({"command": ["ls"]})), None);
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            exit_code("Exit code: 2\nWall time: 1s\nOutput:\nboom"),
            Some(2)
        );
        assert_eq!(
            exit_code(
                "Command: ls\nChunk ID: 1\nWall time: 0s\nProcess exited with code 0\nOutput:\n"
            ),
            Some(0)
        );
        assert_eq!(exit_code("Output:\nExit code: 3"), None);
        assert!(harness_failure(
            "apply_patch verification failed: no such file"
        ));
        assert!(!harness_failure("Plan updated"));
    }
}
