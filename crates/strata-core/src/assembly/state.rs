//! The state blocks: the task state, the recovery block of unresolved errors and retry-critical
//! state, decisions and facts, and subagent reports.

use std::collections::BTreeMap;

use std::convert::Infallible;

use super::forms::data_message;
use super::gates::Gate;

use super::{BundleMessage, Omission, OmissionReason, Tier, Unit};
use crate::payload::PrivacyClass;
use crate::projection::{AgentState, SubagentState};
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

pub(super) fn render_state(s: &AgentState) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut sources = Vec::new();
    let mut one = |text: &mut String, title: &str, v: &Option<crate::projection::Sourced>| {
        if let Some(v) = v {
            text.push_str(&format!("{title}: {}\n", v.text));
            sources.push(v.source_event_id.clone());
        }
    };
    one(&mut text, "Goal", &s.goal);
    one(&mut text, "Current task", &s.current_task);
    one(&mut text, "Last verification", &s.last_verifier);
    let mut list = |text: &mut String, title: &str, v: &[crate::projection::Sourced]| {
        if !v.is_empty() {
            text.push_str(&format!("{title}:\n"));
            for item in v {
                text.push_str(&format!("- {}\n", item.text));
                sources.push(item.source_event_id.clone());
            }
        }
    };
    list(&mut text, "Acceptance criteria", &s.acceptance_criteria);
    list(&mut text, "Plan", &s.plan);
    list(&mut text, "Constraints", &s.constraints);
    list(&mut text, "Open questions", &s.open_questions);
    list(&mut text, "Files modified", &s.files_modified);
    list(&mut text, "Files read", &s.files_read);
    if text.is_empty() {
        return (text, sources);
    }
    sources.sort();
    sources.dedup();
    (format!("## Task state\n{text}"), sources)
}

/// Unresolved errors (retryable ones say so): protected at P0 until a later success resolves
/// them.
pub(super) fn render_recovery(s: &AgentState, gate: Gate) -> (String, Vec<String>) {
    if s.errors.is_empty() {
        return (String::new(), Vec::new());
    }
    let mut text = String::from("## Unresolved errors (kept until resolved)\n");
    let mut sources = Vec::new();
    // The newest errors of each tool are the actionable ones; earlier failures of the same tool
    // are counted, with their events among the sources.
    let mut per_tool: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &s.errors {
        *per_tool.entry(e.tool.as_str()).or_default() += 1;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &s.errors {
        let n = seen.entry(e.tool.as_str()).or_default();
        *n += 1;
        let total = per_tool[e.tool.as_str()];
        if total > RECOVERY_ERRORS_PER_TOOL && *n <= total - RECOVERY_ERRORS_PER_TOOL {
            sources.push(e.source_event_id.clone());
            if *n == total - RECOVERY_ERRORS_PER_TOOL {
                text.push_str(&format!(
                    "- {} earlier unresolved {} error{} (calls up to {})\n",
                    n,
                    e.tool,
                    if *n == 1 { "" } else { "s" },
                    e.tool_call_id
                ));
            }
            continue;
        }
        text.push_str(&format!(
            "- {} ({}{}{}): {}\n",
            e.tool,
            e.tool_call_id,
            if e.orphan {
                ", its call is not on the log"
            } else {
                ""
            },
            if e.retryable {
                ", retryable: retry with the same arguments"
            } else {
                ""
            },
            // The message is a line of the tool's output: withheld with it.
            if gate.withholds(e.privacy_class) {
                format!(
                    "[error message withheld by privacy policy: {} output, not sent to {}]",
                    e.privacy_class.map_or("private", PrivacyClass::as_str),
                    gate.provider.as_str()
                )
            } else {
                e.message.clone()
            }
        ));
        sources.push(e.source_event_id.clone());
    }
    sources.sort();
    sources.dedup();
    (text, sources)
}

/// Newest unresolved errors of one tool shown one by one.
pub(super) const RECOVERY_ERRORS_PER_TOOL: usize = 3;

/// A child subagent as the parent sees it: while it runs, only that it runs (its work is
/// private to it, counted as `not_promoted`); once it finished or was promoted, its report,
/// status, artifact handles, failure state and the parent's resume checkpoint.
///
/// `_aged_report` can only be `None`: reports aged under `strata.assembly/11`, which is retired.
/// The parameter goes once `select::fixed` (edited separately) stops passing it.
pub(super) fn subagent_unit(
    child: &SubagentState,
    index: u32,
    tokens: &dyn TokenCounter,
    _aged_report: Option<Infallible>,
) -> (Unit, Option<Omission>) {
    let mut text = String::new();
    let omission;
    let (kind, reason) = if child.released() {
        omission = None;
        text.push_str(&format!(
            "## Subagent {}: {}{}\n",
            child.child_session_id,
            child.status,
            if child.promoted && !child.finished {
                " (results promoted while it runs)"
            } else {
                ""
            }
        ));
        push_report(&mut text, child);
        if !child.artifacts.is_empty() {
            text.push_str(&format!("Artifacts: {}\n", child.artifacts.join(", ")));
        }
        if let Some(error) = &child.error {
            text.push_str(&format!(
                "Error: {error}{}\n",
                match child.retryable {
                    Some(true) => " (retryable)",
                    Some(false) => " (not retryable)",
                    None => "",
                }
            ));
        }
        if let Some(checkpoint) = &child.checkpoint {
            text.push_str(&format!(
                "Resume from the checkpoint recorded when it started: {checkpoint}\n"
            ));
        }
        (
            "subagent_result",
            "a finished or promoted subagent: its report, artifacts and failure state".to_owned(),
        )
    } else {
        text.push_str(&format!(
            "## Subagent {}: running\n{}Its work stays private to it until it finishes or is promoted.\n",
            child.child_session_id,
            child
                .task
                .as_deref()
                .map(|t| format!("Task: {t}\n"))
                .unwrap_or_default()
        ));
        omission = Some(Omission {
            kind: "subagent_state".into(),
            tier: Tier::P2,
            reason: OmissionReason::NotPromoted,
            source_event_ids: vec![child.started_event_id.clone()],
            tokens: 0,
        });
        (
            "subagent_running",
            "a running subagent: the parent knows it runs, not what it does".to_owned(),
        )
    };
    let mut sources = vec![child.started_event_id.clone()];
    if child.last_event_id != child.started_event_id {
        sources.push(child.last_event_id.clone());
    }
    // A finished child's report is its model's words: quoted data, not instructions.
    let (message, unit_tokens) = if child.released() {
        data_message("subagent report", text, tokens)
    } else {
        let t = tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS;
        (BundleMessage::System { text }, t)
    };
    (
        Unit {
            kind,
            tier: Tier::P1,
            reason,
            sources,
            rendering: "verbatim",
            tokens: unit_tokens,
            messages: vec![message],
            protected: true,
            order: (1, 1, index),
        },
        omission,
    )
}

fn push_report(text: &mut String, child: &SubagentState) {
    if let Some(task) = &child.task {
        text.push_str(&format!("Task: {task}\n"));
    }
    if let Some(report) = &child.report {
        text.push_str(&format!("Report: {report}\n"));
    }
}

pub(super) fn render_facts(s: &AgentState) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut sources = Vec::new();
    for (title, v) in [("Decisions", &s.decisions), ("Key facts", &s.facts)] {
        if !v.is_empty() {
            text.push_str(&format!("{title}:\n"));
            for item in v {
                text.push_str(&format!("- {}\n", item.text));
                sources.push(item.source_event_id.clone());
            }
        }
    }
    if text.is_empty() {
        return (text, sources);
    }
    sources.sort();
    sources.dedup();
    (format!("## Decisions and facts\n{text}"), sources)
}
