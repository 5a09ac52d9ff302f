//! Where wrapped data keys live: the [`KeyStore`] port and its SQLite and PostgreSQL backends.
//!
//! Keys are not a projection: a rebuild never drops them (the embedded store is its own file,
//! `keys.db`, beside the projection sets; on PostgreSQL they live in the `strata_keys` schema,
//! outside the projection generations). Losing this store loses every sealed event: back it up
//! with the database, and keep the master key apart from it.

use async_trait::async_trait;
use chrono::Utc;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::Row;

use crate::{Error, Result};

/// One subject's data key as stored: wrapped by the master key, or destroyed.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub tenant_id: String,
    /// What the key seals: `session:<id>` for a session's events.
    pub subject: String,
    pub key_id: String,
    /// The key wrapped by the master key; `None` once destroyed.
    pub wrapped: Option<Vec<u8>>,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("tenant_id", &self.tenant_id)
            .field("subject", &self.subject)
            .field("key_id", &self.key_id)
            .field("destroyed", &self.wrapped.is_none())
            .finish()
    }
}

/// One forget, as the audit trail keeps it: who asked, when, what went. The subject is kept as
/// a hash; its id in the clear only while the forget is pending (to resume it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ForgetEntry {
    pub forget_id: String,
    pub tenant_id: String,
    /// SHA-256 of `tenant \0 subject`, hex.
    pub subject_hash: String,
    /// The session's id while the forget is pending; `None` once done.
    pub session_id: Option<String>,
    pub requested_by: String,
    pub requested_at: String,
    pub completed_at: Option<String>,
    /// What was removed, as JSON (counts only, never content).
    pub report: Option<String>,
}

/// Storage of wrapped data keys, one per `(tenant, subject)`.
/// Each of `keys` as the store holds it now: the one just written, or the one another process
/// wrote first.
async fn stored_as_now(store: &dyn KeyStore, keys: &[StoredKey]) -> Result<Vec<StoredKey>> {
    let mut stored = Vec::with_capacity(keys.len());
    for key in keys {
        let got = store.get(&key.tenant_id, &key.subject).await?;
        stored.push(got.ok_or(Error::Vanished)?);
    }
    Ok(stored)
}

#[async_trait]
pub trait KeyStore: Send + Sync + std::fmt::Debug {
    /// Stores `key` unless the subject has one already, and returns the subject's key: the first
    /// writer wins, so two services creating a session's key at once agree on it.
    async fn insert_if_absent(&self, key: &StoredKey) -> Result<StoredKey>;

    /// [`KeyStore::insert_if_absent`] for several subjects in one durable write: a batch's new
    /// sessions cost one commit, not one each. Returns each subject's key, in order.
    async fn insert_many_if_absent(&self, keys: &[StoredKey]) -> Result<Vec<StoredKey>>;

    /// The subject's key, destroyed or not; `None` when it never had one.
    async fn get(&self, tenant_id: &str, subject: &str) -> Result<Option<StoredKey>>;

    /// Destroys the subject's key: the wrapped bytes are overwritten and the row kept as the
    /// marker that the subject was forgotten. Returns whether a live key was destroyed.
    async fn destroy(&self, tenant_id: &str, subject: &str) -> Result<bool>;

    /// Destroys the subject's key as [`KeyStore::destroy`] does, then removes its row: no marker
    /// stays, so the subject may get a new key later (an artifact stored again after the
    /// sessions that stored it were forgotten). Returns whether a live key was destroyed.
    async fn remove(&self, tenant_id: &str, subject: &str) -> Result<bool>;

    /// Writes a forget's audit entry (inserted, or updated by `forget_id`).
    async fn record_forget(&self, entry: &ForgetEntry) -> Result<()>;

    /// The audit trail, oldest first; only the pending forgets when `pending_only`.
    async fn forgets(&self, pending_only: bool) -> Result<Vec<ForgetEntry>>;

    /// The deployment's sealing setting as recorded, with when; `None` before any service
    /// recorded one.
    async fn sealing(&self) -> Result<Option<Sealing>>;

    /// Records `on` as the deployment's sealing setting unless one is recorded, and returns the
    /// recorded one: the first service of a deployment to start decides, every other one agrees.
    async fn settle_sealing(&self, on: bool) -> Result<Sealing>;

    /// Changes the recorded setting: a deliberate act (`strata seal on|off`), never a default.
    async fn set_sealing(&self, on: bool) -> Result<Sealing>;

    /// Whether any data key was ever made (live or destroyed): the deployment sealed before.
    async fn has_keys(&self) -> Result<bool>;

    /// The keys any process destroys from now on, as it destroys them, when the store can tell
    /// (PostgreSQL: `LISTEN`); `None` when it cannot (SQLite: one process owns it). An item
    /// `None` says some may have been missed (the connection was lost): drop every cached key.
    async fn watch_destroyed(&self) -> Result<Option<DestroyedKeys>> {
        Ok(None)
    }
}

/// Destroyed keys as `(tenant, subject)`; `None`: some were missed.
pub type DestroyedKeys = tokio::sync::mpsc::Receiver<Option<(String, String)>>;

/// The channel a destroyed key is announced on.
const DESTROYED_CHANNEL: &str = "strata_keys_destroyed";

/// A destroyed key's announcement: the tenant's length, then tenant and subject (no separator
/// either could contain).
fn announcement(tenant_id: &str, subject: &str) -> String {
    format!("{}:{tenant_id}{subject}", tenant_id.len())
}

fn announced(payload: &str) -> Option<(String, String)> {
    let (len, rest) = payload.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let tenant = rest.get(..len)?;
    Some((tenant.to_owned(), rest[len..].to_owned()))
}

/// A deployment's sealing setting as its key store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealing {
    pub on: bool,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
}

fn settings_table(schema: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {schema}deployment (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            recorded_at TEXT NOT NULL
        )"
    )
}

/// The statements of the sealing setting, for a schema prefix and placeholder style.
#[derive(Debug)]
struct SealingSql {
    read: String,
    settle: String,
    set: String,
    has_keys: String,
}

impl SealingSql {
    fn new(schema: &str, [a, b]: [&str; 2]) -> Self {
        let insert = format!(
            "INSERT INTO {schema}deployment (name, value, recorded_at) VALUES ('sealing', {a}, {b})"
        );
        Self {
            read: format!(
                "SELECT value, recorded_at FROM {schema}deployment WHERE name = 'sealing'"
            ),
            settle: format!("{insert} ON CONFLICT (name) DO NOTHING"),
            set: format!(
                "{insert} ON CONFLICT (name) DO UPDATE SET value = excluded.value, \
                 recorded_at = excluded.recorded_at"
            ),
            has_keys: format!("SELECT EXISTS (SELECT 1 FROM {schema}data_keys) AS any_key"),
        }
    }
}

fn sealing_row<R: Row>(r: &R) -> Sealing
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Sealing {
        on: r.get::<String, _>("value") == "on",
        recorded_at: r.get("recorded_at"),
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

const AUDIT_COLUMNS: &str =
    "forget_id, tenant_id, subject_hash, session_id, requested_by, requested_at, completed_at, report";

fn audit_row<R: Row>(r: &R) -> ForgetEntry
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    ForgetEntry {
        forget_id: r.get("forget_id"),
        tenant_id: r.get("tenant_id"),
        subject_hash: r.get("subject_hash"),
        session_id: r.get("session_id"),
        requested_by: r.get("requested_by"),
        requested_at: r.get("requested_at"),
        completed_at: r.get("completed_at"),
        report: r.get("report"),
    }
}

fn audit_table(schema: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {schema}forget_audit (
            forget_id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            subject_hash TEXT NOT NULL,
            session_id TEXT,
            requested_by TEXT NOT NULL,
            requested_at TEXT NOT NULL,
            completed_at TEXT,
            report TEXT
        )"
    )
}

fn upsert_audit(schema: &str, placeholders: [&str; 8]) -> String {
    let [a, b, c, d, e, f, g, h] = placeholders;
    format!(
        "INSERT INTO {schema}forget_audit ({AUDIT_COLUMNS}) VALUES ({a}, {b}, {c}, {d}, {e}, {f}, {g}, {h})
         ON CONFLICT (forget_id) DO UPDATE SET session_id = excluded.session_id,
             completed_at = excluded.completed_at, report = excluded.report"
    )
}

/// Opens the key store at `url`: `sqlite://PATH` or `postgres://…` (schema `strata_keys`).
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn KeyStore>> {
    match url.split_once("://") {
        Some(("sqlite", path)) => Ok(std::sync::Arc::new(SqliteKeyStore::open(path).await?)),
        Some(("postgres" | "postgresql", _)) => {
            Ok(std::sync::Arc::new(PgKeyStore::open(url).await?))
        }
        _ => Err(Error::UnsupportedUrl {
            url: redact(url),
            reason: "expected sqlite://PATH or postgres://HOST/DATABASE",
        }),
    }
}

/// A URL without its user information, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

fn row_to_key(
    tenant_id: String,
    subject: String,
    key_id: String,
    wrapped: Option<Vec<u8>>,
) -> StoredKey {
    StoredKey {
        tenant_id,
        subject,
        key_id,
        wrapped: wrapped.filter(|w| !w.is_empty()),
    }
}

/// Keys in an SQLite file of their own (the embedded default: `DATA_DIR/keys.db`).
#[derive(Debug)]
pub struct SqliteKeyStore {
    pool: SqlitePool,
    sql: SealingSql,
}

impl SqliteKeyStore {
    /// Opens (creating when needed) the key database at `path`.
    pub async fn open(path: &str) -> Result<Self> {
        // A rollback journal, not a WAL: writes are rare (a key per session), and a process
        // that only reads keys (a replay) then leaves the files exactly as it found them.
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Delete)
            // A destroyed key's bytes are zeroed in the file, not only unlinked from the b-tree.
            .pragma("secure_delete", "ON");
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|e| Error::store("open", e))?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS data_keys (
                tenant_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                key_id TEXT NOT NULL UNIQUE,
                wrapped BLOB,
                created_at TEXT NOT NULL,
                destroyed_at TEXT,
                PRIMARY KEY (tenant_id, subject)
            )",
        )
        .execute(&pool)
        .await
        .map_err(|e| Error::store("create the data_keys table", e))?;
        sqlx::query(&audit_table(""))
            .execute(&pool)
            .await
            .map_err(|e| Error::store("create the forget_audit table", e))?;
        sqlx::query(&settings_table(""))
            .execute(&pool)
            .await
            .map_err(|e| Error::store("create the deployment table", e))?;
        Ok(SqliteKeyStore {
            pool,
            sql: SealingSql::new("", ["?", "?"]),
        })
    }
}

#[async_trait]
impl KeyStore for SqliteKeyStore {
    async fn insert_many_if_absent(&self, keys: &[StoredKey]) -> Result<Vec<StoredKey>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| Error::store("begin inserting data keys", e))?;
        for key in keys {
            sqlx::query(
                "INSERT INTO data_keys (tenant_id, subject, key_id, wrapped, created_at)
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, subject) DO NOTHING",
            )
            .bind(&key.tenant_id)
            .bind(&key.subject)
            .bind(&key.key_id)
            .bind(&key.wrapped)
            .bind(Utc::now().to_rfc3339())
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::store("insert a data key", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| Error::store("commit data keys", e))?;
        stored_as_now(self, keys).await
    }

    async fn insert_if_absent(&self, key: &StoredKey) -> Result<StoredKey> {
        let mut stored = self
            .insert_many_if_absent(std::slice::from_ref(key))
            .await?;
        stored.pop().ok_or(Error::Vanished)
    }

    async fn get(&self, tenant_id: &str, subject: &str) -> Result<Option<StoredKey>> {
        let row = sqlx::query(
            "SELECT key_id, wrapped FROM data_keys WHERE tenant_id = ? AND subject = ?",
        )
        .bind(tenant_id)
        .bind(subject)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| Error::store("read a data key", e))?;
        Ok(row.map(|r| {
            row_to_key(
                tenant_id.to_owned(),
                subject.to_owned(),
                r.get("key_id"),
                r.get("wrapped"),
            )
        }))
    }

    async fn destroy(&self, tenant_id: &str, subject: &str) -> Result<bool> {
        // Overwrite in place first (same length, zeros), then clear: with secure_delete the
        // freed page content is zeroed too.
        let done = sqlx::query(
            "UPDATE data_keys SET wrapped = zeroblob(length(wrapped)) WHERE tenant_id = ? AND subject = ? AND wrapped IS NOT NULL",
        )
        .bind(tenant_id)
        .bind(subject)
        .execute(&self.pool)
        .await
        .map_err(|e| Error::store("destroy a data key", e))?;
        sqlx::query(
            "UPDATE data_keys SET wrapped = NULL, destroyed_at = COALESCE(destroyed_at, ?) WHERE tenant_id = ? AND subject = ?",
        )
        .bind(Utc::now().to_rfc3339())
        .bind(tenant_id)
        .bind(subject)
        .execute(&self.pool)
        .await
        .map_err(|e| Error::store("destroy a data key", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn remove(&self, tenant_id: &str, subject: &str) -> Result<bool> {
        let destroyed = self.destroy(tenant_id, subject).await?;
        sqlx::query("DELETE FROM data_keys WHERE tenant_id = ? AND subject = ?")
            .bind(tenant_id)
            .bind(subject)
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("remove a data key", e))?;
        Ok(destroyed)
    }

    async fn record_forget(&self, entry: &ForgetEntry) -> Result<()> {
        bind_audit(sqlx::query(&upsert_audit("", ["?"; 8])), entry)
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("write the forget audit", e))?;
        Ok(())
    }

    async fn forgets(&self, pending_only: bool) -> Result<Vec<ForgetEntry>> {
        let filter = if pending_only {
            "WHERE completed_at IS NULL"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "SELECT {AUDIT_COLUMNS} FROM forget_audit {filter} ORDER BY requested_at, forget_id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| Error::store("read the forget audit", e))?;
        Ok(rows.iter().map(audit_row).collect())
    }

    async fn sealing(&self) -> Result<Option<Sealing>> {
        let row = sqlx::query(&self.sql.read)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| Error::store("read the sealing setting", e))?;
        Ok(row.as_ref().map(sealing_row))
    }

    async fn settle_sealing(&self, on: bool) -> Result<Sealing> {
        self.write_sealing(&self.sql.settle, on).await
    }

    async fn set_sealing(&self, on: bool) -> Result<Sealing> {
        self.write_sealing(&self.sql.set, on).await
    }

    async fn has_keys(&self) -> Result<bool> {
        let row = sqlx::query(&self.sql.has_keys)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| Error::store("look for data keys", e))?;
        Ok(row.get::<bool, _>("any_key"))
    }
}

impl SqliteKeyStore {
    async fn write_sealing(&self, statement: &str, on: bool) -> Result<Sealing> {
        sqlx::query(statement)
            .bind(on_off(on))
            .bind(Utc::now().to_rfc3339())
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("record the sealing setting", e))?;
        self.sealing().await?.ok_or(Error::Vanished)
    }
}

fn bind_audit<'q, DB: sqlx::Database>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    entry: &'q ForgetEntry,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    query
        .bind(entry.forget_id.clone())
        .bind(entry.tenant_id.clone())
        .bind(entry.subject_hash.clone())
        .bind(entry.session_id.clone())
        .bind(entry.requested_by.clone())
        .bind(entry.requested_at.clone())
        .bind(entry.completed_at.clone())
        .bind(entry.report.clone())
}

/// Keys in PostgreSQL, schema `strata_keys` (outside the projection generations).
#[derive(Debug)]
pub struct PgKeyStore {
    pool: PgPool,
    sql: SealingSql,
}

impl PgKeyStore {
    /// Connects to `url` and creates the schema and table when needed.
    pub async fn open(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(url)
            .await
            .map_err(|e| Error::store("connect", e))?;
        let mut tx = pool.begin().await.map_err(|e| Error::store("begin", e))?;
        // Services starting together would race on CREATE … IF NOT EXISTS (a unique violation in
        // the catalog): one at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(7310580611)")
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::store("lock the key schema", e))?;
        for statement in [
            "CREATE SCHEMA IF NOT EXISTS strata_keys",
            "CREATE TABLE IF NOT EXISTS strata_keys.data_keys (
                tenant_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                key_id TEXT NOT NULL UNIQUE,
                wrapped BYTEA,
                created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                destroyed_at TIMESTAMPTZ,
                PRIMARY KEY (tenant_id, subject)
            )",
            &audit_table("strata_keys."),
            &settings_table("strata_keys."),
        ] {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(|e| Error::store("create the key schema", e))?;
        }
        tx.commit().await.map_err(|e| Error::store("commit", e))?;
        Ok(PgKeyStore {
            pool,
            sql: SealingSql::new("strata_keys.", ["$1", "$2"]),
        })
    }
}

#[async_trait]
impl KeyStore for PgKeyStore {
    async fn insert_many_if_absent(&self, keys: &[StoredKey]) -> Result<Vec<StoredKey>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| Error::store("begin inserting data keys", e))?;
        for key in keys {
            sqlx::query(
                "INSERT INTO strata_keys.data_keys (tenant_id, subject, key_id, wrapped)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, subject) DO NOTHING",
            )
            .bind(&key.tenant_id)
            .bind(&key.subject)
            .bind(&key.key_id)
            .bind(&key.wrapped)
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::store("insert a data key", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| Error::store("commit data keys", e))?;
        stored_as_now(self, keys).await
    }

    async fn insert_if_absent(&self, key: &StoredKey) -> Result<StoredKey> {
        let mut stored = self
            .insert_many_if_absent(std::slice::from_ref(key))
            .await?;
        stored.pop().ok_or(Error::Vanished)
    }

    async fn get(&self, tenant_id: &str, subject: &str) -> Result<Option<StoredKey>> {
        let row = sqlx::query(
            "SELECT key_id, wrapped FROM strata_keys.data_keys WHERE tenant_id = $1 AND subject = $2",
        )
        .bind(tenant_id)
        .bind(subject)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| Error::store("read a data key", e))?;
        Ok(row.map(|r| {
            row_to_key(
                tenant_id.to_owned(),
                subject.to_owned(),
                r.get("key_id"),
                r.get("wrapped"),
            )
        }))
    }

    async fn destroy(&self, tenant_id: &str, subject: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE strata_keys.data_keys SET wrapped = NULL, destroyed_at = COALESCE(destroyed_at, now())
             WHERE tenant_id = $1 AND subject = $2 AND wrapped IS NOT NULL",
        )
        .bind(tenant_id)
        .bind(subject)
        .execute(&self.pool)
        .await
        .map_err(|e| Error::store("destroy a data key", e))?;
        // Every process that watches evicts it now, not when its cache's trust runs out.
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(DESTROYED_CHANNEL)
            .bind(announcement(tenant_id, subject))
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("announce a destroyed data key", e))?;
        // The old row version holds the wrapped bytes until a vacuum prunes it; they are useless
        // without the master key, and this makes their life short.
        if let Err(e) = sqlx::query("VACUUM strata_keys.data_keys")
            .execute(&self.pool)
            .await
        {
            tracing::warn!(error = %e, "could not vacuum strata_keys.data_keys after a destroy");
        }
        Ok(done.rows_affected() > 0)
    }

    async fn watch_destroyed(&self) -> Result<Option<DestroyedKeys>> {
        let mut listener = PgListener::connect_with(&self.pool)
            .await
            .map_err(|e| Error::store("listen for destroyed keys", e))?;
        listener
            .listen(DESTROYED_CHANNEL)
            .await
            .map_err(|e| Error::store("listen for destroyed keys", e))?;
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(async move {
            while !tx.is_closed() {
                let item = match listener.try_recv().await {
                    Ok(Some(n)) => announced(n.payload()),
                    // The connection was lost (the next call reconnects): some may be missed.
                    Ok(None) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for destroyed keys failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        None
                    }
                };
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        });
        Ok(Some(rx))
    }

    async fn remove(&self, tenant_id: &str, subject: &str) -> Result<bool> {
        let destroyed = self.destroy(tenant_id, subject).await?;
        sqlx::query("DELETE FROM strata_keys.data_keys WHERE tenant_id = $1 AND subject = $2")
            .bind(tenant_id)
            .bind(subject)
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("remove a data key", e))?;
        Ok(destroyed)
    }

    async fn record_forget(&self, entry: &ForgetEntry) -> Result<()> {
        let placeholders = ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8"];
        bind_audit(
            sqlx::query(&upsert_audit("strata_keys.", placeholders)),
            entry,
        )
        .execute(&self.pool)
        .await
        .map_err(|e| Error::store("write the forget audit", e))?;
        Ok(())
    }

    async fn forgets(&self, pending_only: bool) -> Result<Vec<ForgetEntry>> {
        let filter = if pending_only {
            "WHERE completed_at IS NULL"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "SELECT {AUDIT_COLUMNS} FROM strata_keys.forget_audit {filter} ORDER BY requested_at, forget_id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| Error::store("read the forget audit", e))?;
        Ok(rows.iter().map(audit_row).collect())
    }

    async fn sealing(&self) -> Result<Option<Sealing>> {
        let row = sqlx::query(&self.sql.read)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| Error::store("read the sealing setting", e))?;
        Ok(row.as_ref().map(sealing_row))
    }

    async fn settle_sealing(&self, on: bool) -> Result<Sealing> {
        self.write_sealing(&self.sql.settle, on).await
    }

    async fn set_sealing(&self, on: bool) -> Result<Sealing> {
        self.write_sealing(&self.sql.set, on).await
    }

    async fn has_keys(&self) -> Result<bool> {
        let row = sqlx::query(&self.sql.has_keys)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| Error::store("look for data keys", e))?;
        Ok(row.get::<bool, _>("any_key"))
    }
}

impl PgKeyStore {
    async fn write_sealing(&self, statement: &str, on: bool) -> Result<Sealing> {
        sqlx::query(statement)
            .bind(on_off(on))
            .bind(Utc::now().to_rfc3339())
            .execute(&self.pool)
            .await
            .map_err(|e| Error::store("record the sealing setting", e))?;
        self.sealing().await?.ok_or(Error::Vanished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_reads_back_whatever_the_ids_hold() {
        for (tenant, subject) in [("acme", "session:s-1"), ("a:b", "session:x:y"), ("", "")] {
            let said = announcement(tenant, subject);
            assert_eq!(
                announced(&said),
                Some((tenant.to_owned(), subject.to_owned()))
            );
        }
        assert_eq!(announced("9:short"), None);
        assert_eq!(announced("nonsense"), None);
    }
}
