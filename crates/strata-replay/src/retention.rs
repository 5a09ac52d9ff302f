//! Retention: the sessions a tenant has not moved for longer than it keeps them, forgotten as
//! [`crate::forget`] forgets (keys destroyed, derived copies deleted, an audit entry each). A
//! session is idle by its newest event's own timestamp, so an imported history ages from when it
//! happened, not from when it was imported. Run as a verb on a schedule (`strata retention`).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use strata_runtime::Backends;
use strata_store::ProjectionStore;

use crate::forget::{self, NotForgettable, OnProgress};
use crate::Result;

/// Sessions read per page of the listing.
const PAGE: u32 = 500;

/// What retention found, and did, for one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    pub tenant_id: String,
    /// Sessions looked at, and of them those idle past the cutoff.
    pub examined: usize,
    pub idle: usize,
    /// Sessions whose newest event carries no timestamp that parses: kept, and counted.
    pub undated: usize,
    /// Sessions forgotten (none on a dry run).
    pub forgotten: usize,
    /// Idle sessions left as they were: events on the log in the clear.
    pub not_forgettable: Vec<NotForgettable>,
    /// On a dry run, the idle sessions that a run would forget.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_forget: Vec<String>,
}

/// Whether a session whose newest event was at `last_event_at` is idle at `cutoff`; `None` when
/// the timestamp is missing or does not parse.
pub fn is_idle(last_event_at: Option<&str>, cutoff: DateTime<Utc>) -> Option<bool> {
    let at = DateTime::parse_from_rfc3339(last_event_at?).ok()?;
    Some(at.with_timezone(&Utc) < cutoff)
}

/// The sessions of `tenant` idle at `cutoff`, with the counts of the report.
pub async fn idle_sessions(
    store: &dyn ProjectionStore,
    tenant: &str,
    cutoff: DateTime<Utc>,
) -> Result<(Vec<String>, RetentionReport)> {
    let mut report = RetentionReport {
        tenant_id: tenant.to_owned(),
        ..RetentionReport::default()
    };
    let mut idle = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .sessions_listing(tenant, after.as_deref(), PAGE, None)
            .await?;
        for s in &page {
            report.examined += 1;
            match is_idle(s.last_event_at.as_deref(), cutoff) {
                Some(true) => idle.push(s.session_id.clone()),
                Some(false) => {}
                None => report.undated += 1,
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = Some(last.session_id.clone()),
            _ => break,
        }
    }
    report.idle = idle.len();
    Ok((idle, report))
}

/// Forgets the sessions of `tenant` idle for more than `idle_days` (only reports them when
/// `dry_run`).
pub async fn apply(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    tenant: &str,
    idle_days: u32,
    dry_run: bool,
    consumers_running: bool,
    on_progress: OnProgress<'_>,
) -> Result<RetentionReport> {
    let cutoff = Utc::now() - Duration::days(i64::from(idle_days));
    let (idle, mut report) = idle_sessions(backends.store.as_ref(), tenant, cutoff).await?;
    if dry_run || idle.is_empty() {
        report.would_forget = if dry_run { idle } else { Vec::new() };
        return Ok(report);
    }
    let requested_by = format!("retention: idle for more than {idle_days} day(s)");
    let forgot = forget::forget_sessions(
        backends,
        other_sets,
        tenant,
        idle,
        &requested_by,
        consumers_running,
        on_progress,
    )
    .await?;
    report.forgotten = forgot.sessions.len();
    report.not_forgettable = forgot.not_forgettable;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_idle_by_its_newest_events_own_time() {
        let cutoff = DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(is_idle(Some("2026-05-31T23:59:59Z"), cutoff), Some(true));
        assert_eq!(is_idle(Some("2026-06-01T00:00:00Z"), cutoff), Some(false));
        assert_eq!(
            is_idle(Some("2026-06-01T01:00:00+02:00"), cutoff),
            Some(true),
            "an offset is honoured"
        );
        assert_eq!(is_idle(Some("yesterday"), cutoff), None);
        assert_eq!(is_idle(None, cutoff), None);
    }
}
