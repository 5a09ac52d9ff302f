//! The canonical event: JSON contract v1.
//!
//! The JSON shape is fixed by the contract, so [`Event`] converts to and from
//! [`serde_json::Value`] by hand instead of deriving: that way every field error can name the
//! field (`payload.tool_call_id`) and unknown fields are kept, at the top level and in payloads.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::payload::*;

/// The branch every session starts on.
pub const MAIN_BRANCH: &str = "main";

/// One fact of an agent's work, as published to the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Idempotency key: publishing the same event twice has one effect.
    pub event_id: String,
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    /// Per-session sequence number (all branches); assigned by ingest when absent.
    pub seq: Option<u64>,
    pub parent_event_id: Option<String>,
    pub timestamp: DateTime<Utc>,
    pub actor: Option<String>,
    /// Defaults to the session's primary agent when absent.
    pub participant_id: Option<String>,
    pub payload: Payload,
    pub causality: Option<Causality>,
    /// Top-level fields this version does not know; kept and re-emitted as they came.
    pub extra: Map<String, Value>,
}

/// Causal links of an event to the message, tool call or artifact it belongs to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Causality {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A problem with one field of one event, as reported to the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `payload.tool_call_id`.
    pub field: String,
    pub message: String,
}

/// Longest field path and message a [`FieldError`] reports: an error names the problem, it does
/// not echo megabytes of the input back.
const FIELD_PATH_MAX_CHARS: usize = 200;
const FIELD_MESSAGE_MAX_CHARS: usize = 500;

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        use crate::projection::truncate_chars;
        Self {
            field: truncate_chars(&field.into(), FIELD_PATH_MAX_CHARS),
            message: truncate_chars(&message.into(), FIELD_MESSAGE_MAX_CHARS),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All field errors found in one event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidEvent(pub Vec<FieldError>);

const ENVELOPE_FIELDS: &[&str] = &[
    "event_id",
    "tenant_id",
    "session_id",
    "branch_id",
    "seq",
    "parent_event_id",
    "timestamp",
    "type",
    "actor",
    "participant_id",
    "payload",
    "causality",
];

/// Longest identifier accepted anywhere in the envelope.
pub const MAX_ID_LEN: usize = 256;

impl Event {
    /// The `type` string of this event.
    pub fn event_type(&self) -> EventType {
        self.payload.event_type()
    }

    /// Parses one event from its JSON form. `default_tenant` fills a missing `tenant_id`
    /// (ingest knows the tenant from the API key); every problem found is reported, not just the
    /// first.
    pub fn from_json(value: Value, default_tenant: Option<&str>) -> Result<Event, InvalidEvent> {
        Self::parse(value, default_tenant, true)
    }

    /// Parses an event read back from storage: as [`Event::from_json`], except that what only
    /// new input must satisfy ([`Payload::check_input`]) is not asked of it, so an event
    /// accepted under an earlier contract is never lost on the way back.
    pub fn from_stored_json(value: Value) -> Result<Event, InvalidEvent> {
        Self::parse(value, None, false)
    }

    fn parse(
        value: Value,
        default_tenant: Option<&str>,
        input: bool,
    ) -> Result<Event, InvalidEvent> {
        let Value::Object(mut obj) = value else {
            return Err(InvalidEvent(vec![FieldError::new(
                "",
                format!("expected a JSON object, found {}", kind_of(&value)),
            )]));
        };
        let mut errors = Vec::new();
        let event_id = take_id(&mut obj, "event_id", true, &mut errors).unwrap_or_default();
        let tenant_id = match take_id(&mut obj, "tenant_id", default_tenant.is_none(), &mut errors)
        {
            Some(t) => {
                if !is_tenant_id(&t) {
                    errors.push(FieldError::new(
                        "tenant_id",
                        "must be 1-64 characters of a-z, A-Z, 0-9, '-' or '_'",
                    ));
                }
                t
            }
            None => default_tenant.unwrap_or_default().to_owned(),
        };
        let session_id = take_id(&mut obj, "session_id", true, &mut errors).unwrap_or_default();
        let branch_id = take_id(&mut obj, "branch_id", false, &mut errors)
            .unwrap_or_else(|| MAIN_BRANCH.to_owned());
        let seq = match obj.shift_remove("seq") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(s) if s >= 1 => Some(s),
                _ => {
                    errors.push(FieldError::new("seq", "must be an integer >= 1"));
                    None
                }
            },
            Some(other) => {
                errors.push(FieldError::new(
                    "seq",
                    format!("expected an integer, found {}", kind_of(&other)),
                ));
                None
            }
        };
        let parent_event_id = take_id(&mut obj, "parent_event_id", false, &mut errors);
        let timestamp = match obj.shift_remove("timestamp") {
            None | Some(Value::Null) => {
                errors.push(FieldError::new("timestamp", "missing field"));
                None
            }
            Some(Value::String(s)) => match DateTime::parse_from_rfc3339(&s) {
                Ok(t) => Some(truncate_to_micros(t.with_timezone(&Utc))),
                Err(e) => {
                    errors.push(FieldError::new(
                        "timestamp",
                        format!("not an RFC 3339 timestamp ({e})"),
                    ));
                    None
                }
            },
            Some(other) => {
                errors.push(FieldError::new(
                    "timestamp",
                    format!("expected an RFC 3339 string, found {}", kind_of(&other)),
                ));
                None
            }
        };
        let actor = take_id(&mut obj, "actor", false, &mut errors);
        let participant_id = take_id(&mut obj, "participant_id", false, &mut errors);
        let causality = match obj.shift_remove("causality") {
            None | Some(Value::Null) => None,
            Some(v) => match parse_at::<Causality>(v, "causality") {
                Ok(c) => Some(c),
                Err(e) => {
                    errors.push(e);
                    None
                }
            },
        };
        let type_name = match obj.shift_remove("type") {
            Some(Value::String(s)) => Some(s),
            None | Some(Value::Null) => {
                errors.push(FieldError::new("type", "missing field"));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    "type",
                    format!("expected a string, found {}", kind_of(&other)),
                ));
                None
            }
        };
        let payload_value = obj
            .shift_remove("payload")
            .unwrap_or_else(|| Value::Object(Map::new()));
        let payload = match type_name {
            None => None,
            Some(name) => match EventType::parse(&name) {
                None => {
                    errors.push(unknown_type(&name));
                    None
                }
                Some(ty) => match Payload::from_json(ty, payload_value.clone()) {
                    Ok(p) => Some(p),
                    Err(first) => {
                        if input {
                            errors.extend(crate::payload::raw_args_problems(ty, &payload_value));
                        }
                        errors.extend(payload_problems(ty, payload_value, first));
                        None
                    }
                },
            },
        };
        if let Some(p) = &payload {
            p.validate(&mut errors);
            if input {
                p.check_input(&mut errors);
            }
        }
        match (errors.is_empty(), timestamp, payload) {
            (true, Some(timestamp), Some(payload)) => Ok(Event {
                event_id,
                tenant_id,
                session_id,
                branch_id,
                seq,
                parent_event_id,
                timestamp,
                actor,
                participant_id,
                payload,
                causality,
                extra: obj,
            }),
            _ => Err(InvalidEvent(errors)),
        }
    }

    /// The canonical JSON form (what export writes and import reads back).
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("event_id".into(), self.event_id.clone().into());
        obj.insert("tenant_id".into(), self.tenant_id.clone().into());
        obj.insert("session_id".into(), self.session_id.clone().into());
        obj.insert("branch_id".into(), self.branch_id.clone().into());
        if let Some(seq) = self.seq {
            obj.insert("seq".into(), seq.into());
        }
        if let Some(p) = &self.parent_event_id {
            obj.insert("parent_event_id".into(), p.clone().into());
        }
        obj.insert("timestamp".into(), format_timestamp(&self.timestamp).into());
        obj.insert("type".into(), self.event_type().as_str().into());
        if let Some(a) = &self.actor {
            obj.insert("actor".into(), a.clone().into());
        }
        if let Some(p) = &self.participant_id {
            obj.insert("participant_id".into(), p.clone().into());
        }
        obj.insert("payload".into(), self.payload.to_json());
        if let Some(c) = &self.causality {
            obj.insert(
                "causality".into(),
                serde_json::to_value(c).expect("causality serializes"),
            );
        }
        for (k, v) in &self.extra {
            if !ENVELOPE_FIELDS.contains(&k.as_str()) {
                obj.insert(k.clone(), v.clone());
            }
        }
        Value::Object(obj)
    }

    /// The canonical JSON text: byte for byte `self.to_json().to_string()`, written without
    /// building the [`Value`] (the projection stores it for every event).
    pub fn to_json_string(&self) -> String {
        crate::json::to_string(&Canonical(self), 256).unwrap_or_else(|| self.to_json().to_string())
    }

    /// Whether a service derived this event from others (memories, compactions, assemblies).
    /// Derived events are not part of the transcript a model would be re-sent.
    pub fn is_derived(&self) -> bool {
        self.event_type().is_derived()
    }
}

/// An event serialized the way [`Event::to_json`] builds it, entry for entry.
struct Canonical<'a>(&'a Event);

impl Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("event_id", &e.event_id)?;
        m.serialize_entry("tenant_id", &e.tenant_id)?;
        m.serialize_entry("session_id", &e.session_id)?;
        m.serialize_entry("branch_id", &e.branch_id)?;
        if let Some(seq) = e.seq {
            m.serialize_entry("seq", &seq)?;
        }
        if let Some(p) = &e.parent_event_id {
            m.serialize_entry("parent_event_id", p)?;
        }
        m.serialize_entry("timestamp", &format_timestamp(&e.timestamp))?;
        m.serialize_entry("type", e.event_type().as_str())?;
        if let Some(a) = &e.actor {
            m.serialize_entry("actor", a)?;
        }
        if let Some(p) = &e.participant_id {
            m.serialize_entry("participant_id", p)?;
        }
        m.serialize_entry("payload", &crate::payload::Fields(&e.payload))?;
        if let Some(c) = &e.causality {
            m.serialize_entry("causality", c)?;
        }
        for (k, v) in &e.extra {
            if !ENVELOPE_FIELDS.contains(&k.as_str()) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Event::from_stored_json(v).map_err(serde::de::Error::custom)
    }
}

/// The error of an unknown `type`, naming the valid ones (never at length: a type name is
/// capped by [`FieldError`]).
fn unknown_type(name: &str) -> FieldError {
    let names = |derived: bool| -> Vec<&str> {
        EventType::ALL
            .iter()
            .filter(|t| t.is_derived() == derived)
            .map(|t| t.as_str())
            .collect()
    };
    FieldError::new(
        "type",
        format!(
            "unknown event type {name:?}; the valid types are {}, and, written by Strata's \
             services only, {}",
            names(false).join(", "),
            names(true).join(", ")
        ),
    )
}

/// Most problems of one payload reported, and most fields stood in for to find them.
const MAX_PAYLOAD_PROBLEMS: usize = 32;
const MAX_STAND_INS: usize = 128;

/// Every problem serde finds in a payload, `first` first, not just the first: the field of each
/// problem is stood in for (removed, or given a value of another JSON type) and the payload
/// parsed again, until it parses or no stand-in gets past the field. Problems inside a stand-in
/// (the fields of a `{}` put for a missing object) are the stand-in's, not the sender's: they
/// are stood in for in turn but not reported.
fn payload_problems(ty: EventType, mut value: Value, first: FieldError) -> Vec<FieldError> {
    let mut problems = Vec::new();
    let mut stood_in: Vec<String> = Vec::new();
    let mut current = first;
    for _ in 0..MAX_STAND_INS {
        if !stood_in.iter().any(|p| is_under(&current.field, p)) {
            problems.push(current.clone());
            if problems.len() == MAX_PAYLOAD_PROBLEMS {
                break;
            }
        }
        // The payload itself is wrong (not an object): nothing lies past it.
        let Some(path) = current.field.strip_prefix("payload.").map(path_segments) else {
            break;
        };
        let Some((repaired, next)) = stand_in(ty, &value, &path, &current.field) else {
            break;
        };
        value = repaired;
        stood_in.push(current.field.clone());
        match next {
            Some(e) => current = e,
            None => break,
        }
    }
    problems
}

/// `value` with the field at `path` removed or replaced so that serde gets past `field`, and
/// the next problem serde finds then (`None`: it parses).
fn stand_in(
    ty: EventType,
    value: &Value,
    path: &[Segment],
    field: &str,
) -> Option<(Value, Option<FieldError>)> {
    let stand_ins = [
        None,
        Some(Value::String(String::new())),
        Some(Value::from(0)),
        Some(Value::Bool(false)),
        Some(Value::Object(Map::new())),
        Some(Value::Array(Vec::new())),
    ];
    stand_ins.into_iter().find_map(|s| {
        let mut v = value.clone();
        set_at(&mut v, path, s)?;
        match Payload::from_json(ty, v.clone()) {
            Ok(_) => Some((v, None)),
            Err(e) if e.field != field => Some((v, Some(e))),
            Err(_) => None,
        }
    })
}

/// Whether `field` is `parent` or lies inside it.
fn is_under(field: &str, parent: &str) -> bool {
    field
        .strip_prefix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// One step of a field path as [`parse_at`] names it: `tool_calls[1].args`.
#[derive(Debug, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

fn path_segments(path: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Segment::Key(key.to_owned()));
        }
        while let Some((index, after)) = rest.split_once(']') {
            match index.parse() {
                Ok(i) => out.push(Segment::Index(i)),
                Err(_) => out.push(Segment::Key(index.to_owned())),
            }
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    out
}

/// Sets (or, with `None`, removes) the field at `path`; `None` when the path does not lead
/// through objects and arrays of `value`.
fn set_at(value: &mut Value, path: &[Segment], new: Option<Value>) -> Option<()> {
    let (last, parents) = path.split_last()?;
    let mut at = value;
    for segment in parents {
        at = match segment {
            Segment::Key(k) => at.as_object_mut()?.get_mut(k)?,
            Segment::Index(i) => at.as_array_mut()?.get_mut(*i)?,
        };
    }
    match (last, new) {
        (Segment::Key(k), Some(v)) => {
            at.as_object_mut()?.insert(k.clone(), v);
        }
        (Segment::Key(k), None) => {
            at.as_object_mut()?.shift_remove(k)?;
        }
        (Segment::Index(i), Some(v)) => *at.as_array_mut()?.get_mut(*i)? = v,
        // An array item cannot be left out without moving the ones after it.
        (Segment::Index(_), None) => return None,
    }
    Some(())
}

/// Formats a timestamp the way the contract writes it: RFC 3339, UTC, `Z`, only as many
/// fractional digits as needed.
pub fn format_timestamp(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The log's binary form keeps microseconds; normalising at the edge keeps JSON and Avro equal.
pub fn truncate_to_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// Whether `s` is an acceptable tenant id (it is used in storage keys).
pub fn is_tenant_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// How a JSON value is named in an error message (`a string`, `an object`...).
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Unicode format characters (category Cf) that render as nothing or reorder text: soft hyphen,
/// Arabic and Syriac marks, zero-width spaces and joiners, bidi embeddings, overrides and
/// isolates, word joiner and invisible operators, the BOM, interlinear annotation marks, and the
/// tag characters.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}'
        | '\u{0600}'..='\u{0605}'
        | '\u{061C}'
        | '\u{06DD}'
        | '\u{070F}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0001}'
        | '\u{E0020}'..='\u{E007F}')
}

/// Checks an id (`event_id`, `session_id`, `branch_id`, `participant_id`, …) as every event's
/// are checked: not empty, at most [`MAX_ID_LEN`] bytes, no control characters, no invisible
/// format characters (bidi overrides, zero-width characters and BOMs make two ids that print
/// alike differ, or one print as another). Whatever names an id on the log passes this first,
/// so that every event written reads back.
pub fn check_id(field: &str, s: &str) -> Result<(), FieldError> {
    if s.is_empty() {
        Err(FieldError::new(field, "must not be empty"))
    } else if s.len() > MAX_ID_LEN {
        Err(FieldError::new(
            field,
            format!("longer than {MAX_ID_LEN} bytes"),
        ))
    } else if s.chars().any(char::is_control) {
        Err(FieldError::new(field, "contains control characters"))
    } else if let Some(c) = s.chars().find(|c| is_invisible_format(*c)) {
        Err(FieldError::new(
            field,
            format!("contains the invisible format character U+{:04X}", c as u32),
        ))
    } else {
        Ok(())
    }
}

/// The ids of an event built in code (not parsed), checked as [`Event::from_json`] checks them.
pub fn check_ids(event: &Event) -> Vec<FieldError> {
    let required = [
        ("event_id", Some(&event.event_id)),
        ("tenant_id", Some(&event.tenant_id)),
        ("session_id", Some(&event.session_id)),
        ("branch_id", Some(&event.branch_id)),
        ("parent_event_id", event.parent_event_id.as_ref()),
        ("actor", event.actor.as_ref()),
        ("participant_id", event.participant_id.as_ref()),
    ];
    required
        .into_iter()
        .filter_map(|(field, value)| check_id(field, value?).err())
        .collect()
}

fn take_id(
    obj: &mut Map<String, Value>,
    field: &str,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    match obj.shift_remove(field) {
        None | Some(Value::Null) => {
            if required {
                errors.push(FieldError::new(field, "missing field"));
            }
            None
        }
        Some(Value::String(s)) => match check_id(field, &s) {
            Ok(()) => Some(s),
            Err(e) => {
                errors.push(e);
                None
            }
        },
        Some(other) => {
            errors.push(FieldError::new(
                field,
                format!("expected a string, found {}", kind_of(&other)),
            ));
            None
        }
    }
}

/// Deserializes `value` and reports the failing field with its full path under `prefix`.
pub(crate) fn parse_at<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}.{path}")
        };
        let message = e.into_inner().to_string();
        // serde reports a missing field at the parent's path; name the field itself.
        match message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            Some(missing) => FieldError::new(format!("{field}.{missing}"), "missing field"),
            None => FieldError::new(field, strip_position(&message)),
        }
    })
}

fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}
