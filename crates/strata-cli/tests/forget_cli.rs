//! `strata forget` on the embedded default, through the binary: after it, no byte of the data
//! directory holds the session's words, the other sessions read back byte-identical, a rebuild
//! still lacks it, and its id is refused on ingest.

mod sealing;

use std::path::Path;
use std::process::{Command, Stdio};

use sealing::{bytes_under, contains, strata};

/// `strata --seal on ARGS`, which must succeed.
fn ok(data_dir: &Path, args: &[&str]) -> String {
    sealing::ok(data_dir, "on", args)
}

use serde_json::{json, Value};

/// A second session of another tenant's work, written by the team, with words of its own.
fn other_session() -> String {
    let mut lines = Vec::new();
    let mut push = |n: usize, ty: &str, payload: Value| {
        lines.push(
            json!({"event_id": format!("keep-{n}"), "tenant_id": "dev", "session_id": "kept",
                "timestamp": "2026-06-03T11:00:00Z", "type": ty, "payload": payload})
            .to_string(),
        );
    };
    push(
        1,
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
        "context_window_tokens": 128000, "reserved_output_tokens": 8000}),
    );
    push(
        2,
        "UserPromptSubmitted",
        json!({"message_id": "u1", "text": "KEPT-MARKER: rename the config loader"}),
    );
    push(
        3,
        "ModelResponseReceived",
        json!({"message_id": "a1", "text": "reading it",
        "tool_calls": [{"tool_call_id": "c1", "name": "read_file", "args": {"path": "cfg.rs"}}]}),
    );
    push(
        4,
        "ToolCallFinished",
        json!({"tool_call_id": "c1", "output": format!("KEPT-OUTPUT {}", "fn load() {}\n".repeat(1200)), "is_error": false}),
    );
    lines.join("\n") + "\n"
}

/// A session's words, as exported: the opening of every prompt, reply and tool output of it, up
/// to the first character a JSON column would escape.
fn words_of(data: &Path, session: &str) -> Vec<String> {
    sealing::ok(data, "", &["export", session])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json line"))
        .filter_map(|e| {
            let p = &e["payload"];
            p["text"]
                .as_str()
                .or(p["output"].as_str())
                .map(str::to_owned)
        })
        .map(|text| {
            text.chars()
                .take_while(|c| c.is_ascii() && !c.is_ascii_control() && !matches!(c, '"' | '\\'))
                .take(40)
                .collect::<String>()
        })
        .filter(|m| m.len() >= 20)
        .collect()
}

#[test]
fn a_forgotten_session_is_gone_from_every_byte_and_the_others_are_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    ok(&data, &["demo"]);
    let fixture = dir.path().join("kept.jsonl");
    std::fs::write(&fixture, other_session()).expect("fixture");
    ok(&data, &["import", fixture.to_str().expect("utf-8")]);
    // An older projection set too: a rebuild leaves the previous one in the data directory.
    ok(&data, &["rebuild"]);

    let kept_context = |data: &Path| -> Value {
        let out = ok(data, &["context", "kept", "--tenant", "dev", "--json"]);
        serde_json::from_str::<Value>(&out).expect("json")["payload"].clone()
    };
    let before = kept_context(&data);
    assert!(before.to_string().contains("KEPT-MARKER"));

    let markers = words_of(&data, "demo-invoice-fix");
    assert!(markers.len() >= 10, "{markers:?}");
    let everything = bytes_under(&data);
    assert!(
        markers.iter().all(|m| contains(&everything, m)),
        "markers present before"
    );

    let out = ok(
        &data,
        &["forget", "--session", "demo-invoice-fix", "--json"],
    );
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(report[0]["key_destroyed"], true, "{report}");
    assert_eq!(report[0]["sets"], 2, "both projection sets: {report}");
    assert!(
        report[0]["artifacts_deleted"].as_u64() > Some(0),
        "{report}"
    );

    let after = bytes_under(&data);
    for m in &markers {
        assert!(!contains(&after, m), "{m:?} is still in the data directory");
    }
    assert!(contains(&after, "KEPT-MARKER") && contains(&after, "KEPT-OUTPUT"));
    assert_eq!(
        kept_context(&data),
        before,
        "the other session reads back the same"
    );
    let gone = strata(
        &data,
        "on",
        &["context", "demo-invoice-fix", "--tenant", "dev"],
    );
    assert!(!gone.status.success());

    // The audit trail says who, when and how much, and never the session's id.
    let audit: Value =
        serde_json::from_str(&ok(&data, &["forget", "--audit", "--json"])).expect("json audit");
    assert_eq!(audit.as_array().map(Vec::len), Some(1), "{audit}");
    assert!(audit[0]["completed_at"].is_string(), "{audit}");
    assert!(audit[0]["session_id"].is_null(), "{audit}");
    assert!(!audit.to_string().contains("demo-invoice-fix"), "{audit}");

    // A rebuild from the log verifies and brings none of it back.
    let out = ok(&data, &["rebuild"]);
    assert!(out.contains("readers switched"), "{out}");
    let after = bytes_under(&data);
    assert!(
        markers.iter().all(|m| !contains(&after, m)),
        "rebuild resurrected content"
    );
    assert_eq!(kept_context(&data), before);
    let replay = ok(&data, &["replay", "--json"]);
    let replay: Value = serde_json::from_str(&replay).expect("json");
    assert_eq!(
        replay["sessions"], 1,
        "only the kept session replays: {replay}"
    );

    // The id is refused from now on, with the flag or without.
    let late = dir.path().join("late.jsonl");
    std::fs::write(
        &late,
        json!({"event_id": "late-1", "tenant_id": "dev", "session_id": "demo-invoice-fix",
            "timestamp": "2026-06-04T10:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "late", "text": "LATE-MARKER"}})
        .to_string()
            + "\n",
    )
    .expect("write");
    for seal in ["on", ""] {
        let out = strata(&data, seal, &["import", late.to_str().expect("utf-8")]);
        assert!(
            !out.status.success(),
            "seal {seal}: a forgotten id was taken"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("was forgotten"), "{stderr}");
    }
    assert!(!contains(&bytes_under(&data), "LATE-MARKER"));
}

#[test]
fn a_session_on_a_plain_log_is_not_forgotten_and_nothing_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("plain");
    // A deployment started with `--seal off` records it.
    let out = strata(&data, "off", &["demo"]);
    assert!(out.status.success());
    let before = bytes_under(&data.join("log"));
    let out = strata(&data, "", &["forget", "--session", "demo-invoice-fix"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a sealed log"), "{stderr}");
    // A flag cannot turn it on by the way; `strata seal on` does, on purpose.
    let out = strata(&data, "on", &["forget", "--session", "demo-invoice-fix"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not seal its log"), "{stderr}");
    let out = strata(&data, "", &["seal", "on"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The session's earlier events are still in the clear.
    let out = strata(&data, "", &["forget", "--session", "demo-invoice-fix"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in the clear"), "{stderr}");
    assert_eq!(bytes_under(&data.join("log")), before);
    let out = strata(&data, "", &["export", "demo-invoice-fix"]);
    assert!(out.status.success(), "the session is still there");
}

#[test]
fn an_unsealed_deployment_sealed_in_place_by_migrate_forgets_and_reads_back_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("plain");
    sealing::ok(&data, "off", &["demo"]);
    let fixture = dir.path().join("kept.jsonl");
    std::fs::write(&fixture, other_session()).expect("fixture");
    sealing::ok(&data, "", &["import", fixture.to_str().expect("utf-8")]);
    let export =
        |data: &Path, session: &str| sealing::ok(data, "", &["export", session, "--tenant", "dev"]);
    let (demo, kept) = (export(&data, "demo-invoice-fix"), export(&data, "kept"));
    let markers = words_of(&data, "demo-invoice-fix");
    assert!(markers.len() >= 10, "{markers:?}");
    let log = bytes_under(&data.join("log"));
    assert!(
        markers.iter().all(|m| contains(&log, m)),
        "in the clear before"
    );
    assert!(contains(&log, "KEPT-MARKER"));
    assert!(contains(&bytes_under(&data.join("blobs")), "KEPT-OUTPUT"));

    let out = strata(&data, "", &["seal", "--migrate"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("segment "), "progress: {stderr}");
    let sealed: u64 = stdout
        .strip_prefix("sealed ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(sealed > 10, "{stdout}");
    assert!(stdout.contains("of 2 session(s)"), "{stdout}");

    // Nothing of either session is on the log or in the blobs in the clear now, and it reads
    // back the same.
    assert!(stdout.contains("artifact(s)"), "{stdout}");
    let log = bytes_under(&data.join("log"));
    assert!(!markers.iter().any(|m| contains(&log, m)), "sealed after");
    assert!(!contains(&log, "KEPT-MARKER"));
    assert!(!contains(&bytes_under(&data.join("blobs")), "KEPT-OUTPUT"));
    assert!(sealing::ok(&data, "", &["seal"]).starts_with("sealing on"));
    sealing::ok(&data, "", &["rebuild"]);
    assert_eq!(export(&data, "demo-invoice-fix"), demo);
    assert_eq!(export(&data, "kept"), kept);
    let again = sealing::ok(&data, "", &["seal", "--migrate"]);
    assert!(again.starts_with("sealed 0 event(s)"), "{again}");

    // So the session can be forgotten, and the other one is untouched.
    sealing::ok(&data, "", &["forget", "--session", "demo-invoice-fix"]);
    let everything = bytes_under(&data);
    assert!(
        !markers.iter().any(|m| contains(&everything, m)),
        "forgotten"
    );
    assert_eq!(export(&data, "kept"), kept);
}

/// A session of tenant dev that moved just now.
fn fresh_session() -> String {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    [
        json!({"event_id": "fresh-1", "tenant_id": "dev", "session_id": "fresh",
            "timestamp": now, "type": "SessionStarted",
            "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
                "context_window_tokens": 128000, "reserved_output_tokens": 8000}}),
        json!({"event_id": "fresh-2", "tenant_id": "dev", "session_id": "fresh",
            "timestamp": now, "type": "UserPromptSubmitted",
            "payload": {"message_id": "u1", "text": "FRESH-MARKER: keep me"}}),
    ]
    .map(|e| e.to_string())
    .join("\n")
        + "\n"
}

#[test]
fn retention_forgets_the_sessions_idle_past_the_cutoff_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    sealing::ok(&data, "", &["demo"]);
    for (name, events) in [
        ("kept.jsonl", other_session()),
        ("fresh.jsonl", fresh_session()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, events).expect("fixture");
        sealing::ok(&data, "", &["import", path.to_str().expect("utf-8")]);
    }
    // `kept` moved in June 2026; `fresh` now, and the demo too (its assemblies are recorded).
    let listed = sealing::ok(&data, "", &["retention", "--idle-days", "30", "--dry-run"]);
    assert!(listed.contains("would forget kept"), "{listed}");
    assert!(!listed.contains("would forget fresh"), "{listed}");
    assert!(!listed.contains("would forget demo"), "{listed}");
    sealing::ok(&data, "", &["export", "kept", "--tenant", "dev"]);
    let out = sealing::ok(&data, "", &["retention", "--idle-days", "100000"]);
    assert!(out.contains("0 idle"), "nothing is that old: {out}");

    let out = sealing::ok(&data, "", &["retention", "--idle-days", "30", "--json"]);
    let reports: Value = serde_json::from_str(&out).expect("json");
    let dev = reports
        .as_array()
        .and_then(|r| r.iter().find(|r| r["tenant_id"] == "dev"))
        .unwrap_or_else(|| panic!("{reports}"));
    assert_eq!(dev["forgotten"], 1, "{dev}");
    assert_eq!(dev["examined"], 3, "{dev}");
    let out = strata(&data, "", &["export", "kept", "--tenant", "dev"]);
    assert!(!out.status.success(), "kept is gone");
    let fresh = sealing::ok(&data, "", &["export", "fresh", "--tenant", "dev"]);
    assert!(fresh.contains("FRESH-MARKER"));
    sealing::ok(
        &data,
        "",
        &["export", "demo-invoice-fix", "--tenant", "dev"],
    );
    assert!(!contains(&bytes_under(&data), "KEPT-MARKER"));
    let audit = sealing::ok(&data, "", &["forget", "--audit"]);
    assert!(
        audit.contains("retention: idle for more than 30 day(s)"),
        "{audit}"
    );
}

#[test]
fn an_artifact_forgotten_with_its_session_is_stored_again_under_a_new_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first = dir.path().join("kept.jsonl");
    std::fs::write(&first, other_session()).expect("fixture");
    sealing::ok(&data, "", &["import", first.to_str().expect("utf-8")]);
    let out = sealing::ok(&data, "", &["forget", "--session", "kept", "--json"]);
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report[0]["artifacts_deleted"], 1, "{report}");

    // The same output in another session: its content is stored again, sealed with a new key.
    let again = dir.path().join("again.jsonl");
    let renamed = other_session()
        .replace("\"session_id\":\"kept\"", "\"session_id\":\"again\"")
        .replace("\"keep-", "\"again-");
    std::fs::write(&again, renamed).expect("fixture");
    sealing::ok(&data, "", &["import", again.to_str().expect("utf-8")]);
    let export = sealing::ok(&data, "", &["export", "again", "--tenant", "dev"]);
    assert!(export.contains("KEPT-OUTPUT"), "the artifact reads back");
    assert!(
        !contains(&bytes_under(&data.join("blobs")), "KEPT-OUTPUT"),
        "and is sealed"
    );
}

#[test]
fn the_default_data_directory_imports_assembles_and_forgets_with_no_flag_at_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("default");
    sealing::ok(&data, "", &["demo"]);
    let context = sealing::ok(&data, "", &["context", "demo-invoice-fix"]);
    assert!(!context.is_empty());
    let status = sealing::ok(&data, "", &["seal"]);
    assert!(status.starts_with("sealing on"), "{status}");
    sealing::ok(&data, "", &["forget", "--session", "demo-invoice-fix"]);
    let out = strata(&data, "", &["export", "demo-invoice-fix"]);
    assert!(!out.status.success(), "the session is gone");
    // A process told otherwise is refused, and nothing is written in the clear.
    let out = strata(&data, "off", &["demo"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("this deployment seals its log"), "{stderr}");
}

/// One HTTP request to `strata dev`: the status and the JSON body.
fn http(port: u16, method: &str, path: &str, key: Option<&str>, body: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    // `strata dev` prints its key as it starts listening: a first connect may come early.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if std::time::Instant::now() > deadline => panic!("connect: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
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
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let value = serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null);
    (status, value)
}

fn events_of(session: &str, words: &str) -> String {
    json!({"events": [
        {"event_id": format!("{session}-1"), "session_id": session, "timestamp": "2026-06-03T10:00:00Z",
         "type": "SessionStarted", "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
         "context_window_tokens": 32000, "reserved_output_tokens": 4000}},
        {"event_id": format!("{session}-2"), "session_id": session, "timestamp": "2026-06-03T10:00:01Z",
         "type": "UserPromptSubmitted", "payload": {"message_id": "m1", "text": words}}
    ]})
    .to_string()
}

/// `strata dev` on `data` (with `--seal on`, or no flag when `seal` is empty) on a free port:
/// the process, its port and the dev API key it printed.
fn start_dev(data: &Path, seal: &str) -> (std::process::Child, u16, String) {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data);
    if !seal.is_empty() {
        cmd.args(["--seal", seal]);
    }
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_LISTEN",
        "STRATA_SEAL",
        "STRATA_KEYS",
        "STRATA_MASTER_KEY_FILE",
    ] {
        cmd.env_remove(var);
    }
    let mut dev = cmd
        .env("STRATA_FSYNC", "never")
        .env("RUST_LOG", "error")
        .args(["dev", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("strata dev");
    let stdout = dev.stdout.take().expect("stdout");
    let key = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once("dev api key (tenant dev): ")
                .map(|(_, k)| k.trim().to_owned())
        })
        .expect("a dev key");
    (dev, port, key)
}

/// Writes a pending forget into the data directory's key store: the audit entry written,
/// nothing else done, as a crash right after a forget began leaves it. `session` `None` is a
/// whole tenant's forget.
fn cut_short(data: &Path, id: &str, tenant: &str, session: Option<&str>) {
    let keys = format!("sqlite://{}", data.join("keys.db").display());
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let store = strata_keys::open(&keys).await.expect("key store");
            let entry = strata_keys::ForgetEntry {
                forget_id: id.into(),
                tenant_id: tenant.into(),
                subject_hash: "written by the test".into(),
                session_id: session.map(str::to_owned),
                requested_by: "a test".into(),
                requested_at: "2026-12-07T00:00:00Z".into(),
                completed_at: None,
                report: None,
            };
            store.record_forget(&entry).await.expect("a pending forget");
        });
}

/// Starts `strata dev` on `data` and waits until `done(port, its key)`; then stops it and
/// returns the audit trail.
fn finished_at_start(data: &Path, done: impl Fn(u16, &str) -> bool) -> String {
    let (mut dev, port, dev_key) = start_dev(data, "");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done(port, &dev_key) {
        assert!(
            std::time::Instant::now() < deadline,
            "the pending forget was not finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let _ = Command::new("kill").arg(dev.id().to_string()).status();
    let _ = dev.wait();
    sealing::ok(data, "", &["forget", "--audit"])
}

#[test]
fn a_forget_cut_short_is_finished_when_strata_dev_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    sealing::ok(&data, "", &["demo"]);
    cut_short(&data, "forget-cut-short", "dev", Some("demo-invoice-fix"));
    let audit = finished_at_start(&data, |port, key| {
        http(port, "GET", "/v1/sessions/demo-invoice-fix", Some(key), "").0 == 404
    });
    assert!(audit.contains("forget-cut-short"), "{audit}");
    assert!(!audit.contains("PENDING"), "{audit}");
}

#[test]
fn a_tenants_forget_cut_short_is_finished_when_strata_dev_starts() {
    let (dir, _) = demo_and_acme();
    let data = dir.path().join("data");
    cut_short(&data, "tenant-cut-short", "acme", None);
    let audit = finished_at_start(&data, |port, _| {
        let admin = std::fs::read_to_string(data.join("admin-api-key")).expect("admin key");
        let (status, body) = http(
            port,
            "GET",
            "/v1/forgets/tenant-cut-short",
            Some(admin.trim()),
            "",
        );
        assert_eq!(status, 200, "{body}");
        body["state"] == "done"
    });
    assert!(audit.contains("tenant-cut-short"), "{audit}");
    assert!(audit.contains("\"sessions_forgotten\":2"), "{audit}");
    assert!(!audit.contains("PENDING"), "{audit}");
    let all = bytes_under(&data);
    assert!(!contains(&all, "ACME-MARKER-acme-1"));
    assert!(!contains(&all, "ACME-MARKER-acme-2"));
}

#[test]
fn delete_over_http_forgets_the_tenants_session_while_strata_dev_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (mut dev, port, key) = start_dev(&data, "on");
    let key = Some(key.as_str());
    for (session, words) in [
        ("web-1", "WEB-MARKER-GONE: my card number is 4111"),
        ("web-2", "WEB-MARKER-KEPT: hello"),
    ] {
        let (status, body) = http(port, "POST", "/v1/events", key, &events_of(session, words));
        assert_eq!(status, 200, "{body}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while http(port, "GET", "/v1/sessions/web-1", key, "").0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "web-1 never projected"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    assert_eq!(http(port, "DELETE", "/v1/sessions/web-1", None, "").0, 401);
    assert_eq!(http(port, "DELETE", "/v1/sessions/nobody", key, "").0, 404);
    let (status, report) = http(port, "DELETE", "/v1/sessions/web-1", key, "");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["key_destroyed"], true, "{report}");
    assert_eq!(report["sealed_events"], 2, "{report}");
    assert_eq!(http(port, "GET", "/v1/sessions/web-1", key, "").0, 404);
    assert_eq!(http(port, "GET", "/v1/sessions/web-2", key, "").0, 200);
    // (Re-sending the events it had is answered as duplicates, ids only: idempotency holds.)
    let late = events_of("web-1", "again").replace("\"web-1-", "\"web-1-late-");
    let (status, body) = http(port, "POST", "/v1/events", key, &late);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "forgotten", "{body}");

    let _ = Command::new("kill").arg(dev.id().to_string()).status();
    let _ = dev.wait();
    let all = bytes_under(&data);
    assert!(
        !contains(&all, "WEB-MARKER-GONE"),
        "the forgotten words are in the data directory"
    );
    assert!(contains(&all, "WEB-MARKER-KEPT"));
}

/// Two sessions of tenant `acme`, written by the team, with words of their own: `acme-1`
/// serves end user `u-1`, `acme-2` user `u-2`.
fn acme_sessions() -> String {
    let mut lines = Vec::new();
    for (session, user) in [("acme-1", "u-1"), ("acme-2", "u-2")] {
        for (n, ty, payload) in [
            (
                1,
                "SessionStarted",
                json!({"model": {"provider": "openai", "model": "gpt-4o"},
                    "context_window_tokens": 32000, "reserved_output_tokens": 4000,
                    "user_id": user}),
            ),
            (
                2,
                "UserPromptSubmitted",
                json!({"message_id": "u1", "text": format!("ACME-MARKER-{session}: our payroll")}),
            ),
        ] {
            lines.push(
                json!({"event_id": format!("{session}-{n}"), "tenant_id": "acme",
                    "session_id": session, "timestamp": "2026-06-03T12:00:00Z", "type": ty,
                    "payload": payload})
                .to_string(),
            );
        }
    }
    lines.join("\n") + "\n"
}

/// A data directory (`DIR/data`) holding the demo session of tenant `dev` and
/// [`acme_sessions`], and an API key of `acme`.
fn demo_and_acme() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    sealing::ok(&data, "", &["demo"]);
    let acme = dir.path().join("acme.jsonl");
    std::fs::write(&acme, acme_sessions()).expect("write");
    sealing::ok(&data, "", &["import", acme.to_str().expect("utf-8")]);
    let key = sealing::ok(&data, "", &["keys", "create", "--tenant", "acme"]);
    (dir, key.trim().to_owned())
}

#[test]
fn a_whole_tenant_is_forgotten_and_the_other_tenants_are_untouched() {
    let (dir, _) = demo_and_acme();
    let data = dir.path().join("data");
    let kept_context = |data: &Path| -> Value {
        let args = ["context", "demo-invoice-fix", "--tenant", "dev", "--json"];
        let out = sealing::ok(data, "", &args);
        serde_json::from_str::<Value>(&out).expect("json")["payload"].clone()
    };
    let before = kept_context(&data);
    assert!(contains(&bytes_under(&data), "ACME-MARKER-acme-2"));

    // --tenant alone does not widen a forget to the tenant.
    let out = strata(&data, "", &["forget", "--tenant", "acme"]);
    assert!(!out.status.success(), "a forget without --session");
    let out = sealing::ok(&data, "", &["forget", "--whole-tenant", "acme", "--json"]);
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        report["sessions"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert_eq!(report["api_keys_revoked"], 1, "{report}");
    assert!(
        report["not_forgettable"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "{report}"
    );

    let all = bytes_under(&data);
    for marker in ["ACME-MARKER-acme-1", "ACME-MARKER-acme-2", "our payroll"] {
        assert!(
            !contains(&all, marker),
            "{marker} is still in the data directory"
        );
    }
    assert_eq!(
        kept_context(&data),
        before,
        "another tenant's context changed"
    );
    let keys = sealing::ok(&data, "", &["keys", "list", "--tenant", "acme", "--json"]);
    assert!(
        keys.lines().all(|l| l.contains("\"revoked_at\":\"")),
        "{keys}"
    );
    let out = strata(&data, "", &["export", "acme-1", "--tenant", "acme"]);
    assert!(!out.status.success(), "acme-1 is gone");
}

#[test]
fn an_end_user_is_forgotten_with_their_sessions_and_nobody_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let acme = dir.path().join("acme.jsonl");
    std::fs::write(&acme, acme_sessions()).expect("write");
    sealing::ok(&data, "", &["import", acme.to_str().expect("utf-8")]);

    let out = strata(&data, "", &["forget", "--user", "u-1"]);
    assert!(!out.status.success(), "--user needs --tenant");
    let args = ["forget", "--user", "u-1", "--tenant", "acme", "--json"];
    let report: Value = serde_json::from_str(&sealing::ok(&data, "", &args)).expect("json");
    let forgotten: Vec<&str> = report["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|r| r["session_id"].as_str())
        .collect();
    assert_eq!(forgotten, ["acme-1"], "{report}");

    let all = bytes_under(&data);
    assert!(
        !contains(&all, "ACME-MARKER-acme-1"),
        "u-1's words are still there"
    );
    assert!(
        contains(&all, "ACME-MARKER-acme-2"),
        "u-2's session went too"
    );
    let out = strata(&data, "", &["export", "acme-2", "--tenant", "acme"]);
    assert!(out.status.success(), "u-2's session is still there");
}

/// A session that starts a subagent, and the subagent's own session, written by the team.
fn parent_and_subagent() -> String {
    let start = json!({"model": {"provider": "openai", "model": "gpt-4o"},
        "context_window_tokens": 32000, "reserved_output_tokens": 4000});
    [
        ("parent", 1, "SessionStarted", start.clone()),
        (
            "parent",
            2,
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "PARENT-MARKER: audit the ledger"}),
        ),
        (
            "parent",
            3,
            "SubagentStarted",
            json!({"child_session_id": "child", "task": "read the ledger"}),
        ),
        ("child", 1, "SessionStarted", start),
        (
            "child",
            2,
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "CHILD-MARKER: the ledger's totals"}),
        ),
    ]
    .iter()
    .map(|(session, n, ty, payload)| {
        json!({"event_id": format!("{session}-{n}"), "tenant_id": "dev", "session_id": session,
            "timestamp": "2026-06-03T13:00:00Z", "type": ty, "payload": payload})
        .to_string()
    })
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

#[test]
fn a_subagents_session_is_forgotten_with_its_parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let fixture = dir.path().join("parent.jsonl");
    std::fs::write(&fixture, parent_and_subagent()).expect("write");
    sealing::ok(&data, "", &["import", fixture.to_str().expect("utf-8")]);
    assert!(contains(&bytes_under(&data), "CHILD-MARKER"));

    let args = ["forget", "--session", "parent", "--json"];
    let reports: Value = serde_json::from_str(&sealing::ok(&data, "", &args)).expect("json");
    let report = &reports[0];
    assert_eq!(report["session_id"], "parent", "{reports}");
    assert_eq!(report["subagents"][0]["session_id"], "child", "{reports}");

    let all = bytes_under(&data);
    for marker in ["PARENT-MARKER", "CHILD-MARKER"] {
        assert!(
            !contains(&all, marker),
            "{marker} is still in the data directory"
        );
    }
}

#[test]
fn tenants_and_end_users_are_forgotten_over_http_with_the_right_credential() {
    let (dir, acme_key) = demo_and_acme();
    let data = dir.path().join("data");
    let acme_key = Some(acme_key.as_str());
    let (mut dev, port, dev_key) = start_dev(&data, "");
    let dev_key = Some(dev_key.as_str());
    let admin_key = std::fs::read_to_string(data.join("admin-api-key")).expect("an admin key");
    let admin_key = Some(admin_key.trim());
    let context = || {
        let path = "/v1/sessions/demo-invoice-fix/context";
        let (status, body) = http(port, "POST", path, dev_key, "");
        assert_eq!(status, 200, "{body}");
        body["payload"].clone()
    };
    let before = context();

    // A tenant's key reaches its own end users, never a whole tenant or another tenant's user.
    for (key, path) in [
        (dev_key, "/v1/tenants/acme"),
        (acme_key, "/v1/tenants/acme"),
        (dev_key, "/v1/tenants/acme/users/u-1"),
    ] {
        let (status, body) = http(port, "DELETE", path, key, "");
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("admin key")));
    }
    assert_eq!(http(port, "DELETE", "/v1/tenants/acme", None, "").0, 401);
    let wrong = Some("sa_0000000000000000000000000000000000000000");
    assert_eq!(http(port, "DELETE", "/v1/tenants/acme", wrong, "").0, 401);
    let (status, report) = http(port, "DELETE", "/v1/users/u-1", dev_key, "");
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["sessions"],
        json!([]),
        "dev has no user u-1: {report}"
    );

    let (status, report) = http(port, "DELETE", "/v1/users/u-1", acme_key, "");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["sessions"][0]["session_id"], "acme-1", "{report}");
    assert_eq!(
        http(port, "GET", "/v1/sessions/acme-1", acme_key, "").0,
        404
    );
    assert_eq!(
        http(port, "GET", "/v1/sessions/acme-2", acme_key, "").0,
        200
    );

    // A whole tenant is a job: accepted at once, then followed to its end.
    let (status, job) = http(port, "DELETE", "/v1/tenants/acme", admin_key, "");
    assert_eq!(status, 202, "{job}");
    let url = job["status_url"].as_str().expect("a status url").to_owned();
    assert_eq!(
        url,
        format!("/v1/forgets/{}", job["forget_id"].as_str().expect("id"))
    );
    // Another tenant's key (the forgotten tenant's own is revoked by now, or soon: 401).
    assert_eq!(
        http(port, "GET", &url, dev_key, "").0,
        403,
        "a tenant's key"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let (status, body) = http(port, "GET", &url, admin_key, "");
        assert_eq!(status, 200, "{body}");
        match body["state"].as_str() {
            Some("done") => break body,
            Some("running") => {}
            _ => panic!("{body}"),
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(report["kind"], "tenant", "{report}");
    assert_eq!(report["report"]["sessions_forgotten"], 1, "{report}");
    assert_eq!(report["report"]["api_keys_revoked"], 1, "{report}");
    assert!(
        !report.to_string().contains("acme-2"),
        "the audit holds no session id: {report}"
    );
    assert_eq!(
        http(port, "GET", "/v1/forgets/fg_nope", admin_key, "").0,
        404
    );
    assert_eq!(
        http(port, "GET", "/v1/sessions", acme_key, "").0,
        401,
        "the key is revoked"
    );
    let (status, report) = http(port, "DELETE", "/v1/tenants/acme/users/u-2", admin_key, "");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["sessions"], json!([]), "forgotten already: {report}");
    assert_eq!(context(), before, "another tenant's context changed");

    let _ = Command::new("kill").arg(dev.id().to_string()).status();
    let _ = dev.wait();
    let all = bytes_under(&data);
    for marker in ["ACME-MARKER-acme-1", "ACME-MARKER-acme-2", "our payroll"] {
        assert!(
            !contains(&all, marker),
            "{marker} is still in the data directory"
        );
    }
}
