//! The SWE-agent and mini-swe-agent importers over small invented fixtures of every
//! generation they read.

use serde_json::json;
use strata_core::{Event, Payload};
use strata_import::{detect, Error, Format, Position, Source};

mod common;
use common::*;

/// The one call of a response: (id, name, command).
fn call(e: &Event) -> (&str, &str, &serde_json::Value) {
    let calls = &response(e).tool_calls;
    assert_eq!(calls.len(), 1, "one call");
    (&calls[0].tool_call_id, &calls[0].name, &calls[0].args)
}

#[test]
fn swe_agent_legacy_history_pairs_actions_by_position() {
    let (events, report) = run("swe-agent", "legacy.traj", Format::SweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
        ]
    );
    assert!(events.iter().all(|e| e.session_id == "legacy"));
    let start = started(&events[0]);
    // `replay_config` is a JSON string before 1.0.
    assert_eq!(start.model.model, "gpt4");
    assert!(start
        .system_prompt
        .as_deref()
        .is_some_and(|p| p.starts_with("SETTING:")));
    assert_eq!(start.extra["info"]["exit_status"], "submitted");
    assert_eq!(start.extra["environment"], "swe_main");
    // The demonstration is what the model read, marked.
    match &events[1].payload {
        Payload::UserPromptSubmitted(p) => assert_eq!(p.extra["is_demo"], true),
        _ => unreachable!(),
    }
    assert!(prompt(&events[2]).starts_with("ISSUE:"));
    let (id, name, args) = call(&events[3]);
    assert_eq!((id, name), ("call-history.3", "bash"));
    assert_eq!(args, &json!({"command": "open calc.py"}));
    assert!(response(&events[3]).text.contains("```\nopen calc.py\n```"));
    assert_eq!(result(&events[4]).tool_call_id, "call-history.3");
    assert!(result(&events[4])
        .output
        .as_deref()
        .is_some_and(|o| o.contains("return a - b")));
    // The history stops at `submit`: the trajectory's last step gives its observation.
    let (submit, _, args) = call(&events[7]);
    assert_eq!(args, &json!({"command": "submit"}));
    let last = result(&events[8]);
    assert_eq!(last.tool_call_id, submit);
    assert!(last
        .output
        .as_deref()
        .is_some_and(|o| o.contains("diff --git")));
    assert_eq!(last.extra["from_trajectory"], true);
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(report.orphan_results, 0);
    assert!(report.unmapped.is_empty(), "{:?}", report.unmapped);
}

#[test]
fn swe_agent_function_calling_pairs_by_id_and_adds_the_final_step() {
    let (events, report) = run("swe-agent", "function-calling.traj", Format::SweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
        ]
    );
    let start = started(&events[0]);
    assert_eq!(start.model.model, "claude-sonnet-4-20250514");
    assert_eq!(start.model.provider, "anthropic");
    let (id, name, args) = call(&events[2]);
    assert_eq!((id, name), ("call_f1", "find_file"));
    assert_eq!(args, &json!({"file_name": "calc.py"}));
    assert_eq!(result(&events[3]).tool_call_id, "call_f1");
    assert_eq!(result(&events[5]).tool_call_id, "call_b2");
    // 1.0 writes no history message for the closing submit: it comes from the trajectory.
    let closing = response(&events[6]);
    assert_eq!(closing.text, "Submitting.");
    assert_eq!(closing.extra["from_trajectory"], true);
    let (id, _, args) = call(&events[6]);
    assert_eq!(args, &json!({"command": "submit"}));
    assert_eq!(result(&events[7]).tool_call_id, id);
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(report.orphan_results, 0);
}

#[test]
fn swe_agent_without_history_imports_the_trajectory() {
    let (events, report) = run("swe-agent", "trajectory-only.traj", Format::SweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
        ]
    );
    assert_eq!(started(&events[0]).model.model, "unknown");
    assert_eq!(
        started(&events[0]).extra["info"]["exit_status"],
        "exit_cost"
    );
    let (id, _, args) = call(&events[1]);
    assert_eq!(args, &json!({"command": "ls"}));
    assert_eq!(result(&events[2]).tool_call_id, id);
    assert_eq!(result(&events[2]).output.as_deref(), Some("a.txt\nb.txt"));
    // A step without an action calls nothing.
    assert!(response(&events[3]).tool_calls.is_empty());
    assert_eq!(report.calls_without_result, 0);
}

#[test]
fn mini_v1_parses_the_one_bash_block_and_reads_return_codes() {
    let (events, report) = run("mini-swe-agent", "v1.traj.json", Format::MiniSweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
        ]
    );
    // The session is the instance.
    assert!(events.iter().all(|e| e.session_id == "acme__calc-1"));
    let start = started(&events[0]);
    assert_eq!(start.model.model, "anthropic/claude-sonnet-4-5");
    assert_eq!(start.extra["info"]["exit_status"], "Submitted");
    assert!(start.system_prompt.is_some());
    let (id, name, args) = call(&events[2]);
    assert_eq!((id, name), ("call-messages.2", "bash"));
    assert_eq!(args, &json!({"command": "cat calc.py"}));
    let first = response(&events[2]);
    assert_eq!(first.extra["reasoning"], "The bug is probably in add().");
    assert_eq!(first.usage.as_ref().map(|u| u.input_tokens), Some(100));
    // The observation is kept as the model saw it.
    let seen = result(&events[3]);
    assert!(seen
        .output
        .as_deref()
        .is_some_and(|o| o.starts_with("<returncode>0</returncode>")));
    assert!(!seen.is_error);
    // Two blocks: no call, and the format error is a prompt — the harness's, not the user's.
    assert!(response(&events[4]).tool_calls.is_empty());
    assert!(prompt(&events[5]).starts_with("Please always provide"));
    assert_eq!(events[5].actor.as_deref(), Some("platform"));
    assert_eq!(
        events[1].actor.as_deref(),
        Some("user"),
        "the task is the user's"
    );
    assert!(result(&events[7]).is_error, "return code 1");
    assert!(result(&events[9]).is_error, "timeout");
    // The submission answers the submit command.
    let (submit, _, _) = call(&events[10]);
    assert_eq!(result(&events[11]).tool_call_id, submit);
    assert!(!result(&events[11]).is_error);
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(report.orphan_results, 0);
    // Responses are timed by the provider: the task before the first is dated by it.
    let t0 = chrono::DateTime::from_timestamp(1_750_000_000, 0).expect("time");
    assert_eq!(events[0].timestamp, t0);
    assert_eq!(events[1].timestamp, t0);
    assert_eq!(events[3].timestamp, t0);
    assert_eq!(events[4].timestamp - t0, chrono::Duration::seconds(10));
}

#[test]
fn mini_v2_pairs_tool_calls_and_the_exit_message() {
    let (events, report) = run("mini-swe-agent", "v2.traj.json", Format::MiniSweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "ToolCallFinished",
        ]
    );
    assert_eq!(started(&events[0]).model.model, "openai/gpt-5-mini");
    let (id, _, args) = call(&events[2]);
    assert_eq!(id, "call_1");
    assert_eq!(args, &json!({"command": "cat calc.py"}));
    assert_eq!(response(&events[2]).text, "Reading first.");
    assert_eq!(response(&events[2]).extra["reasoning"], "step 1");
    assert!(!result(&events[3]).is_error);
    match &events[4].payload {
        Payload::UserPromptSubmitted(p) => assert_eq!(p.extra["interrupt_type"], "FormatError"),
        _ => unreachable!(),
    }
    assert!(result(&events[6]).is_error, "return code 2");
    assert!(result(&events[8]).is_error, "exception");
    // The exit message is the submit command's output.
    let exit = result(&events[10]);
    assert_eq!(exit.tool_call_id, "call_4");
    assert_eq!(exit.extra["exit_status"], "Submitted");
    assert!(exit
        .output
        .as_deref()
        .is_some_and(|o| o.starts_with("diff --git")));
    assert_eq!(report.calls_without_result, 0);
    assert_eq!(report.orphan_results, 0);
    // Real times, microseconds kept; the leading messages take the first one.
    let first = events[2].timestamp;
    assert_eq!(first.timestamp_subsec_micros(), 250_000);
    assert_eq!(events[0].timestamp, first);
    assert!(events.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
}

#[test]
fn mini_bare_list_is_told_by_its_file_name() {
    let (events, report) = run("mini-swe-agent", "bare.traj.json", Format::MiniSweAgent);
    assert_eq!(
        types(&events),
        [
            "SessionStarted",
            "UserPromptSubmitted",
            "ModelResponseReceived",
            "ToolCallFinished",
            "ModelResponseReceived",
            "UserPromptSubmitted",
        ]
    );
    assert!(events.iter().all(|e| e.session_id == "bare"));
    let (_, _, args) = call(&events[2]);
    assert_eq!(args, &json!({"command": "echo hello"}));
    assert_eq!(report.orphan_results, 0);
}

#[test]
fn ids_are_stable_and_follow_the_record() {
    let path = fixture("swe-agent", "legacy.traj");
    let (a, _) = run_path(&path, Format::SweAgent).expect("converts");
    let (b, _) = run_path(&path, Format::SweAgent).expect("converts");
    let ids = |e: &[Event]| e.iter().map(|e| e.event_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    let unique: std::collections::HashSet<_> = ids(&a).into_iter().collect();
    assert_eq!(unique.len(), a.len());

    // Another issue text: only the task prompt's event changes.
    let dir = tempfile::tempdir().expect("tempdir");
    let changed = dir.path().join("legacy.traj");
    let text = std::fs::read_to_string(&path).expect("fixture");
    std::fs::write(
        &changed,
        text.replace("add() subtracts.", "add() is wrong."),
    )
    .expect("write");
    let (c, _) = run_path(&changed, Format::SweAgent).expect("converts");
    let differ: Vec<usize> = (0..a.len())
        .filter(|&i| a[i].event_id != c[i].event_id)
        .collect();
    assert_eq!(differ, [2]);

    // Another exit status (in the header): the session start changes, nothing else.
    std::fs::write(&changed, text.replace("\"submitted\"", "\"exit_cost\"")).expect("write");
    let (d, _) = run_path(&changed, Format::SweAgent).expect("converts");
    let differ: Vec<usize> = (0..a.len())
        .filter(|&i| a[i].event_id != d[i].event_id)
        .collect();
    assert_eq!(differ, [0]);
}

#[test]
fn malformed_entries_are_errors_naming_the_position() {
    match run_path(&fixture("swe-agent", "bad-entry.traj"), Format::SweAgent) {
        Err(Error::Record {
            position, message, ..
        }) => {
            assert_eq!(
                position,
                Position::Element {
                    field: Some("history".into()),
                    index: 1
                }
            );
            assert!(message.contains("role"), "{message}");
        }
        other => panic!("expected a record error, got {other:?}"),
    }
    match run_path(
        &fixture("mini-swe-agent", "bad-tool.traj.json"),
        Format::MiniSweAgent,
    ) {
        Err(Error::Record {
            position, message, ..
        }) => {
            assert_eq!(
                position,
                Position::Element {
                    field: Some("messages".into()),
                    index: 3
                }
            );
            assert!(message.contains("tool_call_id"), "{message}");
        }
        other => panic!("expected a record error, got {other:?}"),
    }
}

#[test]
fn invalid_json_is_a_file_error() {
    let path = fixture("swe-agent", "broken.traj");
    match run_path(&path, Format::SweAgent) {
        Err(Error::File { message, .. }) => assert!(message.contains("line 5"), "{message}"),
        other => panic!("expected a file error, got {other:?}"),
    }
    assert!(matches!(
        detect(&Source::new(&path)),
        Err(Error::File { .. })
    ));
}

#[test]
fn the_wrong_one_of_the_two_formats_says_so() {
    match run_path(&fixture("swe-agent", "legacy.traj"), Format::MiniSweAgent) {
        Err(Error::Record { message, .. }) => assert!(message.contains("swe-agent"), "{message}"),
        other => panic!("expected a record error, got {other:?}"),
    }
    match run_path(&fixture("mini-swe-agent", "v1.traj.json"), Format::SweAgent) {
        Err(Error::Record { message, .. }) => {
            assert!(message.contains("mini-swe-agent"), "{message}")
        }
        other => panic!("expected a record error, got {other:?}"),
    }
}

#[test]
fn a_run_without_steps_still_starts_and_a_file_without_a_run_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.traj");
    let run = json!({"environment": "main", "history": [], "trajectory": [],
                     "info": {"exit_status": "early_exit"}});
    std::fs::write(&empty, run.to_string()).expect("write");
    let (events, _) = run_path(&empty, Format::SweAgent).expect("converts");
    assert_eq!(types(&events), ["SessionStarted"]);
    assert_eq!(
        started(&events[0]).extra["info"]["exit_status"],
        "early_exit"
    );

    let other = dir.path().join("other.traj");
    std::fs::write(&other, json!({"name": "not a run"}).to_string()).expect("write");
    match run_path(&other, Format::SweAgent) {
        Err(Error::File { message, .. }) => assert!(message.contains("history"), "{message}"),
        other => panic!("expected a file error, got {other:?}"),
    }
}
