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
use std::time::Duration;

use strata_core::memory::{Derived, MemoryEngine};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_runtime::follow::{CountsByType, FollowStats};
use strata_runtime::Backends;

/// The consumer group of the memory extractor.
pub const DEFAULT_GROUP: &str = "strata-memory";
/// Actor of the events this service writes.
pub const ACTOR: &str = "strata-memory";

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

/// The event that carries a derived payload: same tenant, session, branch, participant and
/// timestamp as its source, so the same log always derives the same bytes.
pub fn derived_event(source: &Event, d: Derived) -> Event {
    Event {
        event_id: d.event_id,
        tenant_id: source.tenant_id.clone(),
        session_id: source.session_id.clone(),
        branch_id: source.branch_id.clone(),
        seq: None,
        parent_event_id: None,
        timestamp: source.timestamp,
        actor: Some(ACTOR.into()),
        participant_id: source.participant_id.clone(),
        payload: d.payload,
        causality: None,
        extra: Default::default(),
    }
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
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let mut consumer = backends.log.subscribe(group).await?;
    let mut stats = FollowStats::default();
    let mut by_type = CountsByType::new();
    let mut warm_until: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut positions = strata_runtime::Offsets::new();
    let mut lag = strata_runtime::metrics::LagReporter::new(group, Duration::from_secs(1));
    tokio::pin!(shutdown);
    loop {
        let polled = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = consumer.poll(1000, Duration::from_millis(200)) => p?,
        };
        // The state is not checkpointed: on assignment, re-read the partition from offset 0
        // up to the group's committed offset to rebuild it, without writing anything again.
        let mut just_seeked = Vec::new();
        for p in &polled.revoked {
            positions.remove(p);
        }
        lag.revoked(&polled.revoked);
        if !polled.assigned.is_empty() {
            let committed = backends.log.committed(group).await?;
            for &p in &polled.assigned {
                let c = committed.get(&p).copied().unwrap_or(0);
                positions.insert(p, c);
                if c > 0 {
                    consumer.seek(p, 0)?;
                    warm_until.insert(p, c);
                    just_seeked.push(p);
                }
            }
        }
        if polled.records.is_empty() {
            lag.report(backends.log.as_ref(), &positions).await;
            continue;
        }
        let mut offsets = strata_runtime::Offsets::new();
        let mut out: Vec<(Event, Option<u64>)> = Vec::new();
        for r in polled
            .records
            .iter()
            .filter(|r| !just_seeked.contains(&r.partition))
        {
            if warm_until.get(&r.partition).is_some_and(|&w| r.offset < w) {
                if let Ok(event) = backends.codec.decode(&r.value) {
                    let _ = engine.observe(&event);
                }
                continue;
            }
            match backends.codec.decode(&r.value) {
                Ok(event) => {
                    stats.events += 1;
                    *by_type.entry(event.event_type().as_str()).or_default() += 1;
                    for d in engine.observe(&event) {
                        out.push((derived_event(&event, d), None));
                    }
                }
                Err(e) => {
                    stats.undecodable += 1;
                    let reason = format!("undecodable event: {e}");
                    backends.log.dead_letter(r, group, &reason).await?;
                    strata_runtime::metrics::DEAD_LETTERS.add(1);
                    tracing::error!(group, partition = r.partition, offset = r.offset, error = %e,
                        "undecodable record set aside in the dead-letter queue");
                }
            }
            offsets.insert(r.partition, r.offset + 1);
        }
        if !out.is_empty() {
            *by_type.entry("appended").or_default() += out.len() as u64;
            ingestor
                .ingest(&Publisher::Operator, out)
                .await
                .map_err(|e| Error::Append(e.to_string()))?;
        }
        consumer.commit(&offsets).await?;
        positions.extend(offsets);
        lag.report(backends.log.as_ref(), &positions).await;
    }
    consumer.close().await?;
    tracing::info!(
        group,
        events = stats.events,
        memories = engine.memory_count(),
        "memory extractor stopped"
    );
    Ok((stats, by_type))
}
