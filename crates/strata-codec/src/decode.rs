//! Avro value (as written by any known schema version) → `Event`.
//!
//! Fields are looked up by name and union branches by record name, so this is Avro schema
//! resolution to the current schema: a field the writer schema lacks takes the reader's default
//! (null, false, empty), a field the reader does not know is ignored.

use apache_avro::types::Value as Avro;
use chrono::DateTime;
use serde_json::{Map, Value as Json};
use strata_core::payload::*;
use strata_core::{Causality, Event, EventType, Payload};

use crate::error::{Error, Result};
use crate::schema::Version;
use crate::seal::{Envelope, Record, SealedEvent, NONCE_LEN, TAG_LEN};

/// Strips the union wrapper(s) of a value.
fn plain(v: Avro) -> Avro {
    match v {
        Avro::Union(_, inner) => plain(*inner),
        v => v,
    }
}

fn kind(v: &Avro) -> &'static str {
    match v {
        Avro::Null => "null",
        Avro::Boolean(_) => "boolean",
        Avro::Int(_) | Avro::Long(_) => "integer",
        Avro::Float(_) | Avro::Double(_) => "floating point",
        Avro::String(_) => "string",
        Avro::Array(_) => "array",
        Avro::Record(_) => "record",
        Avro::Enum(..) => "enum",
        Avro::Map(_) => "map",
        _ => "other value",
    }
}

/// A decoded record whose fields are taken out one by one, by name.
struct Rec<'p> {
    fields: Vec<(String, Avro)>,
    /// Dotted path of the record, for error messages (`payload`, `payload.usage`).
    path: &'p str,
}

impl<'p> Rec<'p> {
    fn new(v: Avro, path: &'p str) -> Result<Self> {
        match plain(v) {
            Avro::Record(fields) => Ok(Rec { fields, path }),
            other => Err(Error::invalid(
                path,
                format!("expected a record, found {}", kind(&other)),
            )),
        }
    }

    fn field_path(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    fn err(&self, name: &str, message: impl Into<String>) -> Error {
        Error::invalid(self.field_path(name), message)
    }

    /// The field's value without union wrapper; `None` when the writer schema has no such field
    /// or its value is null.
    fn take(&mut self, name: &str) -> Option<Avro> {
        let i = self.fields.iter().position(|(n, _)| n == name)?;
        match plain(std::mem::replace(&mut self.fields[i].1, Avro::Null)) {
            Avro::Null => None,
            v => Some(v),
        }
    }

    fn required(&mut self, name: &str) -> Result<Avro> {
        self.take(name)
            .ok_or_else(|| self.err(name, "missing field"))
    }

    fn string(&mut self, name: &str) -> Result<String> {
        let v = self.required(name)?;
        self.as_string(name, v)
    }

    fn string_or_empty(&mut self, name: &str) -> Result<String> {
        match self.take(name) {
            None => Ok(String::new()),
            Some(v) => self.as_string(name, v),
        }
    }

    fn opt_string(&mut self, name: &str) -> Result<Option<String>> {
        self.take(name).map(|v| self.as_string(name, v)).transpose()
    }

    fn as_string(&self, name: &str, v: Avro) -> Result<String> {
        match v {
            Avro::String(s) => Ok(s),
            other => Err(self.err(name, format!("expected a string, found {}", kind(&other)))),
        }
    }

    fn u64(&mut self, name: &str) -> Result<u64> {
        let v = self.required(name)?;
        self.as_u64(name, v)
    }

    fn u32(&mut self, name: &str) -> Result<u32> {
        let n = self.u64(name)?;
        u32::try_from(n).map_err(|_| self.err(name, format!("{n} does not fit in 32 bits")))
    }

    fn opt_u64(&mut self, name: &str) -> Result<Option<u64>> {
        self.take(name).map(|v| self.as_u64(name, v)).transpose()
    }

    fn as_u64(&self, name: &str, v: Avro) -> Result<u64> {
        match v {
            Avro::Long(n) => {
                u64::try_from(n).map_err(|_| self.err(name, format!("{n} is negative")))
            }
            Avro::Int(n) => {
                u64::try_from(n).map_err(|_| self.err(name, format!("{n} is negative")))
            }
            other => Err(self.err(name, format!("expected an integer, found {}", kind(&other)))),
        }
    }

    fn bool_or_false(&mut self, name: &str) -> Result<bool> {
        match self.take(name) {
            None => Ok(false),
            Some(Avro::Boolean(b)) => Ok(b),
            Some(other) => {
                Err(self.err(name, format!("expected a boolean, found {}", kind(&other))))
            }
        }
    }

    fn opt_f64(&mut self, name: &str) -> Result<Option<f64>> {
        match self.take(name) {
            None => Ok(None),
            Some(Avro::Double(d)) => Ok(Some(d)),
            Some(Avro::Float(f)) => Ok(Some(f.into())),
            Some(other) => {
                Err(self.err(name, format!("expected a double, found {}", kind(&other))))
            }
        }
    }

    fn array(&mut self, name: &str) -> Result<Vec<Avro>> {
        match self.take(name) {
            None => Ok(Vec::new()),
            Some(v) => self.as_array(name, v),
        }
    }

    fn as_array(&self, name: &str, v: Avro) -> Result<Vec<Avro>> {
        match v {
            Avro::Array(items) => Ok(items),
            other => Err(self.err(name, format!("expected an array, found {}", kind(&other)))),
        }
    }

    fn as_strings(&self, name: &str, v: Avro) -> Result<Vec<String>> {
        self.as_array(name, v)?
            .into_iter()
            .map(|item| self.as_string(name, plain(item)))
            .collect()
    }

    fn strings(&mut self, name: &str) -> Result<Vec<String>> {
        match self.take(name) {
            None => Ok(Vec::new()),
            Some(v) => self.as_strings(name, v),
        }
    }

    fn opt_strings(&mut self, name: &str) -> Result<Option<Vec<String>>> {
        self.take(name)
            .map(|v| self.as_strings(name, v))
            .transpose()
    }

    /// A free-form JSON value stored as JSON text; absent means JSON null.
    fn json(&mut self, name: &str) -> Result<Json> {
        match self.take(name) {
            None => Ok(Json::Null),
            Some(v) => {
                let text = self.as_string(name, v)?;
                serde_json::from_str(&text)
                    .map_err(|e| self.err(name, format!("not valid JSON text ({e})")))
            }
        }
    }

    /// Unknown fields stored as JSON object text; absent or null means none.
    fn extra(&mut self) -> Result<Map<String, Json>> {
        match self.take("extra") {
            None => Ok(Map::new()),
            Some(v) => {
                let text = self.as_string("extra", v)?;
                serde_json::from_str(&text)
                    .map_err(|e| self.err("extra", format!("not a JSON object text ({e})")))
            }
        }
    }

    fn privacy(&mut self, name: &str) -> Result<Option<PrivacyClass>> {
        let Some(symbol) = self.symbol(name)? else {
            return Ok(None);
        };
        Ok(Some(match symbol.as_str() {
            "public" => PrivacyClass::Public,
            "internal" => PrivacyClass::Internal,
            "confidential" => PrivacyClass::Confidential,
            "restricted" => PrivacyClass::Restricted,
            other => return Err(self.err(name, format!("unknown privacy class {other:?}"))),
        }))
    }

    fn freshness(&mut self, name: &str) -> Result<Option<FreshnessClass>> {
        let Some(symbol) = self.symbol(name)? else {
            return Ok(None);
        };
        Ok(Some(match symbol.as_str() {
            "volatile" => FreshnessClass::Volatile,
            "session" => FreshnessClass::Session,
            "time_bounded" => FreshnessClass::TimeBounded,
            "durable" => FreshnessClass::Durable,
            "permanent" => FreshnessClass::Permanent,
            other => return Err(self.err(name, format!("unknown freshness class {other:?}"))),
        }))
    }

    fn symbol(&mut self, name: &str) -> Result<Option<String>> {
        match self.take(name) {
            None => Ok(None),
            Some(Avro::Enum(_, symbol)) | Some(Avro::String(symbol)) => Ok(Some(symbol)),
            Some(other) => Err(self.err(
                name,
                format!("expected an enum symbol, found {}", kind(&other)),
            )),
        }
    }
}

/// Builds the event from a datum written with `version`.
pub(crate) fn record_from_avro(value: Avro, version: &Version) -> Result<Record> {
    let mut r = Rec::new(value, "")?;
    let event_id = r.string("event_id")?;
    let tenant_id = r.string("tenant_id")?;
    let session_id = r.string("session_id")?;
    let branch_id = r.string("branch_id")?;
    let seq = r.opt_u64("seq")?;
    let parent_event_id = r.opt_string("parent_event_id")?;
    let timestamp = match r.required("timestamp")? {
        Avro::TimestampMicros(us) | Avro::Long(us) => DateTime::from_timestamp_micros(us)
            .ok_or_else(|| r.err("timestamp", format!("{us} µs is out of range")))?,
        other => {
            return Err(r.err(
                "timestamp",
                format!("expected timestamp-micros, found {}", kind(&other)),
            ))
        }
    };
    let type_name = r.string("type")?;
    let actor = r.opt_string("actor")?;
    let participant_id = r.opt_string("participant_id")?;
    let causality = r.take("causality").map(causality).transpose()?;
    let payload = match r.fields.iter().position(|(n, _)| n == "payload") {
        Some(i) => std::mem::replace(&mut r.fields[i].1, Avro::Null),
        None => return Err(r.err("payload", "missing field")),
    };
    let Avro::Union(branch, payload) = payload else {
        return Err(r.err("payload", "expected a union of payload records"));
    };
    if version.sealed_index == Some(branch) {
        let event_type = EventType::parse(&type_name).ok_or_else(|| {
            r.err(
                "type",
                format!("{type_name:?} of a sealed event is no known event type"),
            )
        })?;
        let envelope = Envelope {
            event_id,
            tenant_id,
            session_id,
            branch_id,
            seq,
            parent_event_id,
            timestamp,
            event_type,
            actor,
            participant_id,
        };
        if causality.is_some() || !r.extra()?.is_empty() {
            return Err(r.err(
                "payload",
                "a sealed event carries its causality and unknown fields inside the seal",
            ));
        }
        return sealed_from_avro(envelope, *payload).map(Record::Sealed);
    }
    let ty = version
        .payload_types
        .get(branch as usize)
        .copied()
        .flatten()
        .ok_or_else(|| {
            r.err(
                "payload",
                format!(
                    "union branch {branch} of schema version {} is no known event type",
                    version.version
                ),
            )
        })?;
    if ty.as_str() != type_name {
        return Err(r.err(
            "type",
            format!(
                "{type_name:?} does not match the payload record {}",
                ty.as_str()
            ),
        ));
    }
    let payload = payload_from_avro(ty, *payload)?;
    let extra = r.extra()?;
    Ok(Record::Plain(Event {
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
        extra,
    }))
}

fn sealed_from_avro(envelope: Envelope, v: Avro) -> Result<SealedEvent> {
    let mut r = Rec::new(v, "payload")?;
    let key_id = r.string("key_id")?;
    let nonce = match r.required("nonce")? {
        Avro::Bytes(b) => <[u8; NONCE_LEN]>::try_from(b.as_slice()).map_err(|_| {
            r.err(
                "nonce",
                format!("is {} bytes, expected {NONCE_LEN}", b.len()),
            )
        })?,
        other => return Err(r.err("nonce", format!("expected bytes, found {}", kind(&other)))),
    };
    let ciphertext = match r.required("ciphertext")? {
        Avro::Bytes(b) if b.len() >= TAG_LEN => b,
        Avro::Bytes(b) => {
            return Err(r.err(
                "ciphertext",
                format!("is {} bytes, shorter than its {TAG_LEN}-byte tag", b.len()),
            ))
        }
        other => {
            return Err(r.err(
                "ciphertext",
                format!("expected bytes, found {}", kind(&other)),
            ))
        }
    };
    Ok(SealedEvent {
        envelope,
        key_id,
        nonce,
        ciphertext,
    })
}

fn causality(v: Avro) -> Result<Causality> {
    let mut r = Rec::new(v, "causality")?;
    Ok(Causality {
        message_id: r.opt_string("message_id")?,
        tool_call_id: r.opt_string("tool_call_id")?,
        artifact_id: r.opt_string("artifact_id")?,
        extra: r.extra()?,
    })
}

fn payload_from_avro(ty: EventType, v: Avro) -> Result<Payload> {
    let mut r = Rec::new(v, "payload")?;
    let r = &mut r;
    Ok(match ty {
        EventType::SessionStarted => {
            let mut m = Rec::new(r.required("model")?, "payload.model")?;
            let model = ModelRef {
                provider: m.string("provider")?,
                model: m.string("model")?,
                extra: m.extra()?,
            };
            let tools = match r.take("tools") {
                None => None,
                Some(v) => Some(
                    r.as_array("tools", v)?
                        .into_iter()
                        .map(|item| {
                            let mut t = Rec::new(item, "payload.tools")?;
                            Ok(ToolSpec {
                                name: t.string("name")?,
                                description: t.string_or_empty("description")?,
                                schema: t.json("schema")?,
                                extra: t.extra()?,
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                ),
            };
            Payload::SessionStarted(SessionStarted {
                model,
                context_window_tokens: r.u32("context_window_tokens")?,
                reserved_output_tokens: r.u32("reserved_output_tokens")?,
                cwd: r.opt_string("cwd")?,
                repo_root: r.opt_string("repo_root")?,
                system_prompt: r.opt_string("system_prompt")?,
                tools,
                extra: r.extra()?,
            })
        }
        EventType::UserPromptSubmitted => Payload::UserPromptSubmitted(UserPromptSubmitted {
            message_id: r.string("message_id")?,
            text: r.string("text")?,
            extra: r.extra()?,
        }),
        EventType::ModelResponseReceived => {
            let tool_calls = r
                .array("tool_calls")?
                .into_iter()
                .map(|item| {
                    let mut c = Rec::new(item, "payload.tool_calls")?;
                    Ok(ToolCall {
                        tool_call_id: c.string("tool_call_id")?,
                        name: c.string("name")?,
                        args: c.json("args")?,
                        extra: c.extra()?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let usage = match r.take("usage") {
                None => None,
                Some(v) => {
                    let mut u = Rec::new(v, "payload.usage")?;
                    Some(Usage {
                        input_tokens: u.u64("input_tokens")?,
                        output_tokens: u.u64("output_tokens")?,
                        extra: u.extra()?,
                    })
                }
            };
            Payload::ModelResponseReceived(ModelResponseReceived {
                message_id: r.string("message_id")?,
                model_run_id: r.opt_string("model_run_id")?,
                text: r.string_or_empty("text")?,
                tool_calls,
                usage,
                extra: r.extra()?,
            })
        }
        EventType::ToolCallRequested => Payload::ToolCallRequested(ToolCallRequested {
            tool_call_id: r.string("tool_call_id")?,
            name: r.string("name")?,
            args: r.json("args")?,
            extra: r.extra()?,
        }),
        EventType::ToolCallFinished => Payload::ToolCallFinished(ToolCallFinished {
            tool_call_id: r.string("tool_call_id")?,
            output: r.opt_string("output")?,
            output_ref: r.opt_string("output_ref")?,
            output_preview: r.opt_string("output_preview")?,
            output_sha256: r.opt_string("output_sha256")?,
            output_bytes: r.opt_u64("output_bytes")?,
            output_tokens: r.opt_u64("output_tokens")?,
            is_error: r.bool_or_false("is_error")?,
            privacy_class: r.privacy("privacy_class")?,
            freshness_class: r.freshness("freshness_class")?,
            extra: r.extra()?,
        }),
        EventType::ToolCallFailed => Payload::ToolCallFailed(ToolCallFailed {
            tool_call_id: r.string("tool_call_id")?,
            error: r.string("error")?,
            retryable: r.bool_or_false("retryable")?,
            extra: r.extra()?,
        }),
        EventType::FileRead => Payload::FileRead(FileRead {
            path: r.string("path")?,
            bytes: r.opt_u64("bytes")?,
            extra: r.extra()?,
        }),
        EventType::FileWritten => Payload::FileWritten(FileWritten {
            path: r.string("path")?,
            bytes: r.opt_u64("bytes")?,
            summary: r.opt_string("summary")?,
            extra: r.extra()?,
        }),
        EventType::DiffApplied => Payload::DiffApplied(DiffApplied {
            path: r.string("path")?,
            diff: r.string("diff")?,
            extra: r.extra()?,
        }),
        EventType::StateUpdated => Payload::StateUpdated(StateUpdated {
            goal: r.opt_string("goal")?,
            current_task: r.opt_string("current_task")?,
            acceptance_criteria: r.opt_strings("acceptance_criteria")?,
            plan: r.opt_strings("plan")?,
            constraints: r.opt_strings("constraints")?,
            facts: r.opt_strings("facts")?,
            decisions: r.opt_strings("decisions")?,
            open_questions: r.opt_strings("open_questions")?,
            extra: r.extra()?,
        }),
        EventType::BranchForked => Payload::BranchForked(BranchForked {
            new_branch_id: r.string("new_branch_id")?,
            from_event_id: r.string("from_event_id")?,
            kind: r.opt_string("kind")?,
            extra: r.extra()?,
        }),
        EventType::SubagentStarted => Payload::SubagentStarted(SubagentStarted {
            child_session_id: r.string("child_session_id")?,
            task: r.opt_string("task")?,
            extra: r.extra()?,
        }),
        EventType::SubagentFinished => Payload::SubagentFinished(SubagentFinished {
            child_session_id: r.string("child_session_id")?,
            report: r.string("report")?,
            artifacts: r.strings("artifacts")?,
            status: r.string("status")?,
            extra: r.extra()?,
        }),
        EventType::SubagentPromoted => Payload::SubagentPromoted(SubagentPromoted {
            child_session_id: r.string("child_session_id")?,
            extra: r.extra()?,
        }),
        EventType::ApprovalRequested => Payload::ApprovalRequested(ApprovalRequested {
            approval_id: r.string("approval_id")?,
            tool_call_id: r.opt_string("tool_call_id")?,
            reason: r.opt_string("reason")?,
            extra: r.extra()?,
        }),
        EventType::ApprovalGranted => Payload::ApprovalGranted(approval_decision(r)?),
        EventType::ApprovalDenied => Payload::ApprovalDenied(approval_decision(r)?),
        EventType::VerifierFinished => Payload::VerifierFinished(VerifierFinished {
            check: r.string("check")?,
            result: r.string("result")?,
            evidence_refs: r.strings("evidence_refs")?,
            extra: r.extra()?,
        }),
        EventType::ProviderItemRecorded => Payload::ProviderItemRecorded(ProviderItemRecorded {
            format: r.string("format")?,
            item: r.json("item")?,
            extra: r.extra()?,
        }),
        EventType::MemoryRecorded => Payload::MemoryRecorded(MemoryRecorded {
            memory_id: r.string("memory_id")?,
            scope: r.string("scope")?,
            kind: r.string("kind")?,
            text: r.string("text")?,
            source_refs: r.strings("source_refs")?,
            confidence: r.opt_f64("confidence")?,
            privacy_class: r.privacy("privacy_class")?,
            freshness_class: r.freshness("freshness_class")?,
            extra: r.extra()?,
        }),
        EventType::MemorySuperseded => Payload::MemorySuperseded(MemorySuperseded {
            memory_id: r.string("memory_id")?,
            superseded_by: r.string("superseded_by")?,
            reason: r.opt_string("reason")?,
            extra: r.extra()?,
        }),
        EventType::CompactionCompleted => Payload::CompactionCompleted(CompactionCompleted {
            compaction_id: r.string("compaction_id")?,
            first_event_id: r.string("first_event_id")?,
            last_event_id: r.string("last_event_id")?,
            first_kept_event_id: r.string("first_kept_event_id")?,
            tokens_before: r.u64("tokens_before")?,
            tokens_after: r.u64("tokens_after")?,
            summary: r.json("summary")?,
            extra: r.extra()?,
        }),
        EventType::ContextBuilt => Payload::ContextBuilt(ContextBuilt {
            assembly_id: r.string("assembly_id")?,
            context_tokens: r.u64("context_tokens")?,
            transcript_tokens: r.u64("transcript_tokens")?,
            assembly: r.json("assembly")?,
            extra: r.extra()?,
        }),
        // `EventType` is non-exhaustive: a type added to the core needs a record here and in
        // the schema (the round-trip test over `EventType::ALL` fails until it has one).
        other => {
            return Err(Error::invalid(
                "type",
                format!(
                    "event type {} has no avro mapping in this codec",
                    other.as_str()
                ),
            ))
        }
    })
}

fn approval_decision(r: &mut Rec<'_>) -> Result<ApprovalDecision> {
    Ok(ApprovalDecision {
        approval_id: r.string("approval_id")?,
        tool_call_id: r.opt_string("tool_call_id")?,
        reason: r.opt_string("reason")?,
        extra: r.extra()?,
    })
}
