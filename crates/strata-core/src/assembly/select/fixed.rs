//! What goes whatever the target, beside the history: the system prompt, the compaction
//! summary, the request not yet on the log and the pending calls; under the default valuation
//! also the unresolved errors, the task state the platform published that no message of the
//! history says (its shortest form: the published items only), the subagents' reports the
//! history does not carry, and what other sessions remember (memories of other scopes). A
//! baseline gets only what a provider call needs.

use std::collections::{BTreeMap, BTreeSet};

use super::super::candidates::{self, Compacted, Cx};
use super::super::state::{render_facts, render_state, subagent_unit};
use super::super::{memories, BundleMessage, Omission, Tier, TimelineMessage, ToolPair, Unit};
use super::Valuation;
use crate::projection::{AgentState, Sourced};
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;

/// What goes beside the history: what every context needs, and what only a cut history does.
pub(super) struct Fixed {
    /// Sent in every case.
    pub always: Vec<Unit>,
    /// Sent when the history is cut: the unresolved errors (a whole history shows them).
    pub when_cut: Vec<Unit>,
}

pub(super) fn units(
    cx: &Cx<'_>,
    visible: &[TimelineMessage],
    compaction: &mut Compacted<'_>,
    in_place: &BTreeMap<String, &str>,
    valuation: Valuation,
    omitted: &mut Vec<Omission>,
) -> Fixed {
    let mut always: Vec<Unit> = candidates::system_prompt(cx).into_iter().collect();
    always.extend(candidates::current_request(cx));
    always.extend(candidates::pending_calls(cx, visible));
    let mut when_cut = Vec::new();
    if valuation == Valuation::Evidence {
        always.extend(compaction.summary.take());
        always.extend(published_state(cx, &compaction.live));
        always.extend(subagent_reports(cx, &compaction.live, in_place, omitted));
        // The unresolved errors: the history shows them, whole however it is cut (their results
        // are protected), unless one's call is not in it (not on the log, or before the window).
        let recovery = candidates::recovery_unit(cx);
        if errors_outside(cx, &compaction.live) {
            always.extend(recovery);
        } else {
            omitted.extend(recovery.map(Unit::restated));
        }
        // What other sessions remember no message of this one says: it goes even with a
        // whole history.
        always.extend(other_sessions_memories(cx, compaction, omitted));
    }
    for u in always.iter_mut().chain(&mut when_cut) {
        u.protected = true;
    }
    Fixed { always, when_cut }
}

/// Whether an unresolved error's call is not among the history's messages.
fn errors_outside(cx: &Cx<'_>, live: &[&TimelineMessage]) -> bool {
    let calls: BTreeSet<&str> = live
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.tool_call_id.as_str()))
        .collect();
    cx.snapshot
        .state
        .errors
        .iter()
        .any(|e| !calls.contains(e.tool_call_id.as_str()))
}

/// The goal, task, plan, criteria, constraints, decisions and facts published as state
/// (`StateUpdated`), and the files written (`FileWritten`), that no message of the history
/// carries: a history sent whole does not say them, a history cut by lines might not either.
fn published_state(cx: &Cx<'_>, live: &[&TimelineMessage]) -> Option<Unit> {
    let in_history: BTreeSet<&str> = live
        .iter()
        .flat_map(|m| {
            std::iter::once(m.event_id.as_str()).chain(m.tool_calls.iter().flat_map(|c| {
                std::iter::once(c.request_event_id.as_str()).chain(c.result_event_id.as_deref())
            }))
        })
        .collect();
    let published = |items: &[Sourced]| -> Vec<Sourced> {
        items
            .iter()
            .filter(|s| !in_history.contains(s.source_event_id.as_str()))
            .cloned()
            .collect()
    };
    let one = |item: &Option<Sourced>| {
        item.clone()
            .filter(|s| !in_history.contains(s.source_event_id.as_str()))
    };
    let s = &cx.snapshot.state;
    let state = AgentState {
        goal: one(&s.goal),
        current_task: one(&s.current_task),
        last_verifier: one(&s.last_verifier),
        acceptance_criteria: published(&s.acceptance_criteria),
        plan: published(&s.plan),
        constraints: published(&s.constraints),
        open_questions: published(&s.open_questions),
        decisions: published(&s.decisions),
        facts: published(&s.facts),
        files_modified: published(&s.files_modified)
            .into_iter()
            .filter(|f| !named_by_a_call(live, &f.text))
            .collect(),
        ..AgentState::default()
    };
    let (mut text, mut sources) = render_state(&state);
    let (facts, fact_sources) = render_facts(&state);
    if text.is_empty() && facts.is_empty() {
        return None;
    }
    text.push_str(&facts);
    sources.extend(fact_sources);
    sources.sort();
    sources.dedup();
    Some(Unit {
        kind: "task_state",
        tier: Tier::P1,
        reason: "the task state the platform published that no message says".into(),
        sources,
        rendering: "verbatim",
        tokens: cx.tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS,
        messages: vec![BundleMessage::System { text }],
        protected: true,
        order: (1, 0, 0),
    })
}

/// Whether a call of the history names `path` in its arguments (the write that made it).
fn named_by_a_call(live: &[&TimelineMessage], path: &str) -> bool {
    live.iter()
        .flat_map(|m| &m.tool_calls)
        .any(|c| c.args.contains(path))
}

/// Finished or running subagents, except a report a result in the history already carries.
fn subagent_reports(
    cx: &Cx<'_>,
    live: &[&TimelineMessage],
    in_place: &BTreeMap<String, &str>,
    omitted: &mut Vec<Omission>,
) -> Vec<Unit> {
    let mut units = Vec::new();
    for (i, child) in cx.snapshot.state.subagents.iter().enumerate() {
        let (unit, omission) = subagent_unit(child, i as u32, cx.tokens, None);
        omitted.extend(omission);
        let report = child
            .report
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        let carried = report.is_some_and(|r| {
            live.iter()
                .flat_map(|m| m.tool_calls.iter())
                .filter_map(|c| {
                    (c.output.as_deref()).or_else(|| in_place.get(&c.tool_call_id).copied())
                })
                .any(|o| o.contains(r))
        });
        if carried {
            omitted.push(unit.restated());
        } else {
            units.push(unit);
        }
    }
    units
}

/// Finished subagents' reports whose call's stored output is in the history by its preview: the
/// report goes in place of the preview, as the transcript has it, and not again beside it. A
/// call whose output the privacy gate withholds keeps its safe summary, and the report goes
/// beside it as before.
pub(super) fn reports_in_their_steps<'s>(
    cx: &Cx<'s>,
    live: &[&TimelineMessage],
    in_place: &BTreeMap<String, &str>,
) -> Vec<(String, &'s str)> {
    let stored = || {
        live.iter()
            .flat_map(|m| m.tool_calls.iter())
            .filter(|c| c.output.is_none() && !in_place.contains_key(&c.tool_call_id))
            .filter(|c| !cx.gate.withholds(c.privacy_class))
    };
    let mut found = Vec::new();
    for child in cx.snapshot.state.subagents.iter().filter(|c| c.released()) {
        let Some(report) = child.report.as_deref().map(str::trim) else {
            continue;
        };
        let opens = |c: &&ToolPair| {
            let head = c.output_preview.as_deref().and_then(|p| p.lines().next());
            head.map(str::trim).is_some_and(|h| {
                h.len() >= REPORT_HEAD_CHARS
                    && report.starts_with(h)
                    && report.len() as u64 <= c.output_bytes.unwrap_or(0)
            })
        };
        if let Some(c) = stored().find(opens) {
            found.push((c.tool_call_id.clone(), report));
        }
    }
    found
}

/// Characters of a preview's first line that must open a report to take it for the report.
const REPORT_HEAD_CHARS: usize = 24;

/// Memories of other sessions (the user's, the project's): what this one knows of the others.
/// This session's own memories restate its history, which is a candidate itself.
fn other_sessions_memories(
    cx: &Cx<'_>,
    compaction: &Compacted<'_>,
    omitted: &mut Vec<Omission>,
) -> Vec<Unit> {
    let (offered, left_out) = memories::select_memories(
        cx.snapshot,
        &BTreeSet::new(),
        &compaction.calls,
        &BTreeSet::new(),
        true,
        cx.gate,
        cx.tokens,
    );
    omitted.extend(left_out);
    let (own, others): (Vec<Unit>, Vec<Unit>) = offered
        .into_iter()
        .partition(|u| memories::of_this_session(cx.snapshot, u));
    omitted.extend(own.into_iter().map(Unit::restated));
    others
}

/// The text of a message, for the names it carries.
pub(super) fn message_text(m: &BundleMessage) -> String {
    match m {
        BundleMessage::System { text }
        | BundleMessage::Data { text, .. }
        | BundleMessage::User { text } => text.clone(),
        BundleMessage::Assistant { text, tool_calls } => {
            let mut all = text.clone();
            for c in tool_calls {
                all.push('\n');
                all.push_str(&c.arguments);
            }
            all
        }
        BundleMessage::Tool { content, .. } => content.clone(),
    }
}
