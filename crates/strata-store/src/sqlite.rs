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
use strata_core::assembly::{Snapshot, TimelineMessage, ToolPair};
use strata_core::projection::{Change, SessionFold, ToolStatus};

use crate::{Error, Offsets, ProjectionBatch, ProjectionStore, Result, SessionSummary};

/// Rows per multi-row INSERT (well under SQLite's bound-parameter limit).
const INSERT_CHUNK: usize = 400;

/// SQLite-backed projections.
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    fail_next_commit: AtomicBool,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub async fn open(path: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL: a committed transaction survives a process crash; the log, not the
            // projection, is the source of truth after power loss (rebuildable).
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        Ok(Self {
            pool,
            fail_next_commit: AtomicBool::new(false),
        })
    }

    /// Test support: the next [`ProjectionStore::commit_batch`] writes every row and then fails
    /// before committing, as a crash between write and commit would.
    pub fn fail_next_commit(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    async fn write_changes(tx: &mut Transaction<'_, Sqlite>, changes: &[Change]) -> Result<()> {
        let mut events = Vec::new();
        let mut messages = Vec::new();
        let mut calls = Vec::new();
        let mut updates = Vec::new();
        for c in changes {
            match c {
                Change::Event(e) => events.push(e),
                Change::Message(m) => messages.push(m),
                Change::ToolCall(t) => calls.push(t),
                other => updates.push(other),
            }
        }
        for chunk in events.chunks(INSERT_CHUNK) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO events (tenant_id, session_id, seq, event_id, branch_id, \
                 participant_id, event_type, timestamp, log_partition, log_offset, \
                 transcript_tokens, body) ",
            );
            q.push_values(chunk, |mut b, e| {
                b.push_bind(&e.tenant_id)
                    .push_bind(&e.session_id)
                    .push_bind(e.seq as i64)
                    .push_bind(&e.event_id)
                    .push_bind(&e.branch_id)
                    .push_bind(&e.participant_id)
                    .push_bind(&e.event_type)
                    .push_bind(&e.timestamp)
                    .push_bind(i64::from(e.position.partition))
                    .push_bind(e.position.offset as i64)
                    .push_bind(e.transcript_tokens as i64)
                    .push_bind(&e.json);
            });
            q.build().execute(&mut **tx).await?;
        }
        for chunk in messages.chunks(INSERT_CHUNK) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO messages (tenant_id, session_id, seq, branch_id, event_id, \
                 message_id, role, participant_id, text, tokens) ",
            );
            q.push_values(chunk, |mut b, m| {
                b.push_bind(&m.tenant_id)
                    .push_bind(&m.session_id)
                    .push_bind(m.seq as i64)
                    .push_bind(&m.branch_id)
                    .push_bind(&m.event_id)
                    .push_bind(&m.message_id)
                    .push_bind(&m.role)
                    .push_bind(&m.participant_id)
                    .push_bind(&m.text)
                    .push_bind(m.tokens as i64);
            });
            q.build().execute(&mut **tx).await?;
        }
        for chunk in calls.chunks(INSERT_CHUNK) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO tool_calls (tenant_id, session_id, tool_call_id, branch_id, name, \
                 args, participant_id, request_event_id, request_seq, message_id, call_tokens, \
                 status) ",
            );
            q.push_values(chunk, |mut b, t| {
                b.push_bind(&t.tenant_id)
                    .push_bind(&t.session_id)
                    .push_bind(&t.tool_call_id)
                    .push_bind(&t.branch_id)
                    .push_bind(&t.name)
                    .push_bind(&t.args)
                    .push_bind(&t.participant_id)
                    .push_bind(&t.request_event_id)
                    .push_bind(t.request_seq as i64)
                    .push_bind(&t.message_id)
                    .push_bind(t.call_tokens as i64)
                    .push_bind(ToolStatus::Pending.as_str());
            });
            q.build().execute(&mut **tx).await?;
        }
        // Updates run after the inserts: a result always follows its call in the fold's order.
        for c in updates {
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
                .bind(r.privacy_class.map(privacy_str))
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
                .bind(a.privacy_class.map(privacy_str))
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

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds the parameters of a lineage clause: each branch, and its seq bound when it has one.
fn bind_lineage<'q>(mut q: SqliteQuery<'q>, lineage: &[(String, Option<u64>)]) -> SqliteQuery<'q> {
    for (branch, bound) in lineage {
        q = q.bind(branch.clone());
        if let Some(bound) = bound {
            q = q.bind(*bound as i64);
        }
    }
    q
}

fn privacy_str(p: strata_core::payload::PrivacyClass) -> &'static str {
    use strata_core::payload::PrivacyClass::*;
    match p {
        Public => "public",
        Internal => "internal",
        Confidential => "confidential",
        Restricted => "restricted",
    }
}

fn parse_privacy(s: Option<String>) -> Option<strata_core::payload::PrivacyClass> {
    s.and_then(|s| serde_json::from_value(Value::String(s)).ok())
}

fn parse_fold(json: &str) -> Result<SessionFold> {
    serde_json::from_str(json).map_err(|source| Error::Corrupt {
        what: "session fold".into(),
        source,
    })
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
        Self::write_changes(&mut tx, &batch.changes).await?;
        for fold in &batch.folds {
            let json = serde_json::to_string(fold).map_err(|source| Error::Corrupt {
                what: "session fold".into(),
                source,
            })?;
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
        for (partition, offset) in &batch.offsets {
            sqlx::query(
                "INSERT INTO consumer_offsets (group_id, partition, next_offset) VALUES (?, ?, ?) \
                 ON CONFLICT (group_id, partition) DO UPDATE SET next_offset = excluded.next_offset",
            )
            .bind(&batch.group)
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
        row.map(|r| parse_fold(r.get::<&str, _>(0))).transpose()
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
        let Some(branch_fold) = fold.branches.get(branch) else {
            return Ok(None);
        };
        // The lineage: this branch whole, then each ancestor up to the fork point.
        let mut lineage: Vec<(String, Option<u64>)> = vec![(branch.to_owned(), None)];
        let mut cursor = branch_fold;
        while let (Some(parent), Some(fork_seq)) = (&cursor.parent_branch_id, cursor.fork_seq) {
            let bound = match lineage.last() {
                Some((_, Some(b))) => (*b).min(fork_seq),
                _ => fork_seq,
            };
            lineage.push((parent.clone(), Some(bound)));
            match fold.branches.get(parent) {
                Some(p) if lineage.len() <= 64 => cursor = p,
                _ => break,
            }
        }
        let lineage_clause = |seq_column: &str| {
            let parts: Vec<String> = lineage
                .iter()
                .map(|(_, bound)| match bound {
                    Some(_) => format!("(branch_id = ? AND {seq_column} <= ?)"),
                    None => "(branch_id = ?)".to_owned(),
                })
                .collect();
            format!("({})", parts.join(" OR "))
        };
        let lineage_sql = lineage_clause("seq");
        let bind_lineage = |q| bind_lineage(q, &lineage);

        let session_row = sqlx::query(
            "SELECT started_event_id, model, context_window_tokens, reserved_output_tokens, \
             system_prompt, system_prompt_tokens, tools, tools_tokens \
             FROM sessions WHERE tenant_id = ? AND session_id = ?",
        )
        .bind(tenant)
        .bind(session)
        .fetch_optional(&self.pool)
        .await?;

        let sql = format!(
            "SELECT seq, event_id, message_id, role, participant_id, text, tokens FROM messages \
             WHERE tenant_id = ? AND session_id = ? AND {lineage_sql} ORDER BY seq DESC LIMIT ?"
        );
        let q = bind_lineage(sqlx::query(&sql).bind(tenant).bind(session));
        let rows = q.bind(i64::from(window)).fetch_all(&self.pool).await?;
        let mut messages: Vec<(String, TimelineMessage)> = rows
            .iter()
            .rev()
            .map(|r| {
                (
                    r.get::<String, _>(2),
                    TimelineMessage {
                        seq: r.get::<i64, _>(0) as u64,
                        event_id: r.get(1),
                        role: r.get(3),
                        participant_id: r.get(4),
                        text: r.get(5),
                        tokens: r.get::<i64, _>(6) as u64,
                        tool_calls: Vec::new(),
                    },
                )
            })
            .collect();
        let min_seq = messages.first().map(|(_, m)| m.seq).unwrap_or(u64::MAX);
        let count_sql = format!(
            "SELECT count(*) FROM messages WHERE tenant_id = ? AND session_id = ? AND {lineage_sql} \
             AND seq < ?"
        );
        let before_window: i64 = bind_lineage(sqlx::query(&count_sql).bind(tenant).bind(session))
            .bind(min_seq.min(i64::MAX as u64) as i64)
            .fetch_one(&self.pool)
            .await?
            .get(0);

        // Tool calls of the window (and open ones from before it).
        let calls_sql = format!(
            "SELECT tool_call_id, name, args, call_tokens, request_event_id, request_seq, status, \
             result_event_id, output, output_ref, output_preview, output_bytes, output_tokens, \
             preview_tokens, error, retryable, privacy_class, message_id FROM tool_calls \
             WHERE tenant_id = ? AND session_id = ? AND request_seq >= ? AND {lineage_sql} \
             ORDER BY request_seq",
            lineage_sql = lineage_clause("request_seq")
        );
        let window_start = if messages.is_empty() { 0 } else { min_seq };
        let mut call_rows = bind_lineage(
            sqlx::query(&calls_sql)
                .bind(tenant)
                .bind(session)
                .bind(window_start as i64),
        )
        .fetch_all(&self.pool)
        .await?;
        // Open calls older than the window (rare): by id, from the fold.
        let old_open: Vec<&String> = fold
            .open_tool_calls
            .values()
            .filter(|c| c.request_seq < window_start)
            .map(|c| &c.tool_call_id)
            .collect();
        if !old_open.is_empty() {
            let mut q = QueryBuilder::<Sqlite>::new(
                "SELECT tool_call_id, name, args, call_tokens, request_event_id, request_seq, \
                 status, result_event_id, output, output_ref, output_preview, output_bytes, \
                 output_tokens, preview_tokens, error, retryable, privacy_class, message_id \
                 FROM tool_calls WHERE tenant_id = ",
            );
            q.push_bind(tenant)
                .push(" AND session_id = ")
                .push_bind(session)
                .push(" AND tool_call_id IN (");
            let mut sep = q.separated(", ");
            for id in old_open {
                sep.push_bind(id.clone());
            }
            q.push(")");
            call_rows.extend(q.build().fetch_all(&self.pool).await?);
        }
        let by_message: HashMap<String, usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, (_, m))| m.role == "assistant")
            .map(|(i, (id, _))| (id.clone(), i))
            .collect();
        let mut loose = Vec::new();
        for r in call_rows {
            let status_text: String = r.get(6);
            let pair = ToolPair {
                tool_call_id: r.get(0),
                name: r.get(1),
                args: r.get(2),
                call_tokens: r.get::<i64, _>(3) as u64,
                request_event_id: r.get(4),
                request_seq: r.get::<i64, _>(5) as u64,
                status: ToolStatus::parse(&status_text).unwrap_or(ToolStatus::Pending),
                result_event_id: r.get(7),
                output: r.get(8),
                output_ref: r.get(9),
                output_preview: r.get(10),
                output_bytes: r.get::<Option<i64>, _>(11).map(|b| b as u64),
                output_tokens: r.get::<i64, _>(12) as u64,
                preview_tokens: r.get::<i64, _>(13) as u64,
                error: r.get(14),
                retryable: r.get(15),
                privacy_class: parse_privacy(r.get(16)),
            };
            let message_id: Option<String> = r.get(17);
            match message_id.and_then(|m| by_message.get(&m)) {
                Some(&i) => messages[i].1.tool_calls.push(pair),
                None if pair.request_seq >= min_seq => {
                    // Requested without a response message: it stands as its own step.
                    messages.push((
                        String::new(),
                        TimelineMessage {
                            seq: pair.request_seq,
                            event_id: pair.request_event_id.clone(),
                            role: "assistant".into(),
                            participant_id: String::new(),
                            text: String::new(),
                            tokens: 0,
                            tool_calls: vec![pair],
                        },
                    ));
                }
                None => loose.push(pair),
            }
        }
        messages.sort_by_key(|(_, m)| m.seq);

        let participant_id = participant
            .map(str::to_owned)
            .or_else(|| fold.primary_participant.clone())
            .unwrap_or_else(|| strata_core::projection::DEFAULT_PARTICIPANT.to_owned());
        let (
            started,
            model,
            window_tokens,
            reserved,
            system_prompt,
            sp_tokens,
            tools,
            tools_tokens,
        ) = match &session_row {
            Some(r) => (
                Some(r.get::<String, _>(0)),
                r.get::<String, _>(1),
                r.get::<i64, _>(2) as u32,
                r.get::<i64, _>(3) as u32,
                r.get::<Option<String>, _>(4),
                r.get::<i64, _>(5) as u64,
                serde_json::from_str(r.get::<&str, _>(6)).map_err(|source| Error::Corrupt {
                    what: "session tools".into(),
                    source,
                })?,
                r.get::<i64, _>(7) as u64,
            ),
            None => (None, "unknown".into(), 0, 0, None, 0, Vec::new(), 0),
        };
        Ok(Some(Snapshot {
            tenant_id: tenant.to_owned(),
            session_id: session.to_owned(),
            branch_id: branch.to_owned(),
            participant_id,
            head_seq: fold.head_seq,
            model,
            context_window_tokens: window_tokens,
            reserved_output_tokens: reserved,
            system_prompt,
            system_prompt_tokens: sp_tokens,
            session_started_event_id: started,
            tools,
            tools_tokens,
            state: branch_fold.state.clone(),
            messages: messages.into_iter().map(|(_, m)| m).collect(),
            messages_before_window: before_window as u64,
            loose_tool_calls: loose,
            transcript_tokens: branch_fold.transcript_tokens,
            orphan_results: fold.orphan_results,
        }))
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
            .map(|r| {
                serde_json::from_str(r.get::<&str, _>(0)).map_err(|source| Error::Corrupt {
                    what: "event body".into(),
                    source,
                })
            })
            .collect()
    }

    async fn assembly(&self, tenant: &str, assembly_id: &str) -> Result<Option<Value>> {
        let row =
            sqlx::query("SELECT record FROM assemblies WHERE tenant_id = ? AND assembly_id = ?")
                .bind(tenant)
                .bind(assembly_id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| {
            serde_json::from_str(r.get::<&str, _>(0)).map_err(|source| Error::Corrupt {
                what: "assembly record".into(),
                source,
            })
        })
        .transpose()
    }

    async fn sessions(&self, tenant: &str) -> Result<Vec<SessionSummary>> {
        let rows = sqlx::query(
            "SELECT session_id, head_seq, event_count FROM session_folds WHERE tenant_id = ? \
             ORDER BY session_id",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| SessionSummary {
                session_id: r.get(0),
                head_seq: r.get::<i64, _>(1) as u64,
                event_count: r.get::<i64, _>(2) as u64,
            })
            .collect())
    }

    async fn tenant_for_key(&self, key_sha256: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT tenant_id FROM api_keys WHERE key_sha256 = ?")
            .bind(key_sha256)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn put_api_key(&self, key_sha256: &str, tenant: &str, label: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_keys (key_sha256, tenant_id, label, created_at) \
             VALUES (?, ?, ?, datetime('now')) ON CONFLICT (key_sha256) DO NOTHING",
        )
        .bind(key_sha256)
        .bind(tenant)
        .bind(label)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn fingerprint(&self) -> Result<BTreeMap<String, (u64, String)>> {
        const TABLES: &[&str] = &[
            "consumer_offsets",
            "session_folds",
            "sessions",
            "branches",
            "events",
            "messages",
            "tool_calls",
            "artifacts",
            "memories",
            "compactions",
            "assemblies",
        ];
        let mut out = BTreeMap::new();
        for table in TABLES {
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
            let mut lines: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            lines.sort();
            let joined = lines.join("\n");
            out.insert(
                (*table).to_owned(),
                (
                    lines.len() as u64,
                    strata_core::sha256_hex(joined.as_bytes()),
                ),
            );
        }
        Ok(out)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
