//! The state projector: consumes the log in its consumer group, folds each event
//! with the core's pure [`strata_core::projection::apply`], and writes the rows, the sessions'
//! fold state and its consumer offsets to the projection store **in one transaction** per batch.
//!
//! Offsets live in the projection store, not in the log's group offsets: on every assignment the
//! projector seeks to what the store says. A crash at any point therefore leaves the store at a
//! batch boundary, and the next run resumes exactly there — no event lost, none applied twice.
//! Events already projected (a re-sent record) are skipped by `event_id`. A record that is not a
//! decodable event goes to the log's dead-letter queue with the reason before the transaction
//! that moves the offset past it (at least once: a crash in between sets it aside again).
//!
//! A backend outage (the projection store or the log down) never stops [`Projector::run`]: a
//! failed batch is retried with capped exponential backoff, each failure logged once and counted
//! (`strata_projector_failures_total`), and the projector reports itself not ready
//! ([`Projector::health`]) until a batch succeeds again. After a failure nothing polled is
//! trusted: the consumer is rewound to the offsets in the store before anything else is folded,
//! so no offset is ever committed past an event that was not applied.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use strata_core::projection::{
    apply_forked, branch_at, fork_needs_history, Change, LogPosition, SessionFold,
};
use strata_core::tokens::O200k;
use strata_core::Event;
use strata_hot::ProjectedSession;
use strata_keys::Unreadable;
use strata_log::{LogConsumer, LogRecord};
use strata_runtime::admin::WorkerHealth;
use strata_runtime::Backends;

mod fold_cache;
use fold_cache::{FoldCache, FOLD_CACHE_SESSIONS};
use strata_store::{Offsets, ProjectionBatch};

/// The projector's consumer group.
pub const DEFAULT_GROUP: &str = strata_runtime::PROJECTOR_GROUP;

/// How often the consumer-lag gauges are refreshed.
const LAG_EVERY: Duration = Duration::from_secs(1);

/// First wait after a failed batch; doubled after each further failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two attempts during an outage.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Errors of the projector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    #[error(transparent)]
    Store(#[from] strata_store::Error),
    /// Sealed records cannot be opened now (the key store or the master key).
    #[error(transparent)]
    Keys(#[from] strata_keys::Error),
    /// The projector group did not reach the end of the log in time.
    #[error(
        "the projections did not reach the end of the log within {waited_secs} s (consumer group \
         {group:?}, {behind} record(s) behind); is strata-projector running?"
    )]
    Lagging {
        group: String,
        waited_secs: u64,
        behind: u64,
    },
    /// A record on the log is not a decodable event (for consumers that cannot set it aside).
    #[error("undecodable record at partition {partition} offset {offset}: {reason}")]
    Undecodable {
        partition: u32,
        offset: u64,
        reason: String,
    },
}

/// Result with the projector's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Options of the projector.
#[derive(Debug, Clone)]
pub struct ProjectorOptions {
    pub group: String,
    /// Most records folded per transaction.
    pub batch_size: usize,
    /// How long one poll waits for new records.
    pub poll_timeout: Duration,
}

impl Default for ProjectorOptions {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP.into(),
            batch_size: 2000,
            poll_timeout: Duration::from_millis(200),
        }
    }
}

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub records: usize,
    pub applied: usize,
    pub duplicates: usize,
    /// Undecodable records set aside in the dead-letter queue.
    pub dead_letters: usize,
}

/// A running projector: one member of the projector group.
#[derive(Debug)]
pub struct Projector {
    backends: Backends,
    options: ProjectorOptions,
    consumer: Box<dyn LogConsumer>,
    /// Fold state of the sessions this member folded last, as committed (the store has all).
    folds: FoldCache,
    /// Next offset per assigned partition, as committed.
    positions: Offsets,
    /// Set when a batch or a rewind failed: the consumer's position may be past what the store
    /// holds, so it must be rewound to the store's offsets before anything else is folded.
    rewind: bool,
    lag: strata_runtime::metrics::LagReporter,
    health: WorkerHealth,
}

impl Projector {
    /// Joins the projector group.
    pub async fn start(backends: Backends, options: ProjectorOptions) -> Result<Projector> {
        let consumer = backends.log.subscribe(&options.group).await?;
        let lag = strata_runtime::metrics::LagReporter::new(&options.group, LAG_EVERY);
        Ok(Projector {
            backends,
            options,
            consumer,
            folds: FoldCache::new(FOLD_CACHE_SESSIONS),
            positions: Offsets::new(),
            rewind: false,
            lag,
            health: WorkerHealth::new(),
        })
    }

    /// What this projector says about itself: failing while a backend outage keeps its batches
    /// from committing. Serve it on `/readyz` with
    /// [`strata_runtime::admin::admin_routes_with_health`].
    pub fn health(&self) -> WorkerHealth {
        self.health.clone()
    }

    /// Polls once and projects what came; returns what it did.
    pub async fn step(&mut self) -> Result<BatchStats> {
        let result = self.poll_and_project().await;
        self.lag
            .report(self.backends.log.as_ref(), &self.positions)
            .await;
        result
    }

    async fn poll_and_project(&mut self) -> Result<BatchStats> {
        if self.rewind {
            // Whatever the consumer holds or fetches now may lie past records that were polled
            // but never committed: go back to what the store says before folding anything.
            let assigned = self.consumer.assignment();
            self.on_rebalance(&assigned, &[]).await?;
            self.rewind = false;
            tracing::info!(positions = ?self.positions, "projector rewound to the store's offsets");
        }
        let result = self.poll_and_project_once().await;
        if result.is_err() {
            // The store kept nothing of this batch (or a newly assigned partition was not sought
            // to the store's offsets): forget what was folded, and rewind on the next step, which
            // retries the rewind until the store answers.
            self.folds.clear();
            self.rewind = true;
        }
        result
    }

    async fn poll_and_project_once(&mut self) -> Result<BatchStats> {
        let polled = self
            .consumer
            .poll(self.options.batch_size, self.options.poll_timeout)
            .await?;
        if !polled.assigned.is_empty() || !polled.revoked.is_empty() {
            self.on_rebalance(&polled.assigned, &polled.revoked).await?;
            tracing::info!(assigned = ?polled.assigned, revoked = ?polled.revoked,
                "projector assignment changed");
            // Records fetched before the seek may start at the wrong offset: drop them.
            return Ok(BatchStats::default());
        }
        if polled.records.is_empty() {
            return Ok(BatchStats::default());
        }
        self.project(&polled.records).await
    }

    async fn on_rebalance(&mut self, assigned: &[u32], revoked: &[u32]) -> Result<()> {
        self.folds.clear();
        for p in revoked {
            self.positions.remove(p);
        }
        self.lag.revoked(revoked);
        let stored = self.backends.store.offsets(&self.options.group).await?;
        for &p in assigned {
            let offset = stored.get(&p).copied().unwrap_or(0);
            self.consumer.seek(p, offset)?;
            self.positions.insert(p, offset);
        }
        Ok(())
    }

    /// Folds `records` and commits them with their offsets in one transaction.
    #[tracing::instrument(name = "projector.batch", skip_all, fields(records = records.len() as i64))]
    async fn project(&mut self, records: &[LogRecord]) -> Result<BatchStats> {
        let started = Instant::now();
        let b = &self.backends;
        let mut events = Vec::with_capacity(records.len());
        let mut offsets = Offsets::new();
        let mut dead_letters = 0usize;
        for r in records {
            // Every record moves the offsets on, including one set aside below.
            offsets.insert(r.partition, r.offset + 1);
            match b.codec.decode(&r.value).await {
                Ok(event) => events.push((r.position(), event)),
                // The keys cannot be had now: nothing of the batch is committed, it comes again.
                Err(e) if e.unreadable() == Unreadable::Retry => return Err(e.into()),
                // A forgotten session's record has no content to fold.
                Err(e) if e.unreadable() == Unreadable::Forgotten => {}
                Err(e) => {
                    // Never skipped silently: the record goes to the dead-letter queue, durably,
                    // before the transaction that moves the offset past it.
                    let reason = format!("undecodable event: {e}");
                    let at = b.log.dead_letter(r, &self.options.group, &reason).await?;
                    strata_runtime::metrics::DEAD_LETTERS.add(1);
                    dead_letters += 1;
                    tracing::error!(
                        partition = r.partition,
                        offset = r.offset,
                        dead_letter_offset = at.offset,
                        error = %e,
                        "undecodable record set aside in the dead-letter queue"
                    );
                }
            }
        }

        // Which events are already projected (re-sent records).
        let mut ids_by_tenant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (_, e) in &events {
            ids_by_tenant
                .entry(&e.tenant_id)
                .or_default()
                .push(e.event_id.clone());
        }
        let mut already: HashSet<(String, String)> = HashSet::new();
        for (tenant, ids) in ids_by_tenant {
            for id in b.store.projected_event_ids(tenant, &ids).await? {
                already.insert((tenant.to_owned(), id));
            }
        }

        let mut changes: Vec<Change> = Vec::new();
        let mut touched: Vec<(String, String)> = Vec::new();
        let mut working: HashMap<(String, String), SessionFold> = HashMap::new();
        let mut batch_seqs: HashMap<(String, String), u64> = HashMap::new();
        let mut stats = BatchStats {
            records: records.len(),
            dead_letters,
            ..BatchStats::default()
        };
        // Indexes of the events of this batch folded so far (a fork's history may need them).
        let mut folded: Vec<usize> = Vec::new();
        for (index, (pos, event)) in events.iter().enumerate() {
            let id_key = (event.tenant_id.clone(), event.event_id.clone());
            if already.contains(&id_key) || batch_seqs.contains_key(&id_key) {
                stats.duplicates += 1;
                continue;
            }
            let skey = (event.tenant_id.clone(), event.session_id.clone());
            if !working.contains_key(&skey) {
                let fold = match self.folds.get(&skey) {
                    Some(f) => f.clone(),
                    None => b
                        .store
                        .session_fold(&skey.0, &skey.1)
                        .await?
                        .unwrap_or_else(|| SessionFold::new(&skey.0, &skey.1)),
                };
                working.insert(skey.clone(), fold);
                touched.push(skey.clone());
            }
            let fork_seq = match &event.payload {
                strata_core::Payload::BranchForked(p) => {
                    match batch_seqs.get(&(event.tenant_id.clone(), p.from_event_id.clone())) {
                        Some(&s) => Some(s),
                        None => {
                            b.store
                                .event_seq(&event.tenant_id, &event.session_id, &p.from_event_id)
                                .await?
                        }
                    }
                }
                _ => None,
            };
            let fork_base = match fork_seq {
                Some(at) if fork_needs_history(&working[&skey], event) => {
                    let earlier = folded.iter().map(|&i| &events[i].1).filter(|e| {
                        e.tenant_id == event.tenant_id && e.session_id == event.session_id
                    });
                    let history =
                        history_through(b.store.as_ref(), event, at, earlier, &batch_seqs).await?;
                    branch_at(&history, &event.branch_id, at, &O200k)
                }
                _ => None,
            };
            let fold = working.get_mut(&skey).expect("inserted above");
            changes.extend(apply_forked(
                fold,
                event,
                LogPosition {
                    partition: pos.partition,
                    offset: pos.offset,
                },
                fork_seq,
                fork_base,
                &O200k,
            ));
            batch_seqs.insert(id_key, event.seq.unwrap_or(fold.head_seq));
            folded.push(index);
            stats.applied += 1;
        }

        let folds: Vec<SessionFold> = touched.iter().map(|k| working[k].clone()).collect();
        b.store
            .commit_batch(ProjectionBatch {
                group: self.options.group.clone(),
                changes,
                folds,
                offsets: offsets.clone(),
            })
            .await?;
        strata_runtime::metrics::EVENTS_PROJECTED.add(stats.applied as u64);
        strata_runtime::metrics::PROJECTOR_BATCHES.add(1);
        strata_runtime::metrics::PROJECTOR_BATCH_LATENCY.observe(started.elapsed());
        tracing::debug!(
            applied = stats.applied,
            duplicates = stats.duplicates,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "projected batch"
        );
        // Tell the log too (Kafka's group offsets, for lag and for a member that cannot seek):
        // after the store, so the log's offsets are never ahead of the projections.
        if let Err(e) = self.consumer.commit(&offsets).await {
            tracing::warn!(error = %e, "could not commit offsets to the log; the store has them");
        }
        self.positions.extend(offsets);
        for key in touched {
            let fold = working
                .remove(&key)
                .expect("touched sessions are in working");
            publish(&self.backends, &fold).await;
            self.folds.insert(key, fold);
        }
        Ok(stats)
    }

    /// Projects until every assigned partition has reached the log's end as of this call.
    /// Returns the number of events applied.
    pub async fn catch_up(&mut self) -> Result<u64> {
        let end = self.backends.log.end_offsets().await?;
        let mut applied = 0u64;
        loop {
            if !self.consumer.assignment().is_empty()
                && self
                    .consumer
                    .assignment()
                    .iter()
                    .all(|p| self.positions.get(p).copied().unwrap_or(0) >= end[*p as usize])
            {
                return Ok(applied);
            }
            applied += self.step().await?.applied as u64;
        }
    }

    /// Runs until `shutdown` resolves, then finishes the batch in hand and leaves the group.
    ///
    /// A failing batch (a backend outage) never ends the loop: it is retried after a backoff
    /// that starts at 100 ms and doubles up to 5 s, and [`Projector::health`] reports the failure until a
    /// step succeeds again.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        let mut backoff = FIRST_BACKOFF;
        let mut failures = 0u32;
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                r = self.step() => match r {
                    Ok(_) => {
                        if failures > 0 {
                            tracing::info!(failures, "projector recovered; projecting again");
                            self.health.ok();
                        }
                        failures = 0;
                        backoff = FIRST_BACKOFF;
                    }
                    Err(e) => {
                        failures += 1;
                        strata_runtime::metrics::PROJECTOR_FAILURES.add(1);
                        tracing::error!(
                            error = %e,
                            attempt = failures,
                            retry_in_ms = backoff.as_millis() as u64,
                            "projector batch failed; nothing past the last committed batch is \
                             acknowledged, retrying"
                        );
                        // `/readyz` is unauthenticated: the error is in the log only.
                        self.health.failing(format!(
                            "projector: {failures} failed attempt(s) in a row, retrying"
                        ));
                        // The shutdown still wins during the wait.
                        tokio::select! {
                            biased;
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                },
            }
        }
        self.consumer.close().await?;
        tracing::info!("projector stopped");
        Ok(())
    }

    /// Next offset per assigned partition, as committed.
    pub fn positions(&self) -> &Offsets {
        &self.positions
    }
}

/// Publishes a session's projected state to the hot state. Best effort: the store has it.
async fn publish(backends: &Backends, fold: &SessionFold) {
    let state = fold
        .branches
        .get(strata_core::MAIN_BRANCH)
        .map(|b| b.state.clone())
        .unwrap_or_default();
    let value = ProjectedSession {
        projected_seq: fold.head_seq,
        state,
        open_tool_calls: fold.open_tool_calls.values().cloned().collect(),
    };
    if let Err(e) = backends
        .hot
        .put_projected(&fold.tenant_id, &fold.session_id, value)
        .await
    {
        tracing::warn!(error = %e, "could not publish projected state to hot state");
    }
}

/// Projects the whole log up to its current end with a fresh projector (what every embedded CLI
/// verb does before it answers).
pub async fn catch_up(backends: &Backends) -> Result<u64> {
    let mut p = Projector::start(backends.clone(), ProjectorOptions::default()).await?;
    let applied = p.catch_up().await?;
    p.consumer.close().await?;
    Ok(applied)
}

/// Waits until the projector group's offsets in the store reach the log's end as of this call;
/// returns how many records it is behind when `timeout` passes first (0: caught up).
pub async fn wait_for_projector(
    backends: &Backends,
    group: &str,
    timeout: Duration,
) -> Result<u64> {
    let end = backends.log.end_offsets().await?;
    let deadline = Instant::now() + timeout;
    loop {
        let at = backends.store.offsets(group).await?;
        let behind: u64 = end
            .iter()
            .enumerate()
            .map(|(p, e)| e.saturating_sub(at.get(&(p as u32)).copied().unwrap_or(0)))
            .sum();
        if behind == 0 || Instant::now() >= deadline {
            return Ok(behind);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Brings the projections up to the log's end as of this call, for a reader that needs them
/// current (the CLI's verbs): on an embedded log it projects itself ([`catch_up`]); on a shared
/// log it waits, at most `timeout`, for the projector services instead of joining their group.
pub async fn bring_current(backends: &Backends, timeout: Duration) -> Result<()> {
    if backends.log.is_embedded() {
        catch_up(backends).await?;
        return Ok(());
    }
    match wait_for_projector(backends, DEFAULT_GROUP, timeout).await? {
        0 => Ok(()),
        behind => Err(Error::Lagging {
            group: DEFAULT_GROUP.into(),
            waited_secs: timeout.as_secs(),
            behind,
        }),
    }
}

/// Decodes a record into an event (shared with other consumers).
pub async fn decode(backends: &Backends, r: &LogRecord) -> Result<Event> {
    backends
        .codec
        .decode(&r.value)
        .await
        .map_err(|e| Error::Undecodable {
            partition: r.partition,
            offset: r.offset,
            reason: e.to_string(),
        })
}

/// The events of `fork`'s session up to seq `at`: those the store has, and those of the batch in
/// hand folded before it (`earlier`, not committed yet; their seqs from `batch_seqs`), in seq
/// order.
async fn history_through<'a>(
    store: &dyn strata_store::ProjectionStore,
    fork: &Event,
    at: u64,
    earlier: impl Iterator<Item = &'a Event>,
    batch_seqs: &HashMap<(String, String), u64>,
) -> Result<Vec<Event>> {
    let mut history = store
        .events_through(&fork.tenant_id, &fork.session_id, at)
        .await?;
    let stored: HashSet<String> = history.iter().map(|e| e.event_id.clone()).collect();
    for e in earlier {
        let seq = batch_seqs.get(&(e.tenant_id.clone(), e.event_id.clone()));
        if let (Some(&seq), false) = (seq, stored.contains(&e.event_id)) {
            if seq <= at {
                let mut e = e.clone();
                e.seq = Some(seq);
                history.push(e);
            }
        }
    }
    history.sort_by_key(|e| e.seq.unwrap_or(0));
    Ok(history)
}
