//! What `GET /v1/sessions/{id}/events` leaves out: the bytes of a tool output (or of a memory)
//! that privacy policy withholds. The same rule as `GET /v1/artifacts/{sha}`:
//! `confidential` and `restricted` payloads never leave the service raw, not even to their own
//! tenant's key; an event keeps its metadata (ids, sizes, hashes, the artifact ref) and says
//! which class withheld the rest under `withheld`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use strata_core::payload::PrivacyClass;
use strata_core::privacy::PrivacyDefaults;

/// Replaces the withheld payloads of `events` (stored event bodies, as the API returns them).
/// `projected` holds the class the projection gave each result event (it knows the call's tool
/// and the session's rule); `rule` is the session's privacy rule, for results with no call.
pub fn redact(
    events: &mut [Value],
    projected: &BTreeMap<String, PrivacyClass>,
    rule: &PrivacyDefaults,
) {
    for event in events {
        let id = event
            .get("event_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let kind = event.get("type").and_then(Value::as_str).map(str::to_owned);
        let Some(payload) = event.get_mut("payload").and_then(Value::as_object_mut) else {
            continue;
        };
        let stated = stated_class(payload);
        let fields: &[&str] = match kind.as_deref() {
            Some("ToolCallFinished") => &["output", "output_preview"],
            Some("MemoryRecorded") => &["text"],
            _ => continue,
        };
        let by_projection = id.as_deref().and_then(|id| projected.get(id)).copied();
        let class = by_projection.max(match kind.as_deref() {
            // A memory's class is its own (the extractor derived it from its sources).
            Some("MemoryRecorded") => stated,
            _ => rule.class_of(stated, ""),
        });
        if let Some(class) = class.filter(|c| *c >= PrivacyClass::Confidential) {
            withhold(payload, fields, class);
        }
    }
}

fn stated_class(payload: &Map<String, Value>) -> Option<PrivacyClass> {
    payload
        .get("privacy_class")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

fn withhold(payload: &mut Map<String, Value>, fields: &[&str], class: PrivacyClass) {
    let marker = format!("[withheld by privacy policy: {} payload]", class.as_str());
    for field in fields {
        if let Some(value) = payload.get_mut(*field) {
            *value = Value::String(marker.clone());
        }
    }
    payload.insert(
        "withheld".to_owned(),
        Value::String(class.as_str().to_owned()),
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn finished(id: &str, class: Option<&str>) -> Value {
        let mut payload =
            json!({"tool_call_id": "c1", "output": "token=SECRET", "output_preview": "SECRET"});
        if let Some(c) = class {
            payload["privacy_class"] = json!(c);
        }
        json!({"event_id": id, "type": "ToolCallFinished", "payload": payload})
    }

    #[test]
    fn a_restricted_output_keeps_its_metadata_and_loses_its_bytes() {
        let mut events = vec![
            finished("e1", Some("restricted")),
            finished("e2", Some("internal")),
        ];
        redact(&mut events, &BTreeMap::new(), &PrivacyDefaults::default());
        let text = events[0].to_string();
        assert!(!text.contains("SECRET"), "{text}");
        assert_eq!(events[0]["payload"]["withheld"], "restricted");
        assert_eq!(events[0]["payload"]["tool_call_id"], "c1");
        assert!(
            events[1].to_string().contains("SECRET"),
            "internal output is the tenant's own"
        );
        assert!(events[1]["payload"].get("withheld").is_none());
    }

    #[test]
    fn the_projected_class_of_the_call_s_tool_withholds_an_unlabelled_output() {
        let mut events = vec![finished("e1", None)];
        let projected = BTreeMap::from([("e1".to_owned(), PrivacyClass::Confidential)]);
        redact(&mut events, &projected, &PrivacyDefaults::default());
        assert!(!events[0].to_string().contains("SECRET"));
        assert_eq!(events[0]["payload"]["withheld"], "confidential");
    }

    #[test]
    fn memories_are_withheld_by_their_own_class_and_prompts_never() {
        let mut events = vec![
            json!({"event_id": "m", "type": "MemoryRecorded",
                   "payload": {"memory_id": "m1", "text": "SECRET fact", "privacy_class": "restricted"}}),
            json!({"event_id": "u", "type": "UserPromptSubmitted",
                   "payload": {"text": "SECRET is mine to say", "privacy_class": "restricted"}}),
        ];
        redact(&mut events, &BTreeMap::new(), &PrivacyDefaults::default());
        assert!(!events[0].to_string().contains("SECRET"));
        assert!(
            events[1].to_string().contains("SECRET"),
            "prompts are not tool payloads"
        );
    }
}
