//! A whole tenant forgotten as a job: recorded before it begins (an audit entry that names the
//! tenant and no session, pending), run in steps whose progress the caller follows, and finished
//! by [`super::resume_pending`] — at the next start of a service, or `strata forget --resume` —
//! when a crash cuts it short. Running it again is harmless: what is forgotten is not found
//! again.

use std::sync::Arc;

use serde::Serialize;
use strata_keys::ForgetEntry;
use strata_runtime::Backends;
use strata_store::ProjectionStore;

use super::{forget_tenant, key_ring, random_hex, OnProgress, TenantForgetReport};
use crate::Result;

/// What the audit keeps of a tenant's forget: counts only, no session id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TenantJobReport {
    pub kind: String,
    pub sessions_forgotten: usize,
    pub not_forgettable: usize,
    pub api_keys_revoked: u64,
}

/// Records the forget of `tenant` as pending and returns its entry, for [`run`].
pub async fn begin(backends: &Backends, tenant: &str, requested_by: &str) -> Result<ForgetEntry> {
    let ring = key_ring(backends)?;
    let entry = ForgetEntry {
        forget_id: format!("fg_{}", random_hex()),
        tenant_id: tenant.to_owned(),
        subject_hash: tenant_hash(tenant),
        session_id: None,
        requested_by: requested_by.to_owned(),
        requested_at: strata_store::now_utc(),
        completed_at: None,
        report: None,
    };
    ring.store().record_forget(&entry).await?;
    Ok(entry)
}

/// Forgets the tenant of `entry` ([`forget_tenant`]) and records the entry done with its counts.
pub async fn run(
    backends: &Backends,
    other_sets: &[Arc<dyn ProjectionStore>],
    mut entry: ForgetEntry,
    consumers_running: bool,
    on_progress: OnProgress<'_>,
) -> Result<TenantForgetReport> {
    let report = forget_tenant(
        backends,
        other_sets,
        &entry.tenant_id,
        &entry.requested_by,
        consumers_running,
        on_progress,
    )
    .await?;
    let kept = TenantJobReport {
        kind: "tenant".into(),
        sessions_forgotten: report.sessions.len(),
        not_forgettable: report.not_forgettable.len(),
        api_keys_revoked: report.api_keys_revoked,
    };
    entry.completed_at = Some(strata_store::now_utc());
    entry.report = Some(serde_json::to_string(&kept).expect("counts serialize"));
    key_ring(backends)?.store().record_forget(&entry).await?;
    Ok(report)
}

/// A forget's audit entry by its id, pending or done; `None` when there is none.
pub async fn find(backends: &Backends, forget_id: &str) -> Result<Option<ForgetEntry>> {
    let ring = key_ring(backends)?;
    Ok(ring
        .store()
        .forgets(false)
        .await?
        .into_iter()
        .find(|e| e.forget_id == forget_id))
}

/// Whether `entry` is a tenant's forget (it names no session, pending or done).
pub fn is_tenant_job(entry: &ForgetEntry) -> bool {
    entry.subject_hash == tenant_hash(&entry.tenant_id)
}

/// The audit trail's name for a tenant as the subject of a forget.
fn tenant_hash(tenant: &str) -> String {
    super::subject_of(tenant, "tenant:", "")
}
