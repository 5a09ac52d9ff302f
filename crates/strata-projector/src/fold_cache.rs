//! The folds of the sessions a projector saw last, bounded: a member that sees millions of
//! sessions keeps the most recently folded [`FOLD_CACHE_SESSIONS`] in memory and reads any other
//! back from the projection store (which has every session's fold, committed with its rows).

use std::collections::HashMap;

use strata_core::projection::SessionFold;

/// Sessions whose folds a projector keeps in memory.
pub(crate) const FOLD_CACHE_SESSIONS: usize = 10_000;

type Key = (String, String);

/// Folds by (tenant, session), least recently used evicted first.
#[derive(Debug)]
pub(crate) struct FoldCache {
    capacity: usize,
    clock: u64,
    entries: HashMap<Key, (u64, SessionFold)>,
}

impl FoldCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            clock: 0,
            entries: HashMap::new(),
        }
    }

    /// The fold of `key`, marked as used now.
    pub(crate) fn get(&mut self, key: &Key) -> Option<&SessionFold> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(used, fold)| {
            *used = clock;
            &*fold
        })
    }

    /// Keeps `fold` as `key`'s; past the capacity, the least recently used tenth goes (one sort
    /// per tenth of the capacity inserted, not one per insert).
    pub(crate) fn insert(&mut self, key: Key, fold: SessionFold) {
        self.clock += 1;
        self.entries.insert(key, (self.clock, fold));
        if self.entries.len() > self.capacity {
            let keep = self.capacity - self.capacity / 10;
            let mut by_use: Vec<(u64, Key)> = self
                .entries
                .iter()
                .map(|(k, (used, _))| (*used, k.clone()))
                .collect();
            by_use.sort_unstable();
            for (_, k) in by_use.into_iter().take(self.entries.len() - keep) {
                self.entries.remove(&k);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Key {
        ("t".to_owned(), format!("s{i}"))
    }

    #[test]
    fn holds_at_most_its_capacity_and_keeps_the_most_recently_used() {
        let mut cache = FoldCache::new(10);
        for i in 0..10 {
            cache.insert(key(i), SessionFold::new("t", &format!("s{i}")));
        }
        // s0 is used again: the oldest is s1 now.
        assert!(cache.get(&key(0)).is_some());
        for i in 10..25 {
            cache.insert(key(i), SessionFold::new("t", &format!("s{i}")));
            assert!(cache.len() <= 10, "{} folds kept", cache.len());
        }
        assert!(cache.get(&key(24)).is_some(), "the newest is kept");
        assert!(
            cache.get(&key(1)).is_none(),
            "the least recently used went first"
        );
        assert_eq!(
            cache.get(&key(24)).map(|f| f.session_id.as_str()),
            Some("s24")
        );
    }
}
