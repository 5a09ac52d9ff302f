//! The compactor's pure state machine: fed a log in order, it says when a branch's tokens not
//! yet covered by a compaction pass a fraction of its budget, and compacts it. The compactor
//! service and `strata eval` (which derives what the services would have, inline) both run it.

use std::collections::BTreeMap;

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
            self.budgets.insert(key.clone(), session_budget(p));
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
            self.options.cut_rule(budget),
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
