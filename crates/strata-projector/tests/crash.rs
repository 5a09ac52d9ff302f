//! The projector's crash safety: stopped between any two batches, or failing after writing a
//! batch but before committing it, a projector that restarts ends with exactly the projections of
//! a clean run over the same log — no event lost, none applied twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use strata_blob::BlobStore;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::{EventLog, FileLogOptions, FsyncPolicy};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::Backends;
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

const BATCH: usize = 7;

/// A log with three interleaved sessions: tool pairs, a large output, state updates, a fork, an
/// orphan result and a re-sent (duplicate) record.
async fn build_log(dir: &std::path::Path) -> Arc<dyn EventLog> {
    let log = strata_log::open(
        &format!("file://{}", dir.join("log").display()),
        FileLogOptions {
            partitions: 3,
            fsync: FsyncPolicy::Never,
            ..FileLogOptions::default()
        },
    )
    .await
    .unwrap();
    let backends = backends_over(log.clone(), dir, "ingest").await;
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let mut events = Vec::new();
    for s in 0..3 {
        let sid = format!("s{s}");
        let mut n = 0;
        let mut push = |ty: &str, branch: &str, payload: serde_json::Value| {
            n += 1;
            events.push(
                json!({"event_id": format!("{sid}-{n}"), "tenant_id": "acme",
                "session_id": sid, "branch_id": branch, "timestamp": "2026-06-03T10:00:00Z",
                "type": ty, "payload": payload}),
            );
        };
        push(
            "SessionStarted",
            "main",
            json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000, "system_prompt": "be useful"}),
        );
        push(
            "UserPromptSubmitted",
            "main",
            json!({"message_id": "u1", "text": "fix the bug"}),
        );
        push(
            "StateUpdated",
            "main",
            json!({"goal": "green tests", "open_questions": ["which module?"]}),
        );
        for i in 0..8 {
            push(
                "ModelResponseReceived",
                "main",
                json!({"message_id": format!("a{i}"), "text": format!("step {i}"),
                "tool_calls": [{"tool_call_id": format!("c{i}"), "name": "run_tests", "args": {"i": i}}]}),
            );
            let output = if i == 3 {
                "line\n".repeat(3000)
            } else {
                format!("ok {i}")
            };
            push(
                "ToolCallFinished",
                "main",
                json!({"tool_call_id": format!("c{i}"), "output": output, "is_error": i == 5}),
            );
            push(
                "FileWritten",
                "main",
                json!({"path": format!("src/f{i}.rs")}),
            );
        }
        push(
            "BranchForked",
            "main",
            json!({"new_branch_id": "alt", "from_event_id": format!("{sid}-10")}),
        );
        push(
            "UserPromptSubmitted",
            "alt",
            json!({"message_id": "u2", "text": "try another way"}),
        );
        push(
            "ToolCallFinished",
            "main",
            json!({"tool_call_id": "ghost", "output": "orphan"}),
        );
    }
    // Interleave sessions as concurrent agents would.
    let mut interleaved = Vec::new();
    let per = events.len() / 3;
    for i in 0..per {
        for s in 0..3 {
            interleaved.push(events[s * per + i].clone());
        }
    }
    for chunk in interleaved.chunks(5) {
        ingestor
            .ingest_json(&Publisher::Operator, chunk.to_vec())
            .await
            .unwrap();
    }
    // A record delivered twice (as a retrying producer would): same event, appended again.
    let dup = log.read(0, 0, 1).await.unwrap();
    let again: Vec<_> = dup
        .into_iter()
        .map(|r| strata_log::NewRecord {
            key: r.key,
            headers: r.headers,
            value: r.value,
            timestamp_ms: r.timestamp_ms,
        })
        .collect();
    log.append(again).await.unwrap();
    log
}

/// Which projection store a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
}

/// A store with its failure hook and, for PostgreSQL, the database to drop afterwards.
struct TestStore {
    store: Arc<dyn ProjectionStore>,
    fail_next_commit: Box<dyn Fn() + Send + Sync>,
    database: Option<(String, String)>,
}

impl TestStore {
    async fn drop_database(self) {
        let Some((admin, name)) = self.database else {
            return;
        };
        drop(self.store);
        if let Ok(pool) = sqlx::PgPool::connect(&admin).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&pool)
                .await;
        }
    }
}

/// The admin URL of the test PostgreSQL, or `None` (skip) outside CI.
fn postgres_url() -> Option<String> {
    match std::env::var("STRATA_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "STRATA_TEST_POSTGRES_URL is not set under CI: the PostgreSQL server is missing \
             (scripts/services.sh start)"
        ),
        _ => {
            eprintln!("skipping postgres crash test: STRATA_TEST_POSTGRES_URL is not set");
            None
        }
    }
}

async fn new_store(kind: Kind, dir: &std::path::Path, name: &str) -> TestStore {
    match kind {
        Kind::Sqlite => {
            let store = Arc::new(
                SqliteStore::open(&dir.join(format!("{name}.db")).display().to_string())
                    .await
                    .unwrap(),
            );
            let hook = store.clone();
            TestStore {
                store,
                fail_next_commit: Box::new(move || hook.fail_next_commit()),
                database: None,
            }
        }
        Kind::Postgres => {
            let admin = postgres_url().expect("checked by the caller");
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let database = format!("strata_crash_{}_{name}_{nanos}", std::process::id());
            let pool = sqlx::PgPool::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {database}"))
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
            let url = format!("{}/{database}", &admin[..admin.rfind('/').unwrap()]);
            let store = Arc::new(PgStore::open(&url).await.unwrap());
            let hook = store.clone();
            TestStore {
                store,
                fail_next_commit: Box::new(move || hook.fail_next_commit()),
                database: Some((admin, database)),
            }
        }
    }
}

fn backends_with(log: Arc<dyn EventLog>, store: &TestStore, dir: &std::path::Path) -> Backends {
    Backends::from_parts(
        log,
        store.store.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.join("blobs").display())).unwrap(),
        dir.to_path_buf(),
    )
}

async fn backends_over(log: Arc<dyn EventLog>, dir: &std::path::Path, name: &str) -> Backends {
    let store = new_store(Kind::Sqlite, dir, name).await;
    backends_with(log, &store, dir)
}

fn options() -> ProjectorOptions {
    ProjectorOptions {
        batch_size: BATCH,
        poll_timeout: std::time::Duration::from_millis(20),
        ..ProjectorOptions::default()
    }
}

async fn fingerprint(store: &dyn ProjectionStore) -> BTreeMap<String, (u64, String)> {
    store.fingerprint().await.unwrap()
}

async fn clean_run(
    kind: Kind,
    log: Arc<dyn EventLog>,
    dir: &std::path::Path,
) -> BTreeMap<String, (u64, String)> {
    let store = new_store(kind, dir, "clean").await;
    let backends = backends_with(log, &store, dir);
    let mut p = Projector::start(backends.clone(), options()).await.unwrap();
    p.catch_up().await.unwrap();
    let print = fingerprint(backends.store.as_ref()).await;
    drop((p, backends));
    store.drop_database().await;
    print
}

/// Number of non-empty batches a run takes.
async fn batches(log: &Arc<dyn EventLog>) -> usize {
    let total: u64 = log.end_offsets().await.unwrap().iter().sum();
    (total as usize).div_ceil(BATCH) + 3
}

async fn stopping_between_any_two_batches_changes_nothing(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path()).await;
    let clean = clean_run(kind, log.clone(), dir.path()).await;
    assert_eq!(clean["events"].0, 90, "every event projected once");
    for stop_after in 0..batches(&log).await {
        let store = new_store(kind, dir.path(), &format!("stop{stop_after}")).await;
        let backends = backends_with(log.clone(), &store, dir.path());
        let mut first = Projector::start(backends.clone(), options()).await.unwrap();
        for _ in 0..stop_after {
            first.step().await.unwrap();
        }
        drop(first); // the process dies here
        let mut second = Projector::start(backends.clone(), options()).await.unwrap();
        second.catch_up().await.unwrap();
        assert_eq!(
            fingerprint(backends.store.as_ref()).await,
            clean,
            "{kind:?}: stopped after {stop_after} polls"
        );
        drop((second, backends));
        store.drop_database().await;
    }
}

async fn failing_after_the_write_before_the_commit_changes_nothing(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path()).await;
    let clean = clean_run(kind, log.clone(), dir.path()).await;
    for fail_at in 0..batches(&log).await {
        let store = new_store(kind, dir.path(), &format!("fail{fail_at}")).await;
        let backends = backends_with(log.clone(), &store, dir.path());
        let mut first = Projector::start(backends.clone(), options()).await.unwrap();
        for _ in 0..fail_at {
            first.step().await.unwrap();
        }
        (store.fail_next_commit)();
        // The failing batch may be a poll that brings only an assignment: step until it bites.
        let mut failed = false;
        for _ in 0..5 {
            if first.step().await.is_err() {
                failed = true;
                break;
            }
        }
        drop(first);
        let mut second = Projector::start(backends.clone(), options()).await.unwrap();
        second.catch_up().await.unwrap();
        assert_eq!(
            fingerprint(backends.store.as_ref()).await,
            clean,
            "{kind:?}: failed before commit at poll {fail_at} (failure injected: {failed})"
        );
        drop((second, backends));
        store.drop_database().await;
    }
}

async fn a_projector_recovers_in_process_after_a_failed_commit(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path()).await;
    let clean = clean_run(kind, log.clone(), dir.path()).await;
    let store = new_store(kind, dir.path(), "inproc").await;
    let backends = backends_with(log.clone(), &store, dir.path());
    let mut p = Projector::start(backends.clone(), options()).await.unwrap();
    p.step().await.unwrap(); // assignment
    p.step().await.unwrap();
    (store.fail_next_commit)();
    assert!(p.step().await.is_err());
    // Same process, same projector: it rewinds to the store's offsets and goes on.
    p.catch_up().await.unwrap();
    assert_eq!(fingerprint(backends.store.as_ref()).await, clean);
    drop((p, backends));
    store.drop_database().await;
}

async fn an_undecodable_record_goes_to_the_dead_letter_queue(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path()).await;
    let clean = clean_run(kind, log.clone(), dir.path()).await;
    // Bytes no codec can read, under a session key, between the valid records.
    let garbage = strata_log::NewRecord {
        key: b"s1".to_vec(),
        headers: vec![("strata.event_type".into(), b"ToolCallFinished".to_vec())],
        value: b"\xc3\x01not an avro event".to_vec(),
        timestamp_ms: 1_780_000_000_000,
    };
    let at = log.append(vec![garbage.clone()]).await.unwrap()[0];
    let store = new_store(kind, dir.path(), "dlq").await;
    let backends = backends_with(log.clone(), &store, dir.path());
    let mut p = Projector::start(backends.clone(), options()).await.unwrap();
    p.catch_up().await.unwrap();
    let without_offsets = |mut print: BTreeMap<String, (u64, String)>| {
        print.remove("consumer_offsets");
        print
    };
    assert_eq!(
        without_offsets(fingerprint(backends.store.as_ref()).await),
        without_offsets(clean),
        "{kind:?}: the valid events are projected exactly as without the bad record"
    );
    let letters = log.read_dead_letters(0, 10).await.unwrap();
    assert_eq!(letters.len(), 1, "{kind:?}: one dead letter");
    let letter = &letters[0];
    assert_eq!(letter.value, garbage.value, "the bytes travel unchanged");
    assert_eq!(letter.key, garbage.key);
    assert_eq!(
        letter.header("strata.event_type"),
        Some(&b"ToolCallFinished"[..])
    );
    let header = |name: &str| String::from_utf8(letter.header(name).unwrap().to_vec()).unwrap();
    assert!(header(strata_log::dead_letter::REASON).contains("undecodable"));
    assert_eq!(header(strata_log::dead_letter::GROUP), "strata-projector");
    assert_eq!(
        header(strata_log::dead_letter::PARTITION),
        at.partition.to_string()
    );
    assert_eq!(
        header(strata_log::dead_letter::OFFSET),
        at.offset.to_string()
    );
    // The offset moved past it: a restarted projector neither stops on it nor sets it aside twice.
    let stored = backends.store.offsets("strata-projector").await.unwrap();
    assert_eq!(stored[&at.partition], at.offset + 1);
    drop(p);
    let mut again = Projector::start(backends.clone(), options()).await.unwrap();
    again.catch_up().await.unwrap();
    assert_eq!(log.read_dead_letters(0, 10).await.unwrap().len(), 1);
    drop((again, backends));
    store.drop_database().await;
}

/// PostgreSQL only: the connection of the projector's transaction is killed from outside after
/// the rows are written, before the commit. The batch fails, the pool replaces the connection,
/// and the same projector goes on to exactly the clean projections.
#[tokio::test]
async fn postgres_connection_dropped_mid_transaction_changes_nothing() {
    if postgres_url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path()).await;
    let clean = clean_run(Kind::Postgres, log.clone(), dir.path()).await;
    let admin = postgres_url().unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let database = format!("strata_drop_{}_{nanos}", std::process::id());
    let pool = sqlx::PgPool::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&pool)
        .await
        .unwrap();
    let url = format!("{}/{database}", &admin[..admin.rfind('/').unwrap()]);
    let pg = Arc::new(PgStore::open(&url).await.unwrap());
    let store = TestStore {
        store: pg.clone(),
        fail_next_commit: Box::new(|| {}),
        database: Some((admin, database)),
    };
    let backends = backends_with(log.clone(), &store, dir.path());
    let mut p = Projector::start(backends.clone(), options()).await.unwrap();
    p.step().await.unwrap(); // assignment
    p.step().await.unwrap();
    pg.drop_connection_before_next_commit();
    let err = p
        .step()
        .await
        .expect_err("the commit on a killed connection fails");
    assert!(
        matches!(err, strata_projector::Error::Store(_)),
        "a store error, not {err:?}"
    );
    p.catch_up().await.unwrap();
    assert_eq!(fingerprint(backends.store.as_ref()).await, clean);
    drop((p, backends));
    pool.close().await;
    store.drop_database().await;
}

macro_rules! on_every_store {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Kind::Sqlite).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    if super::postgres_url().is_some() {
                        super::$name(super::Kind::Postgres).await;
                    }
                }
            )+
        }
    };
}

on_every_store!(
    stopping_between_any_two_batches_changes_nothing,
    failing_after_the_write_before_the_commit_changes_nothing,
    a_projector_recovers_in_process_after_a_failed_commit,
    an_undecodable_record_goes_to_the_dead_letter_queue,
);
