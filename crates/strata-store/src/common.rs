//! What the SQLite and PostgreSQL backends share: the assembler's snapshot (branch lineage from
//! the fold, its queries, rows to [`ToolPair`]s and [`TimelineMessage`]s, pairing calls with
//! their messages), JSON and enum mappings, and the fingerprint's hashing.
//!
//! The snapshot queries are built with [`Statement`], which writes each backend's own
//! placeholders, so both backends run the same SQL; the writes and the simple lookups are
//! written out per backend.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;
use sqlx::{
    Arguments, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type,
};
use strata_core::assembly::{Snapshot, TimelineMessage, ToolPair};
use strata_core::compaction::CompactionRecord;
use strata_core::memory::Memory;
use strata_core::payload::{CompactionCompleted, MemoryRecorded, PrivacyClass};
use strata_core::projection::{SessionFold, ToolStatus, DEFAULT_PARTICIPANT};

use crate::{Error, Result};

/// Rows per multi-row INSERT and ids per `IN (...)` list (well under SQLite's bound-parameter
/// limit, and PostgreSQL's 65535).
pub(crate) const INSERT_CHUNK: usize = 400;

/// The tables [`crate::ProjectionStore::fingerprint`] covers (not `api_keys`: keys are operator
/// data, not projections).
pub(crate) const FINGERPRINT_TABLES: &[&str] = &[
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

/// Row count and SHA-256 of one table's rows, each rendered as one line: the lines are sorted,
/// so the hash does not depend on the order the database returns them in.
pub(crate) fn fingerprint_table(mut lines: Vec<String>) -> (u64, String) {
    lines.sort();
    let joined = lines.join("\n");
    (
        lines.len() as u64,
        strata_core::sha256_hex(joined.as_bytes()),
    )
}

fn parse_privacy(s: Option<String>) -> Option<PrivacyClass> {
    s.and_then(|s| serde_json::from_value(Value::String(s)).ok())
}

/// A stored privacy class; one this build does not know counts as `restricted` (fail closed).
pub(crate) fn parse_privacy_class(s: Option<String>) -> Option<PrivacyClass> {
    let stored = s?;
    Some(parse_privacy(Some(stored)).unwrap_or(PrivacyClass::Restricted))
}

/// A session fold as stored (JSON text).
pub(crate) fn fold_json(fold: &SessionFold) -> Result<String> {
    serde_json::to_string(fold).map_err(|source| Error::Corrupt {
        what: "session fold".into(),
        source,
    })
}

/// Reads back a stored session fold.
pub(crate) fn parse_fold(json: &str) -> Result<SessionFold> {
    parse_json(json, "session fold")
}

/// Reads back a stored JSON document (`what` names it in the error).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|source| Error::Corrupt {
        what: what.into(),
        source,
    })
}

/// How a backend stores text: SQLite as given; PostgreSQL without NUL (see `postgres.rs`).
type StoredText = fn(&str) -> Cow<'_, str>;

/// Text as given.
pub(crate) fn verbatim(s: &str) -> Cow<'_, str> {
    Cow::Borrowed(s)
}

/// What differs between the backends in the shared snapshot queries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    /// How the backend stores text parameters.
    pub(crate) stored_text: StoredText,
    /// A `tool_calls` column in insertion order (SQLite's `rowid`): the calls of one response
    /// share a `request_seq` and keep the order the model asked for them.
    pub(crate) insertion_order: &'static str,
}

/// SQL text and its arguments, each placeholder written by the backend's own [`Arguments`]
/// (`?` for SQLite, `$n` for PostgreSQL). Unlike `QueryBuilder`, it gives its arguments away by
/// value, which lets the same generic code run on both backends.
struct Statement<'q, DB: Database> {
    sql: String,
    args: DB::Arguments<'q>,
}

impl<'q, DB: Database> Statement<'q, DB> {
    fn new(sql: &str) -> Self {
        Self {
            sql: sql.to_owned(),
            args: Default::default(),
        }
    }

    /// `sql` followed by `WHERE tenant_id = ? AND session_id = ?`.
    fn for_session(sql: &str, stored: StoredText, tenant: &str, session: &str) -> Self
    where
        String: Encode<'q, DB> + Type<DB>,
    {
        let mut q = Self::new(sql);
        q.push(" WHERE tenant_id = ")
            .bind(stored(tenant).into_owned())
            .push(" AND session_id = ")
            .bind(stored(session).into_owned());
        q
    }

    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    fn bind<T: 'q + Encode<'q, DB> + Type<DB>>(&mut self, value: T) -> &mut Self {
        // Text and integers always encode; writing to a String cannot fail.
        self.args
            .add(value)
            .expect("text and integer arguments encode");
        self.args
            .format_placeholder(&mut self.sql)
            .expect("writing to a string");
        self
    }

    /// Appends `(branch_id = ? [AND seq_column <= ?]) OR ...` for a lineage.
    fn lineage(
        &mut self,
        lineage: &[(String, Option<u64>)],
        seq_column: &str,
        stored: StoredText,
    ) -> &mut Self
    where
        String: Encode<'q, DB> + Type<DB>,
        i64: Encode<'q, DB> + Type<DB>,
    {
        self.push("(");
        for (i, (branch, bound)) in lineage.iter().enumerate() {
            if i > 0 {
                self.push(" OR ");
            }
            self.push("(branch_id = ").bind(stored(branch).into_owned());
            if let Some(bound) = bound {
                self.push(&format!(" AND {seq_column} <= "))
                    .bind(*bound as i64);
            }
            self.push(")");
        }
        self.push(")")
    }
}

/// The columns [`tool_pair`] reads, in its order.
const TOOL_CALL_COLUMNS: &str = "tool_call_id, name, args, call_tokens, request_event_id, \
     request_seq, status, result_event_id, output, output_ref, output_preview, output_bytes, \
     output_tokens, preview_tokens, error, retryable, privacy_class, message_id, participant_id";

/// A `tool_calls` row (selected as [`TOOL_CALL_COLUMNS`]) as a [`ToolPair`] and the id of the
/// message that asked for it.
fn tool_pair<'r, R>(r: &'r R) -> (ToolPair, Option<String>)
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let status: String = r.get(6);
    let pair = ToolPair {
        tool_call_id: r.get(0),
        name: r.get(1),
        args: r.get(2),
        call_tokens: r.get::<i64, _>(3) as u64,
        request_event_id: r.get(4),
        request_seq: r.get::<i64, _>(5) as u64,
        status: ToolStatus::parse(&status).unwrap_or(ToolStatus::Pending),
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
        participant_id: r.get(18),
    };
    (pair, r.get(17))
}

/// A `messages` row (`seq, event_id, message_id, role, participant_id, text, tokens`) as its
/// message id and a [`TimelineMessage`] without tool calls yet.
fn timeline_message<'r, R>(r: &'r R) -> (String, TimelineMessage)
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    (
        r.get(2),
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
}

/// What a snapshot takes from the `sessions` row.
struct SessionInfo {
    started_event_id: Option<String>,
    model: String,
    context_window_tokens: u32,
    reserved_output_tokens: u32,
    system_prompt: Option<String>,
    system_prompt_tokens: u64,
    tools: Vec<strata_core::payload::ToolSpec>,
    tools_tokens: u64,
}

impl SessionInfo {
    /// Before `SessionStarted` is projected (events may precede it).
    fn unknown() -> Self {
        Self {
            started_event_id: None,
            model: "unknown".into(),
            context_window_tokens: 0,
            reserved_output_tokens: 0,
            system_prompt: None,
            system_prompt_tokens: 0,
            tools: Vec::new(),
            tools_tokens: 0,
        }
    }

    fn from_row<'r, R>(r: &'r R) -> Result<Self>
    where
        R: Row,
        usize: ColumnIndex<R>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        i64: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(Self {
            started_event_id: Some(r.get(0)),
            model: r.get(1),
            context_window_tokens: r.get::<i64, _>(2) as u32,
            reserved_output_tokens: r.get::<i64, _>(3) as u32,
            system_prompt: r.get(4),
            system_prompt_tokens: r.get::<i64, _>(5) as u64,
            tools: parse_json(&r.get::<String, _>(6), "session tools")?,
            tools_tokens: r.get::<i64, _>(7) as u64,
        })
    }
}

/// The assembler's snapshot of a session's branch, read from either backend's pool: the newest
/// `window` messages of the branch lineage, the tool calls requested in that window (attached to
/// the message that asked for them; a call requested without a message stands as its own step),
/// the calls still open from before the window, and the session's static facts. `fold` is the
/// session's stored fold; `None` for a branch it does not know.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn snapshot<DB>(
    pool: &Pool<DB>,
    dialect: Dialect,
    fold: SessionFold,
    tenant: &str,
    session: &str,
    branch: &str,
    participant: Option<&str>,
    window: u32,
) -> Result<Option<Snapshot>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> DB::Arguments<'a>: IntoArguments<'a, DB>,
    for<'a> String: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> bool: Decode<'a, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let Some(lineage) = fold.lineage(branch) else {
        return Ok(None);
    };
    let stored = dialect.stored_text;
    // Each statement is built in a block of its own: its arguments' lifetime is then free to
    // end with the borrow of its SQL text.
    let Statement { sql, args } = Statement::for_session(
        "SELECT started_event_id, model, context_window_tokens, reserved_output_tokens, \
         system_prompt, system_prompt_tokens, tools, tools_tokens FROM sessions",
        stored,
        tenant,
        session,
    );
    let info = match sqlx::query_with(&sql, args).fetch_optional(pool).await? {
        Some(r) => SessionInfo::from_row(&r)?,
        None => SessionInfo::unknown(),
    };

    // The newest `window` messages of the lineage, oldest first.
    let Statement { sql, args } = {
        let mut q = Statement::for_session(
            "SELECT seq, event_id, message_id, role, participant_id, text, tokens FROM messages",
            stored,
            tenant,
            session,
        );
        q.push(" AND ")
            .lineage(&lineage, "seq", stored)
            .push(" ORDER BY seq DESC LIMIT ")
            .bind(i64::from(window));
        q
    };
    let rows = sqlx::query_with(&sql, args).fetch_all(pool).await?;
    let mut messages: Vec<(String, TimelineMessage)> =
        rows.iter().rev().map(timeline_message).collect();
    let min_seq = messages.first().map(|(_, m)| m.seq).unwrap_or(u64::MAX);

    let Statement { sql, args } = {
        let mut q =
            Statement::for_session("SELECT count(*) FROM messages", stored, tenant, session);
        q.push(" AND ")
            .lineage(&lineage, "seq", stored)
            .push(" AND seq < ")
            .bind(min_seq.min(i64::MAX as u64) as i64);
        q
    };
    let before_window: i64 = sqlx::query_with(&sql, args).fetch_one(pool).await?.get(0);
    // Messages of the session outside the lineage (sibling branches, an ancestor past the fork):
    // never candidates, but counted apart from budget exclusions. A session of one branch has
    // none, and is spared the scan.
    let (other_branch_messages, other_branch_tokens): (i64, i64) = if fold.branches.len() > 1 {
        let Statement { sql, args } = {
            let mut q = Statement::for_session(
                "SELECT count(*), CAST(coalesce(sum(tokens), 0) AS BIGINT) FROM messages",
                stored,
                tenant,
                session,
            );
            q.push(" AND NOT ").lineage(&lineage, "seq", stored);
            q
        };
        let row = sqlx::query_with(&sql, args).fetch_one(pool).await?;
        (row.get(0), row.get(1))
    } else {
        (0, 0)
    };

    // Tool calls of the window (and open ones from before it).
    let window_start = if messages.is_empty() { 0 } else { min_seq };
    let Statement { sql, args } = {
        let mut q = Statement::for_session(
            &format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls"),
            stored,
            tenant,
            session,
        );
        q.push(" AND request_seq >= ")
            .bind(window_start as i64)
            .push(" AND ")
            .lineage(&lineage, "request_seq", stored)
            .push(" ORDER BY request_seq, ")
            .push(dialect.insertion_order);
        q
    };
    let mut calls: Vec<(ToolPair, Option<String>)> = sqlx::query_with(&sql, args)
        .fetch_all(pool)
        .await?
        .iter()
        .map(tool_pair)
        .collect();
    // Open calls older than the window (rare): by id, from the fold, in id order.
    let old_open: Vec<&String> = fold
        .open_tool_calls
        .values()
        .filter(|c| c.request_seq < window_start)
        .map(|c| &c.tool_call_id)
        .collect();
    for chunk in old_open.chunks(INSERT_CHUNK) {
        let Statement { sql, args } = {
            let mut q = Statement::for_session(
                &format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls"),
                stored,
                tenant,
                session,
            );
            q.push(" AND tool_call_id IN (");
            for (i, id) in chunk.iter().enumerate() {
                if i > 0 {
                    q.push(", ");
                }
                q.bind(stored(id).into_owned());
            }
            q.push(")");
            q
        };
        let rows = sqlx::query_with(&sql, args).fetch_all(pool).await?;
        let mut old: Vec<_> = rows.iter().map(tool_pair).collect();
        old.sort_by(|(a, _), (b, _)| a.tool_call_id.cmp(&b.tool_call_id));
        calls.extend(old);
    }

    // Each call joins the assistant message that asked for it.
    let by_message: HashMap<String, usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, (_, m))| m.role == "assistant")
        .map(|(i, (id, _))| (id.clone(), i))
        .collect();
    let mut loose = Vec::new();
    for (pair, message_id) in calls {
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
                        participant_id: pair.participant_id.clone(),
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

    // Governed memory: the project, the candidates, the latest successful compaction of the
    // branch, and the snapshot's clock.
    let (project_id, user_id) = session_project(pool, stored, tenant, session, &info).await?;
    let memories = snapshot_memories(
        pool,
        stored,
        tenant,
        session,
        project_id.as_deref(),
        user_id.as_deref(),
    )
    .await?;
    let Statement { sql, args } = {
        let mut q =
            Statement::for_session("SELECT record FROM compactions", stored, tenant, session);
        q.push(" AND branch_id = ")
            .bind(stored(branch).into_owned())
            .push(" ORDER BY seq DESC");
        q
    };
    let mut compaction = None;
    for r in sqlx::query_with(&sql, args).fetch_all(pool).await? {
        let p: CompactionCompleted = parse_json(&r.get::<String, _>(0), "compaction record")?;
        if let Some(c) = CompactionRecord::from_payload(&p).filter(CompactionRecord::succeeded) {
            compaction = Some(c);
            break;
        }
    }
    // The snapshot's clock: the timestamp of the session's newest event (highest seq), one
    // primary-key lookup rather than a scan of the session for the largest timestamp.
    let Statement { sql, args } = {
        // The snapshot's clock is the agent's newest event, not a service's: recording an
        // assembly (stamped when it was made) must not age the memories of the next one.
        let mut q = Statement::for_session("SELECT timestamp FROM events", stored, tenant, session);
        q.push(
            " AND event_type NOT IN ('ContextBuilt', 'MemoryRecorded', 'MemorySuperseded', \
             'CompactionCompleted') ORDER BY seq DESC LIMIT 1",
        );
        q
    };
    let as_of: Option<String> = sqlx::query_with(&sql, args)
        .fetch_optional(pool)
        .await?
        .map(|r| r.get::<String, _>(0));

    let participant_id = participant
        .map(str::to_owned)
        .or_else(|| fold.primary_participant.clone())
        .unwrap_or_else(|| DEFAULT_PARTICIPANT.to_owned());
    let branch_fold = &fold.branches[branch];
    Ok(Some(Snapshot {
        tenant_id: tenant.to_owned(),
        session_id: session.to_owned(),
        branch_id: branch.to_owned(),
        participant_id,
        head_seq: fold.head_seq,
        model: info.model,
        context_window_tokens: info.context_window_tokens,
        reserved_output_tokens: info.reserved_output_tokens,
        system_prompt: info.system_prompt,
        system_prompt_tokens: info.system_prompt_tokens,
        session_started_event_id: info.started_event_id,
        tools: info.tools,
        tools_tokens: info.tools_tokens,
        state: branch_fold.state.clone(),
        messages: messages.into_iter().map(|(_, m)| m).collect(),
        messages_before_window: before_window as u64,
        loose_tool_calls: loose,
        transcript_tokens: branch_fold.transcript_tokens,
        orphan_results: fold.orphan_results,
        project_id,
        user_id,
        memories,
        compaction,
        as_of,
        other_branch_messages: other_branch_messages as u64,
        other_branch_tokens: other_branch_tokens as u64,
        lineage: lineage.clone(),
    }))
}

/// A session's newest memories offered to the policy, and as many of the newest shared ones.
const SNAPSHOT_SESSION_MEMORIES: i64 = 2000;
const SNAPSHOT_SHARED_MEMORIES: i64 = 500;

/// The project a session's memories are filed under, derived from its `SessionStarted` as the
/// memory extractor derives it (so project memories are found before the session has recorded
/// one of its own), failing that the project of its own memories; and the end user it serves.
async fn session_project<DB>(
    pool: &Pool<DB>,
    stored: StoredText,
    tenant: &str,
    session: &str,
    info: &SessionInfo,
) -> Result<(Option<String>, Option<String>)>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> DB::Arguments<'a>: IntoArguments<'a, DB>,
    for<'a> String: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    if let Some(started) = &info.started_event_id {
        let Statement { sql, args } = {
            let mut q = Statement::new("SELECT body FROM events WHERE tenant_id = ");
            q.bind(stored(tenant).into_owned())
                .push(" AND event_id = ")
                .bind(stored(started).into_owned());
            q
        };
        if let Some(r) = sqlx::query_with(&sql, args).fetch_optional(pool).await? {
            let event: strata_core::Event = parse_json(&r.get::<String, _>(0), "event body")?;
            if let strata_core::payload::Payload::SessionStarted(p) = &event.payload {
                return Ok((
                    Some(strata_core::memory::project_of_start(p, session)),
                    strata_core::memory::user_of_start(p),
                ));
            }
        }
    }
    let Statement { sql, args } = {
        let mut q =
            Statement::for_session("SELECT project_id FROM memories", stored, tenant, session);
        q.push(" AND project_id IS NOT NULL ORDER BY seq LIMIT 1");
        q
    };
    let project = sqlx::query_with(&sql, args)
        .fetch_optional(pool)
        .await?
        .map(|r| r.get::<String, _>(0));
    Ok((project, None))
}

/// The memories a snapshot offers, oldest first: the session's newest, then the newest shared
/// ones of its tenant (global scope, user scope of its end user, project/workspace scope of its
/// project) by
/// when they were observed. Newest, not oldest: on a long run the recent ones are the useful
/// ones, and the policy ranks what it is given.
async fn snapshot_memories<DB>(
    pool: &Pool<DB>,
    stored: StoredText,
    tenant: &str,
    session: &str,
    project: Option<&str>,
    user: Option<&str>,
) -> Result<Vec<Memory>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'a> DB::Arguments<'a>: IntoArguments<'a, DB>,
    for<'a> String: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let mut memories = Vec::new();
    let Statement { sql, args } = {
        let mut q = Statement::new("SELECT record, superseded_by FROM memories WHERE tenant_id = ");
        q.bind(stored(tenant).into_owned())
            .push(" AND session_id <> ")
            .bind(stored(session).into_owned())
            .push(" AND (scope = 'global'");
        if let Some(u) = user {
            q.push(" OR (scope = 'user' AND user_id = ")
                .bind(stored(u).into_owned())
                .push(")");
        }
        if let Some(p) = project {
            q.push(" OR (scope IN ('project', 'workspace') AND project_id = ")
                .bind(stored(p).into_owned())
                .push(")");
        }
        q.push(") ORDER BY observed_at DESC, memory_id DESC LIMIT ")
            .bind(SNAPSHOT_SHARED_MEMORIES);
        q
    };
    let shared = sqlx::query_with(&sql, args).fetch_all(pool).await?;
    push_memories(&mut memories, &shared)?;
    let Statement { sql, args } = {
        let mut q = Statement::for_session(
            "SELECT record, superseded_by FROM memories",
            stored,
            tenant,
            session,
        );
        q.push(" ORDER BY seq DESC, memory_id DESC LIMIT ")
            .bind(SNAPSHOT_SESSION_MEMORIES);
        q
    };
    let own = sqlx::query_with(&sql, args).fetch_all(pool).await?;
    push_memories(&mut memories, &own)?;
    Ok(memories)
}

/// Memory rows read newest first, pushed oldest first as the policy reads them. A record that
/// is not a governed memory (invariants 10, 11) is never offered.
fn push_memories<R: Row>(memories: &mut Vec<Memory>, rows: &[R]) -> Result<()>
where
    for<'a> String: Decode<'a, R::Database> + Type<R::Database>,
    usize: ColumnIndex<R>,
{
    for r in rows.iter().rev() {
        let record: MemoryRecorded = parse_json(&r.get::<String, _>(0), "memory record")?;
        if let Ok(mut m) = Memory::from_payload(&record) {
            m.superseded_by = r.get::<Option<String>, _>(1);
            memories.push(m);
        }
    }
    Ok(())
}

/// A row of `sessions_listing`: id, head seq, events, fold, last timestamp, model, participants
/// (newline-separated: ids never hold control characters).
pub(crate) fn session_listing(
    id: String,
    head_seq: i64,
    event_count: i64,
    fold: &str,
    last_event_at: Option<String>,
    model: Option<String>,
    participants: Option<String>,
) -> Result<crate::SessionListing> {
    let mut participants: Vec<String> = participants
        .unwrap_or_default()
        .split('\n')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    participants.sort();
    Ok(crate::SessionListing {
        session_id: id,
        head_seq: head_seq as u64,
        event_count: event_count as u64,
        last_event_at,
        model,
        participants,
        fold: parse_fold(fold)?,
    })
}
