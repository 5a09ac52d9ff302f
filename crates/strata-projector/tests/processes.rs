//! Two `strata-projector` processes in one consumer group on Kafka, writing to PostgreSQL: they
//! split the partitions; one is stopped (SIGTERM) in the middle of the stream and the other takes
//! its partitions; a new member joins and they split again; the first stops and the newcomer takes
//! every partition.
//!
//! A member killed with SIGKILL is not exercised here: tansu 0.6.0, the broker CI runs, keeps
//! assigning partitions to a member whose session has expired, so the handover real Kafka does
//! after `session_timeout_ms` cannot be observed. Crash safety at every batch boundary and between
//! write and commit is tested in `crash.rs` (SQLite and PostgreSQL). At the end the projections equal a clean single projector's over the same
//! log: no event lost, none applied twice, and the undecodable record on the log sits in the
//! dead-letter topic.
//!
//! Needs `STRATA_TEST_KAFKA_BROKERS` and `STRATA_TEST_POSTGRES_URL` (`scripts/services.sh
//! start`). Without them the test skips and says why, except under `CI`, where it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_blob::BlobStore;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::{EventLog, FileLogOptions};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::Backends;
use strata_store::postgres::PgStore;
use strata_store::ProjectionStore;

const PARTITIONS: u32 = 4;
const SESSIONS: usize = 12;

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI: a server is missing (scripts/services.sh start)")
        }
        _ => {
            eprintln!("skipping projector process test: {var} is not set");
            None
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

async fn fresh_database(admin: &str, name: &str) -> String {
    let pool = sqlx::PgPool::connect(admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    format!("{}/{name}", &admin[..admin.rfind('/').unwrap()])
}

async fn drop_database(admin: &str, name: &str) {
    if let Ok(pool) = sqlx::PgPool::connect(admin).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&pool)
            .await;
    }
}

/// One `strata-projector` process.
struct ProjectorProcess {
    child: Child,
    admin_port: u16,
    group: String,
}

impl ProjectorProcess {
    fn start(dir: &Path, name: &str, group: &str, log_url: &str, db_url: &str) -> ProjectorProcess {
        let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data_dir = dir.join(name);
        let child = Command::new(env!("CARGO_BIN_EXE_strata-projector"))
            .env("STRATA_DATA_DIR", &data_dir)
            .env("STRATA_MASTER_KEY_FILE", support::master_key(dir))
            .env("STRATA_LOG", log_url)
            .env("STRATA_DB", db_url)
            .env("STRATA_HOT", "memory://")
            .env(
                "STRATA_BLOB",
                format!("file://{}", dir.join("blobs").display()),
            )
            .env("STRATA_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
            .env("STRATA_PROJECTOR_BATCH_SIZE", "25")
            .env("STRATA_PROJECTOR_GROUP", group)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run strata-projector");
        ProjectorProcess {
            child,
            admin_port,
            group: group.to_owned(),
        }
    }

    fn metrics(&self) -> Option<String> {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.admin_port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        conn.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The consumer lag this process reports, per partition it holds.
    fn lag(&self) -> BTreeMap<u32, u64> {
        let prefix = format!(
            "strata_consumer_lag_records{{group=\"{}\",partition=\"",
            self.group
        );
        self.metrics()
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(&prefix)?;
                let (partition, rest) = rest.split_once('"')?;
                let value = rest.rsplit(' ').next()?;
                Some((partition.parse().ok()?, value.parse().ok()?))
            })
            .collect()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the projector did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ProjectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 200 ms until it holds or `within` passes; `state` describes what was
/// seen last when it times out.
async fn eventually(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; last seen: {}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether A and B hold disjoint, non-empty sets of partitions covering them all.
fn split(a: &ProjectorProcess, b: &ProjectorProcess) -> bool {
    let (pa, pb): (BTreeSet<u32>, BTreeSet<u32>) = (
        a.lag().keys().copied().collect(),
        b.lag().keys().copied().collect(),
    );
    !pa.is_empty()
        && !pb.is_empty()
        && pa.is_disjoint(&pb)
        && pa.union(&pb).count() == PARTITIONS as usize
}

/// Whether the lag covers every partition and is zero everywhere.
fn current(lag: &BTreeMap<u32, u64>) -> bool {
    lag.len() == PARTITIONS as usize && lag.values().all(|l| *l == 0)
}

fn events(from: usize, to: usize) -> Vec<serde_json::Value> {
    (from..to)
        .map(|n| {
            let session = format!("s{}", n % SESSIONS);
            let step = n / SESSIONS;
            let (ty, payload) = match step {
                0 => (
                    "SessionStarted",
                    json!({"model": {"provider": "openai", "model": "gpt-4o"},
                        "context_window_tokens": 128000, "reserved_output_tokens": 4000}),
                ),
                s if s % 3 == 1 => (
                    "ModelResponseReceived",
                    json!({"message_id": format!("a{s}"), "text": format!("step {s}"),
                        "tool_calls": [{"tool_call_id": format!("c{s}"), "name": "sh", "args": {"n": s}}]}),
                ),
                s if s % 3 == 2 => (
                    "ToolCallFinished",
                    json!({"tool_call_id": format!("c{}", s - 1), "output": format!("ok {s}")}),
                ),
                s => (
                    "UserPromptSubmitted",
                    json!({"message_id": format!("u{s}"), "text": format!("go on {s}")}),
                ),
            };
            json!({"event_id": format!("e{n}"), "tenant_id": "acme", "session_id": session,
                "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z", "type": ty,
                "payload": payload})
        })
        .collect()
}

async fn ingest(ingestor: &Ingestor, events: Vec<serde_json::Value>) {
    for chunk in events.chunks(12) {
        ingestor
            .ingest_json(&Publisher::Operator, chunk.to_vec())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

async fn projected_events(store: &dyn ProjectionStore) -> u64 {
    store.fingerprint().await.unwrap()["events"].0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_projector_processes_split_hand_over_and_lose_nothing() {
    let (Some(brokers), Some(admin)) = (
        required("STRATA_TEST_KAFKA_BROKERS"),
        required("STRATA_TEST_POSTGRES_URL"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log_url = format!(
        "kafka://{brokers}/{}?partitions={PARTITIONS}&session_timeout_ms=6000",
        unique("projectors")
    );
    // A group of its own: members other tests left behind never stall its rebalances.
    let group = unique("projectors");
    let live_db = unique("strata_live");
    let live_url = fresh_database(&admin, &live_db).await;
    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .unwrap();
    let live: Arc<dyn ProjectionStore> = Arc::new(PgStore::open(&live_url).await.unwrap());
    let backends = Backends::from_parts(
        log.clone(),
        live.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
        dir.path().to_path_buf(),
    );
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());

    // Two members split the partitions.
    let mut a = ProjectorProcess::start(dir.path(), "a", &group, &log_url, &live_url);
    let mut b = ProjectorProcess::start(dir.path(), "b", &group, &log_url, &live_url);
    ingest(&ingestor, events(0, 240)).await;
    // Bytes no codec reads, between the events.
    let garbage = log
        .append(vec![strata_log::NewRecord {
            key: b"s3".to_vec(),
            headers: vec![],
            value: b"\x00not an event".to_vec(),
            timestamp_ms: 0,
        }])
        .await
        .unwrap()[0];
    eventually(
        "both members hold partitions",
        Duration::from_secs(90),
        || split(&a, &b),
        || format!("a {:?}, b {:?}", a.lag(), b.lag()),
    )
    .await;

    // B is stopped (SIGTERM) in the middle of the stream: it finishes its batch, commits and
    // leaves; A takes its partitions and resumes them from the offsets in the projection store.
    let writer = {
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        tokio::spawn(async move { ingest(&ingestor, events(240, 480)).await })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    b.signal("-TERM");
    let status = b.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    writer.await.unwrap();
    eventually(
        "the survivor holds every partition with no lag",
        Duration::from_secs(120),
        || current(&a.lag()),
        || format!("a {:?}", a.lag()),
    )
    .await;

    // A new member joins and the group splits again, in the middle of the stream.
    let mut b = ProjectorProcess::start(dir.path(), "b2", &group, &log_url, &live_url);
    ingest(&ingestor, events(480, 600)).await;
    eventually(
        "the partitions are split again and current",
        Duration::from_secs(120),
        || {
            let mut lag = a.lag();
            lag.extend(b.lag());
            split(&a, &b) && current(&lag)
        },
        || format!("a {:?}, b {:?}", a.lag(), b.lag()),
    )
    .await;

    // A leaves cleanly (SIGTERM: finish the batch, commit, leave the group); B takes all.
    a.signal("-TERM");
    let status = a.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    ingest(&ingestor, events(600, 660)).await;
    eventually(
        "the remaining member holds every partition with no lag",
        Duration::from_secs(120),
        || {
            let lag = b.lag();
            lag.len() == PARTITIONS as usize && lag.values().all(|l| *l == 0)
        },
        || format!("b {:?}", b.lag()),
    )
    .await;
    assert_eq!(projected_events(live.as_ref()).await, 660);

    // A clean run of one in-process projector over the same log, into its own database.
    let clean_db = unique("strata_clean");
    let clean_url = fresh_database(&admin, &clean_db).await;
    let clean: Arc<dyn ProjectionStore> = Arc::new(PgStore::open(&clean_url).await.unwrap());
    let clean_backends = Backends::from_parts(
        log.clone(),
        clean.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
        dir.path().to_path_buf(),
    );
    let clean_group = unique("clean");
    let mut p = Projector::start(
        clean_backends,
        ProjectorOptions {
            group: clean_group.clone(),
            ..ProjectorOptions::default()
        },
    )
    .await
    .unwrap();
    p.catch_up().await.unwrap();
    drop(p);

    let without_offsets = |mut print: BTreeMap<String, (u64, String)>| {
        print.remove("consumer_offsets");
        print
    };
    assert_eq!(
        without_offsets(live.fingerprint().await.unwrap()),
        without_offsets(clean.fingerprint().await.unwrap()),
        "the projections of two killed-and-restarted members equal a clean run's"
    );
    let end = log.end_offsets().await.unwrap();
    let offsets = live.offsets(&group).await.unwrap();
    for (p, e) in end.iter().enumerate() {
        assert_eq!(
            offsets.get(&(p as u32)).copied().unwrap_or(0),
            *e,
            "partition {p} fully projected"
        );
    }

    // The undecodable record is in the dead-letter topic (at least once per group that met it).
    let letters = log.read_dead_letters(0, 100).await.unwrap();
    let from_live: Vec<_> = letters
        .iter()
        .filter(|l| l.header(strata_log::dead_letter::GROUP) == Some(group.as_bytes()))
        .collect();
    assert!(!from_live.is_empty(), "the live group set it aside");
    for l in &from_live {
        assert_eq!(
            l.header(strata_log::dead_letter::OFFSET),
            Some(garbage.offset.to_string().as_bytes())
        );
        assert_eq!(
            l.header(strata_log::dead_letter::PARTITION),
            Some(garbage.partition.to_string().as_bytes())
        );
    }

    b.signal("-TERM");
    b.wait_exit(Duration::from_secs(30));
    drop((backends, live, clean));
    drop_database(&admin, &live_db).await;
    drop_database(&admin, &clean_db).await;
}

/// On Kafka + PostgreSQL, a projector whose batch fails after its rows are written (as a crash
/// mid-batch would leave it: nothing committed) is dropped and replaced; the replacement seeks to
/// the offsets in the store and the projections end equal to a clean run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_failing_mid_batch_on_kafka_is_replaced_without_loss() {
    let (Some(brokers), Some(admin)) = (
        required("STRATA_TEST_KAFKA_BROKERS"),
        required("STRATA_TEST_POSTGRES_URL"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log_url = format!(
        "kafka://{brokers}/{}?partitions={PARTITIONS}",
        unique("midbatch")
    );
    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .unwrap();
    let blobs =
        || BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap();
    let live_db = unique("strata_midbatch");
    let pg = Arc::new(
        PgStore::open(&fresh_database(&admin, &live_db).await)
            .await
            .unwrap(),
    );
    let backends = Backends::from_parts(
        log.clone(),
        pg.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        blobs(),
        dir.path().to_path_buf(),
    );
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    ingest(&ingestor, events(0, 240)).await;

    let group = unique("midbatch");
    let options = || ProjectorOptions {
        group: group.clone(),
        batch_size: 25,
        ..ProjectorOptions::default()
    };
    let mut first = Projector::start(backends.clone(), options()).await.unwrap();
    let mut applied = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied < 60 {
        assert!(Instant::now() < deadline, "no progress");
        applied += first.step().await.unwrap().applied;
    }
    pg.fail_next_commit();
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.step().await.is_ok() {
        assert!(Instant::now() < deadline, "the failure never bit");
    }
    drop(first);
    let mut second = Projector::start(backends.clone(), options()).await.unwrap();
    second.catch_up().await.unwrap();
    drop(second);

    let clean_db = unique("strata_midbatch_clean");
    let clean = Arc::new(
        PgStore::open(&fresh_database(&admin, &clean_db).await)
            .await
            .unwrap(),
    );
    let clean_backends = Backends::from_parts(
        log.clone(),
        clean.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        blobs(),
        dir.path().to_path_buf(),
    );
    let mut p = Projector::start(
        clean_backends,
        ProjectorOptions {
            group: unique("clean"),
            ..ProjectorOptions::default()
        },
    )
    .await
    .unwrap();
    p.catch_up().await.unwrap();
    drop(p);
    let without_offsets = |mut print: BTreeMap<String, (u64, String)>| {
        print.remove("consumer_offsets");
        print
    };
    let live_print = pg.fingerprint().await.unwrap();
    assert_eq!(live_print["events"].0, 240);
    assert_eq!(
        without_offsets(live_print),
        without_offsets(clean.fingerprint().await.unwrap())
    );
    drop((backends, pg, clean));
    drop_database(&admin, &live_db).await;
    drop_database(&admin, &clean_db).await;
}
