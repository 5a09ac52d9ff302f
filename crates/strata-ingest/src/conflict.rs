//! Telling a retry from a reused event id: the content hash ingest compares, and the fields two
//! versions of an event differ in, by hash (never by content).
//!
//! The hash is of the event as ingest appends it, minus what ingest itself decides: the `seq`
//! (assigned), and how a tool output is kept (inline, or as an artifact once over the threshold,
//! which a configuration change may move): an inline output counts by its SHA-256, as an
//! artifact's does. Ingest's privacy stamp on a `SessionStarted` counts as sent, so a retry
//! across a change of the tenant's privacy defaults is a conflict (the stored rule differs).

use serde::Serialize;
use serde_json::{Map, Value};
use strata_core::payload::Payload;
use strata_core::Event;

/// The fields of a tool result that say how ingest kept its output, not what it was.
const STORAGE_FIELDS: &[&str] = &[
    "output_ref",
    "output_preview",
    "output_bytes",
    "output_tokens",
];

/// One field in which two versions of an event differ: its path and each version's hash
/// (`None`: the field is absent from that version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldDiff {
    pub field: String,
    pub stored_sha256: Option<String>,
    pub sent_sha256: Option<String>,
}

/// The content ingest compares, as a JSON object (see the module docs).
pub(crate) fn comparable(event: &Event) -> Map<String, Value> {
    let Value::Object(mut obj) = event.to_json() else {
        unreachable!("an event is a JSON object")
    };
    obj.shift_remove("seq");
    if let (Payload::ToolCallFinished(p), Some(Value::Object(payload))) =
        (&event.payload, obj.get_mut("payload"))
    {
        if p.output_ref.is_some() {
            for field in STORAGE_FIELDS {
                payload.shift_remove(*field);
            }
        } else if let Some(output) = payload.shift_remove("output") {
            let text = output.as_str().unwrap_or_default();
            payload.insert(
                "output_sha256".into(),
                strata_core::sha256_hex(text.as_bytes()).into(),
            );
        }
    }
    obj
}

/// Hex SHA-256 of [`comparable`]'s compact JSON text.
pub(crate) fn content_sha256(event: &Event) -> String {
    sha256_of(&Value::Object(comparable(event)))
}

fn sha256_of(value: &Value) -> String {
    strata_core::sha256_hex(value.to_string().as_bytes())
}

/// The fields (top level, and each payload field as `payload.<name>`) in which `stored` and
/// `sent` differ, in the order they first appear.
pub(crate) fn differing_fields(stored: &Event, sent: &Event) -> Vec<FieldDiff> {
    let (stored, sent) = (fields_of(stored), fields_of(sent));
    let hash_in = |fields: &[(String, String)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| h.clone())
    };
    let mut names: Vec<&String> = stored.iter().map(|(n, _)| n).collect();
    names.extend(
        sent.iter()
            .map(|(n, _)| n)
            .filter(|n| hash_in(&stored, n).is_none()),
    );
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (hash_in(&stored, name), hash_in(&sent, name));
            (a != b).then(|| FieldDiff {
                field: name.clone(),
                stored_sha256: a,
                sent_sha256: b,
            })
        })
        .collect()
}

/// Each comparable field's hash, payload fields flattened as `payload.<name>`.
fn fields_of(event: &Event) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in comparable(event) {
        match value {
            Value::Object(payload) if name == "payload" => {
                for (field, v) in payload {
                    out.push((format!("payload.{field}"), sha256_of(&v)));
                }
            }
            v => out.push((name, sha256_of(&v))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(output: Value) -> Event {
        let payload = match output {
            Value::Null => json!({"tool_call_id": "c1", "output_ref": "artifact:sha256:ab",
                "output_preview": "he…", "output_sha256": strata_core::sha256_hex(b"hello"),
                "output_bytes": 5, "output_tokens": 1}),
            text => json!({"tool_call_id": "c1", "output": text}),
        };
        let v = json!({"event_id": "e1", "tenant_id": "t", "session_id": "s",
            "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallFinished", "payload": payload});
        Event::from_json(v, None).expect("valid")
    }

    #[test]
    fn how_ingest_kept_an_output_and_the_seq_do_not_count() {
        let inline = result(json!("hello"));
        let mut offloaded = result(Value::Null);
        offloaded.seq = Some(9);
        assert_eq!(content_sha256(&inline), content_sha256(&offloaded));
        assert!(differing_fields(&offloaded, &inline).is_empty());
    }

    #[test]
    fn the_fields_that_differ_are_named_with_hashes_never_content() {
        let stored = result(json!("hello"));
        let mut sent = result(json!("SECRET-OTHER"));
        sent.actor = Some("tool".into());
        assert_ne!(content_sha256(&stored), content_sha256(&sent));
        let differs = differing_fields(&stored, &sent);
        let fields: Vec<&str> = differs.iter().map(|d| d.field.as_str()).collect();
        // The stored event's fields first, then those only the sent one has.
        assert_eq!(fields, ["payload.output_sha256", "actor"]);
        assert_eq!(differs[1].stored_sha256, None);
        let text = serde_json::to_string(&differs).expect("json");
        assert!(
            !text.contains("SECRET") && !text.contains("hello"),
            "{text}"
        );
    }
}
