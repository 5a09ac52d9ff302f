//! Forgetting a session for real (`docs/design/forgetting.md`): its data key destroyed, so every
//! copy of its events on the log and in the archive is unreadable at once, and every derived copy
//! deleted — hot state, every projection set, the artifacts only it referred to — with an audit
//! entry that holds no content.
//!
//! Order, each step idempotent, so a forget cut short (kill -9) is finished by running it again
//! or by [`resume_pending`]: audit entry (pending, with the session id) → key destroyed → hot
//! state → projections (one transaction per set: readers see the session whole or not at all) →
//! blobs → audit entry done (the session id replaced by its hash).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};
use strata_codec::Record;
use strata_keys::{ForgetEntry, KeyRing, KEY_CACHE_TTL};
use strata_runtime::{Backends, ProjectionSets};
use strata_store::ProjectionStore;

use crate::rebuild::PROJECTOR_GROUP;
use crate::{Error, Result};

pub mod job;

/// What a forget did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ForgetReport {
    pub forget_id: String,
    pub tenant_id: String,
    pub session_id: String,
    /// The session's events on the log, all sealed (now unreadable).
    pub sealed_events: u64,
    /// Whether this run destroyed the key (false: it was destroyed already).
    pub key_destroyed: bool,
    /// Rows removed from the projections, by table, over every projection set.
    pub rows: BTreeMap<String, u64>,
    /// Projection sets the session was removed from.
    pub sets: u64,
    /// Artifact blobs deleted (those no other session of the tenant refers to).
    pub artifacts_deleted: u64,
    /// The sessions of the subagents it started (and theirs), forgotten with it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<ForgetReport>,
}

/// The projection sets besides the live one (older rebuild generations, which hold the session
/// too), with their names.
pub async fn older_projection_sets(
    backends: &Backends,
) -> Result<Vec<(String, Arc<dyn ProjectionStore>)>> {
    let mut out: Vec<(String, Arc<dyn ProjectionStore>)> = Vec::new();
    match &backends.projection_sets {
        ProjectionSets::Embedded(dir) => {
            for g in crate::rebuild::generations(dir)? {
                if !g.current {
                    let path = dir.join(&g.file).display().to_string();
                    let store = strata_store::sqlite::SqliteStore::open(&path).await?;
                    out.push((g.file, Arc::new(store)));
                }
            }
        }
        ProjectionSets::Postgres(url) => {
            let gens = strata_store::postgres::generations::PgGenerations::connect(url).await?;
            for g in gens.list().await? {
                if !g.current {
                    let store =
                        strata_store::postgres::PgStore::open_generation(url, &g.schema).await?;
                    out.push((g.schema, Arc::new(store)));
                }
            }
        }
        ProjectionSets::Single => {}
    }
    Ok(out)
}

/// Forgets `session` of `tenant`. `other_sets` are the projection sets besides the live one
/// (older rebuild generations) that must lose it too. Refused, with nothing changed, when the
/// log holds any of the session's events in the clear (sealing was off when they were written):
/// destroying the key would not make those unreadable.
pub async fn forget_session(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    session: &str,
    requested_by: &str,
    consumers_running: bool,
) -> Result<ForgetReport> {
    let ring = key_ring(backends)?;
    let subagents = subagent_sessions(backends, tenant, session).await?;
    if !subagents.is_empty() {
        return forget_with_subagents(
            backends,
            other_sets,
            tenant,
            session,
            subagents,
            requested_by,
            consumers_running,
        )
        .await;
    }
    let sealed_events = check_sealed(backends, tenant, session).await?;
    let mut entry = pending_entry(tenant, session, requested_by);
    ring.store().record_forget(&entry).await?;
    let mut report = carry_out(backends, ring, other_sets, &mut entry, consumers_running).await?;
    report.sealed_events = sealed_events;
    Ok(report)
}

/// Forgets `session` and the `subagents` sessions it started, together: refused with nothing
/// changed when any of them has events on the log in the clear.
async fn forget_with_subagents(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    session: &str,
    subagents: Vec<String>,
    requested_by: &str,
    consumers_running: bool,
) -> Result<ForgetReport> {
    let all: Vec<String> = std::iter::once(session.to_owned())
        .chain(subagents)
        .collect();
    for s in &all {
        check_sealed(backends, tenant, s)
            .await
            .map_err(|e| match e {
                Error::Invalid(why) if s != session => {
                    Error::Invalid(format!("its subagent's session {s}: {why}"))
                }
                e => e,
            })?;
    }
    let forgot = forget_sessions(
        backends,
        other_sets,
        tenant,
        all,
        requested_by,
        consumers_running,
        &no_progress,
    )
    .await?;
    let mut reports = forgot.sessions.into_iter();
    let mut report = reports
        .next()
        .ok_or_else(|| Error::Invalid(format!("session {session} was not forgotten")))?;
    report.subagents = reports.collect();
    Ok(report)
}

/// The sessions of the subagents `session` started (`SubagentStarted`), and of theirs, that are
/// projected, each once.
async fn subagent_sessions(
    backends: &Backends,
    tenant: &str,
    session: &str,
) -> Result<Vec<String>> {
    let mut found: Vec<String> = Vec::new();
    let mut next = vec![session.to_owned()];
    while let Some(parent) = next.pop() {
        for event in backends
            .store
            .events_through(tenant, &parent, u64::MAX)
            .await?
        {
            let strata_core::payload::Payload::SubagentStarted(p) = &event.payload else {
                continue;
            };
            let child = &p.child_session_id;
            if child == session || found.contains(child) {
                continue;
            }
            if backends.store.session_fold(tenant, child).await?.is_some() {
                found.push(child.clone());
                next.push(child.clone());
            }
        }
    }
    Ok(found)
}

/// The audit entry of a forget about to begin: pending, with the session's id.
fn pending_entry(tenant: &str, session: &str, requested_by: &str) -> ForgetEntry {
    ForgetEntry {
        forget_id: format!("fg_{}", random_hex()),
        tenant_id: tenant.to_owned(),
        subject_hash: subject_hash(tenant, session),
        session_id: Some(session.to_owned()),
        requested_by: requested_by.to_owned(),
        requested_at: strata_store::now_utc(),
        completed_at: None,
        report: None,
    }
}

/// What forgetting a whole tenant did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TenantForgetReport {
    pub tenant_id: String,
    /// Each session forgotten.
    pub sessions: Vec<ForgetReport>,
    /// Sessions left as they were, and why: some of their events are on the log in the clear.
    pub not_forgettable: Vec<NotForgettable>,
    /// API keys of the tenant revoked by this run.
    pub api_keys_revoked: u64,
}

/// A session a tenant forget could not make unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotForgettable {
    pub session_id: String,
    pub why: String,
}

/// How far a forget of many sessions is, in counts only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Sessions to forget, and of them those with events in the clear (left as they were).
    pub sessions: usize,
    pub not_forgettable: usize,
    /// Keys destroyed: from here the sessions' events are unreadable everywhere.
    pub keys_destroyed: usize,
    /// Sessions whose derived copies are deleted too: done.
    pub forgotten: usize,
    pub api_keys_revoked: u64,
}

/// Told of each step of a forget of many sessions.
pub type OnProgress<'a> = &'a (dyn Fn(&Progress) + Send + Sync);

/// For callers that follow no progress.
pub fn no_progress(_: &Progress) {}

/// Forgets every session of `tenant` (each with its audit entry, as [`forget_session`] does)
/// after revoking its API keys, so that it writes nothing new meanwhile ([`forget_sessions`]).
pub async fn forget_tenant(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    requested_by: &str,
    consumers_running: bool,
    on_progress: OnProgress<'_>,
) -> Result<TenantForgetReport> {
    let mut api_keys_revoked = 0;
    let now = strata_store::now_utc();
    for key in backends.store.api_keys(Some(tenant)).await? {
        if key.revoked_at.is_none() && backends.store.revoke_api_key(&key.key_id, &now).await? {
            api_keys_revoked += 1;
        }
    }
    let sessions = backends
        .store
        .sessions(tenant)
        .await?
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    let with_keys = |p: &Progress| {
        on_progress(&Progress {
            api_keys_revoked,
            ..p.clone()
        })
    };
    let forgot = forget_sessions(
        backends,
        other_sets,
        tenant,
        sessions,
        requested_by,
        consumers_running,
        &with_keys,
    )
    .await?;
    Ok(TenantForgetReport {
        tenant_id: tenant.to_owned(),
        sessions: forgot.sessions,
        not_forgettable: forgot.not_forgettable,
        api_keys_revoked,
    })
}

/// What forgetting a set of sessions did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionsForgotten {
    pub tenant_id: String,
    /// Each session forgotten.
    pub sessions: Vec<ForgetReport>,
    /// Sessions left as they were, and why: some of their events are on the log in the clear.
    pub not_forgettable: Vec<NotForgettable>,
}

/// Forgets every session of `tenant` that serves end user `user` (its `SessionStarted` names
/// the user), and with them the memories they were the source of ([`forget_sessions`]).
pub async fn forget_user(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    user: &str,
    requested_by: &str,
    consumers_running: bool,
) -> Result<SessionsForgotten> {
    let mut sessions = Vec::new();
    for summary in backends.store.sessions(tenant).await? {
        let first = backends
            .store
            .events_between(tenant, &summary.session_id, 0, u64::MAX, 16)
            .await?;
        let serves = first.iter().find_map(|e| match &e.payload {
            strata_core::payload::Payload::SessionStarted(p) => {
                Some(strata_core::memory::user_of_start(p).as_deref() == Some(user))
            }
            _ => None,
        });
        if serves == Some(true) {
            sessions.push(summary.session_id);
        }
    }
    forget_sessions(
        backends,
        other_sets,
        tenant,
        sessions,
        requested_by,
        consumers_running,
        &no_progress,
    )
    .await
}

/// Forgets `sessions` of `tenant`, each with its audit entry as [`forget_session`] does. Every
/// audit entry is written and every key destroyed before the services' trust in the keys is
/// waited out, once, and the derived copies are deleted: many sessions cost one wait, not one
/// each. A session with events on the log in the clear is left as it was and reported; a run
/// cut short is finished by [`resume_pending`], and running it again forgets what is left.
pub async fn forget_sessions(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    sessions: Vec<String>,
    requested_by: &str,
    consumers_running: bool,
    on_progress: OnProgress<'_>,
) -> Result<SessionsForgotten> {
    let ring = key_ring(backends)?;
    let mut report = SessionsForgotten {
        tenant_id: tenant.to_owned(),
        ..SessionsForgotten::default()
    };
    let mut progress = Progress {
        sessions: sessions.len(),
        ..Progress::default()
    };
    let mut begun = Vec::new();
    for session in sessions {
        match check_sealed(backends, tenant, &session).await {
            Ok(sealed_events) => {
                let entry = pending_entry(tenant, &session, requested_by);
                ring.store().record_forget(&entry).await?;
                begun.push((entry, sealed_events));
            }
            Err(Error::Invalid(why)) => report.not_forgettable.push(NotForgettable {
                session_id: session,
                why,
            }),
            Err(e) => return Err(e),
        }
    }
    progress.not_forgettable = report.not_forgettable.len();
    on_progress(&progress);
    let mut destroyed = Vec::with_capacity(begun.len());
    for (entry, _) in &begun {
        let session = entry.session_id.as_deref().unwrap_or_default();
        destroyed.push(ring.destroy_session_key(tenant, session).await?);
        progress.keys_destroyed += 1;
        on_progress(&progress);
    }
    if consumers_running && !begun.is_empty() {
        settle(backends).await?;
    }
    for ((mut entry, sealed_events), key_destroyed) in begun.into_iter().zip(destroyed) {
        let mut done = carry_out(backends, ring, other_sets, &mut entry, false).await?;
        done.sealed_events = sealed_events;
        done.key_destroyed = key_destroyed;
        report.sessions.push(done);
        progress.forgotten += 1;
        on_progress(&progress);
    }
    Ok(report)
}

/// Finishes every forget a crash cut short; returns what each did.
pub async fn resume_pending(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    consumers_running: bool,
) -> Result<Vec<ForgetReport>> {
    let Some(ring) = backends.codec.keys() else {
        return Ok(Vec::new());
    };
    let mut done = Vec::new();
    let (sessions, tenants): (Vec<_>, Vec<_>) = ring
        .store()
        .forgets(true)
        .await?
        .into_iter()
        .partition(|e| e.session_id.is_some());
    for mut entry in sessions {
        tracing::info!(forget_id = %entry.forget_id, "resuming a forget cut short");
        done.push(carry_out(backends, ring, other_sets, &mut entry, consumers_running).await?);
    }
    // A tenant's forget after its sessions' own: what it had begun is finished, the rest done.
    for entry in tenants {
        tracing::info!(forget_id = %entry.forget_id, "resuming a tenant's forget cut short");
        let report = job::run(backends, other_sets, entry, consumers_running, &no_progress).await?;
        done.extend(report.sessions);
    }
    Ok(done)
}

fn key_ring(backends: &Backends) -> Result<&Arc<KeyRing>> {
    backends.codec.keys().ok_or_else(|| {
        Error::Invalid(
            "forgetting needs a sealed log (a deployment that seals: `strata seal on`, with its \
             master key; `strata seal --migrate` seals an embedded log's history in place): \
             without one, the log keeps every event in the clear"
                .into(),
        )
    })
}

/// Counts the session's events on the log; an error when one of them is not sealed.
async fn check_sealed(backends: &Backends, tenant: &str, session: &str) -> Result<u64> {
    let positions = backends
        .store
        .session_log_positions(tenant, session)
        .await?;
    let mut plain = 0u64;
    for &(partition, offset) in &positions {
        let Some(record) = backends
            .log
            .read(partition, offset, 1)
            .await?
            .into_iter()
            .next()
        else {
            continue; // gone from the log (retention): nothing left to make unreadable there
        };
        if let Ok(Record::Plain(_)) = backends.codec.avro().decode_record(&record.value) {
            plain += 1;
        }
    }
    if plain > 0 {
        return Err(Error::Invalid(format!(
            "{plain} of the session's {} events are on the log in the clear (written while \
             sealing was off): destroying its key would not make them unreadable, so nothing \
             was forgotten (on an embedded deployment, `strata seal --migrate` seals them in \
             place)",
            positions.len()
        )));
    }
    Ok(positions.len() as u64)
}

async fn carry_out(
    backends: &Backends,
    ring: &KeyRing,
    other_sets: &[Arc<dyn ProjectionStore>],
    entry: &mut ForgetEntry,
    consumers_running: bool,
) -> Result<ForgetReport> {
    let tenant = entry.tenant_id.clone();
    let session = entry
        .session_id
        .clone()
        .ok_or_else(|| Error::Invalid(format!("forget {} is already done", entry.forget_id)))?;
    let key_destroyed = ring.destroy_session_key(&tenant, &session).await?;
    if consumers_running {
        settle(backends).await?;
    }
    backends.hot.forget_session(&tenant, &session).await?;
    let mut report = ForgetReport {
        forget_id: entry.forget_id.clone(),
        tenant_id: tenant.clone(),
        session_id: session.clone(),
        key_destroyed,
        ..ForgetReport::default()
    };
    let mut orphaned = Vec::new();
    for (i, store) in std::iter::once(&backends.store)
        .chain(other_sets)
        .enumerate()
    {
        let forgotten = store.forget_session(&tenant, &session).await?;
        for (table, rows) in forgotten.rows {
            *report.rows.entry(table).or_default() += rows;
        }
        if i == 0 {
            orphaned = forgotten.orphaned_artifacts;
        }
        report.sets += 1;
    }
    for sha256 in orphaned {
        // Its key first: a copy of a sealed artifact left anywhere is unreadable from here.
        ring.remove_artifact_key(&tenant, &sha256).await?;
        if backends.blobs.delete_artifact(&tenant, &sha256).await? {
            report.artifacts_deleted += 1;
        }
    }
    entry.session_id = None;
    entry.completed_at = Some(strata_store::now_utc());
    entry.report = Some(
        serde_json::json!({
            "key_destroyed": report.key_destroyed,
            "rows": report.rows,
            "sets": report.sets,
            "artifacts_deleted": report.artifacts_deleted,
        })
        .to_string(),
    );
    ring.store().record_forget(entry).await?;
    Ok(report)
}

/// Longest wait for the projector to pass what was on the log when the key was destroyed.
const PROJECTOR_WAIT: Duration = Duration::from_secs(120);

/// While other consumers run (services on shared backends, or those of `strata dev` beside its
/// HTTP API), they may still hold the destroyed key for up to [`KEY_CACHE_TTL`], and a projector
/// batch decoded with it may still be committing: both are waited out, or that batch would bring
/// rows back after they are deleted. A CLI verb on the embedded default is the only process.
async fn settle(backends: &Backends) -> Result<()> {
    tokio::time::sleep(KEY_CACHE_TTL).await;
    let end = backends.log.end_offsets().await?;
    let deadline = Instant::now() + PROJECTOR_WAIT;
    loop {
        let projected = backends.store.offsets(PROJECTOR_GROUP).await?;
        let behind = end
            .iter()
            .enumerate()
            .any(|(p, &e)| projected.get(&(p as u32)).copied().unwrap_or(0) < e);
        if !behind {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Pending(format!(
                "the projector did not reach the log's end within {} s; the key is destroyed and \
                 the forget is pending: run `strata forget --resume` once strata-projector runs",
                PROJECTOR_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The audit trail's name for a subject: no id in the clear once the forget is done.
fn subject_hash(tenant: &str, session: &str) -> String {
    subject_of(tenant, "session:", session)
}

/// SHA-256 of `tenant \0 kind id`, hex.
fn subject_of(tenant: &str, kind: &str, id: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(kind.as_bytes());
    hasher.update(id.as_bytes());
    hex::encode(hasher.finalize())
}

fn random_hex() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 12];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
