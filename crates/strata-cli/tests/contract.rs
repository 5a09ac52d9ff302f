//! The input contract of issue 46, against a real `strata dev` on a socket: what a bad caller
//! gets (a throttle that never refuses a valid key), what a malformed or conflicting event gets
//! (a `400` or `409` that says where and why), and what ingest warns about.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A `strata dev` on a free port and a data directory of its own; killed when dropped.
struct Dev {
    child: Child,
    port: u16,
    key: String,
    _dir: tempfile::TempDir,
}

/// One answer: status, head (lowercased) and the JSON body (`Null` when it is not JSON).
struct Answer {
    status: u16,
    head: String,
    body: Value,
}

impl Dev {
    fn start(env: &[(&str, &str)]) -> Dev {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
        cmd.arg("--data-dir").arg(&data);
        for var in [
            "STRATA_DATA_DIR",
            "STRATA_LOG",
            "STRATA_DB",
            "STRATA_HOT",
            "STRATA_BLOB",
            "STRATA_LISTEN",
            "STRATA_SEAL",
            "STRATA_HTTP_AUTH_FAILURES_PER_MINUTE",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .envs(env.iter().copied())
            .env("STRATA_FSYNC", "never")
            .env("RUST_LOG", "error")
            .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("strata dev");
        let stdout = child.stdout.take().expect("stdout");
        let key = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.split_once("dev api key (tenant dev): ")
                    .map(|(_, k)| k.trim().to_owned())
            })
            .expect("a dev key");
        Dev {
            child,
            port,
            key,
            _dir: dir,
        }
    }

    /// One request with the dev key.
    fn call(&self, method: &str, path: &str, body: &str) -> Answer {
        self.call_as(Some(&self.key), method, path, body)
    }

    fn call_as(&self, key: Option<&str>, method: &str, path: &str, body: &str) -> Answer {
        // `strata dev` prints its key as it starts listening: a first connect may come early.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("connect: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let auth = key
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head");
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let body = serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null);
        Answer { status, head, body }
    }

    /// `POST /v1/events` with `events`; the answer must be `expect`.
    fn post(&self, events: Value, expect: u16) -> Value {
        let answer = self.call(
            "POST",
            "/v1/events",
            &json!({ "events": events }).to_string(),
        );
        assert_eq!(answer.status, expect, "{}", answer.body);
        answer.body
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_valid_key_is_served_while_its_address_is_throttled_for_bad_ones() {
    let dev = Dev::start(&[("STRATA_HTTP_AUTH_FAILURES_PER_MINUTE", "3")]);
    for _ in 0..3 {
        let answer = dev.call_as(Some("sk_wrong"), "GET", "/v1/sessions", "");
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    let throttled = dev.call_as(Some("sk_wrong"), "GET", "/v1/sessions", "");
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    assert_eq!(throttled.body["error"]["code"], "too_many_requests");
    assert!(
        throttled.head.contains("retry-after:"),
        "{}",
        throttled.head
    );
    // The same address, a valid key: served, as often as it likes.
    for _ in 0..3 {
        let served = dev.call("GET", "/v1/sessions", "");
        assert_eq!(served.status, 200, "{}", served.body);
    }
    // Keyless and bad attempts are still refused for the rest of the minute.
    assert_eq!(dev.call_as(None, "GET", "/v1/sessions", "").status, 429);
    assert_eq!(
        dev.call_as(Some("sk_wrong"), "GET", "/v1/sessions", "")
            .status,
        429
    );
}

/// `strata ARGS` on `data` (no server); its output.
fn strata(data: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--data-dir")
        .arg(data)
        .env("STRATA_FSYNC", "never")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata")
}

fn event(id: &str, session: &str, ty: &str, payload: Value) -> Value {
    json!({"event_id": id, "session_id": session, "timestamp": "2026-06-03T10:00:00Z",
        "type": ty, "payload": payload})
}

fn started(id: &str, session: &str) -> Value {
    event(
        id,
        session,
        "SessionStarted",
        json!({"model": {"provider": "anthropic", "model": "claude-sonnet-4"},
            "context_window_tokens": 32000, "reserved_output_tokens": 4000}),
    )
}

fn call_with(id: &str, session: &str, args: Value) -> Value {
    event(
        id,
        session,
        "ModelResponseReceived",
        json!({"message_id": format!("m-{id}"), "text": "running it",
            "tool_calls": [{"tool_call_id": format!("c-{id}"), "name": "shell", "args": args}]}),
    )
}

/// Polls `path` until it answers 200, and returns the body.
fn eventually(dev: &Dev, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = dev.call("GET", path, "");
        if answer.status == 200 {
            return answer.body;
        }
        assert!(Instant::now() < deadline, "{path}: {}", answer.body);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first rendered tool call's arguments: OpenAI's `function.arguments` text, parsed, or
/// Anthropic's `tool_use` input.
fn rendered_args(payload: &Value) -> Option<Value> {
    let messages = payload["messages"].as_array()?;
    messages.iter().find_map(|m| {
        if let Some(text) = m.pointer("/tool_calls/0/function/arguments") {
            // Parsed once: the object's JSON text, not the text of a string holding it.
            return serde_json::from_str(text.as_str()?).ok();
        }
        m["content"]
            .as_array()?
            .iter()
            .find(|part| part["type"] == "tool_use")
            .map(|part| part["input"].clone())
    })
}

#[test]
fn tool_arguments_as_json_text_reach_every_provider_as_the_object() {
    let dev = Dev::start(&[]);
    let text = r#"{"cmd": "ls -la"}"#;
    let prompt = json!({"message_id": "u1", "text": "list the files"});
    let result = json!({"tool_call_id": "c-a3", "output": "a.rs", "is_error": false});
    dev.post(
        json!([
            started("a1", "args"),
            event("a2", "args", "UserPromptSubmitted", prompt),
            call_with("a3", "args", json!(text)),
            event("a4", "args", "ToolCallFinished", result)
        ]),
        200,
    );
    let events = eventually(&dev, "/v1/sessions/args/events");
    let stored = &events["events"][2]["payload"]["tool_calls"][0]["args"];
    assert_eq!(stored, &json!({"cmd": "ls -la"}), "{events}");
    for provider in ["openai", "anthropic"] {
        let request = json!({ "provider": provider }).to_string();
        let context = dev.call("POST", "/v1/sessions/args/context", &request);
        assert_eq!(context.status, 200, "{}", context.body);
        assert_eq!(
            rendered_args(&context.body["payload"]),
            Some(json!({"cmd": "ls -la"})),
            "{provider}: {}",
            context.body["payload"]
        );
    }
}

#[test]
fn tool_arguments_that_are_no_object_are_a_400_naming_the_field() {
    let dev = Dev::start(&[]);
    let body = dev.post(
        json!([
            started("b1", "bad-args"),
            call_with("b2", "bad-args", json!("ls -la")),
            call_with("b3", "bad-args", json!(42)),
            call_with("b4", "bad-args", json!("[1]"))
        ]),
        400,
    );
    let bad: Vec<(u64, String)> = body["error"]["details"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let field = e["errors"][0]["field"].as_str().unwrap_or_default();
            (e["index"].as_u64().unwrap_or(99), field.to_owned())
        })
        .collect();
    let field = "payload.tool_calls[0].args".to_owned();
    assert_eq!(
        bad,
        [(1, field.clone()), (2, field.clone()), (3, field)],
        "{body}"
    );
    // Nothing of the batch was taken.
    assert_eq!(dev.call("GET", "/v1/sessions/bad-args", "").status, 404);
}

#[test]
fn import_takes_tool_arguments_as_json_text_and_names_bad_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let with_tenant = |mut v: Value| {
        v["tenant_id"] = json!("dev");
        v.to_string()
    };
    let good = dir.path().join("good.jsonl");
    let lines = [
        started("i1", "imported"),
        call_with("i2", "imported", json!(r#"{"path": "a.rs"}"#)),
    ]
    .map(with_tenant);
    std::fs::write(&good, lines.join("\n") + "\n").expect("write");
    let out = strata(&data, &["import", good.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = strata(&data, &["export", "imported"]);
    let exported = String::from_utf8_lossy(&out.stdout);
    let call: Value =
        serde_json::from_str(exported.lines().nth(1).expect("two events")).expect("json");
    assert_eq!(
        call["payload"]["tool_calls"][0]["args"],
        json!({"path": "a.rs"})
    );

    let bad = dir.path().join("bad.jsonl");
    let line = with_tenant(call_with("i3", "imported", json!("a.rs")));
    std::fs::write(&bad, line + "\n").expect("write");
    let out = strata(&data, &["import", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("payload.tool_calls[0].args"), "{stderr}");
}

fn prompt(id: &str, session: &str, words: &str) -> Value {
    event(
        id,
        session,
        "UserPromptSubmitted",
        json!({"message_id": format!("m-{id}"), "text": words}),
    )
}

#[test]
fn an_event_id_resent_with_other_content_is_409_and_a_byte_equal_retry_a_duplicate() {
    let dev = Dev::start(&[]);
    let first = json!([
        started("r1", "resend"),
        prompt("r2", "resend", "fix the bug")
    ]);
    dev.post(first.clone(), 200);
    let again = dev.post(first, 200);
    let statuses: Vec<&str> = again["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, ["duplicate", "duplicate"], "{again}");

    let changed = json!([
        prompt("r2", "resend", "SECRET-REWRITE"),
        prompt("r3", "resend", "next")
    ]);
    let body = dev.post(changed, 409);
    assert_eq!(body["error"]["code"], "event_id_conflict", "{body}");
    let conflict = &body["error"]["details"]["events"][0];
    assert_eq!(conflict["event_id"], "r2", "{body}");
    assert_eq!(conflict["index"], 0, "{body}");
    let differs = conflict["differs"].as_array().expect("differs");
    assert!(!differs.is_empty(), "{body}");
    for d in differs {
        let (stored, sent) = (d["stored_sha256"].as_str(), d["sent_sha256"].as_str());
        assert!(
            stored.is_some_and(|h| h.len() == 64) && stored != sent,
            "{body}"
        );
    }
    assert!(!body.to_string().contains("SECRET-REWRITE"), "{body}");

    // Two versions of one new id in a batch: refused too, and nothing of it is taken.
    let twice = json!([prompt("r4", "resend", "a"), prompt("r4", "resend", "b")]);
    let body = dev.post(twice, 409);
    assert_eq!(body["error"]["details"]["events"][0]["index"], 1, "{body}");
    let events = eventually(&dev, "/v1/sessions/resend/events");
    let ids: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event_id"].as_str())
        .collect();
    assert_eq!(ids, ["r1", "r2"], "{events}");
}

#[test]
fn import_refuses_an_event_id_it_took_with_other_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = |name: &str, words: &str| {
        let path = dir.path().join(name);
        let lines = [started("x1", "imp"), prompt("x2", "imp", words)].map(|mut v| {
            v["tenant_id"] = json!("dev");
            v.to_string()
        });
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
        path
    };
    let (same, other) = (file("a.jsonl", "hello"), file("b.jsonl", "SECRET-OTHER"));
    for path in [&same, &same] {
        let out = strata(&data, &["import", path.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = strata(&data, &["import", other.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("x2") && stderr.contains("payload.text"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET-OTHER"), "{stderr}");
}

/// The `warnings` of each result of an accepted batch.
fn warnings_of(body: &Value) -> Vec<Vec<String>> {
    body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            r["warnings"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

fn tool_result(id: &str, session: &str, call: &str) -> Value {
    event(
        id,
        session,
        "ToolCallFinished",
        json!({"tool_call_id": call, "output": "ok", "is_error": false}),
    )
}

#[test]
fn ingest_warns_of_a_session_without_start_and_of_a_result_without_call() {
    let dev = Dev::start(&[]);
    let body = dev.post(json!([prompt("w1", "no-start", "hello")]), 200);
    let warnings = warnings_of(&body);
    assert!(
        warnings[0].len() == 1 && warnings[0][0].contains("not SessionStarted"),
        "{body}"
    );

    let body = dev.post(
        json!([
            started("v1", "calls"),
            call_with("v2", "calls", json!({"cmd": "ls"})),
            tool_result("v3", "calls", "c-v2"),
            call_with("v4", "calls", json!({"cmd": "pwd"}))
        ]),
        200,
    );
    assert!(warnings_of(&body).iter().all(Vec::is_empty), "{body}");
    // Once the projections are current: the open call is known, an unknown one is warned of.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Value::Null;
    loop {
        // Projected, and settled: the services derive events of their own after a batch.
        let state = dev.call("GET", "/v1/sessions/calls/state", "").body;
        if state["head_seq"].as_u64() >= Some(4) && state["head_seq"] == last {
            break;
        }
        assert!(Instant::now() < deadline, "never projected: {state}");
        last = state["head_seq"].clone();
        std::thread::sleep(Duration::from_millis(300));
    }
    let body = dev.post(
        json!([
            tool_result("v5", "calls", "c-v4"),
            tool_result("v6", "calls", "c-nowhere")
        ]),
        200,
    );
    let warnings = warnings_of(&body);
    assert!(warnings[0].is_empty(), "{body}");
    assert!(
        warnings[1].len() == 1 && warnings[1][0].contains("\"c-nowhere\""),
        "{body}"
    );
}

#[test]
fn a_session_reads_back_with_the_list_s_last_event_time_and_its_own_provider() {
    let dev = Dev::start(&[]);
    // Timestamps that do not grow with seq, one with fractional seconds.
    let mut late = prompt("t2", "times", "first words");
    late["timestamp"] = json!("2026-06-03T10:00:00.5Z");
    let mut early = prompt("t3", "times", "second words");
    early["timestamp"] = json!("2026-06-03T09:00:00Z");
    dev.post(json!([started("t1", "times"), late, early]), 200);
    let read = eventually(&dev, "/v1/sessions/times");
    let list = dev.call("GET", "/v1/sessions", "").body;
    let listed = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["session_id"] == "times")
        .cloned()
        .unwrap_or_else(|| panic!("not listed: {list}"));
    assert_eq!(
        read["last_event_at"], listed["last_event_at"],
        "{read}\n{listed}"
    );
    assert_eq!(read["last_event_at"], "2026-06-03T09:00:00Z", "{read}");

    // The session started with an Anthropic model: its context is Anthropic's unless asked.
    let context = dev.call("POST", "/v1/sessions/times/context", "{}");
    assert_eq!(context.status, 200, "{}", context.body);
    assert_eq!(
        context.body["assembly"]["provider"], "anthropic",
        "{}",
        context.body
    );
    let asked = dev.call(
        "POST",
        "/v1/sessions/times/context",
        r#"{"provider": "openai"}"#,
    );
    assert_eq!(
        asked.body["assembly"]["provider"], "openai",
        "{}",
        asked.body
    );
}

#[test]
fn strata_dev_writes_no_colours_into_a_redirected_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("dev.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut dev = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("STRATA_LOG_FORMAT")
        .env("STRATA_FSYNC", "never")
        .env("RUST_LOG", "info")
        .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("strata dev");
    let stdout = dev.stdout.take().expect("stdout");
    let started = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("dev api key"));
    let _ = dev.kill();
    let _ = dev.wait();
    assert!(started, "strata dev did not start");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("INFO"), "nothing logged at info: {text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escapes in a redirected log: {text:?}"
    );
}

#[test]
fn the_demo_hint_runs_as_printed_and_import_and_sessions_name_the_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("my data");
    let out = strata(&data, &["demo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let hint = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Inspect it again with: "))
        .unwrap_or_else(|| panic!("no hint in {stdout}"));
    let bin = env!("CARGO_BIN_EXE_strata");
    let line = hint.replacen("strata", &format!("'{bin}'"), 1);
    let ran = Command::new("sh")
        .args(["-c", &line])
        .current_dir(elsewhere.path())
        .env_remove("STRATA_DATA_DIR")
        .env("STRATA_FSYNC", "never")
        .output()
        .expect("sh");
    assert!(
        ran.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&ran.stderr)
    );

    let file = dir.path().join("two.jsonl");
    let lines = [started("s1", "alpha"), started("s2", "beta")].map(|mut v| {
        v["tenant_id"] = json!("dev");
        v.to_string()
    });
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let out = strata(&data, &["import", file.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("sessions: alpha, beta"), "{stdout}");

    let out = strata(&data, &["sessions"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids, ["alpha", "beta", "demo-invoice-fix"], "{listed}");
    let out = strata(&data, &["sessions", "--json", "--tenant", "dev"]);
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    assert_eq!(first["session_id"], "alpha");
    assert_eq!(first["tenant_id"], "dev");
}

#[test]
fn a_bad_event_gets_every_problem_at_once_and_an_unknown_type_the_valid_ones() {
    let dev = Dev::start(&[]);
    let body = dev.post(
        json!([
            event("p1", "bad", "SessionStarted", json!({})),
            event(
                "p2",
                "bad",
                "ModelResponseReceived",
                json!({"message_id": 5,
                "tool_calls": [{"tool_call_id": "c0", "name": "run", "args": "ls"},
                               {"tool_call_id": "c1"}]})
            ),
            event("p3", "bad", "ToolCallDone", json!({}))
        ]),
        400,
    );
    let per_event: Vec<Vec<String>> = body["error"]["details"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            e["errors"]
                .as_array()
                .expect("errors")
                .iter()
                .map(|f| f["field"].as_str().unwrap_or_default().to_owned())
                .collect::<std::collections::BTreeSet<String>>()
                .into_iter()
                .collect()
        })
        .collect();
    // Every problem, in whatever order the parser found them.
    assert_eq!(
        per_event,
        [
            vec![
                "payload.context_window_tokens",
                "payload.model",
                "payload.reserved_output_tokens"
            ],
            vec![
                "payload.message_id",
                "payload.tool_calls[0].args",
                "payload.tool_calls[1].name"
            ],
            vec!["type"],
        ],
        "{body}"
    );
    let unknown = body["error"]["details"]["events"][2]["errors"][0]["message"].to_string();
    assert!(
        unknown.contains("SessionStarted") && unknown.contains("ToolCallFinished"),
        "{unknown}"
    );
}
