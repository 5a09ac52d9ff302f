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

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_blob::BlobStore;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::{EventLog, FileLogOptions};
use strata_runtime::{Backends, DataDirLock};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
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
// A private PostgreSQL, initialised but started only when the test says so (the same server as
// `tests/outages.rs` runs).

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

/// A PostgreSQL data directory of this test's own, on a free loopback port. `initdb` and
/// `postgres` refuse to run as root, so as root they run as the `postgres` OS user.
struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_postgres: bool,
    // Removed after the server has stopped (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl PrivatePostgres {
    /// Runs `initdb`; the server is not started.
    fn init(bin: PathBuf) -> PrivatePostgres {
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("strata-startup-pg-")
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
        pg
    }

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

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
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
    stderr: PathBuf,
}

impl ProjectorProcess {
    /// Starts the projector on `dir/projector` with the backend variables `env` sets over
    /// embedded defaults; its log output goes to `dir/projector.log`.
    fn start(dir: &Path, env: &[(&str, String)]) -> ProjectorProcess {
        let admin_port = free_port();
        let stderr = dir.join("projector.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_strata-projector"));
        command
            .env("STRATA_DATA_DIR", dir.join("projector"))
            .env("STRATA_HOT", "memory://")
            .env(
                "STRATA_BLOB",
                format!("file://{}", dir.join("blobs").display()),
            )
            .env("STRATA_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("a log file"));
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().expect("run strata-projector");
        ProjectorProcess {
            child,
            admin_port,
            stderr,
        }
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Panics if the process has exited.
    fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.child.try_wait().expect("wait on the projector") {
            panic!(
                "strata-projector exited {when}: {status}; log:\n{}",
                self.log()
            );
        }
    }

    /// Waits up to `within` for the process to exit on its own.
    fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait on the projector") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status (panics after 10 s).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        self.exit_within(Duration::from_secs(10))
            .expect("the projector stops within 10 s of SIGTERM")
    }
}

impl Drop for ProjectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

/// How many records `group` is behind the log's end, per the store (`None`: no answer).
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
            ("STRATA_DB", pg.url()),
            ("STRATA_PROJECTOR_GROUP", group.clone()),
        ],
    );

    // PostgreSQL is not running: alive, live, not ready, and says why.
    wait_for_unready(
        &projector,
        &[
            "waiting for the projection store (postgres://***@127.0.0.1:",
            "Connection refused",
        ],
    )
    .await;
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
    let store = PgStore::open(&pg.url()).await.expect("open the store");
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
