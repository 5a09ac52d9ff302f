//! The compactor. It consumes the log in its own consumer group, keeps each session's
//! raw events of the main branch, and when the tokens not yet covered by a compaction exceed a
//! configurable fraction of the session's budget (window minus reserved output) it runs the
//! pure [`strata_core::compaction::compact`] and appends the `CompactionCompleted` record —
//! successful or failed, with its CompressionCheck — to the log through ingest. The raw log is
//! never rewritten; the projector is the only writer of projections.
//!
//! An explicit request (`strata compact SESSION`, `POST /v1/sessions/{id}/compact`) runs
//! [`compact_session`], which reads the session's events from the projections.
//!
//! The service compacts the `main` branch as it grows; a forked branch is compacted when asked
//! (its history is its ancestors' events up to the fork point and its own).

pub mod http;
pub mod scenario;

use std::future::Future;

pub use strata_core::compaction::planner::{
    budget_of, budget_of_window, compaction_event, compaction_event_id, CompactorOptions,
    HistoryWanted, Planner, PlannerLimits, Restored, ACTOR,
};
use strata_core::compaction::{compact, CompactionRecord, DeterministicSummarizer};
use strata_core::projection::lineage_contains;
use strata_core::tokens::{O200k, TokenCounter};
use strata_core::Event;
use strata_core::MAIN_BRANCH;
use strata_ingest::derive::{
    projected_through, run_deriving, run_deriving_until_caught_up, DeriveError, Deriver,
    RESTORE_WAIT,
};
use strata_ingest::{Ingestor, Publisher};
use strata_runtime::follow::{CountsByType, FollowStats};
use strata_runtime::Backends;

/// The consumer group of the compactor.
pub const DEFAULT_GROUP: &str = "strata-compactor";

/// Errors of the compactor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error(transparent)]
    Store(#[from] strata_store::Error),
    /// A compaction could not be appended.
    #[error("appending the compaction failed: {0}")]
    Append(String),
    /// The session or branch is not known.
    #[error("{0}")]
    NotFound(String),
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

/// Runs the compactor until `shutdown` resolves; returns what it consumed, by event type, with
/// the compactions it appended under `"compactions"` and the failed ones under `"failed"`.
pub async fn run(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), Error> {
    run_with(
        backends,
        group,
        &mut Planner::new(CompactorOptions::default()),
        shutdown,
    )
    .await
}

/// [`run`] with a given planner.
pub async fn run_with(
    backends: &Backends,
    group: &str,
    planner: &mut Planner,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), Error> {
    let result = run_deriving(backends, group, shutdown, Planning { backends, planner }).await?;
    tracing::info!(group, events = result.0.events, "compactor stopped");
    Ok(result)
}

/// Runs the compactor (group [`DEFAULT_GROUP`], default options) until it has consumed the
/// log up to its end, its own records included, then stops: every compaction the threshold
/// calls for as of now is on the log. For one-shot runs (tests, benchmarks, the CLI); the
/// service runs [`run`]. Returns the same counts as [`run`].
pub async fn catch_up(backends: &Backends) -> Result<(FollowStats, CountsByType), Error> {
    catch_up_with(
        backends,
        DEFAULT_GROUP,
        &mut Planner::new(CompactorOptions::default()),
    )
    .await
}

/// [`catch_up`] with a given consumer group and planner.
pub async fn catch_up_with(
    backends: &Backends,
    group: &str,
    planner: &mut Planner,
) -> Result<(FollowStats, CountsByType), Error> {
    let result =
        run_deriving_until_caught_up(backends, group, Planning { backends, planner }).await?;
    tracing::debug!(
        group,
        events = result.0.events,
        "compactor caught up with the log"
    );
    Ok(result)
}

/// The compactor's [`Deriver`]: the planner, with a session's history it does not hold (never
/// seen, evicted under its [`PlannerLimits`], or past its per-session limit) read back from the
/// projections first.
struct Planning<'a> {
    backends: &'a Backends,
    planner: &'a mut Planner,
}

impl Deriver for Planning<'_> {
    async fn derive(
        &mut self,
        event: &Event,
        replaying: bool,
        counts: &mut CountsByType,
    ) -> Vec<Event> {
        if let Some(wanted) = self.planner.history_wanted(event) {
            match read_history(self.backends, &wanted).await {
                Ok(restored) => self.planner.restore(&wanted, restored),
                Err(e) => {
                    tracing::warn!(tenant = %wanted.tenant_id, session = %wanted.session_id,
                        error = %e, "could not read the session's history back; \
                        not compacting it until a read succeeds");
                    self.planner.restore_failed(&wanted);
                }
            }
            *counts.entry("restored").or_default() += 1;
        }
        derive_compaction(self.planner, event, replaying, counts)
    }
}

/// Reads what `wanted` asks for from the projections: the main branch's events after the given
/// seq, or, without one, its latest successful compaction, the session's budget and the events
/// from that compaction's cut (at most [`COMPACT_MAX_EVENTS`] of them, oldest first, as an
/// explicit compaction reads).
async fn read_history(
    backends: &Backends,
    wanted: &HistoryWanted,
) -> Result<Restored, strata_store::Error> {
    let (tenant, session) = (wanted.tenant_id.as_str(), wanted.session_id.as_str());
    projected_through(backends, tenant, session, wanted.through_seq, RESTORE_WAIT).await?;
    let mut restored = Restored::default();
    let after = match wanted.after_seq {
        Some(after) => after,
        None => {
            let snapshot = backends
                .store
                .snapshot(tenant, session, MAIN_BRANCH, None, 1)
                .await?;
            if let Some(snapshot) = snapshot {
                restored.budget = snapshot.session_started_event_id.is_some().then(|| {
                    budget_of_window(
                        snapshot.context_window_tokens,
                        snapshot.reserved_output_tokens,
                    )
                });
                // A compaction past the event being derived (projections ahead of a replay)
                // is not this point's.
                restored.previous = snapshot
                    .compaction
                    .filter(|c| c.first_kept_seq <= wanted.through_seq + 1);
            }
            restored
                .previous
                .as_ref()
                .map_or(0, |p| p.first_kept_seq.saturating_sub(1))
        }
    };
    restored.events = backends
        .store
        .events_between(
            tenant,
            session,
            after,
            wanted.through_seq,
            COMPACT_MAX_EVENTS,
        )
        .await?
        .into_iter()
        .filter(|e| e.branch_id == MAIN_BRANCH)
        .collect();
    Ok(restored)
}

/// The compactor's observer: the planner's record for `event`, as the event to append (none
/// while replaying).
fn derive_compaction(
    planner: &mut Planner,
    event: &Event,
    replaying: bool,
    counts: &mut CountsByType,
) -> Vec<Event> {
    let Some(record) = planner.observe(event) else {
        return Vec::new();
    };
    if replaying {
        return Vec::new();
    }
    let key = if record.succeeded() {
        "compactions"
    } else {
        "failed"
    };
    *counts.entry(key).or_default() += 1;
    tracing::info!(session = %record.session_id, id = %record.compaction_id,
        status = %record.status, failures = ?record.check.failures, "compaction");
    vec![compaction_event(&record, event)]
}

/// Reads a session's events (seq order) from the projections. A stored event that no longer
/// parses (written before ingest held every id to the rules) is left out with a warning, so that
/// one bad record cannot stop the session from ever being compacted again.
pub async fn session_events(
    backends: &Backends,
    tenant: &str,
    session: &str,
) -> Result<Vec<Event>, Error> {
    Ok(backends
        .store
        .events_through(tenant, session, u64::MAX)
        .await?)
}

/// Most events one explicit compaction reads from the projections. A longer uncompacted history
/// is compacted a part at a time: each call summarises the oldest of it, and the next call goes
/// on from that record's cut (so that the memory and time of one call stay bounded, whatever
/// the session's length).
pub const COMPACT_MAX_EVENTS: usize = 20_000;

/// An explicit compaction of a session's branch (`strata compact`, `POST .../compact`): reads
/// the branch's history from the projections from the branch's latest successful compaction's
/// cut on (a fork's includes its ancestors' events up to the fork point), at most
/// [`COMPACT_MAX_EVENTS`] events, compacts it (keeping `keep_turns` user turns, or, when they
/// are long, the newest steps that fit in the compactor's default share of the session's
/// budget), appends the record (successful or failed) and returns it. `None` when there is
/// nothing to compact.
#[tracing::instrument(
    name = "compactor.compact_session",
    skip(backends, ingestor),
    fields(gen_ai.conversation.id = session)
)]
pub async fn compact_session(
    backends: &Backends,
    ingestor: &Ingestor,
    tenant: &str,
    session: &str,
    branch: &str,
    keep_turns: usize,
) -> Result<Option<CompactionRecord>, Error> {
    compact_session_within(
        backends,
        ingestor,
        tenant,
        session,
        branch,
        keep_turns,
        COMPACT_MAX_EVENTS,
    )
    .await
}

/// [`compact_session`] reading at most `max_events` events.
pub async fn compact_session_within(
    backends: &Backends,
    ingestor: &Ingestor,
    tenant: &str,
    session: &str,
    branch: &str,
    keep_turns: usize,
    max_events: usize,
) -> Result<Option<CompactionRecord>, Error> {
    let not_found = || Error::NotFound(format!("session {session:?} has no branch {branch:?}"));
    let lineage = backends
        .store
        .session_fold(tenant, session)
        .await?
        .and_then(|fold| fold.lineage(branch))
        .ok_or_else(not_found)?;
    // The snapshot's compaction is the branch's latest successful one; one message of window
    // keeps the read small.
    let snapshot = backends
        .store
        .snapshot(tenant, session, branch, None, 1)
        .await?
        .ok_or_else(not_found)?;
    let previous = snapshot.compaction;
    // Events before the previous cut are never needed again: the record stands in for them.
    let after = previous
        .as_ref()
        .map_or(0, |p| p.first_kept_seq.saturating_sub(1));
    let events: Vec<Event> = backends
        .store
        .events_between(tenant, session, after, u64::MAX, max_events)
        .await?
        .into_iter()
        .filter(|e| !e.is_derived() && lineage_contains(&lineage, &e.branch_id, e.seq))
        .collect();
    let budget = match snapshot.session_started_event_id {
        Some(_) => budget_of_window(
            snapshot.context_window_tokens,
            snapshot.reserved_output_tokens,
        ),
        None => budget_of(&events),
    };
    let rule = CompactorOptions {
        keep_turns,
        ..CompactorOptions::default()
    }
    .cut_rule(budget);
    let Some(record) = compact(
        &events,
        previous.as_ref(),
        rule,
        &DeterministicSummarizer,
        &O200k as &dyn TokenCounter,
    ) else {
        return Ok(None);
    };
    let record = record.on_branch(branch);
    let last = events
        .iter()
        .rev()
        .find(|e| !e.is_derived())
        .expect("a compaction has events");
    ingestor
        .ingest(
            &Publisher::Operator,
            vec![(compaction_event(&record, last), None)],
        )
        .await
        .map_err(|e| Error::Append(e.to_string()))?;
    Ok(Some(record))
}

/// How long an explicit compaction waits for its record to be projected.
const RECORD_PROJECTED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits, bounded, until a projector running beside this process holds `record`'s event, so
/// that what a caller does next (the next context, another compaction) sees the compaction it
/// was answered with.
pub(crate) async fn wait_until_projected(
    backends: &Backends,
    record: &CompactionRecord,
) -> Result<(), Error> {
    let (tenant, session) = (record.tenant_id.as_str(), record.session_id.as_str());
    let event_id = compaction_event_id(record);
    let event_id = event_id.as_str();
    let deadline = std::time::Instant::now() + RECORD_PROJECTED_WAIT;
    while backends
        .store
        .event_seq(tenant, session, event_id)
        .await?
        .is_none()
    {
        if std::time::Instant::now() >= deadline {
            tracing::warn!(
                tenant,
                session,
                event_id,
                "the compaction is on the log but not projected yet; answering without it"
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Ok(())
}
