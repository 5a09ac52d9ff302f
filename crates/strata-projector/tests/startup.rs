//! A `strata-projector` process started before its backends (see `strata_runtime::startup`):
//!
//! - **PostgreSQL not up yet**: the projector is started on a private PostgreSQL whose server
//!   does not run yet (never the shared one of `scripts/services.sh`). The process stays alive,
//!   `/healthz` answers 200 and `/readyz` 503 naming the projection store and "connection
//!   refused"; once the server starts, `/readyz` turns 200 within a bound and the events that
//!   were appended meanwhile are projected. SIGTERM then stops it with status 0.
//! - **Stopped while waiting**: SIGTERM during the wait exits 0 at once.
//! - **Errors retrying cannot fix**: a malformed URL, an unknown parameter or a data directory
//!   locked by another process exit non-zero at once, naming the problem (and no password).
//!
//! The first test also needs the shared Kafka-protocol broker (`STRATA_TEST_KAFKA_BROKERS`, on
//! a topic and group of its own): this test appends to the log the projector process reads,
//! which the embedded file log (one process per data directory) does not allow. Outside CI a
//! missing server or variable skips it with a message; under `CI` it fails.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_blob::BlobStore;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FileLogOptions;
use strata_runtime::{Backends, DataDirLock};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

use support::*;

/// `/readyz` answers 503 with a body that contains every one of `parts`.
async fn wait_for_unready(projector: &ProjectorProcess, parts: &[&str]) {
    eventually(
        &format!("/readyz answers 503 with {parts:?}"),
        Duration::from_secs(10),
        || {
            let seen = matches!(projector.get("/readyz"),
                Some((503, body)) if parts.iter().all(|p| body.contains(p)));
            async move { seen }
        },
        || format!("{:?}; log:\n{}", projector.get("/readyz"), projector.log()),
    )
    .await;
}

fn event(n: usize, sessions: usize) -> Value {
    let session = format!("s{}", n % sessions);
    let (ty, payload) = if n < sessions {
        (
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "gpt-4o"},
                "context_window_tokens": 128000, "reserved_output_tokens": 4000}),
        )
    } else {
        (
            "UserPromptSubmitted",
            json!({"message_id": format!("u{n}"), "text": format!("prompt {n}")}),
        )
    };
    json!({"event_id": format!("e{n}"), "tenant_id": "acme", "session_id": session,
        "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload})
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_started_before_postgres_waits_unready_then_projects() {
    let brokers = match std::env::var("STRATA_TEST_KAFKA_BROKERS") {
        Ok(b) if !b.is_empty() => b,
        _ => {
            assert!(
                !in_ci(),
                "STRATA_TEST_KAFKA_BROKERS is not set under CI (scripts/services.sh start)"
            );
            eprintln!("skipping: STRATA_TEST_KAFKA_BROKERS is not set");
            return;
        }
    };
    let Some(bin) = pg_bindir() else {
        assert!(
            !in_ci(),
            "postgresql (initdb) is not installed under CI (scripts/services.sh start)"
        );
        eprintln!("skipping: postgresql is not installed (scripts/services.sh start)");
        return;
    };
    let started = Instant::now();
    let pg = PrivatePostgres::init(bin);
    let dir = tempfile::tempdir().expect("tempdir");
    let log_url = format!("kafka://{brokers}/{}?partitions=2", unique("startup"));
    let group = unique("startup");
    let mut projector = ProjectorProcess::start(
        dir.path(),
        &[
            ("STRATA_LOG", log_url.clone()),
            ("STRATA_DB", pg.url("postgres")),
            ("STRATA_PROJECTOR_GROUP", group.clone()),
        ],
    );

    // PostgreSQL is not running: alive, live, not ready, and says why.
    wait_for_unready(&projector, &["waiting for the projection store"]).await;
    // Unauthenticated: nothing of the backend in the body; the log says where and why.
    let (_, body) = projector.get("/readyz").expect("answers");
    assert!(
        !body.contains("postgres://") && !body.contains("127.0.0.1"),
        "{body}"
    );
    assert!(
        projector.log().contains("Connection refused"),
        "{}",
        projector.log()
    );
    assert_eq!(projector.get("/healthz").map(|r| r.0), Some(200));
    let waited = Instant::now();

    // Events arrive meanwhile (this test's ingest keeps its own SQLite projections).
    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .expect("open the kafka log");
    let ingest_store: Arc<dyn ProjectionStore> = Arc::new(
        SqliteStore::open(&dir.path().join("ingest.db").display().to_string())
            .await
            .expect("ingest store"),
    );
    let ingestor = Ingestor::new(
        Backends::from_parts(
            log.clone(),
            ingest_store,
            Arc::new(strata_hot::MemoryHotState::default()),
            BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
            dir.path().to_path_buf(),
        ),
        IngestOptions::default(),
    );
    const EVENTS: usize = 20;
    let events: Vec<Value> = (0..EVENTS).map(|n| event(n, 3)).collect();
    ingestor
        .ingest_json(&Publisher::Operator, events)
        .await
        .expect("ingest does not depend on the projector's store");
    // Well past the first backoffs: still waiting, still alive.
    tokio::time::sleep(Duration::from_millis(1500).saturating_sub(waited.elapsed())).await;
    projector.assert_running("while PostgreSQL is down");
    wait_for_unready(&projector, &["waiting for the projection store"]).await;

    // PostgreSQL starts: ready within the longest backoff (5 s) plus the open, and projecting.
    pg.start_server();
    let up = Instant::now();
    eventually(
        "/readyz answers 200 once PostgreSQL is up",
        Duration::from_secs(15),
        || {
            let ok = projector.get("/readyz").map(|r| r.0) == Some(200);
            async move { ok }
        },
        || format!("{:?}; log:\n{}", projector.get("/readyz"), projector.log()),
    )
    .await;
    let ready_after = up.elapsed();
    let store = PgStore::open(&pg.url("postgres"))
        .await
        .expect("open the store");
    eventually(
        "the projector projects what was appended while it waited",
        Duration::from_secs(30),
        || async { behind(log.as_ref(), &store, &group).await == Some(0) },
        || format!("{:?}", projector.get("/readyz")),
    )
    .await;
    let print = store.fingerprint().await.expect("fingerprint");
    assert_eq!(
        print["events"].0, EVENTS as u64,
        "every event projected once"
    );
    projector.assert_running("after PostgreSQL came up");
    let status = projector.terminate();
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    let log_text = projector.log();
    assert!(
        log_text.contains("cannot open a backend; retrying"),
        "each failed attempt is logged: {log_text}"
    );
    eprintln!(
        "postgres at startup: ready {ready_after:?} after the server came up, test {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn sigterm_while_waiting_for_a_backend_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut projector = ProjectorProcess::start(
        dir.path(),
        &[(
            "STRATA_DB",
            format!("postgres://strata@127.0.0.1:{}/strata", free_port()),
        )],
    );
    wait_for_unready(&projector, &["waiting for the projection store"]).await;
    let stopping = Instant::now();
    let status = projector.terminate();
    assert!(
        status.success(),
        "SIGTERM during the wait is a clean stop: {status}"
    );
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "stopped at once, not after a backoff: {:?}",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn errors_retrying_cannot_fix_exit_at_once_naming_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&str, String, &str); 3] = [
        (
            "STRATA_DB",
            "postgres://strata:hunter2@127.0.0.1:1/strata?max_connections=many".into(),
            "max_connections must be a positive integer",
        ),
        (
            "STRATA_LOG",
            "kafka://127.0.0.1:1/events?partitons=4".into(),
            "unknown parameter \"partitons=4\"",
        ),
        (
            "STRATA_DB",
            "mysql://strata:hunter2@127.0.0.1/strata".into(),
            "unsupported store url",
        ),
    ];
    for (var, url, expected) in cases {
        let mut projector = ProjectorProcess::start(dir.path(), &[(var, url.clone())]);
        let status = projector
            .exit_within(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{var}={url}: still running after 5 s"));
        assert!(!status.success(), "{var}={url}: {status}");
        let log = projector.log();
        assert!(log.contains(expected), "{var}={url}: {log}");
        assert!(!log.contains("hunter2"), "password leaked: {log}");
    }

    // The data directory of another process.
    let data_dir = dir.path().join("projector");
    std::fs::create_dir_all(&data_dir).expect("mkdir");
    let _held = DataDirLock::acquire(&data_dir, "strata dev").expect("lock");
    let mut projector = ProjectorProcess::start(dir.path(), &[]);
    let status = projector
        .exit_within(Duration::from_secs(5))
        .expect("a locked data directory exits at once");
    assert!(!status.success(), "{status}");
    let log = projector.log();
    assert!(
        log.contains("is in use by another strata process") && log.contains("strata dev"),
        "{log}"
    );
}
