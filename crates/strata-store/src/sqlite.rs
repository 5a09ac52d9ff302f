//! The embedded projection store: SQLite through `sqlx`, WAL mode, one writer.
//!
//! Limits, stated: one process writes a database at a time (the data directory lock enforces it
//! for Strata's own processes); readers in that process run concurrently with the writer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool, Transaction};
use strata_core::assembly::Snapshot;
use strata_core::payload::PrivacyClass;
use strata_core::projection::{Change, SessionFold, ToolCallRow, ToolResultRow, ToolStatus};

use crate::common::{self, Dialect, INSERT_CHUNK};
use crate::{
    ApiKeyInfo, BranchHead, Error, Offsets, ProjectionBatch, ProjectionStore, Result,
    SessionForgotten, SessionSummary,
};

const DIALECT: Dialect = Dialect {
    stored_text: common::verbatim,
    insertion_order: "rowid",
};

/// The index `open_bulk` leaves out of a set it builds from scratch, as the migration creates it.
const EVENTS_BY_ID: &str =
    "CREATE UNIQUE INDEX IF NOT EXISTS events_by_id ON events (tenant_id, event_id)";

/// A tool call to insert, with what the same batch says about its outcome.
struct CallRow {
    call: ToolCallRow,
    status: ToolStatus,
    result: Option<ToolResultRow>,
}

/// Where a change of a batch goes (see [`SqliteStore::write_changes`]).
#[derive(Clone, Copy)]
enum Slot {
    /// Into the bulk insert of its table.
    Insert,
    /// Into the insert of the tool call at this index of the batch's calls.
    Call(usize),
    /// Its own statement, after the inserts.
    Update,
}

/// SQLite-backed projections.
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The database file, as given to the constructor.
    path: String,
    fail_next_commit: AtomicBool,
}

/// How a [`SqliteStore`] trades durability for speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// WAL + `synchronous=NORMAL`: a committed batch survives a process crash (the live set).
    Normal,
    /// WAL + `synchronous=OFF` and a large page cache, for a set built from the log that no
    /// reader uses yet ([`SqliteStore::open_bulk`]).
    Bulk,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub async fn open(path: &str) -> Result<Self> {
        Self::open_with(path, Durability::Normal).await
    }

    /// Opens (creating and migrating when needed) a database that is being built from the log
    /// and that no reader uses yet (a rebuild's new set): `synchronous=OFF` (SQLite never
    /// fsyncs), a 256 MiB page cache, temporary tables in memory.
    ///
    /// Still WAL, so a committed batch survives a crash of the process (its writes are in the
    /// operating system's cache; SQLite documents `synchronous=OFF` as safe against application
    /// crashes). After a crash of the operating system or a power loss the file may be torn:
    /// whoever resumes writing it must know whether the machine restarted meanwhile (a rebuild
    /// starts the set over then). Call [`SqliteStore::make_durable`] before readers use it: a
    /// set opened empty also gets its `events_by_id` index only then.
    pub async fn open_bulk(path: &str) -> Result<Self> {
        Self::open_with(path, Durability::Bulk).await
    }

    async fn open_with(path: &str, durability: Durability) -> Result<Self> {
        let mut options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        options = match durability {
            // WAL + NORMAL: a committed transaction survives a process crash; the log, not the
            // projection, is the source of truth after power loss (rebuildable).
            Durability::Normal => options.synchronous(SqliteSynchronous::Normal),
            Durability::Bulk => options
                .synchronous(SqliteSynchronous::Off)
                // Negative: KiB. The rebuild's one writer keeps the hot b-tree pages (indexes
                // of a growing set) in memory instead of re-reading them from the OS.
                .pragma("cache_size", "-262144")
                .pragma("temp_store", "MEMORY"),
        };
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        if durability == Durability::Bulk {
            // A set built from scratch gets `events_by_id` once, sorted, when it is made durable,
            // instead of one b-tree insert per event row at a random place (event ids do not
            // arrive in their order). Nothing reads it meanwhile: the fold checks duplicates in
            // memory and asks the store only when it resumes a set that has events, and such
            // a set gets the index back here before the first question.
            let empty = sqlx::query("SELECT 1 FROM events LIMIT 1")
                .fetch_optional(&pool)
                .await?
                .is_none();
            let sql = if empty {
                "DROP INDEX IF EXISTS events_by_id"
            } else {
                EVENTS_BY_ID
            };
            sqlx::query(sql).execute(&pool).await?;
        }
        Ok(Self {
            pool,
            path: path.to_owned(),
            fail_next_commit: AtomicBool::new(false),
        })
    }

    /// Makes everything committed durable: moves the WAL into the database file and fsyncs it.
    /// A set opened with [`SqliteStore::open_bulk`] is durable only after this.
    pub async fn make_durable(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        // Built last by `open_bulk` on a fresh set.
        sqlx::query(EVENTS_BY_ID).execute(&mut *conn).await?;
        // FULL for this connection: the checkpoint below then fsyncs what it writes.
        sqlx::query("PRAGMA synchronous = FULL")
            .execute(&mut *conn)
            .await?;
        let row = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut *conn)
            .await?;
        // (busy, WAL frames, frames checkpointed): busy means a reader held the WAL open.
        if row.get::<i64, _>(0) != 0 {
            return Err(Error::InUse {
                path: self.path.clone(),
            });
        }
        // Belt and braces: the file itself, whatever SQLite decided to sync.
        let path = self.path.clone();
        let synced = tokio::task::spawn_blocking(move || std::fs::File::open(&path)?.sync_all())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(format!("the fsync task failed: {e}"))));
        synced.map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Test support: the next [`ProjectionStore::commit_batch`] writes every row and then fails
    /// before committing, as a crash between write and commit would.
    pub fn fail_next_commit(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    /// Writes a batch's row changes. The rows are moved into the statements' arguments, not
    /// copied (`sqlx` would clone every bound `&String`).
    async fn write_changes(tx: &mut Transaction<'_, Sqlite>, changes: Vec<Change>) -> Result<()> {
        // Where each change goes, decided on borrowed keys first.
        let mut slots = Vec::with_capacity(changes.len());
        {
            let mut calls = 0;
            let mut call_index: HashMap<(&str, &str, &str), usize> = HashMap::new();
            for c in &changes {
                slots.push(match c {
                    Change::Event(_) | Change::Message(_) => Slot::Insert,
                    Change::ToolCall(t) => {
                        call_index.insert((&t.tenant_id, &t.session_id, &t.tool_call_id), calls);
                        calls += 1;
                        Slot::Insert
                    }
                    // A call whose request is in this batch gets its result (or status) in its
                    // insert instead of one UPDATE round trip each: the row ends up the same,
                    // since updates run after the inserts, in fold order, and touch that row
                    // only.
                    Change::ToolResult(r) => call_index
                        .get(&(&*r.tenant_id, &*r.session_id, &*r.tool_call_id))
                        .map_or(Slot::Update, |&i| Slot::Call(i)),
                    Change::ToolStatus {
                        tenant_id,
                        session_id,
                        tool_call_id,
                        ..
                    } => call_index
                        .get(&(&**tenant_id, &**session_id, &**tool_call_id))
                        .map_or(Slot::Update, |&i| Slot::Call(i)),
                    _ => Slot::Update,
                });
            }
        }
        let mut events = Vec::new();
        let mut messages = Vec::new();
        let mut calls: Vec<CallRow> = Vec::new();
        let mut updates = Vec::new();
        for (c, slot) in changes.into_iter().zip(slots) {
            match (c, slot) {
                (Change::Event(e), Slot::Insert) => events.push(e),
                (Change::Message(m), Slot::Insert) => messages.push(m),
                (Change::ToolCall(t), Slot::Insert) => calls.push(CallRow {
                    call: t,
                    status: ToolStatus::Pending,
                    result: None,
                }),
                (Change::ToolResult(r), Slot::Call(i)) => {
                    calls[i].status = r.status;
                    calls[i].result = Some(r);
                }
                (Change::ToolStatus { status, .. }, Slot::Call(i)) => calls[i].status = status,
                (other, _) => updates.push(other),
            }
        }
        let mut events = events.into_iter().peekable();
        while events.peek().is_some() {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO events (tenant_id, session_id, seq, event_id, branch_id, \
                 participant_id, event_type, timestamp, log_partition, log_offset, \
                 transcript_tokens, body) ",
            );
            q.push_values(events.by_ref().take(INSERT_CHUNK), |mut b, e| {
                b.push_bind(e.tenant_id)
                    .push_bind(e.session_id)
                    .push_bind(e.seq as i64)
                    .push_bind(e.event_id)
                    .push_bind(e.branch_id)
                    .push_bind(e.participant_id)
                    .push_bind(e.event_type)
                    .push_bind(e.timestamp)
                    .push_bind(i64::from(e.position.partition))
                    .push_bind(e.position.offset as i64)
                    .push_bind(e.transcript_tokens as i64)
                    .push_bind(e.json);
            });
            q.build().execute(&mut **tx).await?;
        }
        let mut messages = messages.into_iter().peekable();
        while messages.peek().is_some() {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO messages (tenant_id, session_id, seq, branch_id, event_id, \
                 message_id, role, participant_id, text, tokens) ",
            );
            q.push_values(messages.by_ref().take(INSERT_CHUNK), |mut b, m| {
                b.push_bind(m.tenant_id)
                    .push_bind(m.session_id)
                    .push_bind(m.seq as i64)
                    .push_bind(m.branch_id)
                    .push_bind(m.event_id)
                    .push_bind(m.message_id)
                    .push_bind(m.role)
                    .push_bind(m.participant_id)
                    .push_bind(m.text)
                    .push_bind(m.tokens as i64);
            });
            q.build().execute(&mut **tx).await?;
        }
        // 24 binds a row: 400 rows stay well under SQLite's 32,766 variables.
        let mut calls = calls.into_iter().peekable();
        while calls.peek().is_some() {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO tool_calls (tenant_id, session_id, tool_call_id, branch_id, name, \
                 args, participant_id, request_event_id, request_seq, message_id, call_tokens, \
                 status, result_event_id, result_seq, output, output_ref, output_preview, \
                 output_sha256, output_bytes, output_tokens, preview_tokens, error, retryable, \
                 privacy_class) ",
            );
            q.push_values(calls.by_ref().take(INSERT_CHUNK), |mut b, row| {
                let t = row.call;
                let status = row.status.as_str();
                // Without a result: the columns' defaults (NULL, 0, false).
                b.push_bind(t.tenant_id)
                    .push_bind(t.session_id)
                    .push_bind(t.tool_call_id)
                    .push_bind(t.branch_id)
                    .push_bind(t.name)
                    .push_bind(t.args)
                    .push_bind(t.participant_id)
                    .push_bind(t.request_event_id)
                    .push_bind(t.request_seq as i64)
                    .push_bind(t.message_id)
                    .push_bind(t.call_tokens as i64)
                    .push_bind(status);
                match row.result {
                    Some(r) => b
                        .push_bind(Some(r.result_event_id))
                        .push_bind(Some(r.result_seq as i64))
                        .push_bind(r.output)
                        .push_bind(r.output_ref)
                        .push_bind(r.output_preview)
                        .push_bind(r.output_sha256)
                        .push_bind(r.output_bytes.map(|n| n as i64))
                        .push_bind(r.output_tokens as i64)
                        .push_bind(r.preview_tokens as i64)
                        .push_bind(r.error)
                        .push_bind(r.retryable)
                        .push_bind(r.privacy_class.map(PrivacyClass::as_str)),
                    None => b
                        .push_bind(None::<String>)
                        .push_bind(None::<i64>)
                        .push_bind(None::<String>)
                        .push_bind(None::<String>)
                        .push_bind(None::<String>)
                        .push_bind(None::<String>)
                        .push_bind(None::<i64>)
                        .push_bind(0_i64)
                        .push_bind(0_i64)
                        .push_bind(None::<String>)
                        .push_bind(false)
                        .push_bind(None::<&'static str>),
                };
            });
            q.build().execute(&mut **tx).await?;
        }
        // Updates run after the inserts: a result always follows its call in the fold's order.
        for c in &updates {
            Self::write_update(tx, c).await?;
        }
        Ok(())
    }

    async fn write_update(tx: &mut Transaction<'_, Sqlite>, change: &Change) -> Result<()> {
        match change {
            Change::Session(s) => {
                sqlx::query(
                    "INSERT INTO sessions (tenant_id, session_id, started_event_id, provider, \
                     model, context_window_tokens, reserved_output_tokens, system_prompt, \
                     system_prompt_tokens, tools, tools_tokens, parent_session_id) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (tenant_id, session_id) DO NOTHING",
                )
                .bind(&s.tenant_id)
                .bind(&s.session_id)
                .bind(&s.started_event_id)
                .bind(&s.provider)
                .bind(&s.model)
                .bind(i64::from(s.context_window_tokens))
                .bind(i64::from(s.reserved_output_tokens))
                .bind(&s.system_prompt)
                .bind(s.system_prompt_tokens as i64)
                .bind(serde_json::to_string(&s.tools).unwrap_or_else(|_| "[]".into()))
                .bind(s.tools_tokens as i64)
                .bind(&s.parent_session_id)
                .execute(&mut **tx)
                .await?;
            }
            Change::Branch(b) => {
                sqlx::query(
                    "INSERT INTO branches (tenant_id, session_id, branch_id, parent_branch_id, \
                     fork_event_id, kind, created_event_id) VALUES (?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (tenant_id, session_id, branch_id) DO NOTHING",
                )
                .bind(&b.tenant_id)
                .bind(&b.session_id)
                .bind(&b.branch_id)
                .bind(&b.parent_branch_id)
                .bind(&b.fork_event_id)
                .bind(&b.kind)
                .bind(&b.created_event_id)
                .execute(&mut **tx)
                .await?;
            }
            Change::ToolResult(r) => {
                sqlx::query(
                    "UPDATE tool_calls SET status = ?, result_event_id = ?, result_seq = ?, \
                     output = ?, output_ref = ?, output_preview = ?, output_sha256 = ?, \
                     output_bytes = ?, output_tokens = ?, preview_tokens = ?, error = ?, \
                     retryable = ?, privacy_class = ? \
                     WHERE tenant_id = ? AND session_id = ? AND tool_call_id = ?",
                )
                .bind(r.status.as_str())
                .bind(&r.result_event_id)
                .bind(r.result_seq as i64)
                .bind(&r.output)
                .bind(&r.output_ref)
                .bind(&r.output_preview)
                .bind(&r.output_sha256)
                .bind(r.output_bytes.map(|b| b as i64))
                .bind(r.output_tokens as i64)
                .bind(r.preview_tokens as i64)
                .bind(&r.error)
                .bind(r.retryable)
                .bind(
                    r.privacy_class
                        .map(strata_core::payload::PrivacyClass::as_str),
                )
                .bind(&r.tenant_id)
                .bind(&r.session_id)
                .bind(&r.tool_call_id)
                .execute(&mut **tx)
                .await?;
            }
            Change::ToolStatus {
                tenant_id,
                session_id,
                tool_call_id,
                status,
            } => {
                sqlx::query(
                    "UPDATE tool_calls SET status = ? \
                     WHERE tenant_id = ? AND session_id = ? AND tool_call_id = ?",
                )
                .bind(status.as_str())
                .bind(tenant_id)
                .bind(session_id)
                .bind(tool_call_id)
                .execute(&mut **tx)
                .await?;
            }
            Change::Artifact(a) => {
                sqlx::query(
                    "INSERT INTO artifacts (tenant_id, artifact_id, session_id, uri, sha256, \
                     bytes, kind, source_event_id, privacy_class, owner_participant) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (tenant_id, artifact_id, source_event_id) DO NOTHING",
                )
                .bind(&a.tenant_id)
                .bind(&a.artifact_id)
                .bind(&a.session_id)
                .bind(&a.uri)
                .bind(&a.sha256)
                .bind(a.bytes as i64)
                .bind(&a.kind)
                .bind(&a.source_event_id)
                .bind(
                    a.privacy_class
                        .map(strata_core::payload::PrivacyClass::as_str),
                )
                .bind(&a.owner_participant)
                .execute(&mut **tx)
                .await?;
            }
            Change::Memory(d) | Change::Compaction(d) | Change::Assembly(d) => {
                let sql = match change {
                    Change::Memory(_) => {
                        "INSERT INTO memories (tenant_id, memory_id, session_id, branch_id, \
                         event_id, seq, record) VALUES (?, ?, ?, ?, ?, ?, ?) \
                         ON CONFLICT (tenant_id, memory_id) DO NOTHING"
                    }
                    Change::Compaction(_) => {
                        "INSERT INTO compactions (tenant_id, compaction_id, session_id, \
                         branch_id, event_id, seq, record) VALUES (?, ?, ?, ?, ?, ?, ?) \
                         ON CONFLICT (tenant_id, compaction_id) DO NOTHING"
                    }
                    _ => {
                        "INSERT INTO assemblies (tenant_id, assembly_id, session_id, branch_id, \
                         event_id, seq, record) VALUES (?, ?, ?, ?, ?, ?, ?) \
                         ON CONFLICT (tenant_id, assembly_id) DO NOTHING"
                    }
                };
                sqlx::query(sql)
                    .bind(&d.tenant_id)
                    .bind(&d.id)
                    .bind(&d.session_id)
                    .bind(&d.branch_id)
                    .bind(&d.event_id)
                    .bind(d.seq as i64)
                    .bind(d.record.to_string())
                    .execute(&mut **tx)
                    .await?;
            }
            Change::MemorySuperseded {
                tenant_id,
                memory_id,
                superseded_by,
            } => {
                sqlx::query(
                    "UPDATE memories SET superseded_by = ? WHERE tenant_id = ? AND memory_id = ?",
                )
                .bind(superseded_by)
                .bind(tenant_id)
                .bind(memory_id)
                .execute(&mut **tx)
                .await?;
            }
            Change::Event(_) | Change::Message(_) | Change::ToolCall(_) => {
                unreachable!("bulk-inserted by write_changes")
            }
            _ => {}
        }
        Ok(())
    }
}

#[async_trait]
impl ProjectionStore for SqliteStore {
    async fn offsets(&self, group: &str) -> Result<Offsets> {
        let rows =
            sqlx::query("SELECT partition, next_offset FROM consumer_offsets WHERE group_id = ?")
                .bind(group)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0) as u32, r.get::<i64, _>(1) as u64))
            .collect())
    }

    #[tracing::instrument(name = "store.sqlite.commit_batch", skip_all, fields(changes = batch.changes.len()))]
    async fn commit_batch(&self, batch: ProjectionBatch) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let ProjectionBatch {
            group,
            changes,
            folds,
            offsets,
        } = batch;
        Self::write_changes(&mut tx, changes).await?;
        for fold in &folds {
            let json = common::fold_json(fold)?;
            sqlx::query(
                "INSERT INTO session_folds (tenant_id, session_id, head_seq, event_count, fold) \
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, session_id) DO UPDATE SET \
                 head_seq = excluded.head_seq, event_count = excluded.event_count, \
                 fold = excluded.fold",
            )
            .bind(&fold.tenant_id)
            .bind(&fold.session_id)
            .bind(fold.head_seq as i64)
            .bind(fold.event_count as i64)
            .bind(json)
            .execute(&mut *tx)
            .await?;
        }
        for (partition, offset) in &offsets {
            sqlx::query(
                "INSERT INTO consumer_offsets (group_id, partition, next_offset) VALUES (?, ?, ?) \
                 ON CONFLICT (group_id, partition) DO UPDATE SET next_offset = excluded.next_offset",
            )
            .bind(&group)
            .bind(i64::from(*partition))
            .bind(*offset as i64)
            .execute(&mut *tx)
            .await?;
        }
        if self.fail_next_commit.swap(false, Ordering::SeqCst) {
            // Dropping the transaction rolls it back, exactly as a crash here would.
            return Err(Error::Injected);
        }
        tx.commit().await?;
        Ok(())
    }

    async fn session_fold(&self, tenant: &str, session: &str) -> Result<Option<SessionFold>> {
        let row =
            sqlx::query("SELECT fold FROM session_folds WHERE tenant_id = ? AND session_id = ?")
                .bind(tenant)
                .bind(session)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| common::parse_fold(r.get::<&str, _>(0)))
            .transpose()
    }

    async fn projected_event_ids(
        &self,
        tenant: &str,
        event_ids: &[String],
    ) -> Result<HashSet<String>> {
        let mut found = HashSet::new();
        for chunk in event_ids.chunks(INSERT_CHUNK) {
            let mut q =
                QueryBuilder::<Sqlite>::new("SELECT event_id FROM events WHERE tenant_id = ");
            q.push_bind(tenant).push(" AND event_id IN (");
            let mut sep = q.separated(", ");
            for id in chunk {
                sep.push_bind(id);
            }
            q.push(")");
            for row in q.build().fetch_all(&self.pool).await? {
                found.insert(row.get::<String, _>(0));
            }
        }
        Ok(found)
    }

    async fn event_seq(&self, tenant: &str, session: &str, event_id: &str) -> Result<Option<u64>> {
        let row = sqlx::query(
            "SELECT seq FROM events WHERE tenant_id = ? AND event_id = ? AND session_id = ?",
        )
        .bind(tenant)
        .bind(event_id)
        .bind(session)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.get::<i64, _>(0) as u64))
    }

    async fn session_provider(&self, tenant: &str, session: &str) -> Result<Option<String>> {
        let row =
            sqlx::query("SELECT provider FROM sessions WHERE tenant_id = ? AND session_id = ?")
                .bind(tenant)
                .bind(session)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|r| r.get::<Option<String>, _>(0)))
    }

    async fn branch_heads(&self, tenant: &str, session: &str) -> Result<Vec<BranchHead>> {
        let rows = sqlx::query(
            // The head event's timestamp, as `sessions_listing` has it: timestamps need not grow
            // with seq, and text MAX misorders fractional seconds.
            "SELECT b.branch_id, b.head, b.n, (SELECT e.timestamp FROM events e \
               WHERE e.tenant_id = ?1 AND e.session_id = ?2 AND e.seq = b.head) \
             FROM (SELECT branch_id, MAX(seq) AS head, COUNT(*) AS n FROM events \
               WHERE tenant_id = ?1 AND session_id = ?2 GROUP BY branch_id) b \
             ORDER BY b.branch_id",
        )
        .bind(tenant)
        .bind(session)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| BranchHead {
                branch_id: r.get(0),
                head_seq: r.get::<i64, _>(1) as u64,
                events: r.get::<i64, _>(2) as u64,
                last_event_at: r.get(3),
            })
            .collect())
    }

    #[tracing::instrument(name = "store.sqlite.snapshot", skip(self))]
    async fn snapshot(
        &self,
        tenant: &str,
        session: &str,
        branch: &str,
        participant: Option<&str>,
        window: u32,
    ) -> Result<Option<Snapshot>> {
        let Some(fold) = self.session_fold(tenant, session).await? else {
            return Ok(None);
        };
        common::snapshot(
            &self.pool,
            DIALECT,
            fold,
            tenant,
            session,
            branch,
            participant,
            window,
        )
        .await
    }

    async fn events(
        &self,
        tenant: &str,
        session: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Value>> {
        let rows = sqlx::query(
            "SELECT body FROM events WHERE tenant_id = ? AND session_id = ? AND seq > ? \
             ORDER BY seq LIMIT ?",
        )
        .bind(tenant)
        .bind(session)
        .bind(after_seq as i64)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| common::parse_json(r.get::<&str, _>(0), "event body"))
            .collect()
    }

    async fn assembly(&self, tenant: &str, assembly_id: &str) -> Result<Option<Value>> {
        let row =
            sqlx::query("SELECT record FROM assemblies WHERE tenant_id = ? AND assembly_id = ?")
                .bind(tenant)
                .bind(assembly_id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| common::parse_json(r.get::<&str, _>(0), "assembly record"))
            .transpose()
    }

    async fn artifact_classes(
        &self,
        tenant: &str,
        sha256: &str,
    ) -> Result<Vec<Option<PrivacyClass>>> {
        let rows =
            sqlx::query("SELECT privacy_class FROM artifacts WHERE tenant_id = ? AND sha256 = ?")
                .bind(tenant)
                .bind(sha256)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| common::parse_privacy_class(r.get::<Option<String>, _>(0)))
            .collect())
    }

    async fn withheld_results(
        &self,
        tenant: &str,
        session: &str,
        after_seq: u64,
        through_seq: u64,
    ) -> Result<BTreeMap<String, PrivacyClass>> {
        let rows = sqlx::query(
            "SELECT result_event_id, privacy_class FROM tool_calls \
             WHERE tenant_id = ? AND session_id = ? AND result_seq > ? AND result_seq <= ? \
             AND privacy_class IN ('confidential', 'restricted')",
        )
        .bind(tenant)
        .bind(session)
        .bind(after_seq as i64)
        .bind(through_seq as i64)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let class = common::parse_privacy_class(r.get::<Option<String>, _>(1))?;
                Some((r.get::<Option<String>, _>(0)?, class))
            })
            .collect())
    }

    async fn sessions(&self, tenant: &str) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT session_id, head_seq, event_count FROM session_folds WHERE tenant_id = ? \
             ORDER BY session_id",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(session_summary).collect())
    }

    async fn sessions_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT session_id, head_seq, event_count FROM session_folds WHERE tenant_id = ? \
             AND session_id > ? ORDER BY session_id LIMIT ?",
        )
        .bind(tenant)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(session_summary).collect())
    }

    async fn sessions_listing(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
        matching: Option<&str>,
    ) -> Result<Vec<crate::SessionListing>> {
        let rows = sqlx::query(
            "SELECT f.session_id, f.head_seq, f.event_count, f.fold, \
             (SELECT e.timestamp FROM events e WHERE e.tenant_id = f.tenant_id \
               AND e.session_id = f.session_id AND e.seq = f.head_seq), \
             (SELECT s.model FROM sessions s WHERE s.tenant_id = f.tenant_id \
               AND s.session_id = f.session_id), \
             (SELECT group_concat(p, char(10)) FROM (SELECT DISTINCT e.participant_id AS p \
               FROM events e WHERE e.tenant_id = f.tenant_id AND e.session_id = f.session_id)) \
             FROM session_folds f WHERE f.tenant_id = ?1 AND f.session_id > ?2 \
             AND (?3 IS NULL OR instr(f.session_id, ?3) > 0 \
               OR EXISTS (SELECT 1 FROM sessions s WHERE s.tenant_id = f.tenant_id \
                 AND s.session_id = f.session_id AND instr(s.model, ?3) > 0) \
               OR EXISTS (SELECT 1 FROM events e WHERE e.tenant_id = f.tenant_id \
                 AND e.session_id = f.session_id AND instr(e.participant_id, ?3) > 0)) \
             ORDER BY f.session_id LIMIT ?4",
        )
        .bind(tenant)
        .bind(after.unwrap_or(""))
        .bind(matching)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                common::session_listing(
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get::<&str, _>(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                )
            })
            .collect()
    }

    async fn tenant_for_key(&self, key_sha256: &str) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT tenant_id FROM api_keys WHERE key_sha256 = ? AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > ?)",
        )
        .bind(key_sha256)
        .bind(crate::now_utc())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn put_api_key(
        &self,
        key_sha256: &str,
        tenant: &str,
        label: &str,
        expires_at: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_keys (key_sha256, tenant_id, label, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (key_sha256) DO NOTHING",
        )
        .bind(key_sha256)
        .bind(tenant)
        .bind(label)
        .bind(crate::now_utc())
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyInfo>> {
        let row = sqlx::query("SELECT key_sha256, tenant_id, label, created_at, expires_at, revoked_at FROM api_keys WHERE key_sha256 = ?")
            .bind(key_sha256)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| key_info(&r)))
    }

    async fn api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyInfo>> {
        let rows = sqlx::query(
            "SELECT key_sha256, tenant_id, label, created_at, expires_at, revoked_at FROM api_keys WHERE ?1 IS NULL OR tenant_id = ?1 \
             ORDER BY created_at, key_sha256",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(key_info).collect())
    }

    async fn revoke_api_key(&self, key_id: &str, now: &str) -> Result<bool> {
        let Some(prefix) = ApiKeyInfo::hash_prefix(key_id) else {
            return Ok(false);
        };
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = ? WHERE substr(key_sha256, 1, 16) = ? \
             AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(prefix)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn fingerprint(&self) -> Result<BTreeMap<String, (u64, String)>> {
        let mut out = BTreeMap::new();
        for table in common::FINGERPRINT_TABLES {
            let cols: Vec<String> =
                sqlx::query(&format!("SELECT name FROM pragma_table_info('{table}')"))
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
            let expr = cols
                .iter()
                .map(|c| format!("quote({c})"))
                .collect::<Vec<_>>()
                .join(" || '|' || ");
            let rows = sqlx::query(&format!("SELECT {expr} FROM {table} ORDER BY 1"))
                .fetch_all(&self.pool)
                .await?;
            let lines: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            out.insert((*table).to_owned(), common::fingerprint_table(lines));
        }
        Ok(out)
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT tenant_id FROM session_folds ORDER BY tenant_id")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn session_log_positions(&self, tenant: &str, session: &str) -> Result<Vec<(u32, u64)>> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT log_partition, log_offset FROM events WHERE tenant_id = ? AND session_id = ? ORDER BY seq",
        )
        .bind(tenant)
        .bind(session)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(p, o)| {
                (
                    u32::try_from(p).unwrap_or(u32::MAX),
                    u64::try_from(o).unwrap_or(0),
                )
            })
            .collect())
    }

    async fn forget_session(&self, tenant: &str, session: &str) -> Result<SessionForgotten> {
        let mut tx = self.pool.begin().await?;
        let referred: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT sha256 FROM artifacts WHERE tenant_id = ? AND session_id = ?",
        )
        .bind(tenant)
        .bind(session)
        .fetch_all(&mut *tx)
        .await?;
        let mut forgotten = SessionForgotten::default();
        for table in crate::SESSION_TABLES {
            let done = sqlx::query(&format!(
                "DELETE FROM {table} WHERE tenant_id = ? AND session_id = ?"
            ))
            .bind(tenant)
            .bind(session)
            .execute(&mut *tx)
            .await?;
            forgotten
                .rows
                .insert(table.to_owned(), done.rows_affected());
        }
        for sha256 in referred {
            let still: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM artifacts WHERE tenant_id = ? AND sha256 = ? LIMIT 1",
            )
            .bind(tenant)
            .bind(&sha256)
            .fetch_optional(&mut *tx)
            .await?;
            if still.is_none() {
                forgotten.orphaned_artifacts.push(sha256);
            }
        }
        tx.commit().await?;
        // Deleted rows leave their bytes in free pages and in the WAL: rewrite the file and
        // truncate the WAL so no copy of the content is left on disk.
        sqlx::query("VACUUM").execute(&self.pool).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.pool)
            .await?;
        Ok(forgotten)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// A `session_id, head_seq, event_count` row.
fn session_summary(r: &sqlx::sqlite::SqliteRow) -> SessionSummary {
    SessionSummary {
        session_id: r.get(0),
        head_seq: r.get::<i64, _>(1) as u64,
        event_count: r.get::<i64, _>(2) as u64,
    }
}

fn key_info(r: &sqlx::sqlite::SqliteRow) -> ApiKeyInfo {
    let sha: String = r.get(0);
    ApiKeyInfo {
        key_id: ApiKeyInfo::id_of(&sha),
        tenant_id: r.get(1),
        label: r.get(2),
        created_at: r.get(3),
        expires_at: r.get(4),
        revoked_at: r.get(5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn index_sql(store: &SqliteStore) -> Option<String> {
        sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'events_by_id'")
            .fetch_optional(&store.pool)
            .await
            .expect("sqlite_master")
    }

    #[tokio::test]
    async fn a_bulk_set_gets_events_by_id_when_made_durable_as_the_migration_writes_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name).display().to_string();
        let live = SqliteStore::open(&path("live.db")).await.expect("open");
        let expected = index_sql(&live).await;
        assert!(expected.is_some());
        let bulk = SqliteStore::open_bulk(&path("bulk.db"))
            .await
            .expect("open");
        assert_eq!(
            index_sql(&bulk).await,
            None,
            "left out while the set is built"
        );
        bulk.make_durable().await.expect("durable");
        assert_eq!(index_sql(&bulk).await, expected);
        bulk.make_durable().await.expect("twice is fine");
        // A set that has events gets it back when reopened in bulk (a resumed rebuild asks it).
        let resumed = SqliteStore::open_bulk(&path("resumed.db"))
            .await
            .expect("open");
        sqlx::query(
            "INSERT INTO events (tenant_id, session_id, seq, event_id, branch_id, participant_id, \
             event_type, timestamp, log_partition, log_offset, transcript_tokens, body) \
             VALUES ('t', 's', 1, 'e', 'main', 'p', 'FileRead', 'x', 0, 0, 0, '{}')",
        )
        .execute(&resumed.pool)
        .await
        .expect("insert");
        drop(resumed);
        let resumed = SqliteStore::open_bulk(&path("resumed.db"))
            .await
            .expect("reopen");
        assert_eq!(index_sql(&resumed).await, expected);
    }
}
