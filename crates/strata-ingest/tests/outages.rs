//! Backend outages around ingest, against real servers and file systems this test sets up and
//! tears down itself (never the shared servers of `scripts/services.sh`):
//!
//! - **Broker restart**: a private tansu broker (the Kafka-protocol broker CI runs) is stopped
//!   while ingest appends through it. Ingest answers 503 within its delivery timeout, and
//!   `/readyz` says not ready, instead of hanging or acknowledging; after the broker restarts on
//!   the same storage the refused batch is accepted when re-sent, and every acknowledged event is
//!   on the log exactly once with the seq it was acknowledged with.
//! - **Full blob store**: the file blob store on a 2 MiB tmpfs fills up with large tool outputs.
//!   The batch that does not fit is refused with 507 naming the event and "no space left",
//!   nothing of it is acknowledged, nothing earlier is lost, and once the tmpfs is grown the same
//!   batch is accepted. Mounting needs root (CI runs as root); run as another user the test
//!   fails and says so.
//!
//! Outside CI a missing server binary skips a test with a message; under `CI` it fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use strata_blob::BlobStore;
use strata_ingest::{IngestOptions, Ingestor};
use strata_log::{FileLogOptions, FsyncPolicy};
use strata_runtime::{auth, BackendOpts, Backends};
use tower::ServiceExt;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Sends `POST /v1/events` with `events` as tenant acme; the status and the JSON body.
async fn post(router: &Router, key: &str, events: &[Value]) -> (StatusCode, Value) {
    let request = Request::post("/v1/events")
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Body::from(json!({ "events": events }).to_string()))
        .expect("a request");
    let response = router.clone().oneshot(request).await.expect("a response");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Event ids with the seq they were acknowledged with, from a 200 answer.
fn acknowledged(body: &Value) -> Vec<(String, u64)> {
    body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["event_id"].as_str().expect("event_id").to_owned(),
                r["seq"].as_u64().expect("seq"),
            )
        })
        .collect()
}

/// Every record of the log, decoded: event id → every seq it was appended with.
async fn log_contents(backends: &Backends) -> HashMap<String, Vec<u64>> {
    let end = backends.log.end_offsets().await.expect("log end offsets");
    let mut events: HashMap<String, Vec<u64>> = HashMap::new();
    for (partition, end) in end.iter().enumerate() {
        let mut from = 0;
        while from < *end {
            let records = backends
                .log
                .read(partition as u32, from, 500)
                .await
                .expect("read the log");
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            for r in &records {
                let e = backends
                    .codec
                    .decode(&r.value)
                    .await
                    .expect("every record decodes");
                events
                    .entry(e.event_id)
                    .or_default()
                    .push(e.seq.expect("a seq on the log"));
            }
        }
    }
    events
}

fn prompt(n: usize) -> Value {
    json!({"event_id": format!("p{n}"), "tenant_id": "acme", "session_id": format!("s{}", n % 3),
        "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
        "payload": {"message_id": format!("u{n}"), "text": format!("prompt {n}")}})
}

// ---------------------------------------------------------------------------------------------
// Broker restart.

/// A tansu broker of this test's own: its sqlite storage in a temporary directory, on a free
/// loopback port, launched as `scripts/services.sh` launches the shared one.
struct PrivateTansu {
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl PrivateTansu {
    fn start(bin: PathBuf) -> PrivateTansu {
        let mut tansu = PrivateTansu {
            bin,
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        tansu.launch();
        tansu
    }

    /// Starts the broker on this directory's storage and waits until it serves.
    fn launch(&mut self) {
        let listener = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::File::create(self.dir.path().join("tansu.log")).expect("log file");
        // Its sqlite path is relative to the working directory; it listens on IPv4 only.
        let mut child = Command::new(&self.bin)
            .current_dir(self.dir.path())
            .args(["broker", "--listener-url", &listener])
            .args(["--advertised-listener-url", &listener])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("run tansu");
        let deadline = Instant::now() + Duration::from_secs(20);
        // Wait until it serves: its schema is complete then (touching the database while it
        // creates the schema makes a migration fail and tansu exit).
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "tansu exited ({status}) before serving: {}",
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "tansu did not start: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
        // tansu 0.6.0 lacks this index: without it fetches slow down until the broker stops
        // answering (see INFRA.md). Idempotent on a restart.
        let script = "import sqlite3, sys\n\
            db = sqlite3.connect(sys.argv[1], timeout=10)\n\
            if not db.execute(\"SELECT 1 FROM sqlite_master WHERE name = 'header'\").fetchone():\n    sys.exit(1)\n\
            db.execute('CREATE INDEX IF NOT EXISTS header_tp_off ON header(topition, offset_id)')\n\
            db.commit()\n";
        let db = self.dir.path().join("tansu.db");
        loop {
            let ok = Command::new("python3")
                .arg("-c")
                .arg(script)
                .arg(&db)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "could not add the header index to {} (python3 with sqlite3 is needed)",
                db.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the broker: SIGTERM, then SIGKILL after 3 s (tansu sometimes ignores SIGTERM).
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("tansu.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

impl Drop for PrivateTansu {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The tansu binary `scripts/services.sh` installs, or `None` (skip) outside CI.
fn tansu_bin() -> Option<PathBuf> {
    let bin = PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo/bin/tansu");
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        !in_ci(),
        "tansu is not installed at {} under CI (scripts/services.sh start builds it)",
        bin.display()
    );
    eprintln!(
        "skipping broker restart test: tansu is not installed at {} (scripts/services.sh start \
         builds it)",
        bin.display()
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_refuses_meanwhile_and_acknowledges_each_event_once() {
    let Some(bin) = tansu_bin() else {
        return;
    };
    let started = Instant::now();
    let mut tansu = PrivateTansu::start(bin);
    let dir = tempfile::tempdir().expect("tempdir");
    // A short delivery timeout: an append the broker does not confirm fails after it.
    let log_url = format!(
        "kafka://127.0.0.1:{}/events?partitions=2&delivery_timeout_ms=3000",
        tansu.port
    );
    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .expect("open the log on the private broker");
    let store: Arc<dyn strata_store::ProjectionStore> = Arc::new(
        strata_store::sqlite::SqliteStore::open(
            &dir.path().join("strata.db").display().to_string(),
        )
        .await
        .expect("store"),
    );
    let key = auth::create_key(store.as_ref(), "acme", "test")
        .await
        .expect("api key");
    let backends = Backends::from_parts(
        log,
        store,
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
        dir.path().to_path_buf(),
    );
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let router = strata_ingest::http::routes(ingestor);
    let admin = strata_runtime::admin::admin_routes(backends.clone());
    let ready = || async {
        admin
            .clone()
            .oneshot(
                Request::get("/readyz")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response")
            .status()
    };

    let mut acked: Vec<(String, u64)> = Vec::new();
    let batch = |from: usize| (from..from + 6).map(prompt).collect::<Vec<Value>>();
    for from in (0..30).step_by(6) {
        let (status, body) = post(&router, &key, &batch(from)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        acked.extend(acknowledged(&body));
    }
    assert_eq!(ready().await, StatusCode::OK);

    // The broker goes away: a batch is refused in bounded time, and ingest is not ready.
    tansu.stop();
    let refused_batch = batch(30);
    let asked = Instant::now();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(30), post(&router, &key, &refused_batch))
            .await
            .expect("ingest answers while the broker is down");
    let refused_in = asked.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nothing of this batch was accepted")),
        "{body}"
    );
    assert_eq!(ready().await, StatusCode::SERVICE_UNAVAILABLE);

    // Back on the same storage: the refused batch, re-sent, is accepted (each event once, even
    // if the broker wrote some of it before it went away), and new batches go on.
    tansu.launch();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = post(&router, &key, &refused_batch).await;
        if status == StatusCode::OK {
            acked.extend(acknowledged(&body));
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            Instant::now() < deadline,
            "appends never worked again after the broker restart: {body}; broker: {}",
            tansu.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for from in (36..60).step_by(6) {
        let (status, body) = post(&router, &key, &batch(from)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        acked.extend(acknowledged(&body));
    }
    assert_eq!(ready().await, StatusCode::OK);

    let on_log = log_contents(&backends).await;
    for (id, seq) in &acked {
        assert_eq!(
            on_log.get(id),
            Some(&vec![*seq]),
            "{id}: on the log exactly once, with the seq it was acknowledged with"
        );
    }
    assert_eq!(acked.len(), 60);
    // No seq of a session was handed out twice.
    let mut seqs: HashMap<(String, u64), usize> = HashMap::new();
    for (n, (id, seq)) in acked.iter().enumerate() {
        let session = prompt(n)["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(id.starts_with('p'));
        *seqs.entry((session, *seq)).or_default() += 1;
    }
    assert!(
        seqs.values().all(|c| *c == 1),
        "a seq handed out twice: {seqs:?}"
    );
    eprintln!(
        "broker restart: refused in {refused_in:?} while down, test {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Full blob store.

/// A tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount -t tmpfs on {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Grows (or shrinks) the file system in place; its files stay.
    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "remount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A tool result whose output (100 KiB, distinct per `n`) is stored as an artifact.
fn large_result(n: usize) -> (Value, String) {
    let mut output = format!("result {n}\n").repeat(12 * 1024);
    output.truncate(100 * 1024);
    let event = json!({"event_id": format!("big{n}"), "tenant_id": "acme", "session_id": "s-big",
        "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z", "type": "ToolCallFinished",
        "payload": {"tool_call_id": format!("call{n}"), "output": output.clone()}});
    (event, output)
}

#[tokio::test]
async fn a_full_blob_store_refuses_the_batch_clearly_and_loses_nothing() {
    assert!(
        is_root(),
        "this test needs root: it mounts a 2 MiB tmpfs as the blob store to fill it up (CI runs \
         as root; run it with sudo or as root)"
    );
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let blobs = dir.path().join("blobs");
    let tmpfs = Tmpfs::mount(&blobs, "2m");
    let opts = BackendOpts {
        blob_url: Some(format!("file://{}", blobs.display())),
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.expect("backends");
    let key = auth::create_key(backends.store.as_ref(), "acme", "test")
        .await
        .expect("api key");
    let router = strata_ingest::http::routes(Arc::new(Ingestor::new(
        backends.clone(),
        IngestOptions::default(),
    )));

    // Batches of two 100 KiB outputs until the store is full.
    let mut acked: Vec<(String, u64)> = Vec::new();
    let mut outputs: HashMap<String, String> = HashMap::new();
    let mut refused = None;
    for b in 0..40 {
        let (events, texts): (Vec<Value>, Vec<String>) =
            (2 * b..2 * b + 2).map(large_result).unzip();
        let ends_before = backends.log.end_offsets().await.expect("end offsets");
        let (status, body) = post(&router, &key, &events).await;
        if status == StatusCode::OK {
            for ((id, seq), text) in acknowledged(&body).into_iter().zip(texts) {
                outputs.insert(id.clone(), text);
                acked.push((id, seq));
            }
            continue;
        }
        // Refused: clearly, and with nothing of the batch appended.
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
        assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("no space left"), "{message}");
        assert!(
            events.iter().enumerate().any(|(i, e)| {
                message.contains(&format!("event {i} ({})", e["event_id"].as_str().unwrap()))
            }),
            "the message names the event: {message}"
        );
        assert!(
            message.contains("nothing of this batch was accepted"),
            "{message}"
        );
        assert_eq!(
            backends.log.end_offsets().await.expect("end offsets"),
            ends_before,
            "nothing of a refused batch is appended"
        );
        refused = Some((events, texts));
        break;
    }
    let Some((events, texts)) = refused else {
        panic!("80 outputs of 100 KiB fitted on a 2 MiB tmpfs");
    };
    assert!(
        acked.len() >= 4,
        "some batches fitted first: {}",
        acked.len()
    );

    // Nothing acknowledged earlier is lost: on the log, and its artifact complete.
    let check_stored = |acked: Vec<(String, u64)>, outputs: HashMap<String, String>| {
        let backends = backends.clone();
        async move {
            let on_log = log_contents(&backends).await;
            for (id, seq) in &acked {
                assert_eq!(on_log.get(id), Some(&vec![*seq]), "{id} on the log once");
                let sha = strata_core::sha256_hex(outputs[id].as_bytes());
                let bytes = backends
                    .blobs
                    .get_artifact("acme", &sha)
                    .await
                    .expect("artifact readable")
                    .expect("artifact present");
                assert_eq!(bytes, outputs[id].as_bytes(), "{id}: artifact intact");
            }
            on_log.len()
        }
    };
    assert_eq!(
        check_stored(acked.clone(), outputs.clone()).await,
        acked.len(),
        "nothing unacknowledged on the log"
    );

    // Space returns: the same batch is accepted — as new events, so none was acknowledged.
    tmpfs.resize("16m");
    let (status, body) = post(&router, &key, &events).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (r, text) in body["results"]
        .as_array()
        .expect("results")
        .iter()
        .zip(texts)
    {
        assert_eq!(r["status"], "accepted", "{body}");
        let id = r["event_id"].as_str().expect("event_id").to_owned();
        outputs.insert(id.clone(), text);
        acked.push((id, r["seq"].as_u64().expect("seq")));
    }
    let total = acked.len();
    assert_eq!(check_stored(acked, outputs).await, total);
    eprintln!(
        "full blob store: refused after {} events, test {:?}",
        total - events.len(),
        started.elapsed()
    );
}
