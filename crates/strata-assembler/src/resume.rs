//! The resume view of a session (`GET /v1/sessions/{id}`): what a platform worker that restarted
//! needs to carry on, built from the projections without reading the session's events.

use serde_json::{json, Value};
use strata_core::assembly::Snapshot;
use strata_core::projection::SessionFold;
use strata_store::BranchHead;

/// Where a session stands, from its open calls and the main branch's newest message.
pub fn status(fold: &SessionFold, main: Option<&Snapshot>) -> &'static str {
    if fold.open_tool_calls.values().any(|c| c.awaiting_approval) {
        return "awaiting_approval";
    }
    if !fold.open_tool_calls.is_empty() {
        return "awaiting_tool_results";
    }
    match main.and_then(|s| s.messages.last()) {
        // A request, or tool results the model has not seen yet: the model is called next.
        Some(m) if m.role == "user" || !m.tool_calls.is_empty() => "awaiting_model",
        Some(_) => "idle",
        None => "new",
    }
}

/// The resume view: `main` is the main branch's snapshot (for the model and the compaction),
/// `heads` the branches' own heads.
pub fn view(fold: &SessionFold, main: Option<&Snapshot>, heads: &[BranchHead]) -> Value {
    let branches: Vec<Value> = fold
        .branches
        .values()
        .map(|b| {
            let head = heads.iter().find(|h| h.branch_id == b.branch_id);
            json!({
                "branch_id": b.branch_id,
                "kind": b.kind,
                "parent_branch_id": b.parent_branch_id,
                "fork_event_id": b.fork_event_id,
                "fork_seq": b.fork_seq,
                "head_seq": head.map(|h| h.head_seq),
                "events": head.map_or(0, |h| h.events),
                "last_event_at": head.map(|h| h.last_event_at.clone()),
            })
        })
        .collect();
    let subagents: Vec<Value> = fold
        .branches
        .values()
        .flat_map(|b| b.state.subagents.iter().map(move |s| (b, s)))
        .map(|(b, s)| {
            json!({
                "branch_id": b.branch_id,
                "child_session_id": s.child_session_id,
                "task": s.task,
                "status": s.status,
                "checkpoint": s.checkpoint,
            })
        })
        .collect();
    let model = main.map(|m| {
        json!({
            "model": m.model,
            "context_window_tokens": m.context_window_tokens,
            "reserved_output_tokens": m.reserved_output_tokens,
            "system_prompt_tokens": m.system_prompt_tokens,
            "tools": m.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            "project_id": m.project_id,
            "user_id": m.user_id,
        })
    });
    // The session's head event's, as the session list has it.
    let last_event_at = heads
        .iter()
        .max_by_key(|h| h.head_seq)
        .map(|h| h.last_event_at.as_str());
    json!({
        "session_id": fold.session_id,
        "status": status(fold, main),
        "head_seq": fold.head_seq,
        "event_count": fold.event_count,
        "last_event_id": fold.last_event_id,
        "last_event_at": last_event_at,
        "model": model,
        "branches": branches,
        "open_tool_calls": fold.open_tool_calls.values().collect::<Vec<_>>(),
        "subagents": subagents,
        "latest_compaction": main.and_then(|m| m.compaction.as_ref()),
    })
}
