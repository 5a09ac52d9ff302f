//! The memory extractor. It consumes the log in its own consumer group, folds every
//! event into a [`MemoryEngine`] (deterministic tool-family extractors, supersession from
//! provenance, conflicts, scoped invalidation) and appends what the engine derives —
//! `MemoryRecorded` and `MemorySuperseded` — back to the log through ingest, so the projector
//! stays the only writer of projections and a replay from offset 0 reproduces the memories.
//!
//! Derived events are appended before the batch's offsets are committed: a crash in between
//! re-derives the same events with the same content-derived ids, which ingest and the projection
//! treat as one. Derived events read back from the log (this service's own, or another
//! instance's) are learned by the engine, never extracted.
//!
//! The engine's state is not checkpointed: when a partition is assigned, the service re-reads it
//! from offset 0 up to the group's committed offset to rebuild the state (supersession index,
//! open tool calls) without writing anything; the cost is one read of the log per start.
//!
//! The state is bounded ([`MemoryLimits`]): the least recently seen sessions and projects are
//! evicted, and a session that comes back is restored from the projections (its
//! `SessionStarted` and its open tool calls) before its event is derived.

use std::future::Future;

pub use strata_core::memory::MemoryLimits;
use strata_core::memory::{Derived, MemoryEngine};
use strata_core::payload::Payload;
use strata_core::Event;
use strata_ingest::derive::{
    projected_through, run_deriving, run_deriving_until_caught_up, DeriveError, Deriver,
    RESTORE_WAIT,
};
use strata_runtime::follow::{CountsByType, FollowStats};
use strata_runtime::Backends;

/// The consumer group of the memory extractor.
pub const DEFAULT_GROUP: &str = "strata-memory";
pub use strata_core::memory::ACTOR;

/// Errors of the memory extractor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log failed.
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    /// A derived event could not be appended.
    #[error("appending derived events failed: {0}")]
    Append(String),
}

impl From<DeriveError> for Error {
    fn from(e: DeriveError) -> Self {
        match e {
            DeriveError::Log(e) => Error::Log(e),
            DeriveError::Append(why) => Error::Append(why),
            other => Error::Append(other.to_string()),
        }
    }
}

/// The event that carries a derived payload (see [`Derived::into_event`]).
pub fn derived_event(source: &Event, d: Derived) -> Event {
    d.into_event(source)
}

/// Runs the memory extractor with the default (deterministic, offline) extractors until
/// `shutdown` resolves; returns what it consumed, by event type, plus what it appended under
/// `"appended"`.
pub async fn run(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), Error> {
    run_with(backends, group, &mut MemoryEngine::default(), shutdown).await
}

/// [`run`] with a given engine (for example with a plugged-in extractor).
pub async fn run_with(
    backends: &Backends,
    group: &str,
    engine: &mut MemoryEngine,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), Error> {
    let result = run_deriving(backends, group, shutdown, Extracting { backends, engine }).await?;
    tracing::info!(
        group,
        events = result.0.events,
        memories = engine.memory_count(),
        "memory extractor stopped"
    );
    Ok(result)
}

/// Runs the memory extractor (group [`DEFAULT_GROUP`], default extractors) until it has
/// consumed the log up to its end, its own derived events included, then stops: every memory
/// of the log as of now is on the log. For one-shot runs (the CLI on the embedded default,
/// tests, benchmarks); the service runs [`run`].
pub async fn catch_up(backends: &Backends) -> Result<(FollowStats, CountsByType), Error> {
    catch_up_with(backends, DEFAULT_GROUP, &mut MemoryEngine::default()).await
}

/// [`catch_up`] with a given consumer group and engine.
pub async fn catch_up_with(
    backends: &Backends,
    group: &str,
    engine: &mut MemoryEngine,
) -> Result<(FollowStats, CountsByType), Error> {
    let result =
        run_deriving_until_caught_up(backends, group, Extracting { backends, engine }).await?;
    tracing::debug!(
        group,
        events = result.0.events,
        memories = engine.memory_count(),
        "memory extractor caught up with the log"
    );
    Ok(result)
}

/// The memory extractor's [`Deriver`]: the engine, with a session it does not hold restored
/// from the projections before an event whose derivation depends on it.
struct Extracting<'a> {
    backends: &'a Backends,
    engine: &'a mut MemoryEngine,
}

impl Deriver for Extracting<'_> {
    async fn derive(
        &mut self,
        event: &Event,
        _replaying: bool,
        counts: &mut CountsByType,
    ) -> Vec<Event> {
        if self.engine.needs_session(event) {
            restore_session(self.backends, self.engine, event).await;
            *counts.entry("restored").or_default() += 1;
        }
        self.engine
            .observe(event)
            .into_iter()
            .map(|d| derived_event(event, d))
            .collect()
    }
}

/// Events before the one being derived that a restore reads back to find the tool calls open
/// at that point.
pub const RESTORE_EVENTS: u64 = 1_000;

/// Reads a session's context back from the projections into the engine: its first event when
/// that is its `SessionStarted`, and its last [`RESTORE_EVENTS`] events before the one being
/// derived (for the tool calls open there; the projections may be ahead of this service, so
/// their own list of open calls is not this point's). A store that cannot answer leaves the
/// session with the defaults (its own id as project, no end user, no open calls), with a
/// warning: the log is never held up for a memory.
async fn restore_session(backends: &Backends, engine: &mut MemoryEngine, event: &Event) {
    let (tenant, session) = (event.tenant_id.as_str(), event.session_id.as_str());
    let before = event.seq.unwrap_or(1).saturating_sub(1);
    let read = async {
        projected_through(backends, tenant, session, before, RESTORE_WAIT).await?;
        let store = &backends.store;
        let started = store
            .events_between(tenant, session, 0, before, 1)
            .await?
            .into_iter()
            .find_map(|e| match e.payload {
                Payload::SessionStarted(p) => Some(p),
                _ => None,
            });
        let from = before.saturating_sub(RESTORE_EVENTS);
        let recent = store
            .events_between(tenant, session, from, before, RESTORE_EVENTS as usize)
            .await?;
        Ok::<_, strata_store::Error>((started, recent))
    };
    match read.await {
        Ok((started, recent)) => {
            engine.restore_session(tenant, session, started.as_ref(), &recent);
        }
        Err(e) => {
            tracing::warn!(tenant, session, error = %e,
                "could not restore the session from the projections; deriving with its defaults");
            engine.restore_session(tenant, session, None, &[]);
        }
    }
}
