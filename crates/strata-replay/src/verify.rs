//! Verification of a rebuilt projection set against the live one: row count and content hash
//! per table (the store's own [`ProjectionStore::fingerprint`]) and a content hash per session.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use strata_store::ProjectionStore;

use crate::Result;

/// Events read per page when hashing a session.
const PAGE: u32 = 5000;

/// What a verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Tables compared, with their row count in the live set.
    pub tables: BTreeMap<String, u64>,
    /// Sessions whose content hash was compared.
    pub sessions: u64,
    /// Every difference found; empty when the sets are equal.
    pub differences: Vec<String>,
}

impl Verification {
    /// Whether the two sets are equal.
    pub fn ok(&self) -> bool {
        self.differences.is_empty()
    }
}

/// SHA-256 of a session's content: its fold state and every projected event, in seq order.
pub async fn session_hash(
    store: &dyn ProjectionStore,
    tenant: &str,
    session: &str,
) -> Result<String> {
    let mut text = String::new();
    match store.session_fold(tenant, session).await? {
        Some(fold) => text.push_str(&serde_json::to_string(&fold).unwrap_or_default()),
        None => text.push_str("null"),
    }
    text.push('\n');
    let mut after = 0u64;
    loop {
        let page = store.events(tenant, session, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        let next = last.get("seq").and_then(|s| s.as_u64()).unwrap_or(u64::MAX);
        for e in &page {
            text.push_str(&e.to_string());
            text.push('\n');
        }
        if next <= after || page.len() < PAGE as usize {
            break;
        }
        after = next;
    }
    Ok(strata_core::sha256_hex(text.as_bytes()))
}

/// Compares `candidate` with `live`: every fingerprinted table, then every session of `tenants`.
pub async fn compare(
    live: &dyn ProjectionStore,
    candidate: &dyn ProjectionStore,
    tenants: &BTreeSet<String>,
) -> Result<Verification> {
    let mut v = compare_tables(live, candidate).await?;
    for tenant in tenants {
        let live_sessions: BTreeSet<String> = live
            .sessions(tenant)
            .await?
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        let new_sessions: BTreeSet<String> = candidate
            .sessions(tenant)
            .await?
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        for s in live_sessions.symmetric_difference(&new_sessions) {
            v.differences.push(format!(
                "session {tenant}/{s}: only in the {} set",
                if live_sessions.contains(s) {
                    "live"
                } else {
                    "rebuilt"
                }
            ));
        }
        let both = live_sessions
            .intersection(&new_sessions)
            .map(|s| (tenant.clone(), s.clone()));
        compare_sessions(live, candidate, both, &mut v).await?;
    }
    Ok(v)
}

/// Compares `candidate` with `live` after both moved on from an equal state: every table, and
/// only the sessions the events in between touched (the others were compared already and
/// neither set changed them since).
pub async fn compare_moved(
    live: &dyn ProjectionStore,
    candidate: &dyn ProjectionStore,
    touched: &BTreeSet<(String, String)>,
) -> Result<Verification> {
    let mut v = compare_tables(live, candidate).await?;
    compare_sessions(live, candidate, touched.iter().cloned(), &mut v).await?;
    Ok(v)
}

/// Row count and content of every fingerprinted table.
async fn compare_tables(
    live: &dyn ProjectionStore,
    candidate: &dyn ProjectionStore,
) -> Result<Verification> {
    let mut v = Verification::default();
    let a = live.fingerprint().await?;
    let b = candidate.fingerprint().await?;
    for (table, (count, hash)) in &a {
        v.tables.insert(table.clone(), *count);
        match b.get(table) {
            None => v
                .differences
                .push(format!("table {table}: missing in the rebuilt set")),
            Some((c, _)) if c != count => v
                .differences
                .push(format!("table {table}: {count} rows live, {c} rebuilt")),
            Some((_, h)) if h != hash => v
                .differences
                .push(format!("table {table}: same row count, different content")),
            Some(_) => {}
        }
    }
    for table in b.keys().filter(|t| !a.contains_key(*t)) {
        v.differences
            .push(format!("table {table}: only in the rebuilt set"));
    }
    Ok(v)
}

/// Content hash of each session in both sets.
async fn compare_sessions(
    live: &dyn ProjectionStore,
    candidate: &dyn ProjectionStore,
    sessions: impl Iterator<Item = (String, String)>,
    v: &mut Verification,
) -> Result<()> {
    for (tenant, s) in sessions {
        v.sessions += 1;
        let (x, y) = (
            session_hash(live, &tenant, &s).await?,
            session_hash(candidate, &tenant, &s).await?,
        );
        if x != y {
            v.differences
                .push(format!("session {tenant}/{s}: content hash differs"));
        }
    }
    Ok(())
}
