//! A `strata-ingest` process started before its backends (see `strata_runtime::startup`),
//! against a redis-server this test starts itself (never the shared one of
//! `scripts/services.sh`):
//!
//! - **Redis not up yet**: ingest is started with its hot state on a port where no Redis runs
//!   yet. The process stays alive and its API port — the one the Kubernetes probes use —
//!   answers `/healthz` 200, `/readyz` 503 naming the hot state and "connection refused", and
//!   `POST /v1/events` 503 with the usual JSON error, acknowledging nothing. Once Redis starts,
//!   `/readyz` turns 200 within a bound and the same batch is accepted. SIGTERM stops it with
//!   status 0.
//! - **Errors retrying cannot fix**: a malformed hot-state URL exits non-zero at once, naming the
//!   problem.
//!
//! Without `redis-server` on `PATH` the first test skips with a message, except under `CI`,
//! where it fails.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_store::sqlite::SqliteStore;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn redis_server_installed() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found || std::env::var_os("CI").is_none(),
        "redis-server is not installed under CI (scripts/services.sh start installs it)"
    );
    if !found {
        eprintln!(
            "skipping: redis-server is not installed (scripts/services.sh start installs it)"
        );
    }
    found
}

/// A redis-server of this test's own on `port`; killed on drop.
struct PrivateRedis(Child);

impl PrivateRedis {
    fn start(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("run redis-server");
        PrivateRedis(child)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `strata-ingest` process on the data directory `dir/ingest`.
struct IngestProcess {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl IngestProcess {
    fn start(dir: &Path, hot_url: &str) -> IngestProcess {
        let port = free_port();
        let stderr = dir.join("ingest.log");
        let child = Command::new(env!("CARGO_BIN_EXE_strata-ingest"))
            .env("STRATA_DATA_DIR", dir.join("ingest"))
            .env("STRATA_HOT", hot_url)
            .env("STRATA_FSYNC", "never")
            .env("STRATA_LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("a log file"))
            .spawn()
            .expect("run strata-ingest");
        IngestProcess {
            child,
            port,
            stderr,
        }
    }

    /// `method path` with an optional bearer key and JSON body: the status and the body as JSON
    /// (`Value::String` when it is not JSON). `None`: no answer.
    fn request(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: &str,
    ) -> Option<(u16, Value)> {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let auth = key
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut text = String::new();
        conn.read_to_string(&mut text).ok()?;
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        Some((status, body))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait on ingest") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.child.try_wait().expect("wait on ingest") {
            panic!(
                "strata-ingest exited {when}: {status}; log:\n{}",
                self.log()
            );
        }
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        self.exit_within(Duration::from_secs(10))
            .expect("ingest stops within 10 s of SIGTERM")
    }
}

impl Drop for IngestProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 50 ms until it holds; panics with `state()` after `within`.
fn eventually(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}; last seen: {}",
            state()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn batch() -> String {
    let events: Vec<Value> = (0..3)
        .map(|n| {
            json!({"event_id": format!("p{n}"), "tenant_id": "acme", "session_id": "s1",
                "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z",
                "type": "UserPromptSubmitted",
                "payload": {"message_id": format!("u{n}"), "text": format!("prompt {n}")}})
        })
        .collect();
    json!({ "events": events }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_started_before_redis_answers_503_then_accepts() {
    if !redis_server_installed() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    // The API key lives in the embedded projection store that ingest opens (it locks the data
    // directory while it runs, so the key is made first).
    let data_dir = dir.path().join("ingest");
    std::fs::create_dir_all(&data_dir).expect("mkdir");
    let key = {
        let store = SqliteStore::open(&data_dir.join("strata.db").display().to_string())
            .await
            .expect("store");
        strata_runtime::auth::create_key(&store, "acme", "test")
            .await
            .expect("api key")
    };
    let redis_port = free_port();
    let mut ingest = IngestProcess::start(dir.path(), &format!("redis://127.0.0.1:{redis_port}/0"));

    // Redis is not running: the API port answers, unready, and refuses writes with the reason.
    eventually(
        "/readyz answers 503 naming the hot state",
        Duration::from_secs(10),
        || {
            matches!(ingest.request("GET", "/readyz", None, ""),
                Some((503, body)) if body["error"]["message"].as_str()
                    == Some("waiting for the hot state"))
        },
        || {
            format!(
                "{:?}; log:\n{}",
                ingest.request("GET", "/readyz", None, ""),
                ingest.log()
            )
        },
    );
    assert_eq!(
        ingest.request("GET", "/healthz", None, "").map(|r| r.0),
        Some(200)
    );
    let (status, body) = ingest
        .request("POST", "/v1/events", Some(&key), &batch())
        .expect("the API answers during the wait");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("waiting for the hot state")),
        "{body}"
    );
    std::thread::sleep(Duration::from_millis(1000));
    ingest.assert_running("while Redis is down");

    // Redis starts: ready within the longest backoff (5 s) plus the open, and accepting.
    let _redis = PrivateRedis::start(redis_port);
    let up = Instant::now();
    eventually(
        "/readyz answers 200 once Redis is up",
        Duration::from_secs(10),
        || ingest.request("GET", "/readyz", None, "").map(|r| r.0) == Some(200),
        || {
            format!(
                "{:?}; log:\n{}",
                ingest.request("GET", "/readyz", None, ""),
                ingest.log()
            )
        },
    );
    let ready_after = up.elapsed();
    let (status, body) = ingest
        .request("POST", "/v1/events", Some(&key), &batch())
        .expect("an answer");
    assert_eq!(status, 200, "{body}");
    let seqs: Vec<u64> = body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(
        seqs,
        [1, 2, 3],
        "the refused batch was not half-acknowledged: {body}"
    );
    let status = ingest.terminate();
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    let log = ingest.log();
    assert!(
        log.contains("cannot open a backend; retrying") && log.contains("hot state"),
        "each failed attempt is logged: {log}"
    );
    eprintln!(
        "redis at startup: ready {ready_after:?} after the server came up, test {:?}",
        started.elapsed()
    );
}

#[test]
fn a_malformed_url_exits_at_once_naming_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ingest = IngestProcess::start(dir.path(), "redis://:hunter2@127.0.0.1:1/0?ttl_secs=0");
    let status = ingest
        .exit_within(Duration::from_secs(5))
        .expect("exits at once");
    assert!(!status.success(), "{status}");
    let log = ingest.log();
    assert!(log.contains("ttl_secs must be a whole number"), "{log}");
    assert!(!log.contains("hunter2"), "password leaked: {log}");
}
