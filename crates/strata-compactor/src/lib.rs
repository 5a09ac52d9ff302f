//! The compactor (SPEC §6). It consumes the log in its own consumer group, keeps each session's
//! raw events of the main branch, and when the tokens not yet covered by a compaction exceed a
//! configurable fraction of the session's budget (window minus reserved output) it runs the
//! pure [`strata_core::compaction::compact`] and appends the `CompactionCompleted` record —
//! successful or failed, with its CompressionCheck — to the log through ingest. The raw log is
//! never rewritten; the projector is the only writer of projections.
//!
//! An explicit request (`strata compact SESSION`, `POST /v1/sessions/{id}/compact`) runs
//! [`compact_session`], which reads the session's events from the projections.
//!
//! Compaction covers the `main` branch; forked branches are not compacted in this version.

pub mod http;
pub mod scenario;

use std::collections::BTreeMap;
use std::future::Future;

use strata_core::compaction::{
    compact, event_tokens, CompactionRecord, DeterministicSummarizer, Summarizer,
};
use strata_core::payload::Payload;
use strata_core::tokens::{O200k, TokenCounter};
use strata_core::{Event, MAIN_BRANCH};
use strata_ingest::derive::{run_deriving, run_deriving_until_caught_up, DeriveError};
use strata_ingest::{Ingestor, Publisher};
use strata_runtime::follow::{CountsByType, FollowStats};
use strata_runtime::Backends;

/// The consumer group of the compactor.
pub const DEFAULT_GROUP: &str = "strata-compactor";
/// Actor of the events this service writes.
pub const ACTOR: &str = "strata-compactor";
/// Budget assumed for a session without `SessionStarted`.
const DEFAULT_BUDGET: u64 = 128_000;

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
    /// The request cannot be served.
    #[error("{0}")]
    Invalid(String),
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

/// When and how much to compact.
#[derive(Debug, Clone, Copy)]
pub struct CompactorOptions {
    /// Compact when uncompacted tokens exceed this fraction of the budget.
    pub threshold: f64,
    /// User turns kept verbatim after the cut.
    pub keep_turns: usize,
}

impl Default for CompactorOptions {
    fn default() -> Self {
        Self {
            threshold: 0.6,
            keep_turns: 2,
        }
    }
}

#[derive(Debug, Default)]
struct Branch {
    events: Vec<Event>,
    /// Tokens of the raw events since the last successful compaction's cut.
    pending_tokens: u64,
    /// Don't retry before the pending tokens pass this (after a failed or empty attempt).
    retry_above: u64,
    previous: Option<CompactionRecord>,
}

/// The compactor's pure state machine: feed it the log in order; it says when to compact.
#[derive(Debug)]
pub struct Planner {
    options: CompactorOptions,
    budgets: BTreeMap<(String, String), u64>,
    branches: BTreeMap<(String, String), Branch>,
    last_seq: BTreeMap<(String, String), u64>,
    summarizer: Box<dyn Summarizer>,
    tokens: O200k,
}

impl Planner {
    pub fn new(options: CompactorOptions) -> Self {
        Self::with_summarizer(options, Box::new(DeterministicSummarizer))
    }

    /// A planner with a plugged-in summarizer (its output is checked the same way).
    pub fn with_summarizer(options: CompactorOptions, summarizer: Box<dyn Summarizer>) -> Self {
        Self {
            options,
            budgets: BTreeMap::new(),
            branches: BTreeMap::new(),
            last_seq: BTreeMap::new(),
            summarizer,
            tokens: O200k,
        }
    }

    /// Folds one event in; returns a compaction record to append when the threshold is crossed.
    pub fn observe(&mut self, event: &Event) -> Option<CompactionRecord> {
        if event.branch_id != MAIN_BRANCH {
            return None;
        }
        let key = (event.tenant_id.clone(), event.session_id.clone());
        // Seen already (a re-read after a restart or rebalance): nothing new.
        if let Some(seq) = event.seq {
            let last = self.last_seq.entry(key.clone()).or_default();
            if seq <= *last {
                return None;
            }
            *last = seq;
        }
        if let Payload::SessionStarted(p) = &event.payload {
            let budget =
                u64::from(p.context_window_tokens).saturating_sub(p.reserved_output_tokens.into());
            self.budgets.insert(key.clone(), budget.max(1));
        }
        if let Payload::CompactionCompleted(p) = &event.payload {
            // A compaction on the log (ours, another instance's, or an explicit request's).
            if let Some(r) = CompactionRecord::from_payload(p).filter(|r| r.succeeded()) {
                let b = self.branches.entry(key).or_default();
                tokens_after_cut(b, &r);
                b.previous = Some(r);
            }
            return None;
        }
        if event.is_derived() {
            return None;
        }
        let budget = self.budgets.get(&key).copied().unwrap_or(DEFAULT_BUDGET);
        let t = event_tokens(event, &self.tokens);
        let b = self.branches.entry(key).or_default();
        b.events.push(event.clone());
        b.pending_tokens += t;
        let limit = (budget as f64 * self.options.threshold) as u64;
        if b.pending_tokens <= limit.max(b.retry_above) {
            return None;
        }
        let record = compact(
            &b.events,
            b.previous.as_ref(),
            self.options.keep_turns,
            self.summarizer.as_ref(),
            &self.tokens,
        );
        // Whatever happens, do not try again before another tenth of the budget has come in.
        b.retry_above = b.pending_tokens + budget / 10;
        let record = record?;
        if record.succeeded() {
            let mut b2 = std::mem::take(b);
            tokens_after_cut(&mut b2, &record);
            b2.previous = Some(record.clone());
            *self
                .branches
                .get_mut(&(event.tenant_id.clone(), event.session_id.clone()))
                .expect("present") = b2;
        }
        Some(record)
    }
}

fn tokens_after_cut(b: &mut Branch, r: &CompactionRecord) {
    {
        // Keep the events from the cut on (raw events before it are never needed again here:
        // the record stands in for them; the log still has them).
        if let Some(i) = b
            .events
            .iter()
            .position(|e| e.event_id == r.first_kept_event_id)
        {
            b.events.drain(..i);
        }
        b.pending_tokens = b
            .events
            .iter()
            .filter(|e| !e.is_derived())
            .map(|e| event_tokens(e, &O200k))
            .sum();
        b.retry_above = 0;
    }
}

/// The `CompactionCompleted` event of a record: its id derives from the compaction id, its time
/// from the last summarised event, so the same log gives the same event.
pub fn compaction_event(record: &CompactionRecord, source: &Event) -> Event {
    Event {
        event_id: format!("cmpev_{}", &record.compaction_id[4..]),
        tenant_id: record.tenant_id.clone(),
        session_id: record.session_id.clone(),
        branch_id: record.branch_id.clone(),
        seq: None,
        parent_event_id: None,
        timestamp: source.timestamp,
        actor: Some(ACTOR.into()),
        participant_id: None,
        payload: Payload::CompactionCompleted(record.to_payload()),
        causality: None,
        extra: Default::default(),
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
    let result = run_deriving(backends, group, shutdown, |event, replaying, counts| {
        derive_compaction(planner, event, replaying, counts)
    })
    .await?;
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
    let result = run_deriving_until_caught_up(backends, group, |event, replaying, counts| {
        derive_compaction(planner, event, replaying, counts)
    })
    .await?;
    tracing::debug!(
        group,
        events = result.0.events,
        "compactor caught up with the log"
    );
    Ok(result)
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

/// Reads a session's events (canonical JSON, seq order) from the projections.
pub async fn session_events(
    backends: &Backends,
    tenant: &str,
    session: &str,
) -> Result<Vec<Event>, Error> {
    let mut out = Vec::new();
    let mut after = 0u64;
    loop {
        let page = backends.store.events(tenant, session, after, 5000).await?;
        if page.is_empty() {
            break;
        }
        for v in page {
            let e = Event::from_json(v, None)
                .map_err(|e| Error::Invalid(format!("stored event does not parse: {e}")))?;
            after = after.max(e.seq.unwrap_or(after));
            out.push(e);
        }
    }
    Ok(out)
}

/// An explicit compaction of a session's branch (`strata compact`, `POST .../compact`): reads
/// its events from the projections, compacts after the latest successful compaction, appends
/// the record (successful or failed) and returns it. `None` when there is nothing to compact.
pub async fn compact_session(
    backends: &Backends,
    ingestor: &Ingestor,
    tenant: &str,
    session: &str,
    branch: &str,
    keep_turns: usize,
) -> Result<Option<CompactionRecord>, Error> {
    if branch != MAIN_BRANCH {
        return Err(Error::Invalid(
            "compaction of forked branches is not supported yet".into(),
        ));
    }
    let events: Vec<Event> = session_events(backends, tenant, session)
        .await?
        .into_iter()
        .filter(|e| e.branch_id == branch)
        .collect();
    let previous = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::CompactionCompleted(p) => CompactionRecord::from_payload(p),
            _ => None,
        })
        .rfind(CompactionRecord::succeeded);
    let Some(record) = compact(
        &events,
        previous.as_ref(),
        keep_turns,
        &DeterministicSummarizer,
        &O200k as &dyn TokenCounter,
    ) else {
        return Ok(None);
    };
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
