//! Strata's projection store: the [`ProjectionStore`] port and its backends, chosen by
//! URL. `sqlite://PATH` is the embedded default ([`sqlite::SqliteStore`]); `postgres://…` (or
//! `postgresql://…`) is the distributed one ([`postgres::PgStore`]). Both are always compiled,
//! and one conformance suite (`tests/conformance.rs`) runs against each.
//!
//! The projector is the only writer. It hands a whole batch — row changes, the sessions' fold
//! state and the consumer offsets that the batch reaches — to [`ProjectionStore::commit_batch`],
//! which writes all of it in one transaction: after a crash, the store either has a batch and its
//! offsets or neither, so no event is lost or applied twice.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use strata_core::assembly::Snapshot;
use strata_core::projection::{Change, SessionFold};

mod common;
pub mod postgres;
pub mod sqlite;

/// Errors of the projection store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored JSON document could not be read back.
    #[error("corrupt stored record {what}: {source}")]
    Corrupt {
        /// What was being read.
        what: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The URL names a backend this build does not have, or is malformed.
    #[error("unsupported store url {url:?}: {reason}")]
    UnsupportedUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file operation on a database failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A database could not be checkpointed because another connection was reading it.
    #[error("could not checkpoint {path}: the database is in use")]
    InUse {
        /// The database file.
        path: String,
    },
    /// A failure injected by a test (see [`sqlite::SqliteStore::fail_next_commit`] and
    /// [`postgres::PgStore::fail_next_commit`]).
    #[error("injected failure before commit")]
    Injected,
    /// A projection-set operation was refused (see [`postgres::generations`]).
    #[error("{0}")]
    Generation(String),
}

impl Error {
    /// Whether retrying may succeed: the server could not be reached, dropped the connection,
    /// did not answer in time, is starting up or shutting down, or is out of connections or
    /// space. A malformed URL, a refused login, a missing database or a migration that fails on
    /// its SQL are not: retrying gives the same answer.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database(e) => is_transient_sqlx(e),
            Error::Migrate(
                sqlx::migrate::MigrateError::Execute(e)
                | sqlx::migrate::MigrateError::ExecuteMigration(e, _),
            ) => is_transient_sqlx(e),
            _ => false,
        }
    }
}

fn is_transient_sqlx(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => true,
        // SQLSTATE classes 08 (connection exception) and 53 (insufficient resources: too many
        // connections, disk full), and 57P01..57P03 (the server shuts down, crashed or starts).
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(code.as_ref(), "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Result with the store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Next log offset to read, per partition.
pub type Offsets = BTreeMap<u32, u64>;

/// Everything one projector batch writes, atomically.
#[derive(Debug, Clone, Default)]
pub struct ProjectionBatch {
    /// Consumer group whose offsets advance.
    pub group: String,
    /// The row changes of the batch's events, in fold order.
    pub changes: Vec<Change>,
    /// Fold state of every session the batch touched, after the batch.
    pub folds: Vec<SessionFold>,
    /// Next offset per partition after the batch.
    pub offsets: Offsets,
}

/// An API key as listed by [`ProjectionStore::api_keys`]: never the key, only its id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApiKeyInfo {
    /// `key_` and the first 16 hex digits of the key's SHA-256: what `revoke` takes.
    pub key_id: String,
    pub tenant_id: String,
    pub label: String,
    pub created_at: String,
    /// RFC 3339 (UTC); the key is refused from then on.
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

impl ApiKeyInfo {
    /// The listed id of a key with this SHA-256.
    pub fn id_of(key_sha256: &str) -> String {
        format!("key_{}", &key_sha256[..16.min(key_sha256.len())])
    }

    /// The 16 hex digits of the key's SHA-256 a key id names, if it is a well-formed id.
    pub fn hash_prefix(key_id: &str) -> Option<String> {
        key_id
            .strip_prefix("key_")
            .filter(|p| p.len() == 16 && p.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase)
    }

    /// Whether the key authenticates at `now` (RFC 3339, UTC, as [`now_utc`] writes it).
    pub fn is_live_at(&self, now: &str) -> bool {
        self.revoked_at.is_none() && self.expires_at.as_deref().is_none_or(|e| e > now)
    }
}

/// The current time as the key columns hold it: RFC 3339, UTC, whole seconds, `Z` (so that the
/// strings order as the times do).
pub fn now_utc() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A session as listed by [`ProjectionStore::sessions`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionSummary {
    /// The session's id.
    pub session_id: String,
    /// The highest seq projected.
    pub head_seq: u64,
    /// How many events are projected.
    pub event_count: u64,
}

/// A session as the inspector's list shows it: its summary, when it last moved, its model, who
/// took part and its fold (branches, open calls, unresolved errors).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionListing {
    pub session_id: String,
    pub head_seq: u64,
    pub event_count: u64,
    /// Timestamp of its newest event (RFC 3339, as the event carried it).
    pub last_event_at: Option<String>,
    /// The model its `SessionStarted` named.
    pub model: Option<String>,
    /// The participants of its events, sorted.
    pub participants: Vec<String>,
    pub fold: SessionFold,
}

/// One branch of a session as its events say: how far it reaches and when it last moved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BranchHead {
    pub branch_id: String,
    /// The highest seq of an event on the branch itself (not its ancestors).
    pub head_seq: u64,
    /// Events on the branch itself.
    pub events: u64,
    /// Timestamp of its event of the highest seq (RFC 3339, as the event carried it).
    pub last_event_at: String,
}

/// The tables of a projection set that hold a session's rows (all keyed by tenant and session).
pub const SESSION_TABLES: [&str; 10] = [
    "events",
    "messages",
    "tool_calls",
    "artifacts",
    "memories",
    "compactions",
    "assemblies",
    "branches",
    "session_folds",
    "sessions",
];

/// What [`ProjectionStore::forget_session`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionForgotten {
    /// Rows removed, by table.
    pub rows: BTreeMap<String, u64>,
    /// Artifacts (SHA-256) the session referred to that no other session of the tenant refers
    /// to any more: their blobs can go.
    pub orphaned_artifacts: Vec<String>,
}

/// The projections.
#[async_trait]
pub trait ProjectionStore: Debug + Send + Sync + 'static {
    /// Offsets committed by `group` with its last batch.
    async fn offsets(&self, group: &str) -> Result<Offsets>;

    /// Writes a batch in one transaction.
    async fn commit_batch(&self, batch: ProjectionBatch) -> Result<()>;

    /// The fold state of a session, if it has any event.
    async fn session_fold(&self, tenant: &str, session: &str) -> Result<Option<SessionFold>>;

    /// Which of `event_ids` of `tenant` are already projected.
    async fn projected_event_ids(
        &self,
        tenant: &str,
        event_ids: &[String],
    ) -> Result<HashSet<String>>;

    /// The seq of an event of a session.
    async fn event_seq(&self, tenant: &str, session: &str, event_id: &str) -> Result<Option<u64>>;

    /// The provider its `SessionStarted` named (`model.provider`), if the session has one.
    async fn session_provider(&self, tenant: &str, session: &str) -> Result<Option<String>>;

    /// What the assembler needs for a session's branch and participant: the newest `window`
    /// messages of the branch lineage and everything they refer to. `None` for an unknown
    /// session or branch.
    async fn snapshot(
        &self,
        tenant: &str,
        session: &str,
        branch: &str,
        participant: Option<&str>,
        window: u32,
    ) -> Result<Option<Snapshot>>;

    /// Canonical JSON of a session's events with `seq > after_seq`, in seq order.
    async fn events(
        &self,
        tenant: &str,
        session: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Value>>;

    /// The session's events with `seq <= at`, in seq order, read back as events (a fork from an
    /// earlier event folds its parent again up to there, see
    /// `strata_core::projection::branch_at`; a compaction reads the session). A stored event that
    /// no longer parses is left out with a warning rather than stopping the reader for good.
    async fn events_through(
        &self,
        tenant: &str,
        session: &str,
        at: u64,
    ) -> Result<Vec<strata_core::Event>> {
        self.events_between(tenant, session, 0, at, usize::MAX)
            .await
    }

    /// At most `limit` of the session's events with `after < seq <= at`, in seq order, read
    /// back as events page by page (a stored event that no longer parses is left out with a
    /// warning, as in [`ProjectionStore::events_through`]). A reader that must stay bounded
    /// (an explicit compaction) reads through this.
    async fn events_between(
        &self,
        tenant: &str,
        session: &str,
        mut after: u64,
        at: u64,
        limit: usize,
    ) -> Result<Vec<strata_core::Event>> {
        const PAGE: u32 = 1000;
        let mut out = Vec::new();
        while after < at && out.len() < limit {
            let want = PAGE.min(u32::try_from(limit - out.len()).unwrap_or(PAGE));
            let page = self.events(tenant, session, after, want).await?;
            let (full, before) = (page.len() == want as usize, after);
            for value in page {
                let seq = value.get("seq").and_then(Value::as_u64).unwrap_or(0);
                if seq > at {
                    return Ok(out);
                }
                after = after.max(seq);
                match strata_core::Event::from_stored_json(value) {
                    Ok(event) => out.push(event),
                    Err(e) => tracing::warn!(tenant, session, seq, error = %e,
                        "a stored event does not parse; left out of the events read back"),
                }
            }
            if !full || after == before {
                break;
            }
        }
        Ok(out)
    }

    /// Each branch of a session that has events of its own, by branch id.
    async fn branch_heads(&self, tenant: &str, session: &str) -> Result<Vec<BranchHead>>;

    /// A stored ContextAssembly record.
    async fn assembly(&self, tenant: &str, assembly_id: &str) -> Result<Option<Value>>;

    /// The privacy classes of every projected reference to the artifact with this SHA-256 in
    /// the tenant (one per event that cited it; `None` for an unclassed one). Empty when no
    /// projected event refers to it.
    async fn artifact_classes(
        &self,
        tenant: &str,
        sha256: &str,
    ) -> Result<Vec<Option<strata_core::payload::PrivacyClass>>>;

    /// The `ToolCallFinished` events with `after_seq < seq <=
    /// through_seq` whose projected privacy class is `confidential` or `restricted`, by event
    /// id: what `GET /v1/sessions/{id}/events` must not quote.
    async fn withheld_results(
        &self,
        tenant: &str,
        session: &str,
        after_seq: u64,
        through_seq: u64,
    ) -> Result<BTreeMap<String, strata_core::payload::PrivacyClass>>;

    /// The sessions of a tenant.
    async fn sessions(&self, tenant: &str) -> Result<Vec<SessionSummary>>;

    /// At most `limit` sessions of a tenant whose ids sort after `after` (byte order): one page
    /// of [`ProjectionStore::sessions`].
    async fn sessions_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SessionSummary>>;

    /// One page of [`ProjectionStore::sessions_page`] with what a list of sessions shows
    /// ([`SessionListing`]). With `matching`, only the sessions whose id, model or one of
    /// whose participants contains it (plain text, no wildcards).
    async fn sessions_listing(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
        matching: Option<&str>,
    ) -> Result<Vec<SessionListing>>;

    /// The tenant an API key (by its SHA-256) belongs to.
    async fn tenant_for_key(&self, key_sha256: &str) -> Result<Option<String>>;

    /// Registers an API key (by its SHA-256) for a tenant, expiring at `expires_at` (RFC 3339,
    /// UTC) if given. Idempotent: a key registered already (revoked included) is left as it is.
    async fn put_api_key(
        &self,
        key_sha256: &str,
        tenant: &str,
        label: &str,
        expires_at: Option<&str>,
    ) -> Result<()>;

    /// One key's record, live or not.
    async fn api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyInfo>>;

    /// The keys of a tenant, or of every tenant, oldest first.
    async fn api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyInfo>>;

    /// Revokes the key with this id ([`ApiKeyInfo::key_id`]) at `now`; false when no live key
    /// has it.
    async fn revoke_api_key(&self, key_id: &str, now: &str) -> Result<bool>;

    /// Row counts per table and a content hash per table: equal for equal projections. Used by
    /// crash tests and rebuild verification.
    async fn fingerprint(&self) -> Result<BTreeMap<String, (u64, String)>>;

    /// Tenants with projected sessions, in byte order.
    async fn tenants(&self) -> Result<Vec<String>>;

    /// Where each projected event of a session is on the log (partition, offset), in seq order.
    async fn session_log_positions(&self, tenant: &str, session: &str) -> Result<Vec<(u32, u64)>>;

    /// Deletes every row of a session, in one transaction (readers see all of it or none), and
    /// leaves no copy of the deleted content in the store's files (SQLite: vacuumed and its WAL
    /// truncated; PostgreSQL: the tables vacuumed).
    async fn forget_session(&self, tenant: &str, session: &str) -> Result<SessionForgotten>;

    /// Checks that the backend is reachable.
    async fn ping(&self) -> Result<()>;
}

fn _assert_object_safe(_: &dyn ProjectionStore) {}

/// Opens the store a URL names, migrating it: `sqlite://PATH` (created when missing) or
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?max_connections=N&…]` (see
/// [`postgres::PgStore::open`]).
pub async fn open(url: &str) -> Result<Arc<dyn ProjectionStore>> {
    match url.split_once("://") {
        Some(("sqlite", path)) => Ok(Arc::new(sqlite::SqliteStore::open(path).await?)),
        Some(("postgres" | "postgresql", _)) => Ok(Arc::new(postgres::PgStore::open(url).await?)),
        _ => Err(Error::UnsupportedUrl {
            url: redact(url),
            reason: "expected sqlite://PATH or postgres://HOST/DATABASE".into(),
        }),
    }
}

/// A URL with its user information (user and password) and the values of secret-looking query
/// parameters (`password=`, `sslpassword=`, `token=`, `secret=`, `…key=`) replaced by `***`, for
/// messages and logs.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &base[..s], &base[at + 1..]),
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if is_secret_param(key) => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn is_secret_param(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "pwd", "secret", "token", "key"]
        .iter()
        .any(|s| key.contains(s))
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn user_information_and_secret_query_values_are_hidden() {
        assert_eq!(
            redact("postgres://strata:hunter2@db:5432/strata?sslmode=require&password=s3cret"),
            "postgres://***@db:5432/strata?sslmode=require&password=***"
        );
        assert_eq!(
            redact("postgres://db/strata?sslpassword=x&sslkey=/k.pem&application_name=a"),
            "postgres://db/strata?sslpassword=***&sslkey=***&application_name=a"
        );
        assert_eq!(
            redact("sqlite:///data/strata.db"),
            "sqlite:///data/strata.db"
        );
    }
}
