//! The compactor's pure state machine: fed a log in order, it says when a branch's tokens not
//! yet covered by a compaction pass a fraction of its budget, and compacts it. The compactor
//! service and `strata eval` (which derives what the services would have, inline) both run it.

use hashlink::LruCache;

use super::{
    compact, event_tokens, CompactionRecord, CutRule, DeterministicSummarizer, Summarizer,
};
use crate::payload::Payload;
use crate::tokens::O200k;
use crate::{Event, MAIN_BRANCH};

/// Actor of the events the compactor writes.
pub const ACTOR: &str = "strata-compactor";
/// Budget assumed for a session without `SessionStarted`.
const DEFAULT_BUDGET: u64 = 128_000;

/// When and how much to compact.
#[derive(Debug, Clone, Copy)]
pub struct CompactorOptions {
    /// Compact when uncompacted tokens exceed this fraction of the budget.
    pub threshold: f64,
    /// User turns kept verbatim after the cut.
    pub keep_turns: usize,
    /// When those turns hold more raw tokens than this fraction of the budget (one long turn of
    /// tool use), the cut moves into the turn and keeps its newest steps that fit.
    pub keep_fraction: f64,
}

impl Default for CompactorOptions {
    fn default() -> Self {
        Self {
            threshold: 0.6,
            keep_turns: 2,
            keep_fraction: 0.25,
        }
    }
}

impl CompactorOptions {
    /// Where a branch with `budget` tokens is cut.
    pub fn cut_rule(&self, budget: u64) -> CutRule {
        CutRule::for_budget(self.keep_turns, self.keep_fraction, budget)
    }
}

/// The budget of a session's events: its `SessionStarted` window less the reserved output.
pub fn budget_of<'e>(events: impl IntoIterator<Item = &'e Event>) -> u64 {
    events
        .into_iter()
        .find_map(|e| match &e.payload {
            Payload::SessionStarted(p) => Some(session_budget(p)),
            _ => None,
        })
        .unwrap_or(DEFAULT_BUDGET)
}

fn session_budget(p: &crate::payload::SessionStarted) -> u64 {
    budget_of_window(p.context_window_tokens, p.reserved_output_tokens)
}

/// A session's budget from its window and the output it reserves.
pub fn budget_of_window(context_window_tokens: u32, reserved_output_tokens: u32) -> u64 {
    u64::from(context_window_tokens)
        .saturating_sub(reserved_output_tokens.into())
        .max(1)
}

/// How much the planner holds in memory. Eviction depends only on the order of the events; an
/// evicted session is restored from the projections when it comes back (see
/// [`Planner::history_wanted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerLimits {
    /// Sessions whose uncompacted events are held.
    pub sessions: usize,
    /// Approximate bytes of held events over all sessions; past it the least recently seen
    /// sessions are evicted.
    pub event_bytes: usize,
    /// Events held per session. A session whose compactions keep failing stops holding new
    /// events past it (its oldest part is what the next compaction needs); once one succeeds,
    /// the events after the held ones are read back from the projections.
    pub session_events: usize,
}

impl Default for PlannerLimits {
    fn default() -> Self {
        Self {
            sessions: 10_000,
            event_bytes: 1 << 30,
            session_events: 20_000,
        }
    }
}

/// Roughly the bytes an event holds in memory, from its tokens (about four bytes each) and a
/// fixed overhead for ids and the envelope.
fn held_bytes(tokens: u64) -> usize {
    usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX) + 512
}

#[derive(Debug, Default)]
struct Branch {
    events: Vec<Event>,
    /// Tokens of the raw events since the last successful compaction's cut.
    pending_tokens: u64,
    /// Don't retry before the pending tokens pass this (after a failed or empty attempt).
    retry_above: u64,
    previous: Option<CompactionRecord>,
    /// Set when events past [`PlannerLimits::session_events`] were not held: the seq of the
    /// last held one.
    gap_after: Option<u64>,
}

/// What the planner holds of one session.
#[derive(Debug)]
struct SessionPlan {
    /// Its history could not be read back: nothing is compacted (a record built without the
    /// history would stand in for events it never saw) until a read succeeds.
    unrestored: bool,
    budget: u64,
    last_seq: u64,
    main: Branch,
    bytes: usize,
}

impl SessionPlan {
    fn new(budget: u64) -> Self {
        Self {
            unrestored: false,
            budget,
            last_seq: 0,
            main: Branch::default(),
            bytes: 0,
        }
    }

    /// Counts the held events' tokens and bytes again (after a cut or a restore), in one pass.
    fn recount(&mut self) {
        let tokens: Vec<u64> = self
            .main
            .events
            .iter()
            .map(|e| event_tokens(e, &O200k))
            .collect();
        self.main.pending_tokens = tokens.iter().sum();
        self.bytes = tokens.into_iter().map(held_bytes).sum();
    }
}

/// Which of a session's events the planner needs read back from the projections before it
/// observes an event (see [`Planner::history_wanted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryWanted {
    pub tenant_id: String,
    pub session_id: String,
    /// The events of the main branch after this seq; `None`: after the cut of the branch's
    /// latest successful compaction (and that compaction and the session's budget with them).
    pub after_seq: Option<u64>,
    /// Up to and including this seq.
    pub through_seq: u64,
}

/// A session's history read back from the projections for [`Planner::restore`].
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// The session's budget (from its `SessionStarted`), when read.
    pub budget: Option<u64>,
    /// The branch's latest successful compaction, when read.
    pub previous: Option<CompactionRecord>,
    /// The events asked for, in seq order.
    pub events: Vec<Event>,
}

/// What the planner remembers of an evicted session: its budget and latest compaction. The
/// record may not be in the projections yet (it is appended when the batch that derived it
/// ends), so the planner keeps it rather than read it back.
#[derive(Debug)]
struct Evicted {
    budget: u64,
    previous: Option<CompactionRecord>,
}

/// The compactor's pure state machine: feed it the log in order; it says when to compact.
#[derive(Debug)]
pub struct Planner {
    options: CompactorOptions,
    limits: PlannerLimits,
    sessions: LruCache<(String, String), SessionPlan>,
    /// As many evicted sessions as held ones.
    evicted_plans: LruCache<(String, String), Evicted>,
    held_bytes: usize,
    evicted: u64,
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
            limits: PlannerLimits::default(),
            sessions: LruCache::new_unbounded(),
            evicted_plans: LruCache::new(PlannerLimits::default().sessions),
            held_bytes: 0,
            evicted: 0,
            summarizer,
            tokens: O200k,
        }
    }

    /// The planner holding at most what `limits` allow.
    pub fn with_limits(mut self, limits: PlannerLimits) -> Self {
        self.limits = limits;
        self.evicted_plans = LruCache::new(limits.sessions.max(1));
        self
    }

    /// Sessions evicted so far under the limits.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Approximate bytes of the events held over all sessions.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// What must be read back from the projections (and handed to [`Planner::restore`])
    /// before `event` is observed: the history of a main-branch session the planner does not
    /// hold (never seen, or evicted), or the events it stopped holding while a session's
    /// compactions failed. `None` when it holds what it needs.
    pub fn history_wanted(&self, event: &Event) -> Option<HistoryWanted> {
        if event.branch_id != MAIN_BRANCH {
            return None;
        }
        let seq = event.seq?;
        let key = (event.tenant_id.clone(), event.session_id.clone());
        let after_seq = match self.sessions.peek(&key) {
            None if matches!(event.payload, Payload::SessionStarted(_)) => return None,
            None => None,
            Some(plan) if plan.unrestored => None,
            Some(plan) if seq <= plan.last_seq => return None,
            Some(plan) => match plan.main.gap_after {
                Some(last) if plan.main.events.len() < self.limits.session_events => Some(last),
                _ => return None,
            },
        };
        // An evicted session's compaction is remembered: only its events are read back.
        let after_seq = after_seq.or_else(|| {
            self.evicted_plans
                .peek(&key)
                .map(|e| e.previous.as_ref().map_or(0, |p| p.first_kept_seq - 1))
        });
        (seq > 1).then(|| HistoryWanted {
            tenant_id: key.0,
            session_id: key.1,
            after_seq,
            through_seq: seq - 1,
        })
    }

    /// Holds a session whose history could not be read back: it is not compacted, and its
    /// history is asked for again with its next event.
    pub fn restore_failed(&mut self, wanted: &HistoryWanted) {
        let key = (wanted.tenant_id.clone(), wanted.session_id.clone());
        if let Some(old) = self.sessions.remove(&key) {
            self.held_bytes -= old.bytes;
        }
        let mut plan = SessionPlan::new(DEFAULT_BUDGET);
        plan.unrestored = true;
        self.sessions.insert(key, plan);
        self.evict();
    }

    /// Restores what [`Planner::history_wanted`] asked for.
    pub fn restore(&mut self, wanted: &HistoryWanted, restored: Restored) {
        let key = (wanted.tenant_id.clone(), wanted.session_id.clone());
        if self.sessions.peek(&key).is_some_and(|p| p.unrestored) {
            if let Some(old) = self.sessions.remove(&key) {
                self.held_bytes -= old.bytes;
            }
        }
        if !self.sessions.contains_key(&key) {
            let mut plan = SessionPlan::new(DEFAULT_BUDGET);
            if let Some(evicted) = self.evicted_plans.remove(&key) {
                plan.budget = evicted.budget;
                plan.main.previous = evicted.previous;
            }
            self.sessions.insert(key.clone(), plan);
        }
        let plan = self.sessions.get_mut(&key).expect("inserted above");
        let before = plan.bytes;
        if let Some(budget) = restored.budget {
            plan.budget = budget;
        }
        if let Some(previous) = restored.previous {
            plan.main.previous = Some(previous);
        }
        plan.main.gap_after = None;
        for e in restored.events {
            if e.branch_id != MAIN_BRANCH || e.seq.is_none_or(|s| s <= plan.last_seq) {
                continue;
            }
            plan.last_seq = e.seq.unwrap_or(plan.last_seq);
            if !e.is_derived() {
                plan.main.events.push(e);
            }
        }
        plan.last_seq = plan.last_seq.max(wanted.through_seq);
        plan.recount();
        self.held_bytes = self.held_bytes - before + plan.bytes;
        self.evict();
    }

    /// Evicts least recently used sessions past the limits (never the one just used, which is
    /// the most recent).
    fn evict(&mut self) {
        while self.sessions.len() > 1
            && (self.sessions.len() > self.limits.sessions
                || self.held_bytes > self.limits.event_bytes)
        {
            let Some((key, plan)) = self.sessions.remove_lru() else {
                break;
            };
            self.held_bytes -= plan.bytes;
            self.evicted += 1;
            if !plan.unrestored {
                let evicted = Evicted {
                    budget: plan.budget,
                    previous: plan.main.previous,
                };
                self.evicted_plans.insert(key, evicted);
            }
        }
    }

    /// Folds one event in; returns a compaction record to append when the threshold is crossed.
    pub fn observe(&mut self, event: &Event) -> Option<CompactionRecord> {
        if event.branch_id != MAIN_BRANCH {
            return None;
        }
        let key = (event.tenant_id.clone(), event.session_id.clone());
        if !self.sessions.contains_key(&key) {
            self.sessions
                .insert(key.clone(), SessionPlan::new(DEFAULT_BUDGET));
        }
        let record = self.observe_held(&key, event);
        self.evict();
        record
    }

    fn observe_held(&mut self, key: &(String, String), event: &Event) -> Option<CompactionRecord> {
        let limits = self.limits;
        let plan = self.sessions.get_mut(key).expect("held");
        // Seen already (a re-read after a restart or rebalance): nothing new.
        if let Some(seq) = event.seq {
            if seq <= plan.last_seq {
                return None;
            }
            plan.last_seq = seq;
        }
        if let Payload::SessionStarted(p) = &event.payload {
            plan.budget = session_budget(p);
        }
        if let Payload::CompactionCompleted(p) = &event.payload {
            // A compaction on the log (ours, another instance's, or an explicit request's).
            if let Some(r) = CompactionRecord::from_payload(p).filter(|r| r.succeeded()) {
                let before = plan.bytes;
                drop_before_cut(&mut plan.main, &r);
                plan.main.previous = Some(r);
                plan.recount();
                self.held_bytes = self.held_bytes - before + plan.bytes;
            }
            return None;
        }
        if event.is_derived() || plan.unrestored {
            return None;
        }
        let budget = plan.budget;
        let t = event_tokens(event, &self.tokens);
        let b = &mut plan.main;
        b.pending_tokens += t;
        if b.events.len() < limits.session_events && b.gap_after.is_none() {
            b.events.push(event.clone());
            plan.bytes += held_bytes(t);
            self.held_bytes += held_bytes(t);
        } else if b.gap_after.is_none() {
            b.gap_after = b.events.last().and_then(|e| e.seq);
        }
        let limit = (budget as f64 * self.options.threshold) as u64;
        if b.pending_tokens <= limit.max(b.retry_above) {
            return None;
        }
        let record = compact(
            &b.events,
            b.previous.as_ref(),
            self.options.cut_rule(budget),
            self.summarizer.as_ref(),
            &self.tokens,
        );
        // Whatever happens, do not try again before another tenth of the budget has come in.
        b.retry_above = b.pending_tokens + budget / 10;
        let record = record?;
        if record.succeeded() {
            let gap = b.gap_after;
            let before = plan.bytes;
            drop_before_cut(b, &record);
            b.previous = Some(record.clone());
            b.gap_after = gap;
            plan.recount();
            self.held_bytes = self.held_bytes - before + plan.bytes;
        }
        Some(record)
    }
}

/// Keeps the events from the cut on (raw events before it are never needed again here: the
/// record stands in for them; the log still has them). The caller recounts the tokens.
fn drop_before_cut(b: &mut Branch, r: &CompactionRecord) {
    if let Some(i) = b
        .events
        .iter()
        .position(|e| e.event_id == r.first_kept_event_id)
    {
        b.events.drain(..i);
    }
    b.retry_above = 0;
}

/// The id of a record's `CompactionCompleted` event.
pub fn compaction_event_id(record: &CompactionRecord) -> String {
    format!("cmpev_{}", &record.compaction_id[4..])
}

/// The `CompactionCompleted` event of a record: its id derives from the compaction id, its time
/// from the last summarised event, so the same log gives the same event.
pub fn compaction_event(record: &CompactionRecord, source: &Event) -> Event {
    Event {
        event_id: compaction_event_id(record),
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
