//! Hot state: small, frequently read per-session facts kept next to the services —
//! the session's log head (for seq assignment and `expected_seq`), recently accepted event ids
//! (idempotency), and the projected state and open tool calls (the assembler's fast path).
//!
//! Hot state is a cache over the log and the projections: every value can be recomputed, so a
//! miss falls back to the projection store (slower, never wrong).
//!
//! # Backends
//!
//! [`open`] picks the backend from the URL:
//!
//! | URL | backend | use |
//! | --- | --- | --- |
//! | `memory://` | [`MemoryHotState`], in process | the embedded default (`strata dev`), tests |
//! | `redis://[:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]` | [`RedisHotState`] | production: shared by every instance |
//! | `rediss://...` | [`RedisHotState`] over TLS (rustls, system roots) | production |
//!
//! Redis options are query parameters (unknown ones are passed on to the `redis` crate, which
//! ignores what it does not know):
//!
//! - `ttl_secs` (default 604800, 7 days): lifetime of log heads and projected sessions; every
//!   write refreshes it.
//! - `accepted_ttl_secs` (default 604800, 7 days): lifetime of accepted event ids, i.e. the
//!   window in which a re-published event is answered from Redis instead of the projections.
//!
//! # Expiry and fallback
//!
//! A missing key is a cache miss, whether it expired, was evicted or never existed: the port
//! answers `None` and callers go to the projection store — ingest reads the head from the
//! session fold and seeds it with a compare-and-set from `None`, looks up event ids it does not
//! find here in the projections, and the assembler compares the log head with the projections'
//! head. Backend failures are errors ([`Error::Unavailable`]), never silent misses. The TTL has to
//! exceed the time the projector can lag behind ingest (a head that expires while the
//! projections lag would be reseeded from them); seven days leaves a wide margin.
//!
//! # Losing the heads
//!
//! A flushed or restarted Redis loses every head at once, possibly while an ingest replica is
//! appending seqs it reserved just before: a head recovered from the log at that moment would
//! hand them out again. So each tenant has a marker key, `strata:{<tenant>}:heads`, set when its
//! heads are first recovered and never expiring; a loss removes it with the heads. A recovery
//! that finds it missing ([`Seeding::Lost`]) restores it with a settling time
//! ([`HotState::restore_heads`], `strata:{<tenant>}:settling` with a TTL) longer than an append
//! can take, and until that has passed no head of the tenant is recovered or reserved from
//! absent — ingest answers 503 — so that every append made before the loss is on the log when
//! heads are recovered from it. Run Redis with `noeviction` or a `volatile-*` eviction policy:
//! an evicted marker costs its tenant a settling time.
//!
//! Redis keys are `strata:{<tenant>}:head:<session>`, `strata:{<tenant>}:evt:<event_id>`,
//! `strata:{<tenant>}:proj:v1:<session>`, `strata:{<tenant>}:heads` and
//! `strata:{<tenant>}:settling`. The braces are a Redis Cluster hash tag: all keys of a
//! tenant map to one slot, so a script may touch a tenant's heads and event ids together. `:`,
//! `{`, `}` and `%` in the tenant are percent-encoded so distinct (tenant, id) pairs never share a
//! key. The `v1` in projected keys versions the JSON shape of [`ProjectedSession`]: a build that
//! changes the shape bumps it, and old values simply expire.
//!
//! ```no_run
//! # async fn demo() -> strata_hot::Result<()> {
//! let hot = strata_hot::open("redis://127.0.0.1:6379/0?ttl_secs=86400").await?;
//! hot.ping().await?;
//! let embedded = strata_hot::open("memory://").await?;
//! # let _ = embedded; Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use strata_core::projection::{AgentState, OpenToolCall};
use tokio::sync::RwLock;

mod redis;

pub use self::redis::{RedisHotState, RedisOptions, DEFAULT_TTL};

/// Errors of the hot state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL names a backend this build does not have.
    #[error("unsupported hot-state url {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: String },
    /// The backend could not be reached or failed. The message names the operation, never a
    /// stored value.
    #[error("hot state unavailable: {0}")]
    Unavailable(String),
    /// The server answered but refused the connection (a login it rejects, a client setting it
    /// does not accept): retrying does not help.
    #[error("hot state refused the connection: {0}")]
    Refused(String),
    /// The backend holds a value this build cannot read (damaged, or written by a build with
    /// another layout). The message names the operation, never the value.
    #[error("hot state holds an unreadable value: {0}")]
    Corrupt(String),
}

impl Error {
    /// Whether retrying may succeed: the backend could not be reached or failed
    /// ([`Error::Unavailable`]). A malformed URL or an unreadable value is not.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
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

/// What [`HotState::seed_log_head`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seeding {
    /// The head is `seq` now (or, for `seq` 0, absent as it was).
    Seeded,
    /// Another writer seeded or advanced it first: its value.
    Present(u64),
    /// The tenant's heads were lost since they were last recovered: nothing was written; see
    /// [`HotState::restore_heads`].
    Lost,
    /// Recovery waits this long still after a loss.
    Settling(std::time::Duration),
}

/// The hot-state port.
#[async_trait]
pub trait HotState: Debug + Send + Sync + 'static {
    /// The session's log head: the highest seq ingest has assigned (`None`: unknown here, or
    /// expired; callers fall back to the projections).
    async fn log_head(&self, tenant: &str, session: &str) -> Result<Option<u64>>;

    /// Sets the log head to `new` if it is `expected` now (`None`: absent; then only if the
    /// tenant's heads were not lost since they were last recovered, see
    /// [`HotState::seed_log_head`]). Returns whether it was set: the atomic step behind
    /// `expected_seq`.
    async fn compare_and_set_log_head(
        &self,
        tenant: &str,
        session: &str,
        expected: Option<u64>,
        new: u64,
    ) -> Result<bool>;

    /// Seeds a head recovered from the projections and the log (`seq` 0: the session has no
    /// event yet, nothing is written), unless the hot state lost the tenant's heads since they
    /// were last recovered — a flushed or restarted Redis — or is still settling after that.
    ///
    /// Why: a writer may have reserved seqs just before the loss and be appending them now. A
    /// head recovered from the log before those appends land would hand the same seqs out
    /// again. So after a loss ([`Seeding::Lost`]) the caller restores the tenant's marker with a
    /// settling time longer than any append can take ([`HotState::restore_heads`]), and every
    /// recovery and reservation of the tenant waits it out ([`Seeding::Settling`]); after it, the
    /// log holds every append made before the loss.
    async fn seed_log_head(&self, tenant: &str, session: &str, seq: u64) -> Result<Seeding>;

    /// Marks the tenant's heads as recoverable again after [`Seeding::Lost`]; recoveries and
    /// reservations wait `settle` first (zero: none). Returns how long is left to wait (zero
    /// when another writer restored them earlier and its settling time is over).
    async fn restore_heads(
        &self,
        tenant: &str,
        settle: std::time::Duration,
    ) -> Result<std::time::Duration>;

    /// Removes the log head if it is `expected` now; returns whether it was removed. Ingest
    /// calls it after an append whose outcome it cannot know (a broker that timed out may still
    /// have written some records): the next writer then recovers the head from the projections
    /// and the log instead of trusting a value that may hand out a seq twice.
    async fn forget_log_head(&self, tenant: &str, session: &str, expected: u64) -> Result<bool>;

    /// What this cache knows of an accepted event id (`None`: unknown here, or expired; callers
    /// fall back to the projections).
    async fn accepted_event(&self, tenant: &str, event_id: &str) -> Result<Option<Accepted>>;

    /// Remembers accepted event ids with their seqs and content hashes.
    async fn remember_accepted(&self, tenant: &str, events: &[(String, Accepted)]) -> Result<()>;

    /// Publishes what the projector folded for a session.
    async fn put_projected(
        &self,
        tenant: &str,
        session: &str,
        value: ProjectedSession,
    ) -> Result<()>;

    /// What the projector last published for a session (`None`: unknown here, or expired).
    async fn projected(&self, tenant: &str, session: &str) -> Result<Option<ProjectedSession>>;

    /// Removes what the hot state holds of a session's content (its projected state), for a
    /// forget. Its log head stays: a forgotten session's seqs are never handed out again.
    async fn forget_session(&self, tenant: &str, session: &str) -> Result<()>;

    /// Checks that the backend is reachable.
    async fn ping(&self) -> Result<()>;
}

fn _assert_object_safe(_: &dyn HotState) {}

/// Opens the hot state a URL names: `memory://`, `redis://...` or `rediss://...` (see the
/// crate docs for the options). A Redis URL connects before it returns, so a wrong address fails
/// at startup rather than on the first request.
pub async fn open(url: &str) -> Result<Arc<dyn HotState>> {
    match url.split_once("://") {
        Some(("memory", _)) => Ok(Arc::new(MemoryHotState::default())),
        Some(("redis" | "rediss", _)) => Ok(Arc::new(RedisHotState::open(url).await?)),
        _ => Err(Error::UnsupportedUrl {
            url: redact_url(url),
            reason: "expected memory://, redis://HOST[:PORT][/DB] or rediss://...".into(),
        }),
    }
}

/// `url` with any password replaced, fit for errors and logs.
pub(crate) fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        // An unparseable URL may still hold a secret: keep only its scheme.
        Err(_) => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://..."),
            None => "<unparseable url>".into(),
        },
    }
}

type Key = (String, String);

/// An accepted event as the hot state remembers it: enough to answer a re-sent id as a duplicate
/// (same content) or a conflict (other content) without reading the event back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub seq: u64,
    /// Hex SHA-256 of the event's content as ingest compares it; `None` when remembered by a
    /// version that did not keep it (the caller then reads the event back).
    pub content_sha256: Option<String>,
}

impl Accepted {
    /// The form kept in a string-valued store: `seq` or `seq:sha256`.
    pub fn encode(&self) -> String {
        match &self.content_sha256 {
            Some(sha) => format!("{}:{sha}", self.seq),
            None => self.seq.to_string(),
        }
    }

    /// Reads [`Accepted::encode`]'s form back; `None` when it is not that form.
    pub fn decode(text: &str) -> Option<Accepted> {
        let (seq, sha) = match text.split_once(':') {
            Some((seq, sha)) => (seq, Some(sha.to_owned())),
            None => (text, None),
        };
        Some(Accepted {
            seq: seq.parse().ok()?,
            content_sha256: sha,
        })
    }
}

/// In-process hot state. Lost on restart by design: the embedded runtime brings the projections
/// up to the log head before it serves, and misses fall back to them.
///
/// Accepted event ids are kept in two generations of at most [`ACCEPTED_PER_GENERATION`] each
/// (the older dropped when the newer fills), so a long-running process stays bounded; an id
/// forgotten that way is found in the projections, as after a Redis expiry.
#[derive(Debug, Default)]
pub struct MemoryHotState {
    heads: RwLock<HashMap<Key, u64>>,
    accepted: RwLock<Generations>,
    projected: RwLock<HashMap<Key, ProjectedSession>>,
}

/// Accepted event ids remembered per generation by [`MemoryHotState`].
pub const ACCEPTED_PER_GENERATION: usize = 250_000;

#[derive(Debug, Default)]
struct Generations {
    current: HashMap<Key, Accepted>,
    previous: HashMap<Key, Accepted>,
}

impl Generations {
    fn get(&self, k: &Key) -> Option<Accepted> {
        self.current
            .get(k)
            .or_else(|| self.previous.get(k))
            .cloned()
    }

    fn insert(&mut self, k: Key, accepted: Accepted) {
        if self.current.len() >= ACCEPTED_PER_GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(k, accepted);
    }
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

    async fn seed_log_head(&self, tenant: &str, session: &str, seq: u64) -> Result<Seeding> {
        // In process: nothing can lose the heads while writers live.
        let mut heads = self.heads.write().await;
        let k = key(tenant, session);
        if let Some(v) = heads.get(&k) {
            return Ok(Seeding::Present(*v));
        }
        if seq > 0 {
            heads.insert(k, seq);
        }
        Ok(Seeding::Seeded)
    }

    async fn restore_heads(
        &self,
        _tenant: &str,
        _settle: std::time::Duration,
    ) -> Result<std::time::Duration> {
        Ok(std::time::Duration::ZERO)
    }

    async fn forget_log_head(&self, tenant: &str, session: &str, expected: u64) -> Result<bool> {
        let mut heads = self.heads.write().await;
        let k = key(tenant, session);
        if heads.get(&k) != Some(&expected) {
            return Ok(false);
        }
        heads.remove(&k);
        Ok(true)
    }

    async fn accepted_event(&self, tenant: &str, event_id: &str) -> Result<Option<Accepted>> {
        Ok(self.accepted.read().await.get(&key(tenant, event_id)))
    }

    async fn remember_accepted(&self, tenant: &str, events: &[(String, Accepted)]) -> Result<()> {
        let mut accepted = self.accepted.write().await;
        for (id, a) in events {
            accepted.insert(key(tenant, id), a.clone());
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

    async fn forget_session(&self, tenant: &str, session: &str) -> Result<()> {
        self.projected.write().await.remove(&key(tenant, session));
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory_accepted_ids_stay_bounded() {
        use super::{Accepted, HotState, MemoryHotState, ACCEPTED_PER_GENERATION};
        let hot = MemoryHotState::default();
        let ids: Vec<(String, Accepted)> = (0..ACCEPTED_PER_GENERATION as u64 * 2 + 10)
            .map(|seq| {
                let content_sha256 = None;
                (
                    format!("e{seq}"),
                    Accepted {
                        seq,
                        content_sha256,
                    },
                )
            })
            .collect();
        for chunk in ids.chunks(10_000) {
            hot.remember_accepted("t", chunk).await.unwrap();
        }
        // The newest two generations are remembered, the oldest ids are not.
        let last = ids.len() as u64 - 1;
        assert_eq!(
            hot.accepted_event("t", &format!("e{last}"))
                .await
                .unwrap()
                .map(|a| a.seq),
            Some(last)
        );
        let mid = ACCEPTED_PER_GENERATION as u64 + 5;
        assert_eq!(
            hot.accepted_event("t", &format!("e{mid}"))
                .await
                .unwrap()
                .map(|a| a.seq),
            Some(mid)
        );
        assert_eq!(
            hot.accepted_event("t", "e0").await.unwrap().map(|a| a.seq),
            None
        );
        let held = {
            let g = hot.accepted.read().await;
            g.current.len() + g.previous.len()
        };
        assert!(held <= 2 * ACCEPTED_PER_GENERATION, "{held}");
    }

    use super::*;

    #[test]
    fn accepted_events_read_back_as_written_and_in_the_older_form() {
        let with = Accepted {
            seq: 12,
            content_sha256: Some("ab".repeat(32)),
        };
        assert_eq!(Accepted::decode(&with.encode()), Some(with));
        let older = Accepted::decode("7").expect("a bare seq");
        assert_eq!((older.seq, older.content_sha256), (7, None));
        assert_eq!(Accepted::decode("seven"), None);
    }

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

    #[tokio::test]
    async fn urls_pick_the_backend() {
        open("memory://").await.unwrap().ping().await.unwrap();
        for url in ["postgres://u:hunter2@h/db", "memory", "redis+sentinel://h"] {
            let err = open(url).await.unwrap_err();
            assert!(
                matches!(err, Error::UnsupportedUrl { .. }),
                "{url}: {err:?}"
            );
            assert!(
                !err.to_string().contains("hunter2"),
                "password leaked: {err}"
            );
        }
    }
}
