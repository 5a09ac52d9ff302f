//! Auditable compaction: range selection, a pluggable [`Summarizer`] with a
//! deterministic default, and the [`CompressionCheck`] that decides whether a compaction may
//! stand in for its range.
//!
//! A compaction is cumulative: it summarises the branch from its first event up to a cut, merging
//! the previous compaction's record, so the latest successful compaction alone stands in for
//! everything before its `first_kept_event_id`. The raw log is never touched (invariant 8): a
//! compaction is one more derived event. A compaction whose check fails is recorded with status
//! `failed` and its reasons, and replaces nothing.

pub mod planner;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::event::Event;
use crate::memory::{Extractor, RuleExtractor, ToolObservation};
use crate::payload::{CompactionCompleted, Payload};
use crate::projection::truncate_chars;
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

/// Version of the default summarizer.
pub const SUMMARIZER_VERSION: &str = "strata.summarize/1";
/// Important tool results kept per compaction.
const MAX_TOOL_RESULTS: usize = 12;

/// Done and in-progress work.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub done: Vec<String>,
    pub in_progress: Vec<String>,
}

/// A tool result worth keeping, with where its full output is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultNote {
    pub tool: String,
    pub tool_call_id: String,
    pub summary: String,
    pub artifact_ref: Option<String>,
    pub event_id: String,
    /// The participant whose call it was, when the event named one: the assembler shows the
    /// summary to that participant only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_participant: Option<String>,
    /// The result's privacy class: the assembler withholds the summary from providers the
    /// class does not allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_class: Option<crate::payload::PrivacyClass>,
}

/// An error seen in the range, how often it was retried and whether it was resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorNote {
    pub tool: String,
    pub tool_call_id: String,
    pub message: String,
    pub attempts: u32,
    pub resolved: bool,
    pub event_id: String,
}

/// What a summarizer writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub goal: Option<String>,
    pub current_task: Option<String>,
    pub constraints: Vec<String>,
    pub progress: Progress,
    pub decisions: Vec<String>,
    pub files_read: Vec<String>,
    pub files_modified: Vec<String>,
    pub tool_results: Vec<ToolResultNote>,
    pub errors: Vec<ErrorNote>,
    pub open_questions: Vec<String>,
    pub next_steps: Vec<String>,
}

/// The checks a compaction must pass to stand in for its range.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompressionCheck {
    pub passed: bool,
    pub has_task: bool,
    pub has_next_steps: bool,
    /// Files modified in the range that the summary does not name.
    pub missing_modified_files: Vec<String>,
    /// Unresolved errors of the range the summary drops.
    pub dropped_unresolved_errors: Vec<String>,
    /// Tool calls whose request and result would fall on different sides of the cut, or that
    /// are still pending inside the range (invariant 2).
    pub split_tool_calls: Vec<String>,
    pub failures: Vec<String>,
}

/// Where a compaction's content comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub summarizer: String,
    /// The previous compaction merged into this one.
    pub previous_compaction_id: Option<String>,
    /// Raw events summarised for the first time by this compaction.
    pub source_event_ids: Vec<String>,
}

/// The compaction record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionRecord {
    pub compaction_id: String,
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    /// `completed` or `failed`.
    pub status: String,
    /// Summarised range, inclusive (invariant 3).
    pub first_event_id: String,
    pub last_event_id: String,
    pub first_seq: u64,
    pub last_seq: u64,
    /// The first event kept verbatim after the range.
    pub first_kept_event_id: String,
    pub first_kept_seq: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
    #[serde(flatten)]
    pub summary: Summary,
    pub provenance: Provenance,
    pub check: CompressionCheck,
}

/// A compaction's id: the same cut of the same history by the same summarizer is the same
/// compaction, however often it is asked for.
fn compaction_id(
    tenant: &str,
    session: &str,
    branch: &str,
    first_event_id: &str,
    first_kept_event_id: &str,
    summarizer: &str,
) -> String {
    let identity = format!(
        "{tenant}\n{session}\n{branch}\n{first_event_id}\n{first_kept_event_id}\n{summarizer}"
    );
    format!("cmp_{}", &crate::sha256_hex(identity.as_bytes())[..24])
}

impl CompactionRecord {
    /// The record of the same cut made for `branch`. A fork's history begins on its ancestors,
    /// so its events name their branches, not the fork; the record must name the branch whose
    /// assemblies it stands in for (and its id differs from the same cut made for the parent).
    pub fn on_branch(mut self, branch: &str) -> Self {
        self.branch_id = branch.to_owned();
        self.compaction_id = compaction_id(
            &self.tenant_id,
            &self.session_id,
            branch,
            &self.first_event_id,
            &self.first_kept_event_id,
            &self.provenance.summarizer,
        );
        self
    }

    /// Whether the compaction may stand in for its range.
    pub fn succeeded(&self) -> bool {
        self.status == "completed" && self.check.passed
    }

    /// The record as it travels on the log.
    pub fn to_payload(&self) -> CompactionCompleted {
        let mut extra = Map::new();
        extra.insert("status".into(), json!(self.status));
        extra.insert("check".into(), json!(self.check));
        CompactionCompleted {
            compaction_id: self.compaction_id.clone(),
            first_event_id: self.first_event_id.clone(),
            last_event_id: self.last_event_id.clone(),
            first_kept_event_id: self.first_kept_event_id.clone(),
            tokens_before: self.tokens_before,
            tokens_after: self.tokens_after,
            summary: serde_json::to_value(self).expect("record serializes"),
            extra,
        }
    }

    /// Reads a record back from a `CompactionCompleted` payload (its `summary` field).
    pub fn from_payload(p: &CompactionCompleted) -> Option<CompactionRecord> {
        serde_json::from_value(p.summary.clone()).ok()
    }

    /// The whole summary (for audit and the compression check).
    pub fn render(&self) -> String {
        self.render_visible(|_| None)
    }

    /// The summary as the assembler shows it in place of the range: a tool result note that
    /// `withheld` names a reason for is shown by its metadata only.
    pub fn render_visible(&self, withheld: impl Fn(&ToolResultNote) -> Option<String>) -> String {
        let s = &self.summary;
        let mut t = format!(
            "## Summary of events {}..{} (compaction {}, {} tokens → {})\n",
            self.first_event_id,
            self.last_event_id,
            self.compaction_id,
            self.tokens_before,
            self.tokens_after
        );
        if let Some(g) = &s.goal {
            t.push_str(&format!("Goal: {g}\n"));
        }
        if let Some(c) = &s.current_task {
            t.push_str(&format!("Current task: {c}\n"));
        }
        let mut list = |title: &str, v: &[String]| {
            if !v.is_empty() {
                t.push_str(&format!("{title}:\n"));
                for x in v {
                    t.push_str(&format!("- {x}\n"));
                }
            }
        };
        list("Constraints", &s.constraints);
        list("Done", &s.progress.done);
        list("In progress", &s.progress.in_progress);
        list("Decisions", &s.decisions);
        list("Files modified", &s.files_modified);
        list("Files read", &s.files_read);
        let results: Vec<String> = s
            .tool_results
            .iter()
            .map(|r| {
                let summary = match withheld(r) {
                    Some(why) => format!("[summary withheld: {why}]"),
                    None => r.summary.clone(),
                };
                format!(
                    "{} ({}): {}{}",
                    r.tool,
                    r.tool_call_id,
                    summary,
                    r.artifact_ref
                        .as_deref()
                        .map(|a| format!(" [full output: {a}]"))
                        .unwrap_or_default()
                )
            })
            .collect();
        list("Important tool results", &results);
        let errors: Vec<String> = s
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{} {} ({}, {} attempt{}): {}",
                    if e.resolved { "resolved" } else { "UNRESOLVED" },
                    e.tool,
                    e.tool_call_id,
                    e.attempts,
                    if e.attempts == 1 { "" } else { "s" },
                    e.message
                )
            })
            .collect();
        list("Errors and retries", &errors);
        list("Open questions", &s.open_questions);
        list("Next steps", &s.next_steps);
        t
    }
}

/// Writes the summary of a range. The default is [`DeterministicSummarizer`]; an LLM-backed one
/// can be plugged in, and its output is checked the same way.
pub trait Summarizer: std::fmt::Debug + Send + Sync {
    fn name(&self) -> &str;
    /// Summarises `range` (raw events, oldest first), merging `previous`.
    fn summarize(&self, range: &[&Event], previous: Option<&CompactionRecord>) -> Summary;
}

/// Rules over the events of the range and the previous record. No model, no network.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeterministicSummarizer;

fn push_unique(v: &mut Vec<String>, s: &str) {
    if !v.iter().any(|x| x == s) {
        v.push(s.to_owned());
    }
}

impl Summarizer for DeterministicSummarizer {
    fn name(&self) -> &str {
        SUMMARIZER_VERSION
    }

    fn summarize(&self, range: &[&Event], previous: Option<&CompactionRecord>) -> Summary {
        let mut s = previous.map(|p| p.summary.clone()).unwrap_or_default();
        // Errors that were open stay open until a success of the same tool.
        let mut calls: BTreeMap<String, (String, Value)> = BTreeMap::new();
        let mut callers: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut plan: Vec<String> = s.progress.in_progress.clone();
        let mut first_prompt: Option<String> = None;
        let mut last_prompt: Option<String> = None;
        for e in range {
            match &e.payload {
                Payload::UserPromptSubmitted(p) => {
                    first_prompt.get_or_insert_with(|| truncate_chars(&p.text, 200));
                    last_prompt = Some(truncate_chars(&p.text, 200));
                }
                Payload::StateUpdated(p) => {
                    if let Some(g) = &p.goal {
                        s.goal = Some(g.clone());
                    }
                    if let Some(t) = &p.current_task {
                        s.current_task = Some(t.clone());
                    }
                    if let Some(c) = &p.constraints {
                        s.constraints = c.clone();
                    }
                    if let Some(q) = &p.open_questions {
                        s.open_questions = q.clone();
                    }
                    if let Some(d) = &p.decisions {
                        for x in d {
                            push_unique(&mut s.decisions, x);
                        }
                    }
                    if let Some(pl) = &p.plan {
                        plan = pl.clone();
                    }
                }
                Payload::ModelResponseReceived(p) => {
                    for c in &p.tool_calls {
                        calls.insert(c.tool_call_id.clone(), (c.name.clone(), c.args.clone()));
                        callers.insert(c.tool_call_id.clone(), e.participant_id.clone());
                    }
                }
                Payload::ToolCallRequested(p) => {
                    calls
                        .entry(p.tool_call_id.clone())
                        .or_insert((p.name.clone(), p.args.clone()));
                    callers
                        .entry(p.tool_call_id.clone())
                        .or_insert(e.participant_id.clone());
                }
                Payload::FileRead(p) => push_unique(&mut s.files_read, &p.path),
                Payload::FileWritten(p) => {
                    push_unique(&mut s.files_modified, &p.path);
                    push_unique(&mut s.progress.done, &format!("modified {}", p.path));
                }
                Payload::DiffApplied(p) => {
                    push_unique(&mut s.files_modified, &p.path);
                    push_unique(&mut s.progress.done, &format!("patched {}", p.path));
                }
                Payload::VerifierFinished(p) => {
                    push_unique(&mut s.progress.done, &format!("{}: {}", p.check, p.result));
                }
                Payload::ToolCallFinished(p) => {
                    let Some((name, args)) = calls.get(&p.tool_call_id) else {
                        continue;
                    };
                    let output = p
                        .output
                        .as_deref()
                        .or(p.output_preview.as_deref())
                        .unwrap_or("");
                    // An error's text goes to every provider later: a protected output's is
                    // named, not quoted.
                    let protected = p
                        .privacy_class
                        .is_some_and(|c| c >= crate::payload::PrivacyClass::Confidential);
                    let error_text = if protected {
                        "error output withheld by privacy policy (see the result event)"
                    } else {
                        output
                    };
                    if p.is_error {
                        note_error(
                            &mut s.errors,
                            name,
                            &p.tool_call_id,
                            error_text,
                            &e.event_id,
                        );
                    } else {
                        for err in s.errors.iter_mut().filter(|x| &x.tool == name) {
                            err.resolved = true;
                        }
                    }
                    let obs = ToolObservation {
                        tool: name,
                        args,
                        output,
                        is_error: p.is_error,
                        output_ref: p.output_ref.as_deref(),
                        output_sha256: p.output_sha256.as_deref(),
                        output_bytes: p.output_bytes,
                    };
                    if let Some(x) = RuleExtractor.extract(&obs) {
                        let important = p.is_error
                            || p.output_ref.is_some()
                            || matches!(x.family, "test_runner" | "http");
                        if important {
                            s.tool_results.push(ToolResultNote {
                                tool: name.clone(),
                                tool_call_id: p.tool_call_id.clone(),
                                summary: x.text,
                                artifact_ref: p.output_ref.clone(),
                                event_id: e.event_id.clone(),
                                owner_participant: callers.get(&p.tool_call_id).cloned().flatten(),
                                privacy_class: p.privacy_class,
                            });
                        }
                    }
                }
                Payload::ToolCallFailed(p) => {
                    if let Some((name, _)) = calls.get(&p.tool_call_id) {
                        let name = name.clone();
                        note_error(&mut s.errors, &name, &p.tool_call_id, &p.error, &e.event_id);
                    }
                }
                _ => {}
            }
        }
        if s.tool_results.len() > MAX_TOOL_RESULTS {
            s.tool_results
                .drain(..s.tool_results.len() - MAX_TOOL_RESULTS);
        }
        if s.goal.is_none() {
            s.goal = first_prompt;
        }
        if s.current_task.is_none() {
            s.current_task = last_prompt;
        }
        s.progress.in_progress = plan.clone();
        let mut next: Vec<String> = Vec::new();
        for e in s.errors.iter().filter(|e| !e.resolved) {
            next.push(format!("resolve the {} error: {}", e.tool, e.message));
        }
        for p in &plan {
            push_unique(&mut next, p);
        }
        if next.is_empty() {
            if let Some(t) = &s.current_task {
                next.push(format!("continue: {t}"));
            }
        }
        s.next_steps = next;
        s
    }
}

fn note_error(errors: &mut Vec<ErrorNote>, tool: &str, call: &str, output: &str, event_id: &str) {
    let message = truncate_chars(&crate::projection::first_error_line(Some(output)), 160);
    if let Some(e) = errors.iter_mut().find(|e| e.tool == tool && !e.resolved) {
        e.attempts += 1;
        e.message = message;
        e.tool_call_id = call.to_owned();
        e.event_id = event_id.to_owned();
    } else {
        errors.push(ErrorNote {
            tool: tool.to_owned(),
            tool_call_id: call.to_owned(),
            message,
            attempts: 1,
            resolved: false,
            event_id: event_id.to_owned(),
        });
    }
}

/// Tokens an event costs in a transcript replay (what a compaction saves).
pub fn event_tokens(e: &Event, tokens: &dyn TokenCounter) -> u64 {
    let text = match &e.payload {
        Payload::UserPromptSubmitted(p) => p.text.clone(),
        Payload::ModelResponseReceived(p) => {
            let mut t = p.text.clone();
            for c in &p.tool_calls {
                t.push_str(&c.name);
                t.push_str(&c.args.to_string());
            }
            t
        }
        Payload::ToolCallFinished(p) => p
            .output
            .clone()
            .or_else(|| p.output_preview.clone())
            .unwrap_or_default(),
        Payload::ToolCallFailed(p) => p.error.clone(),
        Payload::DiffApplied(p) => p.diff.clone(),
        _ => e.payload.to_json().to_string(),
    };
    let measured = tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS;
    match &e.payload {
        Payload::ToolCallFinished(p) if p.output.is_none() => {
            measured.max(p.output_tokens.unwrap_or(0))
        }
        _ => measured,
    }
}

/// Where a compaction may cut a branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutRule {
    /// User turns kept verbatim after the cut.
    pub keep_turns: usize,
    /// When the kept turns hold more raw tokens than this (a long turn, the usual shape of
    /// agent work), the cut moves into the turn: only its newest steps that fit stay verbatim
    /// (at least [`MIN_KEPT_STEPS`]). `None`: whole turns only.
    pub keep_tokens: Option<u64>,
}

impl CutRule {
    /// Whole turns only: the last `keep_turns` stay verbatim, however long.
    pub fn turns(keep_turns: usize) -> Self {
        Self {
            keep_turns,
            keep_tokens: None,
        }
    }

    /// The last `keep_turns` turns, or fewer tokens of steps than `keep_fraction` of `budget`.
    pub fn for_budget(keep_turns: usize, keep_fraction: f64, budget: u64) -> Self {
        Self {
            keep_turns,
            keep_tokens: Some((budget as f64 * keep_fraction.clamp(0.0, 1.0)) as u64),
        }
    }
}

/// Steps a cut inside a turn keeps verbatim whatever their size: the working set the next
/// action continues from.
pub const MIN_KEPT_STEPS: usize = 4;

/// The cut of a branch: the index of the first event kept verbatim, so that the last
/// `keep_turns` user turns stay raw — or, when they are longer than `keep_tokens`, the newest
/// steps that fit — and no tool call is separated from its result (a call whose result is not
/// before the cut moves the cut back to its request). `None` when nothing before `floor` (the
/// previous compaction's cut) would be summarised.
pub fn choose_cut(
    events: &[&Event],
    rule: CutRule,
    floor: usize,
    tokens: &dyn TokenCounter,
) -> Option<usize> {
    let by_turns = turn_cut(events, rule.keep_turns);
    let by_steps = rule.keep_tokens.and_then(|k| step_cut(events, k, tokens));
    let mut cut = by_turns.max(by_steps)?;
    loop {
        let split = split_calls(events, cut);
        let Some(earliest) = split.iter().map(|(_, req)| *req).min() else {
            break;
        };
        cut = earliest;
    }
    (cut > floor).then_some(cut)
}

/// The start of the last `keep_turns` user turns (the end with none kept).
fn turn_cut(events: &[&Event], keep_turns: usize) -> Option<usize> {
    let prompts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.payload, Payload::UserPromptSubmitted(_)))
        .map(|(i, _)| i)
        .collect();
    if prompts.len() <= keep_turns {
        return None;
    }
    Some(match keep_turns {
        0 => events.len(),
        n => prompts[prompts.len() - n],
    })
}

/// The start of the oldest step (a model response and what follows it) among the newest ones
/// whose raw tokens fit in `keep_tokens`, keeping at least [`MIN_KEPT_STEPS`]. `None` when that
/// keeps every step.
fn step_cut(events: &[&Event], keep_tokens: u64, tokens: &dyn TokenCounter) -> Option<usize> {
    let is_step = |e: &Event| matches!(e.payload, Payload::ModelResponseReceived(_));
    let mut kept_tokens = 0u64;
    let mut kept_steps = 0;
    let mut cut = None;
    for (i, e) in events.iter().enumerate().rev() {
        kept_tokens += event_tokens(e, tokens);
        if !is_step(e) {
            continue;
        }
        if kept_steps >= MIN_KEPT_STEPS && kept_tokens > keep_tokens {
            break;
        }
        kept_steps += 1;
        cut = Some(i);
    }
    cut.filter(|&c| events[..c].iter().any(|e| is_step(e)))
}

/// Calls that `cut` would split: requested before it with no result before it, or answered
/// before it but requested at or after it. Returns (call id, request index).
fn split_calls(events: &[&Event], cut: usize) -> Vec<(String, usize)> {
    let mut requested: BTreeMap<&str, usize> = BTreeMap::new();
    let mut answered: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match &e.payload {
            Payload::ModelResponseReceived(p) => {
                for c in &p.tool_calls {
                    requested.entry(&c.tool_call_id).or_insert(i);
                }
            }
            Payload::ToolCallRequested(p) => {
                requested.entry(&p.tool_call_id).or_insert(i);
            }
            Payload::ToolCallFinished(p) => {
                answered.insert(&p.tool_call_id, i);
            }
            Payload::ToolCallFailed(p) => {
                answered.insert(&p.tool_call_id, i);
            }
            Payload::ApprovalDenied(p) => {
                if let Some(id) = &p.tool_call_id {
                    answered.insert(id, i);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (id, &req) in &requested {
        let res = answered.get(id).copied();
        let req_in = req < cut;
        let res_in = res.is_some_and(|r| r < cut);
        if req_in != res_in {
            out.push(((*id).to_owned(), req));
        }
    }
    out.sort();
    out
}

/// Checks `summary` against the events it replaces: the task and next steps are there, every
/// file modified in the range is named, no unresolved error is dropped and no tool pair is split.
pub fn check(
    events: &[&Event],
    cut: usize,
    range_start: usize,
    summary: &Summary,
) -> CompressionCheck {
    let range = &events[range_start..cut];
    let mut c = CompressionCheck {
        has_task: summary
            .goal
            .as_deref()
            .is_some_and(|g| !g.trim().is_empty())
            || summary
                .current_task
                .as_deref()
                .is_some_and(|g| !g.trim().is_empty()),
        has_next_steps: !summary.next_steps.is_empty(),
        ..Default::default()
    };
    let mut modified = BTreeSet::new();
    // Ground truth of unresolved errors at the cut, computed from the events, not the summary.
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    let mut open_errors: BTreeMap<String, String> = BTreeMap::new(); // tool → call id
    for e in &events[..cut] {
        match &e.payload {
            Payload::ModelResponseReceived(p) => {
                for x in &p.tool_calls {
                    names.insert(&x.tool_call_id, &x.name);
                }
            }
            Payload::ToolCallRequested(p) => {
                names.insert(&p.tool_call_id, &p.name);
            }
            Payload::ToolCallFinished(p) => {
                if let Some(n) = names.get(p.tool_call_id.as_str()) {
                    if p.is_error {
                        open_errors.insert((*n).to_owned(), p.tool_call_id.clone());
                    } else {
                        open_errors.remove(*n);
                    }
                }
            }
            Payload::ToolCallFailed(p) => {
                if let Some(n) = names.get(p.tool_call_id.as_str()) {
                    open_errors.insert((*n).to_owned(), p.tool_call_id.clone());
                }
            }
            _ => {}
        }
    }
    for e in range {
        if let Payload::FileWritten(p) = &e.payload {
            modified.insert(p.path.clone());
        }
        if let Payload::DiffApplied(p) = &e.payload {
            modified.insert(p.path.clone());
        }
    }
    c.missing_modified_files = modified
        .into_iter()
        .filter(|p| !summary.files_modified.contains(p))
        .collect();
    c.dropped_unresolved_errors = open_errors
        .iter()
        .filter(|(tool, _)| {
            !summary
                .errors
                .iter()
                .any(|e| &e.tool == *tool && !e.resolved)
        })
        .map(|(tool, call)| format!("{tool} ({call})"))
        .collect();
    c.split_tool_calls = split_calls(events, cut)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    if !c.has_task {
        c.failures
            .push("the summary lacks the goal and current task".into());
    }
    if !c.has_next_steps {
        c.failures.push("the summary lacks next steps".into());
    }
    if !c.missing_modified_files.is_empty() {
        c.failures.push(format!(
            "modified files missing from the summary: {}",
            c.missing_modified_files.join(", ")
        ));
    }
    if !c.dropped_unresolved_errors.is_empty() {
        c.failures.push(format!(
            "unresolved errors dropped: {}",
            c.dropped_unresolved_errors.join(", ")
        ));
    }
    if !c.split_tool_calls.is_empty() {
        c.failures.push(format!(
            "the cut splits tool calls from their results: {}",
            c.split_tool_calls.join(", ")
        ));
    }
    c.passed = c.failures.is_empty();
    c
}

/// Compacts a branch's raw events (oldest first; derived events are skipped) at the automatic
/// cut. `None` when there is nothing new to summarise.
pub fn compact(
    events: &[Event],
    previous: Option<&CompactionRecord>,
    rule: CutRule,
    summarizer: &dyn Summarizer,
    tokens: &dyn TokenCounter,
) -> Option<CompactionRecord> {
    let raw: Vec<&Event> = events.iter().filter(|e| !e.is_derived()).collect();
    let floor = floor_of(&raw, previous);
    let cut = choose_cut(&raw, rule, floor, tokens)?;
    Some(compact_at(&raw, cut, previous, summarizer, tokens))
}

fn floor_of(raw: &[&Event], previous: Option<&CompactionRecord>) -> usize {
    previous
        .and_then(|p| raw.iter().position(|e| e.event_id == p.first_kept_event_id))
        .unwrap_or(0)
}

/// Compacts `raw` (raw events only) up to `cut` exclusive, whatever the check says; the record's
/// status tells. Exposed so that a cut chosen elsewhere (or a faulty one) is checked the same way.
pub fn compact_at(
    raw: &[&Event],
    cut: usize,
    previous: Option<&CompactionRecord>,
    summarizer: &dyn Summarizer,
    tokens: &dyn TokenCounter,
) -> CompactionRecord {
    let cut = cut.min(raw.len());
    let floor = floor_of(raw, previous).min(cut);
    let new_range = &raw[floor..cut];
    let summary = summarizer.summarize(new_range, previous);
    let check = check(raw, cut, floor, &summary);
    let first = raw.first();
    let last = cut.checked_sub(1).and_then(|i| raw.get(i));
    let kept = raw.get(cut);
    let seq = |e: Option<&&Event>| e.and_then(|e| e.seq).unwrap_or(0);
    let id_of = |e: Option<&&Event>| e.map(|e| e.event_id.clone()).unwrap_or_default();
    let tokens_before = previous.map(|p| p.tokens_before).unwrap_or_else(|| {
        raw[..floor]
            .iter()
            .map(|e| event_tokens(e, tokens))
            .sum::<u64>()
    }) + new_range
        .iter()
        .map(|e| event_tokens(e, tokens))
        .sum::<u64>();
    let first_event_id = previous
        .map(|p| p.first_event_id.clone())
        .unwrap_or_else(|| id_of(first));
    let mut record = CompactionRecord {
        compaction_id: compaction_id(
            first.map(|e| e.tenant_id.as_str()).unwrap_or(""),
            first.map(|e| e.session_id.as_str()).unwrap_or(""),
            first.map(|e| e.branch_id.as_str()).unwrap_or(""),
            &first_event_id,
            &id_of(kept),
            summarizer.name(),
        ),
        tenant_id: first.map(|e| e.tenant_id.clone()).unwrap_or_default(),
        session_id: first.map(|e| e.session_id.clone()).unwrap_or_default(),
        branch_id: first.map(|e| e.branch_id.clone()).unwrap_or_default(),
        status: if check.passed { "completed" } else { "failed" }.into(),
        first_event_id,
        last_event_id: id_of(last),
        first_seq: previous.map(|p| p.first_seq).unwrap_or_else(|| seq(first)),
        last_seq: seq(last),
        first_kept_event_id: id_of(kept),
        first_kept_seq: seq(kept),
        tokens_before,
        tokens_after: 0,
        summary,
        provenance: Provenance {
            summarizer: summarizer.name().to_owned(),
            previous_compaction_id: previous.map(|p| p.compaction_id.clone()),
            source_event_ids: new_range.iter().map(|e| e.event_id.clone()).collect(),
        },
        check,
    };
    record.tokens_after = tokens.count(&record.render()) + MESSAGE_OVERHEAD_TOKENS;
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::O200k;

    fn ev(i: usize, ty: &str, payload: Value) -> Event {
        Event::from_json(
            json!({"event_id": format!("e{i:03}"), "tenant_id": "t", "session_id": "s",
                "seq": i as u64 + 1, "timestamp": "2026-06-03T10:00:00Z", "type": ty,
                "payload": payload}),
            None,
        )
        .unwrap()
    }

    /// Three turns: read + failing test, write + still failing, pending call.
    fn session() -> Vec<Event> {
        let mut v = Vec::new();
        let mut push = |ty: &str, p: Value| {
            let i = v.len();
            v.push(ev(i, ty, p));
        };
        push(
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "Fix the failing parser test"}),
        );
        push(
            "StateUpdated",
            json!({"goal": "make parser tests pass", "constraints": ["do not touch the public API"], "plan": ["fix tokenizer", "run tests"]}),
        );
        push(
            "ModelResponseReceived",
            json!({"message_id": "a1", "text": "", "tool_calls": [{"tool_call_id": "c1", "name": "bash", "args": {"command": "cargo test"}}]}),
        );
        push(
            "ToolCallFinished",
            json!({"tool_call_id": "c1", "output": "test p::t ... FAILED\ntest result: FAILED. 3 passed; 1 failed", "is_error": true}),
        );
        push(
            "UserPromptSubmitted",
            json!({"message_id": "u2", "text": "go on"}),
        );
        push("FileWritten", json!({"path": "src/tok.rs"}));
        push(
            "ModelResponseReceived",
            json!({"message_id": "a2", "text": "", "tool_calls": [{"tool_call_id": "c2", "name": "bash", "args": {"command": "cargo test"}}]}),
        );
        push(
            "ToolCallFinished",
            json!({"tool_call_id": "c2", "output": "error: expected `;` at src/tok.rs:3:1", "is_error": true}),
        );
        push(
            "UserPromptSubmitted",
            json!({"message_id": "u3", "text": "try again"}),
        );
        push(
            "ModelResponseReceived",
            json!({"message_id": "a3", "text": "", "tool_calls": [{"tool_call_id": "c3", "name": "read_file", "args": {"path": "src/tok.rs"}}]}),
        );
        v
    }

    #[test]
    fn deterministic_compaction_keeps_what_matters_and_passes() {
        let events = session();
        let r = compact(
            &events,
            None,
            CutRule::turns(1),
            &DeterministicSummarizer,
            &O200k,
        )
        .unwrap();
        assert!(r.succeeded(), "{:?}", r.check);
        assert_eq!(r.first_event_id, "e000");
        assert_eq!(r.first_kept_event_id, "e008");
        assert_eq!(r.summary.goal.as_deref(), Some("make parser tests pass"));
        assert_eq!(r.summary.constraints, vec!["do not touch the public API"]);
        assert_eq!(r.summary.files_modified, vec!["src/tok.rs"]);
        let open: Vec<&ErrorNote> = r.summary.errors.iter().filter(|e| !e.resolved).collect();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].attempts, 2);
        assert!(r.summary.next_steps[0].starts_with("resolve the bash error"));
        // Same input, same record.
        assert_eq!(
            r,
            compact(
                &events,
                None,
                CutRule::turns(1),
                &DeterministicSummarizer,
                &O200k
            )
            .unwrap()
        );
        let text = r.render();
        assert!(text.contains("src/tok.rs") && text.contains("UNRESOLVED"));
        // It round-trips through the payload.
        assert_eq!(CompactionRecord::from_payload(&r.to_payload()).unwrap(), r);
    }

    #[test]
    fn the_cut_never_splits_a_pair_nor_swallows_a_pending_call() {
        let events = session();
        let raw: Vec<&Event> = events.iter().collect();
        // Keeping zero turns would cut after the pending call c3: moved back to its request.
        let cut = choose_cut(&raw, CutRule::turns(0), 0, &O200k).unwrap();
        assert_eq!(raw[cut].event_id, "e009");
        // A cut between c2's request and result fails, and says why.
        let r = compact_at(&raw, 7, None, &DeterministicSummarizer, &O200k);
        assert!(!r.succeeded());
        assert_eq!(r.status, "failed");
        assert_eq!(r.check.split_tool_calls, vec!["c2"]);
    }

    /// One task, then `steps` tool calls with large outputs, a failing test and its fix, and a
    /// pending call at the end: the shape of real agent work.
    fn long_turn(steps: usize) -> Vec<Event> {
        let mut v = Vec::new();
        let mut push = |ty: &str, p: Value| {
            let i = v.len();
            v.push(ev(i, ty, p));
        };
        push(
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "Make the parser accept trailing commas"}),
        );
        for n in 0..steps {
            let call = format!("c{n}");
            let command = if n % 10 == 3 {
                "cargo test"
            } else {
                "cat src/parser.rs"
            };
            push(
                "ModelResponseReceived",
                json!({"message_id": format!("a{n}"), "text": "",
                    "tool_calls": [{"tool_call_id": call, "name": "bash", "args": {"command": command}}]}),
            );
            if n + 1 == steps {
                break; // pending
            }
            let failing = n == 13;
            let output = if failing {
                "test parser::trailing ... FAILED\nassertion failed: ok".to_owned()
            } else {
                format!("fn parse_{n}() {{}}\n").repeat(120)
            };
            push(
                "ToolCallFinished",
                json!({"tool_call_id": call, "output": output, "is_error": failing}),
            );
            if n == 20 {
                push("FileWritten", json!({"path": "src/parser.rs"}));
            }
        }
        v
    }

    #[test]
    fn a_long_turn_is_cut_inside_keeping_its_newest_steps_and_its_pending_call() {
        let events = long_turn(60);
        let raw: Vec<&Event> = events.iter().collect();
        // Whole turns only: one turn, nothing to compact.
        assert!(choose_cut(&raw, CutRule::turns(1), 0, &O200k).is_none());
        let rule = CutRule {
            keep_turns: 1,
            keep_tokens: Some(8_000),
        };
        let r = compact(&events, None, rule, &DeterministicSummarizer, &O200k).unwrap();
        assert!(r.succeeded(), "{:?}", r.check);
        let cut = raw
            .iter()
            .position(|e| e.event_id == r.first_kept_event_id)
            .unwrap();
        assert!(
            matches!(raw[cut].payload, Payload::ModelResponseReceived(_)),
            "a cut inside a turn falls at a step"
        );
        let kept: u64 = raw[cut..].iter().map(|e| event_tokens(e, &O200k)).sum();
        let steps = raw[cut..]
            .iter()
            .filter(|e| matches!(e.payload, Payload::ModelResponseReceived(_)))
            .count();
        assert!(
            kept <= 8_000 && steps >= MIN_KEPT_STEPS,
            "{kept} tokens, {steps} steps"
        );
        assert!(
            steps < 60 / 2,
            "most of the turn is summarised: {steps} kept"
        );
        // The edit and the resolved failure are in the record; the pending call is after it.
        assert_eq!(r.summary.files_modified, vec!["src/parser.rs"]);
        assert_eq!(r.summary.errors.len(), 1);
        assert!(r.summary.errors[0].resolved);
        assert_eq!(
            r.summary.current_task.as_deref(),
            Some("Make the parser accept trailing commas")
        );
        assert!(r.check.split_tool_calls.is_empty());
        // A small budget still keeps the working set.
        let tiny = CutRule {
            keep_turns: 1,
            keep_tokens: Some(1),
        };
        let cut = choose_cut(&raw, tiny, 0, &O200k).unwrap();
        let steps = raw[cut..]
            .iter()
            .filter(|e| matches!(e.payload, Payload::ModelResponseReceived(_)))
            .count();
        assert_eq!(steps, MIN_KEPT_STEPS);
    }

    #[test]
    fn the_planner_compacts_a_single_long_turn_and_again_as_it_grows() {
        let mut events = vec![ev(
            0,
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 40_000,
                "reserved_output_tokens": 4_000}),
        )];
        for mut e in long_turn(300) {
            e.seq = Some(e.seq.unwrap() + 1);
            e.event_id = format!("x{}", e.event_id);
            events.push(e);
        }
        let mut planner = planner::Planner::new(planner::CompactorOptions::default());
        let records: Vec<CompactionRecord> =
            events.iter().filter_map(|e| planner.observe(e)).collect();
        assert!(records.len() >= 2, "{} compactions", records.len());
        for (i, r) in records.iter().enumerate() {
            assert!(r.succeeded(), "{:?}", r.check);
            if i > 0 {
                assert_eq!(
                    r.provenance.previous_compaction_id.as_deref(),
                    Some(records[i - 1].compaction_id.as_str())
                );
            }
        }
    }

    /// A session of one long turn, under session id `session`.
    fn long_session(session: &str, steps: usize) -> Vec<Event> {
        let mut events = vec![ev(
            0,
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 40_000,
                "reserved_output_tokens": 4_000}),
        )];
        for mut e in long_turn(steps) {
            e.seq = Some(e.seq.unwrap() + 1);
            e.event_id = format!("x{}", e.event_id);
            events.push(e);
        }
        for e in &mut events {
            e.session_id = session.into();
        }
        events
    }

    /// What the projections would answer for `wanted`, given the session's events and the
    /// compactions recorded so far.
    fn read_back(
        wanted: &planner::HistoryWanted,
        events: &[Event],
        records: &[CompactionRecord],
    ) -> planner::Restored {
        let previous = match wanted.after_seq {
            None => records.last().cloned(),
            Some(_) => None,
        };
        let after = wanted
            .after_seq
            .or_else(|| previous.as_ref().map(|p| p.first_kept_seq - 1))
            .unwrap_or(0);
        planner::Restored {
            budget: wanted
                .after_seq
                .is_none()
                .then(|| planner::budget_of(events)),
            previous,
            events: events
                .iter()
                .filter(|e| (after + 1..=wanted.through_seq).contains(&e.seq.unwrap()))
                .cloned()
                .collect(),
        }
    }

    #[test]
    fn an_evicted_session_restored_from_its_history_compacts_as_if_it_had_been_held() {
        let (a, b) = (long_session("a", 300), long_session("b", 300));
        let mut alone = planner::Planner::new(planner::CompactorOptions::default());
        let want: Vec<String> = a
            .iter()
            .filter_map(|e| alone.observe(e))
            .map(|r| r.compaction_id)
            .collect();
        assert!(want.len() >= 2);

        // One session held at a time: every switch evicts the other.
        let mut planner = planner::Planner::new(planner::CompactorOptions::default()).with_limits(
            planner::PlannerLimits {
                sessions: 1,
                ..Default::default()
            },
        );
        let mut records: std::collections::BTreeMap<&str, Vec<CompactionRecord>> =
            Default::default();
        let mut restores = 0;
        for (ea, eb) in a.iter().zip(&b) {
            for (e, all) in [(ea, &a), (eb, &b)] {
                let done = records.entry(e.session_id.as_str()).or_default();
                if let Some(w) = planner.history_wanted(e) {
                    restores += 1;
                    planner.restore(&w, read_back(&w, all, done));
                }
                if let Some(r) = planner.observe(e) {
                    done.push(r);
                }
            }
        }
        assert!(restores > 500, "{restores} restores");
        assert!(planner.evicted() > 500);
        let got: Vec<String> = records["a"]
            .iter()
            .map(|r| r.compaction_id.clone())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_session_whose_compactions_fail_holds_at_most_its_limit_of_events() {
        let events = long_session("s", 400);
        let failing = Forgetful(|s| s.next_steps.clear());
        let mut planner = planner::Planner::with_summarizer(
            planner::CompactorOptions::default(),
            Box::new(failing),
        )
        .with_limits(planner::PlannerLimits {
            session_events: 50,
            ..Default::default()
        });
        let mut failed = 0;
        for e in &events {
            assert_eq!(
                planner.history_wanted(e),
                None,
                "nothing to read back while failing"
            );
            failed += planner
                .observe(e)
                .filter(|r| !r.succeeded())
                .map_or(0, |_| 1);
        }
        assert!(failed >= 1);
        let most = events
            .iter()
            .take(50)
            .map(|e| event_tokens(e, &O200k) * 4 + 512)
            .sum::<u64>();
        assert!(
            planner.held_bytes() as u64 <= most,
            "{} > {most}",
            planner.held_bytes()
        );
    }

    #[derive(Debug)]
    struct Forgetful(fn(&mut Summary));
    impl Summarizer for Forgetful {
        fn name(&self) -> &str {
            "forgetful/1"
        }
        fn summarize(&self, range: &[&Event], previous: Option<&CompactionRecord>) -> Summary {
            let mut s = DeterministicSummarizer.summarize(range, previous);
            (self.0)(&mut s);
            s
        }
    }

    #[test]
    fn a_summary_that_drops_must_keep_facts_fails() {
        let events = session();
        type Drop = fn(&mut Summary);
        let cases: [(Drop, &str); 4] = [
            (
                |s| {
                    s.goal = None;
                    s.current_task = None;
                },
                "lacks the goal",
            ),
            (|s| s.next_steps.clear(), "lacks next steps"),
            (|s| s.files_modified.clear(), "modified files missing"),
            (|s| s.errors.clear(), "unresolved errors dropped"),
        ];
        for (f, why) in cases {
            let r = compact(&events, None, CutRule::turns(1), &Forgetful(f), &O200k).unwrap();
            assert!(!r.succeeded());
            assert!(
                r.check.failures.iter().any(|x| x.contains(why)),
                "{why}: {:?}",
                r.check
            );
        }
    }

    #[test]
    fn a_second_compaction_merges_the_first() {
        let mut events = session();
        events.push(ev(
            10,
            "ToolCallFinished",
            json!({"tool_call_id": "c3", "output": "fn tok() {}"}),
        ));
        events.push(ev(
            11,
            "UserPromptSubmitted",
            json!({"message_id": "u4", "text": "and now?"}),
        ));
        let first = compact(
            &events[..10],
            None,
            CutRule::turns(1),
            &DeterministicSummarizer,
            &O200k,
        )
        .unwrap();
        let second = compact(
            &events,
            Some(&first),
            CutRule::turns(1),
            &DeterministicSummarizer,
            &O200k,
        )
        .unwrap();
        assert!(second.succeeded(), "{:?}", second.check);
        assert_eq!(second.first_event_id, "e000");
        assert_eq!(second.first_kept_event_id, "e011");
        assert_eq!(
            second.provenance.previous_compaction_id.as_deref(),
            Some(first.compaction_id.as_str())
        );
        assert_eq!(second.summary.files_modified, vec!["src/tok.rs"]);
        assert!(
            second.summary.files_read.is_empty()
                || second.summary.files_read.contains(&"src/tok.rs".to_owned())
        );
        assert!(compact(
            &events,
            Some(&second),
            CutRule::turns(1),
            &DeterministicSummarizer,
            &O200k
        )
        .is_none());
    }
}
