//! The fold engine shared by replay and rebuild: the projector's semantics (skip an event whose
//! `event_id` the tenant already has, resolve a fork's `from_event_id` to its seq, fold with the
//! core's pure [`apply`]) with the state kept in memory, so a batch needs no store reads.

use std::collections::{BTreeMap, HashMap, HashSet};

use strata_core::projection::{apply, Change, LogPosition, SessionFold};
use strata_core::tokens::O200k;
use strata_core::{Event, Payload};
use strata_store::{Offsets, ProjectionBatch, ProjectionStore};

use crate::Result;

type Key = (String, String);

/// Folds events into batches for one projection set.
#[derive(Debug)]
pub(crate) struct Folder {
    group: String,
    /// Fold state of every session folded so far.
    folds: HashMap<Key, SessionFold>,
    /// (tenant, event_id) → (session, seq) of every event folded so far.
    seen: HashMap<Key, (String, u64)>,
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

/// What folding some events did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FoldStats {
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
}

impl Folder {
    pub(crate) fn new(group: &str, check_store: bool) -> Self {
        Self {
            group: group.to_owned(),
            folds: HashMap::new(),
            seen: HashMap::new(),
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
        events: &[(LogPosition, Event)],
    ) -> Result<FoldStats> {
        let mut stored_dups: HashSet<Key> = HashSet::new();
        if self.check_store {
            let mut by_tenant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (_, e) in events {
                let key = (e.tenant_id.clone(), e.event_id.clone());
                if !self.seen.contains_key(&key) {
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
        let mut stats = FoldStats::default();
        for (pos, event) in events {
            self.offsets.insert(pos.partition, pos.offset + 1);
            let id_key = (event.tenant_id.clone(), event.event_id.clone());
            if self.seen.contains_key(&id_key) || stored_dups.contains(&id_key) {
                stats.duplicates += 1;
                continue;
            }
            let skey = (event.tenant_id.clone(), event.session_id.clone());
            if !self.folds.contains_key(&skey) {
                let fold = if self.check_store {
                    store.session_fold(&skey.0, &skey.1).await?
                } else {
                    None
                };
                let fold = fold.unwrap_or_else(|| SessionFold::new(&skey.0, &skey.1));
                self.folds.insert(skey.clone(), fold);
            }
            if self.touched_set.insert(skey.clone()) {
                self.touched.push(skey.clone());
            }
            let fork_seq = match &event.payload {
                Payload::BranchForked(p) => {
                    let from = (event.tenant_id.clone(), p.from_event_id.clone());
                    match self.seen.get(&from) {
                        Some((session, seq)) if *session == event.session_id => Some(*seq),
                        Some(_) => None,
                        None if self.check_store => {
                            store
                                .event_seq(&event.tenant_id, &event.session_id, &p.from_event_id)
                                .await?
                        }
                        None => None,
                    }
                }
                _ => None,
            };
            let fold = self.folds.get_mut(&skey).expect("inserted above");
            self.changes
                .extend(apply(fold, event, *pos, fork_seq, &O200k));
            let seq = event.seq.unwrap_or(fold.head_seq);
            self.seen.insert(id_key, (event.session_id.clone(), seq));
            stats.applied += 1;
        }
        self.pending += events.len();
        Ok(stats)
    }

    /// The batch of everything folded since the last call; `None` when there is nothing.
    pub(crate) fn take_batch(&mut self) -> Option<ProjectionBatch> {
        if self.pending == 0 && self.offsets.is_empty() {
            return None;
        }
        self.pending = 0;
        self.touched_set.clear();
        let folds = self
            .touched
            .drain(..)
            .map(|k| self.folds[&k].clone())
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
        self.folds.get(&(tenant.to_owned(), session.to_owned()))
    }

    /// Every (tenant, session) folded so far.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &Key> {
        self.folds.keys()
    }
}
