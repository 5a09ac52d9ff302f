//! The memory extractor (SPEC §6). It consumes the log in its own consumer group, folds every
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

use std::future::Future;

use strata_core::memory::{Derived, MemoryEngine};
use strata_core::Event;
use strata_ingest::derive::{run_deriving, run_deriving_until_caught_up, DeriveError};
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
    let result = run_deriving(backends, group, shutdown, |event, _replaying, _counts| {
        engine
            .observe(event)
            .into_iter()
            .map(|d| derived_event(event, d))
            .collect()
    })
    .await?;
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
    let result = run_deriving_until_caught_up(backends, group, |event, _replaying, _counts| {
        engine
            .observe(event)
            .into_iter()
            .map(|d| derived_event(event, d))
            .collect()
    })
    .await?;
    tracing::debug!(
        group,
        events = result.0.events,
        memories = engine.memory_count(),
        "memory extractor caught up with the log"
    );
    Ok(result)
}
