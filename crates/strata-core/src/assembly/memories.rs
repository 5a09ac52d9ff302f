//! Governed memories offered to an assembly: which may be seen here (scope, branch, participant,
//! privacy), which the window already shows, and — under a cap — which matter most: those that
//! name a file in play or the task's own words, then the newest. Under the long-turn policy an
//! observation's memory is offered only when it is relevant.

use std::collections::BTreeSet;

use super::{Gate, Omission, OmissionReason, Snapshot, Tier, Unit};
use crate::memory::Memory;
use crate::tokens::TokenCounter;

/// At most this many memories are offered to the budget.
const MAX_MEMORIES: usize = 24;

/// The memory units of an assembly and the memories left out, each with its reason.
pub(super) fn select_memories(
    snapshot: &Snapshot,
    verbatim_calls: &BTreeSet<&str>,
    compacted_calls: &BTreeSet<&str>,
    relevant_observations_only: bool,
    gate: Gate,
    tokens: &dyn TokenCounter,
) -> (Vec<Unit>, Vec<Omission>) {
    use crate::memory::{retrievable, Scope};
    use crate::payload::FreshnessClass;
    let as_of = snapshot
        .as_of
        .as_deref()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let project = snapshot.project_id.clone().unwrap_or_default();
    let mut units = Vec::new();
    let mut omitted = Vec::new();
    let omit = |omitted: &mut Vec<Omission>, m: &crate::memory::Memory, reason| {
        omitted.push(Omission {
            kind: "memory".into(),
            tier: Tier::P2,
            reason,
            source_event_ids: m.source_refs.clone(),
            tokens: 0,
        });
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
    let mut offered = 0usize;
    for i in order {
        let m = &snapshot.memories[i];
        if !retrievable(
            m,
            &snapshot.tenant_id,
            &project,
            &snapshot.session_id,
            &snapshot.participant_id,
            snapshot.user_id.as_deref(),
        ) {
            let reason = if m.tenant_id == snapshot.tenant_id
                && m.session_id == snapshot.session_id
                && m.scope == Scope::Session
            {
                OmissionReason::OtherParticipant
            } else {
                OmissionReason::OtherScope
            };
            omit(&mut omitted, m, reason);
            continue;
        }
        // A memory of this session made on a sibling branch is that branch's state.
        if m.session_id == snapshot.session_id && !snapshot.in_lineage(&m.branch_id, m.source_seq) {
            omit(&mut omitted, m, OmissionReason::OtherBranch);
            continue;
        }
        // A tool memory of this session made from another participant's tool result keeps
        // that result's privacy here, whatever scope it has elsewhere.
        if m.kind == "tool_memory"
            && m.session_id == snapshot.session_id
            && m.owner_participant != snapshot.participant_id
            && snapshot
                .messages
                .iter()
                .any(|x| x.role == "assistant" && x.participant_id == m.owner_participant)
        {
            omit(&mut omitted, m, OmissionReason::OtherParticipant);
            continue;
        }
        if m.superseded_by.is_some() {
            omit(&mut omitted, m, OmissionReason::Superseded);
            continue;
        }
        // Restricted never leaves; confidential only to providers on the tenant's allow-list.
        if gate.withholds(Some(m.privacy_class)) {
            omit(&mut omitted, m, OmissionReason::PrivacyProvider);
            continue;
        }
        if m.tool_call_id
            .as_deref()
            .is_some_and(|c| verbatim_calls.contains(c))
        {
            omit(&mut omitted, m, OmissionReason::Redundant);
            continue;
        }
        if m.kind == "file_change"
            && m.session_id == snapshot.session_id
            && m.data
                .get("path")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|p| snapshot.state.files_modified.iter().any(|f| f.text == p))
        {
            // The task state lists the file already.
            omit(&mut omitted, m, OmissionReason::Redundant);
            continue;
        }
        if m.tool_call_id
            .as_deref()
            .is_some_and(|c| compacted_calls.contains(c))
        {
            omit(&mut omitted, m, OmissionReason::Compacted);
            continue;
        }
        let stale = as_of.as_ref().is_some_and(|t| m.is_stale_at(t));
        if stale && m.freshness_class == FreshnessClass::Volatile {
            omit(&mut omitted, m, OmissionReason::Stale);
            continue;
        }
        // The long-turn policy: an observation's memory that names nothing in play only
        // restates what the session saw (measured: 1.1 points of reduction for no evidence,
        // docs/BENCHMARKS.md). What a user said, and hypotheses, are offered as before.
        let observation = matches!(m.kind.as_str(), "tool_memory" | "file_change");
        if relevant_observations_only && observation && relevance[i].is_none() {
            omit(&mut omitted, m, OmissionReason::NotRelevant);
            continue;
        }
        if offered >= MAX_MEMORIES {
            omit(&mut omitted, m, OmissionReason::Budget);
            continue;
        }
        offered += 1;
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
        match &relevance[i] {
            Some(why) => reason.push_str(&format!(", relevant: {why}")),
            None => reason.push_str(", among the newest"),
        }
        if stale {
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
        let mut conflicts = m.conflicts_with.clone();
        conflicts.extend(
            snapshot
                .memories
                .iter()
                .filter(|o| {
                    // Only the other side if it may be shown itself.
                    o.conflicts_with.contains(&m.memory_id)
                        && !gate.withholds(Some(o.privacy_class))
                        && retrievable(
                            o,
                            &snapshot.tenant_id,
                            &project,
                            &snapshot.session_id,
                            &snapshot.participant_id,
                            snapshot.user_id.as_deref(),
                        )
                })
                .map(|o| o.memory_id.clone()),
        );
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
        units.push(Unit {
            kind: "memory",
            tier: Tier::P2,
            reason,
            sources: m.source_refs.clone(),
            rendering: "memory",
            tokens: memory_tokens,
            messages: vec![message],
            protected: false,
            order: (1, 1, i as u32),
        });
    }
    (units, omitted)
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
