//! `Event` → Avro value, built by hand field by field so the datum mirrors the schema exactly.

use apache_avro::types::Value as Avro;
use serde_json::{Map, Value as Json};
use strata_core::payload::*;
use strata_core::{Causality, Event, Payload};

use crate::error::{Error, Result};
use crate::schema::Version;
#[cfg(test)]
use crate::seal::SealedEvent;

/// A record under construction: fields in schema order.
struct Rec(Vec<(String, Avro)>);

impl Rec {
    fn with_capacity(n: usize) -> Self {
        Rec(Vec::with_capacity(n))
    }

    fn put(&mut self, name: &str, value: Avro) -> &mut Self {
        self.0.push((name.to_owned(), value));
        self
    }

    fn done(self) -> Avro {
        Avro::Record(self.0)
    }
}

fn string(s: &str) -> Avro {
    Avro::String(s.to_owned())
}

/// `["null", T]`: branch 0 is null, branch 1 the value.
fn nullable(v: Option<Avro>) -> Avro {
    match v {
        None => Avro::Union(0, Box::new(Avro::Null)),
        Some(v) => Avro::Union(1, Box::new(v)),
    }
}

fn opt_string(s: &Option<String>) -> Avro {
    nullable(s.as_deref().map(string))
}

fn long(field: &str, n: u64) -> Result<Avro> {
    i64::try_from(n)
        .map(Avro::Long)
        .map_err(|_| Error::invalid(field, format!("{n} does not fit an avro long")))
}

fn opt_long(field: &str, n: Option<u64>) -> Result<Avro> {
    n.map(|n| long(field, n)).transpose().map(nullable)
}

fn strings(v: &[String]) -> Avro {
    Avro::Array(v.iter().map(|s| string(s)).collect())
}

fn opt_strings(v: &Option<Vec<String>>) -> Avro {
    nullable(v.as_deref().map(strings))
}

/// A free-form JSON value, as JSON text.
fn json(v: &Json) -> Avro {
    Avro::String(v.to_string())
}

/// Unknown fields, as JSON object text; null when there are none.
fn extra(m: &Map<String, Json>) -> Avro {
    if m.is_empty() {
        nullable(None)
    } else {
        // A map of JSON values always serializes.
        nullable(Some(Avro::String(Json::Object(m.clone()).to_string())))
    }
}

fn privacy(p: Option<PrivacyClass>) -> Avro {
    nullable(p.map(|p| {
        let (i, s) = match p {
            PrivacyClass::Public => (0, "public"),
            PrivacyClass::Internal => (1, "internal"),
            PrivacyClass::Confidential => (2, "confidential"),
            PrivacyClass::Restricted => (3, "restricted"),
        };
        Avro::Enum(i, s.to_owned())
    }))
}

fn freshness(f: Option<FreshnessClass>) -> Avro {
    nullable(f.map(|f| {
        let (i, s) = match f {
            FreshnessClass::Volatile => (0, "volatile"),
            FreshnessClass::Session => (1, "session"),
            FreshnessClass::TimeBounded => (2, "time_bounded"),
            FreshnessClass::Durable => (3, "durable"),
            FreshnessClass::Permanent => (4, "permanent"),
        };
        Avro::Enum(i, s.to_owned())
    }))
}

/// Builds the Avro value of `event` for the schema `version`.
pub(crate) fn event_to_avro(event: &Event, version: &Version) -> Result<Avro> {
    let ty = event.event_type();
    let branch = *version.payload_index.get(&ty).ok_or_else(|| {
        Error::invalid(
            "type",
            format!(
                "event type {} has no record in schema version {}",
                ty.as_str(),
                version.version
            ),
        )
    })?;
    let payload = payload_to_avro(&event.payload, version.version)?;
    let micros = event.timestamp.timestamp_micros();
    let mut r = Rec::with_capacity(13);
    r.put("event_id", string(&event.event_id))
        .put("tenant_id", string(&event.tenant_id))
        .put("session_id", string(&event.session_id))
        .put("branch_id", string(&event.branch_id))
        .put("seq", opt_long("seq", event.seq)?)
        .put("parent_event_id", opt_string(&event.parent_event_id))
        .put("timestamp", Avro::TimestampMicros(micros))
        .put("type", string(ty.as_str()))
        .put("actor", opt_string(&event.actor))
        .put("participant_id", opt_string(&event.participant_id))
        .put(
            "causality",
            nullable(event.causality.as_ref().map(causality)),
        )
        .put("payload", Avro::Union(branch, Box::new(payload)))
        .put("extra", extra(&event.extra));
    Ok(r.done())
}

/// Builds the Avro value of a sealed event for the schema `version` (4 or later): the envelope,
/// null causality and extra, the `Sealed` payload. The codec writes these bytes directly
/// ([`crate::sealed_record`]); this is what they are checked against.
#[cfg(test)]
pub(crate) fn sealed_to_avro(sealed: &SealedEvent, version: &Version) -> Result<Avro> {
    let branch = crate::sealed_record::sealed_branch(version)?;
    let e = &sealed.envelope;
    let mut payload = Rec::with_capacity(3);
    payload
        .put("key_id", string(&sealed.key_id))
        .put("nonce", Avro::Bytes(sealed.nonce.to_vec()))
        .put("ciphertext", Avro::Bytes(sealed.ciphertext.clone()));
    let mut r = Rec::with_capacity(13);
    r.put("event_id", string(&e.event_id))
        .put("tenant_id", string(&e.tenant_id))
        .put("session_id", string(&e.session_id))
        .put("branch_id", string(&e.branch_id))
        .put("seq", opt_long("seq", e.seq)?)
        .put("parent_event_id", opt_string(&e.parent_event_id))
        .put(
            "timestamp",
            Avro::TimestampMicros(e.timestamp.timestamp_micros()),
        )
        .put("type", string(e.event_type.as_str()))
        .put("actor", opt_string(&e.actor))
        .put("participant_id", opt_string(&e.participant_id))
        .put("causality", nullable(None))
        .put("payload", Avro::Union(branch, Box::new(payload.done())))
        .put("extra", nullable(None));
    Ok(r.done())
}

fn causality(c: &Causality) -> Avro {
    let mut r = Rec::with_capacity(4);
    r.put("message_id", opt_string(&c.message_id))
        .put("tool_call_id", opt_string(&c.tool_call_id))
        .put("artifact_id", opt_string(&c.artifact_id))
        .put("extra", extra(&c.extra));
    r.done()
}

/// A field that only exists from schema version 2 on: refuse to drop a value silently.
fn since_v2(schema_version: u32, field: &str, present: bool) -> Result<bool> {
    match (schema_version >= 2, present) {
        (true, _) => Ok(true),
        (false, false) => Ok(false),
        (false, true) => Err(Error::invalid(
            field,
            format!("has a value but schema version {schema_version} has no such field"),
        )),
    }
}

fn payload_to_avro(payload: &Payload, schema_version: u32) -> Result<Avro> {
    let value = match payload {
        Payload::SessionStarted(p) => {
            let mut model = Rec::with_capacity(3);
            model
                .put("provider", string(&p.model.provider))
                .put("model", string(&p.model.model))
                .put("extra", extra(&p.model.extra));
            let tools = p.tools.as_ref().map(|tools| {
                Avro::Array(
                    tools
                        .iter()
                        .map(|t| {
                            let mut r = Rec::with_capacity(4);
                            r.put("name", string(&t.name))
                                .put("description", string(&t.description))
                                .put("schema", json(&t.schema))
                                .put("extra", extra(&t.extra));
                            r.done()
                        })
                        .collect(),
                )
            });
            let mut r = Rec::with_capacity(8);
            r.put("model", model.done())
                .put(
                    "context_window_tokens",
                    Avro::Long(p.context_window_tokens.into()),
                )
                .put(
                    "reserved_output_tokens",
                    Avro::Long(p.reserved_output_tokens.into()),
                )
                .put("cwd", opt_string(&p.cwd))
                .put("repo_root", opt_string(&p.repo_root))
                .put("system_prompt", opt_string(&p.system_prompt))
                .put("tools", nullable(tools))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::UserPromptSubmitted(p) => {
            let mut r = Rec::with_capacity(3);
            r.put("message_id", string(&p.message_id))
                .put("text", string(&p.text))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ModelResponseReceived(p) => {
            let tool_calls = p
                .tool_calls
                .iter()
                .map(|c| {
                    let mut r = Rec::with_capacity(4);
                    r.put("tool_call_id", string(&c.tool_call_id))
                        .put("name", string(&c.name))
                        .put("args", json(&c.args))
                        .put("extra", extra(&c.extra));
                    r.done()
                })
                .collect();
            let usage = match &p.usage {
                None => None,
                Some(u) => {
                    let mut r = Rec::with_capacity(3);
                    r.put(
                        "input_tokens",
                        long("payload.usage.input_tokens", u.input_tokens)?,
                    )
                    .put(
                        "output_tokens",
                        long("payload.usage.output_tokens", u.output_tokens)?,
                    )
                    .put("extra", extra(&u.extra));
                    Some(r.done())
                }
            };
            let mut r = Rec::with_capacity(6);
            r.put("message_id", string(&p.message_id))
                .put("model_run_id", opt_string(&p.model_run_id))
                .put("text", string(&p.text))
                .put("tool_calls", Avro::Array(tool_calls))
                .put("usage", nullable(usage))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ToolCallRequested(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("tool_call_id", string(&p.tool_call_id))
                .put("name", string(&p.name))
                .put("args", json(&p.args))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ToolCallFinished(p) => {
            let mut r = Rec::with_capacity(11);
            r.put("tool_call_id", string(&p.tool_call_id))
                .put("output", opt_string(&p.output))
                .put("output_ref", opt_string(&p.output_ref))
                .put("output_preview", opt_string(&p.output_preview))
                .put("output_sha256", opt_string(&p.output_sha256))
                .put(
                    "output_bytes",
                    opt_long("payload.output_bytes", p.output_bytes)?,
                );
            if since_v2(
                schema_version,
                "payload.output_tokens",
                p.output_tokens.is_some(),
            )? {
                r.put(
                    "output_tokens",
                    opt_long("payload.output_tokens", p.output_tokens)?,
                );
            }
            r.put("is_error", Avro::Boolean(p.is_error))
                .put("privacy_class", privacy(p.privacy_class))
                .put("freshness_class", freshness(p.freshness_class))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ToolCallFailed(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("tool_call_id", string(&p.tool_call_id))
                .put("error", string(&p.error))
                .put("retryable", Avro::Boolean(p.retryable))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::FileRead(p) => {
            let mut r = Rec::with_capacity(3);
            r.put("path", string(&p.path))
                .put("bytes", opt_long("payload.bytes", p.bytes)?)
                .put("extra", extra(&p.extra));
            r
        }
        Payload::FileWritten(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("path", string(&p.path))
                .put("bytes", opt_long("payload.bytes", p.bytes)?)
                .put("summary", opt_string(&p.summary))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::DiffApplied(p) => {
            let mut r = Rec::with_capacity(3);
            r.put("path", string(&p.path))
                .put("diff", string(&p.diff))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::StateUpdated(p) => {
            let mut r = Rec::with_capacity(9);
            r.put("goal", opt_string(&p.goal))
                .put("current_task", opt_string(&p.current_task))
                .put("acceptance_criteria", opt_strings(&p.acceptance_criteria))
                .put("plan", opt_strings(&p.plan))
                .put("constraints", opt_strings(&p.constraints))
                .put("facts", opt_strings(&p.facts))
                .put("decisions", opt_strings(&p.decisions))
                .put("open_questions", opt_strings(&p.open_questions))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::BranchForked(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("new_branch_id", string(&p.new_branch_id))
                .put("from_event_id", string(&p.from_event_id));
            if since_v2(schema_version, "payload.kind", p.kind.is_some())? {
                r.put("kind", opt_string(&p.kind));
            }
            r.put("extra", extra(&p.extra));
            r
        }
        Payload::SubagentStarted(p) => {
            let mut r = Rec::with_capacity(3);
            r.put("child_session_id", string(&p.child_session_id));
            if since_v2(schema_version, "payload.task", p.task.is_some())? {
                r.put("task", opt_string(&p.task));
            }
            r.put("extra", extra(&p.extra));
            r
        }
        Payload::SubagentFinished(p) => {
            let mut r = Rec::with_capacity(5);
            r.put("child_session_id", string(&p.child_session_id))
                .put("report", string(&p.report))
                .put("artifacts", strings(&p.artifacts))
                .put("status", string(&p.status))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::SubagentPromoted(p) => {
            let mut r = Rec::with_capacity(2);
            r.put("child_session_id", string(&p.child_session_id))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ApprovalRequested(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("approval_id", string(&p.approval_id))
                .put("tool_call_id", opt_string(&p.tool_call_id))
                .put("reason", opt_string(&p.reason))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ApprovalGranted(p) | Payload::ApprovalDenied(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("approval_id", string(&p.approval_id))
                .put("tool_call_id", opt_string(&p.tool_call_id))
                .put("reason", opt_string(&p.reason))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::VerifierFinished(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("check", string(&p.check))
                .put("result", string(&p.result))
                .put("evidence_refs", strings(&p.evidence_refs))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ProviderItemRecorded(p) => {
            let mut r = Rec::with_capacity(3);
            r.put("format", string(&p.format))
                .put("item", json(&p.item))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::MemoryRecorded(p) => {
            let mut r = Rec::with_capacity(9);
            r.put("memory_id", string(&p.memory_id))
                .put("scope", string(&p.scope))
                .put("kind", string(&p.kind))
                .put("text", string(&p.text))
                .put("source_refs", strings(&p.source_refs))
                .put("confidence", nullable(p.confidence.map(Avro::Double)))
                .put("privacy_class", privacy(p.privacy_class))
                .put("freshness_class", freshness(p.freshness_class))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::MemorySuperseded(p) => {
            let mut r = Rec::with_capacity(4);
            r.put("memory_id", string(&p.memory_id))
                .put("superseded_by", string(&p.superseded_by))
                .put("reason", opt_string(&p.reason))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::CompactionCompleted(p) => {
            let mut r = Rec::with_capacity(8);
            r.put("compaction_id", string(&p.compaction_id))
                .put("first_event_id", string(&p.first_event_id))
                .put("last_event_id", string(&p.last_event_id))
                .put("first_kept_event_id", string(&p.first_kept_event_id))
                .put(
                    "tokens_before",
                    long("payload.tokens_before", p.tokens_before)?,
                )
                .put(
                    "tokens_after",
                    long("payload.tokens_after", p.tokens_after)?,
                )
                .put("summary", json(&p.summary))
                .put("extra", extra(&p.extra));
            r
        }
        Payload::ContextBuilt(p) => {
            let mut r = Rec::with_capacity(5);
            r.put("assembly_id", string(&p.assembly_id))
                .put(
                    "context_tokens",
                    long("payload.context_tokens", p.context_tokens)?,
                )
                .put(
                    "transcript_tokens",
                    long("payload.transcript_tokens", p.transcript_tokens)?,
                )
                .put("assembly", json(&p.assembly))
                .put("extra", extra(&p.extra));
            r
        }
        // `Payload` is non-exhaustive: a type added to the core needs a record here and in the
        // schema (the round-trip test over `EventType::ALL` fails until it has one).
        other => {
            return Err(Error::invalid(
                "type",
                format!(
                    "event type {} has no avro mapping in this codec",
                    other.event_type().as_str()
                ),
            ))
        }
    };
    Ok(value.done())
}
