//! End to end through the real `strata` binary: import/export, context, inspect,
//! demo and the dev server, each test on its own data directory.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SESSION: &str = "fix-parser";
const REQUEST: &str =
    "Now add a regression test for nested arrays in tests/parser.rs and run the whole suite again.";
const GOAL: &str = "Make the parser test suite pass without changing the public API";
const OPEN_QUESTION: &str = "Should the regression test also cover empty nested arrays?";
const PENDING_CALL: &str = "call-final-suite";
const SYSTEM_PROMPT: &str =
    "You are a meticulous Rust engineer. Read before editing and run the tests after every change.";

// ---------------------------------------------------------------------------------------------
// Running the binary

fn strata_command(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_PARTITIONS",
        "STRATA_LISTEN",
        "STRATA_LOG_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("STRATA_FSYNC", "never");
    cmd
}

fn strata(data_dir: &Path, args: &[&str]) -> Output {
    strata_command(data_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata")
}

fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "strata {}: {}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `strata args`, asserts success and returns its standard output.
fn strata_ok(data_dir: &Path, args: &[&str]) -> String {
    let out = strata(data_dir, args);
    assert!(out.status.success(), "{}", describe(args, &out));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `strata args`, asserts failure and returns its standard error.
fn strata_err(data_dir: &Path, args: &[&str]) -> String {
    let out = strata(data_dir, args);
    assert!(
        !out.status.success(),
        "expected a failure: {}",
        describe(args, &out)
    );
    String::from_utf8(out.stderr).expect("utf-8 stderr")
}

fn context_json(data_dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["context", SESSION, "--json"];
    args.extend_from_slice(extra);
    let stdout = strata_ok(data_dir, &args);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("context --json is not one JSON object ({e}):\n{stdout}"))
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// ---------------------------------------------------------------------------------------------
// The fixture: a coding session for tenant `dev`

struct Fixture {
    lines: Vec<Value>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { lines: Vec::new() }
    }

    fn push(&mut self, ty: &str, actor: &str, payload: Value) {
        let n = self.lines.len() + 1;
        self.lines.push(json!({
            "event_id": format!("fx-{n:03}"),
            "tenant_id": "dev",
            "session_id": SESSION,
            "timestamp": format!("2026-06-03T10:{:02}:{:02}Z", n * 5 / 60, n * 5 % 60),
            "type": ty,
            "actor": actor,
            "participant_id": "coder",
            "payload": payload,
        }));
    }

    fn user(&mut self, text: &str) {
        let m = format!("msg-{}", self.lines.len() + 1);
        self.push(
            "UserPromptSubmitted",
            "user",
            json!({"message_id": m, "text": text}),
        );
    }

    fn assistant(&mut self, text: &str, calls: &[(&str, &str, Value)]) {
        let m = format!("msg-{}", self.lines.len() + 1);
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"tool_call_id": id, "name": name, "args": args}))
            .collect();
        self.push(
            "ModelResponseReceived",
            "assistant",
            json!({"message_id": m, "text": text, "tool_calls": calls,
                   "usage": {"input_tokens": 1000, "output_tokens": 120}}),
        );
    }

    fn tool(&mut self, text: &str, call: &str, name: &str, args: Value, output: &str, err: bool) {
        self.assistant(text, &[(call, name, args)]);
        self.push(
            "ToolCallFinished",
            "tool",
            json!({"tool_call_id": call, "output": output, "is_error": err}),
        );
    }

    fn jsonl(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }

    fn ids(&self) -> Vec<String> {
        self.lines
            .iter()
            .map(|l| l["event_id"].as_str().expect("id").to_owned())
            .collect()
    }
}

/// A cargo test log of `n` tests, one failing when `failing` is set.
fn test_log(n: usize, failing: bool) -> String {
    let mut out = format!("running {n} tests\n");
    for i in 0..n {
        let status = if failing && i == n / 2 {
            "FAILED"
        } else {
            "ok"
        };
        out.push_str(&format!(
            "test parser::tests::case_{i:04}_{} ... {status}\n",
            ["tokens", "arrays", "objects", "strings", "numbers"][i % 5]
        ));
    }
    if failing {
        out.push_str("\nfailures:\n\n---- parser::tests::parse_nested_arrays stdout ----\nthread panicked at src/parser.rs:212:13:\nexpected `]`, found `,`\n\ntest result: FAILED. 1 failed\n");
    } else {
        out.push_str(&format!("\ntest result: ok. {n} passed; 0 failed\n"));
    }
    out
}

fn source_file(path: &str, lines: usize) -> String {
    let mut out = format!("// {path}\n");
    for i in 0..lines {
        out.push_str(&format!(
            "fn helper_{i:04}(input: &str) -> Result<Value, Error> {{ parse_value(input, {i}) }}\n"
        ));
    }
    out
}

/// The coding session: 30 events, three tool outputs over 8 KiB, a pending call at the end.
fn coding_session() -> Fixture {
    let mut f = Fixture::new();
    f.push(
        "SessionStarted",
        "system",
        json!({
            "model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000,
            "reserved_output_tokens": 8000,
            "cwd": "/work/jsonp",
            "system_prompt": SYSTEM_PROMPT,
            "tools": [
                {"name": "run_tests", "description": "Run the test suite.",
                 "schema": {"type": "object", "properties": {"filter": {"type": "string"}}}},
                {"name": "read_file", "description": "Read a file.",
                 "schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                {"name": "apply_patch", "description": "Apply a unified diff.",
                 "schema": {"type": "object", "properties": {"diff": {"type": "string"}}, "required": ["diff"]}}
            ]
        }),
    );
    f.user("`cargo test` fails in the parser: find the failing test and fix it.");
    f.push(
        "StateUpdated",
        "agent",
        json!({"goal": GOAL, "current_task": "Find the failing test",
               "plan": ["run the tests", "read the parser", "fix it", "re-run the tests"]}),
    );
    f.tool(
        "Running the suite first.",
        "call-01",
        "run_tests",
        json!({}),
        &test_log(600, true),
        true,
    );
    f.tool(
        "`parse_nested_arrays` fails. Reading the parser.",
        "call-02",
        "read_file",
        json!({"path": "src/parser.rs"}),
        &source_file("src/parser.rs", 220),
        false,
    );
    f.push("FileRead", "agent", json!({"path": "src/parser.rs"}));
    f.tool(
        "Looking for the array loop.",
        "call-03",
        "read_file",
        json!({"path": "src/lexer.rs"}),
        "fn next_token(&mut self) -> Token { /* 40 lines */ }",
        false,
    );
    f.push(
        "StateUpdated",
        "agent",
        json!({"current_task": "Fix the array loop",
               "facts": ["parse_array stops at the first comma of a nested array"],
               "decisions": ["fix parse_array rather than the lexer"]}),
    );
    f.tool(
        "Patching parse_array to recurse on `[`.",
        "call-04",
        "apply_patch",
        json!({"diff": "-        Token::Comma => break,\n+        Token::Comma => continue,"}),
        "patch applied: 1 hunk",
        false,
    );
    f.push(
        "FileWritten",
        "agent",
        json!({"path": "src/parser.rs", "bytes": 18211, "summary": "parse_array continues after commas in nested arrays"}),
    );
    f.push(
        "DiffApplied",
        "agent",
        json!({"path": "src/parser.rs", "diff": "-Token::Comma => break\n+Token::Comma => continue"}),
    );
    f.tool(
        "Re-running the suite.",
        "call-05",
        "run_tests",
        json!({}),
        &test_log(600, false),
        false,
    );
    f.assistant(
        "All 600 tests pass: parse_array stopped at the first comma of a nested array.",
        &[],
    );
    f.user(REQUEST);
    f.push(
        "StateUpdated",
        "agent",
        json!({"current_task": "Add a regression test for nested arrays",
               "open_questions": [OPEN_QUESTION]}),
    );
    f.tool(
        "Reading the existing parser tests.",
        "call-06",
        "read_file",
        json!({"path": "tests/parser.rs"}),
        &source_file("tests/parser.rs", 40),
        false,
    );
    f.push("FileRead", "agent", json!({"path": "tests/parser.rs"}));
    f.tool(
        "Adding the regression test.",
        "call-07",
        "apply_patch",
        json!({"diff": "+#[test]\n+fn nested_arrays_regression() { assert!(parse(\"[[1,2],[3]]\").is_ok()); }"}),
        "patch applied: 1 hunk",
        false,
    );
    f.push(
        "FileWritten",
        "agent",
        json!({"path": "tests/parser.rs", "bytes": 4410, "summary": "regression test for nested arrays"}),
    );
    f.tool(
        "Running the new test.",
        "call-08",
        "run_tests",
        json!({"filter": "nested"}),
        "running 1 test\ntest nested_arrays_regression ... ok\n",
        false,
    );
    f.push(
        "VerifierFinished",
        "tool",
        json!({"check": "cargo test nested", "result": "passed: 1 test", "evidence_refs": []}),
    );
    // The last call has no result yet.
    f.assistant(
        "The regression test passes; running the whole suite once more.",
        &[(PENDING_CALL, "run_tests", json!({}))],
    );
    f
}

/// A data directory with the coding session written to `session.jsonl` (not yet imported).
struct Env {
    dir: tempfile::TempDir,
    fixture: Fixture,
    file: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let fixture = coding_session();
        let file = dir.path().join("session.jsonl");
        std::fs::write(&file, fixture.jsonl()).expect("write fixture");
        Env { dir, fixture, file }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn import(&self) -> String {
        strata_ok(&self.data(), &["import", path_str(&self.file)])
    }

    fn export(&self) -> String {
        strata_ok(&self.data(), &["export", SESSION])
    }
}

fn all_strings(v: &Value) -> String {
    v.to_string()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn fixture_has_the_promised_shape() {
    let f = coding_session();
    assert!(f.lines.len() >= 30, "{} events", f.lines.len());
    let big = f
        .lines
        .iter()
        .filter(|l| l["type"] == "ToolCallFinished")
        .filter(|l| l["payload"]["output"].as_str().unwrap_or_default().len() > 8 * 1024)
        .count();
    assert!(big >= 1, "at least one tool output over 8 KiB");
}

#[test]
fn import_then_context_json() {
    let env = Env::new();
    let out = env.import();
    let n = env.fixture.lines.len();
    assert!(
        out.contains(&format!("imported {n} event(s), 0 duplicate(s)")),
        "{out}"
    );

    let ctx = context_json(&env.data(), &[]);
    let payload = &ctx["payload"];
    let assembly = &ctx["assembly"];
    let messages = payload["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("payload.messages missing: {ctx}"));
    assert!(!messages.is_empty());
    assert_eq!(messages[0]["role"], "system", "{}", messages[0]);
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains(SYSTEM_PROMPT),
        "the system prompt opens the request: {}",
        messages[0]
    );
    for m in messages {
        let role = m["role"].as_str().unwrap_or_default();
        assert!(
            ["system", "user", "assistant", "tool"].contains(&role),
            "OpenAI-style roles only: {m}"
        );
    }

    let context_tokens = assembly["context_tokens"].as_u64().expect("context_tokens");
    let transcript_tokens = assembly["transcript_tokens"]
        .as_u64()
        .expect("transcript_tokens");
    assert!(context_tokens > 0);
    assert!(
        context_tokens < transcript_tokens,
        "context {context_tokens} < transcript {transcript_tokens}"
    );
    assert!(assembly["omitted"].is_object(), "{assembly}");

    // Invariant 12: every included segment has a reason and a source.
    let included = assembly["included"].as_array().expect("included");
    assert!(!included.is_empty());
    let ids = env.fixture.ids();
    for seg in included {
        assert!(
            !seg["reason"].as_str().unwrap_or_default().trim().is_empty(),
            "segment without a reason: {seg}"
        );
        let sources = seg["source_event_ids"]
            .as_array()
            .expect("source_event_ids");
        assert!(!sources.is_empty(), "segment without a source: {seg}");
        for s in sources {
            let s = s.as_str().expect("id");
            assert!(
                ids.iter().any(|id| id == s),
                "segment cites {s}, which is not an event of the session: {seg}"
            );
        }
    }

    // Invariant 5: the current request, the goal and the open questions are in the context, and
    // the pending tool call is kept.
    let text = all_strings(payload);
    for (what, needle) in [
        ("current request", REQUEST),
        ("goal", GOAL),
        ("open question", OPEN_QUESTION),
        ("pending tool call", PENDING_CALL),
    ] {
        assert!(
            text.contains(needle),
            "the {what} is missing from the payload"
        );
    }
    // The large outputs are not replayed in full (a preview keeps their head and tail).
    assert!(
        !text.contains("case_0150_tokens ... ok"),
        "a 600-test log is replayed verbatim"
    );
}

#[test]
fn context_for_anthropic_has_system_and_alternating_turns() {
    let env = Env::new();
    env.import();
    let ctx = context_json(&env.data(), &["--provider", "anthropic"]);
    let payload = &ctx["payload"];
    let system = payload["system"]
        .as_str()
        .unwrap_or_else(|| panic!("no system text: {payload}"));
    assert!(system.contains(SYSTEM_PROMPT), "{system}");
    let messages = payload["messages"].as_array().expect("messages");
    assert!(!messages.is_empty());
    assert_eq!(
        messages[0]["role"], "user",
        "Anthropic turns start with the user"
    );
    for pair in messages.windows(2) {
        assert_ne!(
            pair[0]["role"], pair[1]["role"],
            "roles alternate: {pair:?}"
        );
    }
    for m in messages {
        let role = m["role"].as_str().unwrap_or_default();
        assert!(role == "user" || role == "assistant", "{m}");
        assert!(m["content"].is_array(), "content blocks: {m}");
    }
    let text = payload.to_string();
    assert!(text.contains(REQUEST));
    assert!(text.contains(PENDING_CALL), "the pending tool_use is kept");
    assert_eq!(ctx["assembly"]["provider"], "anthropic");
}

#[test]
fn context_is_deterministic() {
    let env = Env::new();
    env.import();
    let first = context_json(&env.data(), &[]);
    let second = context_json(&env.data(), &[]);
    let a = serde_json::to_string(&first["payload"]).expect("serialize");
    let b = serde_json::to_string(&second["payload"]).expect("serialize");
    assert!(a.len() > 100, "{a}");
    assert_eq!(a, b, "two runs give different payloads");
    assert_eq!(
        first["assembly"]["included"], second["assembly"]["included"],
        "two runs include different segments"
    );
}

#[test]
fn import_is_idempotent() {
    let env = Env::new();
    let n = env.fixture.lines.len();
    env.import();
    let before = env.export();
    assert_eq!(before.lines().count(), n);

    let out = env.import();
    assert!(
        out.contains(&format!("imported 0 event(s), {n} duplicate(s)")),
        "{out}"
    );
    let after = env.export();
    assert_eq!(before, after, "a second import changed the session");
}

#[test]
fn export_round_trips() {
    let a = Env::new();
    a.import();
    let export_a = a.export();
    let lines: Vec<Value> = export_a
        .lines()
        .map(|l| serde_json::from_str(l).expect("export line is JSON"))
        .collect();
    assert_eq!(lines.len(), a.fixture.lines.len());
    for (i, (exported, original)) in lines.iter().zip(&a.fixture.lines).enumerate() {
        assert_eq!(exported["event_id"], original["event_id"]);
        assert_eq!(exported["seq"], json!(i + 1), "seq in order");
        assert_eq!(exported["type"], original["type"]);
        assert_eq!(exported["timestamp"], original["timestamp"]);
    }
    // The large test log travels inline (its raw bytes, from the artifact), so another data
    // directory that imports the export has it too.
    let big = lines
        .iter()
        .find(|l| l["payload"]["tool_call_id"] == "call-01")
        .expect("call-01 result");
    let original = a
        .fixture
        .lines
        .iter()
        .find(|l| l["payload"]["tool_call_id"] == "call-01" && l["type"] == "ToolCallFinished")
        .expect("call-01 in the fixture");
    assert_eq!(
        big["payload"]["output"], original["payload"]["output"],
        "raw output restored"
    );
    assert!(big["payload"].get("output_ref").is_none(), "{big}");

    let file = a.dir.path().join("export.jsonl");
    std::fs::write(&file, &export_a).expect("write export");
    let b = tempfile::tempdir().expect("tempdir");
    let out = strata_ok(b.path(), &["import", path_str(&file)]);
    assert!(
        out.contains(&format!("imported {} event(s)", lines.len())),
        "{out}"
    );
    let export_b = strata_ok(b.path(), &["export", SESSION]);
    assert_eq!(export_a, export_b, "export → import → export changed bytes");
    // The artifacts were stored again in the new directory.
    let blobs = files_under(&b.path().join("blobs"));
    assert!(
        blobs.len() >= 3,
        "the imported directory holds the large outputs: {:?}",
        blobs.keys().collect::<Vec<_>>()
    );
}

#[test]
fn malformed_lines_import_nothing() {
    let env = Env::new();
    let mut lines: Vec<String> = env
        .fixture
        .lines
        .iter()
        .take(6)
        .map(ToString::to_string)
        .collect();
    lines[2] = "{\"event_id\": \"fx-003\", \"type\": ".to_owned();
    let mut no_session = env.fixture.lines[4].clone();
    no_session
        .as_object_mut()
        .expect("object")
        .remove("session_id");
    lines[4] = no_session.to_string();
    let file = env.dir.path().join("broken.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let name = path_str(&file);

    let stderr = strata_err(&env.data(), &["import", name]);
    assert!(stderr.contains("nothing imported"), "{stderr}");
    assert!(
        stderr.contains(&format!("{name}:3:")) && stderr.contains("JSON"),
        "line 3 is named as bad JSON: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{name}:5: session_id")),
        "line 5 is named with its missing field: {stderr}"
    );
    for good in [1, 2, 4, 6] {
        assert!(
            !stderr.contains(&format!("{name}:{good}:")),
            "line {good} is fine: {stderr}"
        );
    }

    // Nothing of the file reached the session.
    let stderr = strata_err(&env.data(), &["export", SESSION]);
    assert!(stderr.contains("not found"), "{stderr}");
}

/// Every file under `dir`, by path relative to it.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under root").to_owned();
                out.insert(rel, std::fs::read(&path).expect("read file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn the_raw_log_is_append_only() {
    let env = Env::new();
    env.import();
    let partitions = env.data().join("log").join("partitions");
    let before = files_under(&partitions);
    assert!(
        before.values().any(|b| !b.is_empty()),
        "the import wrote log files: {:?}",
        before.keys().collect::<Vec<_>>()
    );

    // `context` appends a ContextBuilt event; another import appends more events.
    context_json(&env.data(), &[]);
    let mut more = Fixture::new();
    for l in &env.fixture.lines {
        more.lines.push(l.clone());
    }
    let n = more.lines.len();
    more.push(
        "ToolCallFinished",
        "tool",
        json!({"tool_call_id": PENDING_CALL, "output": test_log(600, false), "is_error": false}),
    );
    more.user("Thanks, that's all.");
    let mut other = more.lines[n].clone();
    other["event_id"] = json!("other-001");
    other["session_id"] = json!("another-session");
    other["type"] = json!("UserPromptSubmitted");
    other["payload"] = json!({"message_id": "o1", "text": "hello"});
    more.lines.push(other);
    let file = env.dir.path().join("more.jsonl");
    std::fs::write(&file, more.jsonl()).expect("write");
    let out = strata_ok(&env.data(), &["import", path_str(&file)]);
    assert!(
        out.contains(&format!("imported 3 event(s), {n} duplicate(s)")),
        "{out}"
    );

    let after = files_under(&partitions);
    let grown_before: u64 = before.values().map(|b| b.len() as u64).sum();
    let grown_after: u64 = after.values().map(|b| b.len() as u64).sum();
    assert!(grown_after > grown_before, "the log grew");
    for (path, old) in &before {
        let new = after
            .get(path)
            .unwrap_or_else(|| panic!("log file {} disappeared", path.display()));
        assert!(
            new.len() >= old.len() && new[..old.len()] == old[..],
            "log file {} was rewritten, not appended to ({} → {} bytes)",
            path.display(),
            old.len(),
            new.len()
        );
    }
}

#[test]
fn context_of_an_unknown_session_fails_clearly() {
    let env = Env::new();
    env.import();
    let stderr = strata_err(&env.data(), &["context", "no-such-session", "--json"]);
    assert!(
        stderr.contains("no-such-session") && stderr.contains("not found"),
        "{stderr}"
    );
    // Another tenant does not see the session either.
    let stderr = strata_err(&env.data(), &["context", SESSION, "--tenant", "other"]);
    assert!(stderr.contains("not found"), "{stderr}");
}

#[test]
fn demo_sends_less_than_half_of_transcript_replay_within_the_default_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stdout = strata_ok(dir.path(), &["demo", "--json"]);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("demo --json is not one JSON object ({e}):\n{stdout}"));
    let a = &v["assembly"];
    let context = a["context_tokens"].as_u64().expect("context_tokens");
    let transcript = a["transcript_tokens"].as_u64().expect("transcript_tokens");
    eprintln!(
        "demo: context {context} tokens, transcript replay {transcript} tokens ({:.1}%)",
        100.0 * context as f64 / transcript as f64
    );
    assert!(context > 0 && transcript > 0);
    // The default policy sends the lines worth their tokens, at most its cap: the demo's
    // 32,000-token session goes cut to the lines that carry its evidence.
    assert_eq!(a["policy_version"], "strata.assembly/12");
    assert!(
        context <= strata_core::assembly::DEFAULT_TARGET_TOKENS,
        "demo context {context} is over the default target"
    );
    assert!(
        context * 2 < transcript,
        "demo context {context} is not less than half of transcript {transcript}"
    );
    assert!(v["payload"]["messages"].is_array(), "{}", v["payload"]);
}

#[test]
fn inspect_returns_the_recorded_assembly() {
    let env = Env::new();
    env.import();
    let ctx = context_json(&env.data(), &[]);
    let id = ctx["assembly"]["assembly_id"]
        .as_str()
        .expect("assembly_id")
        .to_owned();
    let stdout = strata_ok(&env.data(), &["inspect", &id, "--json"]);
    let record: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("inspect --json is not JSON ({e}):\n{stdout}"));
    assert_eq!(record["assembly_id"], id.as_str());
    assert_eq!(record["session_id"], SESSION);
    assert_eq!(record["context_tokens"], ctx["assembly"]["context_tokens"]);
    assert_eq!(record["included"], ctx["assembly"]["included"]);

    let stderr = strata_err(&env.data(), &["inspect", "asm-does-not-exist", "--json"]);
    assert!(stderr.contains("not found"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// The dev server

/// Kills the child when a test fails before it stopped it.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// One HTTP/1.1 request; returns the status and the body. Retries the connection until
/// `deadline` (the server binds after printing its banner).
fn http(
    port: u16,
    method: &str,
    path: &str,
    key: &str,
    body: &str,
    deadline: Instant,
) -> (u16, Vec<u8>) {
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("cannot connect to 127.0.0.1:{port}: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head}"));
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_line = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16)
            .expect("chunk size");
        data = &data[eol + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
    out
}

fn json_body(status: u16, body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "status {status}, body is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })
}

#[test]
fn dev_server_locks_the_data_dir_serves_http_and_stops_on_sigterm() {
    let env = Env::new();
    let data = env.data();
    let port = free_port();
    let stderr_file = std::fs::File::create(env.dir.path().join("dev.stderr")).expect("stderr");
    let child = strata_command(&data)
        .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file)
        .spawn()
        .expect("spawn strata dev");
    let mut guard = ChildGuard(Some(child));
    let stdout = guard
        .0
        .as_mut()
        .expect("child")
        .stdout
        .take()
        .expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let dev_stderr =
        || std::fs::read_to_string(env.dir.path().join("dev.stderr")).unwrap_or_default();

    // Wait for the key line.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut banner = Vec::new();
    let key = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some((_, key)) = line.split_once("dev api key (tenant dev): ") {
                    break key.trim().to_owned();
                }
                banner.push(line);
            }
            Err(e) => panic!(
                "no api key line within 20 s ({e}); stdout so far: {banner:?}; stderr: {}",
                dev_stderr()
            ),
        }
    };
    assert!(key.starts_with("sk_"), "{key}");

    // A second process is refused the data directory.
    let stderr = strata_err(&data, &["import", path_str(&env.file)]);
    assert!(
        stderr.contains("in use") && stderr.contains("strata dev"),
        "the refusal names the holder: {stderr}"
    );

    // Append a small batch over HTTP.
    let deadline = Instant::now() + Duration::from_secs(20);
    let batch = json!({"events": [
        {"event_id": "live-1", "session_id": "live", "timestamp": "2026-06-03T10:00:00Z",
         "type": "SessionStarted", "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
         "context_window_tokens": 128000, "reserved_output_tokens": 8000,
         "system_prompt": "Be brief."}},
        {"event_id": "live-2", "session_id": "live", "timestamp": "2026-06-03T10:00:01Z",
         "type": "UserPromptSubmitted", "payload": {"message_id": "m1", "text": "What is 2 + 2?"}}
    ]});
    let (status, body) = http(
        port,
        "POST",
        "/v1/events",
        &key,
        &batch.to_string(),
        deadline,
    );
    let resp = json_body(status, &body);
    assert_eq!(status, 200, "{resp}");
    let statuses: Vec<&str> = resp["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["accepted", "accepted"], "{resp}");

    // A wrong key is refused.
    let (status, _) = http(
        port,
        "POST",
        "/v1/events",
        "sk_wrong",
        &batch.to_string(),
        deadline,
    );
    assert_eq!(status, 401);

    // The context of the new session.
    let (status, body) = http(
        port,
        "POST",
        "/v1/sessions/live/context",
        &key,
        "{}",
        deadline,
    );
    let resp = json_body(status, &body);
    assert_eq!(status, 200, "{resp}");
    assert!(resp["payload"]["messages"].is_array(), "{resp}");
    assert_eq!(resp["assembly"]["session_id"], "live", "{resp}");
    assert!(
        resp["payload"].to_string().contains("What is 2 + 2?"),
        "{resp}"
    );

    // SIGTERM stops it gracefully.
    let pid = guard.0.as_ref().expect("child").id();
    let kill = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        match guard.0.as_mut().expect("child").try_wait().expect("wait") {
            Some(status) => break status,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(25)),
            None => panic!("strata dev did not stop within 20 s of SIGTERM"),
        }
    };
    assert!(
        status.success(),
        "strata dev exited with {status}; stderr: {}",
        dev_stderr()
    );
    reader.join().expect("reader thread");
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("stopped")),
        "no shutdown line in {rest:?}"
    );

    // The lock is released with the process.
    let out = env.import();
    assert!(out.contains("imported"), "{out}");
    let exported = env.export();
    assert_eq!(exported.lines().count(), env.fixture.lines.len());
    let live = strata_ok(&data, &["export", "live"]);
    assert!(
        live.contains("live-2"),
        "the HTTP events are durable: {live}"
    );
}

#[test]
fn keys_are_listed_by_id_revoked_by_id_and_expire() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let key = strata_ok(
        &data,
        &["keys", "create", "--tenant", "acme", "--label", "ci"],
    );
    let key = key.trim();
    assert!(key.starts_with("sk_"), "{key}");
    strata_ok(
        &data,
        &[
            "keys",
            "create",
            "--tenant",
            "acme",
            "--label",
            "temp",
            "--expires-in",
            "7d",
        ],
    );
    let listed = strata_ok(&data, &["keys", "list", "--tenant", "acme", "--json"]);
    let keys: Vec<serde_json::Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(keys.len(), 2, "{listed}");
    assert!(!listed.contains(key), "a listing never shows a key");
    let ci = keys.iter().find(|k| k["label"] == "ci").expect("ci key");
    let temp = keys
        .iter()
        .find(|k| k["label"] == "temp")
        .expect("temp key");
    assert!(
        ci["expires_at"].is_null() && temp["expires_at"].is_string(),
        "{listed}"
    );
    let id = ci["key_id"].as_str().expect("id");
    assert_eq!(
        strata_ok(&data, &["keys", "revoke", id]).trim(),
        format!("revoked {id}")
    );
    let stderr = strata_err(&data, &["keys", "revoke", id]);
    assert!(stderr.contains("no live key has id"), "{stderr}");
    let table = strata_ok(&data, &["keys", "list"]);
    assert!(
        table.contains(&format!("{id}  acme  ci")) && table.contains("revoked "),
        "{table}"
    );
    let stderr = strata_err(
        &data,
        &["keys", "create", "--tenant", "acme", "--expires-in", "soon"],
    );
    assert!(
        stderr.contains("expected a whole number and a unit"),
        "{stderr}"
    );
}
