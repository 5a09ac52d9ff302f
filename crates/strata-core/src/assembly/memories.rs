//! Governed memories offered to an assembly: which may be seen here (scope, branch, participant,
//! privacy), which the window already shows, and — under a cap — which matter most: those that
//! name a file in play or the task's own words, then the newest. Under the long-turn policy an
//! observation's memory is offered only when it is relevant.

use std::collections::BTreeSet;

use super::{Gate, Omission, OmissionReason, Snapshot, Tier, Unit};
use crate::memory::{Memory, Scope};
use crate::payload::FreshnessClass;
use crate::tokens::TokenCounter;

/// At most this many memories are offered to the budget.
const MAX_MEMORIES: usize = 24;

/// The memory units of an assembly and the memories left out, each with its reason.
pub(super) fn select_memories(
    snapshot: &Snapshot,
    verbatim_calls: &BTreeSet<&str>,
    compacted_calls: &BTreeSet<&str>,
    restated: &BTreeSet<&str>,
    relevant_observations_only: bool,
    gate: Gate,
    tokens: &dyn TokenCounter,
) -> (Vec<Unit>, Vec<Omission>) {
    let offer = Offer {
        snapshot,
        project: snapshot.project_id.clone().unwrap_or_default(),
        as_of: snapshot
            .as_of
            .as_deref()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&chrono::Utc)),
        verbatim_calls,
        compacted_calls,
        restated,
        gate,
    };
    // Relevant first (naming a file in play, or the task's words), newest first within each:
    // the cap keeps what the next step is likeliest to use, not the oldest.
    let focus = Focus::of(snapshot);
    let relevance: Vec<Option<String>> = snapshot
        .memories
        .iter()
        .map(|m| focus.relevance(m))
        .collect();
    let mut order: Vec<usize> = (0..snapshot.memories.len()).rev().collect();
    order.sort_by_key(|&i| relevance[i].is_none());
    let mut units = Vec::new();
    let mut omitted = Vec::new();
    for i in order {
        let m = &snapshot.memories[i];
        // The long-turn policy: an observation's memory that names nothing in play only
        // restates what the session saw (measured: 1.1 points of reduction for no evidence,
        // docs/BENCHMARKS.md). What a user said, and hypotheses, are offered as before.
        let observation = matches!(m.kind.as_str(), "tool_memory" | "file_change");
        let reason = offer.exclusion(m).or_else(|| {
            if relevant_observations_only && observation && relevance[i].is_none() {
                Some(OmissionReason::NotRelevant)
            } else if units.len() >= MAX_MEMORIES {
                Some(OmissionReason::Budget)
            } else {
                None
            }
        });
        match reason {
            Some(reason) => omitted.push(Omission {
                kind: "memory".into(),
                tier: Tier::P2,
                reason,
                source_event_ids: m.source_refs.clone(),
                tokens: 0,
            }),
            None => units.push(offer.unit(m, i, relevance[i].as_deref(), tokens)),
        }
    }
    (units, omitted)
}

/// Whether memory unit `u` (made by [`Offer::unit`], whose order names its index in the
/// snapshot's memories) was recorded by the session being assembled.
pub(super) fn of_this_session(snapshot: &Snapshot, u: &Unit) -> bool {
    snapshot
        .memories
        .get(u.order.2 as usize)
        .is_none_or(|m| m.session_id == snapshot.session_id)
}

/// What decides whether a memory is offered to one assembly.
struct Offer<'a> {
    snapshot: &'a Snapshot,
    project: String,
    as_of: Option<chrono::DateTime<chrono::Utc>>,
    verbatim_calls: &'a BTreeSet<&'a str>,
    compacted_calls: &'a BTreeSet<&'a str>,
    /// Messages still in the history (not compacted), whose hypotheses restate them.
    restated: &'a BTreeSet<&'a str>,
    gate: Gate,
}

impl Offer<'_> {
    /// Whether this viewer may retrieve `m` at all (tenant, scope, session, participant, user).
    fn retrievable(&self, m: &Memory) -> bool {
        let s = self.snapshot;
        crate::memory::retrievable(
            m,
            &s.tenant_id,
            &self.project,
            &s.session_id,
            &s.participant_id,
            s.user_id.as_deref(),
        )
    }

    /// Whether `m` is a hypothesis (the model's own sentence, low confidence) whose message the
    /// history still holds: measured on public trajectories, such memories added tokens and no
    /// reference the next call made (`docs/BENCHMARKS.md`).
    fn restates_its_message(&self, m: &Memory) -> bool {
        m.confidence_basis == "model_guess"
            && m.session_id == self.snapshot.session_id
            && !m.source_refs.is_empty()
            && m.source_refs
                .iter()
                .all(|r| self.restated.contains(r.as_str()))
    }

    fn is_stale(&self, m: &Memory) -> bool {
        self.as_of.as_ref().is_some_and(|t| m.is_stale_at(t))
    }

    /// Why `m` is not offered, if it is not: not this viewer's, another branch's or
    /// participant's, superseded, withheld by privacy, shown by the window already, covered by
    /// the compaction, or stale and volatile.
    fn exclusion(&self, m: &Memory) -> Option<OmissionReason> {
        let s = self.snapshot;
        let this_session = m.session_id == s.session_id;
        let in_calls =
            |calls: &BTreeSet<&str>| m.tool_call_id.as_deref().is_some_and(|c| calls.contains(c));
        if !self.retrievable(m) {
            return Some(
                if m.tenant_id == s.tenant_id && this_session && m.scope == Scope::Session {
                    OmissionReason::OtherParticipant
                } else {
                    OmissionReason::OtherScope
                },
            );
        }
        // A memory of this session made on a sibling branch is that branch's state.
        if this_session && !s.in_lineage(&m.branch_id, m.source_seq) {
            return Some(OmissionReason::OtherBranch);
        }
        // A tool memory of this session made from another participant's tool result keeps
        // that result's privacy here, whatever scope it has elsewhere.
        if m.kind == "tool_memory"
            && this_session
            && m.owner_participant != s.participant_id
            && s.messages
                .iter()
                .any(|x| x.role == "assistant" && x.participant_id == m.owner_participant)
        {
            return Some(OmissionReason::OtherParticipant);
        }
        if m.superseded_by.is_some() {
            return Some(OmissionReason::Superseded);
        }
        // Restricted never leaves; confidential only to providers on the tenant's allow-list.
        if self.gate.withholds(Some(m.privacy_class)) {
            return Some(OmissionReason::PrivacyProvider);
        }
        if in_calls(self.verbatim_calls) || self.restates_its_message(m) {
            return Some(OmissionReason::Redundant);
        }
        // A file change the task state lists already.
        if m.kind == "file_change"
            && this_session
            && m.data
                .get("path")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|p| s.state.files_modified.iter().any(|f| f.text == p))
        {
            return Some(OmissionReason::Redundant);
        }
        if in_calls(self.compacted_calls) {
            return Some(OmissionReason::Compacted);
        }
        if self.is_stale(m) && m.freshness_class == FreshnessClass::Volatile {
            return Some(OmissionReason::Stale);
        }
        None
    }

    /// The unit of an offered memory: its text with its provenance, and why it is offered,
    /// with stale and conflict marks (both sides of a conflict shown with their sources).
    fn unit(
        &self,
        m: &Memory,
        i: usize,
        relevance: Option<&str>,
        tokens: &dyn TokenCounter,
    ) -> Unit {
        let mut text = format!(
            "[memory {}] {} ({} {}, confidence {:.2} from {}, observed {})",
            m.memory_id,
            m.text,
            m.scope.as_str(),
            m.family,
            m.confidence,
            m.confidence_basis,
            m.observed_at,
        );
        let mut reason = match m.scope {
            Scope::Session => "session memory".to_owned(),
            s => format!("{} memory of this {}", m.kind, s.as_str()),
        };
        match relevance {
            Some(why) => reason.push_str(&format!(", relevant: {why}")),
            None => reason.push_str(", among the newest"),
        }
        if self.is_stale(m) {
            text.push_str(&format!(
                " [STALE since {}: not current; revalidate with `{}`]",
                m.stale_after.as_deref().unwrap_or("?"),
                m.revalidate_with.as_deref().unwrap_or("the source tool")
            ));
            reason.push_str(", stale: marked with a revalidation hint");
        }
        if let Some(call) = &m.tool_call_id {
            reason.push_str(&format!(
                ", stands in for the raw output of call {call} (not in the verbatim turns)"
            ));
        }
        let conflicts = self.conflicts(m);
        if !conflicts.is_empty() {
            text.push_str(&format!(
                " [CONFLICTS with {}; sources {}]",
                conflicts.join(", "),
                m.source_refs.join(", ")
            ));
            reason.push_str(", conflict kept: both sides shown with their sources");
        }
        if !m.supersedes.is_empty() {
            reason.push_str(&format!(", successor of {}", m.supersedes.join(", ")));
        }
        let (message, memory_tokens) = super::data_message("memory", text, tokens);
        Unit {
            kind: "memory",
            tier: Tier::P2,
            reason,
            sources: m.source_refs.clone(),
            rendering: "memory",
            tokens: memory_tokens,
            messages: vec![message],
            protected: false,
            order: (1, 1, i as u32),
        }
    }

    /// The memories `m` conflicts with, either way round: the other side only if it may be
    /// shown itself.
    fn conflicts(&self, m: &Memory) -> Vec<String> {
        let mut conflicts = m.conflicts_with.clone();
        conflicts.extend(
            self.snapshot
                .memories
                .iter()
                .filter(|o| {
                    o.conflicts_with.contains(&m.memory_id)
                        && !self.gate.withholds(Some(o.privacy_class))
                        && self.retrievable(o)
                })
                .map(|o| o.memory_id.clone()),
        );
        conflicts
    }
}

/// What the session is working on now: the files it read and changed, and the words of its
/// goal, current task and newest request.
struct Focus {
    /// The paths in play and their distinctive file names: what a memory's path-like words are
    /// looked up in (one set lookup per word, not one scan per file per memory).
    files: BTreeSet<String>,
    task_terms: BTreeSet<String>,
}

/// A memory shares at least this many of the task's words to count as relevant to it.
const TASK_TERMS_SHARED: usize = 2;

impl Focus {
    fn of(snapshot: &Snapshot) -> Self {
        let s = &snapshot.state;
        let mut files = BTreeSet::new();
        for f in s.files_modified.iter().chain(s.files_read.iter()) {
            files.extend(file_name(&f.text).map(str::to_owned));
            files.insert(f.text.clone());
        }
        let request = snapshot
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.text.as_str());
        let task_terms = [
            s.goal.as_ref().map(|g| g.text.as_str()),
            s.current_task.as_ref().map(|t| t.text.as_str()),
            request,
        ]
        .into_iter()
        .flatten()
        .flat_map(terms)
        .collect();
        Self { files, task_terms }
    }

    /// Why `m` is relevant to the work in hand, if it is.
    fn relevance(&self, m: &Memory) -> Option<String> {
        let path = m.data.get("path").and_then(serde_json::Value::as_str);
        if let Some(file) = path
            .into_iter()
            .chain(path_words(&m.text))
            .find(|w| self.files.contains(*w))
        {
            return Some(format!("names {file}, a file in play"));
        }
        let shared: Vec<String> = terms(&m.text)
            .filter(|t| self.task_terms.contains(t))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        (shared.len() >= TASK_TERMS_SHARED)
            .then(|| format!("shares the task's words {}", shared.join(", ")))
    }
}

/// The last component of a path, when it is distinctive enough to match on its own.
fn file_name(path: &str) -> Option<&str> {
    let name = path.rsplit(['/', '\\']).next()?;
    (name.len() >= 5 && name.contains('.') && name != path).then_some(name)
}

/// The words of `text` that may be paths or file names (a sentence's final stop dropped).
fn path_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '\\')))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.contains('.') || w.contains('/'))
}

/// The words of `text` that can carry meaning across messages: five letters or more, lowercased.
fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.chars().count() >= 5)
        .map(str::to_lowercase)
}
