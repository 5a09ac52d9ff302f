//! OpenAI Chat Completions message lists and Responses API / Agents SDK items.
//!
//! # Layouts
//!
//! Both formats are read as JSONL when the first line is a whole object, else as one JSON
//! document ([`crate::read::Mode::Either`]):
//!
//! - a list of messages (items): a JSON array, a JSONL file of one message per line, or an object
//!   whose `messages` (`traj`; Responses: `input`, `items`, `output`) array is streamed after its
//!   other fields (`model`, `tools`, `instructions`...). All of them are one session: `--session`,
//!   else the document's `session_id` / `conversation_id`, else the file name;
//! - a list of conversations: a JSON array or JSONL file whose elements (lines) are objects
//!   holding such an array, with their own `model` and `tools` (fine-tuning files, tau-bench
//!   results `{task_id, trial, reward, info, traj}`). Each is its own session, named
//!   `<main>-<id>` after the first id field it has (`id`, `conversation_id`, `session_id`,
//!   `custom_id`, `instance_id`, `task_id`, then `-<trial>` when there is one), else
//!   `<main>-<line or element>`. Its other fields are kept in the `SessionStarted`'s
//!   `source_meta`, for audit. One conversation is one record, so it is held whole while it is
//!   converted; a list of messages never is.
//!
//! # Chat Completions
//!
//! - the `system` / `developer` messages before the first other one → the session's system
//!   prompt (joined by a blank line); `tools` (or legacy `functions`) → `SessionStarted.tools`.
//!   A system message later in the conversation is still part of what the model read: it becomes
//!   a `UserPromptSubmitted` with `role` kept in its `extra`;
//! - `user` → `UserPromptSubmitted`; each `assistant` message → one `ModelResponseReceived` with
//!   its `tool_calls` (`function{name, arguments}`; `custom{name, input}`) and legacy
//!   `function_call`; `reasoning_content` / `reasoning` (what some providers return beside the
//!   answer and the harness does not resend) is kept in `extra`;
//! - `tool` (by `tool_call_id`) → `ToolCallFinished`. A legacy `function` result has no id: it
//!   answers the oldest unanswered legacy `function_call` of its name (else the oldest), whose id
//!   is derived from the calling message's position: pairing by position is what that API meant.
//!
//! # Responses items
//!
//! - `message` items (and easy-input messages without `type`): `user` → `UserPromptSubmitted`,
//!   leading `system` / `developer` → system prompt (after the document's `instructions`);
//! - the assistant side of one model turn — `reasoning`, assistant `message`s, `function_call`,
//!   `custom_tool_call`, `local_shell_call`, `mcp_call` — is grouped into ONE
//!   `ModelResponseReceived` with all its calls. A turn ends at the next item of the other side (a
//!   user message, a call's output), or when a `reasoning` item follows a message or a call (a
//!   reasoning model starts every response with one). Reasoning summaries (and encrypted
//!   reasoning) are kept in `extra`: the assembler never sends them;
//! - `function_call_output`, `custom_tool_call_output`, `local_shell_call_output` (by `call_id`)
//!   → `ToolCallFinished`; an `mcp_call` carries its own output (or error), emitted right after
//!   its turn;
//! - the other items (hosted tools: `web_search_call`, `file_search_call`, `computer_call`,
//!   `code_interpreter_call`, `image_generation_call`...; `item_reference`...) are counted as
//!   unmapped by type.
//!
//! Neither format has a clock: events have no timestamp of their own (the emitter spaces them
//! from the base time). Content parts without text (images, audio, files) are counted as
//! unmapped by type.

use std::collections::HashSet;

use serde_json::{json, Map, Value};
use strata_core::payload::{ToolCall, ToolSpec, Usage};
use strata_core::Payload;

use crate::emit::{
    arguments, content_text, model_response, non_text_parts, tool_call, tool_result, usage_of,
    user_prompt, Anchor, Draft, SessionStart,
};
use crate::read::Position;
use crate::{Converter, Emitter, Record, Source};

/// Fields that may name a conversation of a multi-conversation file, first found wins.
const ID_FIELDS: [&str; 6] = [
    "id",
    "conversation_id",
    "session_id",
    "custom_id",
    "instance_id",
    "task_id",
];

/// The Chat Completions converter.
#[derive(Debug, Default)]
pub struct Chat {
    /// The file's own conversation (a list of messages), once its first record is read.
    main: Option<ChatThread>,
    /// Whether a document header was read (then messages must follow).
    header: bool,
    /// Session names given to conversations so far (two with the same id stay apart).
    named: HashSet<String>,
}

impl Chat {
    pub fn new(_source: &Source) -> Self {
        Self::default()
    }
}

/// Arrays of a Chat document whose elements are its messages.
const CHAT_ARRAYS: [&str; 2] = ["messages", "traj"];

impl Converter for Chat {
    fn streamed_fields(&self) -> &'static [&'static str] {
        &CHAT_ARRAYS
    }

    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let anchor = record.anchor();
        if let Some(header) = record.header() {
            let session = out.main_session(session_id_of(header));
            let mut opening = Opening::new(session, conversation_start(header, out));
            opening.note(&anchor);
            self.main = Some(ChatThread::new(opening));
            self.header = true;
            return Ok(());
        }
        let o = object(&record.value)?;
        if o.contains_key("role") {
            let main = self
                .main
                .get_or_insert_with(|| ChatThread::new(Opening::bare(out.main_session(None))));
            return main.message(&anchor, o, &record.position.key(), out);
        }
        let Some(messages) = conversation_array(o, &CHAT_ARRAYS)? else {
            return Err(format!(
                "neither a message (no `role`) nor a conversation (no `messages` array); keys: {}",
                keys(o)
            ));
        };
        let session = conversation_session(o, &record.position, out, &mut self.named);
        let mut opening = Opening::new(session, conversation_start(o, out));
        opening.note(&anchor);
        let mut thread = ChatThread::new(opening);
        for (i, m) in messages.iter().enumerate() {
            let m = object(m).map_err(|e| format!("message {i}: {e}"))?;
            let id = format!("{}.m{i}", record.position.key());
            thread
                .message(&anchor, m, &id, out)
                .map_err(|e| format!("message {i}: {e}"))?;
        }
        thread.finish(&anchor, out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        if let Some(main) = &mut self.main {
            if self.header && main.messages == 0 {
                return Err(
                    "no message: a Chat Completions document holds a `messages` (or \
                            `traj`) array"
                        .into(),
                );
            }
            let anchor = main.opening.anchor.clone();
            if let Some(anchor) = anchor {
                main.finish(&anchor, out);
            }
        }
        Ok(())
    }
}

/// The state of one Chat Completions conversation.
#[derive(Debug)]
struct ChatThread {
    opening: Opening,
    /// Messages seen.
    messages: u64,
    /// Legacy `function_call`s not answered yet: (function name, emitted call id), oldest first.
    legacy: Vec<(String, String)>,
}

/// Fields of a Chat message this converter maps (others with a value are counted unmapped).
const CHAT_FIELDS: [&str; 11] = [
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "function_call",
    "refusal",
    "reasoning",
    "reasoning_content",
    "annotations",
    "id",
];

impl ChatThread {
    fn new(opening: Opening) -> Self {
        Self {
            opening,
            messages: 0,
            legacy: Vec::new(),
        }
    }

    fn session(&self) -> &str {
        &self.opening.session
    }

    /// Converts one message; `mid` is its position-derived id.
    fn message(
        &mut self,
        anchor: &Anchor,
        m: &Map<String, Value>,
        mid: &str,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        self.messages += 1;
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or("a message whose `role` is not a string")?;
        let content = m.get("content").unwrap_or(&Value::Null);
        count_unknown_fields(m, &CHAT_FIELDS, role, out);
        let text = parts_text(content, role, out);
        let message_id = m
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(mid)
            .to_owned();
        if matches!(role, "system" | "developer") && self.opening.take_system(anchor, &text) {
            return Ok(());
        }
        self.opening.ensure(anchor, out);
        let session = self.session().to_owned();
        let draft = match role {
            "user" => {
                let mut p = user_prompt(message_id, text);
                if let Some(name) = m.get("name").filter(|v| v.is_string()) {
                    set_payload_extra(&mut p, "name", name.clone());
                }
                Draft::new(&session, p).actor("user")
            }
            "system" | "developer" => {
                let mut p = user_prompt(message_id, text);
                set_payload_extra(&mut p, "role", role.into());
                Draft::new(&session, p).actor("platform")
            }
            "assistant" => self.assistant(m, text, message_id, mid, out)?,
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or("a tool message without a `tool_call_id`")?;
                let id = out.call_id(&session, id);
                Draft::new(&session, tool_result(id, text, false, Map::new())).actor("tool")
            }
            "function" => {
                let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
                let id = self.answer_legacy(name, mid);
                Draft::new(&session, tool_result(id, text, false, Map::new())).actor("tool")
            }
            other => {
                out.unmapped(format!("message role {other:?}"));
                return Ok(());
            }
        };
        out.emit(anchor, draft);
        Ok(())
    }

    fn assistant(
        &mut self,
        m: &Map<String, Value>,
        mut text: String,
        message_id: String,
        mid: &str,
        out: &mut Emitter<'_>,
    ) -> Result<Draft, String> {
        let session = self.session().to_owned();
        let mut calls = Vec::new();
        match m.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, c) in list.iter().enumerate() {
                    calls.push(
                        chat_tool_call(c, &session, out)
                            .map_err(|e| format!("assistant tool_calls[{i}]: {e}"))?,
                    );
                }
            }
            Some(_) => return Err("assistant `tool_calls` is not an array".into()),
        }
        if let Some(f) = m.get("function_call").filter(|v| !v.is_null()) {
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or("assistant `function_call` without a `name`")?;
            // The legacy API gives no id: the call is named after its message's position.
            let id = out.new_call_id(&session, &format!("call-{mid}"));
            self.legacy.push((name.to_owned(), id.clone()));
            calls.push(tool_call(id, name, arguments(f.get("arguments"))));
        }
        let mut extra = Map::new();
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = m.get(key).filter(|v| !is_empty(v)) {
                extra.insert("reasoning".into(), r.clone());
            }
        }
        if let Some(refusal) = m.get("refusal").and_then(Value::as_str) {
            // What the model said instead of an answer: it is re-sent with the message.
            if text.is_empty() {
                text = refusal.to_owned();
            }
            extra.insert("refusal".into(), refusal.into());
        }
        let payload = model_response(message_id, text, calls, None, extra);
        Ok(Draft::new(&session, payload).actor("assistant"))
    }

    /// The id of the legacy call a `function` message answers (an id no call has when none is
    /// open: the result is kept, as an orphan).
    fn answer_legacy(&mut self, name: &str, mid: &str) -> String {
        let i = self
            .legacy
            .iter()
            .position(|(n, _)| n == name)
            .or((!self.legacy.is_empty()).then_some(0));
        match i {
            Some(i) => self.legacy.remove(i).1,
            None => format!("result-{mid}"),
        }
    }

    fn finish(&mut self, anchor: &Anchor, out: &mut Emitter<'_>) {
        self.opening.ensure(anchor, out);
    }
}

/// One entry of an assistant message's `tool_calls`.
fn chat_tool_call(c: &Value, session: &str, out: &mut Emitter<'_>) -> Result<ToolCall, String> {
    let id = c
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("a tool call without an `id`")?;
    let (name, args) = match c.get("type").and_then(Value::as_str) {
        Some("custom") => {
            let custom = c
                .get("custom")
                .ok_or("a custom tool call without `custom`")?;
            let input = custom.get("input").cloned().unwrap_or(Value::Null);
            (custom.get("name"), json!({ "input": input }))
        }
        _ => {
            let f = c.get("function").ok_or("a tool call without `function`")?;
            (f.get("name"), arguments(f.get("arguments")))
        }
    };
    let name = name
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("a tool call without a function `name`")?;
    Ok(tool_call(out.new_call_id(session, id), name, args))
}

/// The Responses items converter.
#[derive(Debug, Default)]
pub struct Responses {
    main: Option<ItemThread>,
    header: bool,
    named: HashSet<String>,
}

impl Responses {
    pub fn new(_source: &Source) -> Self {
        Self::default()
    }
}

/// Arrays of a Responses document whose elements are its items, in conversation order.
const ITEM_ARRAYS: [&str; 3] = ["input", "items", "output"];

impl Converter for Responses {
    fn streamed_fields(&self) -> &'static [&'static str] {
        &ITEM_ARRAYS
    }

    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let anchor = record.anchor();
        if let Some(header) = record.header() {
            let session = out.main_session(session_id_of(header));
            let mut opening = Opening::new(session, conversation_start(header, out));
            opening.note(&anchor);
            self.main = Some(ItemThread::new(opening, usage_of(header.get("usage"))));
            self.header = true;
            return Ok(());
        }
        let o = object(&record.value)?;
        if o.contains_key("type") || o.contains_key("role") {
            let from_output = matches!(
                &record.position,
                Position::Element { field: Some(f), .. } if f == "output"
            );
            let main = self.main.get_or_insert_with(|| {
                ItemThread::new(Opening::bare(out.main_session(None)), None)
            });
            return main.item(&anchor, o, &record.position.key(), from_output, out);
        }
        let arrays: Vec<(&str, &Vec<Value>)> = ITEM_ARRAYS
            .iter()
            .filter_map(|k| Some((*k, o.get(*k)?.as_array()?)))
            .collect();
        if arrays.is_empty() {
            return Err(format!(
                "neither an item (no `type` or `role`) nor a conversation (no `input` or \
                 `output` array); keys: {}",
                keys(o)
            ));
        }
        let session = conversation_session(o, &record.position, out, &mut self.named);
        let mut opening = Opening::new(session, conversation_start(o, out));
        opening.note(&anchor);
        let mut thread = ItemThread::new(opening, usage_of(o.get("usage")));
        for (field, items) in arrays {
            for (i, item) in items.iter().enumerate() {
                let item = object(item).map_err(|e| format!("{field}[{i}]: {e}"))?;
                let id = format!("{}.{field}{i}", record.position.key());
                thread
                    .item(&anchor, item, &id, field == "output", out)
                    .map_err(|e| format!("{field}[{i}]: {e}"))?;
            }
        }
        thread.finish(&anchor, out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        if let Some(main) = &mut self.main {
            if self.header && main.items == 0 {
                return Err(
                    "no item: a Responses document holds an `input` or `output` array \
                            of items"
                        .into(),
                );
            }
            if let Some(anchor) = main.opening.anchor.clone() {
                main.finish(&anchor, out);
            } else {
                main.flush(out);
            }
        }
        Ok(())
    }
}

/// The state of one Responses conversation.
#[derive(Debug)]
struct ItemThread {
    opening: Opening,
    items: u64,
    /// The model turn being gathered.
    turn: Option<Turn>,
    /// Usage of the document's response, for the first turn of its `output`.
    usage: Option<Usage>,
}

/// The assistant side of one model turn, gathered from consecutive items.
#[derive(Debug)]
struct Turn {
    anchor: Anchor,
    message_id: String,
    texts: Vec<String>,
    calls: Vec<ToolCall>,
    reasoning: Vec<String>,
    encrypted: Vec<Value>,
    /// Results that came inside the turn's own items (`mcp_call`), emitted after it.
    results: Vec<Payload>,
    from_output: bool,
}

impl Turn {
    /// Whether the turn said or asked anything yet (a reasoning item then starts another).
    fn has_output(&self) -> bool {
        !self.texts.is_empty() || !self.calls.is_empty()
    }
}

impl ItemThread {
    fn new(opening: Opening, usage: Option<Usage>) -> Self {
        Self {
            opening,
            items: 0,
            turn: None,
            usage,
        }
    }

    /// The turn `anchor`'s item belongs to (a new one when none is open).
    fn turn(&mut self, anchor: &Anchor, mid: &str, from_output: bool) -> &mut Turn {
        let turn = self.turn.get_or_insert_with(|| Turn {
            anchor: anchor.clone(),
            message_id: mid.to_owned(),
            texts: Vec::new(),
            calls: Vec::new(),
            reasoning: Vec::new(),
            encrypted: Vec::new(),
            results: Vec::new(),
            from_output,
        });
        turn.anchor = turn.anchor.with(anchor);
        turn.from_output |= from_output;
        turn
    }

    fn item(
        &mut self,
        anchor: &Anchor,
        o: &Map<String, Value>,
        mid: &str,
        from_output: bool,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        self.items += 1;
        let kind = match o.get("type") {
            Some(Value::String(t)) => t.as_str(),
            // An easy-input message: `{"role": "user", "content": "..."}`.
            None if o.contains_key("role") => "message",
            _ => return Err("an item whose `type` is not a string".into()),
        };
        let session = self.opening.session.clone();
        match kind {
            "message" => self.message(anchor, o, mid, from_output, out)?,
            "reasoning" => {
                if self.turn.as_ref().is_some_and(Turn::has_output) {
                    self.flush(out);
                }
                let (text, encrypted) = reasoning_of(o);
                let turn = self.turn(anchor, mid, from_output);
                turn.reasoning.extend(text);
                turn.encrypted.extend(encrypted);
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => {
                let call = item_call(kind, o, &session, out)?;
                self.turn(anchor, mid, from_output).calls.push(call);
            }
            "mcp_call" => {
                let (call, result) = mcp_call(o, &session, out)?;
                let turn = self.turn(anchor, mid, from_output);
                turn.calls.push(call);
                turn.results.push(result);
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                self.flush(out);
                self.opening.ensure(anchor, out);
                let id = o
                    .get("call_id")
                    .or_else(|| o.get("id"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| format!("a {kind} without a `call_id`"))?;
                let id = out.call_id(&session, id);
                let output = output_text(o.get("output"), kind, out);
                let draft = Draft::new(&session, tool_result(id, output, false, Map::new()));
                out.emit(anchor, draft.actor("tool"));
            }
            other => out.unmapped(format!("item type {other:?}")),
        }
        Ok(())
    }

    fn message(
        &mut self,
        anchor: &Anchor,
        o: &Map<String, Value>,
        mid: &str,
        from_output: bool,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let role = o
            .get("role")
            .and_then(Value::as_str)
            .ok_or("a message item without a `role`")?;
        let content = o.get("content").unwrap_or(&Value::Null);
        let text = parts_text(content, role, out);
        let message_id = o
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(mid)
            .to_owned();
        if role == "assistant" {
            let turn = self.turn(anchor, mid, from_output);
            if turn.texts.is_empty() && o.get("id").is_some() {
                turn.message_id = message_id;
            }
            if !text.is_empty() {
                turn.texts.push(text);
            }
            return Ok(());
        }
        self.flush(out);
        if matches!(role, "system" | "developer") && self.opening.take_system(anchor, &text) {
            return Ok(());
        }
        self.opening.ensure(anchor, out);
        let session = self.opening.session.clone();
        let draft = match role {
            "user" => Draft::new(&session, user_prompt(message_id, text)).actor("user"),
            "system" | "developer" => {
                let mut p = user_prompt(message_id, text);
                set_payload_extra(&mut p, "role", role.into());
                Draft::new(&session, p).actor("platform")
            }
            other => {
                out.unmapped(format!("message role {other:?}"));
                return Ok(());
            }
        };
        out.emit(anchor, draft);
        Ok(())
    }

    /// Emits the gathered turn, then the results its items carried.
    fn flush(&mut self, out: &mut Emitter<'_>) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.opening.ensure(&turn.anchor, out);
        let session = self.opening.session.clone();
        let mut extra = Map::new();
        if !turn.reasoning.is_empty() {
            extra.insert("reasoning".into(), turn.reasoning.join("\n\n").into());
        }
        if !turn.encrypted.is_empty() {
            extra.insert("reasoning_encrypted".into(), turn.encrypted.into());
        }
        let usage = if turn.from_output {
            self.usage.take()
        } else {
            None
        };
        let payload = model_response(
            turn.message_id,
            turn.texts.join("\n"),
            turn.calls,
            usage,
            extra,
        );
        out.emit(
            &turn.anchor,
            Draft::new(&session, payload).actor("assistant"),
        );
        for result in turn.results {
            out.emit(&turn.anchor, Draft::new(&session, result).actor("tool"));
        }
    }

    fn finish(&mut self, anchor: &Anchor, out: &mut Emitter<'_>) {
        self.flush(out);
        self.opening.ensure(anchor, out);
    }
}

/// A call item's tool call: `function_call{call_id, name, arguments}`,
/// `custom_tool_call{call_id, name, input}`, `local_shell_call{call_id, action}`.
fn item_call(
    kind: &str,
    o: &Map<String, Value>,
    session: &str,
    out: &mut Emitter<'_>,
) -> Result<ToolCall, String> {
    let id = o
        .get("call_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("a {kind} without a `call_id`"))?;
    let (name, args) = match kind {
        "local_shell_call" => (
            "local_shell",
            o.get("action").cloned().unwrap_or_else(|| json!({})),
        ),
        _ => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("a {kind} without a `name`"))?;
            let args = if kind == "custom_tool_call" {
                // Free-form input (a patch, a script): kept as text, never parsed.
                json!({ "input": o.get("input").cloned().unwrap_or(Value::Null) })
            } else {
                arguments(o.get("arguments"))
            };
            (name, args)
        }
    };
    let mut call = tool_call(out.new_call_id(session, id), name, args);
    if let Some(item_id) = o.get("id").filter(|v| v.is_string()) {
        call.extra.insert("item_id".into(), item_id.clone());
    }
    Ok(call)
}

/// An `mcp_call`: the call and, in the same item, its output or error.
fn mcp_call(
    o: &Map<String, Value>,
    session: &str,
    out: &mut Emitter<'_>,
) -> Result<(ToolCall, Payload), String> {
    let id = o
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("an mcp_call without an `id`")?;
    let name = o
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("an mcp_call without a `name`")?;
    let id = out.new_call_id(session, id);
    let mut call = tool_call(&id, name, arguments(o.get("arguments")));
    if let Some(server) = o.get("server_label").filter(|v| v.is_string()) {
        call.extra.insert("server_label".into(), server.clone());
    }
    let error = o.get("error").filter(|v| !v.is_null());
    let result = match error {
        Some(e) => tool_result(&id, content_text(e), true, Map::new()),
        None => tool_result(
            &id,
            output_text(o.get("output"), "mcp_call", out),
            false,
            Map::new(),
        ),
    };
    Ok((call, result))
}

/// The text of a `reasoning` item (its summaries, then its reasoning text if any) and its
/// encrypted content, kept for audit.
fn reasoning_of(o: &Map<String, Value>) -> (Vec<String>, Vec<Value>) {
    let mut text = Vec::new();
    for key in ["summary", "content"] {
        let t = content_text(o.get(key).unwrap_or(&Value::Null));
        if !t.trim().is_empty() {
            text.push(t);
        }
    }
    let encrypted = o
        .get("encrypted_content")
        .filter(|v| !is_empty(v))
        .cloned()
        .into_iter()
        .collect();
    (text, encrypted)
}

/// A call's output as text: a string, or the text of an array of content parts (parts without
/// text are counted unmapped).
fn output_text(output: Option<&Value>, kind: &str, out: &mut Emitter<'_>) -> String {
    match output {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Array(_)) => parts_text(v, kind, out),
        Some(other) => other.to_string(),
    }
}

/// A session whose `SessionStarted` waits for its leading system messages: the prompt is their
/// text, and its id derives from every record that said something of it.
#[derive(Debug)]
struct Opening {
    session: String,
    start: SessionStart,
    /// The records the start is made of (`None` until one is noted).
    anchor: Option<Anchor>,
    system: Vec<String>,
    started: bool,
}

impl Opening {
    fn new(session: String, start: SessionStart) -> Self {
        let system = start.system_prompt.clone().into_iter().collect();
        Self {
            session,
            start,
            anchor: None,
            system,
            started: false,
        }
    }

    /// A session of which nothing is known but its name.
    fn bare(session: String) -> Self {
        Self::new(session, SessionStart::default())
    }

    /// Notes a record the start is made of.
    fn note(&mut self, anchor: &Anchor) {
        self.anchor = Some(match self.anchor.take() {
            Some(a) => a.with(anchor),
            None => anchor.clone(),
        });
    }

    /// Takes a system message's text as part of the prompt; `false` once the session has
    /// started (the message is then part of the conversation).
    fn take_system(&mut self, anchor: &Anchor, text: &str) -> bool {
        if self.started {
            return false;
        }
        self.note(anchor);
        if !text.trim().is_empty() {
            self.system.push(text.to_owned());
        }
        true
    }

    /// Emits the `SessionStarted` unless it was; `anchor` is the current record, used when no
    /// record was noted.
    fn ensure(&mut self, anchor: &Anchor, out: &mut Emitter<'_>) {
        if self.started {
            return;
        }
        self.started = true;
        let mut start = std::mem::take(&mut self.start);
        start.system_prompt = (!self.system.is_empty()).then(|| self.system.join("\n\n"));
        let anchor = self.anchor.take().unwrap_or_else(|| anchor.clone());
        out.session_started(&anchor, &self.session, start);
    }
}

/// What a document's header (or a conversation object) says of its session: `model`, `tools`
/// (`functions`), `instructions` (the Responses system prompt); its other small fields are kept
/// in `source_meta`.
fn conversation_start(o: &Map<String, Value>, out: &mut Emitter<'_>) -> SessionStart {
    const USED: [&str; 9] = [
        "model",
        "tools",
        "functions",
        "instructions",
        "messages",
        "traj",
        "input",
        "items",
        "output",
    ];
    let mut start = SessionStart {
        model: o.get("model").and_then(Value::as_str).map(str::to_owned),
        system_prompt: o
            .get("instructions")
            .map(content_text)
            .filter(|s| !s.trim().is_empty()),
        ..SessionStart::default()
    };
    for key in ["tools", "functions"] {
        if let Some(tools) = o.get(key) {
            start.tools.extend(tool_specs(tools, out));
        }
    }
    let meta: Map<String, Value> = o
        .iter()
        .filter(|(k, v)| !USED.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !meta.is_empty() {
        start
            .extra
            .insert("source_meta".into(), Value::Object(meta));
    }
    start
}

/// Tool definitions: Chat `{type: "function", function: {name, description, parameters}}`,
/// legacy `functions` and Responses `{type: "function", name, description, parameters}`, custom
/// tools `{type: "custom", name, description, format}`. Hosted tools (`web_search`...) have no
/// definition to keep: counted unmapped.
fn tool_specs(tools: &Value, out: &mut Emitter<'_>) -> Vec<ToolSpec> {
    let Some(list) = tools.as_array() else {
        out.unmapped("tools that are not an array");
        return Vec::new();
    };
    let mut specs = Vec::new();
    for t in list {
        let def = t.get("function").or_else(|| t.get("custom")).unwrap_or(t);
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
        let Some(name) = def.get("name").and_then(Value::as_str) else {
            out.unmapped(format!("tool type {kind:?}"));
            continue;
        };
        let mut extra = Map::new();
        if kind == "custom" {
            extra.insert("type".into(), kind.into());
            if let Some(f) = def.get("format") {
                extra.insert("format".into(), f.clone());
            }
        }
        specs.push(ToolSpec {
            name: name.to_owned(),
            description: def
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            schema: def.get("parameters").cloned().unwrap_or(Value::Null),
            extra,
        });
    }
    specs
}

/// The session id a document names for itself.
fn session_id_of(o: &Map<String, Value>) -> Option<&str> {
    ["session_id", "conversation_id"]
        .iter()
        .find_map(|k| o.get(*k)?.as_str())
        .or_else(|| o.get("conversation")?.get("id")?.as_str())
}

/// The session of one conversation of a multi-conversation file: `<main>-<id>`, or
/// `<main>-<line or element>` when it has no usable id (or one an earlier conversation took).
fn conversation_session(
    o: &Map<String, Value>,
    position: &Position,
    out: &Emitter<'_>,
    named: &mut HashSet<String>,
) -> String {
    let main = out.main_session(None);
    let ordinal = match position {
        Position::Line(n) => n.to_string(),
        Position::Element { index, .. } => index.to_string(),
        Position::Header => "0".into(),
    };
    let id = ID_FIELDS.iter().find_map(|k| scalar(o.get(*k)?)).map(|id| {
        match o.get("trial").and_then(scalar) {
            Some(trial) => format!("{id}-{trial}"),
            None => id,
        }
    });
    let usable = |s: &str| s.len() <= 200 && !s.chars().any(char::is_control);
    let by_id = id
        .filter(|id| usable(id))
        .map(|id| format!("{main}-{id}"))
        .filter(|s| !named.contains(s));
    let session = by_id.unwrap_or_else(|| format!("{main}-{ordinal}"));
    named.insert(session.clone());
    session
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A conversation object's message (item) array: the first of `fields` it has.
fn conversation_array<'a>(
    o: &'a Map<String, Value>,
    fields: &[&str],
) -> Result<Option<&'a Vec<Value>>, String> {
    for f in fields {
        match o.get(*f) {
            None => {}
            Some(Value::Array(a)) => return Ok(Some(a)),
            Some(_) => return Err(format!("`{f}` is not an array")),
        }
    }
    Ok(None)
}

/// The text of a message's content; its parts without text are counted as unmapped.
fn parts_text(content: &Value, role: &str, out: &mut Emitter<'_>) -> String {
    for kind in non_text_parts(content) {
        if kind != "refusal" {
            out.unmapped(format!("{role} content part {kind:?}"));
        }
    }
    let text = content_text(content);
    // A refusal part (`{"type": "refusal", "refusal": "..."}`) is what the model said.
    let refusals: Vec<&str> = content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("refusal")?.as_str())
        .collect();
    if refusals.is_empty() {
        text
    } else {
        std::iter::once(text.as_str())
            .filter(|t| !t.is_empty())
            .chain(refusals)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Counts the fields of a message this converter does not map (and that have a value).
fn count_unknown_fields(m: &Map<String, Value>, known: &[&str], role: &str, out: &mut Emitter<'_>) {
    for (k, v) in m {
        if !known.contains(&k.as_str()) && !is_empty(v) {
            out.unmapped(format!("{role} message field {k:?}"));
        }
    }
}

fn set_payload_extra(payload: &mut Payload, key: &str, value: Value) {
    if let Payload::UserPromptSubmitted(p) = payload {
        p.extra.insert(key.into(), value);
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn object(v: &Value) -> Result<&Map<String, Value>, String> {
    v.as_object().ok_or_else(|| {
        format!(
            "expected a JSON object, found {}",
            strata_core::event::kind_of(v)
        )
    })
}

fn keys(o: &Map<String, Value>) -> String {
    let mut k: Vec<&str> = o.keys().map(String::as_str).take(12).collect();
    if o.len() > 12 {
        k.push("...");
    }
    k.join(", ")
}
