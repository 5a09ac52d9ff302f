//! Backend outages around the projector, against real servers this test starts and stops itself
//! (never the shared ones of `scripts/services.sh`, which other tests use at the same time):
//!
//! - **PostgreSQL restart**: a private PostgreSQL is stopped (`pg_ctl stop -m immediate`, a
//!   crash) while a `strata-projector` process projects into it and events keep arriving. The
//!   process neither exits nor commits anything past what it applied, its `/readyz` answers 503
//!   naming its own failure, and once PostgreSQL is back it catches up to projections equal to a
//!   clean run's over the same log.
//! - **Redis flushed under load**: concurrent writers append through ingest, sharing sessions,
//!   while a private Redis (its hot state) is flushed every 15 ms and a projector runs. No seq is
//!   handed out twice or skipped, every acknowledged event is on the log exactly once with the
//!   seq it was acknowledged with, and the projections equal a clean run's. With two ingest
//!   replicas, flushed every 500 ms, no seq is handed out twice either: after a loss, heads are
//!   recovered only once a settling time longer than an append has passed.
//!
//! The PostgreSQL test also needs the shared Kafka-protocol broker (`STRATA_TEST_KAFKA_BROKERS`,
//! on a topic and group of its own): a projector process and this test must share the log, which
//! the embedded file log does not allow. Outside CI a missing server or variable skips a test
//! with a message; under `CI` it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_blob::BlobStore;
use strata_ingest::{IngestError, IngestOptions, Ingestor, Publisher};
use strata_keys::RecordCodec;
use strata_log::{EventLog, FileLogOptions, FsyncPolicy};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::{BackendOpts, Backends};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

use support::*;

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if in_ci() => {
            panic!("{var} is not set under CI: a server is missing (scripts/services.sh start)")
        }
        _ => {
            eprintln!("skipping outage test: {var} is not set");
            None
        }
    }
}

/// Whether a server binary the test needs is installed; under CI a missing one fails the test.
fn installed(what: &str, path: &Path) -> bool {
    if path.exists() {
        return true;
    }
    assert!(
        !in_ci(),
        "{what} is not installed at {} under CI (scripts/services.sh start installs it)",
        path.display()
    );
    eprintln!(
        "skipping outage test: {what} is not installed at {} (scripts/services.sh start installs it)",
        path.display()
    );
    false
}

// ---------------------------------------------------------------------------------------------
// Events and checks shared by the tests.

/// Event `n` of a mix of sessions: a SessionStarted, then model turns with tool calls, tool
/// results and prompts.
fn event(n: usize, sessions: usize, id_prefix: &str) -> Value {
    let session = format!("s{}", n % sessions);
    let step = n / sessions;
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
    json!({"event_id": format!("{id_prefix}{n}"), "tenant_id": "acme", "session_id": session,
        "branch_id": "main", "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload})
}

/// Every record of the log, decoded: event id → (session, seq), with how often each id occurs.
async fn log_contents(
    backends: &Backends,
) -> (HashMap<String, (String, u64)>, HashMap<String, usize>) {
    let end = backends.log.end_offsets().await.expect("log end offsets");
    let mut events = HashMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
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
                let e = strata_projector::decode(backends, r)
                    .await
                    .expect("every record decodes");
                *counts.entry(e.event_id.clone()).or_default() += 1;
                events.insert(e.event_id, (e.session_id, e.seq.expect("a seq on the log")));
            }
        }
    }
    (events, counts)
}

/// The projections of one in-process projector over `log` from offset 0, into `store`, its
/// records read with `codec`.
async fn clean_run(
    log: Arc<dyn EventLog>,
    codec: RecordCodec,
    store: Arc<dyn ProjectionStore>,
    dir: &Path,
) -> BTreeMap<String, (u64, String)> {
    let backends = Backends::from_parts(
        log,
        store.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.join("blobs").display())).expect("blobs"),
        dir.to_path_buf(),
    )
    .with_codec(codec);
    let mut p = Projector::start(
        backends,
        ProjectorOptions {
            group: unique("clean"),
            ..ProjectorOptions::default()
        },
    )
    .await
    .expect("start the clean projector");
    p.catch_up().await.expect("clean catch-up");
    drop(p);
    without_offsets(store.fingerprint().await.expect("fingerprint"))
}

fn without_offsets(mut print: BTreeMap<String, (u64, String)>) -> BTreeMap<String, (u64, String)> {
    print.remove("consumer_offsets");
    print
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL restart.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash_and_restart_under_a_running_projector_loses_nothing() {
    let Some(brokers) = required("STRATA_TEST_KAFKA_BROKERS") else {
        return;
    };
    let Some(bin) = pg_bindir().or_else(|| {
        installed(
            "postgresql (initdb)",
            Path::new("/usr/lib/postgresql/*/bin/initdb"),
        );
        None
    }) else {
        return;
    };
    let started = Instant::now();
    let pg = PrivatePostgres::start(bin);
    let live_url = pg.create_database("strata_live").await;
    let dir = tempfile::tempdir().expect("tempdir");
    const SESSIONS: usize = 6;
    let log_url = format!("kafka://{brokers}/{}?partitions=4", unique("pg_outage"));
    let group = unique("pg_outage");
    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .expect("open the kafka log");
    // This test's ingest keeps its own (SQLite) projections: it must go on appending while the
    // projector's PostgreSQL is down, which is the point of the test.
    let ingest_store: Arc<dyn ProjectionStore> = Arc::new(
        SqliteStore::open(&dir.path().join("ingest.db").display().to_string())
            .await
            .expect("ingest store"),
    );
    let ingest_backends = Backends::from_parts(
        log.clone(),
        ingest_store,
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
        dir.path().to_path_buf(),
    );
    let ingestor = Ingestor::new(ingest_backends, IngestOptions::default());
    let append = |from: usize, to: usize| {
        let batch: Vec<Value> = (from..to).map(|n| event(n, SESSIONS, "e")).collect();
        let ingestor = &ingestor;
        async move {
            for chunk in batch.chunks(10) {
                ingestor
                    .ingest_json(&Publisher::Operator, chunk.to_vec())
                    .await
                    .expect("ingest does not depend on the projector's store");
            }
        }
    };
    // The test's view of the live projections (its pool reconnects after the restart).
    let live = PgStore::open(&live_url).await.expect("open the live store");

    let mut projector = ProjectorProcess::start(
        dir.path(),
        &[
            ("STRATA_LOG", log_url.clone()),
            ("STRATA_DB", live_url.clone()),
            ("STRATA_PROJECTOR_BATCH_SIZE", "25".into()),
            ("STRATA_PROJECTOR_GROUP", group.clone()),
        ],
    );
    append(0, 120).await;
    eventually(
        "the projector catches up before the outage",
        Duration::from_secs(60),
        || async { behind(log.as_ref(), &live, &group).await == Some(0) },
        || format!("{:?}", projector.get("/readyz")),
    )
    .await;
    assert_eq!(projector.get("/readyz").map(|r| r.0), Some(200));

    // PostgreSQL crashes; events keep arriving.
    pg.crash();
    let outage = Instant::now();
    append(120, 240).await;
    let last = Mutex::new(None);
    eventually(
        "/readyz answers 503 with the projector's own failure",
        Duration::from_secs(40),
        || {
            let r = projector.get("/readyz");
            let seen = matches!(&r, Some((503, body)) if body.contains("projector:"));
            *last.lock().unwrap() = r;
            async move { seen }
        },
        || format!("{:?}", last.lock().unwrap()),
    )
    .await;
    projector.assert_running("during the outage");
    let failures = projector
        .get("/metrics")
        .and_then(|(_, text)| {
            text.lines()
                .find_map(|l| l.strip_prefix("strata_projector_failures_total "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    assert!(failures >= 1, "failed attempts are counted: {failures}");

    // PostgreSQL comes back (crash recovery on the same data directory): the projector resumes
    // from the offsets committed with its last applied batch.
    pg.start_server();
    let outage = outage.elapsed();
    eventually(
        "the projector catches up after the restart",
        Duration::from_secs(60),
        || async { behind(log.as_ref(), &live, &group).await == Some(0) },
        || format!("{:?}", projector.get("/readyz")),
    )
    .await;
    eventually(
        "/readyz answers 200 again",
        Duration::from_secs(30),
        || {
            let ok = projector.get("/readyz").map(|r| r.0) == Some(200);
            async move { ok }
        },
        || format!("{:?}", projector.get("/readyz")),
    )
    .await;
    projector.assert_running("after the outage");

    let live_print = without_offsets(live.fingerprint().await.expect("fingerprint"));
    assert_eq!(live_print["events"].0, 240, "every event projected once");
    let clean_url = pg.create_database("strata_clean").await;
    let clean: Arc<dyn ProjectionStore> =
        Arc::new(PgStore::open(&clean_url).await.expect("clean store"));
    assert_eq!(
        live_print,
        clean_run(log.clone(), RecordCodec::plain(), clean, dir.path()).await,
        "the projections through the outage equal a clean run's"
    );
    let status = projector.terminate();
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    eprintln!(
        "postgres restart: outage {outage:?}, {failures} failed attempt(s), test {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Redis flushed under load.

/// A redis-server of this test's own, on a free loopback port.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    fn start() -> PrivateRedis {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/services.sh) runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        PrivateRedis { child, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_flushed_under_concurrent_ingest_hands_out_no_seq_twice_and_loses_nothing() {
    // One replica serialises its own reservations and appends: no settling time is needed.
    redis_flushed_under_load(1, Duration::ZERO, Duration::from_millis(15), 10).await;
}

/// The same with two ingest replicas sharing Redis. A flush between one replica's reservation of
/// a head and its append used to let the other recover the head from the log without that record
/// and hand out the same seq again; now recovery after a loss waits a settling time longer than
/// an append takes (here 300 ms: appends to the embedded log take milliseconds), so the record is
/// on the log when the head is recovered. Redis is flushed every 500 ms (each flush stalls the
/// writers for the settling time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_flushed_under_two_ingest_replicas() {
    redis_flushed_under_load(2, Duration::from_millis(300), Duration::from_millis(500), 4).await;
}

/// `writers` concurrent writers over `replicas` ingest replicas (each with its own lock and
/// knowledge of the log, as separate processes have; only Redis and the log are shared, and the
/// replicas wait `settle` after a loss), while Redis is flushed every `flush_every` (at least
/// `min_flushes` times) and a projector runs.
async fn redis_flushed_under_load(
    replicas: usize,
    settle: Duration,
    flush_every: Duration,
    min_flushes: usize,
) {
    const WRITERS: usize = 4;
    const SESSIONS: usize = 5;
    const PER_WRITER: usize = 120;
    const BATCH: usize = 4;
    if which("redis-server").is_none() {
        installed("redis-server", Path::new("/usr/bin/redis-server"));
        return;
    }
    let started = Instant::now();
    let redis = PrivateRedis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts {
        hot_url: Some(redis.url()),
        fsync: FsyncPolicy::Never,
        partitions: 3,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.expect("backends");
    let replicas: Vec<Arc<Ingestor>> = (0..replicas)
        .map(|_| {
            Arc::new(Ingestor::new(
                backends.clone(),
                IngestOptions {
                    hot_loss_settle: settle,
                    ..IngestOptions::default()
                },
            ))
        })
        .collect();

    let (stop_projector, stopped) = tokio::sync::oneshot::channel::<()>();
    let projector = {
        let backends = backends.clone();
        tokio::spawn(async move {
            let p = Projector::start(backends, ProjectorOptions::default())
                .await
                .expect("start the projector");
            p.run(async {
                let _ = stopped.await;
            })
            .await
        })
    };

    // FLUSHALL every 15 ms while the writers run.
    let writing = Arc::new(AtomicBool::new(true));
    let flushes = Arc::new(AtomicUsize::new(0));
    let flusher = {
        let (writing, flushes) = (writing.clone(), flushes.clone());
        let client = redis::Client::open(redis.url()).expect("redis url");
        tokio::spawn(async move {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect to the private redis");
            while writing.load(Ordering::Relaxed) {
                let _: () = redis::cmd("FLUSHALL")
                    .query_async(&mut conn)
                    .await
                    .expect("FLUSHALL");
                flushes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(flush_every).await;
            }
        })
    };

    // Writers share the sessions; each re-sends a refused batch (same event ids) until it is
    // acknowledged, as a client must.
    let refusals = Arc::new(AtomicUsize::new(0));
    // Paced so that the writing spans more than `min_flushes` flushes however fast ingest is.
    let pace = flush_every * (min_flushes as u32 + 1) / (PER_WRITER / BATCH) as u32;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let ingestor = replicas[w % replicas.len()].clone();
        let refusals = refusals.clone();
        writers.push(tokio::spawn(async move {
            let mut acked: Vec<(String, &'static str, u64)> = Vec::new();
            let events: Vec<Value> = (0..PER_WRITER)
                .map(|n| event(n * WRITERS + w, SESSIONS, "e"))
                .collect();
            for batch in events.chunks(BATCH) {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    match ingestor
                        .ingest_json(&Publisher::Operator, batch.to_vec())
                        .await
                    {
                        Ok(outcomes) => {
                            acked.extend(
                                outcomes.into_iter().map(|o| (o.event_id, o.status, o.seq)),
                            );
                            tokio::time::sleep(pace).await;
                            break;
                        }
                        Err(
                            e @ (IngestError::Conflict { .. }
                            | IngestError::Backend(_)
                            | IngestError::Unavailable(_)),
                        ) => {
                            refusals.fetch_add(1, Ordering::Relaxed);
                            assert!(Instant::now() < deadline, "never acknowledged: {e}");
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(e) => panic!("unexpected refusal: {e}"),
                    }
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.expect("writer"));
    }
    writing.store(false, Ordering::Relaxed);
    flusher.await.expect("flusher");
    let flushes = flushes.load(Ordering::Relaxed);
    assert!(
        flushes >= min_flushes,
        "Redis was flushed under load ({flushes} times)"
    );

    let (on_log, counts) = log_contents(&backends).await;
    // Every acknowledged event is on the log exactly once, with the seq it was acknowledged with.
    assert_eq!(acked.len(), WRITERS * PER_WRITER);
    for (id, status, seq) in &acked {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "{id} ({status}) on the log exactly once"
        );
        assert_eq!(
            on_log[id].1, *seq,
            "{id} ({status}) has the seq it was acknowledged with"
        );
    }
    assert_eq!(
        on_log.len(),
        WRITERS * PER_WRITER,
        "nothing unacknowledged was appended"
    );
    // Per session, the seqs are exactly 1..=n: none handed out twice, none skipped.
    let mut by_session: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (session, seq) in on_log.values() {
        by_session.entry(session).or_default().push(*seq);
    }
    let mut skipped = 0;
    for (session, seqs) in &mut by_session {
        seqs.sort_unstable();
        let repeated: BTreeSet<u64> = seqs
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        assert!(
            repeated.is_empty(),
            "session {session}: seqs handed out twice: {repeated:?}"
        );
        skipped += seqs.last().copied().unwrap_or(0) - seqs.len() as u64;
    }
    // One replica serialises its reservations and appends: it never skips a seq either.
    if replicas.len() == 1 {
        assert_eq!(skipped, 0, "seqs skipped");
    }

    // The projector, flushed under too, ends at a clean run's projections.
    let behind = strata_projector::wait_for_projector(
        &backends,
        strata_projector::DEFAULT_GROUP,
        Duration::from_secs(30),
    )
    .await
    .expect("projector offsets");
    assert_eq!(behind, 0, "the projector caught up");
    let _ = stop_projector.send(());
    projector
        .await
        .expect("projector task")
        .expect("the projector stops cleanly");
    let live = without_offsets(backends.store.fingerprint().await.expect("fingerprint"));
    assert_eq!(live["events"].0, (WRITERS * PER_WRITER) as u64);
    let clean: Arc<dyn ProjectionStore> = Arc::new(
        SqliteStore::open(&dir.path().join("clean.db").display().to_string())
            .await
            .expect("clean store"),
    );
    let clean = clean_run(
        backends.log.clone(),
        backends.codec.clone(),
        clean,
        dir.path(),
    )
    .await;
    let differing: Vec<_> = live
        .iter()
        .filter(|(table, print)| clean.get(*table) != Some(print))
        .map(|(table, (rows, _))| (table, rows, clean.get(table).map(|c| c.0)))
        .collect();
    assert!(
        differing.is_empty(),
        "the projections equal a clean run's; differing tables (rows live, clean): {differing:?}"
    );
    eprintln!(
        "redis flush under load: {} events, {flushes} flushes, {} refused attempts re-sent, \
         {skipped} seqs skipped, test {:?}",
        acked.len(),
        refusals.load(Ordering::Relaxed),
        started.elapsed()
    );
}

/// The path of `program` on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}
