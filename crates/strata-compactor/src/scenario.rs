//! A realistic coding-agent session (a CLI agent fixing a failing test suite), generated
//! deterministically: used by the compaction tests and by `strata bench memory`.
//!
//! The session states a goal and hard constraints, reads, searches, edits files and runs the
//! tests turn after turn; it ends with an unresolved compile error and an explicit next step.

use serde_json::{json, Value};

/// The goal the session states.
pub const GOAL: &str = "Make the parser test suite pass";
/// The hard constraints the session states.
pub const CONSTRAINTS: [&str; 2] = [
    "Do not change the public API of parser::parse",
    "No new dependencies",
];
/// The error left unresolved at the end.
pub const UNRESOLVED_ERROR: &str = "error[E0308]: mismatched types at src/lexer.rs:42:9";
/// The next step stated at the end.
pub const NEXT_STEP: &str = "fix the type mismatch in src/lexer.rs and rerun cargo test";

/// Files the session modifies.
pub fn modified_files(turns: usize) -> Vec<String> {
    (0..turns)
        .filter(|t| t % 3 == 2)
        .map(|t| format!("src/module_{t}.rs"))
        .chain(std::iter::once("src/lexer.rs".to_owned()))
        .collect()
}

fn file_body(turn: usize) -> String {
    (0..60)
        .map(|i| {
            format!(
                "    let value_{i} = compute_{turn}_{i}(input, state.offset + {i}); // step {i}\n"
            )
        })
        .collect()
}

/// The session's events as canonical JSON, 5 per turn plus 7 (`turns = 30` gives 157).
pub fn coding_session(tenant: &str, session: &str, turns: usize) -> Vec<Value> {
    let mut v: Vec<Value> = Vec::new();
    let mut push = |ty: &str, payload: Value| {
        let i = v.len();
        let secs = i as i64; // one event a second: up to 57,600 events in a day
        v.push(json!({
            "event_id": format!("{session}-{i:05}"), "tenant_id": tenant, "session_id": session,
            "timestamp": format!("2026-06-03T{:02}:{:02}:{:02}Z", 8 + secs / 3600, (secs / 60) % 60, secs % 60),
            "type": ty, "payload": payload}));
    };
    push(
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
        "context_window_tokens": 16000, "reserved_output_tokens": 2000,
        "system_prompt": "You are a careful coding agent working in a Rust repository.",
        "repo_root": "/work/parser", "project_id": "parser"}),
    );
    push(
        "UserPromptSubmitted",
        json!({"message_id": "u0",
        "text": "The parser tests fail since the lexer refactor. Make them pass without changing parser::parse's API and without new dependencies."}),
    );
    push(
        "StateUpdated",
        json!({"goal": GOAL, "constraints": CONSTRAINTS,
        "plan": ["reproduce the failure", "find the cause in the lexer", "fix it", "run the tests"]}),
    );
    for t in 0..turns {
        if t > 0 {
            push(
                "UserPromptSubmitted",
                json!({"message_id": format!("u{t}"),
                "text": format!("Continue with step {t}; keep the constraints in mind.")}),
            );
        }
        let call = format!("c{t}");
        let (name, args, output, is_error) = match t % 3 {
            0 => ("bash", json!({"command": "cargo test -p parser"}),
                format!("running 40 tests\n{}test parser::tests::case_{t} ... FAILED\n\n---- parser::tests::case_{t} stdout ----\nthread 'parser::tests::case_{t}' panicked at src/parser.rs:{}:5:\nassertion failed: tokens == expected\n\ntest result: FAILED. 39 passed; 1 failed; 0 ignored\n",
                    "test parser::tests::ok ... ok\n".repeat(20), 100 + t), true),
            1 => ("read_file", json!({"path": format!("src/module_{t}.rs")}), file_body(t), false),
            _ => ("grep", json!({"pattern": format!("compute_{t}")}),
                (0..12).map(|i| format!("src/module_{i}.rs:{}: compute_{t}_{i}(input)\n", i * 3 + 1)).collect(), false),
        };
        push(
            "ModelResponseReceived",
            json!({"message_id": format!("a{t}"),
            "text": format!("Step {t}: checking with {name}."),
            "tool_calls": [{"tool_call_id": call, "name": name, "args": args}]}),
        );
        push(
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": output, "is_error": is_error}),
        );
        if t % 3 == 2 {
            push(
                "FileWritten",
                json!({"path": format!("src/module_{t}.rs"), "bytes": 2048,
                "summary": format!("adjusted compute_{t} to the new token stream")}),
            );
        } else {
            push("FileRead", json!({"path": format!("src/module_{t}.rs")}));
        }
        push(
            "ModelResponseReceived",
            json!({"message_id": format!("b{t}"),
            "text": format!("Step {t} done; the failure persists, continuing with the next module.")}),
        );
    }
    push(
        "UserPromptSubmitted",
        json!({"message_id": "ufinal", "text": "Run the build once more."}),
    );
    push(
        "DiffApplied",
        json!({"path": "src/lexer.rs", "diff": "@@ -40,3 +40,3 @@\n-    let n: u32 = len;\n+    let n: usize = len;\n"}),
    );
    push(
        "ModelResponseReceived",
        json!({"message_id": "afinal", "text": "Building.",
        "tool_calls": [{"tool_call_id": "cfinal", "name": "bash", "args": {"command": "cargo build"}}]}),
    );
    push(
        "ToolCallFinished",
        json!({"tool_call_id": "cfinal",
        "output": format!("   Compiling parser v0.1.0\n{UNRESOLVED_ERROR}\nerror: could not compile `parser`\nexit code 101"),
        "is_error": true}),
    );
    push("StateUpdated", json!({"plan": [NEXT_STEP]}));
    v
}
