//! A synthetic workload for tests and benches: coding-agent sessions (prompts, model responses
//! with tool calls, tool outputs, file writes, a fork), as canonical events.

use serde_json::json;
use strata_core::Event;

/// `sessions` sessions of about `events_per_session` events each, for `tenant`, interleaved
/// round-robin (as concurrent agents would publish them).
pub fn sessions(tenant: &str, sessions: usize, events_per_session: u64) -> Vec<Event> {
    let per: Vec<Vec<Event>> = (0..sessions)
        .map(|s| session(tenant, &format!("sess-{s:04}"), events_per_session))
        .collect();
    let longest = per.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(per.iter().map(Vec::len).sum());
    for i in 0..longest {
        for s in &per {
            if let Some(e) = s.get(i) {
                out.push(e.clone());
            }
        }
    }
    out
}

/// One coding-agent session of about `n` events.
pub fn session(tenant: &str, session: &str, n: u64) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::with_capacity(n as usize + 4);
    let mut i = 0u64;
    let mut push = |ty: &str, branch: &str, payload: serde_json::Value, out: &mut Vec<Event>| {
        i += 1;
        out.push(
            Event::from_json(
                json!({
                    "event_id": format!("{session}-{i}"),
                    "tenant_id": tenant,
                    "session_id": session,
                    "branch_id": branch,
                    "timestamp": format!("2026-06-03T10:{:02}:{:02}Z", (i / 60) % 60, i % 60),
                    "type": ty,
                    "payload": payload,
                }),
                None,
            )
            .expect("valid workload event"),
        );
    };
    push(
        "SessionStarted",
        "main",
        json!({"model": {"provider": "openai", "model": "gpt-4o"}, "context_window_tokens": 32000,
               "reserved_output_tokens": 4000, "system_prompt": "You are a coding agent."}),
        &mut out,
    );
    push(
        "StateUpdated",
        "main",
        json!({"goal": "all tests green", "open_questions": ["which module fails first?"]}),
        &mut out,
    );
    let mut step = 0u64;
    while (out.len() as u64) < n {
        step += 1;
        if step % 6 == 1 {
            push(
                "UserPromptSubmitted",
                "main",
                json!({"message_id": format!("u{step}"), "text": format!("Task {step}: fix the next failing test and report back.")}),
                &mut out,
            );
        }
        let call = format!("c{step}");
        push(
            "ModelResponseReceived",
            "main",
            json!({"message_id": format!("a{step}"), "text": format!("Step {step}: running the tests for module {}.", step % 17),
                   "tool_calls": [{"tool_call_id": call, "name": "run_tests", "args": {"filter": format!("mod{}", step % 17)}}]}),
            &mut out,
        );
        let lines = if step.is_multiple_of(9) { 200 } else { 8 };
        let output: String = (0..lines)
            .map(|l| format!("test mod{}::case_{l} ... ok\n", step % 17))
            .collect();
        push(
            "ToolCallFinished",
            "main",
            json!({"tool_call_id": call, "output": output, "is_error": step.is_multiple_of(13)}),
            &mut out,
        );
        if step.is_multiple_of(5) {
            push(
                "FileWritten",
                "main",
                json!({"path": format!("src/mod{}.rs", step % 17), "bytes": 4096}),
                &mut out,
            );
        }
        if step == 7 {
            let from = out.last().map(|e| e.event_id.clone()).unwrap_or_default();
            push(
                "BranchForked",
                "main",
                json!({"from_event_id": from, "new_branch_id": "alt"}),
                &mut out,
            );
            push(
                "UserPromptSubmitted",
                "alt",
                json!({"message_id": "alt-u1", "text": "try the other approach"}),
                &mut out,
            );
        }
        if step == 12 {
            // A fork from a few events back: the branch starts from the state of that point,
            // not from what main did after it.
            let from = out[out.len().saturating_sub(6)].event_id.clone();
            push(
                "BranchForked",
                "main",
                json!({"from_event_id": from, "new_branch_id": "retry"}),
                &mut out,
            );
            push(
                "UserPromptSubmitted",
                "retry",
                json!({"message_id": "retry-u1", "text": "redo it from before the last run"}),
                &mut out,
            );
        }
    }
    out
}
