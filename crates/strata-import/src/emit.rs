//! Building canonical events from converted records: stable ids, timestamps, tool-call pairing
//! bookkeeping and the report.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use strata_core::event::truncate_to_micros;
use strata_core::payload::{
    ModelRef, ModelResponseReceived, SessionStarted, ToolCall, ToolCallFinished, ToolSpec, Usage,
    UserPromptSubmitted,
};
use strata_core::{Event, Payload, MAIN_BRANCH};

use crate::read::Record;
use crate::{models, Error, ImportOptions, Report, Source};

/// What the id of an event derives from: the record it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    position: String,
    fingerprint: [u8; 32],
}

impl Record {
    /// The anchor of the events this record gives.
    pub fn anchor(&self) -> Anchor {
        Anchor {
            position: self.position.key(),
            fingerprint: self.fingerprint,
        }
    }
}

impl Anchor {
    /// The anchor of an event built from several records (a model turn spread over items, a
    /// session start over a header and system messages): the first record's position, and the
    /// bytes of all of them, so a change to any of them changes the event's id.
    pub fn with(&self, other: &Anchor) -> Anchor {
        if self == other {
            return self.clone();
        }
        let mut h = Sha256::new();
        h.update(self.fingerprint);
        h.update(other.position.as_bytes());
        h.update([0]);
        h.update(other.fingerprint);
        Anchor {
            position: self.position.clone(),
            fingerprint: h.finalize().into(),
        }
    }
}

/// The id of the `sub`-th event an anchor gives in `session`: the same file imported twice
/// gives the same ids (one effect), two files that differ at a position give different ones.
pub fn event_id(tenant: &str, session: &str, anchor: &Anchor, sub: u32) -> String {
    let mut h = Sha256::new();
    for part in [
        tenant.as_bytes(),
        session.as_bytes(),
        anchor.position.as_bytes(),
    ] {
        h.update(part);
        h.update([0]);
    }
    h.update(sub.to_be_bytes());
    h.update(anchor.fingerprint);
    format!("imp-{}", &hex::encode(h.finalize())[..32])
}

/// An event about to be emitted.
#[derive(Debug, Clone)]
pub struct Draft {
    pub session: String,
    pub branch: String,
    /// `None`: the session's last time once one of its events had a time, else the synthetic
    /// clock (base time + one second per event) of formats without one.
    pub timestamp: Option<DateTime<Utc>>,
    pub actor: Option<String>,
    pub participant: Option<String>,
    pub payload: Payload,
    /// Fields kept beside the envelope (`source`: where the event came from).
    pub extra: Map<String, Value>,
}

impl Draft {
    pub fn new(session: impl Into<String>, payload: Payload) -> Self {
        Self {
            session: session.into(),
            branch: MAIN_BRANCH.into(),
            timestamp: None,
            actor: None,
            participant: None,
            payload,
            extra: Map::new(),
        }
    }

    pub fn at(mut self, timestamp: Option<DateTime<Utc>>) -> Self {
        self.timestamp = timestamp;
        self
    }

    pub fn actor(mut self, actor: &str) -> Self {
        self.actor = Some(actor.into());
        self
    }

    pub fn branch(mut self, branch: impl Into<String>) -> Self {
        self.branch = branch.into();
        self
    }

    pub fn extra(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }
}

#[derive(Debug, Default)]
struct SessionBook {
    last_time: Option<DateTime<Utc>>,
    /// Whether an event of the session had a time of its own: then an event without one takes
    /// the session's last time; before (a format without a clock), the synthetic clock's.
    clocked: bool,
    /// Calls asked for and not answered yet (emitted ids).
    open: HashSet<String>,
    /// The emitted id of each source call id (a source that reuses an id gets `id#2`...).
    current: HashMap<String, String>,
    uses: HashMap<String, u32>,
}

/// Hands a converter's events to the sink with their ids, and keeps the report.
pub struct Emitter<'a> {
    options: &'a ImportOptions,
    stem: String,
    base_time: DateTime<Utc>,
    sink: &'a mut dyn FnMut(Event) -> Result<(), String>,
    sink_error: Option<Error>,
    pub(crate) report: Report,
    books: HashMap<String, SessionBook>,
    last_anchor: Option<(Anchor, String)>,
    sub: u32,
    ticks: i64,
}

impl std::fmt::Debug for Emitter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter")
            .field("stem", &self.stem)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<'a> Emitter<'a> {
    pub(crate) fn new(
        options: &'a ImportOptions,
        source: &Source,
        base_time: DateTime<Utc>,
        sink: &'a mut dyn FnMut(Event) -> Result<(), String>,
    ) -> Self {
        Self {
            options,
            stem: source.stem(),
            base_time,
            sink,
            sink_error: None,
            report: Report::default(),
            books: HashMap::new(),
            last_anchor: None,
            sub: 0,
            ticks: 0,
        }
    }

    /// The tenant of the events.
    pub fn tenant(&self) -> &str {
        &self.options.tenant
    }

    pub fn options(&self) -> &ImportOptions {
        self.options
    }

    /// The session id of the file's main session: `--session`, else the id the source gives,
    /// else the file name without extensions.
    pub fn main_session(&self, source_id: Option<&str>) -> String {
        self.options
            .session
            .clone()
            .or_else(|| source_id.filter(|s| !s.is_empty()).map(str::to_owned))
            .unwrap_or_else(|| self.stem.clone())
    }

    /// The file name without extensions.
    pub fn stem(&self) -> &str {
        &self.stem
    }

    /// Counts something the converter could not map.
    pub fn unmapped(&mut self, kind: impl Into<String>) {
        self.report.unmapped(kind);
    }

    /// The emitted id of a tool call the source names `source_id` in `session` (as asked for
    /// by the newest call of that id).
    pub fn call_id(&self, session: &str, source_id: &str) -> String {
        self.books
            .get(session)
            .and_then(|b| b.current.get(source_id))
            .cloned()
            .unwrap_or_else(|| source_id.to_owned())
    }

    /// Whether a call of that source id was asked for in `session`.
    pub fn knows_call(&self, session: &str, source_id: &str) -> bool {
        self.books
            .get(session)
            .is_some_and(|b| b.current.contains_key(source_id))
    }

    /// A new call id for a call the source names `source_id`: itself the first time, then
    /// `id#2`, `id#3`... so a source that reuses ids still pairs each result with its call.
    pub fn new_call_id(&mut self, session: &str, source_id: &str) -> String {
        let book = self.books.entry(session.to_owned()).or_default();
        let n = book.uses.entry(source_id.to_owned()).or_default();
        *n += 1;
        let id = if *n == 1 {
            source_id.to_owned()
        } else {
            format!("{source_id}#{n}")
        };
        book.current.insert(source_id.to_owned(), id.clone());
        id
    }

    /// Emits one event of `anchor`'s record.
    pub fn emit(&mut self, anchor: &Anchor, draft: Draft) {
        if self.sink_error.is_some() {
            return;
        }
        let sub = match &self.last_anchor {
            Some((a, s)) if a == anchor && *s == draft.session => self.sub + 1,
            _ => 0,
        };
        self.sub = sub;
        self.last_anchor = Some((anchor.clone(), draft.session.clone()));
        let tick = self.base_time + Duration::seconds(self.ticks);
        self.ticks += 1;
        let book = self.books.entry(draft.session.clone()).or_default();
        // Microseconds, as the log keeps them: an event read back from its JSON is then equal to
        // the one emitted (sources write nanoseconds, the base time is a file's mtime).
        book.clocked |= draft.timestamp.is_some();
        let untimed = if book.clocked { book.last_time } else { None };
        let timestamp = truncate_to_micros(
            draft
                .timestamp
                .or(untimed)
                .unwrap_or(tick)
                .max(book.last_time.unwrap_or(DateTime::<Utc>::MIN_UTC)),
        );
        book.last_time = Some(timestamp);
        match &draft.payload {
            Payload::ModelResponseReceived(p) => {
                book.open
                    .extend(p.tool_calls.iter().map(|c| c.tool_call_id.clone()));
            }
            Payload::ToolCallRequested(p) => {
                book.open.insert(p.tool_call_id.clone());
            }
            Payload::ToolCallFinished(p) if !book.open.remove(&p.tool_call_id) => {
                self.report.orphan_results += 1;
            }
            Payload::ToolCallFailed(p) if !book.open.remove(&p.tool_call_id) => {
                self.report.orphan_results += 1;
            }
            _ => {}
        }
        if !self.report.sessions.contains(&draft.session) {
            self.report.sessions.push(draft.session.clone());
        }
        *self
            .report
            .events
            .entry(draft.payload.event_type().as_str().to_owned())
            .or_default() += 1;
        let event = Event {
            event_id: event_id(&self.options.tenant, &draft.session, anchor, sub),
            tenant_id: self.options.tenant.clone(),
            session_id: draft.session,
            branch_id: draft.branch,
            seq: None,
            parent_event_id: None,
            timestamp,
            actor: draft.actor,
            participant_id: draft.participant,
            payload: draft.payload,
            causality: None,
            extra: draft.extra,
        };
        if let Err(e) = (self.sink)(event) {
            self.sink_error = Some(Error::Sink(e));
        }
    }

    /// Emits an event as the source wrote it (canonical JSONL): its own id.
    pub fn emit_canonical(&mut self, event: Event) {
        if self.sink_error.is_some() {
            return;
        }
        if !self.report.sessions.contains(&event.session_id) {
            self.report.sessions.push(event.session_id.clone());
        }
        *self
            .report
            .events
            .entry(event.event_type().as_str().to_owned())
            .or_default() += 1;
        if let Err(e) = (self.sink)(event) {
            self.sink_error = Some(Error::Sink(e));
        }
    }

    /// Emits the `SessionStarted` of a session: its model (and the window known for it), its
    /// system prompt and tools.
    pub fn session_started(&mut self, anchor: &Anchor, session: &str, start: SessionStart) {
        let model = start.model.clone().unwrap_or_else(|| "unknown".into());
        let window = self
            .options
            .context_window
            .unwrap_or_else(|| models::window_of(&model));
        let mut extra = start.extra;
        if let Some(p) = start.project_id {
            extra.insert("project_id".into(), p.into());
        }
        let payload = Payload::SessionStarted(SessionStarted {
            model: ModelRef {
                provider: start
                    .provider
                    .unwrap_or_else(|| models::provider_of(&model).to_owned()),
                model,
                extra: Map::new(),
            },
            context_window_tokens: window,
            reserved_output_tokens: models::reserved_output(window),
            cwd: start.cwd,
            repo_root: None,
            system_prompt: start.system_prompt.filter(|s| !s.trim().is_empty()),
            tools: (!start.tools.is_empty()).then_some(start.tools),
            extra,
        });
        self.emit(
            anchor,
            Draft::new(session, payload)
                .at(start.timestamp)
                .actor("platform"),
        );
    }

    pub(crate) fn take_sink_error(&mut self) -> Option<Error> {
        self.sink_error.take()
    }

    pub(crate) fn finish(mut self) -> Report {
        self.report.calls_without_result = self.books.values().map(|b| b.open.len() as u64).sum();
        self.report
    }
}

/// What a `SessionStarted` says.
#[derive(Debug, Clone, Default)]
pub struct SessionStart {
    pub timestamp: Option<DateTime<Utc>>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub system_prompt: Option<String>,
    pub tools: Vec<ToolSpec>,
    pub cwd: Option<String>,
    pub project_id: Option<String>,
    pub extra: Map<String, Value>,
}

/// A source's time: an RFC 3339 string, or Unix seconds / milliseconds.
pub fn parse_time(value: Option<&Value>) -> Option<DateTime<Utc>> {
    match value? {
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
        Value::Number(n) => {
            let f = n.as_f64()?;
            let secs = if f > 1e11 { f / 1000.0 } else { f };
            Utc.timestamp_opt(secs.trunc() as i64, (secs.fract() * 1e9) as u32)
                .single()
        }
        _ => None,
    }
}

/// The text of a message's content: a string, or the text of an array of parts (`text`,
/// `input_text`, `output_text`, ...). Parts without text are counted as unmapped by the caller.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Types of the parts of a content array that carry no text (images, files...).
pub fn non_text_parts(content: &Value) -> Vec<String> {
    let Value::Array(parts) = content else {
        return Vec::new();
    };
    parts
        .iter()
        .filter(|p| p.get("text").and_then(Value::as_str).is_none() && !p.is_string())
        .map(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .unwrap_or("untyped")
                .to_owned()
        })
        .collect()
}

/// Tool-call arguments as the canonical event holds them: a JSON object (a string holding JSON
/// is parsed; other text is kept as `{"input": text}`).
pub fn arguments(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ if s.trim().is_empty() => Value::Object(Map::new()),
            _ => serde_json::json!({ "input": s }),
        },
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => serde_json::json!({ "input": other }),
    }
}

/// A `UserPromptSubmitted` payload.
pub fn user_prompt(message_id: impl Into<String>, text: impl Into<String>) -> Payload {
    Payload::UserPromptSubmitted(UserPromptSubmitted {
        message_id: message_id.into(),
        text: text.into(),
        extra: Map::new(),
    })
}

/// A `ModelResponseReceived` payload.
pub fn model_response(
    message_id: impl Into<String>,
    text: impl Into<String>,
    tool_calls: Vec<ToolCall>,
    usage: Option<Usage>,
    extra: Map<String, Value>,
) -> Payload {
    Payload::ModelResponseReceived(ModelResponseReceived {
        message_id: message_id.into(),
        model_run_id: None,
        text: text.into(),
        tool_calls,
        usage,
        extra,
    })
}

/// One tool call of a model response.
pub fn tool_call(id: impl Into<String>, name: impl Into<String>, args: Value) -> ToolCall {
    ToolCall {
        tool_call_id: id.into(),
        name: name.into(),
        args,
        extra: Map::new(),
    }
}

/// A `ToolCallFinished` payload with its output inline.
pub fn tool_result(
    tool_call_id: impl Into<String>,
    output: impl Into<String>,
    is_error: bool,
    extra: Map<String, Value>,
) -> Payload {
    Payload::ToolCallFinished(ToolCallFinished {
        tool_call_id: tool_call_id.into(),
        output: Some(output.into()),
        output_ref: None,
        output_preview: None,
        output_sha256: None,
        output_bytes: None,
        output_tokens: None,
        is_error,
        privacy_class: None,
        freshness_class: None,
        extra,
    })
}

/// Token usage as a source reports it: the Chat Completions names (`prompt_tokens`,
/// `completion_tokens`) or the Responses ones (`input_tokens`, `output_tokens`); the other
/// fields (cached tokens, cost...) are kept in `extra`. `None` when neither count is there.
pub fn usage_of(value: Option<&Value>) -> Option<Usage> {
    let o = value?.as_object()?;
    let count = |names: [&str; 2]| names.iter().find_map(|n| o.get(*n)?.as_u64());
    let input = count(["input_tokens", "prompt_tokens"]);
    let output = count(["output_tokens", "completion_tokens"]);
    if input.is_none() && output.is_none() {
        return None;
    }
    const COUNTS: [&str; 4] = [
        "input_tokens",
        "prompt_tokens",
        "output_tokens",
        "completion_tokens",
    ];
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        extra: o
            .iter()
            .filter(|(k, v)| !COUNTS.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}
