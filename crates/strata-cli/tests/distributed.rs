//! The same `strata` verbs on the distributed backends (Kafka, PostgreSQL, Redis, S3) give the same
//! context as on the embedded default: the service code is one, the backends are chosen by URL.
//! The distributed run seals its events (`--seal on`, keys in PostgreSQL): the topic, read from
//! offset 0, holds none of the session's words.
//!
//! Needs the servers of `scripts/services.sh start` and its variables (`STRATA_TEST_KAFKA_BROKERS`,
//! `STRATA_TEST_POSTGRES_URL`, `STRATA_TEST_REDIS_URL`, `STRATA_TEST_S3_URL`). Without them the test skips and says why,
//! except under `CI`, where a missing server is a failure.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI: the server is missing (scripts/services.sh start)")
        }
        _ => {
            eprintln!("skipping distributed e2e: {var} is not set");
            None
        }
    }
}

fn strata(data_dir: &Path, backends: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    for var in [
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_DATA_DIR",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in backends {
        cmd.env(k, v);
    }
    cmd.env("STRATA_FSYNC", "never");
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata");
    assert!(
        out.status.success(),
        "strata {}: {}\nstderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A `strata-projector` process on the given backends, stopped with SIGTERM when dropped. (Only
/// the projector: the embedded run projects and runs no memory extractor either, so the two
/// contexts compare like with like.)
/// The projector and the memory extractor, as the distributed stack runs them.
struct Services(Vec<std::process::Child>);

impl Services {
    fn start(data_dir: &Path, backends: &[(&str, String)]) -> Services {
        let mut children = Vec::new();
        for (service, group_var) in [
            ("strata-projector", None),
            // Its own group name: the CI broker is shared by every run.
            ("strata-memory", Some("STRATA_MEMORY_GROUP")),
        ] {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .expect("free port")
                .local_addr()
                .expect("address")
                .port();
            // Built next to `strata` by `cargo test --workspace` (scripts/test.sh).
            let binary = Path::new(env!("CARGO_BIN_EXE_strata")).with_file_name(service);
            assert!(
                binary.exists(),
                "{} is missing: run the workspace's tests (cargo test --workspace) so it is built",
                binary.display()
            );
            let mut cmd = Command::new(binary);
            cmd.env("STRATA_DATA_DIR", data_dir);
            for (k, v) in backends {
                cmd.env(k, v);
            }
            if let Some(var) = group_var {
                cmd.env(var, unique("memory"));
            }
            children.push(
                cmd.env("STRATA_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| panic!("run {service}: {e}")),
            );
        }
        Services(children)
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        for child in &mut self.0 {
            stop(child);
        }
    }
}

fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `strata rebuild` on PostgreSQL from the Kafka topic while the projector service runs: the new
/// schema is verified and switched to, the services follow it without a restart (the same
/// context comes back), and the old set can be dropped.
fn rebuild_under_running_services(
    data_dir: &Path,
    backends: &[(&str, String)],
    tenant: &str,
    before: &Value,
) {
    let out = strata(data_dir, backends, &["rebuild", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("rebuild --json is JSON");
    assert_eq!(report["switched"], true, "{report}");
    assert_eq!(report["file"], "strata_gen_2", "{report}");
    assert_eq!(report["previous"], "public", "{report}");
    assert_eq!(report["verification"]["differences"], json!([]), "{report}");
    let listed = strata(data_dir, backends, &["rebuild", "--list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("public\n") && listed.contains("strata_gen_2  (current)"),
        "{listed}"
    );
    let out = strata(
        data_dir,
        backends,
        &["context", "s1", "--tenant", tenant, "--json"],
    );
    let after: Value = serde_json::from_slice(&out.stdout).expect("context --json is JSON");
    assert_eq!(
        after["payload"], before["payload"],
        "the rebuilt set answers alike"
    );
    // The projector service writes the new set now: an event imported after the switch is
    // projected there (import waits for the projector's offsets in the current set).
    // Beside the data directory: the distributed run writes nothing into it.
    let late = data_dir.with_file_name("late.jsonl");
    std::fs::write(
        &late,
        json!({"event_id": "late-1", "tenant_id": tenant, "session_id": "s1",
            "timestamp": "2026-06-03T11:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "u-late", "text": "after the switch: ship it"}})
        .to_string()
            + "\n",
    )
    .expect("write the late event");
    strata(
        data_dir,
        backends,
        &["import", late.to_str().expect("utf-8 path")],
    );
    let out = strata(
        data_dir,
        backends,
        &["context", "s1", "--tenant", tenant, "--json"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("after the switch: ship it"),
        "the event imported after the switch is missing from the context"
    );
    strata(data_dir, backends, &["rebuild", "--drop", "public"]);
    let listed = strata(data_dir, backends, &["rebuild", "--list"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "strata_gen_2  (current)\n"
    );
}

/// `POST /v1/sessions/{id}/compact` served by the `strata-assembler` service on the shared
/// backends, with a key made by `strata keys create`: the record comes back once the projector
/// service has it, and the next context is built on it.
fn compaction_over_http(data_dir: &Path, backends: &[(&str, String)], tenant: &str) {
    let out = strata(
        data_dir,
        backends,
        &["keys", "create", "--tenant", tenant, "--label", "e2e"],
    );
    let key = String::from_utf8(out.stdout).expect("utf-8 key");
    let key = key.trim();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("address")
        .port();
    let binary = Path::new(env!("CARGO_BIN_EXE_strata")).with_file_name("strata-assembler");
    let mut cmd = Command::new(binary);
    cmd.env("STRATA_DATA_DIR", data_dir);
    for (k, v) in backends {
        cmd.env(k, v);
    }
    let mut assembler = Services(vec![cmd
        .env("STRATA_LISTEN", format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("run strata-assembler")]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (status, record) = loop {
        match http_post(port, key, "/v1/sessions/s1/compact", r#"{"keep_turns": 1}"#) {
            Some((503, _)) | None if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Some(answer) => break answer,
            None => panic!("strata-assembler never answered on {port}"),
        }
    };
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["tenant_id"], tenant);
    // The first turn is summarised; the record is projected, so the next context stands on it.
    let (status, context) =
        http_post(port, key, "/v1/sessions/s1/context", "{}").expect("the context");
    assert_eq!(status, 200, "{context}");
    let kinds: Vec<&str> = context["assembly"]["included"]
        .as_array()
        .expect("segments")
        .iter()
        .filter_map(|s| s["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"compaction_summary"), "{kinds:?}");
    // A key the store does not know is refused.
    let (status, _) =
        http_post(port, "sk_nobody", "/v1/sessions/s1/compact", "").expect("an answer");
    assert_eq!(status, 401);
    stop(&mut assembler.0[0]);
}

/// One HTTP/1.1 POST on loopback: the status and the JSON body (`None` when nothing listens).
fn http_post(port: u16, key: &str, path: &str, body: &str) -> Option<(u16, Value)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("{prefix}{}x{nanos}", std::process::id())
}

fn fixture(tenant: &str) -> String {
    let mut lines = Vec::new();
    let mut n = 0;
    let mut push = |ty: &str, payload: Value| {
        n += 1;
        lines.push(
            json!({"event_id": format!("e{n}"), "tenant_id": tenant, "session_id": "s1",
                "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload})
            .to_string(),
        );
    };
    push(
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
        "context_window_tokens": 128000, "reserved_output_tokens": 8000, "system_prompt": "be exact"}),
    );
    push(
        "UserPromptSubmitted",
        json!({"message_id": "u1", "text": "make the tests pass"}),
    );
    push(
        "StateUpdated",
        json!({"goal": "green CI", "open_questions": ["which test?"]}),
    );
    for i in 0..6 {
        push(
            "ModelResponseReceived",
            json!({"message_id": format!("a{i}"), "text": format!("step {i}"),
            "tool_calls": [{"tool_call_id": format!("c{i}"), "name": "run_tests", "args": {"i": i}}]}),
        );
        let output = if i == 2 {
            "test x ... FAILED\n".repeat(900)
        } else {
            format!("ok {i}")
        };
        push(
            "ToolCallFinished",
            json!({"tool_call_id": format!("c{i}"), "output": output, "is_error": i == 2}),
        );
    }
    push("FileWritten", json!({"path": "src/lib.rs"}));
    push(
        "UserPromptSubmitted",
        json!({"message_id": "u2", "text": "now add a regression test"}),
    );
    lines.join("\n") + "\n"
}

/// The words of the fixture's session, none of which may survive a forget.
const MARKERS: [&str; 5] = [
    "make the tests pass",
    "now add a regression test",
    "be exact",
    "green CI",
    "test x ... FAILED",
];

/// The rows of every schema of the database at `db_url`, as `pg_dump --data-only` writes them.
fn pg_dump(db_url: &str) -> Vec<u8> {
    let out = Command::new("pg_dump")
        .args(["--data-only", db_url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `strata forget` on the servers: afterwards no marker in a `pg_dump` of the database (every
/// projection generation), in the tenant's Redis keys, or in its S3 artifact.
fn forget_on_servers(
    data_dir: &Path,
    backends: &[(&str, String)],
    tenant: &str,
    db_url: &str,
    redis: &str,
) {
    let dump = || String::from_utf8_lossy(&pg_dump(db_url)).into_owned();
    assert!(
        dump().contains("make the tests pass"),
        "the dump holds the session"
    );
    let out = strata(
        data_dir,
        backends,
        &["forget", "--session", "s1", "--tenant", tenant, "--json"],
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("forget --json is JSON");
    assert_eq!(report[0]["key_destroyed"], true, "{report}");
    assert_eq!(
        report[0]["sets"], 1,
        "the live generation (the rebuild above dropped the one before): {report}"
    );
    assert_eq!(report[0]["artifacts_deleted"], 1, "{report}");
    let after = dump();
    for marker in MARKERS {
        assert!(!after.contains(marker), "pg_dump still holds {marker:?}");
    }
    let keys = Command::new("redis-cli")
        .args(["-u", redis, "--scan", "--pattern", &format!("*{tenant}*")])
        .output()
        .expect("run redis-cli");
    for key in String::from_utf8_lossy(&keys.stdout).lines() {
        assert!(
            !key.contains("proj:"),
            "the projected state is still there: {key}"
        );
        let value = Command::new("redis-cli")
            .args(["-u", redis, "--raw", "DUMP", key])
            .output()
            .expect("run redis-cli");
        for marker in MARKERS {
            assert!(
                !value
                    .stdout
                    .windows(marker.len())
                    .any(|w| w == marker.as_bytes()),
                "redis key {key} holds {marker:?}"
            );
        }
    }
    let blob_url = backends
        .iter()
        .find(|(k, _)| *k == "STRATA_BLOB")
        .map(|(_, v)| v.clone())
        .expect("blob url");
    let left = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let blobs = strata_blob::BlobStore::open(&blob_url).expect("open blobs");
            let large = strata_core::sha256_hex("test x ... FAILED\n".repeat(900).as_bytes());
            blobs.get_artifact(tenant, &large).await.expect("get")
        });
    assert!(left.is_none(), "the session's artifact is still in S3");
}

/// Sessions of tenant `people` written by the team: `p-1` serves end user `alice`, `p-2` `bob`;
/// and `k-1` of tenant `kept`, whose context no forget of theirs may change.
fn people_fixture(people: &str, kept: &str) -> String {
    let mut lines = Vec::new();
    for (tenant, session, user) in [
        (people, "p-1", "alice"),
        (people, "p-2", "bob"),
        (kept, "k-1", "carol"),
    ] {
        let start = json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 32000, "reserved_output_tokens": 4000, "user_id": user});
        let prompt = json!({"message_id": "u1",
            "text": format!("PEOPLE-MARKER-{session}: the payroll of {user}")});
        for (n, ty, payload) in [
            (1, "SessionStarted", start),
            (2, "UserPromptSubmitted", prompt),
        ] {
            lines.push(
                json!({"event_id": format!("{session}-{n}"), "tenant_id": tenant,
                    "session_id": session, "timestamp": "2026-06-03T12:00:00Z", "type": ty,
                    "payload": payload})
                .to_string(),
            );
        }
    }
    lines.join("\n") + "\n"
}

/// The payload `strata context` gives for `session`, once two answers in a row agree (the
/// memory extractor derives asynchronously).
fn settled_context(
    data_dir: &Path,
    backends: &[(&str, String)],
    tenant: &str,
    session: &str,
) -> Value {
    let args = ["context", session, "--tenant", tenant, "--json"];
    let payload = || -> Value {
        let out = strata(data_dir, backends, &args);
        serde_json::from_slice::<Value>(&out.stdout).expect("context --json is JSON")["payload"]
            .clone()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = payload();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let next = payload();
        if next == last || std::time::Instant::now() > deadline {
            return next;
        }
        last = next;
    }
}

/// `strata forget --user` and `--whole-tenant` on the servers: the forgotten user's words, then
/// the whole tenant's, are gone from a `pg_dump`, the tenant's Redis keys and the raw topic, stay
/// gone after a rebuild, and the others' contexts are unchanged.
fn forget_user_and_tenant_on_servers(
    data_dir: &Path,
    backends: &[(&str, String)],
    db_url: &str,
    redis: &str,
    log_url: &str,
) {
    let people = unique("people");
    let kept = unique("kept");
    let file = data_dir.with_file_name("people.jsonl");
    std::fs::write(&file, people_fixture(&people, &kept)).expect("write the fixture");
    strata(
        data_dir,
        backends,
        &["import", file.to_str().expect("utf-8")],
    );
    let bob = settled_context(data_dir, backends, &people, "p-2");
    let carol = settled_context(data_dir, backends, &kept, "k-1");
    let dump = || pg_dump(db_url);
    let holds =
        |bytes: &[u8], marker: &str| bytes.windows(marker.len()).any(|w| w == marker.as_bytes());
    assert!(
        holds(&dump(), "PEOPLE-MARKER-p-1"),
        "the dump holds alice's session"
    );

    let args = ["forget", "--user", "alice", "--tenant", &people, "--json"];
    let report: Value =
        serde_json::from_slice(&strata(data_dir, backends, &args).stdout).expect("JSON");
    assert_eq!(report["sessions"][0]["session_id"], "p-1", "{report}");
    assert_eq!(
        report["sessions"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let after = dump();
    assert!(
        !holds(&after, "PEOPLE-MARKER-p-1"),
        "alice's words are in the dump"
    );
    assert!(holds(&after, "PEOPLE-MARKER-p-2"), "bob's session went too");
    assert_eq!(
        settled_context(data_dir, backends, &people, "p-2"),
        bob,
        "bob's context changed"
    );

    let args = ["forget", "--whole-tenant", &people, "--json"];
    let report: Value =
        serde_json::from_slice(&strata(data_dir, backends, &args).stdout).expect("JSON");
    assert_eq!(report["sessions"][0]["session_id"], "p-2", "{report}");
    assert_eq!(report["not_forgettable"], json!([]), "{report}");
    // A rebuild reads the log again: the destroyed keys leave nothing of theirs to project.
    let out = strata(data_dir, backends, &["rebuild", "--json"]);
    let rebuilt: Value = serde_json::from_slice(&out.stdout).expect("rebuild --json is JSON");
    assert_eq!(rebuilt["switched"], true, "{rebuilt}");
    let after = dump();
    for marker in ["PEOPLE-MARKER-p-1", "PEOPLE-MARKER-p-2", "payroll of bob"] {
        assert!(
            !holds(&after, marker),
            "pg_dump holds {marker:?} after the forget and a rebuild"
        );
    }
    assert!(
        holds(&after, "PEOPLE-MARKER-k-1"),
        "the other tenant is still there"
    );
    // A replay reads the log too: the tenant's sessions are not there to replay.
    let out = strata(
        data_dir,
        backends,
        &["replay", "--tenant", &people, "--json"],
    );
    let replay: Value = serde_json::from_slice(&out.stdout).expect("replay --json is JSON");
    assert_eq!(replay["sessions"], 0, "{replay}");
    assert!(!holds(&out.stdout, "PEOPLE-MARKER"), "{replay}");
    assert_eq!(
        settled_context(data_dir, backends, &kept, "k-1"),
        carol,
        "another tenant's context changed"
    );
    let keys = Command::new("redis-cli")
        .args(["-u", redis, "--scan", "--pattern", &format!("*{people}*")])
        .output()
        .expect("run redis-cli");
    for key in String::from_utf8_lossy(&keys.stdout).lines() {
        let value = Command::new("redis-cli")
            .args(["-u", redis, "--raw", "DUMP", key])
            .output()
            .expect("run redis-cli");
        assert!(
            !holds(&value.stdout, "PEOPLE-MARKER"),
            "redis key {key} holds the tenant's words"
        );
    }
    for record in raw_topic(log_url) {
        assert!(
            !holds(&record, "PEOPLE-MARKER"),
            "a record of the topic holds the words in the clear"
        );
    }
}

/// Every record of the log at `url`, from offset 0, as its bytes.
fn raw_topic(url: &str) -> Vec<Vec<u8>> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let log = strata_log::open(url, strata_log::FileLogOptions::default())
            .await
            .expect("open the topic");
        let mut out = Vec::new();
        for (p, end) in log.end_offsets().await.expect("ends").iter().enumerate() {
            let mut from = 0;
            while from < *end {
                let chunk = log.read(p as u32, from, 1000).await.expect("read");
                let Some(last) = chunk.last() else { break };
                from = last.offset + 1;
                out.extend(chunk.into_iter().map(|r| r.value));
            }
        }
        out
    })
}

#[test]
fn distributed_backends_give_the_same_context_as_the_embedded_default() {
    let (Some(kafka), Some(pg), Some(redis), Some(s3)) = (
        required("STRATA_TEST_KAFKA_BROKERS"),
        required("STRATA_TEST_POSTGRES_URL"),
        required("STRATA_TEST_REDIS_URL"),
        required("STRATA_TEST_S3_URL"),
    ) else {
        return;
    };
    // A database of its own, and a tenant and blob prefix no other run shares (Redis keys and
    // blobs are namespaced by tenant).
    let database = unique("strata_e2e_");
    let created = Command::new("psql")
        .args([
            pg.as_str(),
            "-q",
            "-c",
            &format!("CREATE DATABASE {database}"),
        ])
        .output()
        .expect("run psql");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let db_url = match pg.rfind('/') {
        Some(i) => format!("{}/{database}", &pg[..i]),
        None => panic!("unexpected postgres url {pg}"),
    };
    let tenant = unique("t");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, fixture(&tenant)).expect("write fixture");
    let file = file.to_str().expect("utf-8 path");

    let embedded = dir.path().join("embedded");
    let distributed = dir.path().join("distributed");
    // Every service of a deployment shares one master key, made by the operator.
    let master_key = dir.path().join("master.key");
    std::fs::write(&master_key, format!("{}\n", "5a".repeat(32))).expect("write master key");
    let log_url = format!("kafka://{kafka}/{}?partitions=4", unique("events"));
    let remote = vec![
        ("STRATA_LOG", log_url.clone()),
        ("STRATA_DB", db_url.clone()),
        ("STRATA_HOT", redis.clone()),
        ("STRATA_BLOB", format!("{s3}/{}", unique("e2e"))),
        ("STRATA_SEAL", "on".to_owned()),
        ("STRATA_MASTER_KEY_FILE", master_key.display().to_string()),
    ];
    let mut contexts: Vec<Value> = Vec::new();
    for (data_dir, backends) in [(&embedded, vec![]), (&distributed, remote)] {
        // On the shared log, the verbs wait for a projector service rather than project: run
        // one.
        let services = (!backends.is_empty()).then(|| Services::start(data_dir, &backends));
        strata(data_dir, &backends, &["import", file]);
        let again = strata(data_dir, &backends, &["import", file]);
        assert!(
            String::from_utf8_lossy(&again.stdout).contains("imported 0 event(s)"),
            "import is idempotent on every backend"
        );
        // The memory extractor service derives asynchronously: ask until its memories are
        // projected (the embedded verbs derive them before answering), bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let v = loop {
            let out = strata(
                data_dir,
                &backends,
                &["context", "s1", "--tenant", &tenant, "--json"],
            );
            let v: Value = serde_json::from_slice(&out.stdout).expect("context --json is JSON");
            if contexts.is_empty()
                || v["payload"] == contexts[0]["payload"]
                || std::time::Instant::now() > deadline
            {
                break v;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        if services.is_some() {
            rebuild_under_running_services(data_dir, &backends, &tenant, &v);
            compaction_over_http(data_dir, &backends, &tenant);
        }
        contexts.push(v);
        if services.is_some() {
            forget_on_servers(data_dir, &backends, &tenant, &db_url, &redis);
            forget_user_and_tenant_on_servers(data_dir, &backends, &db_url, &redis, &log_url);
        }
        drop(services);
    }
    assert_eq!(
        contexts[0]["payload"], contexts[1]["payload"],
        "payloads differ"
    );
    assert_eq!(
        contexts[0]["assembly"]["transcript_tokens"],
        contexts[1]["assembly"]["transcript_tokens"]
    );
    assert_eq!(
        contexts[0]["assembly"]["assembly_id"],
        contexts[1]["assembly"]["assembly_id"]
    );
    // The large output went to S3 and is referenced from the context.
    assert!(contexts[1]["payload"]
        .to_string()
        .contains("artifact:sha256:"));
    // The distributed run wrote nothing into a data directory: every backend is a server.
    assert!(!distributed.join("strata.db").exists());
    assert!(!distributed.join("blobs").exists());
    assert!(!distributed.join("log").exists());
    assert!(
        !distributed.join("keys.db").exists(),
        "keys live in PostgreSQL"
    );

    // The topic from offset 0: every record sealed, none of the session's words in it.
    let topic = raw_topic(&log_url);
    assert!(topic.len() >= 17, "{} records", topic.len());
    let codec = strata_codec::AvroCodec::new();
    for record in &topic {
        assert!(
            matches!(
                codec.decode_record(record),
                Ok(strata_codec::Record::Sealed(_))
            ),
            "a plain record on a sealed log"
        );
        for marker in MARKERS {
            assert!(
                !record.windows(marker.len()).any(|w| w == marker.as_bytes()),
                "the topic holds {marker:?}"
            );
        }
    }

    let _ = Command::new("psql")
        .args([
            pg.as_str(),
            "-q",
            "-c",
            &format!("DROP DATABASE IF EXISTS {database}"),
        ])
        .output();
}
