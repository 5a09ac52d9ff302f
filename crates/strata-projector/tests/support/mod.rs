//! Helpers of the projector's process tests (`startup.rs`, `outages.rs`): private servers they
//! start and stop themselves, a `strata-projector` child process, polling.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use strata_log::EventLog;
use strata_store::ProjectionStore;

pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Polls `check` every 100 ms until it holds; panics with `state()` after `within`.
pub async fn eventually<F, Fut>(
    what: &str,
    within: Duration,
    mut check: F,
    state: impl Fn() -> String,
) where
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
pub fn pg_bindir() -> Option<PathBuf> {
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
pub struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_postgres: bool,
    // Removed after the server has stopped (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl PrivatePostgres {
    /// Runs `initdb` and starts the server.
    pub fn start(bin: PathBuf) -> PrivatePostgres {
        let pg = Self::init(bin);
        pg.start_server();
        pg
    }

    /// Runs `initdb`; the server is not started.
    pub fn init(bin: PathBuf) -> PrivatePostgres {
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("strata-test-pg-")
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
    pub fn start_server(&self) {
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
    pub fn crash(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a database; returns its URL.
    pub async fn create_database(&self, name: &str) -> String {
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

/// The master key every process of a test's deployment shares: a shared key store gets none
/// made for it, and a new deployment seals by default.
pub fn master_key(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("master.key");
    if !path.exists() {
        std::fs::write(&path, format!("{}\n", "5e".repeat(32))).expect("write a master key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("owner only");
    }
    path
}

pub struct ProjectorProcess {
    child: Child,
    admin_port: u16,
    stderr: PathBuf,
}

impl ProjectorProcess {
    /// Starts the projector on `dir/projector` with the backend variables `env` sets over
    /// embedded defaults; its log output goes to `dir/projector.log`.
    pub fn start(dir: &Path, env: &[(&str, String)]) -> ProjectorProcess {
        let admin_port = free_port();
        let stderr = dir.join("projector.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_strata-projector"));
        command
            .env("STRATA_DATA_DIR", dir.join("projector"))
            .env("STRATA_MASTER_KEY_FILE", master_key(dir))
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
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Panics if the process has exited.
    pub fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.child.try_wait().expect("wait on the projector") {
            panic!(
                "strata-projector exited {when}: {status}; log:\n{}",
                self.log()
            );
        }
    }

    /// Waits up to `within` for the process to exit on its own.
    pub fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
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

    /// SIGTERM, then the exit status (panics after 30 s).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        self.exit_within(Duration::from_secs(30))
            .expect("the projector stops within 30 s of SIGTERM")
    }
}

impl Drop for ProjectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many records `group` is behind the log's end, per the store (`None`: no answer).
pub async fn behind(log: &dyn EventLog, store: &dyn ProjectionStore, group: &str) -> Option<u64> {
    let end = log.end_offsets().await.ok()?;
    let at = store.offsets(group).await.ok()?;
    Some(
        end.iter()
            .enumerate()
            .map(|(p, e)| e.saturating_sub(at.get(&(p as u32)).copied().unwrap_or(0)))
            .sum(),
    )
}
