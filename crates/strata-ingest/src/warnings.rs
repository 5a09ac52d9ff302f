//! What ingest accepts but warns about, in the event's result (`warnings`): nothing here
//! refuses an event, and a warning is only given when ingest can tell.
//!
//! - a session whose first event (seq 1) is not a `SessionStarted`: no model, window, system
//!   prompt or tools are known for it;
//! - a tool result (`ToolCallFinished`, `ToolCallFailed`) whose call is not open on the log:
//!   neither requested earlier in the batch nor open in the session's projections. When the
//!   projections lag behind the session's head, ingest cannot tell and says nothing.

use std::collections::{HashMap, HashSet};

use strata_core::payload::Payload;
use strata_core::{Event, EventType};
use strata_runtime::Backends;

/// (tenant, session).
type SessionKey = (String, String);

/// The warnings of the batch's fresh events, by their index in the batch. `heads_before` is
/// each session's head before the batch. Lookups that fail are logged and skipped: a warning
/// never costs an accepted batch.
pub(crate) async fn of_batch(
    backends: &Backends,
    fresh: &[(usize, Event)],
    heads_before: &HashMap<SessionKey, u64>,
) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut requested: HashSet<(&str, &str, &str)> = HashSet::new();
    let mut open_calls: HashMap<SessionKey, Option<HashSet<String>>> = HashMap::new();
    for (index, event) in fresh {
        if event.seq == Some(1) && event.event_type() != EventType::SessionStarted {
            out.push((*index, not_started(event)));
        }
        let key = (event.tenant_id.as_str(), event.session_id.as_str());
        for call in calls_of(&event.payload) {
            requested.insert((key.0, key.1, call));
        }
        let Some(call) = result_of(&event.payload) else {
            continue;
        };
        if requested.contains(&(key.0, key.1, call)) {
            continue;
        }
        let skey = (key.0.to_owned(), key.1.to_owned());
        if !open_calls.contains_key(&skey) {
            let before = heads_before.get(&skey).copied().unwrap_or(0);
            let open = open_on_log(backends, key.0, key.1, before).await;
            open_calls.insert(skey.clone(), open);
        }
        if let Some(Some(open)) = open_calls.get(&skey) {
            if !open.contains(call) {
                out.push((*index, orphan(event, call)));
            }
        }
    }
    out
}

fn not_started(event: &Event) -> String {
    format!(
        "session {:?} starts with {}, not SessionStarted: no model, context window, system \
         prompt or tools are known for it until one is sent",
        event.session_id,
        event.event_type().as_str()
    )
}

fn orphan(event: &Event, call: &str) -> String {
    format!(
        "tool result for call {call:?}, which is not an open call of session {:?} on the log \
         (never requested, or answered already): it is kept, but no context pairs it with a \
         request",
        event.session_id
    )
}

/// The tool call ids an event requests.
fn calls_of(payload: &Payload) -> Vec<&str> {
    match payload {
        Payload::ModelResponseReceived(p) => p
            .tool_calls
            .iter()
            .map(|c| c.tool_call_id.as_str())
            .collect(),
        Payload::ToolCallRequested(p) => vec![p.tool_call_id.as_str()],
        _ => Vec::new(),
    }
}

/// The tool call id an event answers.
fn result_of(payload: &Payload) -> Option<&str> {
    match payload {
        Payload::ToolCallFinished(p) => Some(&p.tool_call_id),
        Payload::ToolCallFailed(p) => Some(&p.tool_call_id),
        _ => None,
    }
}

/// The session's open tool calls when the projections reach `head` (the hot state's copy
/// first, then the store's fold); `None` when neither does, or a backend failed.
async fn open_on_log(
    backends: &Backends,
    tenant: &str,
    session: &str,
    head: u64,
) -> Option<HashSet<String>> {
    if head == 0 {
        return Some(HashSet::new());
    }
    match backends.hot.projected(tenant, session).await {
        Ok(Some(p)) if p.projected_seq == head => {
            return Some(
                p.open_tool_calls
                    .into_iter()
                    .map(|c| c.tool_call_id)
                    .collect(),
            );
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "no hot state for the tool result warning"),
    }
    match backends.store.session_fold(tenant, session).await {
        Ok(Some(fold)) if fold.head_seq == head => Some(fold.open_tool_calls.into_keys().collect()),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(error = %e, "no session fold for the tool result warning");
            None
        }
    }
}
