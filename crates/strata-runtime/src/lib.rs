//! Plumbing shared by Strata's service binaries and the `strata` CLI: backends chosen by URL
//! ([`BackendOpts`], [`Backends`]), the data-directory lock ([`DataDirLock`]), per-tenant API keys
//! ([`auth`]), JSON errors for HTTP ([`ApiError`]), logging and shutdown, and the start of a
//! service that serves its port while it waits for its backends ([`startup::Service`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use strata_blob::BlobStore;
use strata_hot::HotState;
use strata_keys::RecordCodec;
use strata_log::{EventLog, FileLogOptions, FsyncPolicy};
use strata_store::ProjectionStore;

pub mod admin;
mod artifacts;
pub mod auth;
mod error;
pub mod http_server;
mod lock;
pub mod metrics;
pub mod migrate;
mod sealing;
pub mod startup;
pub mod telemetry;

use admin::WorkerHealth;

pub use error::{parse_object, ApiError};
pub use lock::DataDirLock;
pub use sealing::{open_record_codec, recorded_sealing, set_sealing};

/// Errors while bringing the backends up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error(transparent)]
    Store(#[from] strata_store::Error),
    #[error(transparent)]
    Hot(#[from] strata_hot::Error),
    #[error(transparent)]
    Blob(#[from] strata_blob::Error),
    #[error(transparent)]
    Keys(#[from] strata_keys::Error),
    /// The deployment's sealing setting and this process's disagree, or it cannot be met.
    #[error("{0}")]
    Sealing(String),
    /// The data directory is locked by another process, or cannot be locked.
    #[error("{0}")]
    Locked(String),
    /// The admin credential file cannot be used.
    #[error("{0}")]
    AdminKey(String),
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether retrying may succeed: a server could not be reached, dropped the connection or
    /// did not answer in time (see each backend's `is_transient`). A malformed URL, an unknown
    /// scheme or parameter, a data directory locked by another process, a refused login or a
    /// migration that fails on its SQL are not.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Log(e) => e.is_transient(),
            Error::Store(e) => e.is_transient(),
            Error::Hot(e) => e.is_transient(),
            Error::Keys(e) => e.is_transient(),
            // Opening a blob store does not contact it: what fails here is its URL or its local
            // directory (an unreachable S3 shows in `/readyz`, whose ping does contact it).
            Error::Blob(_)
            | Error::Sealing(_)
            | Error::Locked(_)
            | Error::AdminKey(_)
            | Error::Io { .. } => false,
        }
    }
}

/// First wait after a failed attempt to open a backend; doubled after each further failure up
/// to [`MAX_OPEN_BACKOFF`].
pub const FIRST_OPEN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two attempts to open a backend.
pub const MAX_OPEN_BACKOFF: Duration = Duration::from_secs(5);

/// Backend URLs, from flags or the environment. Unset URLs default to the embedded
/// backends under `--data-dir`.
#[derive(Debug, Clone, clap::Args)]
pub struct BackendOpts {
    /// Directory of the embedded backends (log, database, blobs).
    #[arg(long, global = true, env = "STRATA_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Event log URL [default: file://DATA_DIR/log].
    #[arg(long = "log", global = true, env = "STRATA_LOG")]
    pub log_url: Option<String>,
    /// Projection store URL [default: sqlite://DATA_DIR/strata.db].
    #[arg(long = "db", global = true, env = "STRATA_DB")]
    pub db_url: Option<String>,
    /// Hot state URL [default: memory://].
    #[arg(long = "hot", global = true, env = "STRATA_HOT")]
    pub hot_url: Option<String>,
    /// Blob store URL [default: file://DATA_DIR/blobs].
    #[arg(long = "blob", global = true, env = "STRATA_BLOB")]
    pub blob_url: Option<String>,
    /// When the file log fsyncs: always, never or interval:<ms>.
    #[arg(long, global = true, env = "STRATA_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,
    /// Partitions of a new file log.
    #[arg(long, global = true, env = "STRATA_PARTITIONS", default_value_t = 8)]
    pub partitions: u32,
    /// Whether the deployment seals every new event with its session's data key (on) or appends
    /// events as they are (off). A property of the deployment, recorded in its key store by the
    /// first service to start (on for a new one); unset, a process follows the record, and a
    /// value that contradicts it is refused (`strata seal on|off` changes it). Sealed records are
    /// opened whatever the setting, as long as the master key is there. See
    /// docs/design/forgetting.md.
    #[arg(long, global = true, env = "STRATA_SEAL")]
    pub seal: Option<SealMode>,
    /// Key store URL [default: the projection database when it is PostgreSQL (schema
    /// strata_keys), else sqlite://DATA_DIR/keys.db].
    #[arg(long = "keys", global = true, env = "STRATA_KEYS")]
    pub keys_url: Option<String>,
    /// The master key file (64 hex digits) that wraps the data keys; every service of a
    /// deployment needs the same one [default: DATA_DIR/master.key, made by the embedded default
    /// when it seals and no key was wrapped yet].
    #[arg(long, global = true, env = "STRATA_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,
    /// The deployment's admin credential, a file holding one key: it authenticates the routes
    /// that act across tenants (`DELETE /v1/tenants/{t}`), which no tenant's API key can call
    /// [default: DATA_DIR/admin-api-key, made by the embedded default; none on servers].
    #[arg(long, global = true, env = "STRATA_ADMIN_KEY_FILE")]
    pub admin_key_file: Option<PathBuf>,
}

/// Whether new events are sealed on the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SealMode {
    On,
    Off,
}

impl Default for BackendOpts {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            log_url: None,
            db_url: None,
            hot_url: None,
            blob_url: None,
            fsync: FsyncPolicy::Always,
            partitions: 8,
            seal: None,
            keys_url: None,
            master_key_file: None,
            admin_key_file: None,
        }
    }
}

impl BackendOpts {
    /// Options for an embedded data directory.
    pub fn embedded(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            ..Self::default()
        }
    }

    /// How a file log is laid out and synced (and how many partitions a new Kafka topic gets).
    pub fn log_options(&self) -> FileLogOptions {
        FileLogOptions {
            partitions: self.partitions,
            fsync: self.fsync,
            ..FileLogOptions::default()
        }
    }

    fn under(&self, name: &str) -> String {
        self.data_dir.join(name).display().to_string()
    }

    pub fn log_url(&self) -> String {
        self.log_url
            .clone()
            .unwrap_or_else(|| format!("file://{}", self.under("log")))
    }

    /// The projection store URL; on the embedded default, the projection set that
    /// [`STORE_POINTER`] names (`strata rebuild` switches it).
    pub fn db_url(&self) -> String {
        self.db_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}",
                self.under(&current_store_file(&self.data_dir))
            )
        })
    }

    pub fn hot_url(&self) -> String {
        self.hot_url.clone().unwrap_or_else(|| "memory://".into())
    }

    pub fn blob_url(&self) -> String {
        self.blob_url
            .clone()
            .unwrap_or_else(|| format!("file://{}", self.under("blobs")))
    }

    /// The key store URL.
    pub fn keys_url(&self) -> String {
        if let Some(url) = &self.keys_url {
            return url.clone();
        }
        let db = self.db_url();
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            db
        } else {
            format!("sqlite://{}", self.under("keys.db"))
        }
    }

    /// The master key file, and whether it is the default one (which may be created).
    pub fn master_key_path(&self) -> (PathBuf, bool) {
        match &self.master_key_file {
            Some(path) => (path.clone(), false),
            None => (self.data_dir.join("master.key"), true),
        }
    }

    /// Whether any backend lives in the data directory (then one process owns it at a time).
    pub fn uses_data_dir(&self) -> bool {
        let embedded = |u: &str| u.starts_with("file://") || u.starts_with("sqlite://");
        embedded(&self.log_url()) || embedded(&self.db_url()) || embedded(&self.blob_url())
    }
}

/// File of the data directory naming the embedded projection set readers open (one line, a file
/// name in the data directory). Absent: [`DEFAULT_STORE_FILE`]. Written atomically (rename) by
/// `strata rebuild` when it switches readers to a rebuilt set.
pub const STORE_POINTER: &str = "store.current";
/// The embedded projection set of a data directory that was never rebuilt.
pub const DEFAULT_STORE_FILE: &str = "strata.db";

/// The file name of the data directory's current embedded projection set.
pub fn current_store_file(data_dir: &Path) -> String {
    match std::fs::read_to_string(data_dir.join(STORE_POINTER)) {
        Ok(s) if is_store_file_name(s.trim()) => s.trim().to_owned(),
        Ok(s) => {
            tracing::error!(pointer = %s.trim(), "ignoring an invalid store pointer");
            DEFAULT_STORE_FILE.to_owned()
        }
        Err(_) => DEFAULT_STORE_FILE.to_owned(),
    }
}

/// Whether `name` is a plain file name a pointer may hold (no directory part).
fn is_store_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.ends_with(".db")
        && !name.contains(['/', '\\'])
        && !name.starts_with('.')
}

/// The four backends of a Strata process, plus the wire codec.
#[derive(Debug, Clone)]
pub struct Backends {
    pub log: Arc<dyn EventLog>,
    pub store: Arc<dyn ProjectionStore>,
    pub hot: Arc<dyn HotState>,
    pub blobs: BlobStore,
    /// Encodes events for the log (sealed when sealing is on) and decodes its records.
    pub codec: RecordCodec,
    pub data_dir: PathBuf,
    /// Where the projection sets live (the live one and older rebuild generations).
    pub projection_sets: ProjectionSets,
    _lock: Option<Arc<DataDirLock>>,
}

/// Where a process's projection sets live, for the verbs that must reach every set (a forget).
#[derive(Clone)]
pub enum ProjectionSets {
    /// SQLite files of the data directory, named by the store pointer.
    Embedded(PathBuf),
    /// Schemas of a PostgreSQL database (the URL holds credentials: never printed).
    Postgres(String),
    /// One store only, opened elsewhere (tests, benchmarks).
    Single,
}

impl std::fmt::Debug for ProjectionSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjectionSets::Embedded(dir) => f.debug_tuple("Embedded").field(dir).finish(),
            ProjectionSets::Postgres(url) => f
                .debug_tuple("Postgres")
                .field(&strata_store::redact(url))
                .finish(),
            ProjectionSets::Single => f.write_str("Single"),
        }
    }
}

impl ProjectionSets {
    fn of(opts: &BackendOpts) -> ProjectionSets {
        let db = opts.db_url();
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            ProjectionSets::Postgres(db)
        } else if opts.db_url.is_none() {
            ProjectionSets::Embedded(opts.data_dir.clone())
        } else {
            ProjectionSets::Single
        }
    }
}

impl Backends {
    /// Opens every backend `opts` names. When one lives in the data directory, the directory is
    /// locked first for `holder` (a short description of this process, shown to others). The
    /// first failure is returned: see [`Backends::open_with_retry`] for a service's start.
    pub async fn open(opts: &BackendOpts, holder: &str) -> Result<Backends, Error> {
        let opened = Self::open_with(opts, holder, None).await?;
        Ok(opened.expect("an open that does not retry is never stopped"))
    }

    /// Opens every backend `opts` names, waiting for the ones that cannot be reached yet: an
    /// attempt that fails with a transient error ([`Error::is_transient`]: connection refused,
    /// reset or timed out) is logged at warn with the backend, its URL (user information
    /// redacted) and the reason, reported on `health` as the kind of backend only (`waiting for
    /// the projection store`: `/readyz` is unauthenticated) and retried after a backoff that starts at
    /// [`FIRST_OPEN_BACKOFF`] and doubles up to [`MAX_OPEN_BACKOFF`]. Backends already open stay
    /// open meanwhile. Any other error is returned at once.
    ///
    /// `None` when `shutdown` resolves first (during an attempt or a backoff).
    pub async fn open_with_retry(
        opts: &BackendOpts,
        holder: &str,
        health: &WorkerHealth,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Option<Backends>, Error> {
        tokio::pin!(shutdown);
        let retrying = Retrying {
            health,
            shutdown: shutdown.as_mut(),
        };
        Self::open_with(opts, holder, Some(retrying)).await
    }

    async fn open_with(
        opts: &BackendOpts,
        holder: &str,
        mut retry: Option<Retrying<'_>>,
    ) -> Result<Option<Backends>, Error> {
        let lock = if opts.uses_data_dir() {
            std::fs::create_dir_all(&opts.data_dir).map_err(|source| Error::Io {
                path: opts.data_dir.clone(),
                source,
            })?;
            Some(Arc::new(DataDirLock::acquire(&opts.data_dir, holder)?))
        } else {
            None
        };
        let log_url = opts.log_url();
        let log_options = opts.log_options();
        let log = attempt(&mut retry, "log", &log_url, || {
            strata_log::open(&log_url, log_options.clone())
        });
        let Some(log) = log.await? else {
            return Ok(None);
        };
        let db_url = opts.db_url();
        let store = attempt(&mut retry, "projection store", &db_url, || {
            strata_store::open(&db_url)
        });
        let Some(store) = store.await? else {
            return Ok(None);
        };
        let hot_url = opts.hot_url();
        let hot = attempt(&mut retry, "hot state", &hot_url, || {
            strata_hot::open(&hot_url)
        });
        let Some(hot) = hot.await? else {
            return Ok(None);
        };
        let blobs = BlobStore::open(&opts.blob_url())?;
        let Some(codec) = sealing::record_codec(opts, Some(log.as_ref()), &mut retry).await? else {
            return Ok(None);
        };
        let blobs = blobs_with_keys(blobs, &codec);
        Ok(Some(Backends {
            log,
            store,
            hot,
            blobs,
            codec,
            data_dir: opts.data_dir.clone(),
            projection_sets: ProjectionSets::of(opts),
            _lock: lock,
        }))
    }

    /// Path of a file inside the data directory.
    pub fn data_path(&self, name: &str) -> PathBuf {
        self.data_dir.join(name)
    }
}

/// `blobs` opening sealed artifacts with `codec`'s key ring, and sealing new ones when it
/// seals; as it was when `codec` has no keys. For a process that opens the blob store beside a
/// codec of its own ([`open_record_codec`]) rather than through [`Backends`].
pub fn blobs_with_keys(blobs: BlobStore, codec: &RecordCodec) -> BlobStore {
    match codec.keys() {
        Some(ring) => blobs.with_keys(Arc::new(artifacts::SealedArtifacts {
            ring: Arc::clone(ring),
            seal: codec.seals(),
        })),
        None => blobs,
    }
}

/// What [`Backends::open_with_retry`] reports on and stops at.
struct Retrying<'a> {
    health: &'a WorkerHealth,
    shutdown: Pin<&'a mut (dyn Future<Output = ()> + Send + 'a)>,
}

/// Opens the `what` backend at `url` with `open`: once without `retry`; with it, again after
/// each transient failure until it opens (`Some`) or the shutdown resolves (`None`).
async fn attempt<T, E, F>(
    retry: &mut Option<Retrying<'_>>,
    what: &str,
    url: &str,
    mut open: impl FnMut() -> F,
) -> Result<Option<T>, Error>
where
    F: Future<Output = Result<T, E>>,
    E: Into<Error>,
{
    let Some(retry) = retry else {
        return open().await.map(Some).map_err(Into::into);
    };
    let url = strata_store::redact(url);
    retry
        .health
        .failing(format!("starting: opening the {what}"));
    let mut backoff = FIRST_OPEN_BACKOFF;
    let mut failures = 0u32;
    loop {
        let result = tokio::select! {
            biased;
            _ = retry.shutdown.as_mut() => return Ok(None),
            r = open() => r.map_err(Into::into),
        };
        match result {
            Ok(opened) => {
                if failures > 0 {
                    tracing::info!(backend = what, %url, failures, "backend reachable; opened");
                }
                return Ok(Some(opened));
            }
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                failures += 1;
                tracing::warn!(
                    backend = what,
                    %url,
                    attempt = failures,
                    retry_in_ms = backoff.as_millis() as u64,
                    error = %e,
                    "cannot open a backend; retrying"
                );
                // Unauthenticated endpoints serve this: the kind of backend, never its URL or
                // what it answered (hosts, users, paths). The log above has both.
                retry.health.failing(format!("waiting for the {what}"));
                tokio::select! {
                    biased;
                    _ = retry.shutdown.as_mut() => return Ok(None),
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_OPEN_BACKOFF);
            }
        }
    }
}

/// Listens for Ctrl-C and SIGTERM from now on (a signal that arrives before the returned future
/// is first polled is not lost, unlike with [`shutdown_signal`]); the future resolves on the
/// first.
pub fn listen_for_shutdown() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = interrupt.recv() => {},
            }
            tracing::info!("shutdown requested");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(shutdown_signal())
    }
}

/// Resolves when the process is asked to stop: Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}

/// Whether `path` exists and is a directory (for messages).
pub fn is_dir(path: &Path) -> bool {
    path.is_dir()
}

pub mod follow;

/// Next offset per partition.
pub type Offsets = strata_log::Offsets;

/// The consumer group of the state projector. Ingest and the assembler read its offsets in the
/// projection store to know how far the projections reach on each partition.
pub const PROJECTOR_GROUP: &str = "strata-projector";

/// Serves `router` on `listen` until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve(
    router: axum::Router,
    listen: std::net::SocketAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = http_server::HttpLimits::from_env()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(address = %listener.local_addr()?, "listening");
    http_server::serve(
        listener,
        http_server::traced_routes(router),
        limits,
        shutdown,
    )
    .await
}

impl Backends {
    /// Assembles backends opened elsewhere (tests, benchmarks).
    pub fn from_parts(
        log: Arc<dyn EventLog>,
        store: Arc<dyn ProjectionStore>,
        hot: Arc<dyn HotState>,
        blobs: BlobStore,
        data_dir: PathBuf,
    ) -> Backends {
        Backends {
            log,
            store,
            hot,
            blobs,
            codec: RecordCodec::plain(),
            data_dir,
            projection_sets: ProjectionSets::Single,
            _lock: None,
        }
    }

    /// The same backends reading and writing the log with `codec` (another process's, to read
    /// what it sealed).
    pub fn with_codec(self, codec: RecordCodec) -> Backends {
        Backends { codec, ..self }
    }
}
