//! The frame every importer shares: record reading, detection of canonical JSONL, the check
//! that lists every problem, stable ids.

use std::path::Path;

use strata_core::Event;
use strata_import::read::{self, Mode, Position};
use strata_import::{check, convert, detect, Error, Format, ImportOptions, Source};

fn write(dir: &Path, name: &str, text: &str) -> Source {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    Source::new(path)
}

fn records(source: &Source, mode: Mode, fields: &[&str]) -> Vec<(Position, serde_json::Value)> {
    let mut out = Vec::new();
    read::records(source, mode, fields, &mut |r| {
        out.push((r.position, r.value));
        Ok(())
    })
    .expect("read");
    out
}

#[test]
fn documents_are_streamed_header_first_in_the_converters_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = write(
        dir.path(),
        "t.traj",
        r#"{"trajectory": [{"a": 1}, {"a": 2}], "info": {"model": "m"},
            "history": [{"role": "user"}], "empty": null}"#,
    );
    let got = records(&doc, Mode::Document, &["history", "trajectory", "empty"]);
    assert_eq!(got[0].0, Position::Header);
    assert_eq!(got[0].1["info"]["model"], "m");
    assert!(
        got[0].1.get("trajectory").is_none(),
        "streamed, not in the header"
    );
    let order: Vec<String> = got[1..].iter().map(|(p, _)| p.key()).collect();
    assert_eq!(order, ["history.0", "trajectory.0", "trajectory.1"]);

    let array = write(
        dir.path(),
        "a.json",
        r#"[{"role": "user"}, {"role": "assistant"}]"#,
    );
    let got = records(&array, Mode::Either, &[]);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].0.to_string(), "element 1");
}

#[test]
fn a_malformed_document_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = write(
        dir.path(),
        "bad.json",
        r#"{"messages": [{"role": "user"}, "#,
    );
    let err =
        read::records(&doc, Mode::Document, &["messages"], &mut |_| Ok(())).expect_err("truncated");
    assert!(
        matches!(&err, Error::File { file, .. } if file.ends_with("bad.json")),
        "{err}"
    );
}

fn event(id: &str, session: &str, ty: &str, payload: serde_json::Value) -> String {
    serde_json::json!({"event_id": id, "session_id": session, "timestamp": "2026-06-03T10:00:00Z",
        "type": ty, "payload": payload})
    .to_string()
}

#[test]
fn canonical_lines_keep_their_ids_and_take_the_tenant_when_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = [
        event(
            "e1",
            "s1",
            "UserPromptSubmitted",
            serde_json::json!({"message_id": "u1", "text": "hi"}),
        ),
        String::new(),
        event(
            "e2",
            "s1",
            "ModelResponseReceived",
            serde_json::json!({"message_id": "a1", "text": "hello"}),
        ),
    ]
    .join("\n");
    let source = write(dir.path(), "c.jsonl", &text);
    assert_eq!(detect(&source).expect("detect"), Format::Canonical);
    let mut events: Vec<Event> = Vec::new();
    let report = convert(
        &source,
        Format::Canonical,
        &ImportOptions::new("acme"),
        &mut |e| {
            events.push(e);
            Ok(())
        },
    )
    .expect("convert");
    assert_eq!(report.records, 2);
    assert_eq!(report.sessions, ["s1"]);
    assert_eq!(
        events
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        ["e1", "e2"]
    );
    assert!(events.iter().all(|e| e.tenant_id == "acme"));
}

#[test]
fn the_check_lists_every_bad_line_and_convert_stops_at_the_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = [
        event(
            "e1",
            "s1",
            "UserPromptSubmitted",
            serde_json::json!({"message_id": "u1", "text": "hi"}),
        ),
        "{not json".to_owned(),
        event("e3", "s1", "NoSuchType", serde_json::json!({})),
        event(
            "e4",
            "s1",
            "UserPromptSubmitted",
            serde_json::json!({"message_id": "u2", "text": "ok"}),
        ),
    ]
    .join("\n");
    let source = write(dir.path(), "bad.jsonl", &text);
    let opts = ImportOptions::new("acme");
    let mut n = 0;
    let (report, errors) = check(
        &source,
        Format::Canonical,
        &opts,
        &mut |_| {
            n += 1;
            Ok(())
        },
        50,
    );
    let report = report.expect("the check goes on");
    assert_eq!(n, 2, "the good lines are converted");
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].contains("bad.jsonl:2: not valid JSON"),
        "{shown:?}"
    );
    assert!(shown[1].contains("bad.jsonl:3: type"), "{shown:?}");
    assert_eq!(report.unmapped.values().sum::<u64>(), 2);

    let err = convert(&source, Format::Canonical, &opts, &mut |_| Ok(())).expect_err("stops");
    assert!(err.to_string().contains("bad.jsonl:2:"), "{err}");
}

#[test]
fn a_sink_refusal_stops_the_conversion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = event(
        "e1",
        "s1",
        "UserPromptSubmitted",
        serde_json::json!({"message_id": "u1", "text": "hi"}),
    );
    let source = write(dir.path(), "c.jsonl", &text);
    let err = convert(
        &source,
        Format::Canonical,
        &ImportOptions::new("acme"),
        &mut |_| Err("full".into()),
    )
    .expect_err("refused");
    assert!(matches!(err, Error::Sink(ref m) if m == "full"), "{err}");
}

#[test]
fn unknown_content_asks_for_a_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = write(dir.path(), "x.txt", "hello world\n");
    let err = detect(&source).expect_err("unknown");
    assert!(
        err.to_string().contains("not a valid JSON document"),
        "{err}"
    );
    let source = write(dir.path(), "y.jsonl", "{\"a\": 1}\n{\"b\": 2}\n");
    let err = detect(&source).expect_err("unknown");
    assert!(err.to_string().contains("no known shape"), "{err}");
    assert!(err.to_string().contains("--format"), "{err}");
}

#[test]
fn ids_depend_on_session_position_and_bytes() {
    use strata_import::emit::event_id;
    use strata_import::read::Record;
    let dir = tempfile::tempdir().expect("tempdir");
    let source = write(
        dir.path(),
        "r.jsonl",
        "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 1}\n",
    );
    let mut anchors = Vec::new();
    read::records(&source, Mode::Jsonl, &[], &mut |r: Record| {
        anchors.push(r.anchor());
        Ok(())
    })
    .expect("read");
    let id = |session: &str, i: usize, sub: u32| event_id("t", session, &anchors[i], sub);
    assert_eq!(id("s", 0, 0), id("s", 0, 0), "stable");
    assert_ne!(id("s", 0, 0), id("s", 1, 0), "other bytes");
    assert_ne!(id("s", 0, 0), id("s", 2, 0), "same bytes, other line");
    assert_ne!(id("s", 0, 0), id("s", 0, 1), "second event of a record");
    assert_ne!(id("s", 0, 0), id("s2", 0, 0), "other session");
    assert!(id("s", 0, 0).len() <= strata_core::event::MAX_ID_LEN);
}
