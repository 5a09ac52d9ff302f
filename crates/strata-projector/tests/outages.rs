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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_blob::BlobStore;
use strata_ingest::{IngestError, IngestOptions, Ingestor, Publisher};
use strata_log::{EventLog, FileLogOptions, FsyncPolicy};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::{BackendOpts, Backends};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Polls `check` every 100 ms until it holds; panics with `state()` after `within`.
async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F, state: impl Fn() -> String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}; last seen: {}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A private PostgreSQL.

/// The newest installed PostgreSQL's binaries, found as `scripts/services.sh` finds them.
fn pg_bindir() -> Option<PathBuf> {
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e
                .file_name()
                .to_string_lossy()
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A PostgreSQL server of this test's own: its data directory in a temporary directory, on a
/// free loopback port. `initdb` and `postgres` refuse to run as root, so as root they run as the
/// `postgres` OS user (as `scripts/services.sh` does).
struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_postgres: bool,
    // Removed after the server has stopped (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl PrivatePostgres {
    fn start(bin: PathBuf) -> PrivatePostgres {
        let as_postgres = is_root();
        // Not under /root, and reachable by the postgres user: tempdirs are mode 700.
        let dir = tempfile::Builder::new()
            .prefix("strata-outage-pg-")
            .tempdir_in("/tmp")
            .expect("a temporary directory");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("create the data directory");
        if as_postgres {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod the temporary directory");
            let chown = Command::new("chown")
                .arg("postgres")
                .arg(&data)
                .status()
                .expect("run chown");
            assert!(chown.success(), "chown postgres {}", data.display());
        }
        let pg = PrivatePostgres {
            bin,
            data,
            port: free_port(),
            as_postgres,
            _dir: dir,
        };
        let initdb = pg
            .command("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"])
            .arg("--locale=C.UTF-8")
            .output()
            .expect("run initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        pg.start_server();
        pg
    }

    /// A command for one of the server's binaries, as the postgres user when running as root.
    fn command(&self, binary: &str) -> Command {
        let path = self.bin.join(binary);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        self.command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl")
    }

    /// Starts the server and waits until it accepts connections.
    fn start_server(&self) {
        // fsync=off: test data only (an immediate stop is a process crash, not a power loss).
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log").display().to_string();
        let out = self.pg_ctl(&["-l", &log, "-w", "-t", "30", "-o", &options, "start"]);
        assert!(
            out.status.success(),
            "postgresql did not start: {}; see {log}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops the server the way a crash does: no checkpoint, connections cut.
    fn crash(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    async fn create_database(&self, name: &str) -> String {
        let pool = sqlx::PgPool::connect(&self.url("postgres"))
            .await
            .expect("connect to the private postgresql");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&pool)
            .await
            .expect("create a database");
        pool.close().await;
        self.url(name)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
    }
}

// ---------------------------------------------------------------------------------------------
// A `strata-projector` process.

struct ProjectorProcess {
    child: Child,
    admin_port: u16,
}

impl ProjectorProcess {
    fn start(dir: &Path, group: &str, log_url: &str, db_url: &str) -> ProjectorProcess {
        let admin_port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_strata-projector"))
            .env("STRATA_DATA_DIR", dir.join("projector"))
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
        ProjectorProcess { child, admin_port }
    }

    /// `GET path` on the admin port: the status code and the body (`None`: no answer).
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.admin_port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        conn.read_to_string(&mut text).ok()?;
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    }

    /// Panics if the process has exited.
    fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.child.try_wait().expect("wait on the projector") {
            panic!("strata-projector exited {when}: {status}");
        }
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait on the projector") {
                return status;
            }
            assert!(Instant::now() < deadline, "the projector did not stop");
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
                let e = strata_projector::decode(backends, r).expect("every record decodes");
                *counts.entry(e.event_id.clone()).or_default() += 1;
                events.insert(e.event_id, (e.session_id, e.seq.expect("a seq on the log")));
            }
        }
    }
    (events, counts)
}

/// The projections of one in-process projector over `log` from offset 0, into `store`.
async fn clean_run(
    log: Arc<dyn EventLog>,
    store: Arc<dyn ProjectionStore>,
    dir: &Path,
) -> BTreeMap<String, (u64, String)> {
    let backends = Backends::from_parts(
        log,
        store.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.join("blobs").display())).expect("blobs"),
        dir.to_path_buf(),
    );
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

/// How many records `group` is behind the log's end, per the store (`None`: the store or the
/// log did not answer).
async fn behind(log: &dyn EventLog, store: &dyn ProjectionStore, group: &str) -> Option<u64> {
    let end = log.end_offsets().await.ok()?;
    let at = store.offsets(group).await.ok()?;
    Some(
        end.iter()
            .enumerate()
            .map(|(p, e)| e.saturating_sub(at.get(&(p as u32)).copied().unwrap_or(0)))
            .sum(),
    )
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

    let mut projector = ProjectorProcess::start(dir.path(), &group, &log_url, &live_url);
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
        clean_run(log.clone(), clean, dir.path()).await,
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
    redis_flushed_under_load(2, Duration::from_millis(300), Duration::from_millis(500), 3).await;
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
    let clean = clean_run(backends.log.clone(), clean, dir.path()).await;
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
