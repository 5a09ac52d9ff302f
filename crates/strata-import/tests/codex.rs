//! The Codex importer on small invented rollouts (`tests/fixtures/codex/`): a current one, a
//! spawned agent's fork, and one of the old layout.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use strata_core::payload::{ModelResponseReceived, ToolCallFinished, UserPromptSubmitted};
use strata_core::{Event, Payload};
use strata_import::{convert, detect, Error, Format, ImportOptions, Position, Report, Source};

const SESSION: &str = "0199a000-0000-7000-8000-000000000001";
const CHILD: &str = "0199a000-0000-7000-8000-0000000000c1";
const PARENT: &str = "0199a000-0000-7000-8000-0000000000a1";
const OLD: &str = "7e3c0000-0000-4000-8000-000000000001";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/codex")
        .join(name)
}

fn current() -> PathBuf {
    fixture(&format!("rollout-2025-10-01T10-00-00-{SESSION}.jsonl"))
}

fn fork() -> PathBuf {
    fixture(&format!("rollout-2025-10-01T11-00-00-{CHILD}.jsonl"))
}

fn old() -> PathBuf {
    fixture(&format!("rollout-2025-08-30T09-00-00-{OLD}.jsonl"))
}

fn run_with(path: &Path, options: &ImportOptions) -> (Vec<Event>, Report) {
    let mut events = Vec::new();
    let report = convert(&Source::new(path), Format::Codex, options, &mut |e| {
        events.push(e);
        Ok(())
    })
    .expect("converts");
    (events, report)
}

fn run(path: &Path) -> (Vec<Event>, Report) {
    run_with(path, &ImportOptions::new("t1"))
}

fn responses(events: &[Event]) -> Vec<&ModelResponseReceived> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::ModelResponseReceived(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn finished<'a>(events: &'a [Event], call: &str) -> &'a ToolCallFinished {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::ToolCallFinished(p) if p.tool_call_id == call => Some(p),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result of {call}"))
}

fn prompts(events: &[Event]) -> Vec<(&Event, &UserPromptSubmitted)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::UserPromptSubmitted(p) => Some((e, p)),
            _ => None,
        })
        .collect()
}

#[test]
fn detected_as_codex() {
    for path in [current(), fork(), old()] {
        assert_eq!(detect(&Source::new(&path)).expect("detects"), Format::Codex);
    }
}

#[test]
fn session_started_from_the_metadata_and_the_first_turn_context() {
    let (events, report) = run(&current());
    assert_eq!(report.sessions, [SESSION]);
    let Payload::SessionStarted(s) = &events[0].payload else {
        panic!("starts with {:?}", events[0].event_type());
    };
    // The model comes from the turn context, after two messages: they were held for it.
    assert_eq!(s.model.model, "gpt-5-codex");
    assert_eq!(s.model.provider, "openai");
    assert_eq!(
        s.system_prompt.as_deref(),
        Some("You are Codex, a coding agent.")
    );
    assert_eq!(s.cwd.as_deref(), Some("/work/app"));
    assert_eq!(s.extra["cli_version"], "0.50.0");
    assert_eq!(s.extra["git"]["branch"], "main");
    assert_eq!(s.extra["approval_policy"], "on-request");
    assert_eq!(
        events[0].timestamp.to_rfc3339(),
        "2025-10-01T10:00:00+00:00"
    );
}

#[test]
fn developer_and_injected_messages_are_platform_prompts() {
    let (events, _) = run(&current());
    let p = prompts(&events);
    let (e, developer) = p[0];
    assert!(developer.text.starts_with("<permissions instructions>"));
    assert_eq!(developer.extra["role"], "developer");
    assert_eq!(e.actor.as_deref(), Some("platform"));
    let (e, context) = p[1];
    assert!(context.text.starts_with("<environment_context>"));
    assert_eq!(e.actor.as_deref(), Some("platform"));
    let (e, user) = p[2];
    assert_eq!(user.text, "Fix the failing test in calc.py");
    assert_eq!(e.actor.as_deref(), Some("user"));
}

#[test]
fn one_response_per_model_call() {
    let (events, _) = run(&current());
    let r = responses(&events);
    assert_eq!(
        r.len(),
        6,
        "{:?}",
        r.iter().map(|r| &r.message_id).collect::<Vec<_>>()
    );
    let first = r[0];
    assert_eq!(first.text, "I'll run the tests first.");
    let calls: Vec<&str> = first
        .tool_calls
        .iter()
        .map(|c| c.tool_call_id.as_str())
        .collect();
    assert_eq!(calls, ["call_test1", "call_cat1"]);
    assert_eq!(
        first.tool_calls[0].args["command"],
        json!(["bash", "-lc", "pytest -q"])
    );
    // Reasoning is kept beside the text, encrypted content included, never in the text.
    assert_eq!(
        first.extra["reasoning"][0]["summary"],
        "**Looking at the tests**"
    );
    assert_eq!(
        first.extra["reasoning"][0]["encrypted_content"],
        "gAAAAB-opaque-1"
    );
    // The usage the token count after the call's items gave.
    let usage = first.usage.as_ref().expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (1200, 80));
    assert_eq!(usage.extra["cached_input_tokens"], 1000);
    // The repeated count at the next turn's start is not the next call's.
    assert_eq!(r[1].usage.as_ref().map(|u| u.input_tokens), Some(1500));
    let last = r[4];
    assert_eq!(last.text, "Fixed: add() now adds.");
    assert_eq!(last.extra["phase"], "final_answer");
    assert_eq!(last.extra["reasoning"][0]["summary"], "**Done**");
    // After a model switch, a response names its model.
    assert_eq!(r[5].text, "You're welcome.");
    assert_eq!(r[5].extra["model"], "gpt-5.1-codex-max");
    assert!(!first.extra.contains_key("model"));
}

#[test]
fn outputs_are_unwrapped_and_exit_codes_set_errors() {
    let (events, report) = run(&current());
    let test = finished(&events, "call_test1");
    assert_eq!(test.output.as_deref(), Some("1 failed\n"));
    assert!(test.is_error);
    assert_eq!(test.extra["metadata"]["exit_code"], 1);
    assert!(!finished(&events, "call_cat1").is_error);
    let ls = finished(&events, "call_ls1");
    assert!(ls
        .output
        .as_deref()
        .is_some_and(|o| o.ends_with("1 passed\n")));
    assert!(!ls.is_error);
    assert!(finished(&events, "call_patch2").is_error);
    // An orphan result is kept, not given a call.
    assert_eq!(
        finished(&events, "call_ghost").output.as_deref(),
        Some("a result nobody asked for")
    );
    assert_eq!(report.orphan_results, 1);
    assert_eq!(report.calls_without_result, 0);
}

#[test]
fn local_shell_and_custom_calls_are_tool_calls() {
    let (events, _) = run(&current());
    let calls: Vec<_> = responses(&events)
        .into_iter()
        .flat_map(|r| r.tool_calls.iter())
        .collect();
    let shell = calls
        .iter()
        .find(|c| c.tool_call_id == "call_ls1")
        .expect("local shell");
    assert_eq!(shell.name, "local_shell");
    assert_eq!(shell.args["command"], json!(["pytest", "-q"]));
    let patch = calls
        .iter()
        .find(|c| c.tool_call_id == "call_patch1")
        .expect("patch");
    assert_eq!(patch.name, "apply_patch");
    assert!(patch.args["input"]
        .as_str()
        .is_some_and(|p| p.starts_with("*** Begin Patch")));
}

#[test]
fn a_successful_patch_gives_a_diff_per_file() {
    let (events, _) = run(&current());
    let diffs: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::DiffApplied(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(diffs.len(), 2, "the failed patch of missing.py gives none");
    assert_eq!(diffs[0].path, "calc.py");
    assert_eq!(
        diffs[0].diff,
        "--- calc.py\n+++ calc.py\n@@ def add(a, b):\n-    return a - b\n+    return a + b\n"
    );
    assert_eq!(diffs[0].extra["operation"], "update");
    assert_eq!(diffs[0].extra["tool_call_id"], "call_patch1");
    assert_eq!(diffs[1].path, "NOTES.md");
    assert_eq!(diffs[1].extra["operation"], "add");
    let result = events
        .iter()
        .position(|e| matches!(&e.payload, Payload::ToolCallFinished(p) if p.tool_call_id == "call_patch1"))
        .expect("result");
    let diff = events
        .iter()
        .position(|e| matches!(e.payload, Payload::DiffApplied(_)))
        .expect("diff");
    assert!(result < diff);
}

#[test]
fn compaction_summary_is_a_marked_prompt() {
    let (events, _) = run(&current());
    let (e, p) = prompts(&events)
        .into_iter()
        .find(|(_, p)| p.extra.contains_key("compact_summary"))
        .expect("summary");
    assert_eq!(p.text, "Summary: fixed add() in calc.py; the tests pass.");
    assert_eq!(e.actor.as_deref(), Some("platform"));
    assert!(!events.iter().any(|e| e.is_derived()));
}

#[test]
fn what_is_not_mapped_is_counted() {
    let (_, report) = run(&current());
    for (kind, n) in [
        ("event_msg \"user_message\"", 1),
        ("event_msg \"agent_reasoning\"", 1),
        ("event_msg \"exec_command_end\"", 1),
        ("event_msg \"task_complete\"", 1),
        ("event_msg \"agent_message\"", 1),
        ("event_msg \"token_count\"", 1),
        ("event_msg \"token_count\" (a repeat)", 1),
        ("response_item \"ghost_snapshot\"", 1),
        ("content part \"input_image\"", 1),
        ("line type \"future_kind\"", 1),
        ("reasoning without a model output", 1),
    ] {
        assert_eq!(
            report.unmapped.get(kind),
            Some(&n),
            "{kind}: {:?}",
            report.unmapped
        );
    }
    assert_eq!(report.records, 39);
}

#[test]
fn a_fork_is_its_own_session_linked_to_its_parent() {
    let (events, report) = run(&fork());
    assert_eq!(report.sessions, [CHILD]);
    let Payload::SessionStarted(s) = &events[0].payload else {
        unreachable!()
    };
    assert_eq!(s.model.model, "gpt-5.4-mini");
    assert_eq!(s.extra["parent_session_id"], PARENT);
    assert_eq!(s.extra["forked_from_id"], PARENT);
    assert_eq!(s.extra["agent_nickname"], "Ada");
    assert_eq!(
        s.extra["source"]["subagent"]["thread_spawn"]["agent_role"],
        "explorer"
    );
    assert_eq!(
        report.unmapped["session_meta of the session it was forked from"],
        1
    );
    // The history it was forked with is what its model was given: it stays.
    let texts: Vec<&str> = prompts(&events)
        .iter()
        .map(|(_, p)| p.text.as_str())
        .collect();
    assert_eq!(
        texts,
        ["Set the project up.", "Inspect the config and report."]
    );
    assert_eq!(responses(&events)[0].text, "The config is fine.");
}

#[test]
fn the_old_layout() {
    let (events, report) = run(&old());
    assert_eq!(report.sessions, [OLD]);
    let Payload::SessionStarted(s) = &events[0].payload else {
        unreachable!()
    };
    assert_eq!(s.model.model, "unknown");
    assert_eq!(s.system_prompt, None);
    assert_eq!(s.extra["user_instructions"], "Be brief.");
    assert_eq!(report.unmapped["record_type \"state\""], 2);
    // No times on its lines: every event takes the metadata's.
    assert!(events.iter().all(|e| e.timestamp == events[0].timestamp));
    let r = responses(&events);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].tool_calls[0].name, "shell");
    assert_eq!(r[1].text, "There is one file: a.txt.");
    assert_eq!(
        r[1].extra["reasoning"][0]["content"],
        "The user wants the files listed."
    );
    assert_eq!(
        finished(&events, "call_l1").output.as_deref(),
        Some("a.txt\n")
    );
    let (e, p) = prompts(&events)[0];
    assert!(p.text.starts_with("<user_instructions>"));
    assert_eq!(e.actor.as_deref(), Some("platform"));
}

#[test]
fn ids_are_stable_unique_and_events_round_trip() {
    for path in [current(), fork(), old()] {
        let (first, _) = run(&path);
        let (second, _) = run(&path);
        let ids = |events: &[Event]| {
            events
                .iter()
                .map(|e| e.event_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&first), ids(&second));
        assert_eq!(
            ids(&first).into_iter().collect::<HashSet<_>>().len(),
            first.len()
        );
        for e in &first {
            let back = Event::from_json(e.to_json(), None).expect("valid event");
            assert_eq!(&back, e);
        }
    }
}

#[test]
fn the_session_option_names_the_session() {
    let mut options = ImportOptions::new("t1");
    options.session = Some("renamed".into());
    let (events, report) = run_with(&current(), &options);
    assert_eq!(report.sessions, ["renamed"]);
    let Payload::SessionStarted(s) = &events[0].payload else {
        unreachable!()
    };
    assert_eq!(s.extra["source_session_id"], SESSION);
}

fn record_error(lines: &[String]) -> (Position, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rollout.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    match convert(
        &Source::new(&path),
        Format::Codex,
        &ImportOptions::new("t1"),
        &mut |_| Ok(()),
    ) {
        Err(Error::Record {
            file,
            position,
            message,
        }) => {
            assert!(file.ends_with("rollout.jsonl"));
            (position, message)
        }
        other => panic!("expected a record error, got {other:?}"),
    }
}

fn line(ty: &str, payload: Value) -> String {
    json!({"timestamp": "2025-10-01T10:00:00Z", "type": ty, "payload": payload}).to_string()
}

#[test]
fn a_malformed_line_is_an_error_naming_it() {
    let meta = line("session_meta", json!({"id": "s1"}));
    let user = line(
        "response_item",
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
    );
    let (position, message) = record_error(&[meta.clone(), user.clone(), "{\"type\": ".into()]);
    assert_eq!(position, Position::Line(3));
    assert!(message.contains("not valid JSON"), "{message}");

    // Before the first turn context lines are held: still checked as they come.
    let no_payload =
        json!({"timestamp": "2025-10-01T10:00:00Z", "type": "response_item"}).to_string();
    let (position, message) = record_error(&[meta.clone(), user.clone(), no_payload]);
    assert_eq!(position, Position::Line(3));
    assert!(message.contains("needs a \"payload\" object"), "{message}");

    let no_call_id = line(
        "response_item",
        json!({"type": "function_call", "name": "shell", "arguments": "{}"}),
    );
    let (position, message) = record_error(&[meta.clone(), no_call_id]);
    assert_eq!(position, Position::Line(2));
    assert!(
        message.contains("\"function_call\" item without a \"call_id\""),
        "{message}"
    );

    let bad_time =
        json!({"timestamp": "soon", "type": "turn_context", "payload": {"model": "m"}}).to_string();
    let (position, message) = record_error(&[meta, bad_time]);
    assert_eq!(position, Position::Line(2));
    assert!(message.contains("not an RFC 3339 time"), "{message}");
}

#[test]
fn a_rollout_without_metadata_is_named_after_its_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rollout-x.jsonl");
    let lines = [
        line(
            "response_item",
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
        ),
        line("turn_context", json!({"model": "gpt-5-codex", "cwd": "/w"})),
        line(
            "response_item",
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}),
        ),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let (events, report) = run(&path);
    assert_eq!(report.sessions, ["rollout-x"]);
    let Payload::SessionStarted(s) = &events[0].payload else {
        unreachable!()
    };
    assert_eq!(s.model.model, "gpt-5-codex");
    assert_eq!(events[0].timestamp, events[1].timestamp);
    assert_eq!(responses(&events)[0].text, "hello");
}

/// A check goes on past a malformed line: the converter's state stays whole.
#[test]
fn a_check_lists_the_bad_lines_and_converts_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = [
        line("session_meta", json!({"id": "s1"})),
        line("turn_context", json!({"model": "gpt-5-codex"})),
        line(
            "response_item",
            json!({"type": "function_call", "name": "shell"}),
        ),
        "not json".to_owned(),
        line(
            "response_item",
            json!({"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}),
        ),
        line(
            "response_item",
            json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}),
        ),
    ];
    let path = dir.path().join("rollout.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let mut events = Vec::new();
    let (report, errors) = strata_import::check(
        &Source::new(&path),
        Format::Codex,
        &ImportOptions::new("t1"),
        &mut |e| {
            events.push(e);
            Ok(())
        },
        10,
    );
    let report = report.expect("checked");
    let positions: Vec<Position> = errors
        .iter()
        .map(|e| match e {
            Error::Record { position, .. } => position.clone(),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(positions, [Position::Line(3), Position::Line(4)]);
    assert_eq!((report.orphan_results, report.calls_without_result), (0, 0));
    let types: Vec<&str> = events.iter().map(|e| e.event_type().as_str()).collect();
    assert_eq!(
        types,
        [
            "SessionStarted",
            "ModelResponseReceived",
            "ToolCallFinished"
        ]
    );
}

/// A response's id depends on every item of its model call.
#[test]
fn a_changed_item_of_a_call_changes_its_response_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(current()).expect("fixture");
    let changed = text.replace("cat calc.py", "cat -n calc.py");
    assert_ne!(changed, text);
    let path = dir.path().join("rollout-changed.jsonl");
    std::fs::write(&path, changed).expect("write");
    let (before, _) = run(&current());
    let (after, _) = run(&path);
    let first_response = |events: &[Event]| {
        events
            .iter()
            .find(|e| matches!(e.payload, Payload::ModelResponseReceived(_)))
            .map(|e| e.event_id.clone())
            .expect("response")
    };
    assert_ne!(first_response(&before), first_response(&after));
    assert_eq!(
        before[1].event_id, after[1].event_id,
        "the developer prompt's"
    );
}
