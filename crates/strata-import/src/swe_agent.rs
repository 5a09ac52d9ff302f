//! SWE-agent `.traj` and mini-swe-agent `.traj.json`.
//!
//! Both are one JSON document per run; their big arrays (`history` and `trajectory`;
//! `messages`) are streamed after the small fields (`info`, `replay_config`, `environment`;
//! `info`, `instance_id`, `trajectory_format`), which therefore come first and say the model and
//! how the run ended. SWE-agent has no clock; mini-swe-agent times its responses
//! (`extra.timestamp` in 2.x, the provider response's `created` in 1.x) and 2.x its
//! observations: the messages before the first time (system prompt, task) are dated by it,
//! later untimed ones by the message before.
//!
//! # Calls without ids: pairing by position
//!
//! The thought-action formats (SWE-agent before 1.0 and its 1.0 thought-action parser,
//! mini-swe-agent's text mode) have no tool-call ids: the model writes one command, the harness
//! runs it and answers with the next message. That *is* the pairing the format defines, so the
//! importer uses it: the response's command becomes a tool call whose id derives from the
//! response's position (`call-history.7`), and the next observation message is its result.
//! Such a call is named `bash`, with `{"command": <the command line>}`: SWE-agent's own
//! commands (`open`, `edit`, `submit`...) are shell functions installed in the container, run
//! by the same shell as `ls` or `pytest`, so the first word would mix tool names with program
//! names.
//!
//! # SWE-agent
//!
//! - `history` is what the model saw, and is what is imported: the first `system` message is
//!   the system prompt; demonstrations (`is_demo`) are imported like the rest — the model read
//!   them as earlier turns — with `is_demo` kept in the events' `extra`; `user` messages are
//!   prompts, or the observation of the pending command; `assistant` messages are model
//!   responses (their `content`, thought and command as the model wrote them), calling their
//!   `action` by position, or their `tool_calls` by id (1.0 function calling); `tool` messages
//!   answer their `tool_call_ids`;
//! - `trajectory` restates each step (`response`, `action`, `observation`, `thought`); with a
//!   history it only adds how the run ended, which the history lacks: the observation of a final
//!   command left unanswered (the submission), or the final step itself when the history stops
//!   before it (1.0 keeps no message for the closing `submit`). Without a history (or with an
//!   empty one) every step is imported: its response calls its action, its observation answers.
//!   The steps' `messages` (the whole query of the step) repeat the history and are not read;
//! - the model is `replay_config`'s (a JSON string or object: `agent.model.name`, or
//!   `model.model_name` before 1.0); `info` (`exit_status`, `submission`, `model_stats`...) and
//!   `environment` are kept in the `SessionStarted`'s `extra`;
//! - observations have no exit status: results are never marked errors.
//!
//! # mini-swe-agent
//!
//! - `messages` is the whole conversation: `system` (the prompt), the `user` task, `assistant`
//!   responses, and observations; the session is `instance_id`, else the file name;
//! - text mode (format `mini-swe-agent-1`, and the bare message lists older versions wrote): a
//!   response with exactly one ```` ```bash ```` (or ```` ```mswea_bash_command ````) block calls
//!   that command, as mini-swe-agent parses it; the next `user` message is its observation,
//!   kept as the model saw it (`<returncode>…</returncode><output>…</output>`, a timeout notice,
//!   or the final submission), an error when its return code is not 0, or on a timeout or an
//!   exception. A response with no block or several calls nothing; the harness's format error
//!   that follows is a user prompt as the model read it, with actor `platform` (any user message
//!   after the task that answers no call is the harness's: it is not a request and does not
//!   open a turn);
//! - tool-calling mode (`mini-swe-agent-1.1`): `tool_calls` ↔ `tool` messages by id, with the
//!   `extra.returncode` / `extra.exception_info` the harness recorded; the `exit` message carries
//!   the submission, the output of the last command (whose `tool` message was never written):
//!   it answers that call, with its `exit_status`;
//! - `info` (`exit_status`, `submission`, `model_stats`, `config`...) is kept in the
//!   `SessionStarted`'s `extra`; the model is `info.config.model.model_name`; an assistant
//!   message's `extra.response` gives its usage and the reasoning the provider returned (kept,
//!   never sent), `extra.cost` its cost.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::emit::{
    arguments, content_text, model_response, parse_time, tool_call, tool_result, usage_of,
    user_prompt, Anchor, Draft, SessionStart,
};
use crate::{Converter, Emitter, Record, Source};

/// How a session's `SessionStarted` is built: from the header, completed by the system message.
#[derive(Debug, Default)]
struct Start {
    session: Option<String>,
    /// The header's part of the start, until it is emitted.
    pending: Option<(Anchor, SessionStart)>,
    started: bool,
}

impl Start {
    fn header(&mut self, anchor: &Anchor, session: String, start: SessionStart) {
        self.session = Some(session);
        self.pending = Some((anchor.clone(), start));
    }

    fn session(&mut self, out: &Emitter<'_>) -> String {
        self.session
            .get_or_insert_with(|| out.main_session(None))
            .clone()
    }

    /// Emits the `SessionStarted` unless it was, with `system_prompt` when the record at
    /// `anchor` is the system message.
    fn ensure(
        &mut self,
        anchor: &Anchor,
        system_prompt: Option<String>,
        time: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) {
        if self.started {
            return;
        }
        self.started = true;
        let session = self.session(out);
        let (anchor, mut start) = match self.pending.take() {
            // The header and the system message both make the start: a change to either
            // changes its id.
            Some((header, start)) if system_prompt.is_some() => (header.with(anchor), start),
            Some((header, start)) => (header, start),
            None => (anchor.clone(), SessionStart::default()),
        };
        start.system_prompt = system_prompt;
        start.timestamp = time;
        out.session_started(&anchor, &session, start);
    }
}

/// The SWE-agent converter.
#[derive(Debug, Default)]
pub struct SweAgent {
    start: Start,
    /// Whether the header has a run's fields (`info`, `environment`, `replay_config`).
    run_header: bool,
    history: u64,
    /// The positional call the next observation answers.
    pending: Option<String>,
    /// The last history response's command and the calls it made that are still unanswered.
    last_action: Option<String>,
    open: Vec<String>,
    /// The last trajectory step seen while a history was imported (only it can add anything).
    last_step: Option<Record>,
}

impl SweAgent {
    pub fn new(_source: &Source) -> Self {
        Self::default()
    }
}

impl Converter for SweAgent {
    fn streamed_fields(&self) -> &'static [&'static str] {
        &["history", "trajectory"]
    }

    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        if let Some(header) = record.header() {
            if header.contains_key("messages") {
                return Err(
                    "a `messages` list, not a SWE-agent `history`: a mini-swe-agent \
                            trajectory? (--format mini-swe-agent)"
                        .into(),
                );
            }
            let session = out.main_session(None);
            self.start
                .header(&record.anchor(), session, swe_agent_start(header)?);
            self.run_header = ["info", "environment", "replay_config"]
                .iter()
                .any(|k| header.contains_key(*k));
            return Ok(());
        }
        match &record.position {
            crate::Position::Element { field: Some(f), .. } if f == "trajectory" => {
                if self.history > 0 {
                    self.last_step = Some(record);
                    Ok(())
                } else {
                    self.step(&record, false, out)
                }
            }
            _ => {
                self.history += 1;
                self.history_message(&record, out)
            }
        }
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        if let Some(step) = self.last_step.take() {
            self.closing_step(&step, out)?;
        }
        if !self.start.started {
            if !self.run_header {
                return Err("not a SWE-agent trajectory: no `history` or `trajectory`".into());
            }
            // A run that ended before its first step: its start still says how.
            if let Some((anchor, _)) = &self.start.pending {
                let anchor = anchor.clone();
                self.start.ensure(&anchor, None, None, out);
            }
        }
        Ok(())
    }
}

impl SweAgent {
    fn history_message(&mut self, record: &Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let anchor = record.anchor();
        let m = record
            .value
            .as_object()
            .ok_or("a history entry that is not an object")?;
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or("a history entry without a `role`")?;
        let text = content_text(m.get("content").unwrap_or(&Value::Null));
        if role == "system" && !self.start.started {
            self.start.ensure(&anchor, Some(text), None, out);
            return Ok(());
        }
        self.start.ensure(&anchor, None, None, out);
        let session = self.start.session(out);
        let mut extra = Map::new();
        if m.get("is_demo").and_then(Value::as_bool) == Some(true) {
            extra.insert("is_demo".into(), true.into());
        }
        let key = record.position.key();
        match role {
            "user" | "system" => match self.pending.take() {
                Some(id) => {
                    self.open.retain(|o| *o != id);
                    let p = tool_result(id, text, false, Map::new());
                    out.emit(
                        &anchor,
                        with_extra(Draft::new(&session, p), extra).actor("tool"),
                    );
                }
                None => {
                    if role == "system" {
                        extra.insert("role".into(), role.into());
                    }
                    let p = user_prompt(key, text);
                    out.emit(
                        &anchor,
                        with_extra(Draft::new(&session, p), extra).actor("user"),
                    );
                }
            },
            "assistant" => {
                // An observation never came for the previous command: it stays unanswered.
                self.pending = None;
                let action = m.get("action").and_then(Value::as_str).unwrap_or_default();
                let calls = match m.get("tool_calls") {
                    Some(Value::Array(list)) if !list.is_empty() => {
                        id_calls(list, &session, out).map_err(|e| format!("tool_calls{e}"))?
                    }
                    _ if !action.trim().is_empty() => {
                        let id = out.new_call_id(&session, &format!("call-{key}"));
                        self.pending = Some(id.clone());
                        vec![bash_call(id, action.trim_end())]
                    }
                    _ => Vec::new(),
                };
                self.last_action = Some(action.trim().to_owned());
                self.open = calls.iter().map(|c| c.tool_call_id.clone()).collect();
                let p = model_response(key, text, calls, None, Map::new());
                out.emit(
                    &anchor,
                    with_extra(Draft::new(&session, p), extra).actor("assistant"),
                );
            }
            "tool" => {
                let ids = tool_message_ids(m)?;
                for id in ids {
                    let id = out.call_id(&session, &id);
                    self.open.retain(|o| *o != id);
                    let p = tool_result(id, text.clone(), false, Map::new());
                    out.emit(
                        &anchor,
                        with_extra(Draft::new(&session, p), extra.clone()).actor("tool"),
                    );
                }
            }
            other => out.unmapped(format!("history role {other:?}")),
        }
        Ok(())
    }

    /// The last trajectory step of a run whose history was imported: what it adds.
    fn closing_step(&mut self, step: &Record, out: &mut Emitter<'_>) -> Result<(), String> {
        let action = step_str(step, "action")?;
        let known = self.last_action.as_deref() == Some(action.trim());
        if !known {
            // The history stops before the final step (1.0 writes no message for it).
            return self.step(step, true, out);
        }
        // The history's last command is this step's: its observation, if still unanswered.
        let Some(id) = self.open.pop() else {
            return Ok(());
        };
        self.pending = None;
        let session = self.start.session(out);
        let observation = step_str(step, "observation")?;
        let p = tool_result(id, observation, false, from_trajectory());
        out.emit(&step.anchor(), Draft::new(&session, p).actor("tool"));
        Ok(())
    }

    /// One trajectory step as a response calling its action, and the action's observation.
    fn step(
        &mut self,
        record: &Record,
        closing: bool,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let anchor = record.anchor();
        let key = record.position.key();
        self.start.ensure(&anchor, None, None, out);
        let session = self.start.session(out);
        let action = step_str(record, "action")?;
        let mut text = step_str(record, "response")?;
        if text.is_empty() {
            text = step_str(record, "thought")?;
        }
        let extra = if closing {
            from_trajectory()
        } else {
            Map::new()
        };
        let call = (!action.trim().is_empty()).then(|| {
            bash_call(
                out.new_call_id(&session, &format!("call-{key}")),
                action.trim_end(),
            )
        });
        let id = call.as_ref().map(|c| c.tool_call_id.clone());
        let p = model_response(key, text, call.into_iter().collect(), None, extra.clone());
        out.emit(&anchor, Draft::new(&session, p).actor("assistant"));
        let observation = step_str(record, "observation")?;
        match id {
            Some(id) => {
                let p = tool_result(id, observation, false, extra);
                out.emit(&anchor, Draft::new(&session, p).actor("tool"));
            }
            None if !observation.is_empty() => {
                out.unmapped("trajectory observation without action")
            }
            None => {}
        }
        Ok(())
    }
}

/// The start a SWE-agent header says: the model of `replay_config`, `info` and `environment`.
fn swe_agent_start(header: &Map<String, Value>) -> Result<SessionStart, String> {
    let config = match header.get("replay_config") {
        Some(Value::String(s)) => Some(
            serde_json::from_str::<Value>(s)
                .map_err(|e| format!("`replay_config` is a string but not JSON: {e}"))?,
        ),
        Some(v @ Value::Object(_)) => Some(v.clone()),
        _ => None,
    };
    let model = config.as_ref().and_then(|c| {
        [
            &["agent", "model", "name"][..],
            &["agent", "model", "model_name"],
            &["model", "model_name"],
            &["model", "name"],
        ]
        .iter()
        .find_map(|path| path_str(c, path))
    });
    let mut start = SessionStart {
        model,
        ..SessionStart::default()
    };
    for key in ["info", "environment"] {
        if let Some(v) = header.get(key).filter(|v| !v.is_null()) {
            start.extra.insert(key.into(), v.clone());
        }
    }
    Ok(start)
}

/// The ids a 1.0 `tool` message answers: `tool_call_ids` (or a single `tool_call_id`).
fn tool_message_ids(m: &Map<String, Value>) -> Result<Vec<String>, String> {
    let ids: Vec<String> = match (m.get("tool_call_ids"), m.get("tool_call_id")) {
        (Some(Value::Array(ids)), _) => ids
            .iter()
            .filter_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
            .collect(),
        (_, Some(Value::String(id))) if !id.is_empty() => vec![id.clone()],
        _ => Vec::new(),
    };
    if ids.is_empty() {
        return Err("a tool message without `tool_call_ids`".into());
    }
    Ok(ids)
}

/// The mini-swe-agent converter.
#[derive(Debug)]
pub struct MiniSweAgent {
    start: Start,
    /// The leading system and user messages, until the first other one (`None` after).
    held: Option<Vec<Record>>,
    /// The positional call (text mode) the next observation answers.
    pending: Option<String>,
    /// Calls of the last response that are still unanswered (by id, tool-calling mode).
    open: Vec<String>,
    /// Whether the task (the first user message) was converted: a later user message that
    /// answers no call is the harness's (a format error, a reminder), not the user's.
    tasked: bool,
}

impl MiniSweAgent {
    pub fn new(_source: &Source) -> Self {
        Self {
            start: Start::default(),
            held: Some(Vec::new()),
            pending: None,
            open: Vec::new(),
            tasked: false,
        }
    }
}

/// Leading system and user messages held back waiting for a time. mini-swe-agent times its
/// responses (and 2.x its observations), not the system prompt and the task before them: those
/// are dated by the first response, so the session does not start at the base time (the file's
/// modification time, after the run) and drag every later time up to it.
const HOLD: usize = 8;

/// The fences mini-swe-agent reads a text-mode command from: `bash` (1.x) and
/// `mswea_bash_command` (2.x).
const FENCES: [&str; 2] = ["bash", "mswea_bash_command"];

impl Converter for MiniSweAgent {
    fn streamed_fields(&self) -> &'static [&'static str] {
        &["messages"]
    }

    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String> {
        if let Some(header) = record.header() {
            if header.contains_key("history") || header.contains_key("trajectory") {
                return Err("a SWE-agent trajectory (`history`/`trajectory`), not \
                            mini-swe-agent (--format swe-agent)"
                    .into());
            }
            let instance = header.get("instance_id").and_then(Value::as_str);
            let session = out.main_session(instance);
            self.start
                .header(&record.anchor(), session, mini_start(header));
            return Ok(());
        }
        if let Some(held) = &mut self.held {
            let time = message_time(&record);
            let role = record.value.get("role").and_then(Value::as_str);
            // Only the prompt and the task wait: they cannot be malformed, so a malformed
            // message is always reported at its own position.
            if time.is_none() && held.len() < HOLD && matches!(role, Some("system" | "user")) {
                held.push(record);
                return Ok(());
            }
            self.release(time, out)?;
        }
        self.message(&record, None, out)
    }

    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        self.release(None, out)
    }
}

impl MiniSweAgent {
    /// Converts the held messages, dated `time`. A held message's error names its position
    /// (the frame names the record being read).
    fn release(
        &mut self,
        time: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        for record in self.held.take().unwrap_or_default() {
            self.message(&record, time, out)
                .map_err(|e| format!("{}: {e}", record.position))?;
        }
        Ok(())
    }

    /// Converts one message; `undated` is the time of a message that has none.
    fn message(
        &mut self,
        record: &Record,
        undated: Option<DateTime<Utc>>,
        out: &mut Emitter<'_>,
    ) -> Result<(), String> {
        let anchor = record.anchor();
        let m = record
            .value
            .as_object()
            .ok_or("a message that is not an object")?;
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or("a message without a `role`")?;
        let text = content_text(m.get("content").unwrap_or(&Value::Null));
        let extra = m.get("extra").and_then(Value::as_object);
        let time = message_time(record).or(undated);
        if role == "system" && !self.start.started {
            self.start.ensure(&anchor, Some(text), time, out);
            return Ok(());
        }
        self.start.ensure(&anchor, None, time, out);
        let session = self.start.session(out);
        let key = record.position.key();
        let draft = match role {
            "user" | "system" => match self.pending.take() {
                Some(id) => {
                    let p = tool_result(id, text.as_str(), observation_failed(&text), Map::new());
                    Draft::new(&session, p).actor("tool")
                }
                None => {
                    let mut p = user_prompt(key, text);
                    if let strata_core::Payload::UserPromptSubmitted(u) = &mut p {
                        if role == "system" {
                            u.extra.insert("role".into(), role.into());
                        }
                        if let Some(kind) = extra.and_then(|e| e.get("interrupt_type")) {
                            u.extra.insert("interrupt_type".into(), kind.clone());
                        }
                    }
                    // Nobody but the harness speaks after the task in a mini-swe-agent run.
                    let actor = if self.tasked { "platform" } else { "user" };
                    self.tasked |= role == "user";
                    Draft::new(&session, p).actor(actor)
                }
            },
            "assistant" => self.assistant(m, text, &key, &session, out)?,
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or("a tool message without a `tool_call_id`")?;
                let id = out.call_id(&session, id);
                self.open.retain(|o| *o != id);
                let failed = match extra {
                    Some(e) if e.contains_key("returncode") => {
                        e.get("returncode").and_then(Value::as_i64) != Some(0)
                            || e.get("exception_info")
                                .and_then(Value::as_str)
                                .is_some_and(|s| !s.is_empty())
                    }
                    _ => observation_failed(&text),
                };
                Draft::new(&session, tool_result(id, text, failed, Map::new())).actor("tool")
            }
            "exit" => {
                // The submission: the output of the last command, which got no message of its
                // own because the run ended on it.
                let Some(id) = self.pending.take().or_else(|| self.open.pop()) else {
                    out.unmapped("exit message without a pending call");
                    return Ok(());
                };
                let mut e = Map::new();
                e.insert("role".into(), "exit".into());
                if let Some(status) = extra.and_then(|x| x.get("exit_status")) {
                    e.insert("exit_status".into(), status.clone());
                }
                Draft::new(&session, tool_result(id, text, false, e)).actor("tool")
            }
            other => {
                out.unmapped(format!("message role {other:?}"));
                return Ok(());
            }
        };
        out.emit(&anchor, draft.at(time));
        Ok(())
    }

    fn assistant(
        &mut self,
        m: &Map<String, Value>,
        text: String,
        key: &str,
        session: &str,
        out: &mut Emitter<'_>,
    ) -> Result<Draft, String> {
        // A command that got no observation (the run stopped) stays unanswered.
        self.pending = None;
        let calls = match m.get("tool_calls") {
            Some(Value::Array(list)) if !list.is_empty() => {
                id_calls(list, session, out).map_err(|e| format!("tool_calls{e}"))?
            }
            _ => match single_action(&text) {
                Some(command) => {
                    let id = out.new_call_id(session, &format!("call-{key}"));
                    self.pending = Some(id.clone());
                    vec![bash_call(id, &command)]
                }
                None => Vec::new(),
            },
        };
        self.open = calls.iter().map(|c| c.tool_call_id.clone()).collect();
        let extra = m.get("extra").and_then(Value::as_object);
        let response = extra.and_then(|e| e.get("response"));
        let usage = usage_of(response.and_then(|r| r.get("usage")));
        let mut keep = Map::new();
        // Providers return the model's reasoning beside its answer (OpenRouter `reasoning`,
        // litellm `reasoning_content`); the harness never resends it.
        let reasoning = response
            .and_then(|r| r.pointer("/choices/0/message"))
            .and_then(Value::as_object)
            .into_iter()
            .chain(std::iter::once(m))
            .find_map(|msg| {
                ["reasoning_content", "reasoning"]
                    .iter()
                    .find_map(|k| {
                        msg.get(*k)
                            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                    })
                    .cloned()
            });
        if let Some(r) = reasoning {
            keep.insert("reasoning".into(), r);
        }
        if let Some(cost) = extra.and_then(|e| e.get("cost")).filter(|v| v.is_number()) {
            keep.insert("cost".into(), cost.clone());
        }
        let p = model_response(key, text, calls, usage, keep);
        Ok(Draft::new(session, p).actor("assistant"))
    }
}

/// A message's time: `extra.timestamp` (mini-swe-agent 2), else the `created` time of the
/// provider's response (1.x responses).
fn message_time(record: &Record) -> Option<DateTime<Utc>> {
    let extra = record.value.get("extra")?;
    parse_time(extra.get("timestamp"))
        .or_else(|| parse_time(extra.get("response").and_then(|r| r.get("created"))))
}

/// The start a mini-swe-agent header says: `info`, the model of its config, the instance.
fn mini_start(header: &Map<String, Value>) -> SessionStart {
    let info = header.get("info");
    let mut start = SessionStart {
        model: info.and_then(|i| path_str(i, &["config", "model", "model_name"])),
        ..SessionStart::default()
    };
    for key in ["info", "instance_id", "trajectory_format"] {
        if let Some(v) = header.get(key).filter(|v| !v.is_null()) {
            start.extra.insert(key.into(), v.clone());
        }
    }
    start
}

/// The one command of a text-mode response, as mini-swe-agent finds it; `None` when the
/// response has none or several (the harness then answers with a format error).
fn single_action(text: &str) -> Option<String> {
    FENCES.iter().find_map(|fence| {
        let found = fenced_blocks(text, fence);
        match found.as_slice() {
            [] => None,
            [one] => Some(Some(one.trim().to_owned())),
            _ => Some(None),
        }
    })?
}

/// The bodies of the blocks ```` ```<fence> ```` in `text`, found as mini-swe-agent's
/// `action_regex` (`` ```bash\s*\n(.*?)\n``` ``, DOTALL, `re.findall`) finds them: after the
/// fence, blanks up to a line break, then the shortest body up to a line break and ```` ``` ````.
fn fenced_blocks<'t>(text: &'t str, fence: &str) -> Vec<&'t str> {
    let open = format!("```{fence}");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(&open) {
        let after = from + at + open.len();
        let rest = &text[after..];
        let blanks = rest.len() - rest.trim_start().len();
        let run = &rest[..blanks];
        // `\s*` is greedy: the body starts after the last line break of the blanks, or after
        // an earlier one when only that lets a closing fence be found (regex backtracking).
        let mut starts = run.match_indices('\n').rev().map(|(i, _)| after + i + 1);
        let hit = starts.find_map(|start| Some((start, start + text[start..].find("\n```")?)));
        match hit {
            Some((start, end)) => {
                found.push(&text[start..end]);
                from = end + 4;
            }
            None => from = from + at + 1,
        }
    }
    found
}

/// Whether an observation the harness templated says the command failed: a return code other
/// than 0, an exception, or a timeout.
fn observation_failed(text: &str) -> bool {
    let text = text.trim_start();
    if text.starts_with("<exception>") {
        return true;
    }
    if text.starts_with("<returncode>") {
        return tag(text, "returncode").is_some_and(|code| code.trim() != "0");
    }
    text.starts_with("The last command") && text.contains("timed out")
}

/// The text of the first `<name>…</name>` in `text`.
fn tag<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{name}>"))?;
    Some(&text[start..end])
}

/// Calls by id (`tool_calls[{id, function{name, arguments}}]`); an `Err` names the entry.
fn id_calls(
    list: &[Value],
    session: &str,
    out: &mut Emitter<'_>,
) -> Result<Vec<strata_core::payload::ToolCall>, String> {
    let mut calls = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("[{i}]: a tool call without an `id`"))?;
        let f = c.get("function");
        let name = f
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("[{i}]: a tool call without a function `name`"))?;
        let args = arguments(f.and_then(|f| f.get("arguments")));
        calls.push(tool_call(out.new_call_id(session, id), name, args));
    }
    Ok(calls)
}

fn bash_call(id: String, command: &str) -> strata_core::payload::ToolCall {
    tool_call(id, "bash", json!({ "command": command }))
}

fn step_str(step: &Record, key: &str) -> Result<String, String> {
    match step.value.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("trajectory step `{key}` is not a string")),
    }
}

fn from_trajectory() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("from_trajectory".into(), true.into());
    m
}

fn with_extra(mut draft: Draft, extra: Map<String, Value>) -> Draft {
    use strata_core::Payload;
    let target = match &mut draft.payload {
        Payload::UserPromptSubmitted(p) => &mut p.extra,
        Payload::ModelResponseReceived(p) => &mut p.extra,
        Payload::ToolCallFinished(p) => &mut p.extra,
        _ => return draft,
    };
    target.extend(extra);
    draft
}

fn path_str(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case's expected bodies are what Python's `re.findall(r"```bash\s*\n(.*?)\n```",
    /// text, re.DOTALL)` returns, as mini-swe-agent parses.
    #[test]
    fn fenced_blocks_match_the_harness_regex() {
        let cases: [(&str, &[&str]); 9] = [
            ("```bash\nls\n```", &["ls"]),
            ("```bash  \n\n  ls -la\n```", &["  ls -la"]),
            ("```bash\n\n```", &[""]),
            ("```bashx\nls\n```", &[]),
            ("a\n```bash\nls\n```\nb\n```bash\npwd\n```", &["ls", "pwd"]),
            ("```bash ls```", &[]),
            ("```bash\nls\n```python\n", &["ls"]),
            (
                "```bash\necho \"```bash\"\nx\n```",
                &["echo \"```bash\"\nx"],
            ),
            ("no block", &[]),
        ];
        for (text, expected) in cases {
            assert_eq!(fenced_blocks(text, "bash"), expected, "{text:?}");
        }
    }

    #[test]
    fn one_command_or_none() {
        assert_eq!(
            single_action("T\n```bash\n  ls \n```").as_deref(),
            Some("ls")
        );
        assert_eq!(single_action("```bash\nls\n```\n```bash\npwd\n```"), None);
        assert_eq!(
            single_action("```mswea_bash_command\necho hi\n```").as_deref(),
            Some("echo hi")
        );
        assert_eq!(single_action("no command"), None);
    }

    #[test]
    fn observations_that_failed() {
        assert!(!observation_failed(
            "<returncode>0</returncode>\n<output>\n</output>"
        ));
        assert!(observation_failed(
            "<returncode>127</returncode>\n<output>\n</output>"
        ));
        assert!(observation_failed(
            "<exception>boom</exception>\n<returncode>-1</returncode>"
        ));
        assert!(observation_failed(
            "The last command <command>sleep 9</command> timed out and has been killed."
        ));
        // A submission is not an error, whatever its diff holds.
        assert!(!observation_failed(
            "diff --git a/x b/x\n+<returncode>1</returncode>"
        ));
    }
}
