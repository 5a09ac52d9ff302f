//! Who may go ahead, and with what: per-session ordering of seq assignment and appends, and
//! each tenant's share of the work in flight.
//!
//! Ingest used to serialise every batch of the process behind one lock that also covered blob
//! writes and tokenizing, so one tenant's large batches stalled every other tenant. Now a batch
//! waits only for batches of the same sessions (or sessions sharing a lock stripe), and the
//! heavy work (artifacts, token counts, previews) is done before it waits at all.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use tokio::sync::MutexGuard;

/// Locks serialising seq assignment and appends per session, striped: a session always maps to
/// the same stripe, two sessions share one only by hash collision (which costs them
/// concurrency, never correctness). Across processes the hot state's compare-and-set on the
/// session head guards the seqs.
#[derive(Debug)]
pub(crate) struct SessionLocks {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

/// The guards of one batch's sessions, released together when dropped.
#[derive(Debug)]
pub(crate) struct SessionGuards<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl SessionLocks {
    /// Enough that concurrent sessions rarely collide, few enough to cost nothing (a mutex is
    /// a few words).
    const STRIPES: usize = 1024;

    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..Self::STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }

    fn stripe(tenant: &str, session: &str) -> usize {
        let mut h = DefaultHasher::new();
        (tenant, session).hash(&mut h);
        (h.finish() % Self::STRIPES as u64) as usize
    }

    /// Locks the stripes of `sessions` (tenant, session), in stripe order: two batches that
    /// share sessions take them in the same order, so they cannot deadlock.
    pub(crate) async fn lock<'a, 's>(
        &'a self,
        sessions: impl IntoIterator<Item = (&'s str, &'s str)>,
    ) -> SessionGuards<'a> {
        let mut stripes: Vec<usize> = sessions
            .into_iter()
            .map(|(tenant, session)| Self::stripe(tenant, session))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            guards.push(self.stripes[s].lock().await);
        }
        SessionGuards { _guards: guards }
    }
}

/// Events each tenant has in flight through this process, against a cap: a tenant over it is
/// refused (and told to retry) instead of queueing work in front of the other tenants.
#[derive(Debug)]
pub(crate) struct TenantQuota {
    /// Most events one tenant may have in flight; 0: no limit.
    limit: usize,
    in_flight: Mutex<HashMap<String, usize>>,
}

/// A tenant's share taken for one batch; given back when dropped.
#[derive(Debug)]
pub(crate) struct QuotaPermit<'a> {
    quota: &'a TenantQuota,
    tenant: String,
    events: usize,
}

impl TenantQuota {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `events` of `tenant`'s share, or answers how many it has in flight already. A batch
    /// alone is always let through, whatever its size (the batch cap bounds it).
    pub(crate) fn acquire(&self, tenant: &str, events: usize) -> Result<QuotaPermit<'_>, usize> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = in_flight.get(tenant).copied().unwrap_or(0);
        if self.limit > 0 && now > 0 && now + events > self.limit {
            return Err(now);
        }
        *in_flight.entry(tenant.to_owned()).or_default() += events;
        Ok(QuotaPermit {
            quota: self,
            tenant: tenant.to_owned(),
            events,
        })
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for QuotaPermit<'_> {
    fn drop(&mut self) {
        let mut in_flight = self
            .quota
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = in_flight.get_mut(&self.tenant) {
            *n = n.saturating_sub(self.events);
            if *n == 0 {
                in_flight.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_over_its_share_is_refused_and_the_others_are_not() {
        let quota = TenantQuota::new(100);
        let first = quota.acquire("a", 80).expect("under the cap");
        assert_eq!(quota.acquire("a", 30).unwrap_err(), 80);
        let other = quota
            .acquire("b", 80)
            .expect("another tenant has its own share");
        drop(first);
        let again = quota.acquire("a", 30).expect("given back when dropped");
        drop((other, again));
        assert!(quota.in_flight.lock().unwrap().is_empty());
    }

    #[test]
    fn a_batch_alone_passes_whatever_its_size_and_zero_means_no_limit() {
        let quota = TenantQuota::new(10);
        let big = quota.acquire("a", 10_000).expect("alone");
        assert!(quota.acquire("a", 1).is_err());
        drop(big);
        let unlimited = TenantQuota::new(0);
        let _a = unlimited.acquire("a", 10_000).unwrap();
        let _b = unlimited.acquire("a", 10_000).unwrap();
    }

    #[tokio::test]
    async fn batches_of_other_sessions_do_not_wait_and_of_the_same_session_do() {
        let locks = SessionLocks::new();
        let held = locks.lock([("t", "s1"), ("t", "s1")]).await;
        // Another session (a different stripe, found by trying) goes ahead at once.
        let other = (0..)
            .map(|i| format!("s{i}"))
            .find(|s| SessionLocks::stripe("t", s) != SessionLocks::stripe("t", "s1"))
            .unwrap();
        let free = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            locks.lock([("t", other.as_str())]),
        )
        .await;
        assert!(free.is_ok(), "a batch of another session waited");
        drop(free);
        let same = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            locks.lock([("t", "s1")]),
        )
        .await;
        assert!(same.is_err(), "a batch of the same session did not wait");
        drop(held);
        let _now = locks.lock([("t", "s1")]).await;
    }
}
