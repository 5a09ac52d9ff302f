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

/// Events of every type, with unknown fields at every level, NUL and other control characters,
/// non-ASCII text, floats, big integers, empty and nested values.
fn varied_events() -> Vec<Event> {
    let odd = "nul \u{0} bell \u{7} tab \t nl \n quote \" backslash \\ slash / del \u{7f} \
               é ß 中文 \u{1F600} \u{2028} \u{FEFF}";
    let extra = json!({"z": 1, "a": {"nested": [1, 2.5, -3, 1e300, null, true, {}, []]},
                       "text\u{0}": odd, "": "empty key", "big": u64::MAX, "neg": i64::MIN});
    let payloads = [
        (
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "gpt-4o", "temp": 0.2},
            "context_window_tokens": 32000, "reserved_output_tokens": 4000, "cwd": "/w",
            "system_prompt": odd, "tools": [{"name": "run", "description": odd,
            "schema": {"type": "object", "properties": {"x": {"type": "string"}}}, "strict": true},
            {"name": "bare"}]}),
        ),
        (
            "UserPromptSubmitted",
            json!({"message_id": "m", "text": odd}),
        ),
        (
            "ModelResponseReceived",
            json!({"message_id": "a", "model_run_id": "r", "text": odd,
            "tool_calls": [{"tool_call_id": "c", "name": "run", "args": {"q": odd, "n": [1.5]},
            "id_hint": 3}], "usage": {"input_tokens": 10, "output_tokens": 20, "cached": 5}}),
        ),
        ("ModelResponseReceived", json!({"message_id": "a2"})),
        (
            "ToolCallRequested",
            json!({"tool_call_id": "c", "name": "run", "args": "{\"q\": \"plain\"}"}),
        ),
        (
            "ToolCallFinished",
            json!({"tool_call_id": "c", "output": odd, "is_error": true,
            "privacy_class": "confidential", "freshness_class": "time_bounded"}),
        ),
        (
            "ToolCallFinished",
            json!({"tool_call_id": "c", "output_ref": "artifact:sha256:00",
            "output_preview": "head", "output_sha256": "00", "output_bytes": 123456789,
            "output_tokens": 42}),
        ),
        (
            "ToolCallFailed",
            json!({"tool_call_id": "c", "error": odd, "retryable": true}),
        ),
        ("FileRead", json!({"path": odd, "bytes": 0})),
        ("FileWritten", json!({"path": "src/a.rs", "summary": odd})),
        (
            "DiffApplied",
            json!({"path": "src/a.rs", "diff": "@@ -1 +1 @@\n-a\n+b\n"}),
        ),
        (
            "StateUpdated",
            json!({"goal": odd, "plan": [], "facts": ["a", odd],
            "open_questions": ["?"]}),
        ),
        (
            "BranchForked",
            json!({"new_branch_id": "alt", "from_event_id": "e0", "kind": "what_if"}),
        ),
        (
            "SubagentStarted",
            json!({"child_session_id": "s2", "task": odd}),
        ),
        (
            "SubagentFinished",
            json!({"child_session_id": "s2", "report": odd,
            "artifacts": ["x"], "status": "ok"}),
        ),
        ("SubagentPromoted", json!({"child_session_id": "s2"})),
        (
            "ApprovalRequested",
            json!({"approval_id": "ap", "tool_call_id": "c", "reason": odd}),
        ),
        ("ApprovalGranted", json!({"approval_id": "ap"})),
        (
            "ApprovalDenied",
            json!({"approval_id": "ap", "reason": "no"}),
        ),
        (
            "VerifierFinished",
            json!({"check": "tests", "result": "pass", "evidence_refs": ["e1"]}),
        ),
        (
            "MemoryRecorded",
            json!({"memory_id": "mem", "scope": "session", "kind": "fact",
            "text": odd, "source_refs": ["e1"], "confidence": 0.1, "privacy_class": "internal",
            "freshness_class": "durable"}),
        ),
        (
            "MemoryRecorded",
            json!({"memory_id": "mem2", "scope": "session", "kind": "fact",
            "text": "t", "source_refs": ["e1"], "confidence": 1e-7}),
        ),
        (
            "MemorySuperseded",
            json!({"memory_id": "mem", "superseded_by": "mem2"}),
        ),
        (
            "CompactionCompleted",
            json!({"compaction_id": "k", "first_event_id": "e1",
            "last_event_id": "e9", "first_kept_event_id": "e10", "tokens_before": 100,
            "tokens_after": 10, "summary": {"goal": odd, "files": ["a", "b"]}}),
        ),
        (
            "ContextBuilt",
            json!({"assembly_id": "as", "context_tokens": 1,
            "transcript_tokens": 2, "assembly": {"messages": [{"role": "user", "text": odd}]}}),
        ),
        // Appended last: the tests above pick samples by position.
        (
            "ProviderItemRecorded",
            json!({"format": "openai-responses",
            "item": {"type": "reasoning", "summary": [{"type": "summary_text", "text": odd}]}}),
        ),
    ];
    let mut out = Vec::new();
    for (i, (ty, payload)) in payloads.into_iter().enumerate() {
        let mut with_extra = payload.clone();
        for (k, v) in extra.as_object().unwrap() {
            with_extra[k] = v.clone();
        }
        for (j, p) in [payload, with_extra].into_iter().enumerate() {
            let mut v = json!({"event_id": format!("e{i}-{j}"), "tenant_id": "t",
                "session_id": "s", "timestamp": "2026-06-03T10:00:00.123456Z", "type": ty,
                "payload": p});
            if j == 1 {
                v["seq"] = json!(7);
                v["branch_id"] = json!("alt");
                v["parent_event_id"] = json!("e0");
                v["actor"] = json!("agent");
                v["participant_id"] = json!("p1");
                v["causality"] = json!({"message_id": "m", "tool_call_id": "c", "why": odd});
                v["zz_unknown"] = extra.clone();
                v["aa_unknown"] = json!(odd);
            }
            out.push(Event::from_json(v, None).unwrap_or_else(|e| panic!("{ty}: {e}")));
        }
    }
    out
}

#[test]
fn the_canonical_text_is_the_one_of_the_json_value() {
    let mut events = varied_events();
    // Built by hand, not parsed: unknown-field maps holding keys their struct writes too (the
    // `Value` keeps one of them), and a float that is not a number.
    let mut clash = events[4].clone();
    clash.extra.insert("event_id".into(), json!("shadow"));
    clash.extra.insert("payload".into(), json!({}));
    events.push(clash);
    let mut clash = events[5].clone();
    let Payload::ModelResponseReceived(p) = &mut clash.payload else {
        panic!("expected a model response")
    };
    p.extra.insert("text".into(), json!("shadow"));
    events.push(clash);
    let mut clash = events[5].clone();
    let Payload::ModelResponseReceived(p) = &mut clash.payload else {
        panic!("expected a model response")
    };
    p.tool_calls[0].extra.insert("name".into(), json!(1));
    events.push(clash);
    let mut clash = events[1].clone();
    let Payload::SessionStarted(p) = &mut clash.payload else {
        panic!("expected a session start")
    };
    p.model.extra.insert("provider".into(), json!("shadow"));
    p.extra
        .insert("cwd".into(), json!("not written by the struct: absent"));
    events.push(clash);
    let mut clash = events[1].clone();
    clash.causality = Some(strata_core::Causality {
        message_id: Some("m".into()),
        extra: serde_json::Map::from_iter([("message_id".to_owned(), json!("shadow"))]),
        ..Default::default()
    });
    events.push(clash);
    let mut nan = events[40].clone();
    let Payload::MemoryRecorded(p) = &mut nan.payload else {
        panic!("expected a memory, found {:?}", nan.event_type())
    };
    p.confidence = Some(f64::NAN);
    events.push(nan);

    for e in &events {
        assert_eq!(
            e.to_json_string(),
            e.to_json().to_string(),
            "{}",
            e.event_id
        );
        assert_eq!(
            e.payload.to_json_string(),
            e.payload.to_json().to_string(),
            "{}",
            e.event_id
        );
    }
    // The spec example, as text.
    let text = r#"{"event_id":"evt_01","tenant_id":"acme","session_id":"s1","branch_id":"main","seq":7,"parent_event_id":"evt_00","timestamp":"2026-06-03T10:00:00Z","type":"ToolCallFinished","actor":"tool","participant_id":"agent-a","payload":{"tool_call_id":"call_3","output":"...","is_error":false},"causality":{"message_id":null,"tool_call_id":"call_3","artifact_id":null}}"#;
    let e: Event = serde_json::from_str(text).unwrap();
    assert_eq!(
        e.to_json_string(),
        r#"{"event_id":"evt_01","tenant_id":"acme","session_id":"s1","branch_id":"main","seq":7,"parent_event_id":"evt_00","timestamp":"2026-06-03T10:00:00Z","type":"ToolCallFinished","actor":"tool","participant_id":"agent-a","payload":{"tool_call_id":"call_3","output":"..."},"causality":{"tool_call_id":"call_3"}}"#
    );
}

#[test]
fn ids_with_bidi_overrides_zero_width_characters_or_a_bom_are_refused_naming_the_character() {
    for (field, id, code) in [
        ("session_id", "s1\u{202E}gnp.exe", "U+202E"),
        ("tenant_id", "ac\u{200B}me", "U+200B"),
        ("event_id", "\u{FEFF}e1", "U+FEFF"),
        ("branch_id", "main\u{2066}", "U+2066"),
    ] {
        let mut v = json!({"event_id": "e1", "tenant_id": "acme", "session_id": "s1",
            "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "m", "text": "hi"}});
        v[field] = json!(id);
        let errors = errors_of(v);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, field);
        assert!(errors[0].1.contains(code), "{errors:?}");
    }
    // Letters of any script stay welcome.
    let ok = json!({"event_id": "é1", "tenant_id": "acme", "session_id": "セッション",
        "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
        "payload": {"message_id": "m", "text": "hi"}});
    assert!(Event::from_json(ok, None).is_ok());
}

#[test]
fn a_response_names_the_assembly_it_answers_or_is_refused_naming_the_field() {
    let response = |assembly_id: serde_json::Value| {
        json!({"event_id": "e1", "tenant_id": "t", "session_id": "s",
            "timestamp": "2026-06-03T10:00:00Z", "type": "ModelResponseReceived",
            "payload": {"message_id": "m1", "text": "done", "assembly_id": assembly_id}})
    };
    let event = Event::from_json(response(json!("asm_0123456789abcdef01234567")), None).unwrap();
    let Payload::ModelResponseReceived(p) = &event.payload else {
        panic!("{event:?}")
    };
    assert_eq!(p.assembly_id(), Some("asm_0123456789abcdef01234567"));
    assert_eq!(
        event.to_json()["payload"]["assembly_id"],
        "asm_0123456789abcdef01234567"
    );
    for bad in [
        json!(""),
        json!("asm_"),
        json!("ctx_123"),
        json!(7),
        json!("asm_a b"),
    ] {
        let errors = errors_of(response(bad.clone()));
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert_eq!(errors[0].0, "payload.assembly_id", "{bad}");
        assert!(errors[0].1.contains("asm_"), "{bad}: {}", errors[0].1);
    }
}

fn with_calls(args: serde_json::Value) -> serde_json::Value {
    json!({"event_id": "e1", "tenant_id": "t", "session_id": "s", "timestamp": "2026-06-03T10:00:00Z",
        "type": "ModelResponseReceived",
        "payload": {"message_id": "m", "tool_calls": [
            {"tool_call_id": "c0", "name": "ok", "args": {}},
            {"tool_call_id": "c1", "name": "shell", "args": args}]}})
}

#[test]
fn tool_arguments_as_json_text_are_stored_as_the_object() {
    let text = r#"{"cmd": "ls -la", "n": 2, "a": [1]}"#;
    let e = Event::from_json(with_calls(json!(text)), None).unwrap();
    let Payload::ModelResponseReceived(p) = &e.payload else {
        panic!("wrong payload")
    };
    assert_eq!(
        p.tool_calls[1].args,
        json!({"cmd": "ls -la", "n": 2, "a": [1]})
    );
    // Key order is the text's.
    let keys: Vec<&String> = p.tool_calls[1].args.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["cmd", "n", "a"]);
    // The canonical form holds the object, so it reads back the same.
    assert_eq!(Event::from_json(e.to_json(), None).unwrap(), e);

    let requested = json!({"event_id": "e2", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallRequested",
        "payload": {"tool_call_id": "c2", "name": "shell", "args": "{\"cmd\":\"pwd\"}"}});
    let e = Event::from_json(requested, None).unwrap();
    assert_eq!(e.to_json()["payload"]["args"], json!({"cmd": "pwd"}));
}

#[test]
fn absent_or_null_tool_arguments_stay_null() {
    for args in [None, Some(json!(null))] {
        let mut v = with_calls(json!({}));
        match args {
            Some(a) => v["payload"]["tool_calls"][1]["args"] = a,
            None => {
                v["payload"]["tool_calls"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("args");
            }
        }
        let e = Event::from_json(v, None).unwrap();
        assert_eq!(e.to_json()["payload"]["tool_calls"][1]["args"], json!(null));
    }
}

#[test]
fn tool_arguments_that_are_no_object_are_refused_with_their_path() {
    for (args, says) in [
        (json!("ls -la"), "not JSON"),
        (json!("[1, 2]"), "found a string holding an array"),
        (json!("\"{}\""), "found a string holding a string"),
        (json!(""), "not JSON"),
        (json!(42), "found a number"),
        (json!([{"cmd": "ls"}]), "found an array"),
        (json!(true), "found a boolean"),
    ] {
        let errs = errors_of(with_calls(args.clone()));
        assert_eq!(errs.len(), 1, "{args}: {errs:?}");
        assert_eq!(errs[0].0, "payload.tool_calls[1].args", "{args}: {errs:?}");
        assert!(errs[0].1.contains(says), "{args}: {errs:?}");
        assert!(!errs[0].1.contains("ls -la"), "content echoed: {errs:?}");
    }
    let errs = errors_of(
        json!({"event_id": "e2", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallRequested",
        "payload": {"tool_call_id": "c2", "name": "shell", "args": 7}}),
    );
    assert_eq!(errs[0].0, "payload.args", "{errs:?}");
}

#[test]
fn an_event_stored_before_the_arguments_contract_still_reads_back() {
    // Accepted by an earlier build, which kept any JSON value: refused as new input, read back
    // whole from storage (nothing accepted is lost), its text kept as it was.
    let stored = with_calls(json!("ls -la"));
    assert!(strata_core::Event::from_json(stored.clone(), None).is_err());
    let e = strata_core::Event::from_stored_json(stored).expect("a stored event reads back");
    assert_eq!(
        e.to_json()["payload"]["tool_calls"][1]["args"],
        json!("ls -la")
    );
    let parsed: strata_core::Event =
        serde_json::from_value(with_calls(json!("{\"cmd\": \"ls\"}"))).expect("reads back");
    assert_eq!(
        parsed.to_json()["payload"]["tool_calls"][1]["args"],
        json!({"cmd": "ls"})
    );
}

fn payload_errors(ty: &str, payload: serde_json::Value) -> Vec<(String, String)> {
    errors_of(
        json!({"event_id": "e1", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload}),
    )
}

#[test]
fn every_problem_of_a_payload_is_reported_not_just_the_first() {
    let errs = payload_errors(
        "ModelResponseReceived",
        json!({"message_id": 5, "text": "ok", "usage": "lots",
            "tool_calls": [{"tool_call_id": "c0", "name": "run", "args": 42},
                           {"tool_call_id": "c1"}]}),
    );
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    for f in [
        "payload.message_id",
        "payload.usage",
        "payload.tool_calls[0].args",
        "payload.tool_calls[1].name",
    ] {
        assert!(fields.contains(&f), "{f} not reported in {errs:?}");
    }
    assert_eq!(fields.len(), 4, "{errs:?}");
}

#[test]
fn an_empty_session_started_names_each_missing_field_and_nothing_inside_them() {
    let errs = payload_errors("SessionStarted", json!({}));
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "payload.model",
            "payload.context_window_tokens",
            "payload.reserved_output_tokens"
        ],
        "{errs:?}"
    );
    assert!(errs.iter().all(|(_, m)| m == "missing field"), "{errs:?}");
}

#[test]
fn an_unknown_type_is_answered_with_the_valid_ones() {
    let errs = payload_errors("ToolCallDone", json!({}));
    assert_eq!(errs[0].0, "type", "{errs:?}");
    for t in [
        "SessionStarted",
        "ToolCallFinished",
        "ProviderItemRecorded",
        "ContextBuilt",
    ] {
        assert!(errs[0].1.contains(t), "{errs:?}");
    }
}
