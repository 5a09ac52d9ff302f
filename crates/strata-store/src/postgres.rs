//! The distributed projection store: PostgreSQL through `sqlx`, with the SQLite backend's exact
//! semantics (the conformance suite in `tests/conformance.rs` runs the same bodies against both).
//!
//! Many processes may read; the projector group is the only writer, and it writes each batch's
//! rows, the sessions' folds and its consumer offsets in one transaction.
//!
//! PostgreSQL's `TEXT` cannot hold NUL (U+0000), which SQLite's can. So that an event carrying
//! one is projected instead of failing its batch on every retry, text written to the columns is
//! stored with each NUL replaced by U+FFFD; the event's canonical JSON in `events.body` escapes
//! it and keeps it exactly.
//!
//! The tables of a projection set live in one schema per generation ([`generations`]): a store
//! opened with [`PgStore::open`] follows the current one, so `strata rebuild` can switch every
//! reader and the projector to a rebuilt set without restarting them.

pub mod generations;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool, Postgres, Row, Transaction};
use strata_core::assembly::Snapshot;
use strata_core::projection::{Change, SessionFold, ToolCallRow, ToolResultRow, ToolStatus};

use crate::common::{self, Dialect};
use crate::{
    ApiKeyInfo, BranchHead, Error, Offsets, ProjectionBatch, ProjectionStore, Result,
    SessionForgotten, SessionSummary,
};

/// Pool size when the URL has no `max_connections` parameter.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// How long a statement waits for a pooled connection before failing with `PoolTimedOut`.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

const DIALECT: Dialect = Dialect {
    stored_text: text,
    insertion_order: "call_order",
};

/// A tool call to insert, with what the same batch says about its outcome.
struct CallRow<'a> {
    call: &'a ToolCallRow,
    status: ToolStatus,
    result: Option<&'a ToolResultRow>,
}

/// PostgreSQL-backed projections.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    /// Whether the store follows the database's current generation (else it is pinned to one
    /// schema: a rebuild's target).
    follows: bool,
    fail_next_commit: AtomicBool,
    drop_connection_before_next_commit: AtomicBool,
}

impl PgStore {
    /// Connects to the database a `postgres://` (or `postgresql://`) URL names and migrates it.
    ///
    /// The URL takes the parameters sqlx's `PgConnectOptions` reads (`sslmode`,
    /// `application_name`, …), plus `max_connections=N` for the size of the pool
    /// (default [`DEFAULT_MAX_CONNECTIONS`]), which is removed before connecting. Waiting for a
    /// pooled connection times out after [`ACQUIRE_TIMEOUT`].
    ///
    /// A server that cannot be reached fails the open at once with the reason (connection
    /// refused, no answer within [`ACQUIRE_TIMEOUT`], …), an error [`Error::is_transient`] says
    /// is worth retrying; the pool's own connection attempts would instead wait out the whole
    /// acquire timeout and report only that it expired.
    pub async fn open(url: &str) -> Result<Self> {
        let (url_without_pool, max_connections) = split_pool_size(url)?;
        let options = PgConnectOptions::from_str(&url_without_pool)?;
        // One connection first: an unreachable server fails here at once with the reason
        // (a pool would wait out its acquire timeout and say only that).
        let mut conn =
            match tokio::time::timeout(ACQUIRE_TIMEOUT, PgConnection::connect_with(&options)).await
            {
                Ok(first) => first?,
                Err(_) => {
                    return Err(Error::Database(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {} s", ACQUIRE_TIMEOUT.as_secs()),
                    ))))
                }
            };
        generations::ensure_meta(&mut conn).await?;
        let schema = generations::current(&mut conn).await?;
        conn.close().await?;
        migrate(&options, &schema).await?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // Every use of a pooled connection reads the pointer: a switch reaches readers at
            // their next query (one round trip more per acquire). `before_acquire` runs for
            // idle connections only; a new one is pointed by `after_connect`.
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(generations::FOLLOW_CURRENT).await?;
                    Ok(())
                })
            })
            .before_acquire(|conn, _| {
                Box::pin(async move {
                    conn.execute(generations::FOLLOW_CURRENT).await?;
                    Ok(true)
                })
            })
            .connect_with(options)
            .await?;
        tracing::debug!(max_connections, %schema, "opened the postgres projection store");
        Ok(Self {
            pool,
            follows: true,
            fail_next_commit: AtomicBool::new(false),
            drop_connection_before_next_commit: AtomicBool::new(false),
        })
    }

    /// Opens the projection set of one generation (a rebuild's target), creating and migrating
    /// its schema when needed. Nobody reads it before a switch and a rebuild can always redo it,
    /// so its commits do not wait for the WAL flush (`synchronous_commit = off`: a server crash
    /// loses the last batches and their offsets together, and the rebuild resumes before them);
    /// the switch's own commit flushes the WAL past all of them.
    pub async fn open_generation(url: &str, schema: &str) -> Result<Self> {
        let schema = generations::checked(schema)?;
        let (url_without_pool, max_connections) = split_pool_size(url)?;
        let options = PgConnectOptions::from_str(&url_without_pool)?;
        let mut conn = PgConnection::connect_with(&options).await?;
        generations::ensure_meta(&mut conn).await?;
        conn.execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
            .await?;
        conn.close().await?;
        migrate(&options, schema).await?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.options([("search_path", schema), ("synchronous_commit", "off")]))
            .await?;
        Ok(Self {
            pool,
            follows: false,
            fail_next_commit: AtomicBool::new(false),
            drop_connection_before_next_commit: AtomicBool::new(false),
        })
    }

    /// Begins a transaction on the set it writes: the current generation, held there until
    /// the transaction ends, for a following store.
    async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await?;
        if self.follows {
            generations::pin_transaction(&mut tx).await?;
        }
        Ok(tx)
    }

    /// Test support: the next [`ProjectionStore::commit_batch`] writes every row and then fails
    /// before committing, as a crash between write and commit would.
    pub fn fail_next_commit(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    /// Test support: the next [`ProjectionStore::commit_batch`] writes every row, then its
    /// connection is killed from another session (`pg_terminate_backend`) before the commit, as
    /// a network drop or a server restart mid-transaction would.
    pub fn drop_connection_before_next_commit(&self) {
        self.drop_connection_before_next_commit
            .store(true, Ordering::SeqCst);
    }

    async fn write_changes(tx: &mut Transaction<'_, Postgres>, changes: &[Change]) -> Result<()> {
        let mut events = Vec::new();
        let mut messages = Vec::new();
        let mut calls: Vec<CallRow<'_>> = Vec::new();
        let mut call_index: HashMap<(&str, &str, &str), usize> = HashMap::new();
        let mut updates = Vec::new();
        for c in changes {
            match c {
                Change::Event(e) => events.push(e),
                Change::Message(m) => messages.push(m),
                Change::ToolCall(t) => {
                    call_index.insert((&t.tenant_id, &t.session_id, &t.tool_call_id), calls.len());
                    calls.push(CallRow {
                        call: t,
                        status: ToolStatus::Pending,
                        result: None,
                    });
                }
                // A call whose request is in this batch gets its result (or status) in its
                // insert instead of one UPDATE round trip each (as on SQLite): the row ends up
                // the same, since the changes to it are applied here in fold order.
                Change::ToolResult(r) => {
                    match call_index.get(&(&*r.tenant_id, &*r.session_id, &*r.tool_call_id)) {
                        Some(&i) => {
                            calls[i].status = r.status;
                            calls[i].result = Some(r);
                        }
                        None => updates.push(c),
                    }
                }
                Change::ToolStatus {
                    tenant_id,
                    session_id,
                    tool_call_id,
                    status,
                } => match call_index.get(&(&**tenant_id, &**session_id, &**tool_call_id)) {
                    Some(&i) => calls[i].status = *status,
                    None => updates.push(c),
                },
                other => updates.push(other),
            }
        }
        // One statement per table, whatever the batch size: each column travels as an array.
        if !events.is_empty() {
            sqlx::query(
                "INSERT INTO events (tenant_id, session_id, seq, event_id, branch_id, \
                 participant_id, event_type, timestamp, log_partition, log_offset, \
                 transcript_tokens, body) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], \
                 $11::bigint[], $12::text[])",
            )
            .bind(texts(&events, |e| &e.tenant_id))
            .bind(texts(&events, |e| &e.session_id))
            .bind(ints(&events, |e| e.seq as i64))
            .bind(texts(&events, |e| &e.event_id))
            .bind(texts(&events, |e| &e.branch_id))
            .bind(texts(&events, |e| &e.participant_id))
            .bind(texts(&events, |e| &e.event_type))
            .bind(texts(&events, |e| &e.timestamp))
            .bind(ints(&events, |e| i64::from(e.position.partition)))
            .bind(ints(&events, |e| e.position.offset as i64))
            .bind(ints(&events, |e| e.transcript_tokens as i64))
            .bind(texts(&events, |e| &e.json))
            .execute(&mut **tx)
            .await?;
        }
        if !messages.is_empty() {
            sqlx::query(
                "INSERT INTO messages (tenant_id, session_id, seq, branch_id, event_id, \
                 message_id, role, participant_id, text, tokens) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[])",
            )
            .bind(texts(&messages, |m| &m.tenant_id))
            .bind(texts(&messages, |m| &m.session_id))
            .bind(ints(&messages, |m| m.seq as i64))
            .bind(texts(&messages, |m| &m.branch_id))
            .bind(texts(&messages, |m| &m.event_id))
            .bind(texts(&messages, |m| &m.message_id))
            .bind(texts(&messages, |m| &m.role))
            .bind(texts(&messages, |m| &m.participant_id))
            .bind(texts(&messages, |m| &m.text))
            .bind(ints(&messages, |m| m.tokens as i64))
            .execute(&mut **tx)
            .await?;
        }
        if !calls.is_empty() {
            // In array order, so that `call_order` follows the order of the changes.
            let calls: Vec<&CallRow<'_>> = calls.iter().collect();
            fn result<'a>(c: &CallRow<'a>) -> Option<&'a ToolResultRow> {
                c.result
            }
            sqlx::query(
                "INSERT INTO tool_calls (tenant_id, session_id, tool_call_id, branch_id, name, \
                 args, participant_id, request_event_id, request_seq, message_id, call_tokens, \
                 status, result_event_id, result_seq, output, output_ref, output_preview, \
                 output_sha256, output_bytes, output_tokens, preview_tokens, error, retryable, \
                 privacy_class) \
                 SELECT tenant_id, session_id, tool_call_id, branch_id, name, args, \
                 participant_id, request_event_id, request_seq, message_id, call_tokens, status, \
                 result_event_id, result_seq, output, output_ref, output_preview, output_sha256, \
                 output_bytes, output_tokens, preview_tokens, error, retryable, privacy_class \
                 FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
                 $6::text[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::bigint[], \
                 $12::text[], $13::text[], $14::bigint[], $15::text[], $16::text[], $17::text[], \
                 $18::text[], $19::bigint[], $20::bigint[], $21::bigint[], $22::text[], \
                 $23::boolean[], $24::text[]) WITH ORDINALITY AS u(tenant_id, session_id, \
                 tool_call_id, branch_id, name, args, participant_id, request_event_id, \
                 request_seq, message_id, call_tokens, status, result_event_id, result_seq, \
                 output, output_ref, output_preview, output_sha256, output_bytes, \
                 output_tokens, preview_tokens, error, retryable, privacy_class, n) \
                 ORDER BY n",
            )
            .bind(texts(&calls, |c| &c.call.tenant_id))
            .bind(texts(&calls, |c| &c.call.session_id))
            .bind(texts(&calls, |c| &c.call.tool_call_id))
            .bind(texts(&calls, |c| &c.call.branch_id))
            .bind(texts(&calls, |c| &c.call.name))
            .bind(texts(&calls, |c| &c.call.args))
            .bind(texts(&calls, |c| &c.call.participant_id))
            .bind(texts(&calls, |c| &c.call.request_event_id))
            .bind(ints(&calls, |c| c.call.request_seq as i64))
            .bind(optional(&calls, |c| c.call.message_id.as_deref()))
            .bind(ints(&calls, |c| c.call.call_tokens as i64))
            .bind(texts(&calls, |c| c.status.as_str()))
            .bind(optional(&calls, |c| {
                result(c).map(|r| r.result_event_id.as_str())
            }))
            .bind(
                calls
                    .iter()
                    .map(|c| result(c).map(|r| r.result_seq as i64))
                    .collect::<Vec<_>>(),
            )
            .bind(optional(&calls, |c| {
                result(c).and_then(|r| r.output.as_deref())
            }))
            .bind(optional(&calls, |c| {
                result(c).and_then(|r| r.output_ref.as_deref())
            }))
            .bind(optional(&calls, |c| {
                result(c).and_then(|r| r.output_preview.as_deref())
            }))
            .bind(optional(&calls, |c| {
                result(c).and_then(|r| r.output_sha256.as_deref())
            }))
            .bind(
                calls
                    .iter()
                    .map(|c| result(c).and_then(|r| r.output_bytes).map(|b| b as i64))
                    .collect::<Vec<_>>(),
            )
            .bind(ints(&calls, |c| {
                result(c).map_or(0, |r| r.output_tokens as i64)
            }))
            .bind(ints(&calls, |c| {
                result(c).map_or(0, |r| r.preview_tokens as i64)
            }))
            .bind(optional(&calls, |c| {
                result(c).and_then(|r| r.error.as_deref())
            }))
            .bind(
                calls
                    .iter()
                    .map(|c| result(c).is_some_and(|r| r.retryable))
                    .collect::<Vec<_>>(),
            )
            .bind(
                calls
                    .iter()
                    .map(|c| {
                        result(c)
                            .and_then(|r| r.privacy_class)
                            .map(strata_core::payload::PrivacyClass::as_str)
                    })
                    .collect::<Vec<_>>(),
            )
            .execute(&mut **tx)
            .await?;
        }
        // Updates run after the inserts: a result always follows its call in the fold's order.
        for c in updates {
            Self::write_update(tx, c).await?;
        }
        Ok(())
    }

    async fn write_update(tx: &mut Transaction<'_, Postgres>, change: &Change) -> Result<()> {
        match change {
            Change::Session(s) => {
                sqlx::query(
                    "INSERT INTO sessions (tenant_id, session_id, started_event_id, provider, \
                     model, context_window_tokens, reserved_output_tokens, system_prompt, \
                     system_prompt_tokens, tools, tools_tokens, parent_session_id) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (tenant_id, session_id) DO NOTHING",
                )
                .bind(text(&s.tenant_id))
                .bind(text(&s.session_id))
                .bind(text(&s.started_event_id))
                .bind(text(&s.provider))
                .bind(text(&s.model))
                .bind(i64::from(s.context_window_tokens))
                .bind(i64::from(s.reserved_output_tokens))
                .bind(s.system_prompt.as_deref().map(text))
                .bind(s.system_prompt_tokens as i64)
                .bind(serde_json::to_string(&s.tools).unwrap_or_else(|_| "[]".into()))
                .bind(s.tools_tokens as i64)
                .bind(s.parent_session_id.as_deref().map(text))
                .execute(&mut **tx)
                .await?;
            }
            Change::Branch(b) => {
                sqlx::query(
                    "INSERT INTO branches (tenant_id, session_id, branch_id, parent_branch_id, \
                     fork_event_id, kind, created_event_id) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (tenant_id, session_id, branch_id) DO NOTHING",
                )
                .bind(text(&b.tenant_id))
                .bind(text(&b.session_id))
                .bind(text(&b.branch_id))
                .bind(b.parent_branch_id.as_deref().map(text))
                .bind(b.fork_event_id.as_deref().map(text))
                .bind(text(&b.kind))
                .bind(text(&b.created_event_id))
                .execute(&mut **tx)
                .await?;
            }
            Change::ToolResult(r) => {
                sqlx::query(
                    "UPDATE tool_calls SET status = $1, result_event_id = $2, result_seq = $3, \
                     output = $4, output_ref = $5, output_preview = $6, output_sha256 = $7, \
                     output_bytes = $8, output_tokens = $9, preview_tokens = $10, error = $11, \
                     retryable = $12, privacy_class = $13 \
                     WHERE tenant_id = $14 AND session_id = $15 AND tool_call_id = $16",
                )
                .bind(r.status.as_str())
                .bind(text(&r.result_event_id))
                .bind(r.result_seq as i64)
                .bind(r.output.as_deref().map(text))
                .bind(r.output_ref.as_deref().map(text))
                .bind(r.output_preview.as_deref().map(text))
                .bind(r.output_sha256.as_deref().map(text))
                .bind(r.output_bytes.map(|b| b as i64))
                .bind(r.output_tokens as i64)
                .bind(r.preview_tokens as i64)
                .bind(r.error.as_deref().map(text))
                .bind(r.retryable)
                .bind(
                    r.privacy_class
                        .map(strata_core::payload::PrivacyClass::as_str),
                )
                .bind(text(&r.tenant_id))
                .bind(text(&r.session_id))
                .bind(text(&r.tool_call_id))
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
                    "UPDATE tool_calls SET status = $1 \
                     WHERE tenant_id = $2 AND session_id = $3 AND tool_call_id = $4",
                )
                .bind(status.as_str())
                .bind(text(tenant_id))
                .bind(text(session_id))
                .bind(text(tool_call_id))
                .execute(&mut **tx)
                .await?;
            }
            Change::Artifact(a) => {
                sqlx::query(
                    "INSERT INTO artifacts (tenant_id, artifact_id, session_id, uri, sha256, \
                     bytes, kind, source_event_id, privacy_class, owner_participant) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (tenant_id, artifact_id, source_event_id) DO NOTHING",
                )
                .bind(text(&a.tenant_id))
                .bind(text(&a.artifact_id))
                .bind(text(&a.session_id))
                .bind(text(&a.uri))
                .bind(text(&a.sha256))
                .bind(a.bytes as i64)
                .bind(text(&a.kind))
                .bind(text(&a.source_event_id))
                .bind(
                    a.privacy_class
                        .map(strata_core::payload::PrivacyClass::as_str),
                )
                .bind(text(&a.owner_participant))
                .execute(&mut **tx)
                .await?;
            }
            Change::Memory(d) | Change::Compaction(d) | Change::Assembly(d) => {
                let sql = match change {
                    Change::Memory(_) => {
                        "INSERT INTO memories (tenant_id, memory_id, session_id, branch_id, \
                         event_id, seq, record) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (tenant_id, memory_id) DO NOTHING"
                    }
                    Change::Compaction(_) => {
                        "INSERT INTO compactions (tenant_id, compaction_id, session_id, \
                         branch_id, event_id, seq, record) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (tenant_id, compaction_id) DO NOTHING"
                    }
                    _ => {
                        "INSERT INTO assemblies (tenant_id, assembly_id, session_id, branch_id, \
                         event_id, seq, record) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (tenant_id, assembly_id) DO NOTHING"
                    }
                };
                sqlx::query(sql)
                    .bind(text(&d.tenant_id))
                    .bind(text(&d.id))
                    .bind(text(&d.session_id))
                    .bind(text(&d.branch_id))
                    .bind(text(&d.event_id))
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
                    "UPDATE memories SET superseded_by = $1 \
                     WHERE tenant_id = $2 AND memory_id = $3",
                )
                .bind(text(superseded_by))
                .bind(text(tenant_id))
                .bind(text(memory_id))
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

/// Text as PostgreSQL can store it: NUL replaced by U+FFFD (see the module docs).
fn text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// One text column of a bulk insert, as an array.
fn texts<'a, T>(rows: &[&'a T], column: impl Fn(&'a T) -> &'a str) -> Vec<Cow<'a, str>> {
    rows.iter().map(|r| text(column(r))).collect()
}

/// One integer column of a bulk insert, as an array.
/// A nullable text column of `rows`, stored as PostgreSQL can ([`text`]).
fn optional<'a, T>(
    rows: &[&'a T],
    column: impl Fn(&'a T) -> Option<&'a str>,
) -> Vec<Option<Cow<'a, str>>> {
    rows.iter().map(|r| column(r).map(text)).collect()
}

fn ints<T>(rows: &[&T], column: impl Fn(&T) -> i64) -> Vec<i64> {
    rows.iter().map(|r| column(r)).collect()
}

/// Removes `max_connections=N` from a URL's query string and returns the URL and `N` (default
/// [`DEFAULT_MAX_CONNECTIONS`]).
/// Runs the migrations in `schema` (created beforehand), on a connection of its own.
async fn migrate(options: &PgConnectOptions, schema: &str) -> Result<()> {
    // A pool of one rather than a bare connection: `Migrator::run` on `&mut PgConnection` makes
    // a future that is not `Send` for every lifetime, which spawned callers need.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.clone().options([("search_path", schema)]))
        .await?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await?;
    pool.close().await;
    Ok(())
}

fn split_pool_size(url: &str) -> Result<(String, u32)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), DEFAULT_MAX_CONNECTIONS));
    };
    let mut max_connections = DEFAULT_MAX_CONNECTIONS;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("max_connections", value)) => {
                max_connections =
                    value
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| Error::UnsupportedUrl {
                            url: crate::redact(url),
                            reason: format!(
                                "max_connections must be a positive integer, not {value:?}"
                            ),
                        })?;
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, max_connections))
}

#[async_trait]
impl ProjectionStore for PgStore {
    async fn offsets(&self, group: &str) -> Result<Offsets> {
        let rows =
            sqlx::query("SELECT partition, next_offset FROM consumer_offsets WHERE group_id = $1")
                .bind(text(group))
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0) as u32, r.get::<i64, _>(1) as u64))
            .collect())
    }

    #[tracing::instrument(name = "store.postgres.commit_batch", skip_all, fields(changes = batch.changes.len()))]
    async fn commit_batch(&self, batch: ProjectionBatch) -> Result<()> {
        let mut tx = self.begin().await?;
        Self::write_changes(&mut tx, &batch.changes).await?;
        for fold in &batch.folds {
            sqlx::query(
                "INSERT INTO session_folds (tenant_id, session_id, head_seq, event_count, fold) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, session_id) DO UPDATE SET \
                 head_seq = EXCLUDED.head_seq, event_count = EXCLUDED.event_count, \
                 fold = EXCLUDED.fold",
            )
            .bind(text(&fold.tenant_id))
            .bind(text(&fold.session_id))
            .bind(fold.head_seq as i64)
            .bind(fold.event_count as i64)
            .bind(common::fold_json(fold)?)
            .execute(&mut *tx)
            .await?;
        }
        for (partition, offset) in &batch.offsets {
            sqlx::query(
                "INSERT INTO consumer_offsets (group_id, partition, next_offset) \
                 VALUES ($1, $2, $3) \
                 ON CONFLICT (group_id, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
            )
            .bind(text(&batch.group))
            .bind(i64::from(*partition))
            .bind(*offset as i64)
            .execute(&mut *tx)
            .await?;
        }
        if self.fail_next_commit.swap(false, Ordering::SeqCst) {
            // Dropping the transaction rolls it back, exactly as a crash here would.
            return Err(Error::Injected);
        }
        if self
            .drop_connection_before_next_commit
            .swap(false, Ordering::SeqCst)
        {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .execute(&self.pool)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn session_fold(&self, tenant: &str, session: &str) -> Result<Option<SessionFold>> {
        let row =
            sqlx::query("SELECT fold FROM session_folds WHERE tenant_id = $1 AND session_id = $2")
                .bind(text(tenant))
                .bind(text(session))
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
        // Event ids never hold control characters (the event model rejects them). A join with
        // the unnested ids, not `event_id = ANY($2)`: once the prepared statement switches to a
        // generic plan made while the table was small, `ANY` becomes a filter that compares every
        // row with every id (seconds per batch at 50,000 rows); the join stays a hash or index
        // lookup whatever the plan.
        let rows = sqlx::query(
            "SELECT e.event_id FROM UNNEST($2::text[]) AS wanted(event_id) \
             JOIN events e ON e.tenant_id = $1 AND e.event_id = wanted.event_id",
        )
        .bind(text(tenant))
        .bind(event_ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    async fn event_seq(&self, tenant: &str, session: &str, event_id: &str) -> Result<Option<u64>> {
        let row = sqlx::query(
            "SELECT seq FROM events WHERE tenant_id = $1 AND event_id = $2 AND session_id = $3",
        )
        .bind(text(tenant))
        .bind(text(event_id))
        .bind(text(session))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.get::<i64, _>(0) as u64))
    }

    async fn session_provider(&self, tenant: &str, session: &str) -> Result<Option<String>> {
        let row =
            sqlx::query("SELECT provider FROM sessions WHERE tenant_id = $1 AND session_id = $2")
                .bind(text(tenant))
                .bind(text(session))
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|r| r.get::<Option<String>, _>(0)))
    }

    async fn branch_heads(&self, tenant: &str, session: &str) -> Result<Vec<BranchHead>> {
        let rows = sqlx::query(
            // The head event's timestamp, as `sessions_listing` has it: timestamps need not grow
            // with seq, and text MAX misorders fractional seconds.
            "SELECT b.branch_id, b.head, b.n, (SELECT e.timestamp FROM events e \
               WHERE e.tenant_id = $1 AND e.session_id = $2 AND e.seq = b.head) \
             FROM (SELECT branch_id, MAX(seq) AS head, COUNT(*) AS n FROM events \
               WHERE tenant_id = $1 AND session_id = $2 GROUP BY branch_id) b \
             ORDER BY b.branch_id",
        )
        .bind(text(tenant))
        .bind(text(session))
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

    #[tracing::instrument(name = "store.postgres.snapshot", skip(self))]
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
            "SELECT body FROM events WHERE tenant_id = $1 AND session_id = $2 AND seq > $3 \
             ORDER BY seq LIMIT $4",
        )
        .bind(text(tenant))
        .bind(text(session))
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
            sqlx::query("SELECT record FROM assemblies WHERE tenant_id = $1 AND assembly_id = $2")
                .bind(text(tenant))
                .bind(text(assembly_id))
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| common::parse_json(r.get::<&str, _>(0), "assembly record"))
            .transpose()
    }

    async fn artifact_classes(
        &self,
        tenant: &str,
        sha256: &str,
    ) -> Result<Vec<Option<strata_core::payload::PrivacyClass>>> {
        let rows =
            sqlx::query("SELECT privacy_class FROM artifacts WHERE tenant_id = $1 AND sha256 = $2")
                .bind(text(tenant))
                .bind(text(sha256))
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
    ) -> Result<BTreeMap<String, strata_core::payload::PrivacyClass>> {
        let rows = sqlx::query(
            "SELECT result_event_id, privacy_class FROM tool_calls \
             WHERE tenant_id = $1 AND session_id = $2 AND result_seq > $3 AND result_seq <= $4 \
             AND privacy_class IN ('confidential', 'restricted')",
        )
        .bind(text(tenant))
        .bind(text(session))
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
        // Byte order, as SQLite sorts, whatever the database's collation.
        let rows = sqlx::query(
            "SELECT session_id, head_seq, event_count FROM session_folds WHERE tenant_id = $1 \
             ORDER BY session_id COLLATE \"C\"",
        )
        .bind(text(tenant))
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
            "SELECT session_id, head_seq, event_count FROM session_folds WHERE tenant_id = $1 \
             AND session_id COLLATE \"C\" > $2 ORDER BY session_id COLLATE \"C\" LIMIT $3",
        )
        .bind(text(tenant))
        .bind(text(after.unwrap_or("")))
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
             (SELECT string_agg(DISTINCT e.participant_id, E'\\n') FROM events e \
               WHERE e.tenant_id = f.tenant_id AND e.session_id = f.session_id) \
             FROM session_folds f WHERE f.tenant_id = $1 AND f.session_id COLLATE \"C\" > $2 \
             AND ($3::text IS NULL OR strpos(f.session_id, $3) > 0 \
               OR EXISTS (SELECT 1 FROM sessions s WHERE s.tenant_id = f.tenant_id \
                 AND s.session_id = f.session_id AND strpos(s.model, $3) > 0) \
               OR EXISTS (SELECT 1 FROM events e WHERE e.tenant_id = f.tenant_id \
                 AND e.session_id = f.session_id AND strpos(e.participant_id, $3) > 0)) \
             ORDER BY f.session_id COLLATE \"C\" LIMIT $4",
        )
        .bind(text(tenant))
        .bind(text(after.unwrap_or("")))
        .bind(matching.map(text))
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
            "SELECT tenant_id FROM api_keys WHERE key_sha256 = $1 AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $2)",
        )
        .bind(text(key_sha256))
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
        // In a pinned transaction: a key is never written into a set a switch just left.
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO api_keys (key_sha256, tenant_id, label, created_at, expires_at) \
             VALUES ($1, $2, $3, now(), $4) ON CONFLICT (key_sha256) DO NOTHING",
        )
        .bind(text(key_sha256))
        .bind(text(tenant))
        .bind(text(label))
        .bind(expires_at.map(text))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyInfo>> {
        let row = sqlx::query(
            "SELECT key_sha256, tenant_id, label, \
             to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
             expires_at, revoked_at FROM api_keys WHERE key_sha256 = $1",
        )
        .bind(text(key_sha256))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| key_info(&r)))
    }

    async fn api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyInfo>> {
        let rows = sqlx::query(
            "SELECT key_sha256, tenant_id, label, \
             to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
             expires_at, revoked_at FROM api_keys WHERE $1 IS NULL OR tenant_id = $1 \
             ORDER BY created_at, key_sha256",
        )
        .bind(tenant.map(text))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(key_info).collect())
    }

    async fn revoke_api_key(&self, key_id: &str, now: &str) -> Result<bool> {
        let Some(prefix) = ApiKeyInfo::hash_prefix(key_id) else {
            return Ok(false);
        };
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE substr(key_sha256, 1, 16) = $2 \
             AND revoked_at IS NULL",
        )
        .bind(text(now))
        .bind(prefix)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT tenant_id FROM session_folds GROUP BY tenant_id ORDER BY tenant_id COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn fingerprint(&self) -> Result<BTreeMap<String, (u64, String)>> {
        let mut out = BTreeMap::new();
        for table in common::FINGERPRINT_TABLES {
            // One JSON object per row (jsonb: keys in a fixed order), equal rows giving equal
            // text. `call_order` is left out: like SQLite's rowid it is not content, and a
            // rolled-back batch consumes its sequence values.
            let lines: Vec<String> = sqlx::query(&format!(
                "SELECT (to_jsonb(t) - 'call_order')::text FROM {table} t"
            ))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
            out.insert((*table).to_owned(), common::fingerprint_table(lines));
        }
        Ok(out)
    }

    async fn session_log_positions(&self, tenant: &str, session: &str) -> Result<Vec<(u32, u64)>> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT log_partition, log_offset FROM events WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq",
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
            "SELECT DISTINCT sha256 FROM artifacts WHERE tenant_id = $1 AND session_id = $2",
        )
        .bind(tenant)
        .bind(session)
        .fetch_all(&mut *tx)
        .await?;
        let mut forgotten = SessionForgotten::default();
        for table in crate::SESSION_TABLES {
            let done = sqlx::query(&format!(
                "DELETE FROM {table} WHERE tenant_id = $1 AND session_id = $2"
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
                "SELECT 1 FROM artifacts WHERE tenant_id = $1 AND sha256 = $2 LIMIT 1",
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
        // Dead row versions keep the content until a vacuum prunes them.
        for table in crate::SESSION_TABLES {
            sqlx::query(&format!("VACUUM {table}"))
                .execute(&self.pool)
                .await?;
        }
        Ok(forgotten)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// A `session_id, head_seq, event_count` row.
fn session_summary(r: &sqlx::postgres::PgRow) -> SessionSummary {
    SessionSummary {
        session_id: r.get(0),
        head_seq: r.get::<i64, _>(1) as u64,
        event_count: r.get::<i64, _>(2) as u64,
    }
}

fn key_info(r: &sqlx::postgres::PgRow) -> ApiKeyInfo {
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

    #[test]
    fn pool_size_comes_from_the_url_and_is_removed() {
        let base = "postgres://u:p@db:5432/strata";
        assert_eq!(
            split_pool_size(base).unwrap(),
            (base.to_owned(), DEFAULT_MAX_CONNECTIONS)
        );
        assert_eq!(
            split_pool_size(&format!("{base}?max_connections=3")).unwrap(),
            (base.to_owned(), 3)
        );
        assert_eq!(
            split_pool_size(&format!(
                "{base}?sslmode=disable&max_connections=20&application_name=x"
            ))
            .unwrap(),
            (format!("{base}?sslmode=disable&application_name=x"), 20)
        );
    }

    #[test]
    fn a_bad_pool_size_is_refused_without_the_password() {
        for bad in ["0", "-1", "many", ""] {
            let err = split_pool_size(&format!("postgres://u:secret@db/s?max_connections={bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("max_connections"), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn nul_is_replaced_and_other_text_borrowed() {
        assert!(matches!(text("plain"), Cow::Borrowed("plain")));
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
    }
}
