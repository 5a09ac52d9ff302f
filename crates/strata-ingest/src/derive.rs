//! The consumer loop of the services that derive events from the log (the memory extractor and
//! the compactor): they read the log in their own consumer group, hand each event to a pure
//! observer, and append what it derives through ingest *before* committing the batch's offsets.
//! A crash in between re-derives the same events, whose ids derive from their content, so ingest
//! answers them as duplicates.
//!
//! Observers keep their state in memory without a checkpoint: on assignment the loop re-reads
//! a partition from offset 0 up to the group's committed offset (`replaying`), so the observer
//! rebuilds its state without anything being appended again. Undecodable records go to the
//! dead-letter queue; the consumer lag is reported per partition.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use strata_core::Event;
use strata_keys::Unreadable;
use strata_runtime::follow::{CountsByType, FollowStats};
use strata_runtime::metrics::{LagReporter, DEAD_LETTERS};
use strata_runtime::{Backends, Offsets};
use tracing::Instrument;

use crate::{IngestError, IngestOptions, Ingestor, Publisher};

/// Errors of the deriving loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveError {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    /// Sealed records cannot be opened now (the key store or the master key).
    #[error(transparent)]
    Keys(#[from] strata_keys::Error),
    /// Derived events could not be appended (nothing of the batch was committed).
    #[error("appending derived events failed: {0}")]
    Append(String),
}

/// What a deriving service does with each event of the log.
///
/// A service whose state is bounded and restored from the projections on demand awaits those
/// reads in it before it derives.
pub trait Deriver: Send {
    /// The events derived from `event`; while `replaying` (rebuilding state after an
    /// assignment) they are dropped. It may add its own entries to `counts`, which also counts
    /// consumed events by type and `"appended"` ones.
    fn derive(
        &mut self,
        event: &Event,
        replaying: bool,
        counts: &mut CountsByType,
    ) -> impl Future<Output = Vec<Event>> + Send;
}

/// Runs the deriving loop of consumer group `group` until `shutdown` resolves, handing every
/// event to `observer` (see [`Deriver`]).
pub async fn run_deriving(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
    mut observer: impl Deriver,
) -> Result<(FollowStats, CountsByType), DeriveError> {
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let mut consumer = backends.log.subscribe(group).await?;
    let mut stats = FollowStats::default();
    let mut counts = CountsByType::new();
    let mut warm_until: BTreeMap<u32, u64> = BTreeMap::new();
    let mut positions = Offsets::new();
    let mut lag = LagReporter::new(group, Duration::from_secs(1));
    tokio::pin!(shutdown);
    loop {
        let polled = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = consumer.poll(1000, Duration::from_millis(200)) => p?,
        };
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
        let span = tracing::info_span!(
            "derive.batch",
            otel.name = %format!("{group} batch"),
            strata.consumer_group = group,
            records = polled.records.len() as i64,
            derived = tracing::field::Empty,
        );
        let shut_down = async {
            let mut offsets = Offsets::new();
            let mut out: Vec<(Event, Option<u64>)> = Vec::new();
            for r in polled
                .records
                .iter()
                .filter(|r| !just_seeked.contains(&r.partition))
            {
                let warm = warm_until.get(&r.partition).is_some_and(|&w| r.offset < w);
                let decoded = match backends.codec.decode(&r.value).await {
                    Err(e) if e.unreadable() == Unreadable::Retry => return Err(e.into()),
                    Err(e) if e.unreadable() == Unreadable::Forgotten => {
                        if !warm {
                            offsets.insert(r.partition, r.offset + 1);
                        }
                        continue;
                    }
                    decoded => decoded,
                };
                if warm {
                    if let Ok(event) = decoded {
                        let _ = observer.derive(&event, true, &mut counts).await;
                    }
                    continue;
                }
                match decoded {
                    Ok(event) => {
                        stats.events += 1;
                        *counts.entry(event.event_type().as_str()).or_default() += 1;
                        out.extend(
                            observer
                                .derive(&event, false, &mut counts)
                                .await
                                .into_iter()
                                .map(|d| (d, None)),
                        );
                    }
                    Err(e) => {
                        stats.undecodable += 1;
                        let reason = format!("undecodable event: {e}");
                        backends.log.dead_letter(r, group, &reason).await?;
                        DEAD_LETTERS.add(1);
                        tracing::error!(group, partition = r.partition, offset = r.offset, error = %e,
                            "undecodable record set aside in the dead-letter queue");
                    }
                }
                offsets.insert(r.partition, r.offset + 1);
            }
            tracing::Span::current().record("derived", out.len() as i64);
            if !out.is_empty() {
                let derived = out.len() as u64;
                if !append_derived(&ingestor, out, shutdown.as_mut()).await? {
                    return Ok::<_, DeriveError>(true); // nothing committed: derived again on restart
                }
                *counts.entry("appended").or_default() += derived;
            }
            consumer.commit(&offsets).await?;
            positions.extend(offsets);
            Ok(false)
        }
        .instrument(span)
        .await?;
        if shut_down {
            break;
        }
        lag.report(backends.log.as_ref(), &positions).await;
    }
    consumer.close().await?;
    Ok((stats, counts))
}

/// First and longest wait between two attempts at appending derived events.
const APPEND_RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Appends derived events, retrying for as long as ingest cannot take them for a passing reason
/// (a backend down, the hot state settling, a head raced by another writer): a deriving service
/// that gave up would stop deriving for good while its consumer group keeps its partitions.
/// Answers `false` when `shutdown` came first (nothing is committed then, so the events are
/// derived again on restart); a refusal that retrying cannot change is an error.
async fn append_derived(
    ingestor: &Ingestor,
    events: Vec<(Event, Option<u64>)>,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<bool, DeriveError> {
    let mut wait = APPEND_RETRY.0;
    let mut events = events;
    loop {
        if events.is_empty() {
            return Ok(true);
        }
        let error = match ingestor.ingest(&Publisher::Operator, events.clone()).await {
            Ok(_) => return Ok(true),
            Err(e) => e,
        };
        // Derived from a session forgotten meanwhile: there is nothing to derive for it.
        if let IngestError::Forgotten { session_id, .. } = &error {
            tracing::info!(session = %session_id, "dropping events derived for a forgotten session");
            events.retain(|(e, _)| &e.session_id != session_id);
            continue;
        }
        let passing = matches!(
            error,
            IngestError::Backend(_)
                | IngestError::Unavailable(_)
                | IngestError::Artifact { .. }
                | IngestError::Conflict { .. }
                | IngestError::Throttled { .. }
        );
        if !passing {
            return Err(DeriveError::Append(error.to_string()));
        }
        tracing::warn!(error = %error, retry_in_ms = wait.as_millis() as u64,
            "could not append derived events; retrying");
        tokio::select! {
            biased;
            _ = shutdown.as_mut() => return Ok(false),
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(APPEND_RETRY.1);
    }
}

/// How often [`run_deriving_until_caught_up`] compares the group's committed offsets with the
/// log's end.
const CAUGHT_UP_POLL: Duration = Duration::from_millis(10);

/// [`run_deriving`] until consumer group `group` has committed every partition up to the log's
/// end, its own derived events included: for one-shot runs (the CLI on the embedded default,
/// tests, benchmarks) that need every derivation of the log as of now.
///
/// The group's committed offsets are read before the log's end offsets, so when they reach
/// those ends nothing was left unprocessed at that moment. Events appended concurrently by
/// others after that are left for the next run.
pub async fn run_deriving_until_caught_up(
    backends: &Backends,
    group: &str,
    observer: impl Deriver,
) -> Result<(FollowStats, CountsByType), DeriveError> {
    let failure: std::sync::Mutex<Option<strata_log::Error>> = std::sync::Mutex::new(None);
    let caught_up = async {
        loop {
            match caught_up(backends, group).await {
                Ok(true) => return,
                Ok(false) => tokio::time::sleep(CAUGHT_UP_POLL).await,
                Err(e) => {
                    if let Ok(mut slot) = failure.lock() {
                        *slot = Some(e);
                    }
                    return;
                }
            }
        }
    };
    let result = run_deriving(backends, group, caught_up, observer).await?;
    let failed = failure.lock().ok().and_then(|mut slot| slot.take());
    match failed {
        Some(e) => Err(DeriveError::Log(e)),
        None => Ok(result),
    }
}

/// Whether `group` has committed every partition of the log up to its end.
async fn caught_up(backends: &Backends, group: &str) -> Result<bool, strata_log::Error> {
    let committed = backends.log.committed(group).await?;
    let ends = backends.log.end_offsets().await?;
    Ok(ends
        .iter()
        .enumerate()
        .all(|(partition, &end)| committed.get(&(partition as u32)).copied().unwrap_or(0) >= end))
}

/// Longest wait, before a deriving service restores a session from the projections, for the
/// projector to hold the session's events before the one being derived.
pub const RESTORE_WAIT: Duration = Duration::from_secs(2);

/// Waits, at most `wait`, until the projections hold the session's events through `seq`
/// (a session's history read back for a restore is then the log's). Answers whether they do;
/// a service that goes on without is told so by a warning.
pub async fn projected_through(
    backends: &Backends,
    tenant: &str,
    session: &str,
    seq: u64,
    wait: Duration,
) -> Result<bool, strata_store::Error> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let head = backends
            .store
            .session_fold(tenant, session)
            .await?
            .map_or(0, |f| f.head_seq);
        if head >= seq {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                tenant,
                session,
                seq,
                head,
                "the projections lag behind the log; restoring the session from what they hold"
            );
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
