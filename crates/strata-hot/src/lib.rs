//! Hot state (SPEC §3): small, frequently read per-session facts kept next to the services —
//! the session's log head (for seq assignment and `expected_seq`), recently accepted event ids
//! (idempotency), and the projected state and open tool calls (the assembler's fast path).
//!
//! Hot state is a cache over the log and the projections: every value can be recomputed, so a
//! miss falls back to the projection store (slower, never wrong). `memory://` keeps it in
//! process, which is what the embedded default runs.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use strata_core::projection::{AgentState, OpenToolCall};
use tokio::sync::RwLock;

/// Errors of the hot state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL names a backend this build does not have.
    #[error("unsupported hot-state url {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: String },
    /// The backend could not be reached.
    #[error("hot state unavailable: {0}")]
    Unavailable(String),
}

/// Result with the hot state's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the projector last published for a session.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProjectedSession {
    /// Highest seq folded into the projections.
    pub projected_seq: u64,
    /// Agent state of the main branch.
    pub state: AgentState,
    pub open_tool_calls: Vec<OpenToolCall>,
}

/// The hot-state port.
#[async_trait]
pub trait HotState: Debug + Send + Sync + 'static {
    /// The session's log head: the highest seq ingest has assigned (`None`: unknown here).
    async fn log_head(&self, tenant: &str, session: &str) -> Result<Option<u64>>;

    /// Sets the log head to `new` if it is `expected` now (`None`: absent). Returns whether it
    /// was set: the atomic step behind `expected_seq`.
    async fn compare_and_set_log_head(
        &self,
        tenant: &str,
        session: &str,
        expected: Option<u64>,
        new: u64,
    ) -> Result<bool>;

    /// The seq an accepted event got, if this cache knows the event id.
    async fn accepted_seq(&self, tenant: &str, event_id: &str) -> Result<Option<u64>>;

    /// Remembers accepted event ids with their seqs.
    async fn remember_accepted(&self, tenant: &str, events: &[(String, u64)]) -> Result<()>;

    /// Publishes what the projector folded for a session.
    async fn put_projected(
        &self,
        tenant: &str,
        session: &str,
        value: ProjectedSession,
    ) -> Result<()>;

    /// What the projector last published for a session.
    async fn projected(&self, tenant: &str, session: &str) -> Result<Option<ProjectedSession>>;

    /// Checks that the backend is reachable.
    async fn ping(&self) -> Result<()>;
}

fn _assert_object_safe(_: &dyn HotState) {}

/// Opens the hot state a URL names: `memory://`.
pub fn open(url: &str) -> Result<Arc<dyn HotState>> {
    match url.split_once("://") {
        Some(("memory", _)) => Ok(Arc::new(MemoryHotState::default())),
        Some(("redis" | "rediss", _)) => Err(Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "the redis backend is not built yet (see the distributed-backends issue)"
                .into(),
        }),
        _ => Err(Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "expected memory://".into(),
        }),
    }
}

type Key = (String, String);

/// In-process hot state. Lost on restart by design: the embedded runtime brings the projections
/// up to the log head before it serves, and misses fall back to them.
#[derive(Debug, Default)]
pub struct MemoryHotState {
    heads: RwLock<HashMap<Key, u64>>,
    accepted: RwLock<HashMap<Key, u64>>,
    projected: RwLock<HashMap<Key, ProjectedSession>>,
}

fn key(a: &str, b: &str) -> Key {
    (a.to_owned(), b.to_owned())
}

#[async_trait]
impl HotState for MemoryHotState {
    async fn log_head(&self, tenant: &str, session: &str) -> Result<Option<u64>> {
        Ok(self.heads.read().await.get(&key(tenant, session)).copied())
    }

    async fn compare_and_set_log_head(
        &self,
        tenant: &str,
        session: &str,
        expected: Option<u64>,
        new: u64,
    ) -> Result<bool> {
        let mut heads = self.heads.write().await;
        let k = key(tenant, session);
        if heads.get(&k).copied() != expected {
            return Ok(false);
        }
        heads.insert(k, new);
        Ok(true)
    }

    async fn accepted_seq(&self, tenant: &str, event_id: &str) -> Result<Option<u64>> {
        Ok(self
            .accepted
            .read()
            .await
            .get(&key(tenant, event_id))
            .copied())
    }

    async fn remember_accepted(&self, tenant: &str, events: &[(String, u64)]) -> Result<()> {
        let mut accepted = self.accepted.write().await;
        for (id, seq) in events {
            accepted.insert(key(tenant, id), *seq);
        }
        Ok(())
    }

    async fn put_projected(
        &self,
        tenant: &str,
        session: &str,
        value: ProjectedSession,
    ) -> Result<()> {
        self.projected
            .write()
            .await
            .insert(key(tenant, session), value);
        Ok(())
    }

    async fn projected(&self, tenant: &str, session: &str) -> Result<Option<ProjectedSession>> {
        Ok(self
            .projected
            .read()
            .await
            .get(&key(tenant, session))
            .cloned())
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn compare_and_set_is_atomic_on_expected_value() {
        let h = MemoryHotState::default();
        assert!(h.compare_and_set_log_head("t", "s", None, 1).await.unwrap());
        assert!(!h.compare_and_set_log_head("t", "s", None, 2).await.unwrap());
        assert!(!h
            .compare_and_set_log_head("t", "s", Some(0), 2)
            .await
            .unwrap());
        assert!(h
            .compare_and_set_log_head("t", "s", Some(1), 2)
            .await
            .unwrap());
        assert_eq!(h.log_head("t", "s").await.unwrap(), Some(2));
        // Tenants never share keys.
        assert_eq!(h.log_head("u", "s").await.unwrap(), None);
    }
}
