//! What the memory engine holds in memory between events, and the bounds on it.
//!
//! The engine's state grows with its input in two ways: per session (its project, end user,
//! privacy rule and open tool calls) and per project (the memories later observations are
//! compared with). Both are held least-recently-used first out, under a count and a byte bound,
//! so that a service that has seen millions of sessions holds only the active ones. What is
//! evicted is not lost: the session's context is on the projections, and a service restores it
//! from there ([`super::MemoryEngine::restore_session`]) when the session comes back; an
//! evicted project's older memories only stop being compared with new ones (a repeated call
//! then records a memory without superseding the old one, which the assembler's recency rules
//! still order correctly).

use std::collections::{BTreeMap, HashSet, VecDeque};

use hashlink::LruCache;
use serde_json::Value;

use crate::privacy::PrivacyDefaults;

/// How much the engine holds in memory. Eviction depends only on the order of the events, so
/// the same log and the same limits derive the same memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Sessions whose context is held.
    pub sessions: usize,
    /// Open tool calls held per session; past it the oldest is dropped (its result then
    /// derives no memory).
    pub open_calls_per_session: usize,
    /// Bytes of open calls' arguments held over all sessions; past it the least recently seen
    /// sessions are evicted.
    pub open_call_bytes: usize,
    /// Memories compared with new ones per project; past it the oldest drop out of comparison.
    pub memories_per_project: usize,
    /// Memories compared with new ones over all projects; past it the least recently seen
    /// projects are evicted.
    pub memories: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            sessions: 100_000,
            open_calls_per_session: 256,
            open_call_bytes: 256 << 20,
            memories_per_project: 2_048,
            memories: 1_000_000,
        }
    }
}

/// A tool call requested and not finished yet.
#[derive(Debug, Clone)]
pub(super) struct OpenCall {
    pub(super) name: String,
    pub(super) args: Value,
    pub(super) request_event_id: String,
    /// [`approx_bytes`] of `args`, counted against [`MemoryLimits::open_call_bytes`].
    pub(super) bytes: usize,
}

/// What the engine holds of one session.
#[derive(Debug)]
pub(super) struct SessionState {
    pub(super) project: Option<String>,
    pub(super) user: Option<String>,
    pub(super) privacy: PrivacyDefaults,
    pub(super) open_calls: LruCache<String, OpenCall>,
}

impl SessionState {
    fn new(limits: &MemoryLimits) -> Self {
        Self {
            project: None,
            user: None,
            privacy: PrivacyDefaults::default(),
            open_calls: LruCache::new(limits.open_calls_per_session.max(1)),
        }
    }

    fn open_call_bytes(&self) -> usize {
        self.open_calls.iter().map(|(_, c)| c.bytes).sum()
    }
}

/// An indexed memory: what later observations are compared with. Keys and subjects are held as
/// digests, so an entry's size does not depend on the call's arguments.
#[derive(Debug, Clone)]
pub(super) struct Indexed {
    pub(super) memory_id: String,
    pub(super) provenance: u64,
    pub(super) value_digest: String,
    pub(super) subject: u64,
    /// Scalar fields of a structured observation (an API response), compared field by field:
    /// field name → digest of the value.
    pub(super) fields: BTreeMap<String, u64>,
    pub(super) superseded: bool,
}

/// The memories of one project, oldest first.
#[derive(Debug, Default)]
pub(super) struct ProjectIndex {
    pub(super) entries: VecDeque<Indexed>,
    ids: HashSet<String>,
}

impl ProjectIndex {
    pub(super) fn contains(&self, memory_id: &str) -> bool {
        self.ids.contains(memory_id)
    }

    fn push(&mut self, entry: Indexed, limit: usize) -> usize {
        self.ids.insert(entry.memory_id.clone());
        self.entries.push_back(entry);
        let mut dropped = 0;
        while self.entries.len() > limit.max(1) {
            if let Some(old) = self.entries.pop_front() {
                self.ids.remove(&old.memory_id);
                dropped += 1;
            }
        }
        dropped
    }
}

/// A stable 64-bit digest of a string (the first 8 bytes of its SHA-256: the same on every
/// machine and release, unlike the standard library's hasher).
pub(super) fn digest(s: &str) -> u64 {
    let full = crate::sha256_hex(s.as_bytes());
    u64::from_str_radix(&full[..16], 16).unwrap_or(0)
}

/// Roughly the bytes a JSON value holds in memory: its strings and keys, plus a word per node.
pub(super) fn approx_bytes(v: &Value) -> usize {
    const NODE: usize = 16;
    NODE + match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(approx_bytes).sum(),
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + approx_bytes(v)).sum(),
        _ => 0,
    }
}

/// The engine's held state under its limits.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) limits: MemoryLimits,
    sessions: LruCache<(String, String), SessionState>,
    open_call_bytes: usize,
    projects: LruCache<(String, String), ProjectIndex>,
    memories: usize,
    /// Sessions and projects evicted so far.
    pub(super) evicted_sessions: u64,
    pub(super) evicted_projects: u64,
}

impl Held {
    pub(super) fn new(limits: MemoryLimits) -> Self {
        Self {
            limits,
            sessions: LruCache::new_unbounded(),
            open_call_bytes: 0,
            projects: LruCache::new_unbounded(),
            memories: 0,
            evicted_sessions: 0,
            evicted_projects: 0,
        }
    }

    /// Whether the session's context is held (seen and not evicted since).
    pub(super) fn holds_session(&self, tenant: &str, session: &str) -> bool {
        self.sessions
            .contains_key(&(tenant.to_owned(), session.to_owned()))
    }

    /// The session's state without marking it used.
    pub(super) fn peek_session(&self, tenant: &str, session: &str) -> Option<&SessionState> {
        self.sessions.peek(&(tenant.to_owned(), session.to_owned()))
    }

    /// The session's state, created when missing, marked most recently used.
    pub(super) fn session(&mut self, tenant: &str, session: &str) -> &mut SessionState {
        let key = (tenant.to_owned(), session.to_owned());
        if !self.sessions.contains_key(&key) {
            let state = SessionState::new(&self.limits);
            self.sessions.insert(key.clone(), state);
            self.evict_sessions(1);
        }
        self.sessions.get_mut(&key).expect("inserted above")
    }

    /// Holds `call` as open in the session.
    pub(super) fn open_call(&mut self, tenant: &str, session: &str, id: String, call: OpenCall) {
        let added = call.bytes;
        let state = self.session(tenant, session);
        let before = state.open_call_bytes();
        if state.open_calls.contains_key(&id) {
            return;
        }
        state.open_calls.insert(id, call);
        let after = state.open_call_bytes();
        debug_assert!(after <= before + added);
        self.open_call_bytes = self.open_call_bytes + after - before;
        self.evict_sessions(1);
    }

    /// Takes an open call out of the session.
    pub(super) fn close_call(&mut self, tenant: &str, session: &str, id: &str) -> Option<OpenCall> {
        let state = self
            .sessions
            .get_mut(&(tenant.to_owned(), session.to_owned()))?;
        let call = state.open_calls.remove(id)?;
        self.open_call_bytes -= call.bytes;
        Some(call)
    }

    /// Evicts least recently used sessions past the limits, keeping the `keep` most recent.
    fn evict_sessions(&mut self, keep: usize) {
        while self.sessions.len() > keep
            && (self.sessions.len() > self.limits.sessions
                || self.open_call_bytes > self.limits.open_call_bytes)
        {
            let Some((_, state)) = self.sessions.remove_lru() else {
                break;
            };
            self.open_call_bytes -= state.open_call_bytes();
            self.evicted_sessions += 1;
        }
    }

    /// The project's memories, marked most recently used.
    pub(super) fn project_mut(&mut self, tenant: &str, project: &str) -> Option<&mut ProjectIndex> {
        self.projects
            .get_mut(&(tenant.to_owned(), project.to_owned()))
    }

    /// Whether the project's index holds `memory_id`.
    pub(super) fn knows(&self, tenant: &str, project: &str, memory_id: &str) -> bool {
        self.projects
            .peek(&(tenant.to_owned(), project.to_owned()))
            .is_some_and(|p| p.contains(memory_id))
    }

    /// Adds a memory to its project's index.
    pub(super) fn index(&mut self, tenant: &str, project: &str, entry: Indexed) {
        let key = (tenant.to_owned(), project.to_owned());
        if !self.projects.contains_key(&key) {
            self.projects.insert(key.clone(), ProjectIndex::default());
        }
        let limit = self.limits.memories_per_project;
        let index = self.projects.get_mut(&key).expect("inserted above");
        let dropped = index.push(entry, limit);
        self.memories = self.memories + 1 - dropped;
        while self.projects.len() > 1 && self.memories > self.limits.memories {
            let Some((_, old)) = self.projects.remove_lru() else {
                break;
            };
            self.memories -= old.entries.len();
            self.evicted_projects += 1;
        }
    }

    /// Bytes of open calls' arguments held over all sessions.
    #[cfg(test)]
    pub(super) fn open_call_bytes(&self) -> usize {
        self.open_call_bytes
    }

    /// Memories indexed over all projects.
    pub(super) fn indexed(&self) -> usize {
        self.memories
    }
}
