//! Rehydration: which raw outputs go into the context byte for byte — those a request asks for
//! by id, ref or words, and under the long-turn policy the working set's — decided before any
//! blob is read, then placed and, where the token budget cannot take them, refused.

use std::collections::{BTreeMap, BTreeSet};

use super::candidates::Cx;
use super::forms::data_message;
use super::{
    aging, is_step, AssemblyPolicy, AssemblyRequest, RehydrationDecision, Snapshot, Tier,
    TimelineMessage, ToolPair, Unit, PEER_ROLE,
};
use crate::payload::PrivacyClass;
use crate::projection::{truncate_chars, PLATFORM_ROLE};

/// Words that make a request ask for exact bytes ("use the exact CSV from before").
const EXACT_WORDS: [&str; 6] = [
    "exact",
    "exactly",
    "raw",
    "verbatim",
    "byte-for-byte",
    "original",
];
/// Words too common to name an artifact.
const STOP_WORDS: [&str; 44] = [
    "the", "use", "exact", "exactly", "raw", "verbatim", "original", "from", "before", "earlier",
    "please", "with", "and", "that", "this", "again", "file", "data", "output", "same", "give",
    "show", "send", "bytes", "byte", "for", "into", "need", "want", "can", "you", "what", "which",
    "had", "have", "was", "were", "are", "all", "its", "our", "your", "their", "them",
];

/// The words of the current request that name something inside an output rather than the
/// tool call itself.
fn focus_words(snapshot: &Snapshot, request: &AssemblyRequest, c: &ToolPair) -> Vec<String> {
    let Some(text) = request_text(snapshot, request) else {
        return Vec::new();
    };
    let hay = format!("{} {}", c.name, c.args).to_lowercase();
    let mut words: Vec<String> = request_words(&text)
        .into_iter()
        .filter(|w| w.len() >= 3 && !STOP_WORDS.contains(&w.as_str()) && !hay.contains(w.as_str()))
        .collect();
    words.sort();
    words.dedup();
    words
}

/// The first line and the lines mentioning any of `words` (case-insensitive), when that is some
/// but not all of the others: `(text, kept, total)`.
fn focused_lines(raw: &str, words: &[String]) -> Option<(String, usize, usize)> {
    if words.is_empty() {
        return None;
    }
    let mut lines = raw.split_inclusive('\n');
    let header = lines.next()?;
    let rest: Vec<&str> = lines.collect();
    let kept: Vec<&str> = rest
        .iter()
        .copied()
        .filter(|l| {
            let l = l.to_lowercase();
            words.iter().any(|w| l.contains(w.as_str()))
        })
        .collect();
    if kept.is_empty() || kept.len() == rest.len() {
        return None;
    }
    let mut out = String::from(header);
    for l in &kept {
        out.push_str(l);
    }
    Some((out, kept.len(), rest.len()))
}

/// The text of the current request: the one passed in, else the newest user message.
fn request_text(snapshot: &Snapshot, request: &AssemblyRequest) -> Option<String> {
    request.request.clone().or_else(|| {
        snapshot
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.text.clone())
    })
}

/// Lowercase words of a text (letters, digits, `-`, `_`, inner `.`).
fn request_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Decides, before any blob is read, which artifacts the context may carry byte for byte: the
/// ones `request.rehydrate` names, and the one the current request's words name when it asks
/// for exact bytes. Each must be a tool result this participant may see on this branch lineage,
/// pass the privacy and provider checks, and fit the byte budget (in the order asked). Pure:
/// the service reads the admitted ones from blob storage and passes them in
/// `AssemblyRequest::rehydrated`.
pub fn rehydration_plan(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
) -> Vec<RehydrationDecision> {
    rehydration_plan_with_policy(snapshot, request, &AssemblyPolicy::default())
}

/// Why an output of the working set is rehydrated without being asked for (the long-turn
/// policy sends its newest steps whole, in place).
pub(super) const WORKING_SET_REASON: &str =
    "the newest observation, which the next call answers: sent whole, in place";

/// Why an output asked for byte for byte goes where it is, in the history: its bytes are
/// inline there, and one selection keeps them whole instead of sending a second copy.
pub(super) const IN_HISTORY_REASON: &str =
    "asked for byte for byte; its bytes are inline in the history: sent whole, in place";

/// Under one selection, the outputs asked for byte for byte whose bytes are inline in the
/// history (not offloaded): each decision says they go in place, and their call ids are
/// returned, for the selection to keep those results whole.
pub(super) fn asked_inline(
    visible: &[TimelineMessage],
    rehydrations: &mut [RehydrationDecision],
) -> BTreeSet<String> {
    let mut asked = BTreeSet::new();
    for d in rehydrations
        .iter_mut()
        .filter(|d| d.rehydrated && d.reason != WORKING_SET_REASON && d.artifact_ref.is_none())
    {
        if let Some(c) = decided_call(visible, d).filter(|c| c.output.is_some()) {
            asked.insert(c.tool_call_id.clone());
            d.reason = IN_HISTORY_REASON.into();
        }
    }
    asked
}

/// [`rehydration_plan`] under `policy`: the long-turn policy also admits the offloaded outputs
/// of its working set, newest first, within the same checks and byte budget (after what was
/// asked for; those it cannot admit are not listed, nobody asked for them).
pub fn rehydration_plan_with_policy(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    policy: &AssemblyPolicy,
) -> Vec<RehydrationDecision> {
    let pairs: Vec<(&TimelineMessage, &ToolPair)> = snapshot
        .messages
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(move |c| (m, c)))
        .collect();
    let mut targets: Vec<String> = request.rehydrate.clone();
    if let Some(c) = named_by_request(snapshot, request, &pairs) {
        if !targets.contains(&c.tool_call_id)
            && !c.output_ref.as_ref().is_some_and(|r| targets.contains(r))
        {
            targets.push(c.tool_call_id.clone());
        }
    }
    let asked = targets.len();
    if policy.aged_steps_after.is_some() {
        for id in working_set(snapshot, policy, &pairs) {
            if !targets.contains(&id) {
                targets.push(id);
            }
        }
    }
    let mut spent: u64 = 0;
    let mut decisions: Vec<RehydrationDecision> = targets
        .into_iter()
        .enumerate()
        .map(|(i, target)| admit(snapshot, request, &pairs, target, i >= asked, &mut spent))
        .collect();
    // One decision per target, in order: of the unasked ones, only the admitted are listed.
    let mut i = 0;
    decisions.retain(|d| {
        i += 1;
        i <= asked || d.rehydrated
    });
    decisions
}

/// The call a request for exact bytes names ("use the exact CSV from before"): the newest
/// answered call before the request whose name or arguments share the most of its words; a word
/// that is a segment of the tool's name counts double ("csv" names export_csv more than a script
/// that happens to call read_csv).
fn named_by_request<'s>(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    pairs: &[(&TimelineMessage, &'s ToolPair)],
) -> Option<&'s ToolPair> {
    let text = request_text(snapshot, request)?;
    let words = request_words(&text);
    if !words.iter().any(|w| EXACT_WORDS.contains(&w.as_str())) {
        return None;
    }
    // A call made after the request cannot be what the request names.
    let request_seq = match request.request {
        Some(_) => u64::MAX,
        None => snapshot
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map_or(u64::MAX, |m| m.seq),
    };
    let names: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| w.len() >= 3 && !STOP_WORDS.contains(w))
        .collect();
    let score = |c: &ToolPair| -> usize {
        let name = c.name.to_lowercase();
        let segments: Vec<&str> = name.split(['.', '_', '-', '/']).collect();
        let args = c.args.to_lowercase();
        names
            .iter()
            .map(|w| 2 * usize::from(segments.contains(w)) + usize::from(args.contains(*w)))
            .sum()
    };
    pairs
        .iter()
        .rev()
        .filter(|(m, c)| (c.output.is_some() || c.output_ref.is_some()) && m.seq < request_seq)
        .map(|(_, c)| (score(c), *c))
        .filter(|(score, _)| *score > 0)
        .fold(None::<(usize, &ToolPair)>, |best, (score, c)| match best {
            Some((b, _)) if b >= score => best,
            _ => Some((score, c)),
        })
        .map(|(_, c)| c)
}

/// The offloaded outputs of the long-turn policy's working set, by call id: the observation the
/// next call answers (the newest step's, unless a user message came after it), then the newest
/// reads of the files in play, then the rest of the working set, newest first. Only outputs a
/// provider may see unasked (public or internal).
fn working_set(
    snapshot: &Snapshot,
    policy: &AssemblyPolicy,
    pairs: &[(&TimelineMessage, &ToolPair)],
) -> Vec<String> {
    let steps: Vec<&TimelineMessage> = snapshot.messages.iter().collect();
    let views = aging::file_views(&steps);
    let working_steps = snapshot
        .messages
        .iter()
        .rev()
        .take_while(|m| m.role != "user" && m.role != PEER_ROLE && m.role != PLATFORM_ROLE)
        .filter(|m| is_step(m))
        .take(policy.aged_steps_after.unwrap_or_default());
    let mut candidates: Vec<&ToolPair> = Vec::new();
    for (i, m) in working_steps.enumerate() {
        candidates.extend(m.tool_calls.iter());
        if i == 0 {
            candidates.extend(
                pairs
                    .iter()
                    .rev()
                    .map(|(_, c)| *c)
                    .filter(|c| views.contains_key(&c.tool_call_id)),
            );
        }
    }
    candidates
        .into_iter()
        .filter(|c| {
            c.output_ref.is_some()
                && c.privacy_class
                    .is_none_or(|p| p == PrivacyClass::Public || p == PrivacyClass::Internal)
        })
        .map(|c| c.tool_call_id.clone())
        .collect()
}

/// The decision on one target: found on this lineage, this participant's to see, with an
/// output, allowed by privacy for this provider, and within the byte budget left (`spent` so
/// far, which an admission adds to).
fn admit(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    pairs: &[(&TimelineMessage, &ToolPair)],
    target: String,
    unasked: bool,
    spent: &mut u64,
) -> RehydrationDecision {
    let found = pairs.iter().find(|(_, c)| {
        c.tool_call_id == target || c.output_ref.as_deref() == Some(target.as_str())
    });
    let refuse = |tool: Option<&ToolPair>, reason: String| RehydrationDecision {
        target: target.clone(),
        tool_call_id: tool.map(|c| c.tool_call_id.clone()),
        artifact_ref: tool.and_then(|c| c.output_ref.clone()),
        bytes: tool.and_then(|c| c.output_bytes),
        rehydrated: false,
        reason,
    };
    let Some((message, c)) = found else {
        return refuse(
            None,
            "no tool result of this branch lineage has this id or artifact ref".into(),
        );
    };
    if message.participant_id != snapshot.participant_id && message.role == "assistant" {
        return refuse(
            Some(c),
            format!("private to participant {}", message.participant_id),
        );
    }
    if c.output.is_none() && c.output_ref.is_none() {
        return refuse(Some(c), "the call has no output".into());
    }
    match c.privacy_class {
        Some(PrivacyClass::Restricted) => {
            return refuse(
                Some(c),
                "restricted: raw bytes never go to a provider".into(),
            );
        }
        Some(PrivacyClass::Confidential) if !request.confidential_allowed => {
            return refuse(
                Some(c),
                format!(
                    "confidential: {} is not on the tenant's allow-list",
                    request.provider.as_str()
                ),
            );
        }
        _ => {}
    }
    let bytes = c
        .output_bytes
        .or_else(|| c.output.as_ref().map(|o| o.len() as u64))
        .unwrap_or(0);
    if *spent + bytes > request.rehydrate_max_bytes {
        return refuse(
            Some(c),
            format!(
                "{bytes} bytes exceed the rehydration byte budget ({} of {} left)",
                request.rehydrate_max_bytes.saturating_sub(*spent),
                request.rehydrate_max_bytes
            ),
        );
    }
    *spent += bytes;
    RehydrationDecision {
        target: target.clone(),
        tool_call_id: Some(c.tool_call_id.clone()),
        artifact_ref: c.output_ref.clone(),
        bytes: Some(bytes),
        rehydrated: true,
        reason: if unasked {
            WORKING_SET_REASON.into()
        } else if c.output_ref.is_some() {
            "asked for byte for byte; privacy, provider and byte budget allow".into()
        } else {
            "asked for byte for byte; the output is stored inline".into()
        },
    }
}

/// The call of `visible` a decision is about.
fn decided_call<'v>(
    visible: &'v [TimelineMessage],
    d: &RehydrationDecision,
) -> Option<&'v ToolPair> {
    visible
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .find(|c| Some(&c.tool_call_id) == d.tool_call_id.as_ref())
}

/// The raw outputs asked for, as units: only what the plan admitted (selection, privacy,
/// provider, byte budget) and the service could read; still subject to the token budget. (The
/// working set's go in place, see [`super::Aging`].) A request that names what it needs from
/// the output ("the EMEA-North rows") gets the header line and the lines that mention it, each
/// byte for byte.
/// The raw bytes of the working set's offloaded outputs the plan admitted, by tool call id: sent
/// in place of their previews. An admitted one whose bytes the service could not read is
/// refused, saying so.
pub(super) fn in_place<'r>(
    request: &'r AssemblyRequest,
    rehydrations: &mut [RehydrationDecision],
) -> BTreeMap<String, &'r str> {
    let mut in_place = BTreeMap::new();
    for d in rehydrations
        .iter_mut()
        .filter(|d| d.rehydrated && d.reason == WORKING_SET_REASON)
    {
        let raw = d
            .artifact_ref
            .as_ref()
            .and_then(|r| request.rehydrated.get(r));
        match (raw, &d.tool_call_id) {
            (Some(raw), Some(id)) => {
                in_place.insert(id.clone(), raw.as_str());
            }
            _ => {
                d.rehydrated = false;
                d.reason = "admitted, but the raw bytes could not be read from blob storage".into();
            }
        }
    }
    in_place
}

pub(super) fn raw_units(
    cx: &Cx<'_>,
    visible: &[TimelineMessage],
    rehydrations: &mut [RehydrationDecision],
) -> Vec<Unit> {
    let mut units = Vec::new();
    for d in rehydrations
        .iter_mut()
        .filter(|d| d.rehydrated && d.reason != WORKING_SET_REASON && d.reason != IN_HISTORY_REASON)
    {
        let pair = decided_call(visible, d);
        let raw = match (&d.artifact_ref, pair) {
            (Some(r), _) => cx.request.rehydrated.get(r).cloned(),
            (None, Some(c)) => c.output.clone(),
            (None, None) => None,
        };
        let (Some(raw), Some(c)) = (raw, pair) else {
            d.rehydrated = false;
            d.reason = "admitted, but the raw bytes could not be read from blob storage".into();
            continue;
        };
        units.push(raw_unit(cx, d, c, &raw));
    }
    units
}

fn raw_unit(cx: &Cx<'_>, d: &mut RehydrationDecision, c: &ToolPair, raw: &str) -> Unit {
    let focus = focus_words(cx.snapshot, cx.request, c);
    let (body, scope) = match focused_lines(raw, &focus) {
        Some((lines, kept, total)) => {
            d.reason.push_str(&format!(
                "; the {kept} of {total} lines that mention {}",
                focus.join(", ")
            ));
            (
                lines,
                format!(
                    "the header and the {kept} of {total} lines that mention {}",
                    focus.join(", ")
                ),
            )
        }
        None => (raw.to_owned(), "all of it".to_owned()),
    };
    let text = format!(
        "## Exact output of {} {}, byte for byte ({scope}; {} bytes in all{}), rehydrated as asked\n{}",
        c.name,
        truncate_chars(&c.args, 200),
        raw.len(),
        c.output_ref
            .as_deref()
            .map(|r| format!(", artifact {r}"))
            .unwrap_or_default(),
        body
    );
    let (message, raw_tokens) = data_message("tool output", text, cx.tokens);
    Unit {
        kind: "rehydrated_artifact",
        tier: Tier::P1,
        reason: format!("raw bytes asked for ({})", d.target),
        sources: c.result_event_id.iter().cloned().collect(),
        rendering: "raw",
        tokens: raw_tokens,
        messages: vec![message],
        protected: false,
        order: (2, u64::MAX, 0),
    }
}

/// A rehydration the token budget could not take is a refusal too.
pub(super) fn refuse_unselected(
    visible: &[TimelineMessage],
    selected: &[Unit],
    rehydrations: &mut [RehydrationDecision],
) {
    for d in rehydrations.iter_mut().filter(|d| d.rehydrated) {
        let result_id = decided_call(visible, d).and_then(|c| c.result_event_id.clone());
        let in_place = d.reason == WORKING_SET_REASON || d.reason == IN_HISTORY_REASON;
        let kept = selected.iter().any(|u| match result_id.as_ref() {
            Some(id) if in_place => u.sources.contains(id),
            id => u.kind == "rehydrated_artifact" && u.sources.first() == id,
        });
        if !kept {
            d.rehydrated = false;
            d.reason = "admitted, but it does not fit the token budget".into();
        }
    }
}
