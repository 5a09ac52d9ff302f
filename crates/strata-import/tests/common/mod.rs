//! Helpers the importers' tests share: fixtures, conversion with a round-trip check, and
//! payload accessors.
#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;

use strata_core::payload::{ModelResponseReceived, SessionStarted, ToolCallFinished};
use strata_core::{Event, Payload};
use strata_import::{convert, detect, Error, Format, ImportOptions, Report, Source};

pub(crate) fn fixture(dir: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name)
}

pub(crate) fn options() -> ImportOptions {
    let mut o = ImportOptions::new("acme");
    o.base_time = chrono::DateTime::from_timestamp(1_700_000_000, 0);
    o
}

pub(crate) fn run_path(path: &PathBuf, format: Format) -> Result<(Vec<Event>, Report), Error> {
    let mut events = Vec::new();
    let report = convert(&Source::new(path), format, &options(), &mut |e| {
        events.push(e);
        Ok(())
    })?;
    Ok((events, report))
}

/// Converts a fixture as the format `detect` gives it (and checks that is `format`).
pub(crate) fn run(dir: &str, name: &str, format: Format) -> (Vec<Event>, Report) {
    let path = fixture(dir, name);
    assert_eq!(
        detect(&Source::new(&path)).expect("detected"),
        format,
        "{name}"
    );
    let (events, report) = run_path(&path, format).expect("converts");
    for e in &events {
        let back = Event::from_json(e.to_json(), None).expect("valid event");
        assert_eq!(&back, e, "round trip of {}", e.event_id);
    }
    (events, report)
}

pub(crate) fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.event_type().as_str()).collect()
}

pub(crate) fn started(e: &Event) -> &SessionStarted {
    match &e.payload {
        Payload::SessionStarted(p) => p,
        other => panic!("not a SessionStarted: {other:?}"),
    }
}

pub(crate) fn response(e: &Event) -> &ModelResponseReceived {
    match &e.payload {
        Payload::ModelResponseReceived(p) => p,
        other => panic!("not a ModelResponseReceived: {other:?}"),
    }
}

pub(crate) fn result(e: &Event) -> &ToolCallFinished {
    match &e.payload {
        Payload::ToolCallFinished(p) => p,
        other => panic!("not a ToolCallFinished: {other:?}"),
    }
}

pub(crate) fn prompt(e: &Event) -> &str {
    match &e.payload {
        Payload::UserPromptSubmitted(p) => &p.text,
        other => panic!("not a UserPromptSubmitted: {other:?}"),
    }
}
