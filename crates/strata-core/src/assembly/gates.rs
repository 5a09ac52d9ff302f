//! The gates a candidate passes before it is rendered: which messages of the lineage this
//! participant may see, which raw outputs privacy withholds from this provider, and what the
//! memories a viewer may see say about each call (superseded, stale, in conflict).

use std::collections::{BTreeMap, BTreeSet};

use super::forms::{Rendering, MEMORY_FIRST_MIN_CHARS};
use super::{
    AssemblyRequest, Omission, OmissionReason, Provider, Snapshot, Tier, TimelineMessage, ToolPair,
    PEER_ROLE,
};
use crate::payload::PrivacyClass;
use crate::projection::truncate_chars;
use crate::tokens::TokenCounter;

/// Results left out as raw output: those shown only as "superseded" or "stale, revalidate", then
/// those the privacy policy withholds from this provider (each stays a candidate as its
/// metadata-only safe summary, and is counted).
pub(super) fn results_left_out(
    visible: &[TimelineMessage],
    notes: &CallNotes<'_>,
    gate: Gate,
) -> Vec<Omission> {
    let calls = || visible.iter().flat_map(|m| m.tool_calls.iter());
    let raw_output = |c: &ToolPair, reason| Omission {
        kind: "raw_tool_output".into(),
        tier: Tier::P2,
        reason,
        source_event_ids: c.result_event_id.iter().cloned().collect(),
        tokens: c.output_tokens,
    };
    let replaced = calls().filter_map(|c| {
        let note = notes.get(c.tool_call_id.as_str())?;
        if note.superseded_by.is_some() {
            Some(raw_output(c, OmissionReason::Superseded))
        } else if matches!(note.stale, Some((_, _, true))) {
            Some(raw_output(c, OmissionReason::Stale))
        } else {
            None
        }
    });
    let withheld = calls()
        .filter(|c| {
            gate.withholds(c.privacy_class) && (c.output.is_some() || c.output_ref.is_some())
        })
        .map(|c| raw_output(c, OmissionReason::PrivacyProvider));
    replaced.chain(withheld).collect()
}

/// What the memories say about one tool call's result.
pub(super) struct CallNote<'a> {
    /// Its tool memory, when this viewer may see it.
    memory: Option<&'a crate::memory::Memory>,
    /// The memory that replaced it (same tool and arguments, later).
    superseded_by: Option<String>,
    /// `(stale_after, revalidate_with, volatile)` when it is past its freshness.
    stale: Option<(String, String, bool)>,
    /// Memories that disagree with it.
    conflicts: Vec<String>,
}

pub(super) type CallNotes<'a> = BTreeMap<&'a str, CallNote<'a>>;

impl CallNote<'_> {
    /// The note without the marks a result shown as written would carry (a stale but not
    /// volatile result, a conflict): what stands in for a result stays.
    pub(super) fn without_marks(&self) -> Self {
        CallNote {
            memory: self.memory,
            superseded_by: self.superseded_by.clone(),
            stale: self.stale.clone().filter(|(_, _, volatile)| *volatile),
            conflicts: Vec::new(),
        }
    }

    /// [`Self::without_marks`] for result `c` shown as written: not past its freshness (a
    /// result of the turn in progress is what the agent works from, however long ago it came;
    /// its age is for the memory that stands in for it once the turn is over), and without the
    /// pointer that would stand in for a result shorter than the pointer itself (no saving, and
    /// no news).
    pub(super) fn as_written(&self, c: &ToolPair) -> Self {
        let mut note = self.without_marks();
        note.stale = None;
        let pointer = note.replacement(c, Rendering::Current);
        let shorter = |p: &String| c.output.as_ref().is_some_and(|o| o.len() <= p.len());
        if pointer.as_ref().is_some_and(shorter) {
            note.superseded_by = None;
        }
        note
    }

    /// Whether the result is past its freshness or replaced by a later one.
    pub(super) fn outdated(&self) -> bool {
        self.stale.is_some() || self.superseded_by.is_some()
    }

    /// Freshness and conflict marks to put before a result shown as it was.
    pub(super) fn marks(&self) -> String {
        let mut out = String::new();
        if let Some((after, with, _)) = &self.stale {
            out.push_str(&format!(
                "[STALE since {after}: not current; revalidate with `{with}`]"
            ));
        }
        if !self.conflicts.is_empty() {
            out.push_str(&format!(
                "[CONFLICTS with {}: another source disagrees; both kept]",
                self.conflicts.join(", ")
            ));
        }
        out
    }

    /// What stands in for the result instead of its bytes: nothing of a superseded result but
    /// the fact; nothing of a stale volatile one but how to revalidate it; in older turns, its
    /// memory (with its marks).
    pub(super) fn replacement(&self, c: &ToolPair, mode: Rendering) -> Option<String> {
        if let Some(successor) = &self.superseded_by {
            return Some(format!(
                "[SUPERSEDED by {successor}: a later result replaced this one]"
            ));
        }
        if let Some((after, with, true)) = &self.stale {
            return Some(format!(
                "[STALE since {after}, volatile result of {} omitted: revalidate with `{with}`]",
                c.name
            ));
        }
        // Completed turns: a long result goes as its memory (the raw output stays on the log).
        let long = c.output_bytes.unwrap_or(0) as usize > MEMORY_FIRST_MIN_CHARS
            || c.output
                .as_ref()
                .is_some_and(|o| o.len() > MEMORY_FIRST_MIN_CHARS);
        if matches!(
            mode,
            Rendering::Older | Rendering::Digest | Rendering::AgedAnswered
        ) || (mode == Rendering::Recent && long)
        {
            let m = self.memory?;
            let marks = self.marks();
            // A digest line names the artifact itself; elsewhere the memory carries the handle.
            // (The call id is the handle to rehydrate it by; the hash prefix says which bytes.)
            let handle = match (&c.output_ref, mode) {
                (Some(r), Rendering::Recent | Rendering::Older | Rendering::AgedAnswered) => {
                    format!(
                        " [full output: {} of {}]",
                        truncate_chars(r, "artifact:sha256:".len() + 12),
                        c.tool_call_id
                    )
                }
                _ => String::new(),
            };
            return Some(format!(
                "[memory {}] {}{}{}{handle}",
                m.memory_id,
                m.text,
                if marks.is_empty() { "" } else { " " },
                marks
            ));
        }
        None
    }
}

/// The notes of every tool call of the snapshot that has a tool memory this viewer may see.
pub(super) fn call_notes<'a>(snapshot: &'a Snapshot, gate: Gate) -> CallNotes<'a> {
    use crate::memory::retrievable;
    let as_of = snapshot
        .as_of
        .as_deref()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let project = snapshot.project_id.clone().unwrap_or_default();
    let mut notes = CallNotes::new();
    for m in &snapshot.memories {
        let Some(call) = m.tool_call_id.as_deref() else {
            continue;
        };
        if m.kind != "tool_memory"
            || gate.withholds(Some(m.privacy_class))
            || !retrievable(
                m,
                &snapshot.tenant_id,
                &project,
                &snapshot.session_id,
                &snapshot.participant_id,
                snapshot.user_id.as_deref(),
            )
        {
            continue;
        }
        let stale = as_of.as_ref().filter(|t| m.is_stale_at(t)).map(|_| {
            (
                m.stale_after.clone().unwrap_or_else(|| "?".into()),
                m.revalidate_with
                    .clone()
                    .unwrap_or_else(|| "the source tool".into()),
                m.freshness_class == crate::payload::FreshnessClass::Volatile,
            )
        });
        let mut conflicts = m.conflicts_with.clone();
        conflicts.extend(
            snapshot
                .memories
                .iter()
                .filter(|o| o.conflicts_with.contains(&m.memory_id))
                .map(|o| o.memory_id.clone()),
        );
        conflicts.sort();
        conflicts.dedup();
        notes.insert(
            call,
            CallNote {
                memory: m.superseded_by.is_none().then_some(m),
                superseded_by: m.superseded_by.clone(),
                stale,
                conflicts,
            },
        );
    }
    notes
}

/// What the privacy policy lets through to this provider.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gate {
    pub provider: Provider,
    pub confidential_allowed: bool,
}

impl Gate {
    /// Whether a raw payload of this class is withheld: `restricted` always, `confidential`
    /// unless the tenant allows this provider.
    pub(super) fn withholds(self, class: Option<PrivacyClass>) -> bool {
        match class {
            Some(PrivacyClass::Restricted) => true,
            Some(PrivacyClass::Confidential) => !self.confidential_allowed,
            _ => false,
        }
    }

    /// The metadata-only stand-in for a withheld output: what it was, how big, where it is,
    /// and how to get it revalidated. Never any of its bytes (nor its preview).
    pub(super) fn safe_summary(self, c: &ToolPair) -> String {
        let class = c.privacy_class.map_or("private", PrivacyClass::as_str);
        format!(
            "[withheld by privacy policy: {class} output of {}, {} bytes{}; not sent to {}. \
             To use it, re-run {} where policy allows, or ask the user for what is needed.]",
            c.name,
            c.output_bytes
                .or_else(|| c.output.as_ref().map(|o| o.len() as u64))
                .unwrap_or(0),
            c.output_ref
                .as_deref()
                .map(|r| format!(", stored as {r}"))
                .unwrap_or_default(),
            self.provider.as_str(),
            c.name
        )
    }
}

/// The messages of the lineage this participant may see, and what visibility kept out.
/// User messages are visible to all; another participant's steps with tool calls are its
/// private working state; its final text is branch context, sent with a speaker label. In
/// multi-party sessions, user messages of a participant that is not an agent (a moderator)
/// carry its label too.
/// What every policy starts from: the request's privacy gate, the messages this participant may
/// see (another participant's working state is never a candidate), what the memories say about
/// each call, and what visibility and privacy left out.
pub(super) fn admitted<'s>(
    snapshot: &'s Snapshot,
    request: &AssemblyRequest,
    tokens: &dyn TokenCounter,
) -> (Gate, Vec<TimelineMessage>, CallNotes<'s>, Vec<Omission>) {
    let gate = Gate {
        provider: request.provider,
        confidential_allowed: request.confidential_allowed,
    };
    let (visible, mut omitted) = visible_messages(snapshot, tokens);
    let notes = call_notes(snapshot, gate);
    omitted.extend(results_left_out(&visible, &notes, gate));
    (gate, visible, notes, omitted)
}

pub(super) fn visible_messages(
    snapshot: &Snapshot,
    tokens: &dyn TokenCounter,
) -> (Vec<TimelineMessage>, Vec<Omission>) {
    let me = snapshot.participant_id.as_str();
    let agents: BTreeSet<&str> = snapshot
        .messages
        .iter()
        .filter(|m| m.role == "assistant")
        .map(|m| m.participant_id.as_str())
        .collect();
    let speakers: BTreeSet<&str> = snapshot
        .messages
        .iter()
        .filter(|m| m.role == "user" && !agents.contains(m.participant_id.as_str()))
        .map(|m| m.participant_id.as_str())
        .collect();
    let multi_party = agents.len() > 1 || speakers.len() > 1;
    let mut out = Vec::with_capacity(snapshot.messages.len());
    let mut omitted = Vec::new();
    let labelled = |m: &TimelineMessage, role: &str| {
        let label = format!("[{}] ", m.participant_id);
        TimelineMessage {
            role: role.to_owned(),
            tokens: m.tokens + tokens.count(&label),
            text: label + &m.text,
            ..m.clone()
        }
    };
    for m in &snapshot.messages {
        if m.role == "assistant" && m.participant_id != me {
            if m.tool_calls.is_empty() {
                out.push(labelled(m, PEER_ROLE));
                continue;
            }
            let mut sources = vec![m.event_id.clone()];
            let mut t = m.tokens;
            for c in &m.tool_calls {
                sources.push(c.request_event_id.clone());
                sources.extend(c.result_event_id.clone());
                t += c.call_tokens + c.output_tokens;
            }
            omitted.push(Omission {
                kind: "participant_working_state".into(),
                tier: Tier::P1,
                reason: OmissionReason::OtherParticipant,
                source_event_ids: sources,
                tokens: t,
            });
        } else if multi_party
            && m.role == "user"
            && m.participant_id != me
            && !agents.contains(m.participant_id.as_str())
        {
            out.push(labelled(m, "user"));
        } else {
            out.push(m.clone());
        }
    }
    (out, omitted)
}
