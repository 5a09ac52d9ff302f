//! The fold engine shared by replay and rebuild: the projector's semantics (skip an event whose
//! `event_id` the tenant already has, resolve a fork's `from_event_id` to its seq, fold with the
//! core's pure [`apply`]) with the state kept in memory, so a batch needs no store reads.
//!
//! Sessions are independent (a session's fold only ever reads its own events), so a [`Folder`]
//! may spread them over several worker threads: each session belongs to one shard for the whole
//! run, and each shard folds its sessions' events in log order. What must stay global is decided
//! before the shards run, by the calling task, in log order: whether an event is a duplicate (a
//! tenant's `event_id` is unique across its sessions) and what the store knows (a resumed
//! rebuild). The row changes are put back in log order afterwards, so the batches, and the set
//! they build, are the same whatever the number of workers.

use std::collections::{BTreeMap, HashMap, HashSet};

use strata_core::projection::{
    apply_forked, branch_at, BranchAt, Change, LogPosition, SessionFold,
};
use strata_core::tokens::{CachedCounter, O200k, TokenCounter};
use strata_core::{Event, Payload};
use strata_store::{Offsets, ProjectionBatch, ProjectionStore};

use crate::{Error, Result};

type Key = (String, String);

/// Chunks smaller than this are folded on the calling thread: handing them to the workers costs
/// more than it saves (replay folds one event at a time).
const PARALLEL_MIN_EVENTS: usize = 256;

/// Token counts remembered per shard, for long and for short texts each. Logs repeat a lot of
/// text (the same test output, the same file listing, the same tool name and arguments, the same
/// error), and counting o200k tokens is most of the fold's cost.
const TOKEN_CACHE_ENTRIES: usize = 100_000;

/// Texts shorter than this are remembered by their own bytes, longer ones by their SHA-256 (see
/// [`CachedCounter`]): both exact, so the counts are the uncached ones.
const SHORT_TEXT: usize = 64;

/// o200k counts with a memory of the texts counted before (one per shard: no contention).
#[derive(Debug)]
struct FoldTokens {
    short: std::sync::Mutex<HashMap<Box<str>, u64>>,
    long: CachedCounter<O200k>,
}

impl FoldTokens {
    fn new() -> Self {
        Self {
            short: std::sync::Mutex::new(HashMap::new()),
            long: CachedCounter::new(O200k, TOKEN_CACHE_ENTRIES),
        }
    }
}

impl TokenCounter for FoldTokens {
    fn count(&self, text: &str) -> u64 {
        if text.len() >= SHORT_TEXT {
            return self.long.count(text);
        }
        if let Some(n) = self.short.lock().ok().and_then(|m| m.get(text).copied()) {
            return n;
        }
        let n = O200k.count(text);
        if let Ok(mut m) = self.short.lock() {
            if m.len() >= TOKEN_CACHE_ENTRIES {
                m.clear();
            }
            m.insert(text.into(), n);
        }
        n
    }

    fn name(&self) -> &'static str {
        O200k.name()
    }
}

/// Loads the o200k tables (about a second of CPU, once per process) on a blocking thread, so
/// that the first fold does not wait for them while the log is being read.
pub(crate) fn warm_tokenizer() {
    drop(tokio::task::spawn_blocking(|| O200k.count("warm")));
}

/// Folds events into batches for one projection set.
#[derive(Debug)]
pub(crate) struct Folder {
    group: String,
    /// The sessions' fold state, split over the workers; `None` only while a worker has it.
    shards: Vec<Option<Shard>>,
    /// Shard of every session folded so far, assigned round-robin on first sight (balances the
    /// workers better than a hash when sessions are few).
    shard_of: HashMap<Key, usize>,
    /// (tenant, event_id) of every event folded so far: the duplicate check.
    seen: HashSet<Key>,
    /// Whether the projection set already had events when this folder started (a resumed
    /// rebuild): then what is not in memory is looked up in the store.
    check_store: bool,
    changes: Vec<Change>,
    touched: Vec<Key>,
    touched_set: HashSet<Key>,
    offsets: Offsets,
    /// Events folded since the last flush.
    pub(crate) pending: usize,
}

/// The fold state of some sessions, folded by one worker.
#[derive(Debug)]
struct Shard {
    folds: HashMap<Key, SessionFold>,
    /// (tenant, event_id) → (session, seq) of every event this shard folded: resolves a fork's
    /// `from_event_id`, which names an event of the same session, so of the same shard.
    seqs: HashMap<Key, (String, u64)>,
    tokens: FoldTokens,
}

/// One event for a shard, with what the calling task resolved for it.
#[derive(Debug)]
struct Work {
    /// Index of the event in its chunk, to put the changes back in log order.
    index: usize,
    position: LogPosition,
    event: Event,
    /// The session's stored fold, for a session not folded yet in this run (resumed rebuild).
    stored_fold: Option<SessionFold>,
    /// The fork source's seq as the store knows it, when the source was not folded in this run.
    stored_fork_seq: Option<u64>,
    /// The parent's state at the fork point, for a fork from an event other than the session's
    /// latest (see [`strata_core::projection::fork_needs_history`]).
    fork_base: Option<BranchAt>,
}

/// What folding some events did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FoldStats {
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
}

impl Shard {
    fn new() -> Self {
        Self {
            folds: HashMap::new(),
            seqs: HashMap::new(),
            tokens: FoldTokens::new(),
        }
    }

    /// Folds `work` (log order) and returns each event's changes with its chunk index.
    fn fold(&mut self, work: Vec<Work>) -> Vec<(usize, Vec<Change>)> {
        let mut out = Vec::with_capacity(work.len());
        for w in work {
            let Work {
                index,
                position,
                event,
                stored_fold,
                stored_fork_seq,
                fork_base,
            } = w;
            let skey = (event.tenant_id.clone(), event.session_id.clone());
            let fold = self.folds.entry(skey).or_insert_with(|| {
                stored_fold.unwrap_or_else(|| SessionFold::new(&event.tenant_id, &event.session_id))
            });
            let fork_seq = match &event.payload {
                Payload::BranchForked(p) => {
                    match self
                        .seqs
                        .get(&(event.tenant_id.clone(), p.from_event_id.clone()))
                    {
                        Some((session, seq)) if *session == event.session_id => Some(*seq),
                        Some(_) => None,
                        None => stored_fork_seq,
                    }
                }
                _ => None,
            };
            let changes = apply_forked(fold, &event, position, fork_seq, fork_base, &self.tokens);
            let seq = event.seq.unwrap_or(fold.head_seq);
            self.seqs
                .insert((event.tenant_id, event.event_id), (event.session_id, seq));
            out.push((index, changes));
        }
        out
    }
}

impl Folder {
    /// A folder writing offsets of `group`; `workers` threads fold (1: the calling one).
    pub(crate) fn new(group: &str, check_store: bool, workers: usize) -> Self {
        Self {
            group: group.to_owned(),
            shards: (0..workers.max(1)).map(|_| Some(Shard::new())).collect(),
            shard_of: HashMap::new(),
            seen: HashSet::new(),
            check_store,
            changes: Vec::new(),
            touched: Vec::new(),
            touched_set: HashSet::new(),
            offsets: Offsets::new(),
            pending: 0,
        }
    }

    /// Folds `events` (in log order within each partition).
    pub(crate) async fn fold(
        &mut self,
        store: &dyn ProjectionStore,
        events: Vec<(LogPosition, Event)>,
    ) -> Result<FoldStats> {
        let total = events.len();
        let mut stored_dups: HashSet<Key> = HashSet::new();
        if self.check_store {
            let mut by_tenant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (_, e) in &events {
                let key = (e.tenant_id.clone(), e.event_id.clone());
                if !self.seen.contains(&key) {
                    by_tenant
                        .entry(&e.tenant_id)
                        .or_default()
                        .push(e.event_id.clone());
                }
            }
            for (tenant, ids) in by_tenant {
                for id in store.projected_event_ids(tenant, &ids).await? {
                    stored_dups.insert((tenant.to_owned(), id));
                }
            }
        }

        // What is global, in log order: duplicates, the session's shard, the store's answers.
        let mut stats = FoldStats::default();
        let mut work: Vec<Vec<Work>> = (0..self.shards.len()).map(|_| Vec::new()).collect();
        for (index, (position, event)) in events.into_iter().enumerate() {
            self.offsets.insert(position.partition, position.offset + 1);
            let id_key = (event.tenant_id.clone(), event.event_id.clone());
            if self.seen.contains(&id_key) || stored_dups.contains(&id_key) {
                stats.duplicates += 1;
                continue;
            }
            let skey = (event.tenant_id.clone(), event.session_id.clone());
            let mut stored_fold = None;
            let shard = match self.shard_of.get(&skey) {
                Some(s) => *s,
                None => {
                    if self.check_store {
                        stored_fold = store.session_fold(&skey.0, &skey.1).await?;
                    }
                    let s = self.shard_of.len() % self.shards.len();
                    self.shard_of.insert(skey.clone(), s);
                    s
                }
            };
            let stored_fork_seq = match &event.payload {
                Payload::BranchForked(p) if self.check_store => {
                    let from = (event.tenant_id.clone(), p.from_event_id.clone());
                    if self.seen.contains(&from) {
                        None
                    } else {
                        store
                            .event_seq(&event.tenant_id, &event.session_id, &p.from_event_id)
                            .await?
                    }
                }
                _ => None,
            };
            let fork_base = match &event.payload {
                Payload::BranchForked(p)
                    if self.latest_event(&skey, &work[shard], stored_fold.as_ref())
                        != Some(p.from_event_id.as_str()) =>
                {
                    let history = self.history(store, &event, &work[shard]).await?;
                    let from = history.iter().find(|e| e.event_id == p.from_event_id);
                    match from.and_then(|e| e.seq) {
                        Some(at) => branch_at(&history, &event.branch_id, at, &O200k),
                        None => None,
                    }
                }
                _ => None,
            };
            if self.touched_set.insert(skey.clone()) {
                self.touched.push(skey);
            }
            self.seen.insert(id_key);
            stats.applied += 1;
            work[shard].push(Work {
                index,
                position,
                event,
                stored_fold,
                stored_fork_seq,
                fork_base,
            });
        }

        // Fold: on the calling thread for a small chunk or a single shard, else one blocking
        // task per shard with work (sessions are independent, see the module docs).
        let mut results: Vec<(usize, Vec<Change>)> = Vec::with_capacity(stats.applied as usize);
        let busy = work.iter().filter(|w| !w.is_empty()).count();
        if busy <= 1 || (stats.applied as usize) < PARALLEL_MIN_EVENTS {
            for (s, w) in work.into_iter().enumerate() {
                if !w.is_empty() {
                    results.extend(self.shard_mut(s)?.fold(w));
                }
            }
        } else {
            let mut running = Vec::new();
            for (s, w) in work.into_iter().enumerate() {
                if w.is_empty() {
                    continue;
                }
                let mut shard = self.shards[s].take().ok_or_else(lost_shard)?;
                running.push((
                    s,
                    tokio::task::spawn_blocking(move || {
                        let out = shard.fold(w);
                        (shard, out)
                    }),
                ));
            }
            for (s, handle) in running {
                let (shard, out) = handle
                    .await
                    .map_err(|e| Error::Invalid(format!("a fold worker failed: {e}")))?;
                self.shards[s] = Some(shard);
                results.extend(out);
            }
        }

        // Back in log order: the batch is the same whatever the number of workers.
        let mut slots: Vec<Vec<Change>> = (0..total).map(|_| Vec::new()).collect();
        for (index, changes) in results {
            slots[index] = changes;
        }
        self.changes.extend(slots.into_iter().flatten());
        self.pending += total;
        Ok(stats)
    }

    /// The id of the session's latest event before the one in hand: the last of the chunk's
    /// queued ones, else the last folded, else the stored fold's. Asked at forks only, so that
    /// nothing is kept per event on the fold's hot path.
    fn latest_event<'a>(
        &'a self,
        key: &Key,
        queued: &'a [Work],
        stored: Option<&'a SessionFold>,
    ) -> Option<&'a str> {
        let queued = queued
            .iter()
            .rev()
            .find(|w| w.event.tenant_id == key.0 && w.event.session_id == key.1)
            .map(|w| w.event.event_id.as_str());
        queued
            .or_else(|| self.fold_of(key)?.last_event_id.as_deref())
            .or_else(|| stored?.last_event_id.as_deref())
    }

    /// Every event of `fork`'s session before it, in seq order: those in the store, those folded
    /// but not written yet, and those of the chunk in hand ahead of it (`queued`). Batches taken
    /// with [`Folder::take_batch`] must be committed by then (see `rebuild`).
    async fn history(
        &self,
        store: &dyn ProjectionStore,
        fork: &Event,
        queued: &[Work],
    ) -> Result<Vec<Event>> {
        let same = |e: &Event| e.tenant_id == fork.tenant_id && e.session_id == fork.session_id;
        let mut history = store
            .events_through(&fork.tenant_id, &fork.session_id, u64::MAX)
            .await?;
        for change in &self.changes {
            if let Change::Event(row) = change {
                if row.tenant_id == fork.tenant_id && row.session_id == fork.session_id {
                    let value = serde_json::from_str(&row.json)
                        .map_err(|e| Error::Invalid(format!("a folded event's JSON: {e}")))?;
                    if let Ok(e) = Event::from_stored_json(value) {
                        history.push(e);
                    }
                }
            }
        }
        history.extend(queued.iter().map(|w| &w.event).filter(|e| same(e)).cloned());
        history.sort_by_key(|e| e.seq.unwrap_or(0));
        let mut ids = HashSet::new();
        history.retain(|e| ids.insert(e.event_id.clone()));
        Ok(history)
    }

    fn shard_mut(&mut self, s: usize) -> Result<&mut Shard> {
        self.shards[s].as_mut().ok_or_else(lost_shard)
    }

    fn fold_of(&self, key: &Key) -> Option<&SessionFold> {
        let s = *self.shard_of.get(key)?;
        self.shards[s].as_ref()?.folds.get(key)
    }

    /// Moves the offsets the next batch commits past records read but not folded (passed over
    /// as undecodable or forgotten): without it a partition holding only those would never
    /// reach the live set's offsets.
    pub(crate) fn advance(&mut self, partition: u32, next_offset: u64) {
        let at = self.offsets.entry(partition).or_insert(next_offset);
        *at = (*at).max(next_offset);
    }

    /// The batch of everything folded since the last call; `None` when there is nothing.
    pub(crate) fn take_batch(&mut self) -> Option<ProjectionBatch> {
        if self.pending == 0 && self.offsets.is_empty() {
            return None;
        }
        self.pending = 0;
        self.touched_set.clear();
        let touched = std::mem::take(&mut self.touched);
        let folds = touched
            .iter()
            .filter_map(|k| self.fold_of(k).cloned())
            .collect();
        Some(ProjectionBatch {
            group: self.group.clone(),
            changes: std::mem::take(&mut self.changes),
            folds,
            offsets: std::mem::take(&mut self.offsets),
        })
    }

    /// Writes everything folded since the last flush in one transaction.
    pub(crate) async fn flush(&mut self, store: &dyn ProjectionStore) -> Result<()> {
        if let Some(batch) = self.take_batch() {
            store.commit_batch(batch).await?;
        }
        Ok(())
    }

    /// The fold state of a session, as folded so far.
    pub(crate) fn session(&self, tenant: &str, session: &str) -> Option<&SessionFold> {
        self.fold_of(&(tenant.to_owned(), session.to_owned()))
    }

    /// How many sessions were folded so far.
    pub(crate) fn session_count(&self) -> usize {
        self.shard_of.len()
    }
}

/// A shard is missing only if a worker panicked and the folder was used again.
fn lost_shard() -> Error {
    Error::Invalid("a fold worker failed earlier: this fold state is incomplete".into())
}
