//! Explanations: why a record was or was not part of an assembly, in words.

use super::{ContextAssembly, OmissionReason};

/// Why a record (an event id, a tool call id or an artifact ref) was or was not part of an
/// assembly: one line per fact the record holds about it.
pub fn explain(a: &ContextAssembly, reference: &str) -> Vec<String> {
    let mut lines = explain_matches(a, reference);
    if lines.is_empty() {
        lines.push(not_found(a));
    }
    lines
}

/// What the record says about `reference` itself, if anything (no fallback line).
pub fn explain_matches(a: &ContextAssembly, reference: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for seg in a
        .included
        .iter()
        .filter(|s| s.source_event_ids.iter().any(|id| id == reference))
    {
        lines.push(format!(
            "included in {} ({}, {:?}, {}, {} tokens): {}",
            seg.id, seg.kind, seg.tier, seg.rendering, seg.tokens, seg.reason
        ));
    }
    for o in a
        .omitted_items
        .iter()
        .filter(|o| o.source_event_ids.iter().any(|id| id == reference))
    {
        lines.push(format!(
            "left out: {} ({}, {:?}, {} tokens)",
            omission_text(o.reason),
            o.kind,
            o.tier,
            o.tokens
        ));
    }
    for d in a.rehydrations.iter().filter(|d| {
        d.target == reference
            || d.tool_call_id.as_deref() == Some(reference)
            || d.artifact_ref.as_deref() == Some(reference)
    }) {
        lines.push(format!(
            "raw bytes {}: {}",
            if d.rehydrated {
                "rehydrated"
            } else {
                "refused"
            },
            d.reason
        ));
    }
    lines
}

/// The answer for a record the assembly does not mention.
pub(super) fn not_found(a: &ContextAssembly) -> String {
    let counts = a
        .omitted
        .iter()
        .map(|(r, n)| format!("{} {n}", omission_text(*r)))
        .collect::<Vec<_>>()
        .join(", ");
    if a.traced {
        format!(
            "not a candidate of this assembly: not on branch {}'s lineage or window for \
             participant {}, or not a record of session {} (omissions by reason: {counts})",
            a.branch_id, a.participant_id, a.session_id
        )
    } else {
        format!(
            "not among the selected refs; this record is compact (omissions by reason: \
             {counts}); assemble with --trace to keep every candidate"
        )
    }
}

/// A reason in words.
pub fn omission_text(reason: OmissionReason) -> &'static str {
    match reason {
        OmissionReason::Budget => "did not fit the token budget",
        OmissionReason::Stale => "stale",
        OmissionReason::Superseded => "superseded by a newer record",
        OmissionReason::OtherBranch => "on another branch",
        OmissionReason::OtherParticipant => "private to another participant",
        OmissionReason::PrivacyProvider => "withheld from this provider by privacy policy",
        OmissionReason::AuditOnly => "audit-only",
        OmissionReason::OrphanResult => "a tool result without a call",
        OmissionReason::Compacted => "covered by a compaction summary",
        OmissionReason::Redundant => "redundant with content already included",
        OmissionReason::OtherScope => "outside this session's scope",
        OmissionReason::NotPromoted => "a subagent's work, not promoted",
        OmissionReason::NotRelevant => "names neither a file in play nor the task's words",
    }
}
