//! The JSON contract v1: every field error names its field, unknown fields are kept.

use serde_json::json;
use strata_core::{Event, EventType, Payload};

fn errors_of(v: serde_json::Value) -> Vec<(String, String)> {
    Event::from_json(v, None)
        .unwrap_err()
        .0
        .into_iter()
        .map(|e| (e.field, e.message))
        .collect()
}

#[test]
fn the_spec_example_parses_and_round_trips() {
    let text = r#"{"event_id":"evt_01","tenant_id":"acme","session_id":"s1","branch_id":"main","seq":7,"parent_event_id":"evt_00","timestamp":"2026-06-03T10:00:00Z","type":"ToolCallFinished","actor":"tool","participant_id":"agent-a","payload":{"tool_call_id":"call_3","output":"...","is_error":false},"causality":{"message_id":null,"tool_call_id":"call_3","artifact_id":null}}"#;
    let e: Event = serde_json::from_str(text).unwrap();
    assert_eq!(e.event_type(), EventType::ToolCallFinished);
    assert_eq!(e.seq, Some(7));
    let Payload::ToolCallFinished(p) = &e.payload else {
        panic!("wrong payload")
    };
    assert_eq!(p.tool_call_id, "call_3");
    let back: Event = serde_json::from_value(e.to_json()).unwrap();
    assert_eq!(back, e);
}

#[test]
fn unknown_fields_are_kept_at_every_level_in_order() {
    let v = json!({"event_id": "e1", "tenant_id": "t", "session_id": "s", "timestamp": "2026-06-03T10:00:00Z",
        "type": "UserPromptSubmitted", "z_custom": 1, "a_custom": {"x": [1, 2]},
        "payload": {"message_id": "m", "text": "hi", "lang": "en", "attachments": []}});
    let e = Event::from_json(v, None).unwrap();
    let out = e.to_json();
    assert_eq!(out["z_custom"], 1);
    assert_eq!(out["a_custom"]["x"][1], 2);
    assert_eq!(out["payload"]["lang"], "en");
    let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
    let z = keys.iter().position(|k| *k == "z_custom").unwrap();
    let a = keys.iter().position(|k| *k == "a_custom").unwrap();
    assert!(z < a, "unknown fields keep their order");
    assert_eq!(out["branch_id"], "main", "branch_id defaults to main");
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let errs = errors_of(
        json!({"tenant_id": "t", "timestamp": "yesterday", "type": "ToolCallFinished",
        "seq": -3, "payload": {"output": "x"}}),
    );
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    for f in [
        "event_id",
        "session_id",
        "seq",
        "timestamp",
        "payload.tool_call_id",
    ] {
        assert!(fields.contains(&f), "{f} not reported in {errs:?}");
    }
}

#[test]
fn unknown_type_and_wrong_types_are_named() {
    let errs = errors_of(json!({"event_id": "e", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallExploded", "payload": {}}));
    assert_eq!(errs[0].0, "type");
    assert!(errs[0].1.contains("ToolCallExploded"), "{errs:?}");
    let errs = errors_of(json!({"event_id": "e", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "FileRead", "payload": {"path": 42}}));
    assert_eq!(errs[0].0, "payload.path", "{errs:?}");
    let errs = errors_of(
        json!({"event_id": "e", "tenant_id": "bad tenant!", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "FileRead", "payload": {"path": "a"}}),
    );
    assert_eq!(errs[0].0, "tenant_id");
    let errs = errors_of(json!({"event_id": "e", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallFinished",
        "payload": {"tool_call_id": "c"}}));
    assert_eq!(errs[0].0, "payload.output");
}

#[test]
fn a_missing_tenant_is_filled_from_the_key() {
    let e = Event::from_json(
        json!({"event_id": "e", "session_id": "s", "timestamp": "2026-06-03T10:00:00Z",
            "type": "FileRead", "payload": {"path": "a"}}),
        Some("acme"),
    )
    .unwrap();
    assert_eq!(e.tenant_id, "acme");
}
