//! The Claude Code importer on small invented sessions (`tests/fixtures/claude-code/`): a
//! session file with a subagent and a fork next to it, and an old-layout file whose sidechain
//! sits inline.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_core::{Event, Payload};
use strata_import::{convert, detect, Error, Format, ImportOptions, Position, Report, Source};

const SESSION: &str = "11111111-2222-4333-8444-555555555555";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude-code")
        .join(name)
}

fn main_file() -> PathBuf {
    fixture(&format!("{SESSION}.jsonl"))
}

fn run_with(path: &Path, options: &ImportOptions) -> (Vec<Event>, Report) {
    let mut events = Vec::new();
    let report = convert(&Source::new(path), Format::ClaudeCode, options, &mut |e| {
        events.push(e);
        Ok(())
    })
    .expect("converts");
    (events, report)
}

fn run(path: &Path) -> (Vec<Event>, Report) {
    run_with(path, &ImportOptions::new("t1"))
}

fn in_session<'a>(events: &'a [Event], session: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.session_id == session).collect()
}

fn response<'a>(
    events: &'a [Event],
    message_id: &str,
) -> &'a strata_core::payload::ModelResponseReceived {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::ModelResponseReceived(p) if p.message_id == message_id => Some(p),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no response {message_id}"))
}

fn finished<'a>(events: &'a [Event], call: &str) -> &'a strata_core::payload::ToolCallFinished {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::ToolCallFinished(p) if p.tool_call_id == call => Some(p),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result of {call}"))
}

fn prompt<'a>(
    events: &'a [Event],
    message_id: &str,
) -> (&'a Event, &'a strata_core::payload::UserPromptSubmitted) {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::UserPromptSubmitted(p) if p.message_id == message_id => Some((e, p)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no prompt {message_id}"))
}

fn position(events: &[Event], pred: impl Fn(&Event) -> bool) -> usize {
    events.iter().position(pred).expect("event present")
}

#[test]
fn detected_as_claude_code() {
    for path in [
        main_file(),
        fixture("old-layout.jsonl"),
        fixture(&format!("{SESSION}/subagents/agent-a1b2c3.jsonl")),
    ] {
        assert_eq!(
            detect(&Source::new(&path)).expect("detects"),
            Format::ClaudeCode
        );
    }
}

#[test]
fn every_session_starts_with_its_model() {
    let (events, report) = run(&main_file());
    let child = format!("{SESSION}/agent-a1b2c3");
    let fork = format!("{SESSION}/agent-acompact-f00d");
    assert_eq!(
        report.sessions,
        vec![SESSION.to_owned(), child.clone(), fork.clone()]
    );
    for (session, model) in [
        (SESSION, "claude-sonnet-4-20250514"),
        (child.as_str(), "claude-haiku-4-5-20251001"),
        (fork.as_str(), "claude-sonnet-4-20250514"),
    ] {
        let first = in_session(&events, session)[0];
        let Payload::SessionStarted(s) = &first.payload else {
            panic!("{session} starts with {:?}", first.event_type());
        };
        assert_eq!(s.model.model, model);
        assert_eq!(s.model.provider, "anthropic");
        assert_eq!(s.cwd.as_deref(), Some("/work/greeter"));
    }
    let Payload::SessionStarted(s) = &in_session(&events, &child)[0].payload else {
        unreachable!()
    };
    assert_eq!(s.extra["parent_session_id"], SESSION);
    assert_eq!(s.extra["agent_type"], "general-purpose");
    assert_eq!(s.extra["description"], "Check style");
    let Payload::SessionStarted(s) = &in_session(&events, &fork)[0].payload else {
        unreachable!()
    };
    assert_eq!(s.extra["fork"], true);
    assert_eq!(report.event_count(), events.len() as u64);
}

#[test]
fn one_response_per_message_with_all_its_calls() {
    let (events, _) = run(&main_file());
    let a = response(&events, "msg_A");
    assert_eq!(a.text, "I'll read the file.");
    assert_eq!(a.tool_calls.len(), 1);
    assert_eq!(a.tool_calls[0].name, "Read");
    assert_eq!(a.tool_calls[0].args["file_path"], "/work/greeter/greet.py");
    assert_eq!(a.model_run_id.as_deref(), Some("req_msg_A"));
    // Thinking is kept beside the text, never in it.
    assert_eq!(a.extra["thinking"], "Read the file first.");
    assert!(!a.text.contains("Read the file first"));
    // The last line's usage is the message's.
    let usage = a.usage.as_ref().expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (100, 20));
    assert_eq!(usage.extra["cache_read_input_tokens"], 40);
    // msg_C's lines had a result between them: one response with both calls, the result after.
    let c = response(&events, "msg_C");
    let names: Vec<&str> = c.tool_calls.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Write", "Bash"]);
    let call = position(
        &events,
        |e| matches!(&e.payload, Payload::ModelResponseReceived(p) if p.message_id == "msg_C"),
    );
    let result = position(
        &events,
        |e| matches!(&e.payload, Payload::ToolCallFinished(p) if p.tool_call_id == "toolu_write1"),
    );
    assert!(call < result);
    let responses = events
        .iter()
        .filter(|e| e.session_id == SESSION && e.event_type().as_str() == "ModelResponseReceived")
        .count();
    assert_eq!(
        responses, 7,
        "msg_A..msg_G, the synthetic message is not one"
    );
    // A message of another model than the session's says so.
    assert_eq!(
        response(&events, "msg_F").extra["model"],
        "claude-opus-4-20250514"
    );
    assert!(!response(&events, "msg_A").extra.contains_key("model"));
}

#[test]
fn results_pair_with_their_calls() {
    let (events, report) = run(&main_file());
    let bash = finished(&events, "toolu_bash1");
    assert!(bash.is_error);
    assert_eq!(bash.output.as_deref(), Some("1 failed"));
    assert!(!finished(&events, "toolu_read1").is_error);
    // The result nobody asked for is kept, and counted; the call nobody answered too.
    assert_eq!(
        finished(&events, "toolu_orphan").output.as_deref(),
        Some("a result nobody asked for")
    );
    assert_eq!(report.orphan_results, 1);
    assert_eq!(report.calls_without_result, 1);
    assert_eq!(report.unmapped["tool result block \"image\""], 1);
}

#[test]
fn file_tools_give_file_events() {
    let (events, _) = run(&main_file());
    let files: Vec<(&str, &str, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::FileRead(p) => Some(("read", p.path.as_str(), String::new())),
            Payload::FileWritten(p) => Some((
                "written",
                p.path.as_str(),
                p.summary.clone().unwrap_or_default(),
            )),
            Payload::DiffApplied(p) => Some(("diff", p.path.as_str(), p.diff.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    assert_eq!(files[0], ("read", "/work/greeter/greet.py", String::new()));
    // Edit: the structured patch, with its positions.
    assert_eq!(files[1].0, "diff");
    assert!(
        files[1].2.contains("@@ -1,2 +1,2 @@\n-def greet():\n"),
        "{}",
        files[1].2
    );
    assert!(files[1]
        .2
        .starts_with("--- /work/greeter/greet.py\n+++ /work/greeter/greet.py\n"));
    // Write of a new file.
    assert_eq!(
        files[2],
        (
            "written",
            "/work/greeter/test_greet.py",
            "created".to_owned()
        )
    );
    // MultiEdit without a structured patch: the diff of its old and new strings.
    assert_eq!(
        files[3].2,
        "--- /work/greeter/greet.py\n+++ /work/greeter/greet.py\n@@ @@\n-Hello\n+Hi\n"
    );
    // A file event follows its result, and names the call.
    let diff = events
        .iter()
        .find(|e| matches!(e.payload, Payload::DiffApplied(_)))
        .expect("diff");
    let Payload::DiffApplied(d) = &diff.payload else {
        unreachable!()
    };
    assert_eq!(d.extra["tool_call_id"], "toolu_edit1");
    // The failed Bash call gives none, nor does the unanswered Read.
    assert!(!files.iter().any(|f| f.1.ends_with("README.md")));
}

#[test]
fn a_subagent_is_a_child_session_between_its_start_and_its_report() {
    let (events, _) = run(&main_file());
    let child = format!("{SESSION}/agent-a1b2c3");
    let started = position(&events, |e| {
        matches!(e.payload, Payload::SubagentStarted(_))
    });
    let Payload::SubagentStarted(s) = &events[started].payload else {
        unreachable!()
    };
    assert_eq!(events[started].session_id, SESSION);
    assert_eq!(s.child_session_id, child);
    assert_eq!(
        s.task.as_deref(),
        Some("Check greet.py for style problems.")
    );
    assert_eq!(s.extra["tool_call_id"], "toolu_agent1");
    assert_eq!(s.extra["subagent_type"], "general-purpose");
    let ended = position(&events, |e| {
        matches!(e.payload, Payload::SubagentFinished(_))
    });
    let Payload::SubagentFinished(f) = &events[ended].payload else {
        unreachable!()
    };
    assert_eq!(events[ended].session_id, SESSION);
    assert_eq!(f.child_session_id, child);
    assert_eq!(f.report, "No style problems found.");
    assert_eq!(f.status, "succeeded");
    assert_eq!(f.extra["total_tokens"], 1234);
    let child_events: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].session_id == child)
        .collect();
    assert_eq!(
        child_events.len(),
        5,
        "started, prompt, two responses, one result"
    );
    assert!(child_events.iter().all(|&i| started < i && i < ended));
    let (_, p) = prompt(&events, "s-u1");
    assert_eq!(p.text, "Check greet.py for style problems.");
    assert_eq!(
        finished(&events, "toolu_sub1").output.as_deref(),
        Some("greet.py:1:def greet(name):")
    );
}

#[test]
fn a_fork_is_imported_without_the_lines_it_copied() {
    let (events, report) = run(&main_file());
    let fork = format!("{SESSION}/agent-acompact-f00d");
    let types: Vec<&str> = in_session(&events, &fork)
        .iter()
        .map(|e| e.event_type().as_str())
        .collect();
    assert_eq!(
        types,
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived"
        ]
    );
    assert_eq!(report.unmapped["line a fork copied from its parent"], 2);
    // Nothing of a fork reaches its parent through a tool result: no subagent events for it.
    assert!(!events.iter().any(|e| match &e.payload {
        Payload::SubagentStarted(s) => s.child_session_id == fork,
        _ => false,
    }));
}

#[test]
fn compaction_summary_is_a_marked_prompt_with_its_boundary() {
    let (events, _) = run(&main_file());
    let (e, p) = prompt(&events, "cs1");
    assert!(p.text.contains("Summary: greet() now takes a name."));
    assert_eq!(e.actor.as_deref(), Some("platform"));
    assert_eq!(p.extra["compact_summary"], true);
    let b = &p.extra["compact_boundary"];
    assert_eq!(b["trigger"], "manual");
    assert_eq!(b["pre_tokens"], 9000);
    assert_eq!(b["uuid"], "cb1");
    assert!(!events.iter().any(|e| e.is_derived()));
}

#[test]
fn prompts_meta_lines_and_what_is_not_mapped() {
    let (events, report) = run(&main_file());
    let (e, p) = prompt(&events, "u1");
    assert_eq!(p.text, "Add a greeting function to greet.py");
    assert_eq!(e.actor.as_deref(), Some("user"));
    assert_eq!(e.timestamp.to_rfc3339(), "2026-03-01T10:00:00.100+00:00");
    assert_eq!(e.extra["source"]["uuid"], "u1");
    let (e, p) = prompt(&events, "m1");
    assert_eq!(e.actor.as_deref(), Some("platform"));
    assert_eq!(p.extra["meta"], true);
    let (_, p) = prompt(&events, "u2");
    assert_eq!(p.text, "Thanks!");
    for (kind, n) in [
        ("line type \"summary\"", 1),
        ("line type \"file-history-snapshot\"", 1),
        ("line type \"progress\"", 1),
        ("line type \"queue-operation\"", 1),
        ("system subtype \"turn_duration\"", 1),
        ("synthetic assistant message (API error or notice)", 1),
        ("content block \"image\"", 1),
    ] {
        assert_eq!(
            report.unmapped.get(kind),
            Some(&n),
            "{kind}: {:?}",
            report.unmapped
        );
    }
    assert_eq!(
        report.records,
        29 + 4 + 4,
        "the session's lines and its two subagent files'"
    );
}

#[test]
fn inline_sidechain_of_the_old_layout_is_a_child_session() {
    let (events, report) = run(&fixture("old-layout.jsonl"));
    let parent = "0ld5e551-0000-4000-8000-000000000001";
    let child = format!("{parent}/sidechain-o-s1");
    assert_eq!(report.sessions, vec![parent.to_owned(), child.clone()]);
    let Payload::SubagentStarted(s) = &events
        .iter()
        .find(|e| matches!(e.payload, Payload::SubagentStarted(_)))
        .expect("started")
        .payload
    else {
        unreachable!()
    };
    assert_eq!(s.child_session_id, child);
    assert_eq!(s.extra["tool_call_id"], "toolu_task1");
    let types: Vec<&str> = in_session(&events, &child)
        .iter()
        .map(|e| e.event_type().as_str())
        .collect();
    assert_eq!(
        types,
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived"
        ]
    );
    let Payload::SessionStarted(start) = &in_session(&events, &child)[0].payload else {
        unreachable!()
    };
    assert_eq!(start.model.model, "claude-sonnet-4-20250514");
    assert_eq!(start.extra["parent_session_id"], parent);
    let f = events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::SubagentFinished(f) => Some(f),
            _ => None,
        })
        .expect("finished");
    assert_eq!(
        (f.report.as_str(), f.status.as_str()),
        ("Found 2 TODOs.", "succeeded")
    );
    assert_eq!(report.orphan_results, 0);
    assert_eq!(report.calls_without_result, 0);
}

#[test]
fn ids_are_stable_unique_and_events_round_trip() {
    let (first, _) = run(&main_file());
    let (second, _) = run(&main_file());
    let ids = |events: &[Event]| {
        events
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), ids(&second));
    let unique: HashSet<String> = ids(&first).into_iter().collect();
    assert_eq!(unique.len(), first.len());
    for e in first.iter().chain(&run(&fixture("old-layout.jsonl")).0) {
        let back = Event::from_json(e.to_json(), None).expect("valid event");
        assert_eq!(&back, e);
    }
}

#[test]
fn a_subagent_file_on_its_own_is_the_same_child_session() {
    let (through_parent, _) = run(&main_file());
    let child = format!("{SESSION}/agent-a1b2c3");
    let (alone, report) = run(&fixture(&format!("{SESSION}/subagents/agent-a1b2c3.jsonl")));
    assert_eq!(report.sessions, vec![child.clone()]);
    let ids = |events: Vec<&Event>| {
        events
            .into_iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(in_session(&through_parent, &child)),
        ids(alone.iter().collect())
    );
}

#[test]
fn the_session_option_names_the_session_and_its_children() {
    let mut options = ImportOptions::new("t1");
    options.session = Some("renamed".into());
    let (events, report) = run_with(&main_file(), &options);
    assert_eq!(
        report.sessions,
        [
            "renamed",
            "renamed/agent-a1b2c3",
            "renamed/agent-acompact-f00d"
        ]
    );
    let Payload::SessionStarted(s) = &events[0].payload else {
        unreachable!()
    };
    assert_eq!(s.extra["source_session_id"], SESSION);
}

/// A file that grew (a live session) keeps the ids of what it had.
#[test]
fn a_grown_file_keeps_the_ids_of_its_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(main_file()).expect("fixture");
    let prefix: String = text.lines().take(9).map(|l| format!("{l}\n")).collect();
    let short = dir.path().join(format!("{SESSION}.jsonl"));
    std::fs::write(&short, prefix).expect("write");
    let (before, _) = run(&short);
    let (after, _) = run(&main_file());
    let after: HashSet<&str> = after.iter().map(|e| e.event_id.as_str()).collect();
    assert!(before.len() > 5);
    assert!(before.iter().all(|e| after.contains(e.event_id.as_str())));
}

fn write_lines(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create");
    for l in lines {
        writeln!(f, "{l}").expect("write");
    }
    path
}

fn record_error(path: &Path) -> (String, Position, String) {
    match convert(
        &Source::new(path),
        Format::ClaudeCode,
        &ImportOptions::new("t1"),
        &mut |_| Ok(()),
    ) {
        Err(Error::Record {
            file,
            position,
            message,
        }) => (file, position, message),
        other => panic!("expected a record error, got {other:?}"),
    }
}

#[test]
fn a_malformed_line_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = serde_json::json!({"type": "user", "sessionId": "s", "uuid": "u1",
        "message": {"role": "user", "content": "hi"}});
    let path = dir.path().join("broken.jsonl");
    std::fs::write(&path, format!("{user}\n{{\"type\": \"assistant\",\n")).expect("write");
    let (file, position, message) = record_error(&path);
    assert!(file.ends_with("broken.jsonl"));
    assert_eq!(position, Position::Line(2));
    assert!(message.contains("not valid JSON"), "{message}");

    let no_id = serde_json::json!({"type": "assistant", "sessionId": "s", "uuid": "a1",
        "message": {"id": "m1", "model": "claude-x", "content": [{"type": "tool_use", "name": "Read", "input": {}}]}});
    let path = write_lines(dir.path(), "no-id.jsonl", &[user.clone(), no_id]);
    let (_, position, message) = record_error(&path);
    assert_eq!(position, Position::Line(2));
    assert!(
        message.contains("tool_use block without an \"id\""),
        "{message}"
    );

    let no_message = serde_json::json!({"type": "user", "sessionId": "s", "uuid": "u2"});
    let path = write_lines(
        dir.path(),
        "no-message.jsonl",
        &[user.clone(), user.clone(), no_message],
    );
    let (_, position, message) = record_error(&path);
    assert_eq!(position, Position::Line(3));
    assert!(message.contains("needs a \"message\" object"), "{message}");

    let bad_time = serde_json::json!({"type": "user", "sessionId": "s", "uuid": "u3",
        "timestamp": "yesterday", "message": {"role": "user", "content": "hi"}});
    let path = write_lines(dir.path(), "bad-time.jsonl", &[bad_time]);
    let (_, _, message) = record_error(&path);
    assert!(message.contains("not an RFC 3339 time"), "{message}");
}

#[test]
fn a_malformed_subagent_line_names_the_subagent_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = serde_json::json!({"type": "user", "sessionId": "s1", "uuid": "u1",
        "message": {"role": "user", "content": "go"}});
    let call = serde_json::json!({"type": "assistant", "sessionId": "s1", "uuid": "a1",
        "message": {"id": "m1", "model": "claude-x", "content": [
            {"type": "tool_use", "id": "t1", "name": "Agent", "input": {"prompt": "look around"}}]}});
    let next = serde_json::json!({"type": "assistant", "sessionId": "s1", "uuid": "a2",
        "message": {"id": "m2", "model": "claude-x", "content": [{"type": "text", "text": "ok"}]}});
    let path = write_lines(dir.path(), "s1.jsonl", &[user, call, next]);
    let sub = dir.path().join("s1/subagents");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let first = serde_json::json!({"type": "user", "sessionId": "s1", "isSidechain": true,
        "agentId": "x", "uuid": "x1", "message": {"role": "user", "content": "look around"}});
    std::fs::write(sub.join("agent-x.jsonl"), format!("{first}\nnot json\n")).expect("write");
    let (file, position, message) = record_error(&path);
    assert!(file.ends_with("s1.jsonl"));
    assert_eq!(
        position,
        Position::Line(3),
        "the parent line whose import read it"
    );
    assert!(
        message.contains("agent-x.jsonl:2: not valid JSON"),
        "{message}"
    );
}

/// Two calls given the same task: their results name their agents, and link them.
#[test]
fn the_same_task_twice_is_linked_by_the_agent_ids_of_the_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let call = |id: &str, uuid: &str| {
        serde_json::json!({"type": "assistant", "sessionId": "s2", "uuid": uuid,
            "message": {"id": "m1", "model": "claude-x", "content": [
                {"type": "tool_use", "id": id, "name": "Agent", "input": {"prompt": "look around"}}]}})
    };
    let result = |id: &str, agent: &str, report: &str| {
        serde_json::json!({"type": "user", "sessionId": "s2", "uuid": format!("r-{id}"),
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": report}]}]},
            "toolUseResult": {"status": "completed", "agentId": agent}})
    };
    let path = write_lines(
        dir.path(),
        "s2.jsonl",
        &[
            serde_json::json!({"type": "user", "sessionId": "s2", "uuid": "u1",
                "message": {"role": "user", "content": "go"}}),
            call("t1", "a1"),
            call("t2", "a2"),
            result("t1", "bbb", "report of bbb"),
            result("t2", "aaa", "report of aaa"),
            serde_json::json!({"type": "assistant", "sessionId": "s2", "uuid": "a3",
                "message": {"id": "m2", "model": "claude-x", "content": [{"type": "text", "text": "done"}]}}),
        ],
    );
    let sub = dir.path().join("s2/subagents");
    std::fs::create_dir_all(&sub).expect("mkdir");
    for (agent, time) in [
        ("aaa", "2026-01-01T00:00:01Z"),
        ("bbb", "2026-01-01T00:00:02Z"),
    ] {
        let first = serde_json::json!({"type": "user", "sessionId": "s2", "isSidechain": true,
            "agentId": agent, "uuid": format!("{agent}-1"), "timestamp": time,
            "message": {"role": "user", "content": "look around"}});
        write_lines(&sub, &format!("agent-{agent}.jsonl"), &[first]);
    }
    let (events, report) = run(&path);
    let links: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::SubagentStarted(s) => Some((
                s.extra["tool_call_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                s.child_session_id.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        links,
        [
            ("t1".to_owned(), "s2/agent-bbb".to_owned()),
            ("t2".to_owned(), "s2/agent-aaa".to_owned())
        ]
    );
    let reports: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::SubagentFinished(f) => Some((f.child_session_id.as_str(), f.report.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reports,
        [
            ("s2/agent-bbb", "report of bbb"),
            ("s2/agent-aaa", "report of aaa")
        ]
    );
    assert_eq!(report.sessions, ["s2", "s2/agent-bbb", "s2/agent-aaa"]);
}

/// A response's id depends on every line of its message; other events keep theirs.
#[test]
fn a_changed_line_of_a_message_changes_its_response_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(main_file()).expect("fixture");
    let changed = text.replace("I'll read the file.", "I will read the file.");
    assert_ne!(changed, text);
    let path = dir.path().join(format!("{SESSION}.jsonl"));
    std::fs::write(&path, changed).expect("write");
    let (before, _) = run(&main_file());
    let (after, _) = run(&path);
    let id = |events: &[Event], pred: &dyn Fn(&Payload) -> bool| {
        events
            .iter()
            .find(|e| pred(&e.payload))
            .map(|e| e.event_id.clone())
            .expect("event")
    };
    let msg_a =
        |p: &Payload| matches!(p, Payload::ModelResponseReceived(r) if r.message_id == "msg_A");
    let u1 = |p: &Payload| matches!(p, Payload::UserPromptSubmitted(u) if u.message_id == "u1");
    assert_ne!(id(&before, &msg_a), id(&after, &msg_a));
    assert_eq!(id(&before, &u1), id(&after, &u1));
}

/// A check goes on past a malformed line: the converter's state stays whole.
#[test]
fn a_check_lists_the_bad_lines_and_converts_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = serde_json::json!({"type": "user", "sessionId": "s3", "uuid": "u1",
        "message": {"role": "user", "content": "hi"}});
    let no_id = serde_json::json!({"type": "assistant", "sessionId": "s3", "uuid": "a0",
        "message": {"id": "m0", "model": "claude-x", "content": [{"type": "tool_use", "name": "Read"}]}});
    let call = serde_json::json!({"type": "assistant", "sessionId": "s3", "uuid": "a1",
        "message": {"id": "m1", "model": "claude-x", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}});
    let result = serde_json::json!({"type": "user", "sessionId": "s3", "uuid": "r1",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}});
    let path = dir.path().join("s3.jsonl");
    std::fs::write(
        &path,
        format!("{user}\n{no_id}\nnot json\n{call}\n{result}\n"),
    )
    .expect("write");
    let mut events = Vec::new();
    let (report, errors) = strata_import::check(
        &Source::new(&path),
        Format::ClaudeCode,
        &ImportOptions::new("t1"),
        &mut |e| {
            events.push(e);
            Ok(())
        },
        10,
    );
    let report = report.expect("checked");
    let lines: Vec<Position> = errors
        .iter()
        .map(|e| match e {
            Error::Record { position, .. } => position.clone(),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(lines, [Position::Line(2), Position::Line(3)]);
    assert_eq!(report.orphan_results, 0);
    assert_eq!(report.calls_without_result, 0);
    let types: Vec<&str> = events.iter().map(|e| e.event_type().as_str()).collect();
    assert_eq!(
        types,
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished"
        ]
    );
}
