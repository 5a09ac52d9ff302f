//! The projection fold: tool pairing, recovery state, orphans, branches.

use serde_json::json;
use strata_core::projection::{
    apply, apply_forked, branch_at, fork_needs_history, Change, LogPosition, SessionFold,
    ToolStatus,
};
use strata_core::tokens::O200k;
use strata_core::Event;

fn ev(n: u64, branch: &str, ty: &str, payload: serde_json::Value) -> Event {
    let mut e = Event::from_json(
        json!({"event_id": format!("e{n}"), "tenant_id": "t", "session_id": "s", "branch_id": branch,
            "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload}),
        None,
    )
    .unwrap();
    e.seq = Some(n);
    e
}

fn fold(events: &[Event]) -> (SessionFold, Vec<Change>) {
    let mut f = SessionFold::new("t", "s");
    let mut all = Vec::new();
    for (i, e) in events.iter().enumerate() {
        all.extend(apply(
            &mut f,
            e,
            LogPosition {
                partition: 0,
                offset: i as u64,
            },
            None,
            &O200k,
        ));
    }
    (f, all)
}

#[test]
fn calls_pair_with_results_and_errors_are_recovery_state_until_fixed() {
    let (f, changes) = fold(&[
        ev(
            1,
            "main",
            "ModelResponseReceived",
            json!({"message_id": "a", "text": "",
            "tool_calls": [{"tool_call_id": "c1", "name": "run_tests", "args": {}}]}),
        ),
        ev(
            2,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c1", "output": "error: test x failed", "is_error": true}),
        ),
        ev(
            3,
            "main",
            "ToolCallRequested",
            json!({"tool_call_id": "c2", "name": "run_tests", "args": {}}),
        ),
    ]);
    assert_eq!(f.open_tool_calls.keys().collect::<Vec<_>>(), vec!["c2"]);
    let state = &f.branches["main"].state;
    assert_eq!(state.errors.len(), 1);
    assert_eq!(state.errors[0].message, "error: test x failed");
    assert!(changes
        .iter()
        .any(|c| matches!(c, Change::ToolResult(r) if r.status == ToolStatus::Errored)));
    let (f, _) = fold(&[
        ev(
            1,
            "main",
            "ToolCallRequested",
            json!({"tool_call_id": "c1", "name": "run_tests", "args": {}}),
        ),
        ev(
            2,
            "main",
            "ToolCallFailed",
            json!({"tool_call_id": "c1", "error": "timeout", "retryable": true}),
        ),
        ev(
            3,
            "main",
            "ToolCallRequested",
            json!({"tool_call_id": "c2", "name": "run_tests", "args": {}}),
        ),
        ev(
            4,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c2", "output": "ok"}),
        ),
    ]);
    assert!(
        f.branches["main"].state.errors.is_empty(),
        "a success of the same tool resolves it"
    );
    assert_eq!(f.tool_failures, 1);
}

#[test]
fn a_result_without_a_call_is_an_orphan_not_a_pair() {
    let (f, changes) = fold(&[ev(
        1,
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "x", "output": "?"}),
    )]);
    assert_eq!(f.orphan_results, 1);
    assert!(!changes.iter().any(|c| matches!(c, Change::ToolResult(_))));
}

#[test]
fn a_fork_starts_from_the_parent_state_and_never_changes_it() {
    let (f, _) = fold(&[
        ev(1, "main", "StateUpdated", json!({"goal": "g1"})),
        ev(
            2,
            "main",
            "BranchForked",
            json!({"new_branch_id": "alt", "from_event_id": "e1"}),
        ),
        ev(3, "alt", "StateUpdated", json!({"goal": "g2"})),
        ev(4, "alt", "FileWritten", json!({"path": "a.rs"})),
    ]);
    assert_eq!(f.branches["main"].state.goal.as_ref().unwrap().text, "g1");
    assert!(f.branches["main"].state.files_modified.is_empty());
    assert_eq!(f.branches["alt"].state.goal.as_ref().unwrap().text, "g2");
    assert_eq!(f.branches["alt"].parent_branch_id.as_deref(), Some("main"));
    assert_eq!(f.branches["alt"].fork_seq, Some(2));
}

/// Folds as the projector does: a fork from an earlier event starts from [`branch_at`] its fork
/// point, folded again from the events before it.
fn fold_forking(events: &[Event]) -> SessionFold {
    let mut f = SessionFold::new("t", "s");
    for (i, e) in events.iter().enumerate() {
        let fork_seq = match &e.payload {
            strata_core::Payload::BranchForked(p) => events[..i]
                .iter()
                .find(|x| x.event_id == p.from_event_id)
                .and_then(|x| x.seq),
            _ => None,
        };
        let base = match fork_seq {
            Some(at) if fork_needs_history(&f, e) => {
                branch_at(&events[..i], &e.branch_id, at, &O200k)
            }
            _ => None,
        };
        let position = LogPosition {
            partition: 0,
            offset: i as u64,
        };
        apply_forked(&mut f, e, position, fork_seq, base, &O200k);
    }
    f
}

#[test]
fn a_fork_from_an_earlier_event_starts_from_the_parent_state_at_that_event() {
    let events = [
        ev(1, "main", "StateUpdated", json!({"goal": "g1"})),
        ev(2, "main", "FileWritten", json!({"path": "a.rs"})),
        ev(
            3,
            "main",
            "StateUpdated",
            json!({"goal": "g2", "decisions": ["use postgres"]}),
        ),
        ev(4, "main", "FileWritten", json!({"path": "later.rs"})),
        ev(
            5,
            "main",
            "ToolCallRequested",
            json!({"tool_call_id": "c9", "name": "run_tests", "args": {}}),
        ),
        ev(
            6,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c9", "output": "error: boom", "is_error": true}),
        ),
        ev(
            7,
            "main",
            "BranchForked",
            json!({"new_branch_id": "alt", "from_event_id": "e2"}),
        ),
        ev(8, "alt", "StateUpdated", json!({"goal": "g3"})),
        ev(9, "alt", "FileWritten", json!({"path": "b.rs"})),
        // A fork of the fork, from before its second write.
        ev(
            10,
            "alt",
            "BranchForked",
            json!({"new_branch_id": "alt2", "from_event_id": "e8"}),
        ),
    ];
    let f = fold_forking(&events);
    let alt = &f.branches["alt"];
    assert_eq!(alt.state.goal.as_ref().unwrap().text, "g3");
    let files = |b: &str| -> Vec<String> {
        f.branches[b]
            .state
            .files_modified
            .iter()
            .map(|x| x.text.clone())
            .collect()
    };
    assert_eq!(files("alt"), ["a.rs", "b.rs"]);
    assert!(alt.state.decisions.is_empty(), "{:?}", alt.state.decisions);
    assert!(alt.state.errors.is_empty(), "{:?}", alt.state.errors);
    assert_eq!(alt.fork_seq, Some(2));
    let alt2 = &f.branches["alt2"];
    assert_eq!(alt2.state.goal.as_ref().unwrap().text, "g3");
    assert_eq!(files("alt2"), ["a.rs"]);
    // The parent keeps everything it did.
    assert_eq!(f.branches["main"].state.goal.as_ref().unwrap().text, "g2");
    assert_eq!(files("main"), ["a.rs", "later.rs"]);
    // Folding the fork without its history (the old way) shows the parent's later state: the
    // difference is the history, not the fixture.
    let (naive, _) = fold(&events);
    assert_eq!(
        naive.branches["alt"].state.goal.as_ref().unwrap().text,
        "g3"
    );
    assert!(!naive.branches["alt"].state.decisions.is_empty());
    assert!(!naive.branches["alt"].state.errors.is_empty());
    assert!(!f.branches["main"].state.errors.is_empty());
}

#[test]
fn the_fold_is_deterministic() {
    let events = vec![
        ev(
            1,
            "main",
            "UserPromptSubmitted",
            json!({"message_id": "u", "text": "hello there"}),
        ),
        ev(
            2,
            "main",
            "StateUpdated",
            json!({"goal": "g", "plan": ["a", "b"]}),
        ),
        ev(3, "main", "FileRead", json!({"path": "x"})),
    ];
    let (a, ca) = fold(&events);
    let (b, cb) = fold(&events);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert!(a.branches["main"].transcript_tokens > 0);
}

#[test]
fn subagents_are_tracked_from_start_to_finish_with_the_parents_checkpoint() {
    let (f, _) = fold(&[
        ev(
            1,
            "main",
            "SubagentStarted",
            json!({"child_session_id": "kid", "task": "scan the repo",
                "checkpoint": {"resume_at": "step 3"}}),
        ),
        ev(
            2,
            "main",
            "SubagentPromoted",
            json!({"child_session_id": "kid", "artifacts": ["artifact:sha256:aa"]}),
        ),
        ev(
            3,
            "main",
            "SubagentFinished",
            json!({"child_session_id": "kid", "report": "found 3 TODOs", "status": "failed",
                "artifacts": ["artifact:sha256:aa", "artifact:sha256:bb"],
                "error": "quota", "retryable": true}),
        ),
    ]);
    let kids = &f.branches["main"].state.subagents;
    assert_eq!(kids.len(), 1);
    let kid = &kids[0];
    assert_eq!(kid.task.as_deref(), Some("scan the repo"));
    assert_eq!(
        kid.checkpoint.as_deref(),
        Some("{\"resume_at\":\"step 3\"}")
    );
    assert!(kid.finished && kid.promoted && kid.released());
    assert_eq!(kid.status, "failed");
    assert_eq!(kid.report.as_deref(), Some("found 3 TODOs"));
    assert_eq!(
        kid.artifacts,
        vec![
            "artifact:sha256:aa".to_owned(),
            "artifact:sha256:bb".to_owned()
        ]
    );
    assert_eq!(
        (kid.error.as_deref(), kid.retryable),
        (Some("quota"), Some(true))
    );
    assert_eq!(
        (kid.started_event_id.as_str(), kid.last_event_id.as_str()),
        ("e1", "e3")
    );
}

/// A restricted (or not-allowed confidential) output with `is_error` must not reach the provider
/// through the recovery block: the error carries its output's class, and the block withholds
/// the message (issue 14, the seeds' R3/R12).
#[test]
fn a_protected_error_output_keeps_its_class_and_the_recovery_block_withholds_it() {
    use strata_core::assembly::{assemble, AssemblyRequest, Provider, Snapshot};
    for class in ["restricted", "confidential"] {
        let (f, _) = fold(&[
            ev(
                1,
                "main",
                "ModelResponseReceived",
                json!({"message_id": "a", "text": "",
                "tool_calls": [{"tool_call_id": "c1", "name": "vault_read", "args": {}}]}),
            ),
            ev(
                2,
                "main",
                "ToolCallFinished",
                json!({"tool_call_id": "c1", "is_error": true, "privacy_class": class,
                "output": "error: token SECRET-77aa91 rejected for acct 5512"}),
            ),
        ]);
        let state = f.branches["main"].state.clone();
        assert_eq!(state.errors.len(), 1);
        assert_eq!(
            state.errors[0].privacy_class.map(|c| c.as_str()),
            Some(class)
        );
        let snapshot: Snapshot = serde_json::from_value(json!({
            "tenant_id": "t", "session_id": "s", "branch_id": "main", "participant_id": "agent",
            "head_seq": 2, "model": "gpt-4o", "context_window_tokens": 32000,
            "reserved_output_tokens": 1000, "system_prompt": "be useful",
            "system_prompt_tokens": 3, "session_started_event_id": "start", "tools": [],
            "tools_tokens": 0, "state": serde_json::to_value(&state).unwrap(), "messages": [],
            "messages_before_window": 0, "loose_tool_calls": [], "transcript_tokens": 100,
            "orphan_results": 0
        }))
        .unwrap();
        let request = AssemblyRequest {
            provider: Provider::Openai,
            confidential_allowed: false,
            ..AssemblyRequest::default()
        };
        let a = assemble(&snapshot, &request, &O200k);
        let sent = serde_json::to_string(&a.messages).unwrap();
        assert!(!sent.contains("SECRET-77aa91"), "{class}: {sent}");
        assert!(
            sent.contains("vault_read (c1"),
            "{class}: the error itself stays: {sent}"
        );
        assert!(
            sent.contains("withheld by privacy policy"),
            "{class}: {sent}"
        );
    }
}

#[test]
fn a_failure_whose_call_is_not_on_the_log_is_an_unresolved_error_marked_as_such() {
    use strata_core::assembly::{assemble, AssemblyRequest, Snapshot};
    let (f, changes) = fold(&[
        ev(
            1,
            "main",
            "ToolCallFailed",
            json!({"tool_call_id": "lost1", "name": "upload", "retryable": true,
            "error": "HTTP 503 from storage: retry later"}),
        ),
        ev(
            2,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "lost2", "is_error": true, "output": "error: disk full"}),
        ),
    ]);
    // Still an orphan result: no pair is invented for it.
    assert_eq!(f.orphan_results, 2);
    assert!(!changes.iter().any(|c| matches!(c, Change::ToolResult(_))));
    let state = f.branches["main"].state.clone();
    let errors: Vec<_> = state
        .errors
        .iter()
        .map(|e| {
            (
                e.tool.as_str(),
                e.tool_call_id.as_str(),
                e.orphan,
                e.retryable,
            )
        })
        .collect();
    assert_eq!(
        errors,
        vec![
            ("upload", "lost1", true, true),
            ("unknown tool", "lost2", true, true)
        ]
    );
    let snapshot: Snapshot = serde_json::from_value(json!({
        "tenant_id": "t", "session_id": "s", "branch_id": "main", "participant_id": "agent",
        "head_seq": 2, "model": "gpt-4o", "context_window_tokens": 32000,
        "reserved_output_tokens": 1000, "system_prompt": "be useful",
        "system_prompt_tokens": 3, "session_started_event_id": "start", "tools": [],
        "tools_tokens": 0, "state": serde_json::to_value(&state).unwrap(), "messages": [],
        "messages_before_window": 0, "loose_tool_calls": [], "transcript_tokens": 100,
        "orphan_results": 2
    }))
    .unwrap();
    let a = assemble(&snapshot, &AssemblyRequest::default(), &O200k);
    let sent = serde_json::to_string(&a.messages).unwrap();
    assert!(
        sent.contains("upload (lost1, its call is not on the log, retryable"),
        "{sent}"
    );
    assert!(sent.contains("HTTP 503 from storage"), "{sent}");
    assert!(sent.contains("disk full"), "{sent}");

    // A later success resolves them: of the same tool, and of any tool for the unnamed one.
    let (f, _) = fold(&[
        ev(
            1,
            "main",
            "ToolCallFailed",
            json!({"tool_call_id": "lost1", "name": "upload", "error": "HTTP 503"}),
        ),
        ev(
            2,
            "main",
            "ToolCallFailed",
            json!({"tool_call_id": "lost2", "error": "timeout"}),
        ),
        ev(
            3,
            "main",
            "ToolCallRequested",
            json!({"tool_call_id": "c3", "name": "list", "args": {}}),
        ),
        ev(
            4,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c3", "output": "ok"}),
        ),
    ]);
    let left: Vec<_> = f.branches["main"]
        .state
        .errors
        .iter()
        .map(|e| e.tool_call_id.as_str())
        .collect();
    assert_eq!(left, vec!["lost1"]);
}

#[test]
fn the_sessions_privacy_rule_classes_unlabelled_outputs_in_the_fold_and_the_memories() {
    use strata_core::memory::MemoryEngine;
    use strata_core::payload::{Payload, PrivacyClass};
    let events = [
        ev(
            1,
            "main",
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 8000,
                "reserved_output_tokens": 100,
                "privacy": {"unlabelled": "confidential", "tools": {"vault.read": "restricted"}}}),
        ),
        ev(
            2,
            "main",
            "ModelResponseReceived",
            json!({"message_id": "a", "text": "", "tool_calls": [
                {"tool_call_id": "c1", "name": "vault.read", "args": {"path": "k"}},
                {"tool_call_id": "c2", "name": "bash", "args": {"command": "ls"}},
                {"tool_call_id": "c3", "name": "vault.read", "args": {"path": "j"}}]}),
        ),
        ev(
            3,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c1", "output": "token SECRET-1"}),
        ),
        ev(
            4,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c2", "output": "a.rs\nb.rs"}),
        ),
        // Labelled public by the platform: the tool's rule is the floor.
        ev(
            5,
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": "c3", "output": "token SECRET-2", "privacy_class": "public"}),
        ),
    ];
    let (_, changes) = fold(&events);
    let classes: Vec<(String, Option<PrivacyClass>)> = changes
        .iter()
        .filter_map(|c| match c {
            Change::ToolResult(r) => Some((r.tool_call_id.clone(), r.privacy_class)),
            _ => None,
        })
        .collect();
    assert_eq!(
        classes,
        vec![
            ("c1".to_owned(), Some(PrivacyClass::Restricted)),
            ("c2".to_owned(), Some(PrivacyClass::Confidential)),
            ("c3".to_owned(), Some(PrivacyClass::Restricted)),
        ]
    );
    // The memory extractor holds its memories to the same rule.
    let mut engine = MemoryEngine::default();
    let mut memory_classes = Vec::new();
    for e in &events {
        for d in engine.observe(e) {
            if let Payload::MemoryRecorded(p) = d.payload {
                memory_classes.push((p.extra["tool_call_id"].clone(), p.privacy_class));
            }
        }
    }
    assert!(!memory_classes.is_empty());
    for (call, class) in &memory_classes {
        let want = if call == "c2" {
            PrivacyClass::Confidential
        } else {
            PrivacyClass::Restricted
        };
        assert_eq!(*class, Some(want), "{call}");
    }
}

#[test]
fn a_prompt_the_platform_wrote_is_projected_as_a_platform_message() {
    let mut platform = ev(
        2,
        "main",
        "UserPromptSubmitted",
        json!({"message_id": "m2", "text": "Please always provide EXACTLY ONE action."}),
    );
    platform.actor = Some("platform".into());
    let (_, changes) = fold(&[
        ev(
            1,
            "main",
            "UserPromptSubmitted",
            json!({"message_id": "m1", "text": "fix it"}),
        ),
        platform,
    ]);
    let roles: Vec<&str> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Message(m) => Some(m.role.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(roles, ["user", "platform"]);
}
